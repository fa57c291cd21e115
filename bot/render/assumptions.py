"""How a budget's assumed settings are said: the line per setting and the JSON reasons.

Apart from `bot.render.budget` so that a triage report, which shows the budget's assumptions,
does not load the budget page's renderer and what it reads (the safe-flags solver, the outcome
types of every verb).
"""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from runbooks.model.budget import Budget


def flag_value(value: Any) -> str:
    """A flag value as it is typed on a command line."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return str(value).lower()
    return f"{value:g}" if isinstance(value, float) else str(value)


def assumption_reasons(b: Budget) -> dict[str, Any]:
    """Each default a budget assumed, for the JSON: {name: {value, why (the reason id), params}}."""
    return {name: {"value": a.value, "why": a.why, "params": dict(a.params)} for name, a in b.assumptions}


def assumed_line(cat: Catalog, name: str, a: Any, with_name: bool = True) -> str:
    """A setting the budget assumed (`runbooks.model.budget.Assumed`) and why, in words:
    "max_num_seqs = 1024 (vLLM V1 API server default on >= 70 GiB non-A100 GPUs)"; without the
    name, the value and why alone."""
    why = cat.t(f"budget_why.{a.why}", dict(a.params))
    value = cat.t("budget_cli.assumed_value", value=flag_value(a.value), why=why)
    return cat.t("budget_cli.assumed_line", name=name, value=value) if with_name else value
