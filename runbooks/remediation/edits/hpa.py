"""The HPA that scales a workload: `Scale` with an HPA, and `HpaOnQueueDepth`.

- `hpa_scale`: the HPA that scales a workload gets the new replica count as minReplicas (and
  maxReplicas when it would be below it): a change of the Deployment's replicas would be undone;
- `hpa_queue`: an HPA on the engine's queue metric (a Pods metric, average per pod); a new HPA
  when none targets the workload (created; its rollback deletes it), else its metrics replaced.

>>> metrics_summary([{"type": "Resource", "resource": {"name": "cpu"}}])
'Resource:cpu'
"""

from __future__ import annotations

from typing import Any

from runbooks.catalogs.engine_metrics import name
from runbooks.model.changes import HpaOnQueueDepth, Scale
from runbooks.model.errors import UsageError
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.common import KindEdit, get_in, invalid, set_op
from runbooks.remediation.edits.launch_edit import server_container
from runbooks.remediation.edits.reader import ContainerReader
from runbooks.remediation.value_ranges import check_option

#: the engine's queue metric (requests waiting), as its /metrics names it
QUEUE_METRIC = {engine: name(engine, "queue_waiting") for engine in ("vllm", "sglang", "tgi")}
HPA_KIND = "HorizontalPodAutoscaler"


def hpa_for(hpas: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    """The HPA whose scaleTargetRef is this workload (None without one). Several: UsageError."""
    found = [h for h in hpas if (get_in(h, "spec", "scaleTargetRef") or {}).get("kind") == kind
             and (get_in(h, "spec", "scaleTargetRef") or {}).get("name") == name]
    if len(found) > 1:
        raise invalid("HorizontalPodAutoscaler", ", ".join(sorted(get_in(h, "metadata", "name") for h in found)),
                      Phrase("reason.several_hpas", {"kind": kind, "name": name}))
    return found[0] if found else None


def hpa_scale(hpa: dict[str, Any], replicas: int) -> KindEdit:
    """minReplicas to `replicas` (maxReplicas too when below it): the HPA keeps at least that many."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise invalid("--replicas", replicas, Phrase("reason.hpa_min_one", {"hpa": get_in(hpa, "metadata", "name")}))
    spec = hpa.get("spec") or {}
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if (low or 1) == replicas:
        raise UsageError("nothing_to_change", what=Phrase("reason.hpa_min_already", {"replicas": low or 1}))
    changes = [Scale(low, replicas, "minReplicas")]
    ops = set_op("/spec/minReplicas", "minReplicas" in spec, low, replicas)
    if isinstance(high, int) and high < replicas:
        changes.append(Scale(high, replicas, "maxReplicas"))
        ops += set_op("/spec/maxReplicas", True, high, replicas)
    return KindEdit(tuple(changes), tuple(ops))


def queue_metric(workload: dict[str, Any], container: str | None, *, reader: ContainerReader) -> str:
    """The engine's queue metric for the server container."""
    _index, _spec, config = server_container(workload, container, reader=reader)
    return QUEUE_METRIC.get(config.engine or "vllm", QUEUE_METRIC["vllm"])


def metrics_summary(metrics: Any) -> str | None:
    """"Resource:cpu, Pods:vllm:num_requests_waiting" for the human diff."""
    out = []
    for m in metrics or []:
        kind = m.get("type", "?") if isinstance(m, dict) else "?"
        source = m.get(kind[:1].lower() + kind[1:], {}) if isinstance(m, dict) else {}
        name = source.get("name") or get_in(source, "metric", "name") or "?"
        out.append(f"{kind}:{name}")
    return ", ".join(out) or None


def hpa_queue(workload: dict[str, Any], hpa: dict[str, Any] | None, metric: str, target: Any,
              max_replicas: int | None = None) -> KindEdit:
    """Scale on `metric` (a Pods metric, `target` waiting requests per pod on average). With an
    HPA: its metrics replaced by that one. Without: a new HPA named like the workload, from its
    current replicas up to `max_replicas` (default twice as many, at least one more)."""
    target = check_option("--queue-target", target)
    if max_replicas is not None:
        max_replicas = check_option("--hpa-max", max_replicas)
    if not metric or "/" in metric or "%" in metric:
        raise invalid("--queue-metric", metric, Phrase("reason.metric_name"))
    metrics = [{"type": "Pods", "pods": {"metric": {"name": metric},
                                         "target": {"type": "AverageValue", "averageValue": str(target)}}}]
    if hpa is not None:
        if max_replicas is not None:
            raise invalid("--hpa-max", max_replicas, Phrase("reason.hpa_exists", {"hpa": get_in(hpa, "metadata", "name")}))
        spec = hpa.get("spec") or {}
        old = spec.get("metrics")
        if old == metrics:
            raise UsageError("nothing_to_change", what=Phrase("reason.hpa_metrics_already", {"metric": metric, "target": target}))
        return KindEdit((HpaOnQueueDepth(metric, metrics_summary(old), target),),
                        tuple(set_op("/spec/metrics", "metrics" in spec, old, metrics)))
    meta = workload.get("metadata") or {}
    low = max(1, int(get_in(workload, "spec", "replicas") or 1))
    high = max_replicas if max_replicas is not None else max(2 * low, low + 1)
    if isinstance(high, bool) or not isinstance(high, int) or high < low:
        raise invalid("--hpa-max", high, Phrase("reason.hpa_max_low", {"low": low}))
    body = {"apiVersion": "autoscaling/v2", "kind": HPA_KIND,
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "labels": {"app.kubernetes.io/managed-by": "gpumem"}},
            "spec": {"scaleTargetRef": {"apiVersion": workload.get("apiVersion") or "apps/v1",
                                        "kind": workload.get("kind") or "Deployment", "name": meta.get("name")},
                     "minReplicas": low, "maxReplicas": high, "metrics": metrics}}
    return KindEdit((HpaOnQueueDepth(metric, None, target),), create=body)
