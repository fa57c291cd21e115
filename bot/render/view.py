"""The one view model of a triage report: every line a surface shows, already worded.

Terminal text (jinja templates), Slack blocks and any later surface render the same
`ReportView`; they only lay it out. Building it is the only place a Report is worded.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

from bot.render.i18n import Catalog
from bot.render.managers import manager_line
from bot.render.wording import (
    action_text,
    budget_concurrency,
    cause_title,
    change_text,
    concurrency_text,
    engine_catalog,
    fact_text,
    issue_text,
    pct,
    shift_label,
)
from runbooks.model.budget import concurrency_limit_of, concurrency_of
from runbooks.model.report import Action, Cause, Report
from runbooks.model.templates import SPEC_OWNER_KINDS


@dataclass(frozen=True)
class CauseView:
    id: str
    title: str
    confidence: float
    label: str
    evidence: tuple[str, ...]
    against: tuple[str, ...]
    rule_out: tuple[str, ...]


@dataclass(frozen=True)
class ActionView:
    id: str
    title: str
    risk: str
    rollback: str
    #: "on-call" or "escalate", worded
    tier: str
    #: the typed changes as human diffs ("--max-num-seqs 128 -> 115")
    changes: tuple[str, ...] = ()


@dataclass(frozen=True)
class FindingView:
    severity: str
    sev: str
    title: str
    #: the finding's facts less those the verdict's "Why" already shows
    facts: tuple[str, ...]
    #: some of its facts are shown under "Why" (and left out here)
    in_why: bool = False


@dataclass(frozen=True)
class CheckView:
    title: str
    checked: bool
    findings: tuple[FindingView, ...]


@dataclass(frozen=True)
class ReportView:
    #: the catalog's lookup, for the few labels a layout adds itself
    t: Callable[..., str]
    target: str
    service: str
    primary: str
    primary_title: str
    primary_cause: CauseView | None
    other_causes: tuple[CauseView, ...]
    priority: str
    coverage: int
    memory: tuple[str, ...]
    budget: tuple[str, ...]
    profile: tuple[str, ...]
    flags: tuple[str, ...]
    checks: tuple[CheckView, ...]
    not_checked: tuple[str, ...]
    could_not_read: tuple[str, ...]
    actions: tuple[ActionView, ...]
    misjudgements: tuple[str, ...]
    sources: str
    #: what a "healthy" verdict rests on
    health: tuple[str, ...] = ()
    #: for "not enough evidence": the files that would decide it, with their commands
    capture: tuple[str, ...] = ()
    #: who manages the workload ("managed by Argo CD application llm-serving, ..."), with the evidence
    managed: tuple[str, ...] = ()

    def as_template_vars(self) -> dict[str, Any]:
        """The top-level names a jinja template sees (a shallow mapping of the fields)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _cause(cat: Catalog, c: Cause, kubernetes: bool = True) -> CauseView:
    return CauseView(c.id, cause_title(cat, c.id, kubernetes), c.confidence, cat.t(f"confidence.{c.confidence_label}"),
                     tuple(fact_text(cat, f) for f in c.evidence_for),
                     tuple(fact_text(cat, f) for f in c.evidence_against),
                     tuple(fact_text(cat, f) for f in c.rule_out))


def _action(cat: Catalog, a: Action) -> ActionView:
    text = action_text(cat, a)
    return ActionView(a.id, text["title"], text["risk"], text["rollback"], text["tier"],
                      tuple(change_text(cat, ch) for ch in a.changes))


def _finding(cat: Catalog, f: Any, why: set[str]) -> FindingView:
    """A finding, its facts less those "Why" shows: the evidence is read once, not twice."""
    facts = [fact_text(cat, x) for x in f.facts]
    kept = tuple(x for x in facts if x not in why)
    return FindingView(f.severity, cat.t(f"severity.{f.severity}"), cat.t(f"finding.{f.id}"), kept,
                       len(kept) < len(facts))


