"""The fleet use case (`gpumem fleet`): which services are closest to trouble, fleet-wide.

A fixed number of PromQL queries (`collectors.prometheus.fleet`), whatever the number of
services, read from gpumem's recording rules where Prometheus has them loaded, ranked by the runbook's lines (`runbooks.alerts.fleet`). A query that fails costs
its columns, never the view; only when none answers is there nothing to show (exit 3)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.grammar.requests import FleetRequest
from bot.service.connections import cluster_prometheus, named_prometheus, prometheus_client
from bot.service.deps import Deps
from bot.service.outcomes import FleetOutcome, Missing
from collectors.prometheus.client import PrometheusClient
from collectors.prometheus.fleet import DEFAULT_WINDOW_S, read_fleet
from runbooks.alerts.engines import ENGINES
from runbooks.alerts.fleet import rank
from runbooks.model.errors import UsageError

DEFAULT_TIMEOUT_S = 10.0


def fleet_view(client: PrometheusClient, *, now: datetime, engines: Sequence[str] | None = None,
               namespaces: Sequence[str] = (), top: int | None = None, window_s: int | None = None) -> FleetOutcome:
    """Read the fleet through `client` at `now` and rank it; never raises for Prometheus trouble."""
    chosen = tuple(engines) if engines else ENGINES
    window = window_s or DEFAULT_WINDOW_S
    readings = read_fleet(client, now=now, engines=chosen, namespaces=namespaces, window_s=window)
    ranked = rank(readings.services)
    missing = tuple(Missing(n.query, n.columns, n.issue.kind, n.issue.message) for n in readings.not_read)
    return FleetOutcome(rows=ranked[:top] if top else ranked, total=len(ranked), missing=missing,
                        queries=dict(readings.queries), at=now, window_s=window,
                        namespaces=tuple(sorted(set(namespaces))), engines=tuple(engines or ()),
                        read_from="recorded" if readings.recorded else "raw",
                        read_from_reason=readings.recorded_reason, missing_records=readings.missing_records,
                        rules_issue=(readings.rules_issue.kind, readings.rules_issue.message)
                        if readings.rules_issue else None)


def fleet_client(request: FleetRequest, deps: Deps) -> PrometheusClient:
    """The client for --prometheus URL (token: $GPUMEM_PROMETHEUS_TOKEN), else the config's
    Prometheus; UsageError no_prometheus when there is neither."""
    prom = cluster_prometheus(deps.settings, None)  # the default cluster's Prometheus, as triage reads it
    timeout = request.timeout or (prom.timeout_s if prom is not None else DEFAULT_TIMEOUT_S)
    if request.prometheus:
        if not request.prometheus.startswith(("http://", "https://")):
            raise UsageError("bad_prometheus_url", url=request.prometheus)
        return named_prometheus(request.prometheus, deps.env.prometheus_token, timeout)
    if prom is None:
        raise UsageError("no_prometheus")
    return prometheus_client(prom, timeout)


def view_time(at: timedelta | datetime | None, now: datetime) -> datetime:
    """`--at`: a duration back from `now`, or a time; `now` without it."""
    if isinstance(at, timedelta):
        return now - at
    if isinstance(at, datetime):
        return at
    return now


def run_fleet(request: FleetRequest, deps: Deps) -> FleetOutcome:
    """The view for parsed `fleet` arguments, at --at (a time, or a duration back) or now."""
    now = view_time(request.at, deps.now())
    client = fleet_client(request, deps)
    return fleet_view(client, now=now, engines=request.engine, namespaces=tuple(request.namespace or ()), top=request.top)


def fleet_reader(settings: Any) -> Callable[..., FleetOutcome] | None:
    """The fleet view for the Slack bot, read through the config's Prometheus (the default
    cluster's, else the top-level one, as `gpumem fleet` reads it); None when the config names none."""
    prom = cluster_prometheus(settings, None)
    if prom is None:
        return None
    client = prometheus_client(prom)

    def read(namespaces: Sequence[str] = (), engines: Sequence[str] | None = None, top: int | None = None,
             now: datetime | None = None) -> FleetOutcome:
        return fleet_view(client, now=now or datetime.now(UTC), engines=engines, namespaces=namespaces, top=top)

    return read
