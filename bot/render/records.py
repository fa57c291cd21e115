"""The audit trail and the plan list as terminal text and JSON (stable keys, see README)."""

from __future__ import annotations

from typing import Any

from bot.render.handover import state_word
from bot.render.i18n import Catalog
from bot.render.terminal import ljust
from bot.render.wording import change_text
from bot.store.chain import ChainReport
from bot.store.db import AuditRow, StoredPlan


def audit_json(rows: list[AuditRow]) -> list[dict[str, Any]]:
    return [{"id": r.id, "at": r.at.isoformat(), "actor": r.actor, "event": r.event, "plan": r.plan_id,
             "content_hash": r.content_hash, "channel": r.channel, "cluster": r.cluster, "namespace": r.namespace,
             "name": r.name, "from_state": r.from_state, "to_state": r.to_state, "detail": r.detail} for r in rows]


def audit_text(rows: list[AuditRow], lang: str) -> str:
    cat = Catalog.load(lang)
    if not rows:
        return cat.t("records.audit_empty") + "\n"
    lines = [cat.t("records.audit_title", count=len(rows))]
    for r in rows:
        target = f"{r.namespace}/{r.name}" if r.namespace else "-"
        step = (f"{state_word(cat, r.from_state) if r.from_state else '-'} -> {state_word(cat, r.to_state)}"
                if r.to_state else r.event)
        lines.append(f"  {r.at.strftime('%Y-%m-%d %H:%M:%S')}Z  {r.actor:<12} {r.event:<11} {r.plan_id or '-':<14} "
                     f"{target:<28} {step}")
    return "\n".join(lines) + "\n"


def chain_json(report: ChainReport) -> dict[str, Any]:
    """`gpumem audit --verify --json`: `intact`, `rows`, `head` (the last good row's hash) and
    `first_bad` (`id`, `problem`, `missing`; null when intact)."""
    bad = report.first_bad
    return {"intact": report.intact, "rows": report.rows, "head": report.head,
            "first_bad": None if bad is None else {"id": bad.id, "problem": bad.problem, "missing": bad.missing}}


def chain_text(report: ChainReport, lang: str) -> str:
    cat = Catalog.load(lang)
    if report.first_bad is None:
        return cat.t("records.chain_intact", rows=report.rows, head=report.head) + "\n"
    bad = report.first_bad
    why = cat.t(f"records.chain_problem.{bad.problem}", id=bad.id, before=bad.id - 1, missing=bad.missing)
    return cat.t("records.chain_broken", id=bad.id, why=why) + "\n"


def plans_json(plans: list[StoredPlan]) -> list[dict[str, Any]]:
    return [{"id": p.plan.id, "state": p.state, "action": p.plan.action_id, "cluster": p.plan.target.cluster,
             "namespace": p.plan.target.namespace, "kind": p.plan.target.kind, "name": p.plan.target.name,
             "changes": [c.describe() for c in p.plan.changes], "requested_by": p.plan.requested_by,
             "approvals": list(p.approvals), "approvals_needed": p.plan.approvals_needed,
             "created_at": p.plan.created_at.isoformat(), "expires_at": p.plan.expires_at.isoformat(),
             "content_hash": p.plan.content_hash} for p in plans]


def plans_text(plans: list[StoredPlan], lang: str) -> str:
    cat = Catalog.load(lang)
    if not plans:
        return cat.t("records.plans_empty") + "\n"
    lines = [cat.t("records.plans_title", count=len(plans))]
    for p in plans:
        t = p.plan.target
        # the target as `gpumem plan` takes it: `ns/name` for a Deployment, else `ns/kind/name`
        where = f"{t.namespace}/{t.name}" if t.kind == "Deployment" else f"{t.namespace}/{t.kind.lower()}/{t.name}"
        # the change says what the action does: its id stays in --json (`action`)
        lines.append(f"  {p.plan.id:<14} {ljust(state_word(cat, p.state), 11)} {where:<28} "
                     + "; ".join(change_text(cat, c) for c in p.plan.changes))
    return "\n".join(lines) + "\n"

