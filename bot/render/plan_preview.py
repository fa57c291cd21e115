"""A plan's preview in words and JSON: the predicted budget before and after, the blast radius.

The same sentences serve the terminal (`gpumem plan`) and Slack (the plan message); the wording
is in the catalogs under `plan_preview.`. JSON carries ids and values only (the README lists the
keys).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bot.render.i18n import Catalog
from bot.render.wording import concurrency_limit_text, concurrency_text
from runbooks.model.serde import to_jsonable
from runbooks.remediation.preview import BlastRadius, BudgetFigures, BudgetPreview, Note, PlanPreview
from runbooks.remediation.solver import ENGINE_FLAGS

#: budget-resolution codes with their own wording; any other is `missing.other`
_MISSING_CODES = ("no_engine", "no_model", "unknown_model", "config_unreadable", "no_gpu", "unknown_gpu",
                  "mig_ambiguous", "no_server_container", "patch_not_previewed")
#: notes of `gpumem budget` (its catalog words them)
_BUDGET_NOTES = ("gpu_from_deployment", "gpu_from_mig", "gpu_first_of_several", "gpu_memory_limited")


@dataclass(frozen=True)
class PreviewWords:
    """The preview as sentences: a title and lines for the budget, lines for the blast radius,
    and the warnings a reviewer must not miss (a stuck rollout, pods left Pending, an engine
    that would not start)."""

    budget_title: str
    budget: tuple[str, ...]
    blast: tuple[str, ...]
    warnings: tuple[str, ...]


def _note(cat: Catalog, note: Note) -> str:
    if note.id in _BUDGET_NOTES:
        return cat.t(f"budget_cli.note.{note.id}", note.params)
    return cat.t(f"plan_preview.note.{note.id}", note.params)


def _missing(cat: Catalog, note: Note) -> str:
    code = note.params.get("code", "")
    key = code if code in _MISSING_CODES else "other"
    return cat.t(f"plan_preview.missing.{key}", {**note.params, "what": note.id})


def _gib(value: float) -> str:
    return f"{value:.2f}"


def _at_once(cat: Catalog, engine: str | None, f: BudgetFigures) -> str:
    return concurrency_text(cat, engine, f.concurrency, f.concurrency_limit, f.kv_requests, f.max_num_seqs,
                            f.max_model_len)


def budget_words(cat: Catalog, b: BudgetPreview) -> tuple[str, list[str], list[str]]:
    """(title, lines, warnings) of the predicted budget."""
    if not b.computed:
        title = cat.t("plan_preview.budget.title_missing")
        lines = [_missing(cat, m) for m in b.missing]
        if b.before is not None:
            lines.insert(0, cat.t("plan_preview.budget.before_only", kv=b.before.kv_cache_tokens,
                                  concurrency=_at_once(cat, b.engine, b.before), headroom=_gib(b.before.headroom_gib)))
        return title, lines, []
    before, after = b.before, b.after
    assert before is not None and after is not None
    title = cat.t("plan_preview.budget.title", model=b.model, gpu=b.gpu, engine=b.engine)
    lines = [cat.t("plan_preview.budget.kv", before=before.kv_cache_tokens, after=after.kv_cache_tokens),
             cat.t("plan_preview.budget.concurrency", before=before.concurrency, after=after.concurrency,
                   limit=concurrency_limit_text(cat, b.engine, after.concurrency_limit, after.kv_requests,
                                                after.max_num_seqs, after.max_model_len)),
             cat.t("plan_preview.budget.headroom", before=_gib(before.headroom_gib), after=_gib(after.headroom_gib))]
    total_before, total_after = b.service_concurrency()
    if total_before is not None and total_after is not None:
        lines.append(cat.t("plan_preview.budget.service", before=total_before, after=total_after,
                           pods_before=b.replicas_before, pods_after=b.replicas_after))
    length_flag, seqs_flag, _ = ENGINE_FLAGS.get(b.engine or "", ENGINE_FLAGS["vllm"])
    for flag, old, new in ((seqs_flag, before.max_num_seqs, after.max_num_seqs),
                           (length_flag, before.max_model_len, after.max_model_len)):
        if old != new:  # the engine's effective limit (its default filled in), as gpumem budget shows it
            lines.append(cat.t("plan_preview.budget.limit", flag=flag, before=old, after=new))
    if b.unmodelled:
        lines.append(cat.t("plan_preview.budget.unmodelled", flags=", ".join(b.unmodelled)))
    lines += [_note(cat, n) for n in b.notes]
    warnings = []
    if not after.fits:
        warnings.append(cat.t("plan_preview.budget.after_fails", failure=after.failure or after.failure_id or "-"))
    return title, lines, warnings


def _strategy(cat: Catalog, r: BlastRadius) -> str:
    if r.strategy == "RollingUpdate":
        return cat.t("plan_preview.strategy.rolling", surge=r.max_surge, unavailable=r.max_unavailable)
    if r.strategy == "Recreate":
        return cat.t("plan_preview.strategy.recreate")
    return cat.t("plan_preview.strategy.other", strategy=r.strategy)


def _names(cat: Catalog, names: tuple[str, ...], shown: int | None) -> str:
    """Names joined in the catalog's way, the first `shown` of them (None: all) and how many more.

    >>> _names(Catalog.load("en"), ("a", "b", "c"), 2), _names(Catalog.load("zh"), ("a", "b", "c"), 2)
    ('a, b, … (+1)', 'a、b、… (+1)')
    """
    if shown is None or len(names) <= shown:
        return cat.join(names)
    return cat.join((*names[:shown], f"… (+{len(names) - shown})"))


def blast_words(cat: Catalog, r: BlastRadius, reason: str, shown: int | None = None) -> tuple[list[str], list[str]]:
    """(lines, warnings) of the blast radius; `reason` says why GPUs were not checked; `shown`
    caps the pod and node names listed (None: all)."""
    lines = []
    if r.template_changed:
        if r.restart_pods:
            lines.append(cat.t("plan_preview.restart_all", count=len(r.restart_pods), strategy=_strategy(cat, r),
                               pods=_names(cat, r.restart_pods, shown)))
        elif r.strategy != "OnDelete":
            lines.append(cat.t("plan_preview.restart_unlisted", count=r.replicas_before, strategy=_strategy(cat, r)))
    else:
        lines.append(cat.t("plan_preview.restart_none"))
    if r.pods_added:
        lines.append(cat.t("plan_preview.pods_added", count=r.pods_added, before=r.replicas_before,
                           after=r.replicas_after))
    if r.pods_removed:
        lines.append(cat.t("plan_preview.pods_removed", count=r.pods_removed, before=r.replicas_before,
                           after=r.replicas_after))
    params = {"extra": r.extra_pods, "per_pod": r.gpus_per_pod, "resource": r.gpu_resource, "needed": r.gpus_needed,
              "spare": r.spare_gpus, "fit": len(r.nodes), "placeable": r.placeable_pods,
              "nodes": _names(cat, tuple(f"{n.name} {n.spare}/{n.allocatable}" for n in r.nodes), shown) or "-",
              "node_names": _names(cat, tuple(n.name for n in r.nodes), shown) or "-", "unavailable": r.max_unavailable,
              "pending": max(0, r.pods_added - (r.placeable_pods or 0)), "added": r.pods_added,
              "free": max(0, r.pods_added - (r.placeable_pods or 0)) * r.gpus_per_pod, "reason": reason,
              "ruled_out": r.nodes_ruled_out}
    if r.outcome not in ("no_gpu", "not_checked"):
        lines.append(cat.t("plan_preview.gpus", params))
    warnings = []
    line = cat.t(f"plan_preview.outcome.{r.outcome}", params)
    if r.blocking:
        warnings.append(line)
    else:
        lines.append(line)
    lines += [_note(cat, n) for n in r.notes]
    return lines, warnings


def preview_words(preview: PlanPreview, lang: str, shown: int | None = None) -> PreviewWords:
    """The preview's sentences in `lang`; `shown` caps the names listed (Slack: a few)."""
    cat = Catalog.load(lang)
    title, budget, warnings = cat.t("plan_preview.budget.title_missing"), [], []
    if preview.budget is not None:
        title, budget, warnings = budget_words(cat, preview.budget)
    blast: list[str] = []
    issues = cat.phrases([n.params.get("issue", "") for n in preview.notes if n.id == "read_failed"])
    if preview.blast is not None:
        blast, more = blast_words(cat, preview.blast, issues or cat.t("plan_preview.not_read"), shown)
        warnings = more + warnings
    others = [_note(cat, n) for n in preview.notes if n.id != "read_failed" or preview.blast is None]
    if preview.budget is None:
        budget = others
    else:
        blast += others
    return PreviewWords(title, tuple(budget), tuple(blast), tuple(warnings))


