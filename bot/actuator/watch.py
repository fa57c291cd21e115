"""After a write: is the change holding? One look (`look`) and a watch window (`watch`).

A look reads the workload's status and the pods of the new revision: their restarts, and
the CUDA OOM, preemption and reject lines in their logs (the previous container's too). Per kind:

- a Deployment: observedGeneration, updated, ready and available replicas, the Progressing
  condition (its progress deadline fails the look); the pods of the ReplicaSet of its revision;
- a StatefulSet: observedGeneration, updateRevision and currentRevision, updatedReplicas and
  readyReplicas; rolled out once every pod at or above `updateStrategy.rollingUpdate.partition`
  runs the update revision and all are ready (with no partition, the current revision is the
  update revision); a partition or OnDelete is said in the notes; the pods labelled with the
  update revision (`controller-revision-hash`). A StatefulSet has no progress deadline: what
  fails it is its new pods' restarts and OOM lines, or the window ending before it rolled out;
- a LeaderWorkerSet: its status (updatedReplicas and readyReplicas in groups, the Available and
  UpdateInProgress conditions, at the object's generation where they carry one) and its leader
  StatefulSet's rollout as above, which must have seen the generation its controller's rewrite
  makes; the pods, leaders and workers, labelled with the leader template's revision hash.

Only
what the change produced counts. A `Baseline` taken right before the write names the pods that
ran then, with each container's restart count and the time of its last log line: a pod not in
it is new and counts whole; a pod in it counts only the restarts since and the log lines
stamped after (a replica change makes no new revision, so the pods that were running keep
their earlier restarts and OOM lines, and those never count). Without a baseline every pod of
the current revision counts whole (right for a template change, whose pods are all new).

With a Prometheus (`symptoms`, read by the caller), each look also carries the target's KV
cache usage, queue and the preemptions of the last `PREEMPTION_WINDOW_S`. It answers

- `failed`: the rollout hit its progress deadline, or pods restart or log a CUDA OOM since the change;
- `symptoms_remain`: rolled out, but the pods still log KV-cache preemptions or rejects, or KV
  cache usage is at `KV_USAGE_HIGH` or above, or preemptions are still rising;
- `held`: rolled out, the new pods ready, no restart, none of those lines or symptoms;
- `rolling_out`: not decided yet.

With `written` (`WrittenObject`: the object the plan wrote and how to compare it with the plan), each
look also re-reads that object, and a field the plan changed that no longer holds what gpumem
wrote makes the look `reverted`, whatever the rollout says: another writer put it back (a
controller that derives the field from its owner, a GitOps sync). Who and when come from the
object's managedFields (`field_owner`: the entry that owns the field, its manager and time);
where they name nobody but gpumem, the revert says the manager is not recorded, with the time
the watch saw it.

`watch` looks every `poll_s` until the window ends, the rollout fails or a field is reverted,
and returns the last look ("held" only at the end of the window: a change that fails in minute
9 did not hold).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.actuator.writer import FIELD_MANAGER, KubeWriter
from collectors.kube.client import Call
from collectors.kube.objects import typed as typed_failure
from collectors.kube.rest import path
from collectors.kube.selectors import selector_query
from collectors.prometheus.client import PrometheusError
from runbooks.model.errors import GpumemError, TemporaryError
from runbooks.model.phrases import Phrase

_OOM = re.compile(r"CUDA out of memory|OutOfMemoryError")
_PRESSURE = re.compile(r"preempted|[Pp]reemption|insufficient KV cache|KV cache (is )?full|retract", re.I)
#: the RFC 3339 time the kubelet puts before each line with timestamps=true
_STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")
REVISION = "deployment.kubernetes.io/revision"
#: KV cache usage (a fraction) at or above which the symptoms remain
KV_USAGE_HIGH = 0.90
#: preemptions are "still rising" when they grew over this many seconds before the look
PREEMPTION_WINDOW_S = 120
#: a container whose log could not be read at the baseline: its lines never count, only its restarts
UNREAD = "-"


@dataclass(frozen=True)
class Baseline:
    """The pods of the workload right before the write: per pod, per container, the restart
    count and the time of the last log line then (None: no stamped line yet; `UNREAD`: the log
    could not be read); per pod its uid (a StatefulSet's pod made again keeps its name: a pod
    of that name with another uid is new)."""

    restarts: Mapping[str, Mapping[str, int]]
    marks: Mapping[str, Mapping[str, str | None]]
    uids: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"restarts": {p: dict(c) for p, c in self.restarts.items()},
                               "marks": {p: dict(c) for p, c in self.marks.items()}}
        if self.uids:
            doc["uids"] = dict(self.uids)
        return doc

    def ran(self, pod: dict[str, Any]) -> bool:
        """Whether `pod` is one that ran before the write (its name, and its uid where recorded)."""
        meta = pod.get("metadata") or {}
        name = meta.get("name", "")
        recorded = self.uids.get(name)
        return name in self.restarts and (recorded is None or recorded == meta.get("uid"))

    @classmethod
    def from_json(cls, doc: Any) -> Baseline | None:
        """The baseline a `to_json` wrote; None for anything else (a plan applied without one)."""
        if not isinstance(doc, dict) or not isinstance(doc.get("restarts"), dict) or not isinstance(doc.get("marks"), dict):
            return None
        restarts: dict[str, dict[str, int]] = {}
        for pod, containers in doc["restarts"].items():
            if not isinstance(containers, dict):
                return None
            restarts[str(pod)] = {str(c): int(n) for c, n in containers.items() if isinstance(n, int)}
        marks: dict[str, dict[str, str | None]] = {}
        for pod, containers in doc["marks"].items():
            if not isinstance(containers, dict):
                return None
            marks[str(pod)] = {str(c): m if isinstance(m, str) else None for c, m in containers.items()}
        raw = doc.get("uids")
        uids = {str(p): u for p, u in raw.items() if isinstance(u, str)} if isinstance(raw, dict) else {}
        return cls(restarts, marks, uids)


@dataclass(frozen=True)
class Symptoms:
    """What Prometheus says of the target at a look: the most used engine's KV cache usage
    (0..1), the requests waiting, the preemptions in the last `PREEMPTION_WINDOW_S` (None: no
    such series); `error` when it could not be read."""

    kv_usage: float | None = None
    queue: float | None = None
    preemptions: float | None = None
    error: str | Phrase | None = None
    #: the seconds `preemptions` counts over
    window_s: int = PREEMPTION_WINDOW_S
    #: the engine's word for what `preemptions` counts ("preemption", "retraction", "none");
    #: None: not known
    eviction: str | None = None


@dataclass(frozen=True)
class Reverted:
    """A field the plan changed that no longer holds what gpumem wrote, as a look found it: its
    JSON pointer, the value before gpumem, gpumem's, the value now (a credential masked), and
    who wrote it: the managedFields entry that owns the field now (`manager`, its `operation`
    and `at`, RFC 3339), or None when managedFields name nobody but gpumem. `seen_at`: when the
    watch saw it (UTC, RFC 3339)."""

    path: str
    before: Any
    gpumem: Any
    now: Any
    manager: str | None
    at: str | None
    seen_at: str
    operation: str | None = None

    @property
    def put_back(self) -> bool:
        """Whether the value is back to what it was before gpumem (else a third value)."""
        return _same(self.now, self.before)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "before": self.before, "gpumem": self.gpumem, "now": self.now,
                "manager": self.manager, "operation": self.operation, "at": self.at, "seen_at": self.seen_at,
                "put_back": self.put_back}

    @classmethod
    def from_json(cls, doc: Any) -> Reverted | None:
        """The revert a `to_json` wrote (an audit row); None for anything else."""
        if not isinstance(doc, dict) or not isinstance(doc.get("path"), str) or not isinstance(doc.get("seen_at"), str):
            return None

        def text(key: str) -> str | None:
            value = doc.get(key)
            return value if isinstance(value, str) and value else None

        return cls(doc["path"], doc.get("before"), doc.get("gpumem"), doc.get("now"), text("manager"), text("at"),
                   doc["seen_at"], text("operation"))


#: compares the object a plan wrote with the plan: (row with path, before, gpumem, now; whether
#: the value now is gpumem's), per field the plan changed (`bot.actuator.apply.three_way`'s rows)
Compare = Callable[[dict[str, Any]], Sequence[dict[str, Any]]]


@dataclass(frozen=True)
class WrittenObject:
    """The object a plan wrote (a Deployment, the HPA that scales it), for the watch to re-read
    at each look, and `compare`: its rows per changed field (`bot.actuator.apply.three_way`)."""

    kind: str
    name: str
    compare: Compare
    #: the plan's patch: each `replace`/`add` value is compared with the object unmasked (the
    #: rows' values are masked for showing; a masked value must not read as a revert)
    ops: tuple[dict[str, Any], ...] = ()


def _same(a: Any, b: Any) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _steps(pointer: str) -> list[str]:
    return [raw.replace("~1", "/").replace("~0", "~") for raw in pointer.lstrip("/").split("/")] if pointer else []


def _element_key(node: dict[str, Any], index: int, element: Any) -> str | None:
    """The fieldsV1 key of list element `index` (`element`, as the object has it): `k:{...}` of
    an associative list (its merge keys match the element's), `v:VALUE` of a set, `i:N`."""
    for key in node:
        if key.startswith("k:") and isinstance(element, dict):
            try:
                keys = json.loads(key[2:])
            except ValueError:
                continue
            if isinstance(keys, dict) and keys and all(_same(element.get(k), v) for k, v in keys.items()):
                return key
        elif key.startswith("v:"):
            try:
                if _same(json.loads(key[2:]), element):
                    return key
            except ValueError:
                continue
        elif key == f"i:{index}":
            return key
    return None


def _owns(fields: Any, steps: list[str], obj: Any) -> bool:
    """Whether a managedFields entry's fieldsV1 owns the field at `steps` of `obj`: the field
    itself, or a whole field above it (an atomic list such as `args`, or a leaf `{}`)."""
    node, value = fields, obj
    for step in steps:
        if not isinstance(node, dict):
            return False
        if isinstance(value, list):
            index = int(step) if step.isascii() and step.isdigit() else -1
            element = value[index] if 0 <= index < len(value) else None
            key = _element_key(node, index, element)
            value = element
        else:
            key = f"f:{step}"
            value = value.get(step) if isinstance(value, dict) else None
        child = node.get(key) if key is not None else None
        if child is None:
            return False
        if child == {}:
            return True
        node = child
    return isinstance(node, dict) and "." in node


def field_owner(obj: dict[str, Any], pointer: str) -> tuple[str, str | None, str | None] | None:
    """(manager, operation, time) of the managedFields entry that owns the field at JSON pointer
    `pointer` of `obj`, the newest when several do (server-side apply shares a field); None when
    no entry does (no managedFields, or none covering the field).

    >>> obj = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "args": ["--x"]}]}}},
    ...        "metadata": {"managedFields": [{"manager": "kubectl", "operation": "Update", "time": "2026-01-01T00:00:00Z",
    ...            "fieldsV1": {"f:spec": {"f:replicas": {}}}},
    ...          {"manager": "argocd-controller", "operation": "Update", "time": "2026-01-01T14:02:00Z",
    ...            "fieldsV1": {"f:spec": {"f:template": {"f:spec": {"f:containers": {
    ...                'k:{"name":"vllm"}': {".": {}, "f:args": {}}}}}}}}]}}
    >>> field_owner(obj, "/spec/template/spec/containers/0/args/0")
    ('argocd-controller', 'Update', '2026-01-01T14:02:00Z')
    >>> field_owner(obj, "/spec/replicas")[0], field_owner(obj, "/spec/paused")
    ('kubectl', None)
    """
    steps = _steps(pointer)
    found = []
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if isinstance(entry, dict) and steps and _owns(entry.get("fieldsV1") or {}, steps, obj):
            found.append((str(entry.get("manager") or ""), entry.get("operation"), entry.get("time")))
    if not found:
        return None
    manager, operation, at = max(found, key=lambda f: str(f[2] or ""))
    return manager, operation if isinstance(operation, str) else None, at if isinstance(at, str) else None


def _pointer(obj: Any, pointer: str) -> Any:
    for key in _steps(pointer):
        if isinstance(obj, list):
            obj = obj[int(key)] if key.isascii() and key.isdigit() and int(key) < len(obj) else None
        elif isinstance(obj, dict):
            obj = obj.get(key)
        else:
            return None
    return obj


def _held(obj: dict[str, Any], ops: Sequence[dict[str, Any]]) -> dict[str, bool]:
    """Per path a `replace` or `add` of `ops` writes, whether `obj` holds that value (unmasked)."""
    return {str(op.get("path")): _same(_pointer(obj, str(op.get("path") or "")), op.get("value"))
            for op in ops if op.get("op") in ("replace", "add")}


def reverted_fields(obj: dict[str, Any], compare: Compare, seen_at: str,
                    ops: Sequence[dict[str, Any]] = ()) -> tuple[Reverted, ...]:
    """The fields of `obj` the plan changed that no longer hold gpumem's value (compared
    unmasked against the plan's `ops` where given), each with its writer from managedFields
    (None when they name nobody, or only gpumem)."""
    held = _held(obj, ops)
    out = []
    for row in compare(obj):
        path = str(row.get("path") or "")
        if held.get(path, _same(row.get("now"), row.get("gpumem"))):
            continue
        owner = field_owner(obj, str(row.get("path") or ""))
        if owner is not None and owner[0] in ("", FIELD_MANAGER):
            owner = None
        out.append(Reverted(str(row.get("path") or ""), row.get("before"), row.get("gpumem"), row.get("now"),
                            owner[0] if owner else None, owner[2] if owner else None, seen_at,
                            owner[1] if owner else None))
    return tuple(out)


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Look:
    outcome: str
    observed_generation: int | None
    replicas: int
    updated: int
    ready: int
    available: int
    #: the pods of the current revision that did not run before the write
    new_pods: tuple[str, ...] = ()
    #: restarts since the write (new pods: all of theirs)
    restarts: int = 0
    oom_lines: int = 0
    pressure_lines: int = 0
    #: why, each a `Phrase` the renderers word (`watch.deadline`, `watch.restarts_new`, ...)
    notes: tuple[Phrase, ...] = field(default=())
    #: Prometheus at this look (None: no Prometheus configured)
    symptoms: Symptoms | None = None
    #: the fields the plan changed that another writer put back (outcome `reverted`)
    reverted: tuple[Reverted, ...] = ()


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _new_revision_hash(writer: KubeWriter, namespace: str, deployment: dict[str, Any], query: str) -> str | None:
    revision = ((deployment.get("metadata") or {}).get("annotations") or {}).get(REVISION)
    sets = _observe(writer, path("apis", "apps", "v1", "namespaces", namespace, "replicasets"), query,
                    Call("list", "replicasets", namespace, group="apps"))
    for rs in sets.get("items") or []:
        meta = rs.get("metadata") or {}
        if revision is not None and (meta.get("annotations") or {}).get(REVISION) == revision:
            return (meta.get("labels") or {}).get("pod-template-hash")
    return None


def _log(writer: KubeWriter, namespace: str, pod: str, container: str, previous: bool,
         stamped: bool = False, tail: int = 2000) -> str | None:
    """The container's log (None: it could not be read: no previous container, not started yet)."""
    try:
        return writer.observer.get_text(path("api", "v1", "namespaces", namespace, "pods", pod, "log"),
                                    {"container": container, "previous": True if previous else None,
                                     "timestamps": True if stamped else None, "tailLines": tail},
                                    timeout_s=writer.timeout_s)
    except Exception:  # no previous container, a log not there yet: nothing to count
        return None


def _stamp(line: str) -> tuple[int, int] | None:
    """(unix seconds, nanoseconds) of a line's RFC 3339 prefix; None when it has none."""
    m = _STAMP.match(line)
    if m is None:
        return None
    try:
        at = datetime.fromisoformat(m.group(1) + ("+00:00" if m.group(3) == "Z" else m.group(3)))
    except ValueError:
        return None
    return int(at.astimezone(UTC).timestamp()), int((m.group(2) or "0").ljust(9, "0"))


def _last_stamp(text: str | None) -> str | None:
    for line in reversed((text or "").splitlines()):
        m = _STAMP.match(line)
        if m is not None:
            return m.group(0).strip()
    return None


def _pods(writer: KubeWriter, namespace: str, query: str) -> list[dict[str, Any]]:
    return _observe(writer, path("api", "v1", "namespaces", namespace, "pods"), query,
                    Call("list", "pods", namespace)).get("items") or []


def _observe(writer: KubeWriter, where: str, query: str, call: Call) -> dict[str, Any]:
    """A list the watch reads through the observer, its failure typed (`typed_failure`: the status's
    error, or TemporaryError when no answer came), never a raw client exception."""
    try:
        return writer.observer.get_json(where, {"labelSelector": query}, timeout_s=writer.timeout_s)
    except GpumemError:
        raise
    except Exception as e:  # an ApiException (typed by its status) or a transport error
        typed = typed_failure(e, call, writer.timeout_s)
        if isinstance(typed, GpumemError):
            raise typed from e
        raise TemporaryError(10.0, detail=f"{type(e).__name__}: {e}"[:300]) from e


def baseline(writer: KubeWriter, namespace: str, obj: dict[str, Any]) -> Baseline:
    """The pods of the workload `obj` as they are now (call it right before the write): each
    container's restart count and the time of its last log line. Raises a GpumemError when the
    pods cannot be listed (NotPermitted naming `list pods`, TemporaryError, ...)."""
    query = selector_query((obj.get("spec") or {}).get("selector"), source="watch")
    pods = _pods(writer, namespace, query)
    restarts: dict[str, dict[str, int]] = {}
    marks: dict[str, dict[str, str | None]] = {}
    uids: dict[str, str] = {}
    for pod in pods:
        name = (pod.get("metadata") or {}).get("name", "")
        restarts[name], marks[name] = {}, {}
        uid = (pod.get("metadata") or {}).get("uid")
        if isinstance(uid, str) and uid:
            uids[name] = uid
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            container = cs.get("name", "")
            restarts[name][container] = int(cs.get("restartCount") or 0)
            current = _log(writer, namespace, name, container, False, stamped=True, tail=1)
            mark = _last_stamp(current)
            if mark is None and cs.get("restartCount"):
                previous = _log(writer, namespace, name, container, True, stamped=True, tail=1)
                mark = _last_stamp(previous)
                current = current if current is not None else previous
            marks[name][container] = mark if current is not None else UNREAD
    return Baseline(restarts, marks, uids)


def _after(text: str | None, mark: str | None) -> str:
    """The lines of a stamped log written after `mark` (undated lines never count)."""
    since = _stamp(mark + " ") if mark else None
    out = []
    for line in (text or "").splitlines():
        at = _stamp(line)
        if at is not None and (since is None or at > since):
            out.append(line)
    return "\n".join(out)


def _pct(value: float) -> str:
    return f"{value * 100:.0f}%"


@dataclass(frozen=True)
class _Rollout:
    """What a look reads of a workload's rollout: the object, its replicas, the generation its
    status observed, the updated, ready and available counts, the pods of the new revision,
    whether it is rolled out, whether it hit its progress deadline, and notes."""

    obj: dict[str, Any]
    replicas: int
    observed: int | None
    updated: int
    ready: int
    available: int
    current: list[dict[str, Any]]
    rolled_out: bool
    deadline: bool = False
    notes: tuple[Phrase, ...] = ()


def _deployment_rollout(writer: KubeWriter, namespace: str, name: str, generation: int | None) -> _Rollout:
    obj = writer.read("Deployment", namespace, name)
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    replicas = int(spec.get("replicas") or 0)
    observed = status.get("observedGeneration")
    counts = {k: int(status.get(k) or 0) for k in ("updatedReplicas", "readyReplicas", "availableReplicas")}
    query = selector_query(spec.get("selector"), source="watch")
    digest = _new_revision_hash(writer, namespace, obj, query)
    pods = _pods(writer, namespace, query)
    current = [p for p in pods if digest and ((p.get("metadata") or {}).get("labels") or {}).get("pod-template-hash") == digest]
    rolled_out = (observed is not None and generation is not None and observed >= generation
                  and counts["updatedReplicas"] == replicas == counts["availableReplicas"]
                  and int(status.get("replicas") or 0) == replicas)
    deadline = _condition(status, "Progressing").get("reason") == "ProgressDeadlineExceeded"
    return _Rollout(obj, replicas, observed, counts["updatedReplicas"], counts["readyReplicas"],
                    counts["availableReplicas"], current, rolled_out, deadline,
                    (Phrase("watch.deadline"),) if deadline else ())


def _int(value: Any, default: int = 0) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _map(value: Any) -> dict[str, Any]:
    """A field read from the cluster as a mapping ({} for anything else: a status is outside input)."""
    return value if isinstance(value, dict) else {}


def statefulset_state(obj: Any, generation: int | None) -> tuple[bool, int, int, tuple[Phrase, ...]]:
    """(rolled out, replicas, partition, notes) of a StatefulSet's status: its controller has seen
    `generation`, every pod at or above the partition runs the update revision, all are ready,
    and (no partition) the current revision is the update revision. `obj` as read from the
    cluster (any JSON: a field of the wrong type reads as absent, never a traceback)."""
    obj = _map(obj)
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    replicas = max(_int(spec.get("replicas"), 1), 0)  # a negative count (never valid) reads as none
    strategy = _map(spec.get("updateStrategy"))
    partition = min(max(_int(_map(strategy.get("rollingUpdate")).get("partition")), 0), replicas)
    notes: list[Phrase] = []
    if partition:
        notes.append(Phrase("watch.partition", {"partition": partition}))
    if strategy.get("type") == "OnDelete":
        notes.append(Phrase("watch.on_delete"))
    observed = status.get("observedGeneration")
    update = status.get("updateRevision")
    rolled_out = (_int(observed, -1) >= 0 and generation is not None and observed >= generation
                  and isinstance(update, str) and bool(update)
                  and _int(status.get("updatedReplicas")) >= replicas - partition
                  and _int(status.get("readyReplicas")) == replicas == _int(status.get("replicas"))
                  and (partition > 0 or status.get("currentRevision") == update))
    return rolled_out, replicas, partition, tuple(notes)


def _statefulset_rollout(writer: KubeWriter, namespace: str, name: str, generation: int | None) -> _Rollout:
    obj = writer.read("StatefulSet", namespace, name)
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    rolled_out, replicas, _partition, notes = statefulset_state(obj, generation)
    update = status.get("updateRevision")
    pods = _pods(writer, namespace, selector_query(spec.get("selector"), source="watch"))
    current = [p for p in pods if update and ((p.get("metadata") or {}).get("labels") or {}).get(
        "controller-revision-hash") == update]
    observed = status.get("observedGeneration")
    return _Rollout(obj, replicas, observed if _int(observed, -1) >= 0 else None,
                    _int(status.get("updatedReplicas")), _int(status.get("readyReplicas")),
                    _int(status.get("availableReplicas"), _int(status.get("readyReplicas"))), current, rolled_out,
                    notes=notes)


#: the labels a LeaderWorkerSet's controller puts on its StatefulSets and pods
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_HASH = "leaderworkerset.sigs.k8s.io/template-revision-hash"


def _lws_rollout(writer: KubeWriter, namespace: str, name: str, generation: int | None) -> _Rollout:
    """A LeaderWorkerSet's rollout: its status (groups updated and ready, the Available and
    UpdateInProgress conditions, at its generation where they carry one) and its leader
    StatefulSet's, which must have seen `generation` (the controller's rewrite after the
    write); the pods of the new template, leaders and workers, by its revision hash label."""
    obj = writer.read("LeaderWorkerSet", namespace, name)
    leader = writer.read("StatefulSet", namespace, name)
    rolled_out, groups, updated, ready, notes = lws_state(obj, leader, generation)
    digest = _map(_map(_map(_map(leader.get("spec")).get("template")).get("metadata")).get("labels")).get(LWS_HASH)
    pods = _pods(writer, namespace, selector_query({"matchLabels": {LWS_NAME: name}}, source="watch"))
    current = [p for p in pods if digest and ((p.get("metadata") or {}).get("labels") or {}).get(LWS_HASH) == digest]
    observed = _map(leader.get("status")).get("observedGeneration")
    return _Rollout(obj, groups, observed if _int(observed, -1) >= 0 else None, updated, ready, ready, current,
                    rolled_out, notes=notes)


def lws_state(obj: Any, leader: Any, generation: int | None) -> tuple[bool, int, int, int, tuple[Phrase, ...]]:
    """(rolled out, groups, groups updated, groups ready, notes) of a LeaderWorkerSet `obj` and
    its leader StatefulSet `leader`, both as read from the cluster (any JSON: a field of the
    wrong type reads as absent, never a traceback).

    >>> lws = {"metadata": {"generation": 2}, "spec": {"replicas": 1}, "status": {"replicas": 1,
    ...        "readyReplicas": 1, "updatedReplicas": 1, "conditions": [
    ...        {"type": "Available", "status": "True", "observedGeneration": 2},
    ...        {"type": "UpdateInProgress", "status": "False", "observedGeneration": 2}]}}
    >>> sts = {"spec": {"replicas": 1}, "status": {"observedGeneration": 3, "replicas": 1, "readyReplicas": 1,
    ...        "updatedReplicas": 1, "currentRevision": "a", "updateRevision": "a"}}
    >>> lws_state(lws, sts, 3)[0], lws_state(lws, sts, 4)[0], lws_state([], "x", 1)[:4]
    (True, False, (False, 1, 0, 0))
    """
    obj, leader = _map(obj), _map(leader)
    spec, status = _map(obj.get("spec")), _map(obj.get("status"))
    groups = max(_int(spec.get("replicas"), 1), 0)
    leader_done, _n, _p, leader_notes = statefulset_state(leader, generation)
    own = _int(_map(obj.get("metadata")).get("generation"), 0)
    raw = status.get("conditions")
    conditions = {c.get("type"): c for c in (raw if isinstance(raw, list) else []) if isinstance(c, dict)}
    seen = all(_int(c.get("observedGeneration"), own) >= own for c in conditions.values())
    updated, ready = _int(status.get("updatedReplicas")), _int(status.get("readyReplicas"))
    rolled_out = (leader_done and seen and _map(conditions.get("Available")).get("status") == "True"
                  and _map(conditions.get("UpdateInProgress")).get("status") != "True"
                  and updated == ready == groups == _int(status.get("replicas")))
    return rolled_out, groups, updated, ready, tuple(Phrase("watch.leader", {"note": n}) for n in leader_notes)


#: the kinds the watch follows, each by its own status
ROLLOUTS = {"Deployment": _deployment_rollout, "StatefulSet": _statefulset_rollout, "LeaderWorkerSet": _lws_rollout}


def look(writer: KubeWriter, namespace: str, name: str, generation: int | None,
         baseline: Baseline | None = None, symptoms: Callable[[], Symptoms] | None = None,
         written: WrittenObject | None = None, seen_at: Callable[[], str] = _utc_now,
         kind: str = "Deployment") -> Look:
    """One look at a Deployment, StatefulSet or LeaderWorkerSet (`kind`) after a write that made
    `generation` (of the Deployment or StatefulSet; of a LeaderWorkerSet's leader StatefulSet),
    judging only what the change produced when `baseline` (taken right before the write) is
    given; with `written`, a field of the written object that no longer holds gpumem's value
    makes it `reverted`."""
    rollout = ROLLOUTS[kind](writer, namespace, name, generation)
    obj = rollout.obj
    reverted: tuple[Reverted, ...] = ()
    if written is not None:
        target = obj if (written.kind, written.name) == (kind, name) else writer.read(
            written.kind, namespace, written.name)
        reverted = reverted_fields(target, written.compare, seen_at(), written.ops)
    replicas, observed = rollout.replicas, rollout.observed
    counts = {"updatedReplicas": rollout.updated, "readyReplicas": rollout.ready,
              "availableReplicas": rollout.available}
    current = rollout.current
    before = baseline.restarts if baseline is not None else {}
    marks = baseline.marks if baseline is not None else {}
    fresh = {"restarts": 0, "ooms": 0, "pressure": 0}
    since = {"restarts": 0, "ooms": 0, "pressure": 0}
    new_pods: list[str] = []
    for pod in current:
        pod_name = (pod.get("metadata") or {}).get("name", "")
        ran = baseline is not None and baseline.ran(pod)
        if not ran:
            new_pods.append(pod_name)
        tally = since if ran else fresh
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            container = cs.get("name", "")
            count = int(cs.get("restartCount") or 0)
            if ran:
                grew = max(0, count - before[pod_name].get(container, count))
                tally["restarts"] += grew
                mark = marks.get(pod_name, {}).get(container, UNREAD)
                if mark == UNREAD:
                    continue
                text = "\n".join(_after(_log(writer, namespace, pod_name, container, previous, stamped=True), mark)
                                 for previous in ((True, False) if grew else (False,)))
            else:
                tally["restarts"] += count
                text = "\n".join(_log(writer, namespace, pod_name, container, previous) or ""
                                 for previous in ((True, False) if count else (False,)))
            tally["ooms"] += len(_OOM.findall(text))
            tally["pressure"] += len(_PRESSURE.findall(text))
    restarts, ooms, pressure = (fresh[k] + since[k] for k in ("restarts", "ooms", "pressure"))
    notes: list[Phrase] = list(rollout.notes)
    rolled_out, deadline = rollout.rolled_out, rollout.deadline
    # per count, the note for the new pods and for the pods that ran before the change (since it)
    for what in ("restarts", "ooms", "pressure"):
        for tally, where in ((fresh, "new"), (since, "since")):
            if tally[what]:
                notes.append(Phrase(f"watch.{what}_{where}", {"count": tally[what]}))
    seen = _read(symptoms)
    said = symptom_notes(seen) if seen is not None else ()
    notes.extend(said)
    metric_symptom = any(p.key != "watch.prometheus_unread" for p in said)
    if reverted:  # the change is not on the object any more: what its rollout does is not its own
        outcome = "reverted"
    elif deadline or restarts or ooms:
        outcome = "failed"
    elif rolled_out and (pressure or metric_symptom):
        outcome = "symptoms_remain"
    elif rolled_out:
        outcome = "held"
    else:
        outcome = "rolling_out"
    return Look(outcome, observed, replicas, counts["updatedReplicas"], counts["readyReplicas"],
                counts["availableReplicas"], tuple(sorted(new_pods)), restarts, ooms, pressure, tuple(notes), seen,
                reverted)


def symptom_notes(seen: Symptoms) -> tuple[Phrase, ...]:
    """What a look says of Prometheus' reading: that it could not be read, or each symptom that
    remains (KV cache usage at `KV_USAGE_HIGH` or above; requests put back in the last window,
    in the engine's own word: SGLang retracts what vLLM preempts). Empty: none remains."""
    if seen.error:
        return (Phrase("watch.prometheus_unread", {"error": seen.error}),)
    notes = []
    if seen.kv_usage is not None and seen.kv_usage >= KV_USAGE_HIGH:
        notes.append(Phrase("watch.kv_usage_high", {"usage": _pct(seen.kv_usage), "high": _pct(KV_USAGE_HIGH)}))
    if seen.preemptions is not None and seen.preemptions > 0:
        counted = {"count": round(seen.preemptions), "minutes": max(1, round(seen.window_s / 60))}
        notes.append(Phrase("watch.retractions", counted) if seen.eviction == "retraction"
                     else Phrase("watch.preemptions", counted))
    return tuple(notes)


def _read(symptoms: Callable[[], Symptoms] | None) -> Symptoms | None:
    if symptoms is None:
        return None
    try:
        return symptoms()
    except Exception as e:  # Prometheus down or slow: the look goes on without it, and says so
        # Prometheus' own reason as a phrase the renderers word; anything else by its class and text
        return Symptoms(error=e.message if isinstance(e, PrometheusError) else f"{type(e).__name__}: {e}"[:200])


def watch(writer: KubeWriter, namespace: str, name: str, generation: int | None, window_s: float,
          poll_s: float = 10.0, clock: Callable[[], float] = time.monotonic,
          sleep: Callable[[float], None] = time.sleep, on_look: Callable[[Look], None] | None = None,
          baseline: Baseline | None = None, symptoms: Callable[[], Symptoms] | None = None,
          written: WrittenObject | None = None, seen_at: Callable[[], str] = _utc_now,
          kind: str = "Deployment") -> Look:
    """Look until the window ends, the change fails or another writer reverts it; the last look
    decides."""
    end = clock() + window_s
    while True:
        seen = look(writer, namespace, name, generation, baseline, symptoms, written, seen_at, kind)
        if on_look is not None:
            on_look(seen)
        if seen.outcome in ("failed", "reverted") or clock() >= end:
            return seen if seen.outcome != "rolling_out" else Look(**{**seen.__dict__, "outcome": "failed",
                                                                       "notes": (*seen.notes, Phrase("watch.not_rolled_out"))})
        sleep(min(poll_s, max(0.0, end - clock())))

