"""The dashboards use case (`gpumem dashboards`): the runbook's Grafana dashboards for one engine
or for all three, built from the series tables the alert rules read.

>>> [d.uid for d in dashboards("sglang").dashboards]
['gpumem-sglang']
>>> [d.engine for d in dashboards(None).dashboards]
['vllm', 'sglang', 'tgi']
"""

from __future__ import annotations

from bot.service.outcomes import DashboardsOutcome
from runbooks.alerts.dashboards import build_dashboards
from runbooks.alerts.engines import ENGINES
from runbooks.model.errors import UsageError


def dashboards(engine: str | None) -> DashboardsOutcome:
    """The dashboard of `engine`, or of every engine when None; an unknown engine raises
    UsageError("unknown_engine"), worded from `dashboards.error.unknown_engine`."""
    if engine is not None and engine not in ENGINES:
        raise UsageError("unknown_engine", engine=engine, engines=", ".join(ENGINES))
    return DashboardsOutcome(build_dashboards((engine,) if engine else ENGINES))
