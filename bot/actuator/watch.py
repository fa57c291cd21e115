"""After a write: is the change holding? One look (`look`) and a watch window (`watch`).

A look reads the workload's status (observedGeneration, updated, ready and available
replicas, the Progressing condition) and the pods of the new revision: their restarts, and the
CUDA OOM, preemption and reject lines in their logs (the previous container's too). It answers

- `failed`: the rollout hit its progress deadline, or new pods crash-loop or log a CUDA OOM;
- `symptoms_remain`: rolled out, but the new pods still log KV-cache preemptions or rejects;
- `held`: rolled out, the new pods ready, no restart, none of those lines;
- `rolling_out`: not decided yet.

`watch` looks every `poll_s` until the window ends or the rollout fails, and returns the last
look ("held" only at the end of the window: a change that fails in minute 9 did not hold).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.actuator.writer import KubeWriter
from collectors.kube.rest import path
from collectors.kube.selectors import selector_query

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
_PRESSURE = re.compile(r"preempted|[Pp]reemption|insufficient KV cache|KV cache (is )?full|retract", re.I)
REVISION = "deployment.kubernetes.io/revision"


@dataclass(frozen=True)
class Look:
    outcome: str
    observed_generation: int | None
    replicas: int
    updated: int
    ready: int
    available: int
    new_pods: tuple[str, ...] = ()
    restarts: int = 0
    oom_lines: int = 0
    pressure_lines: int = 0
    #: why, in a few words each ("progress deadline exceeded", "2 restarts in new pods", ...)
    notes: tuple[str, ...] = field(default=())


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _new_revision_hash(writer: KubeWriter, namespace: str, deployment: dict[str, Any], query: str) -> str | None:
    revision = ((deployment.get("metadata") or {}).get("annotations") or {}).get(REVISION)
    sets = writer.rest.get_json(path("apis", "apps", "v1", "namespaces", namespace, "replicasets"),
                                {"labelSelector": query}, timeout_s=writer.timeout_s)
    for rs in sets.get("items") or []:
        meta = rs.get("metadata") or {}
        if revision is not None and (meta.get("annotations") or {}).get(REVISION) == revision:
            return (meta.get("labels") or {}).get("pod-template-hash")
    return None


def _log(writer: KubeWriter, namespace: str, pod: str, container: str, previous: bool) -> str:
    try:
        return writer.rest.get_text(path("api", "v1", "namespaces", namespace, "pods", pod, "log"),
                                    {"container": container, "previous": True if previous else None,
                                     "tailLines": 2000}, timeout_s=writer.timeout_s)
    except Exception:  # no previous container, a log not there yet: nothing to count
        return ""


def look(writer: KubeWriter, namespace: str, name: str, generation: int | None) -> Look:
    """One look at a Deployment after a write that made `generation`."""
    obj = writer.read("Deployment", namespace, name)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    replicas = int(spec.get("replicas") or 0)
    observed = status.get("observedGeneration")
    counts = {k: int(status.get(k) or 0) for k in ("updatedReplicas", "readyReplicas", "availableReplicas")}
    query = selector_query(spec.get("selector"), source="watch")
    digest = _new_revision_hash(writer, namespace, obj, query)
    pods = writer.rest.get_json(path("api", "v1", "namespaces", namespace, "pods"), {"labelSelector": query},
                                timeout_s=writer.timeout_s).get("items") or []
    new = [p for p in pods if digest and ((p.get("metadata") or {}).get("labels") or {}).get("pod-template-hash") == digest]
    restarts = ooms = pressure = 0
    for pod in new:
        pod_name = (pod.get("metadata") or {}).get("name", "")
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            restarts += int(cs.get("restartCount") or 0)
            for previous in ((True, False) if cs.get("restartCount") else (False,)):
                text = _log(writer, namespace, pod_name, cs.get("name", ""), previous)
                ooms += len(_OOM.findall(text))
                pressure += len(_PRESSURE.findall(text))
    notes: list[str] = []
    progressing = _condition(status, "Progressing")
    rolled_out = (observed is not None and generation is not None and observed >= generation
                  and counts["updatedReplicas"] == replicas == counts["availableReplicas"]
                  and int(status.get("replicas") or 0) == replicas)
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        notes.append("progress deadline exceeded")
    if restarts:
        notes.append(f"{restarts} restarts in new pods")
    if ooms:
        notes.append(f"{ooms} CUDA OOM lines in new pods' logs")
    if pressure:
        notes.append(f"{pressure} preemption or reject lines in new pods' logs")
    if notes and (progressing.get("reason") == "ProgressDeadlineExceeded" or restarts or ooms):
        outcome = "failed"
    elif rolled_out and pressure:
        outcome = "symptoms_remain"
    elif rolled_out:
        outcome = "held"
    else:
        outcome = "rolling_out"
    return Look(outcome, observed, replicas, counts["updatedReplicas"], counts["readyReplicas"],
                counts["availableReplicas"], tuple(sorted((p.get("metadata") or {}).get("name", "") for p in new)),
                restarts, ooms, pressure, tuple(notes))


def watch(writer: KubeWriter, namespace: str, name: str, generation: int | None, window_s: float,
          poll_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep, on_look: Callable[[Look], None] | None = None) -> Look:
    """Look until the window ends or the change fails; the last look decides."""
    end = clock() + window_s
    while True:
        seen = look(writer, namespace, name, generation)
        if on_look is not None:
            on_look(seen)
        if seen.outcome == "failed" or clock() >= end:
            return seen if seen.outcome != "rolling_out" else Look(**{**seen.__dict__, "outcome": "failed",
                                                                       "notes": (*seen.notes, "not rolled out "
                                                                                 "within the watch window")})
        sleep(min(poll_s, max(0.0, end - clock())))
