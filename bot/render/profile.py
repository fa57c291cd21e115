"""Rendering of `gpumem profile`: JSON (stable keys, see README) and terminal text (en, zh)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.render.i18n import Catalog, shift_label
from bot.render.templating import environment
from bot.render.terminal import cells
from bot.service.outcomes import ProfileView
from runbooks.catalogs.thresholds import LONG_SHARE_SHIFT
from runbooks.model.lengths import BUCKETS, ProfileShift, RequestProfile
from runbooks.model.units import pct
from runbooks.profile.detail import ProfileDetail
from runbooks.profile.requests import BUCKET_LIMITS

_BAR_CHARS = 30




def _num(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _time(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def shift_json(shift: ProfileShift | None) -> dict[str, Any] | None:
    if shift is None:
        return None
    return {"long_share_before": _num(shift.long_share_before), "long_share_after": _num(shift.long_share_after),
            "delta": _num(shift.delta), "before_count": shift.before_count, "after_count": shift.after_count,
            "before_label": shift.before_label, "after_label": shift.after_label,
            "alarming": shift.delta >= LONG_SHARE_SHIFT}


def _summary(p: RequestProfile) -> dict[str, Any]:
    return {
        "source": p.source, "total": p.total, "skipped_lines": p.skipped_lines, "estimated": p.estimated,
        "first_at": _time(p.first_at), "last_at": _time(p.last_at),
        "buckets": [{"bucket": b.bucket, "count": b.count, "share": _num(b.share)} for b in p.buckets],
        "percentiles": {
            "input": {"p50": _num(p.p50_input_tokens), "p95": _num(p.p95_input_tokens),
                      "p99": _num(p.p99_input_tokens), "max": p.max_input_tokens},
            "output": {"p50": _num(p.p50_output_tokens), "p95": _num(p.p95_output_tokens),
                       "p99": _num(p.p99_output_tokens), "max": p.max_output_tokens},
        },
    }


def profile_json(view: ProfileView, lang: str) -> dict[str, Any]:
    p, d = view.profile, view.detail
    doc: dict[str, Any] = {"schema_version": 1, "lang": lang, "kind": view.kind, **_summary(p)}
    if d is not None:
        doc["percentiles"]["total"] = {"p50": d.p50_total_tokens, "p95": d.p95_total_tokens, "p99": d.p99_total_tokens}
        doc["bucket_p95_tokens"] = dict(d.bucket_p95)
        doc["slices_by"] = "time" if d.by_time else "arrival"
        doc["slices"] = [{"start": _time(s.start), "end": _time(s.end), "first_request": s.first_request,
                          "last_request": s.last_request, "total": s.total,
                          "counts": dict(zip(BUCKETS, s.counts, strict=True))} for s in d.slices]
    doc["shift"] = shift_json(p.shift)
    doc["baseline"] = _summary(view.baseline) if view.baseline is not None else None
    doc["baseline_shift"] = shift_json(view.baseline_shift)
    doc["between_scrapes"] = view.between_scrapes
    doc["chart"] = view.chart_path
    doc["workers"] = view.workers
    return doc


# ------------------------------------------------------------------------- text


def _int(x: float | None) -> str:
    return "-" if x is None else f"{int(round(x)):,}"


def _window(cat: Catalog, p: RequestProfile) -> str | None:
    if p.first_at is None or p.last_at is None:
        return None
    minutes = (p.last_at - p.first_at).total_seconds() / 60
    span = (cat.t("span.hours", value=f"{minutes / 60:.1f}") if minutes >= 120
            else cat.t("span.minutes", value=round(minutes)))
    return cat.t("profile_cli.window", first=p.first_at.strftime("%Y-%m-%d %H:%M"),
                 last=p.last_at.strftime("%Y-%m-%d %H:%M"), span=span)


def bucket_lines(cat: Catalog, p: RequestProfile) -> list[str]:
    limits = {name: cat.t("profile_cli.limit", input=i, output=o) for name, i, o in BUCKET_LIMITS}
    limits["XL"] = cat.t("profile_cli.limit_xl")
    width = max(cells(x) for x in limits.values())
    lines = []
    for b in p.buckets:
        bar = "█" * int(round(b.share * _BAR_CHARS))
        label = limits[b.bucket] + " " * (width - cells(limits[b.bucket]))
        lines.append(f"{b.bucket:<3}{label}  {b.count:>10,}  {pct(b.share):>5}%  {bar}".rstrip())
    return lines


def percentile_lines(cat: Catalog, p: RequestProfile, d: ProfileDetail | None) -> list[str]:
    rows = [(cat.t("profile_cli.row_input"), p.p50_input_tokens, p.p95_input_tokens, p.p99_input_tokens,
             p.max_input_tokens),
            (cat.t("profile_cli.row_output"), p.p50_output_tokens, p.p95_output_tokens, p.p99_output_tokens,
             p.max_output_tokens)]
    if d is not None:
        rows.append((cat.t("profile_cli.row_total"), d.p50_total_tokens, d.p95_total_tokens, d.p99_total_tokens, None))
    label_w = max(cells(r[0]) for r in rows) + 2
    head = " " * label_w + "".join(" " * (10 - cells(h)) + h
                                   for h in ("p50", "p95", "p99", cat.t("profile_cli.col_max")))
    out = [head]
    for label, *values in rows:
        out.append(label + " " * (label_w - cells(label)) + "".join(f"{_int(v):>10}" for v in values))
    return out


def shift_line(cat: Catalog, shift: ProfileShift) -> str:
    return cat.t("profile_cli.shift", before=pct(shift.long_share_before), after=pct(shift.long_share_after),
                 before_label=shift_label(cat, shift.before_label), after_label=shift_label(cat, shift.after_label),
                 before_count=shift.before_count, after_count=shift.after_count,
                 delta=f"{shift.delta * 100:+.1f}")


def profile_text(view: ProfileView, lang: str) -> str:
    cat = Catalog.load(lang)
    p, d = view.profile, view.detail
    shifts = []
    if p.shift is not None:
        shifts.append(shift_line(cat, p.shift))
    elif not p.estimated:
        shifts.append(cat.t("profile_cli.no_window_shift"))
    if view.baseline_shift is not None and view.baseline is not None:
        shifts.append(shift_line(cat, view.baseline_shift) + " · " + cat.t("profile_cli.baseline_source",
                                                                         source=view.baseline.source))
        shifts.extend("   " + line for line in _bucket_changes(cat, view.baseline, p))
    alarming = any(s is not None and s.delta >= LONG_SHARE_SHIFT for s in (p.shift, view.baseline_shift))
    notes = []
    if p.estimated:
        notes.append(cat.t("profile_cli.estimated"))
    if view.between_scrapes:
        notes.append(cat.t("profile_cli.between_scrapes"))
    if p.skipped_lines:
        notes.append(cat.t("profile_cli.skipped", skipped=p.skipped_lines))
    chart = None
    if view.chart_path is not None and d is not None:
        chart = cat.t("profile_cli.chart_written", path=view.chart_path, slices=len(d.slices),
                      by=cat.t("profile_cli.by_time" if d.by_time else "profile_cli.by_arrival"))
    p95_buckets = None
    if d is not None:
        p95_buckets = cat.t("profile_cli.bucket_p95", values=" · ".join(
            f"{name} {_int(value)}" for name, value in d.bucket_p95))
    return environment().get_template("profile.txt.j2").render(
        t=cat.t,
        title=cat.t("profile_cli.title", source=p.source, total=p.total),
        window=_window(cat, p), notes=notes, buckets=bucket_lines(cat, p),
        percentiles=percentile_lines(cat, p, d), p95_buckets=p95_buckets, shifts=shifts,
        alarm=cat.t("profile_cli.alarm", threshold=round(LONG_SHARE_SHIFT * 100)) if alarming else None,
        chart=chart,
    )


def _bucket_changes(cat: Catalog, before: RequestProfile, after: RequestProfile) -> list[str]:
    old = {b.bucket: b.share for b in before.buckets}
    return [cat.t("profile_cli.bucket_change", bucket=b.bucket, before=pct(old.get(b.bucket, 0.0)), after=pct(b.share),
                  delta=f"{(b.share - old.get(b.bucket, 0.0)) * 100:+.1f}") for b in after.buckets]
