"""`gpumem budget`: the capacity budget of one launch, printed (see `bot.service.budget`).

Exit codes: 0 the engine starts and fits; 1 it would not start (or the plan cannot serve the
profile); 2 bad usage, unknown names, or a flag combination the engine cannot run at all.
"""

from __future__ import annotations

import json
import sys

from bot.grammar.requests import BudgetRequest
from bot.render import budget as render
from bot.service.budget import run_budget
from bot.service.deps import Deps
from runbooks.model.errors import UsageError

# bad input raises UsageError(code, **params); `bot.main` words it from `budget_cli.error.<code>`
# (the catalog section is the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: BudgetRequest, lang: str, deps: Deps) -> int:
    try:
        outcome = run_budget(request, deps)
    except UsageError as e:
        raise render.worded_error(e, lang) from None
    if request.json:
        json.dump(render.page_json(outcome.page, lang), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.page_text(outcome.page, lang))
    return outcome.exit_code
