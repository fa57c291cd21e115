"""The one wording of a `runbooks.model.errors.GpumemError`, shared by every surface.

`error_line` words an error the same way everywhere: the CLI prints it (`bot.main.fail`) and
Slack ends the job with it (`bot.slack.work`), so a workload that does not exist reads alike in a
terminal and in a channel.
"""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from bot.render.managers import refusal_line
from runbooks.model.errors import (
    EvidenceUnavailable,
    GpumemError,
    ManagedElsewhere,
    NotPermitted,
    PartlyApplied,
    PlanMoved,
    StaleObject,
    TargetNotFound,
    TemporaryError,
)


def error_line(cat: Catalog, error: GpumemError) -> str:
    """One line for a person about an error that stopped the work, by what it means.

    A workload that does not exist, a missing RBAC permission (named), an object changed
    under us, a server that cannot answer now (with the delay), nothing to read; any other
    error by its code and params, which carry nothing secret.

    >>> line = error_line(Catalog.load("en"), TargetNotFound("Deployment", "llm", "nope", "prod"))
    >>> line.split(". ")[0]
    'gpumem: Deployment llm/nope not found in context prod'
    """
    if isinstance(error, ManagedElsewhere):  # who manages it, nothing written, what to do

        return refusal_line(cat, error.code, error.params)
    if isinstance(error, TargetNotFound):
        if error.code == TargetNotFound.NO_SOURCE:
            return cat.t("live.not_found", detail=str(error).rstrip("."))
        p = error.params
        where = "live.target_missing_in" if p.get("context") else "live.target_missing"
        return cat.t("live.not_found", detail=cat.t(where, kind=p.get("kind"), namespace=p.get("namespace"),
                                                    name=p.get("name"), context=p.get("context")))
    if isinstance(error, NotPermitted):
        return cat.t("live.forbidden", permission=error.rbac)
    if isinstance(error, (StaleObject, PlanMoved, PartlyApplied)):  # what changed under us: plan again
        return cat.t("live.conflict")
    if isinstance(error, TemporaryError):
        return cat.t("live.temporary", seconds=error.delay_s)
    if isinstance(error, EvidenceUnavailable):
        return cat.t("live.unavailable", detail=error.params.get("detail") or error.code)
    if cat.has(f"live.{error.code}"):  # a code with wording of its own (bundle_folder_not_empty, ...)
        return cat.t(f"live.{error.code}", error.params)
    return cat.t("live.error", detail=str(error))


def verb_error_line(cat: Catalog, error: GpumemError, keys: str | None) -> str:
    """`<keys>.<code>` from the catalog when the verb words that code itself (`keys` is the verb's
    `error_keys` in `bot.verbs.VERBS`), else the wording every surface shares (`error_line`).

    >>> from runbooks.model.errors import UsageError
    >>> verb_error_line(Catalog.load("en"), UsageError("empty_note"), "handover.error")
    'gpumem note: the note is empty.'
    """
    key = f"{keys}.{error.code}" if keys else None
    return cat.t(key, plan_states(cat, error.params)) if key and cat.has(key) else error_line(cat, error)


def plan_states(cat: Catalog, params: dict[str, Any]) -> dict[str, Any]:
    """An error's values with the plan states it names (`state`, `wanted`: "rolled_back") worded
    as the plan's state reads (`remediate_cli.state`: "rolled back", "已回滚").

    >>> plan_states(Catalog.load("en"), {"plan": "p-1", "state": "rolled_back", "wanted": "applying"})
    {'plan': 'p-1', 'state': 'rolled back', 'wanted': 'applying'}
    """
    out = dict(params)
    for name in ("state", "wanted"):
        value = out.get(name)
        if isinstance(value, str) and cat.has(f"remediate_cli.state.{value}"):
            out[name] = cat.t(f"remediate_cli.state.{value}")
    return out
