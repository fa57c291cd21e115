"""`gpumem dashboards`: the runbook's Grafana dashboards per engine, listed or as Grafana's JSON
(see `bot.service.dashboards`).

Exit codes: 0 written; 2 bad usage (an unknown engine).
"""

from __future__ import annotations

import argparse
import sys

#: an unknown engine raises UsageError("unknown_engine"); `bot.main` words it from here
ERROR_KEYS = "dashboards.error"


def run(args: argparse.Namespace, lang: str) -> int:
    from bot.render import dashboards as render
    from bot.service.dashboards import dashboards

    outcome = dashboards(args.engine)
    if args.json:
        sys.stdout.write(render.json_text(render.dashboards_json(outcome, lang)))
    else:
        sys.stdout.write(render.dashboards_text(outcome, lang))
    return 0
