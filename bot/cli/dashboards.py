"""`gpumem dashboards`: the runbook's Grafana dashboards per engine, listed or as Grafana's JSON
(see `bot.service.dashboards`).

Exit codes: 0 written; 2 bad usage (an unknown engine).
"""

from __future__ import annotations

import sys

from bot.grammar.requests import DashboardsRequest
from bot.render import dashboards as render
from bot.service.dashboards import dashboards
from bot.service.deps import Deps

# an unknown engine raises UsageError("unknown_engine"); `bot.main` words it from
# `dashboards.error.<code>` (the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: DashboardsRequest, lang: str, deps: Deps) -> int:
    outcome = dashboards(request.engine)
    if request.json:
        sys.stdout.write(render.json_text(render.dashboards_json(outcome, lang)))
    else:
        sys.stdout.write(render.dashboards_text(outcome, lang))
    return 0
