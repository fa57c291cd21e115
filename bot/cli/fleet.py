"""`gpumem fleet`: the services closest to trouble, fleet-wide, with what to run next.

Exit codes: 0 no service at a runbook line; 1 at least one at or past one; 2 bad usage (no
Prometheus, a bad URL or config); 3 no query answered.
"""

from __future__ import annotations

import json
import sys

from bot.cli.guard import live_guard
from bot.grammar.requests import FleetRequest
from bot.render import fleet as render
from bot.service.deps import Deps
from bot.service.exits import EXIT_CAUSE, EXIT_NO_EVIDENCE, EXIT_OK
from bot.service.fleet import run_fleet

# UsageError(code) is worded by `bot.main` from `fleet_cli.error.<code>`
# (the catalog section is the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: FleetRequest, lang: str, deps: Deps) -> int:
    with live_guard(lang) as guard:
        outcome = run_fleet(request, deps)
        if request.json:
            json.dump(render.fleet_json(outcome, lang), sys.stdout, ensure_ascii=False, indent=2)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render.fleet_text(outcome, lang))
        if outcome.nothing_read:
            return EXIT_NO_EVIDENCE
        return EXIT_CAUSE if any(row.at_line for row in outcome.rows) else EXIT_OK
    return guard.exit_code
