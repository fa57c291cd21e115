"""The change kinds beyond server flags, each as the exact JSON patch on the object it belongs to.

Every function reads the object as it is now and returns the typed changes (old -> new, for the
human diff) and RFC 6902 operations that `test` each old value before replacing it; an added
list element goes at its explicit index (never `/-`), so `bot.actuator.apply.inverse_ops` can
turn each patch around for the rollback. Values are written as the API server stores them
(probes with their defaults, quantities in canonical form), so the object re-read after the
write holds exactly what the patch says and a rollback's `test` finds it.

- `hpa_scale`: the HPA that scales a workload gets the new replica count as minReplicas (and
  maxReplicas when it would be below it): a change of the Deployment's replicas would be undone;
- `hpa_queue`: an HPA on the engine's queue metric (a Pods metric, average per pod); a new HPA
  when none targets the workload (created; its rollback deletes it), else its metrics replaced;
- `startup_probe`: a startupProbe polling the engine's health endpoint, failureThreshold x
  periodSeconds covering the load time;
- `max_surge`: strategy.rollingUpdate maxSurge (0: a rollout needs no spare GPU) with
  maxUnavailable 1 so it can still move;
- `shm`: an emptyDir of medium Memory with a sizeLimit mounted at /dev/shm (NCCL with TP > 1);
- `memory_limit`: the container's memory limit (host RAM), and its request when it equals the limit.

Bad input is a UsageError `invalid_field` naming the field, never a traceback; a number or a
quantity outside what gpumem plans (`runbooks.remediation.value_ranges.OPTIONS`, `MEMORY_BYTES`)
is UsageError `flag_value_out_of_range` naming the option, the value and the range.

>>> canonical_quantity("64Gi", "--memory-limit"), canonical_quantity("1024Mi", "x"), canonical_quantity("1536Mi", "x")
('64Gi', '1Gi', '1536Mi')
>>> startup_budget(600)
(10, 60)
"""

from __future__ import annotations

import copy
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from bot.actuator.launch_edit import POD_PATH, server_container
from runbooks.model.changes import (
    AddShm,
    AddStartupProbe,
    Change,
    HpaOnQueueDepth,
    LowerMaxSurge,
    RaiseMemoryLimit,
    Scale,
)
from runbooks.model.errors import UsageError
from runbooks.remediation.value_ranges import check_memory, check_option, shown

#: the health endpoint each engine serves on its HTTP port
HEALTH_PATH = {"vllm": "/health", "sglang": "/health", "tgi": "/health"}
#: the engine's port when neither its flags nor the container name one
DEFAULT_PORT = {"vllm": 8000, "sglang": 30000, "tgi": 80}
#: the engine's queue metric (requests waiting), as its /metrics names it
QUEUE_METRIC = {"vllm": "vllm:num_requests_waiting", "sglang": "sglang:num_queue_reqs", "tgi": "tgi_queue_size"}
PROBE_PERIOD_S = 10
#: the startup budget without an observed load time: 30 x 10 s
DEFAULT_STARTUP_BUDGET_S = 300
SHM_PATH = "/dev/shm"
SHM_VOLUME = "dshm"
HPA_KIND = "HorizontalPodAutoscaler"

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]i|[kMGTPE])?\s*$")
_SURGE = re.compile(r"^(\d+)(%?)$")


@dataclass(frozen=True)
class KindEdit:
    """The typed changes and the operations on the object (`ops`), or the object to create."""

    changes: tuple[Change, ...]
    ops: tuple[dict[str, Any], ...] = ()
    create: dict[str, Any] | None = None


def invalid(field: str, value: Any, why: str) -> UsageError:
    return UsageError("invalid_field", field=field, value=str(value), why=why)


# ----------------------------------------------------------------------------- quantities


def quantity_bytes(text: Any, field: str) -> int:
    """Bytes of a Kubernetes memory quantity ("64Gi", "64G", "68719476736")."""
    m = _QUANTITY.match(str(text))
    if m is None:
        raise invalid(field, text, "expected a memory quantity like 16Gi or 64G")
    number, suffix = m.group(1), m.group(2) or ""
    scale = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    exact = Fraction(number) * scale
    if exact.denominator != 1:
        raise invalid(field, text, "is not a whole number of bytes")
    value = int(exact)
    if value <= 0:
        raise invalid(field, text, "must be more than 0")
    return value


