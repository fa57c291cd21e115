"""The runbook's five rounds, one module each. `ROUNDS` is the explicit, ordered registry."""

from __future__ import annotations

from collections.abc import Callable

from runbooks.model.report import CheckResult
from runbooks.triage.checks import concurrency, kv_cache, parallelism, platform, static
from runbooks.triage.context import TriageContext

Check = Callable[[TriageContext], CheckResult]

#: (step name, check) in the runbook's order; progress reports count these
ROUNDS: tuple[tuple[str, Check], ...] = (
    ("static", static.check),
    ("kv_cache", kv_cache.check),
    ("concurrency", concurrency.check),
    ("parallelism", parallelism.check),
    ("platform", platform.check),
)
