"""Turn report objects into sentences through a catalog. Shared by every renderer."""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from runbooks.model.evidence import ReadIssue
from runbooks.model.report import Action, Fact
from runbooks.model.units import pct as pct  # the one pct; renderers import it from here too

#: fact parameters whose values are themselves catalog keys
_NESTED = {"signal": "signal", "warning": "warning", "what": "what", "kind": "probe_kind", "error_kind": "error_kind"}
_EXAMPLE_CHARS = 160


def fact_text(cat: Catalog, f: Fact) -> str:
    params: dict[str, Any] = dict(f.params)
    for name, prefix in _NESTED.items():
        value = params.get(name)
        if not isinstance(value, str):
            continue
        # keys may carry one argument after a colon: "unparsed_value:max-model-len"
        key, _, arg = value.partition(":")
        if cat.has(f"{prefix}.{key}"):
            params[name] = cat.t(f"{prefix}.{key}", arg=arg)
    for name in ("before_label", "after_label"):
        params[name] = shift_label(cat, params.get(name))
    example = params.get("example")
    if isinstance(example, str) and len(example) > _EXAMPLE_CHARS:
        params["example"] = example[: _EXAMPLE_CHARS - 1] + "…"
    text = cat.t(f"fact.{f.key}", params)
    if f.key.startswith("missing_") and params.get("reason"):
        text = cat.t("fact.missing_reason", what=text, source=f.source, reason=params["reason"])
    return text


def action_text(cat: Catalog, a: Action) -> dict[str, str]:
    base = f"action.{a.id}"
    title = cat.t(f"{base}.title", a.params)
    withheld = a.params.get("withheld")
    if isinstance(withheld, dict) and withheld:
        # flags the deployed engine version rejects, left out of the action (runbooks.triage.spelling)
        title += cat.t("action_withheld", reasons="; ".join(str(r) for r in withheld.values()))
    return {
        "title": title,
        "risk": cat.t(f"{base}.risk", a.params),
        "rollback": cat.t(f"{base}.rollback", a.params),
        "tier": cat.t("section.escalate" if a.tier == "escalate" else "section.now"),
    }


def issue_text(cat: Catalog, issue: ReadIssue) -> str:
    key = "issue.line" if issue.line is not None else "issue.noline"
    return cat.t(key, source=issue.source, line=issue.line, message=issue.message)


def shift_label(cat: Catalog, label: object) -> object:
    """Profile shift labels ("first part", "baseline", ...) are keys too."""
    if isinstance(label, str):
        key = "shift." + label.replace(" ", "_")
        if cat.has(key):
            return cat.t(key)
    return label


def cause_title(cat: Catalog, cause_id: str, kubernetes: bool = True, prefix: str = "verdict") -> str:
    """A verdict's title; the platform cause is worded as Kubernetes only when the evidence
    shows Kubernetes (a docker host or a workstation gets the platform wording)."""
    if cause_id == "platform_amplifier" and not kubernetes:
        return cat.t(f"{prefix}.platform_amplifier_host")
    return cat.t(f"{prefix}.{cause_id}")