def _memory_lines(cat: Catalog, report: Report) -> list[str]:
    mem = report.memory
    lines: list[str] = []
    if mem is None:
        return lines
    if mem.static_gib is not None:
        pooled = mem.basis in ("engine_log", "budget") and mem.kv_tokens_measured and mem.kv_cache_tokens
        lines.append(cat.t(f"memory.line_{mem.basis}{'_pool' if pooled else ''}", static_gib=mem.static_gib,
                           weights_gib=mem.weights_gib, dynamic_gib=mem.dynamic_gib, total_gib=_r(mem.gpu_total_gib),
                           kv_cache_tokens=mem.kv_cache_tokens))
    elif mem.gpu_used_gib is not None:
        lines.append(cat.t("memory.line_gpus", used_gib=_r(mem.gpu_used_gib), total_gib=_r(mem.gpu_total_gib)))
    if mem.gpu_used_gib is not None and mem.gpu_total_gib and mem.static_gib is not None:
        lines.append(cat.t("memory.used", used_gib=_r(mem.gpu_used_gib), total_gib=_r(mem.gpu_total_gib),
                           pct=pct(mem.gpu_used_gib / mem.gpu_total_gib)))
    if mem.kv_cache_usage_ratio is not None:
        lines.append(cat.t("memory.kv_usage", pct=pct(mem.kv_cache_usage_ratio)))
    return lines


def _budget_lines(cat: Catalog, report: Report) -> list[str]:
    b = report.budget
    if b is None:
        return []
    # one value per fact: where the engine reported its pool (and its start-up split), the
    # memory section shows those measured figures and this section only what gpumem computes
    # beside them (requests at once on the measured pool, the terms the engine did not print)
    mem = report.memory
    measured_split = mem is not None and mem.basis == "engine_log"
    if mem is not None and mem.kv_tokens_measured and mem.kv_cache_tokens:
        length = b.max_model_len or 0
        kv_conc = mem.kv_cache_tokens / length if length else 0.0
        first = cat.t("budget.line_measured_pool", kv_cache_tokens=mem.kv_cache_tokens,
                      kv_bytes_per_token=b.kv_bytes_per_token,
                      concurrency=concurrency_text(cat, b.engine, concurrency_of(kv_conc, b.max_num_seqs),
                                                   concurrency_limit_of(kv_conc, b.max_num_seqs),
                                                   concurrency_of(kv_conc, None), b.max_num_seqs, b.max_model_len))
    elif measured_split:  # the engine's KV GiB is above; the pool here is still gpumem's
        first = cat.t("budget.line_beside_measured", kv_cache_tokens=b.kv_cache_tokens,
                      kv_bytes_per_token=b.kv_bytes_per_token, concurrency=budget_concurrency(cat, b))
    else:
        first = cat.t("budget.line", kv_cache_gib=_r(b.kv_cache_gib), kv_cache_tokens=b.kv_cache_tokens,
                      kv_bytes_per_token=b.kv_bytes_per_token, concurrency=budget_concurrency(cat, b))
    static = "budget.static_beside_measured" if measured_split else "budget.static"
    lines = [first, cat.t(static, weights_gib=_r(b.weights_gib), activation_gib=_r(b.activation_gib),
                          non_torch_gib=_r(b.non_torch_gib), cudagraph_gib=_r(b.cudagraph_gib),
                          headroom_gib=_r(b.headroom_gib))]
    if b.failure:
        lines.append(cat.t("budget.fails", failure=b.failure))
    return lines


def _profile_lines(cat: Catalog, report: Report) -> list[str]:
    p = report.profile
    if p is None or not p.total:
        return []
    lines = [cat.t("profile.line", total=p.total, s=pct(p.share("S")), m=pct(p.share("M")), l=pct(p.share("L")),
                   xl=pct(p.share("XL"))) + (" " + cat.t("profile.estimated") if p.estimated else ""),
             cat.t("profile.pct", p50_in=_i(p.p50_input_tokens), p95_in=_i(p.p95_input_tokens),
                   p99_in=_i(p.p99_input_tokens), p50_out=_i(p.p50_output_tokens),
                   p95_out=_i(p.p95_output_tokens), p99_out=_i(p.p99_output_tokens))]
    if p.shift is not None:
        lines.append(cat.t("profile.shift", before=pct(p.shift.long_share_before), after=pct(p.shift.long_share_after),
                           before_label=shift_label(cat, p.shift.before_label),
                           after_label=shift_label(cat, p.shift.after_label)))
    return lines


