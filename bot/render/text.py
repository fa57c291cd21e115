"""Terminal rendering of a Report: the verdict first, then the numbers, then what to do."""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from bot.render.templating import environment
from bot.render.wording import action_text, fact_text, issue_text, pct, shift_label
from runbooks.model.report import Report


def view(report: Report, lang: str) -> dict[str, Any]:
    """Everything a template shows, already worded: templates only lay it out."""
    cat = Catalog.load(lang)
    v = report.verdict
    causes = [
        {
            "id": c.id,
            "title": cat.t(f"verdict.{c.id}"),
            "confidence": c.confidence,
            "label": cat.t(f"confidence.{c.confidence_label}"),
            "evidence": [fact_text(cat, f) for f in c.evidence_for],
            "against": [fact_text(cat, f) for f in c.evidence_against],
            "rule_out": [fact_text(cat, f) for f in c.rule_out],
        }
        for c in v.causes
    ]
    mem = report.memory
    memory_lines = []
    if mem is not None:
        if mem.static_gib is not None:
            memory_lines.append(cat.t(f"memory.line_{mem.basis}", static_gib=mem.static_gib, weights_gib=mem.weights_gib,
                                      dynamic_gib=mem.dynamic_gib, total_gib=_r(mem.gpu_total_gib)))
        elif mem.gpu_used_gib is not None:
            memory_lines.append(cat.t("memory.line_gpus", used_gib=_r(mem.gpu_used_gib), total_gib=_r(mem.gpu_total_gib)))
        if mem.gpu_used_gib is not None and mem.gpu_total_gib and mem.static_gib is not None:
            memory_lines.append(cat.t("memory.used", used_gib=_r(mem.gpu_used_gib), total_gib=_r(mem.gpu_total_gib),
                                      pct=pct(mem.gpu_used_gib / mem.gpu_total_gib)))
        if mem.kv_cache_usage_ratio is not None:
            memory_lines.append(cat.t("memory.kv_usage", pct=pct(mem.kv_cache_usage_ratio)))
    budget_lines = []
    b = report.budget
    if b:
        budget_lines.append(cat.t("budget.line", {k: _r(b.get(k)) if isinstance(b.get(k), float) else b.get(k)
                                                  for k in ("kv_cache_gib", "kv_cache_tokens", "kv_bytes_per_token",
                                                            "max_concurrency", "max_model_len")}))
        budget_lines.append(cat.t("budget.static", {k: _r(b.get(k)) for k in (
            "weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib", "headroom_gib")}))
        if b.get("failure"):
            budget_lines.append(cat.t("budget.fails", failure=b["failure"]))
    profile_lines = []
    p = report.profile
    if p is not None and p.total:
        profile_lines.append(cat.t("profile.line", total=p.total, s=pct(p.share("S")), m=pct(p.share("M")),
                                   l=pct(p.share("L")), xl=pct(p.share("XL")))
                             + (" " + cat.t("profile.estimated") if p.estimated else ""))
        profile_lines.append(cat.t("profile.pct", p50_in=_i(p.p50_input_tokens), p95_in=_i(p.p95_input_tokens),
                                   p99_in=_i(p.p99_input_tokens), p50_out=_i(p.p50_output_tokens),
                                   p95_out=_i(p.p95_output_tokens), p99_out=_i(p.p99_output_tokens)))
        if p.shift is not None:
            profile_lines.append(cat.t("profile.shift", before=pct(p.shift.long_share_before),
                                       after=pct(p.shift.long_share_after),
                                       before_label=shift_label(cat, p.shift.before_label),
                                       after_label=shift_label(cat, p.shift.after_label)))
    checks = []
    for c in report.checks:
        checks.append({
            "title": cat.t(f"check.{c.check}"),
            "checked": c.checked,
            "findings": [
                {"severity": f.severity, "sev": cat.t(f"severity.{f.severity}"), "title": cat.t(f"finding.{f.id}"),
                 "facts": [fact_text(cat, x) for x in f.facts]}
                for f in c.findings
            ],
        })
    return {
        "t": cat.t,
        "target": report.target or "?",
        "service": cat.t("section.service", engine=report.engine or "?", version=report.engine_version or "",
                         model=report.model or "?", gpu=report.gpu or "?")
        if (report.engine or report.model or report.gpu) else "",
        "primary": v.primary,
        "primary_title": cat.t(f"verdict.{v.primary}"),
        "primary_cause": causes[0] if causes else None,
        "other_causes": causes[1:],
        "priority": cat.t(f"priority.{v.priority}"),
        "coverage": round(v.evidence_coverage * 100),
        "memory": memory_lines,
        "budget": budget_lines,
        "profile": profile_lines,
        "flags": [cat.t("edge.line", flag=e.flag, value=e.value, safe=e.safe_value, reason=cat.t(f"edge.{e.reason}"))
                  for e in report.flags_at_edge],
        "checks": checks,
        "not_checked": [fact_text(cat, f) for f in report.not_checked],
        "could_not_read": [issue_text(cat, i) for i in report.read_issues],
        "actions": [action_text(cat, a) for a in report.actions],
        "misjudgements": [cat.t(f"misjudgement.{m.id}") for m in v.misjudgements],
        "sources": ", ".join(report.sources),
    }


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _i(x: float | None) -> int | None:
    return None if x is None else int(round(x))


def render_text(report: Report, lang: str = "en") -> str:
    return environment().get_template("triage.txt.j2").render(**view(report, lang))