def canonical_quantity(text: Any, field: str) -> str:
    """The quantity as the API server stores it: the largest suffix of its family (binary or
    decimal) that keeps it whole."""
    value = quantity_bytes(text, field)
    if field.startswith("--"):  # what someone asks for (`--shm-size`, `--memory-limit`), not a value read
        check_memory(field, text, value)
    m = _QUANTITY.match(str(text))
    assert m is not None
    table = _BINARY if (m.group(2) or "").endswith("i") else _DECIMAL
    for suffix, scale in sorted(table.items(), key=lambda kv: -kv[1]):
        if value % scale == 0:
            return f"{value // scale}{suffix}"
    return str(value)


# ----------------------------------------------------------------------------- helpers


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _set_op(path: str, present: bool, old: Any, new: Any) -> list[dict[str, Any]]:
    """`test` old then `replace` when the field is there, else `add`."""
    if present:
        return [{"op": "test", "path": path, "value": copy.deepcopy(old)},
                {"op": "replace", "path": path, "value": copy.deepcopy(new)}]
    return [{"op": "add", "path": path, "value": copy.deepcopy(new)}]


def _append_op(path: str, items: Any, item: dict[str, Any], field: str) -> list[dict[str, Any]]:
    """Add `item` at the end of the list at `path` by its index (a missing list is added whole)."""
    if items is None:
        return [{"op": "add", "path": path, "value": [copy.deepcopy(item)]}]
    if not isinstance(items, list):
        raise invalid(field, type(items).__name__, "is not a list")
    return [{"op": "add", "path": f"{path}/{len(items)}", "value": copy.deepcopy(item)}]


# ----------------------------------------------------------------------------- startup probe


def startup_budget(budget_s: int) -> tuple[int, int]:
    """(periodSeconds, failureThreshold) whose product covers `budget_s`."""
    return PROBE_PERIOD_S, max(1, math.ceil(budget_s / PROBE_PERIOD_S))


def startup_probe(workload: dict[str, Any], container: str | None, budget_s: Any) -> KindEdit:
    """A startupProbe on the server container: GET the engine's health path on its port, every
    10 s, failing only after `budget_s` seconds. Replaces a startupProbe that is there."""
    budget_s = check_option("--startup-probe", budget_s)
    index, spec, config = server_container(workload, container)
    engine = config.engine or "vllm"
    port = config.port or _single_port(spec) or DEFAULT_PORT.get(engine, 8000)
    health = HEALTH_PATH.get(engine, "/health")
    period, failures = startup_budget(budget_s)
    probe = {"httpGet": {"path": health, "port": port, "scheme": "HTTP"}, "periodSeconds": period,
             "failureThreshold": failures, "timeoutSeconds": 1, "successThreshold": 1}
    old = spec.get("startupProbe")
    if old == probe:
        raise UsageError("nothing_to_change", what=f"startupProbe of {spec.get('name')} already allows {budget_s} s")
    old_budget = None
    if isinstance(old, dict):
        old_budget = int(old.get("periodSeconds") or 10) * int(old.get("failureThreshold") or 3)
    path = f"{POD_PATH}/containers/{index}/startupProbe"
    return KindEdit((AddStartupProbe(spec.get("name"), health, old_budget, period * failures),),
                    tuple(_set_op(path, "startupProbe" in spec, old, probe)))


def _single_port(spec: dict[str, Any]) -> int | None:
    ports = [p.get("containerPort") for p in spec.get("ports") or [] if isinstance(p, dict)]
    return ports[0] if len(ports) == 1 and isinstance(ports[0], int) else None


# ----------------------------------------------------------------------------- rollout step


def surge_value(text: Any, field: str = "--max-surge") -> int | str:
    """A maxSurge/maxUnavailable value: a whole number or a percentage ("25%")."""
    m = _SURGE.match(str(text).strip())
    if m is None or (m.group(2) and (len(m.group(1)) > 3 or int(m.group(1)) > 100)):
        raise invalid(field, shown(text), "expected a whole number or a percentage like 25%")
    return f"{int(m.group(1))}%" if m.group(2) else check_option("--max-surge", m.group(1))


