"""What Prometheus says of a plan's target during the watch: the most used engine's KV cache
usage, the requests waiting and the preemptions of the last few minutes, read at each look.

The selector is the handover's (`collectors.prometheus.promql.service_selector`): the target's pods
labelled directly or through a gateway's `exported_*` labels, for vLLM (V0 and V1) and SGLang.
Three instant queries per look; a Prometheus that cannot answer leaves the watch going, its
look saying so (`bot.actuator.watch`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bot.actuator.watch import PREEMPTION_WINDOW_S, Symptoms
from bot.service.connections import cluster_prometheus, prometheus_client
from collectors.prometheus import promql


def target_symptoms(client: Any, namespace: str, name: str, at: datetime) -> Symptoms:
    """The target's KV cache usage (max over its engines, 0..1), queue (sum) and preemptions
    (their increase over `PREEMPTION_WINDOW_S`) at `at`; None for each without series.
    `client` is a `collectors.prometheus.client.PrometheusClient`."""
    _, sel = promql.service_selector([f"{namespace}/{name}"])
    queries = promql.symptom_queries(sel, PREEMPTION_WINDOW_S)
    values: dict[str, Any] = {}
    for key, query in queries.items():
        result = client.query(query, at=at)
        mine = [s for s in result.series
                if s.labels.get("namespace") == namespace and s.labels.get("deployment") == name and s.points]
        if key == "preemptions":
            reading = promql.eviction_reading(mine)
            values["preemptions"], values["eviction"] = reading if reading else (None, None)
        else:
            values[key] = mine[0].points[-1][1] if mine else None
    return Symptoms(**values)


def _client(settings: Any, cluster: str | None) -> Any:
    """A client for the Prometheus of the plan's cluster, else the top-level one; None: none."""
    prom = cluster_prometheus(settings, cluster)
    return prometheus_client(prom) if prom is not None else None


def symptoms_reader(settings: Any, cluster: str | None, namespace: str, name: str,
                    now: Callable[[], datetime] | None = None) -> Callable[[], Symptoms] | None:
    """What the watch calls at each look (`watch_after(symptoms=...)`); None when no Prometheus
    is configured for the cluster. `now` is the wall clock the queries are evaluated at."""
    client = _client(settings, cluster)
    if client is None:
        return None
    wall = now or (lambda: datetime.now(UTC))
    return lambda: target_symptoms(client, namespace, name, wall())
