"""Small helpers shared by the checks (a check module imports no other: each round stands alone)."""

from __future__ import annotations

from runbooks.model.evidence import ReadIssue
from runbooks.model.report import Fact, fact
from runbooks.triage.context import TriageContext


def missing(kind: str, issues: tuple[ReadIssue, ...], *sources: str) -> Fact:
    """A 'not checked' fact: which evidence kind was absent, and why if a source said why."""
    for issue in issues:
        if issue.source in sources or any(issue.source.startswith(s) for s in sources):
            return fact("missing_" + kind, issue.source, reason=issue.message, why=issue.kind)
    return fact("missing_" + kind, None, reason=None, why="missing")


def gib(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def longest_above(series, threshold: float) -> float:
    """Seconds of the longest run of a time series at or above `threshold` (0 when none).

    >>> from datetime import datetime, timedelta
    >>> t0 = datetime(2026, 1, 1)
    >>> longest_above(tuple((t0 + timedelta(minutes=i), v) for i, v in enumerate([1, 13, 14, 15, 2])), 12)
    120.0
    """
    best = 0.0
    start = None
    for at, value in series:
        if value >= threshold:
            if start is None:
                start = at
            best = max(best, (at - start).total_seconds())
        else:
            start = None
    return best


def visible_gpus(ctx: TriageContext) -> int | None:
    """How many GPUs the engine could see: CUDA_VISIBLE_DEVICES, a launch's `--gpus`, the
    pod's request, else the cards nvidia-smi lists."""
    cfg = ctx.config
    env = cfg.env if cfg else {}
    ids = [x for x in (env.get("CUDA_VISIBLE_DEVICES") or "").split(",") if x.strip()]
    if ids:
        return len(ids)
    logs = ctx.evidence.logs
    counts = [x.visible_count for x in (logs.launches if logs else ()) if x.visible_count]
    if counts:
        return max(counts)
    if ctx.gpus_requested:
        return ctx.gpus_requested
    gpus = ctx.evidence.gpus
    return len(gpus.devices) if gpus and len(gpus.devices) > 1 else None