def max_surge(workload: dict[str, Any], surge: Any) -> KindEdit:
    """strategy.rollingUpdate.maxSurge to `surge`; with 0, maxUnavailable to 1 (a rollout that may
    neither add a pod nor take one away cannot move)."""
    new_surge = surge_value(surge)
    strategy = _get(workload, "spec", "strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        raise invalid("spec.strategy.type", strategy.get("type"), "maxSurge applies to RollingUpdate only")
    rolling = strategy.get("rollingUpdate")
    changes, ops = [], []
    if rolling is None:  # the API server defaults it; an object from a file may lack it
        rolling = {}
        if "strategy" in (workload.get("spec") or {}):
            ops.append({"op": "add", "path": "/spec/strategy/rollingUpdate", "value": {}})
        else:
            ops.append({"op": "add", "path": "/spec/strategy", "value": {"type": "RollingUpdate", "rollingUpdate": {}}})
    wanted = [("maxSurge", new_surge)]
    if new_surge in (0, "0%"):
        wanted.append(("maxUnavailable", 1))
    for field, value in wanted:
        old = rolling.get(field)
        if old == value:
            continue
        changes.append(LowerMaxSurge(field, old, value))
        ops += _set_op(f"/spec/strategy/rollingUpdate/{field}", field in rolling, old, value)
    if not changes:
        raise UsageError("nothing_to_change", what=f"maxSurge {new_surge}")
    return KindEdit(tuple(changes), tuple(ops))


# ----------------------------------------------------------------------------- /dev/shm


def shm(workload: dict[str, Any], container: str | None, size: Any) -> KindEdit:
    """An emptyDir (medium Memory, sizeLimit `size`) at /dev/shm in the server container; when
    one is mounted there already, its sizeLimit changes."""
    limit = canonical_quantity(size, "--shm-size")
    index, spec, _config = server_container(workload, container)
    pod = _get(workload, "spec", "template", "spec") or {}
    volumes = pod.get("volumes")
    mounts = spec.get("volumeMounts")
    mount = next((m for m in mounts or [] if isinstance(m, dict) and m.get("mountPath") == SHM_PATH), None)
    name = spec.get("name")
    if mount is not None:
        at = next((i for i, v in enumerate(volumes or []) if isinstance(v, dict) and v.get("name") == mount.get("name")),
                  None)
        volume = (volumes or [])[at] if at is not None else None
        empty = volume.get("emptyDir") if isinstance(volume, dict) else None
        if not isinstance(empty, dict) or empty.get("medium") != "Memory":
            raise invalid(f"spec.template.spec.volumes[{mount.get('name')}]", "not an emptyDir of medium Memory",
                          "/dev/shm is mounted from another volume; change it by hand")
        if empty.get("sizeLimit") == limit:
            raise UsageError("nothing_to_change", what=f"/dev/shm sizeLimit {limit}")
        new = {**empty, "sizeLimit": limit}
        return KindEdit((AddShm(name, empty.get("sizeLimit"), limit),),
                        tuple(_set_op(f"{POD_PATH}/volumes/{at}/emptyDir", True, empty, new)))
    taken = {v.get("name") for v in volumes or [] if isinstance(v, dict)}
    volume_name = SHM_VOLUME if SHM_VOLUME not in taken else "gpumem-dshm"
    if volume_name in taken:
        raise invalid("spec.template.spec.volumes", volume_name, "a volume of that name exists already")
    ops = _append_op(f"{POD_PATH}/volumes", volumes, {"name": volume_name, "emptyDir": {"medium": "Memory",
                                                                                           "sizeLimit": limit}},
                     "spec.template.spec.volumes")
    ops += _append_op(f"{POD_PATH}/containers/{index}/volumeMounts", mounts,
                      {"name": volume_name, "mountPath": SHM_PATH}, f"containers[{name}].volumeMounts")
    return KindEdit((AddShm(name, None, limit),), tuple(ops))


# ----------------------------------------------------------------------------- memory limit


def memory_limit(workload: dict[str, Any], container: str | None, limit: Any) -> KindEdit:
    """The server container's memory limit to `limit` (a raise), and its memory request with it
    when the request equals the limit (Guaranteed QoS stays Guaranteed)."""
    new = canonical_quantity(limit, "--memory-limit")
    index, spec, _config = server_container(workload, container)
    resources = spec.get("resources") if isinstance(spec.get("resources"), dict) else {}
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
    old = limits.get("memory")
    where = f"containers[{spec.get('name')}].resources.limits.memory"
    if old is None:
        raise invalid(where, "(none)", "has no memory limit to raise: the container is not limited by one")
    old_bytes = quantity_bytes(old, where)
    if quantity_bytes(new, "--memory-limit") <= old_bytes:
        raise invalid("--memory-limit", new, f"is not above the current limit {old}")
    base = f"{POD_PATH}/containers/{index}/resources"
    changes = [RaiseMemoryLimit(spec.get("name"), "limits.memory", old, new)]
    ops = _set_op(f"{base}/limits/memory", True, old, new)
    request = requests.get("memory")
    if request is not None and quantity_bytes(request, "resources.requests.memory") == old_bytes:
        changes.append(RaiseMemoryLimit(spec.get("name"), "requests.memory", request, new))
        ops += _set_op(f"{base}/requests/memory", True, request, new)
    return KindEdit(tuple(changes), tuple(ops))


# ----------------------------------------------------------------------------- HPAs


def hpa_for(hpas: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any] | None:
    """The HPA whose scaleTargetRef is this workload (None without one). Several: UsageError."""
    found = [h for h in hpas if (_get(h, "spec", "scaleTargetRef") or {}).get("kind") == kind
             and (_get(h, "spec", "scaleTargetRef") or {}).get("name") == name]
    if len(found) > 1:
        raise invalid("HorizontalPodAutoscaler", ", ".join(sorted(_get(h, "metadata", "name") for h in found)),
                      f"several HPAs target {kind} {name}; fix that first")
    return found[0] if found else None


def hpa_scale(hpa: dict[str, Any], replicas: int) -> KindEdit:
    """minReplicas to `replicas` (maxReplicas too when below it): the HPA keeps at least that many."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise invalid("--replicas", replicas, f"HPA {_get(hpa, 'metadata', 'name')} scales this workload: "
                                              "its minReplicas must be at least 1")
    spec = hpa.get("spec") or {}
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if (low or 1) == replicas:
        raise UsageError("nothing_to_change", what=f"HPA minReplicas {low or 1}")
    changes = [Scale(low, replicas, "minReplicas")]
    ops = _set_op("/spec/minReplicas", "minReplicas" in spec, low, replicas)
    if isinstance(high, int) and high < replicas:
        changes.append(Scale(high, replicas, "maxReplicas"))
        ops += _set_op("/spec/maxReplicas", True, high, replicas)
    return KindEdit(tuple(changes), tuple(ops))


def queue_metric(workload: dict[str, Any], container: str | None) -> str:
    """The engine's queue metric for the server container."""
    _index, _spec, config = server_container(workload, container)
    return QUEUE_METRIC.get(config.engine or "vllm", QUEUE_METRIC["vllm"])


def metrics_summary(metrics: Any) -> str | None:
    """"Resource:cpu, Pods:vllm:num_requests_waiting" for the human diff."""
    out = []
    for m in metrics or []:
        kind = m.get("type", "?") if isinstance(m, dict) else "?"
        source = m.get(kind[:1].lower() + kind[1:], {}) if isinstance(m, dict) else {}
        name = source.get("name") or _get(source, "metric", "name") or "?"
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
        raise invalid("--queue-metric", metric, "a metric name without / or %")
    metrics = [{"type": "Pods", "pods": {"metric": {"name": metric},
                                         "target": {"type": "AverageValue", "averageValue": str(target)}}}]
    if hpa is not None:
        if max_replicas is not None:
            raise invalid("--hpa-max", max_replicas, f"HPA {_get(hpa, 'metadata', 'name')} exists: change its "
                                                       "maxReplicas with --replicas or by hand")
        spec = hpa.get("spec") or {}
        old = spec.get("metrics")
        if old == metrics:
            raise UsageError("nothing_to_change", what=f"HPA metrics already {metric} {target}")
        return KindEdit((HpaOnQueueDepth(metric, metrics_summary(old), target),),
                        tuple(_set_op("/spec/metrics", "metrics" in spec, old, metrics)))
    meta = workload.get("metadata") or {}
    low = max(1, int(_get(workload, "spec", "replicas") or 1))
    high = max_replicas if max_replicas is not None else max(2 * low, low + 1)
    if isinstance(high, bool) or not isinstance(high, int) or high < low:
        raise invalid("--hpa-max", high, f"must be at least the current replicas ({low})")
    body = {"apiVersion": "autoscaling/v2", "kind": HPA_KIND,
            "metadata": {"name": meta.get("name"), "namespace": meta.get("namespace"),
                         "labels": {"app.kubernetes.io/managed-by": "gpumem"}},
            "spec": {"scaleTargetRef": {"apiVersion": workload.get("apiVersion") or "apps/v1",
                                        "kind": workload.get("kind") or "Deployment", "name": meta.get("name")},
                     "minReplicas": low, "maxReplicas": high, "metrics": metrics}}
    return KindEdit((HpaOnQueueDepth(metric, None, target),), create=body)
