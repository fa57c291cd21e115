"""A plan as terminal text and JSON: target, the version it was made against, the human diff, the
exact patch, the rollback, its state and expiry."""

from __future__ import annotations

import json
from typing import Any

from bot.render.i18n import Catalog
from bot.render.plan_preview import preview_json, preview_words
from bot.store.db import StoredPlan
from runbooks.remediation.preview import PlanPreview


def plan_json(stored: StoredPlan) -> dict[str, Any]:
    p = stored.plan
    return {"id": p.id, "state": stored.state, "action": p.action_id,
            "target": {"cluster": p.target.cluster, "namespace": p.target.namespace, "kind": p.target.kind,
                       "name": p.target.name},
            "resource_version": p.resource_version, "generation": p.generation,
            "changes": [{"kind": c.kind, "container": c.container, "flag": c.flag, "old": c.old, "new": c.new,
                         "diff": c.describe()} for c in p.changes],
            "patch_type": p.patch_type, "patch": list(p.patch), "requested_by": p.requested_by,
            "approvals": list(stored.approvals), "approvals_needed": p.approvals_needed,
            "created_at": p.created_at.isoformat(), "expires_at": p.expires_at.isoformat(),
            "content_hash": p.content_hash, "preview": preview_json(p.preview)}


def plan_text(stored: StoredPlan, lang: str) -> str:
    cat = Catalog.load(lang)
    p = stored.plan
    t = p.target
    lines = [cat.t("remediate_cli.title", plan=p.id, state=cat.t(f"remediate_cli.state.{stored.state}")),
             cat.t("remediate_cli.target", kind=t.kind, namespace=t.namespace, name=t.name,
                   cluster=t.cluster or "-", rv=p.resource_version, generation=p.generation),
             cat.t("remediate_cli.changes")]
    lines += [f"  - {c.describe()}" for c in p.changes]
    lines.append(cat.t("remediate_cli.patch", patch_type=p.patch_type))
    lines += ["    " + json.dumps(op, ensure_ascii=False) for op in p.patch]
    lines += preview_lines(p.preview, lang)
    lines.append(cat.t("remediate_cli.expires", at=p.expires_at.strftime("%Y-%m-%d %H:%M:%SZ"),
                       needed=p.approvals_needed))
    nxt = {"proposed": "next_apply", "applied": "next_rollback", "watched": "next_rollback", "failed": "next_rollback"}
    if stored.state in nxt:
        lines.append(cat.t(f"remediate_cli.{nxt[stored.state]}", plan=p.id))
    return "\n".join(lines) + "\n"


def preview_lines(preview: PlanPreview | None, lang: str) -> list[str]:
    """The predicted budget and the blast radius, indented under the plan (none for a plan
    stored before previews existed)."""
    if preview is None:
        return []
    cat = Catalog.load(lang)
    words = preview_words(preview, lang)
    lines = ["  " + cat.t("plan_preview.heading", title=words.budget_title)] + [f"    {line}" for line in words.budget]
    lines.append("  " + cat.t("plan_preview.heading", title=cat.t("plan_preview.blast_title")))
    lines += [f"    {line}" for line in words.blast]
    lines += [f"  !! {line}" for line in words.warnings]
    return lines


def look_json(look: Any) -> dict[str, Any]:
    return {"outcome": look.outcome, "observed_generation": look.observed_generation, "replicas": look.replicas,
            "updated": look.updated, "ready": look.ready, "available": look.available,
            "new_pods": list(look.new_pods), "restarts": look.restarts, "oom_lines": look.oom_lines,
            "pressure_lines": look.pressure_lines, "notes": list(look.notes)}


def look_text(look: Any, lang: str) -> str:
    cat = Catalog.load(lang)
    line = cat.t(f"remediate_cli.watch.{look.outcome}", updated=look.updated, available=look.available,
                 replicas=look.replicas)
    return line + (" (" + "; ".join(look.notes) + ")" if look.notes else "") + "\n"
