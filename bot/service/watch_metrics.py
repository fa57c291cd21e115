"""What Prometheus says of a plan's target during the watch: the most used engine's KV cache
usage, the requests waiting and the preemptions of the last few minutes, read at each look.

The selector is the handover's (`bot.service.handover._by_service`): the target's pods
labelled directly or through a gateway's `exported_*` labels, for vLLM (V0 and V1) and SGLang.
Three instant queries per look; a Prometheus that cannot answer leaves the watch going, its
look saying so (`bot.actuator.watch`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bot.actuator.watch import PREEMPTION_WINDOW_S, Symptoms


def target_symptoms(client: Any, namespace: str, name: str, at: datetime) -> Symptoms:
    """The target's KV cache usage (max over its engines, 0..1), queue (sum) and preemptions
    (their increase over `PREEMPTION_WINDOW_S`) at `at`; None for each without series.
    `client` is a `collectors.prometheus.client.PrometheusClient`."""
    from bot.service.handover import _BY, _by_service
    from collectors.prometheus import promql

    _, sel = _by_service([f"{namespace}/{name}"])
    window = f"{PREEMPTION_WINDOW_S}s"
    queries = {
        "kv_usage": f"max {_BY} ({sel(promql.USAGE_NAMES)})",
        "queue": f"sum {_BY} ({sel(promql.QUEUE_NAMES)})",
        "preemptions": f"sum {_BY} ({sel(promql.PREEMPTION_NAMES, wrap=lambda s: f'increase({s}[{window}])')})",
    }
    values: dict[str, float | None] = {}
    for key, query in queries.items():
        result = client.query(query, at=at)
        values[key] = next((s.points[-1][1] for s in result.series
                            if s.labels.get("namespace") == namespace and s.labels.get("deployment") == name
                            and s.points), None)
    return Symptoms(**values)


def _client(settings: Any, cluster: str | None) -> Any:
    """A client for the Prometheus of the plan's cluster, else the top-level one; None: none."""
    configured = settings.cluster(cluster)
    prom = (configured.prometheus if configured else None) or settings.prometheus
    if prom is None:
        return None
    from collectors.prometheus.client import PrometheusClient

    return PrometheusClient(prom.url, bearer_token=prom.bearer_token.reveal() if prom.bearer_token else None,
                            basic_auth=(prom.username, prom.password.reveal()) if prom.username and prom.password
                            else None, timeout_s=prom.timeout_s, verify=prom.ca_file or True)


def symptoms_reader(settings: Any, cluster: str | None, namespace: str, name: str,
                    now: Callable[[], datetime] | None = None) -> Callable[[], Symptoms] | None:
    """What the watch calls at each look (`watch_after(symptoms=...)`); None when no Prometheus
    is configured for the cluster. `now` is the wall clock the queries are evaluated at."""
    client = _client(settings, cluster)
    if client is None:
        return None
    wall = now or (lambda: datetime.now(UTC))
    return lambda: target_symptoms(client, namespace, name, wall())
