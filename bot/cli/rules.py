"""`gpumem rules`: the runbook's alerts as Prometheus rules, printed (see `bot.service.rules`).

Exit codes: 0 written; 2 bad usage (an unknown engine, a bad label name, flags that clash).
"""

from __future__ import annotations

import json
import sys

from bot.grammar.requests import RulesRequest
from bot.render import rules as render
from bot.service.deps import Deps
from bot.service.rules import run_rules

# clashing flags raise UsageError(code, **params); `bot.main` words it from `rules_cli.error.<code>`
# (the catalog section is the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: RulesRequest, lang: str, deps: Deps) -> int:
    outcome = run_rules(request, deps)
    if request.json:
        json.dump(render.rules_json(outcome, lang), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.rules_yaml(outcome, lang))
    return 0