def _figures_json(f: BudgetFigures | None) -> dict[str, Any] | None:
    """One side's figures, with the requests it runs at once (whole; min of the engine's cap and
    what the KV cache holds) and what caps them."""
    if f is None:
        return None
    return {**to_jsonable(f), "concurrency": f.concurrency, "concurrency_limit": f.concurrency_limit,
            "kv_requests": f.kv_requests}


def preview_json(preview: PlanPreview | None) -> dict[str, Any] | None:
    """The preview's JSON (`gpumem plan --json` under `preview`; None for a plan stored before
    previews existed)."""
    if preview is None:
        return None
    doc: dict[str, Any] = {"budget": None, "blast_radius": None, "notes": to_jsonable(preview.notes)}
    b = preview.budget
    if b is not None:
        total_before, total_after = b.service_concurrency()
        doc["budget"] = {"computed": b.computed, "model": b.model, "gpu": b.gpu, "engine": b.engine,
                         "before": _figures_json(b.before), "after": _figures_json(b.after),
                         "replicas_before": b.replicas_before, "replicas_after": b.replicas_after,
                         "service_max_concurrency_before": total_before,
                         "service_max_concurrency_after": total_after,
                         "unmodelled": list(b.unmodelled), "notes": to_jsonable(b.notes),
                         "missing": [{"what": m.id, **to_jsonable(m.params)} for m in b.missing]}
    r = preview.blast
    if r is not None:
        doc["blast_radius"] = {
            "template_changed": r.template_changed, "restart_pods": list(r.restart_pods), "pods_now": r.pods_now,
            "replicas_before": r.replicas_before, "replicas_after": r.replicas_after, "pods_added": r.pods_added,
            "pods_removed": r.pods_removed, "strategy": r.strategy, "max_surge": r.max_surge,
            "max_unavailable": r.max_unavailable, "gpu_resource": r.gpu_resource, "gpus_per_pod": r.gpus_per_pod,
            "extra_pods": r.extra_pods, "gpus_needed": r.gpus_needed, "spare_gpus": r.spare_gpus,
            "placeable_pods": r.placeable_pods,
            "nodes": [{"name": n.name, "allocatable": n.allocatable, "requested": n.requested, "spare": n.spare}
                      for n in r.nodes],
            "nodes_ruled_out": r.nodes_ruled_out, "outcome": r.outcome, "stuck": r.outcome == "stuck",
            "blocking": r.blocking, "notes": to_jsonable(r.notes)}
    return doc