def view(report: Report, lang: str) -> ReportView:
    """Word a Report once, for every surface, in the deployed engine's own flag names."""
    cat = engine_catalog(lang, report.engine)
    cat = cat.with_values(undo=_undo(cat, report))
    v = report.verdict
    causes = [_cause(cat, c, v.kubernetes) for c in v.causes]
    why = set(causes[0].evidence) if causes else set()
    checks = tuple(
        CheckView(cat.t(f"check.{c.check}"), c.checked, tuple(_finding(cat, f, why) for f in c.findings))
        for c in report.checks)
    service = ""
    if report.engine or report.model or report.gpu:
        key = "section.service" if report.engine_version else "section.service_no_version"
        service = cat.t(key, engine=report.engine or cat.t("section.engine_unknown"), version=report.engine_version,
                        model=report.model or cat.t("section.model_unknown"),
                        gpu=report.gpu or cat.t("section.gpu_unknown"))
    return ReportView(
        t=cat.t,
        target=report.target or cat.t("section.no_target"),
        service=service,
        primary=v.primary,
        primary_title=cause_title(cat, v.primary, v.kubernetes),
        primary_cause=causes[0] if causes else None,
        other_causes=tuple(causes[1:]),
        priority=(cat.t("priority_why.line", level=cat.t(f"priority_level.{v.priority}"),
                        why=cat.t(f"priority_why.{v.priority_why}"))
                  if v.priority_why else cat.t(f"priority_level.{v.priority}")),
        coverage=round(v.evidence_coverage * 100),
        memory=tuple(_memory_lines(cat, report)),
        budget=tuple(_budget_lines(cat, report)),
        profile=tuple(_profile_lines(cat, report)),
        flags=tuple(cat.t("edge.line", flag=e.flag, value=e.value,
                          safe=cat.t("edge.unset") if e.safe_value == "(unset)" else e.safe_value,
                          reason=cat.t(f"edge.{e.reason}"))
                    for e in report.flags_at_edge) or (
            (cat.t("edge.none_but_failure"),) if any(c.id == "params_near_edge" for c in v.causes) else ()),
        checks=checks,
        not_checked=tuple(fact_text(cat, f) for f in report.not_checked),
        could_not_read=tuple(issue_text(cat, i) for i in report.read_issues),
        actions=tuple(_action(cat, a) for a in report.actions),
        misjudgements=tuple(cat.t(f"misjudgement.{m.id}") for m in v.misjudgements),
        sources=cat.join(report.sources),
        health=tuple(fact_text(cat, f) for f in v.health_evidence),
        capture=tuple(fact_text(cat, f) for f in v.capture_next),
        managed=tuple(f"{manager_line(cat, m.to_json())} {cat.t('managers.evidence', evidence=m.evidence)}"
                      for m in report.managers or ()) + tuple(
            cat.t("managers.declared_in", kind=m.owner_kind, name=m.name)  # where the spec is declared
            for m in report.managers or () if m.kind == "controller" and m.owner_kind in SPEC_OWNER_KINDS),
    )


#: kinds `kubectl rollout undo` takes (their controllers keep the previous revisions)
_ROLLOUT_KINDS = frozenset({"Deployment", "StatefulSet", "DaemonSet"})


def _undo(cat: Catalog, report: Report) -> str:
    """How to put the previous launch back, for the kind of the target: `kubectl rollout undo`
    of a Deployment or StatefulSet; an InferenceService or a LeaderWorkerSet has no rollout
    history kubectl can undo: the gpumem plan's rollback (or the previous spec put back); a
    workload of a kind not read: either, by kind; no Kubernetes: in words."""
    parts = (report.target or "").split("/")
    name, ns = parts[-1], (parts[0] if len(parts) > 1 else "") or "default"
    if not (report.verdict.kubernetes and name):
        return cat.t("undo.by_hand")
    kind = report.target_kind
    if kind in _ROLLOUT_KINDS:
        return cat.t("undo.kubectl", namespace=ns, resource=kind.lower(), name=name)
    if kind is None:
        return cat.t("undo.kind_unknown", namespace=ns, name=name)
    return cat.t("undo.no_rollout", kind=kind, namespace=ns, resource=kind.lower(), name=name)


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _i(x: float | None) -> int | None:
    return None if x is None else int(round(x))
