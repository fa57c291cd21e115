"""A plan as terminal text and JSON: target, the version it was made against, the human diff, the
exact patch, the rollback, its state and expiry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from bot.render import split_pools
from bot.render.i18n import Catalog
from bot.render.managers import managers_json, plan_manager_lines
from bot.render.plan_preview import preview_json, preview_words
from bot.render.wording import change_text, eviction_count
from bot.store.db import StoredPlan
from runbooks.model.phrases import Phrase, phrase_json, phrase_of
from runbooks.remediation.preview import PlanPreview
from runbooks.remediation.split import masked


def plan_json(stored: StoredPlan) -> dict[str, Any]:
    p = stored.plan
    return {"id": p.id, "state": stored.state, "action": p.action_id,
            "target": {"cluster": p.target.cluster, "namespace": p.target.namespace, "kind": p.target.kind,
                       "name": p.target.name},
            "workload": ({"namespace": p.workload.namespace, "kind": p.workload.kind, "name": p.workload.name}
                         if p.workload else None),
            "resource_version": p.resource_version, "generation": p.generation,
            "changes": [{"kind": c.kind, "container": c.container, "flag": c.slot, "old": c.old, "new": c.new,
                         "diff": c.describe()} for c in p.changes],
            "patch_type": p.patch_type, "patch": [masked_op(op) for op in p.patch], "requested_by": p.requested_by,
            "approvals": list(stored.approvals), "approvals_needed": p.approvals_needed,
            "created_at": p.created_at.isoformat(), "expires_at": p.expires_at.isoformat(),
            "content_hash": p.content_hash, "preview": preview_json(p.preview),
            "managers": managers_json(Catalog.load("en"), [m.to_json() for m in p.managers])}


def masked_op(op: dict[str, Any]) -> dict[str, Any]:
    """A patch operation with secret values masked: flags (`--api-key x`), env entries whose
    name says secret, credential shapes anywhere. A flag edit's patch names only the elements
    it changes and holds no secret; the objects a pool split creates are clones, stored masked
    (`runbooks.remediation.split.stored_ops`) and shown so (the terminal, `--json` and Slack).

    >>> masked_op({"op": "create", "value": {"env": [{"name": "HF_TOKEN", "value": "hf_x"}]}})
    {'op': 'create', 'value': {'env': [{'name': 'HF_TOKEN', 'value': '<redacted>'}]}}
    """

    return {k: (masked(v) if k == "value" else v) for k, v in op.items()}


def plan_text(stored: StoredPlan, lang: str) -> str:
    cat = Catalog.load(lang)
    p = stored.plan
    t = p.target
    lines = [*headline_lines(cat, stored),
             cat.t("remediate_cli.title", plan=p.id, state=cat.t(f"remediate_cli.state.{stored.state}")),
             cat.t("remediate_cli.target", kind=t.kind, namespace=t.namespace, name=t.name,
                   cluster=t.cluster or "-", rv=p.resource_version, generation=p.generation),
             cat.t("remediate_cli.changes")]
    if t.kind in ("InferenceService", "LeaderWorkerSet"):  # the object that declares the pods is written
        made = p.workload
        lines.insert(-1, cat.t("remediate_cli.writes_owner", kind=t.kind, namespace=t.namespace, name=t.name)
                     if made is None else cat.t("remediate_cli.writes_owner_of", kind=t.kind, namespace=t.namespace,
                                                name=t.name, made_kind=made.kind, made=made.name))
        paths = [str(op.get("path") or "") for op in p.patch]
        if any("/leaderTemplate/" in x for x in paths) and any("/workerTemplate/" in x for x in paths):
            lines.insert(-1, cat.t("remediate_cli.both_templates"))
    lines += [f"  - {change_text(cat, c)}" for c in p.changes]
    if split_pools.is_create(p):  # a pool split's phase 1: objects to create, not a patch
        lines += split_pools.object_lines(p, lang)
    else:
        lines.append(cat.t("remediate_cli.patch", patch_type=p.patch_type))
        lines += ["    " + json.dumps(masked_op(op), ensure_ascii=False) for op in p.patch]
    lines += preview_lines(p.preview, lang)
    lines += plan_manager_lines(cat, [m.to_json() for m in p.managers], t.namespace)
    lines.append(cat.t("remediate_cli.expires", at=p.expires_at.strftime("%Y-%m-%d %H:%M:%SZ"),
                       needed=p.approvals_needed))
    nxt = {"proposed": "next_apply", "applied": "next_rollback", "watched": "next_rollback", "failed": "next_rollback"}
    if stored.state in nxt:
        lines.append(cat.t(f"remediate_cli.{nxt[stored.state]}", plan=p.id))
    return "\n".join(lines) + "\n"


def written_name(target: Any) -> str:
    """The object a plan writes as its headline names it after the namespace: NAME for a
    Deployment, else KIND/NAME in lower case ("inferenceservice/llama"), so "llm/llama" never
    stands for an object that is not the Deployment llama.

    >>> from runbooks.remediation.plan import PlanTarget
    >>> written_name(PlanTarget(None, "llm", "Deployment", "vllm")), written_name(PlanTarget(None, "llm", "LeaderWorkerSet", "big"))
    ('vllm', 'leaderworkerset/big')
    """
    kind = str(getattr(target, "kind", "") or "Deployment")
    return target.name if kind == "Deployment" else f"{kind.lower()}/{target.name}"


def headline_lines(cat: Catalog, stored: StoredPlan) -> list[str]:
    """The one line a plan leads with, as the Slack message does: "Approve `--max-model-len 8192 ->
    4096` on llm/vllm-server? (needs 1 approval: gpumem apply p-… --yes)" while it waits for
    approval; none once it no longer waits (an apply's output leads with its outcome) nor for a plan
    with no change of its own (a pool split's phase 1)."""
    p = stored.plan
    if not p.changes or split_pools.is_create(p) or stored.state != "proposed":
        return []
    changes = "; ".join(f"`{change_text(cat, c)}`" for c in p.changes)
    left = max(1, p.approvals_needed - len(stored.approvals))
    return [cat.t("remediate_cli.headline", changes=changes, namespace=p.target.namespace, name=written_name(p.target),
                  needed=left, plan=p.id)]


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
            "pressure_lines": look.pressure_lines, "notes": notes_json(look.notes),
            "prometheus": symptoms_json(getattr(look, "symptoms", None)),
            "reverted": [r.to_json() for r in getattr(look, "reverted", ())]}


def notes_json(notes: Sequence[Any]) -> list[dict[str, Any]]:
    """The watch's notes as JSON: per note its `id`, `params` and `text` (in English), as the
    budget's notes; a note stored as text before notes had ids: `id` null, the text as it was."""
    en = Catalog.load("en")
    out = []
    for note in notes:
        found = phrase_of(note)
        if isinstance(found, Phrase):
            out.append({"id": found.key.removeprefix("watch."), "params": phrase_json(dict(found.params)),
                        "text": en.phrase(found)})
        else:
            out.append({"id": None, "params": {}, "text": str(found)})
    return out


def notes_words(cat: Catalog, notes: Sequence[Any]) -> str:
    """The watch's notes after a judgement, in brackets: " (1 restart in new pods; ...)", "（...）"
    in Chinese; "" for none."""
    return cat.t("remediate_cli.notes", notes=cat.phrases(notes)) if notes else ""


def utc_clock(at: str | None) -> str:
    """An RFC 3339 time as the clock reads it in UTC ("14:02 UTC"); as given when it is not one.

    >>> utc_clock("2026-03-09T14:02:41Z"), utc_clock("2026-03-09T16:02:00+02:00"), utc_clock("soon")
    ('14:02 UTC', '14:02 UTC', 'soon')
    """
    try:
        moment = datetime.fromisoformat(str(at).replace("Z", "+00:00"))
    except ValueError:
        return str(at)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%H:%M UTC")


def _get(r: Any, key: str) -> Any:
    return r.get(key) if isinstance(r, dict) else getattr(r, key, None)


def revert_words(cat: Catalog, r: Any) -> str:
    """Who put a field back and when (`bot.actuator.watch.Reverted`, or its JSON in the audit):
    "reverted by argocd-controller at 14:02 UTC" from managedFields; the time the watch saw it
    when they record no time; "reverted by another writer, seen at ... (manager not recorded)"
    when they name nobody."""
    manager, at, seen = _get(r, "manager"), _get(r, "at"), _get(r, "seen_at")
    if manager and at:
        return cat.t("remediate_cli.revert_by", manager=manager, at=utc_clock(at))
    if manager:
        return cat.t("remediate_cli.revert_by_untimed", manager=manager, at=utc_clock(seen))
    return cat.t("remediate_cli.revert_unnamed", at=utc_clock(seen))


def reverts_words(cat: Catalog, reverted: Sequence[Any]) -> str:
    """The reverts of one plan in words, each writer once ("reverted by kserve-controller at ...")."""
    return "; ".join(dict.fromkeys(revert_words(cat, r) for r in reverted))


def symptoms_json(symptoms: Any) -> dict[str, Any] | None:
    """The watch's Prometheus reading (None: no Prometheus configured)."""
    if symptoms is None:
        return None
    return {"kv_usage": symptoms.kv_usage, "queue": symptoms.queue, "preemptions": symptoms.preemptions,
            "preemption_window_s": symptoms.window_s, "eviction": getattr(symptoms, "eviction", None),
            "error": Catalog.load("en").phrase(symptoms.error) if symptoms.error else None}  # English words


def symptoms_values(cat: Catalog, symptoms: Any) -> dict[str, Any]:
    """The wording's values: KV usage in percent, queue as a count, "-" when absent; preemptions
    counted in the engine's own word (`evictions`)."""
    return {"kv": "-" if symptoms.kv_usage is None else f"{symptoms.kv_usage * 100:.0f}%",
            "queue": "-" if symptoms.queue is None else f"{symptoms.queue:.0f}",
            "evictions": eviction_count(cat, symptoms.preemptions, getattr(symptoms, "eviction", None)),
            "minutes": max(1, round(symptoms.window_s / 60)), "error": symptoms.error or ""}


def look_text(look: Any, lang: str, rolled_back: bool = False) -> str:
    """The watch's last look: its judgement (a failure `rolled_back` by itself says so instead of
    asking for a rollback), its notes, the Prometheus reading."""
    cat = Catalog.load(lang)
    outcome = "failed_rolled_back" if rolled_back and look.outcome == "failed" else look.outcome
    line = cat.t(f"remediate_cli.watch.{outcome}", updated=look.updated, available=look.available,
                 replicas=look.replicas)
    out = line + notes_words(cat, look.notes) + "\n"
    reverted = getattr(look, "reverted", ())
    for r in reverted:
        out += cat.t("remediate_cli.reverted_line", path=r.path, before=_plain(r.before), gpumem=_plain(r.gpumem),
                     now=_plain(r.now), reverted=revert_words(cat, r)) + "\n"
    if reverted:
        out += cat.t("remediate_cli.reverted_next", fold=cat.t("remediate_cli.revert_fold")) + "\n"
    symptoms = getattr(look, "symptoms", None)
    if symptoms is not None:
        key = "remediate_cli.watch_metrics_unread" if symptoms.error else "remediate_cli.watch_metrics"
        out += cat.t(key, symptoms_values(cat, symptoms)) + "\n"
    return out


def _plain(value: Any) -> str:
    return "-" if value is None else value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def reconciled_text(rows: Any, lang: str) -> str:
    """One line per plan found `applying` (or whose rollback's outcome was unknown) and what
    became of it."""
    cat = Catalog.load(lang)
    return "".join(cat.t("remediate_cli.reconciled." + ("rollback_unknown" if getattr(r, "rollback", False)
                                                        and r.outcome == "unknown" else r.outcome),
                         plan=r.plan_id, target=r.target, reason=r.reason or "-") + "\n" for r in rows)


def differences_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """A rollback's refusal, per changed path: before gpumem / what gpumem wrote / now. A list
    (a container's args) shows only the items that differ, when the three have the same length.

    >>> differences_lines([{"path": "/spec/replicas", "before": 2, "gpumem": 3, "now": 5}])
    ['/spec/replicas: 2 / 3 / 5']
    """
    lines = []
    for row in rows:
        values = (row.get("before"), row.get("gpumem"), row.get("now"))
        if all(isinstance(v, list) for v in values) and len({len(v) for v in values}) == 1:
            for i, items in enumerate(zip(*values, strict=True)):
                if len({json.dumps(x, sort_keys=True) for x in items}) > 1:
                    lines.append(f"{row['path']}/{i}: " + " / ".join(map(str, items)))
        else:
            lines.append(f"{row['path']}: " + " / ".join(map(str, values)))
    return lines
