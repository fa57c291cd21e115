"""A stand-in Kubernetes API server on a loopback port that the official client can talk to.

It serves what gpumem reads: GET, LIST (label and field selectors, `XList` bodies with a
resourceVersion, cluster-wide lists) and WATCH (chunked events from a resourceVersion) for core,
apps, autoscaling, policy and networking objects; the pod `log` and `proxy` subresources; real `Status` bodies for 401/403/404/400/503.
Tests can add latency (all requests or per path pattern), failures (a status code or a dropped
connection per path pattern), faults after a write (`fail_after_write`: the write is stored, then
answered with a 5xx, stalled past the client's deadline, or its connection dropped), reads
refused for a number of requests (`refuse_reads`), and an RBAC mode that denies what the granted rules do not
allow. Every request is recorded so tests can assert on the calls made.

Discovery (/api, /apis, /apis/GROUP, /api/v1 and /apis/GROUP/VERSION) names what is served.
Other managers (`reverters`, `Reverter`): a field put back `after_s` after another manager changed it.
Custom resources (KServe InferenceService, LeaderWorkerSet, Argo CD Application) are stored and
served like the built-in kinds, validated against their CRDs' schemas (tests/data/crd_schemas;
422 naming the field) and patched by JSON or merge patch only (strategic merge: 415, as for
any custom resource).

It takes writes as kube-apiserver does (see fake_kube_rules for the wire details): POST
create (409 AlreadyExists), PUT replace and PATCH (JSON patch, merge patch, strategic merge
patch; 415 for other types) on objects and their `status` and `scale` subresources, with
`metadata.resourceVersion` as a precondition (409 Conflict), `?dryRun=All` (validated and
answered, nothing stored), defaulting, 422 validation, resourceVersion bumps on every change
(none for a write that changes nothing) and generation bumps on spec changes. Behind the store
run small controllers on `clock`: a Deployment rolls out (new ReplicaSet, new pods ready after
`rollout.ready_after_s`, old pods scaled down, status and conditions moved along) or, with
`rollout.outcome = "crashloop"`, its new pods crash-loop with a CUDA OOM in their logs until the
Deployment's Progressing condition reads ProgressDeadlineExceeded; scaling adds and removes
pods; an HPA clamps its target to [minReplicas, maxReplicas]; Events are recorded as theirs are.
A StatefulSet rolls out as its controller does (`StatefulSetController`: pods NAME-ORDINAL made
one at a time in order, each ready before the next; a template change replaces them from the
highest ordinal down to `updateStrategy.rollingUpdate.partition`, one at a time, each new pod
ready before the next goes; OnDelete never replaces one; status.currentRevision,
updateRevision, currentReplicas, updatedReplicas, readyReplicas, observedGeneration moved
along). A LeaderWorkerSet (`LeaderWorkerSetController`) runs a leader StatefulSet NAME of
`replicas` groups and, per group i, a worker StatefulSet NAME-i of `size - 1` pods
(NAME-i-1 ...), every pod labelled with the template's revision hash; a group's workers take a
new template once its leader pod has; its status (replicas, readyReplicas, updatedReplicas and
the Available, Progressing and UpdateInProgress conditions, each with its observedGeneration)
follows the groups. Both start on a write, or on `run(kind, namespace, name)` for an object
`add()`ed.

DELETE removes an object (`?dryRun=All` answers without removing; `DeleteOptions.preconditions`
on uid and resourceVersion are checked, 409 Conflict when one does not hold); deleting a
Deployment collects its ReplicaSets and their pods at once (no finalizers, no grace period).
Collection deletes (DELETE without a name) answer 405.

managedFields (with `managed_fields = True`): a write moves the fields it changes (maps walked, lists whole) to its field
manager (`?fieldManager=`, else the User-Agent up to its first "/"), operation Update, with the time.

Not modelled: server-side apply (415), unknown-field
checks (fieldValidation=Strict), conversion between API versions, graceful pod termination (a
scaled-down pod is gone at once), HPA metrics (only its bounds act).

>>> kube = FakeKube().start()
>>> kube.url.startswith("http://127.0.0.1:")
True
>>> kube.stop()
"""

from __future__ import annotations

import bisect
import copy
import dataclasses
import hashlib
import http.client
import json
import random
import re
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support import fake_kube_rules as rules
from tests.support import yaml_c
from tests.support.loopback import LoopbackHTTPServer, LoopbackServer

USER = "system:serviceaccount:gpumem:gpumem"


@dataclass(frozen=True)
class Request:
    """One request as the API server's authorizer sees it."""

    method: str
    path: str
    query: dict[str, str]
    verb: str | None = None  # get | list | watch; None for non-resource paths
    api_group: str | None = None
    version: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    status: int = 0
    content_type: str | None = None  # as sent, parameters and all
    user_agent: str | None = None  # the client's User-Agent header (names the field manager)
    body: str = ""  # the request body as text ("" for none)
    dry_run: bool = False  # ?dryRun= was given: validated and answered, nothing stored

    @property
    def mutating(self) -> bool:
        return self.method in WRITE_METHODS

    def json(self) -> Any:
        """The body decoded (JSON, or YAML for a YAML create)."""
        if not self.body.strip():
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return yaml_c.safe_load(self.body)


WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


#: the wall time the stand-in's clock starts at (its first reading); scenario objects are older
EPOCH = datetime(2026, 3, 9, 21, 0, 0, tzinfo=UTC)


class ManualClock:
    """A clock a test moves by hand (`clock.advance(30)`), for FakeKube(clock=...). Set it
    before the first write: the stand-in reads the start of time from its first reading."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


#: a vLLM 0.6.6 engine that runs out of GPU memory while profiling for its KV cache, as each
#: run of a crash-looping pod logs it: (fraction of the run, level, source, message); lines
#: with level None are traceback lines, printed as they are
CUDA_OOM_RUN: tuple[tuple[float, str | None, str, str], ...] = (
    (0.0, "INFO", "api_server.py:585", "vLLM API server version 0.6.6"),
    (0.0, "INFO", "api_server.py:586", "args: {args}"),
    (0.6, "INFO", "model_runner.py:1099", "Loading model weights took 14.2487 GB"),
    (1.0, "ERROR", "engine.py:366", "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
                                    "79.15 GiB of which 1.02 GiB is free. Process 1 has 78.12 GiB memory in use."),
    (1.0, None, "", "Traceback (most recent call last):"),
    (1.0, None, "", '  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/multiprocessing/engine.py", '
                    "line 357, in run_mp_engine"),
    (1.0, None, "", "    engine = MQLLMEngine.from_engine_args(engine_args=engine_args,"),
    (1.0, None, "", '  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/llm_engine.py", line 276, '
                    "in __init__"),
    (1.0, None, "", "    self._initialize_kv_caches()"),
    (1.0, None, "", '  File "/usr/local/lib/python3.12/dist-packages/vllm/worker/worker.py", line 202, '
                    "in determine_num_available_blocks"),
    (1.0, None, "", "    self.model_runner.profile_run()"),
    (1.0, None, "", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                    "capacity of 79.15 GiB of which 1.02 GiB is free. Process 1 has 78.12 GiB memory in use. Of the "
                    "allocated memory 76.41 GiB is allocated by PyTorch, and 1.19 GiB is reserved by PyTorch but "
                    "unallocated. If reserved but unallocated memory is large try setting "
                    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
                    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
)
#: a vLLM engine that starts: (fraction of the time to readiness, level, source, message)
READY_RUN: tuple[tuple[float, str | None, str, str], ...] = (
    (0.0, "INFO", "api_server.py:585", "vLLM API server version 0.6.6"),
    (0.0, "INFO", "api_server.py:586", "args: {args}"),
    (0.6, "INFO", "model_runner.py:1099", "Loading model weights took 14.2487 GB"),
    (1.0, "INFO", "api_server.py:641", "Starting vLLM API server on http://0.0.0.0:8000"),
)


@dataclass
class RolloutSettings:
    """How the stand-in's controllers move workloads along, in seconds of `FakeKube.clock`.

    `outcome` is the scenario switch: "ready" (new pods pass readiness `ready_after_s` after
    they are created) or "crashloop" (their first container runs `crash_after_s`, dies with exit
    code 1 and a CUDA OOM in its log, waits out kubelet's back-off, 10 s doubling to 5 min, and
    runs again); or a callable given the new pod that answers one of the two."""

    ready_after_s: float = 2.0
    outcome: str | Callable[[dict[str, Any]], str] = "ready"
    crash_after_s: float = 2.0
    backoff_s: float = 10.0
    backoff_cap_s: float = 300.0
    #: how long after a write the Deployment controller acts on it
    observe_after_s: float = 0.0
    #: the HorizontalPodAutoscaler controller's sync period (None: no HPA controller)
    hpa_sync_s: float | None = 15.0
    #: what each run of a crash-looping container logs (None: the vLLM CUDA OOM of CUDA_OOM_RUN)
    crash_log: str | None = None


@dataclass
class _PodPlan:
    """What the simulated kubelet does with a pod the stand-in created."""

    created: float
    outcome: str  # "ready" | "crashloop" | "unschedulable"
    ready_at: float | None  # when its containers pass readiness (None: never)
    ip: str = ""


@dataclass
class _Watched:
    """A Deployment the stand-in's Deployment controller acts for."""

    due: float | None  # when the controller looks at a write it has not seen yet (None: none pending)
    synced: float = 0.0  # the time it last synced at
    progress_at: float = 0.0  # the last progress (the Progressing condition's lastUpdateTime)
    adopted: tuple[str, str] | None = None  # (ReplicaSet, template) it took as current


@dataclass
class _SetState:
    """A StatefulSet or LeaderWorkerSet its controller acts for."""

    due: float | None
    synced: float = 0.0
    #: a StatefulSet's revisions: name -> pod template, and the current one
    revisions: dict[str, dict[str, Any]] = field(default_factory=dict)
    current: str | None = None


@dataclass
class _Binding:
    rules: list[dict[str, Any]]
    namespace: str | None  # None: a ClusterRoleBinding


@dataclass
class _Fault:
    """A fault for the next `times` matching requests: after a write (`after_write`: the write is
    stored first) or instead of a read."""

    pattern: re.Pattern[str]
    outcome: int | str  # an HTTP code, "stall" (answer after `stall_s`) or "drop" (close, no answer)
    times: int
    after_write: bool
    stall_s: float = 0.0
    #: once it fired after a write: the next this many GETs of that object are refused (503)
    then_refuse_reads: int = 0


@dataclass
class Reverter:
    """Another manager that owns a field of an object and puts it back `after_s` seconds after
    anyone else changes it, writing under its own field manager: a controller rewriting what it
    derives from its owner (`kserve-controller` and a Deployment's container args), or a GitOps
    tool re-applying its stored manifest on its next sync (`argocd-controller`)."""

    kind: str
    namespace: str
    name: str
    path: tuple[str | int, ...]  # the field, e.g. ("spec", "template", "spec", "containers", 0, "args")
    value: Any  # what it puts back
    manager: str
    after_s: float = 10.0
    changed_at: float | None = None
    reverts: int = 0


@dataclass
class FakeKube(LoopbackServer):
    """The API server state: objects, logs, proxy upstreams, latency, failures, RBAC; and the
    controllers' state (Deployment, ReplicaSet, HPA, scheduler, kubelet) on `clock`.

    For tests: `writes()` and `dry_runs()` count the mutating requests received, `get()` and
    `pods_of()` read the store as the controllers left it, `rollout` holds the switches
    (outcome "ready" or "crashloop", delays), `clock = ManualClock()` moves time by hand."""

    token: str | None = None
    user: str = USER
    latency_s: float = 0.0
    objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    logs: dict[tuple[str, str, str, bool], str] = field(default_factory=dict)
    upstreams: dict[tuple[str, str, int], str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    disabled_versions: set[str] = field(default_factory=set)
    manager: str = "unknown"  # the field manager of the write in progress (managedFields)
    managed_fields: bool = False  # keep managedFields (off by default: older tests diff whole objects)
    reverters: list[Reverter] = field(default_factory=list)  # other managers that put a field back
    #: steps on the clock of their own (`tests.support.gitops_timer`): `due(kube)` -> time or None, `fire(kube, t)`
    timers: list[Any] = field(default_factory=list)
    #: the controllers' time (seconds); a ManualClock lets a test move it by hand
    clock: Callable[[], float] = time.monotonic
    rollout: RolloutSettings = field(default_factory=RolloutSettings)
    _latency_rules: list[tuple[re.Pattern[str], float]] = field(default_factory=list)
    _failures: list[tuple[re.Pattern[str], int | str]] = field(default_factory=list)
    _faults: list[_Fault] = field(default_factory=list)
    _bindings: list[_Binding] | None = None
    _rv: int = 1000
    _lock: threading.RLock = field(default_factory=threading.RLock)
    _t0: float | None = None
    _clock_seen: Callable[[], float] | None = None
    _plans: dict[tuple[str, str], _PodPlan] = field(default_factory=dict)
    _watched: dict[tuple[str, str], _Watched] = field(default_factory=dict)
    _hpa_due: dict[tuple[str, str], float] = field(default_factory=dict)
    #: StatefulSets and LeaderWorkerSets their controllers act for: (kind, namespace, name) -> state
    _sets: dict[tuple[str, str, str], _SetState] = field(default_factory=dict)
    _random: random.Random = field(default_factory=lambda: random.Random(20260309))
    _addresses: int = 0
    _node_turn: int = 0
    _event_names: dict[tuple[str, str, str, str, str, str], str] = field(default_factory=dict)
    #: every change since the start, for watches: (resourceVersion, type, group, resource, namespace, object)
    _changes: list[tuple[int, str, str, str, str, dict[str, Any]]] = field(default_factory=list)
    _server: LoopbackHTTPServer | None = None
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _inflight: int = 0

    # ---------------------------------------------------------------- contents

    def add(self, *objs: dict[str, Any]) -> None:
        """Store objects (kind/apiVersion/metadata as kubectl prints them); Lists are unpacked."""
        for obj in objs:
            if obj.get("kind", "").endswith("List") and "items" in obj:
                self.add(*obj["items"])
                continue
            kind = obj["kind"]
            group, _version, resource, namespaced = rules.KINDS[kind]
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            with self._lock:
                self._rv += 1
                meta.setdefault("resourceVersion", str(self._rv))
                meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL,
                                                      f"{kind}/{meta.get('namespace')}/{meta['name']}")))
                meta.setdefault("creationTimestamp", "2026-03-09T08:00:00Z")
                namespace = meta.get("namespace", "default") if namespaced else ""
                if namespaced:
                    meta["namespace"] = namespace
                self.objects.setdefault((group, resource), {})[(namespace, meta["name"])] = obj
                self._changes.append((self._rv, "ADDED", group, resource, namespace, copy.deepcopy(obj)))

    def remove(self, kind: str, namespace: str, name: str) -> None:
        group, _v, resource, namespaced = rules.KINDS[kind]
        with self._lock:
            gone = self.objects.get((group, resource), {}).pop((namespace if namespaced else "", name), None)
            if gone is not None:
                self._rv += 1
                self._changes.append((self._rv, "DELETED", group, resource, namespace if namespaced else "", gone))

    def set_log(self, namespace: str, pod: str, container: str, text: str, previous: bool = False) -> None:
        """A container's log; lines may start with an RFC 3339 time, kept only with timestamps=true."""
        self.logs[(namespace, pod, container, previous)] = text

    def set_upstream(self, namespace: str, pod: str, port: int, base_url: str) -> None:
        """Where the pod proxy forwards `pods/{pod}:{port}/proxy/...` (a loopback URL)."""
        if not base_url.startswith("http://127.0.0.1:"):
            raise ValueError("upstreams must be loopback URLs")
        self.upstreams[(namespace, pod, port)] = base_url.rstrip("/")

    def add_latency(self, path_pattern: str, seconds: float) -> None:
        """Delay requests whose `path?query` matches the regex (on top of `latency_s`)."""
        self._latency_rules.append((re.compile(path_pattern), seconds))

    def fail(self, path_pattern: str, status: int | str) -> None:
        """Answer matching requests with `status` (an HTTP code) or "drop" (close, no answer)."""
        self._failures.append((re.compile(path_pattern), status))

    def fail_after_write(self, path_pattern: str, outcome: int | str, times: int = 1, stall_s: float = 3.0,
                         then_refuse_reads: int = 0) -> None:
        """The next `times` writes (not dry runs) whose `path?query` matches are stored as usual,
        then answered with `outcome` instead of their answer: an HTTP code (a 500 or 503 Status),
        "stall" (the real answer after `stall_s`, past a shorter client deadline) or "drop"
        (the connection closed, no answer). With `then_refuse_reads`, the next that many GETs of
        the written object are answered 503 (the API server cannot be read for a while)."""
        self._faults.append(_Fault(re.compile(path_pattern), outcome, times, True, stall_s, then_refuse_reads))

    def refuse_reads(self, path_pattern: str, times: int, outcome: int | str = 503) -> None:
        """Answer the next `times` GETs whose `path?query` matches with `outcome` (an HTTP code,
        or "drop") instead of the object; later ones are served."""
        self._faults.append(_Fault(re.compile(path_pattern), outcome, times, False))

    def _fault_for(self, req: Request, target: str) -> _Fault | None:
        write = req.mutating and not req.dry_run
        with self._lock:
            for fault in self._faults:
                if fault.times > 0 and fault.after_write == write and (write or req.method == "GET") \
                        and fault.pattern.search(target):
                    fault.times -= 1
                    if fault.then_refuse_reads:
                        self._faults.append(_Fault(re.compile(re.escape(req.path) + "$"), 503,
                                                   fault.then_refuse_reads, False))
                    return fault
        return None

    def grant(self, rules_: list[dict[str, Any]], namespace: str | None = None) -> None:
        """Turn on RBAC mode and bind rules: cluster-wide (None) or in one namespace (a Role)."""
        if self._bindings is None:
            self._bindings = []
        self._bindings.append(_Binding(list(rules_), namespace))

    def calls(self, **match: Any) -> list[Request]:
        """Recorded requests whose fields equal every given value, e.g. calls(verb="list")."""
        # a request is recorded after its answer is sent, so a client can be done before the
        # record lands: wait (briefly) until nothing is in flight
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=2.0)
            recorded = list(self.requests)
        return [r for r in recorded if all(getattr(r, k) == v for k, v in match.items())]

    def writes(self, **match: Any) -> list[Request]:
        """Recorded POST/PUT/PATCH/DELETE requests that were not dry runs (whatever their answer),
        e.g. writes(verb="patch", resource="deployments", status=200)."""
        return [r for r in self.calls(**match) if r.mutating and not r.dry_run]

    def dry_runs(self, **match: Any) -> list[Request]:
        """Recorded mutating requests sent with ?dryRun=."""
        return [r for r in self.calls(**match) if r.mutating and r.dry_run]

    def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """A copy of a stored object (after the controllers have caught up with the clock)."""
        group, _v, resource, namespaced = rules.KINDS[kind]
        with self._lock:
            self.reconcile()
            obj = self.get_object(group, resource, namespace if namespaced else "", name)
            return copy.deepcopy(obj) if obj is not None else None

    def pods_of(self, namespace: str, deployment: str) -> list[dict[str, Any]]:
        """Copies of the pods a Deployment owns through its ReplicaSets, by name."""
        with self._lock:
            self.reconcile()
            sets = {rs["metadata"]["name"] for rs in self._replicasets_of(namespace, deployment)}
            return [copy.deepcopy(p) for p in self.list_objects("", "pods", namespace) if _owner(p, "ReplicaSet") in sets]

    def reconcile(self) -> None:
        """Let the controllers catch up with the clock (every request does this first)."""
        with self._lock:
            self._advance(self.now())

    # ---------------------------------------------------------------- serving

    def _begin(self) -> None:
        with self._idle:
            self._inflight += 1

    def _record(self, req: Request) -> None:
        with self._idle:
            self.requests.append(req)
            self._inflight -= 1
            self._idle.notify_all()

    def _delay_for(self, target: str) -> float:
        return self.latency_s + sum(s for pattern, s in self._latency_rules if pattern.search(target))

    def _failure_for(self, target: str) -> int | str | None:
        for pattern, outcome in self._failures:
            if pattern.search(target):
                return outcome
        return None

    def authorize(self, req: Request) -> bool:
        if self._bindings is None or req.verb is None:
            return True
        for binding in self._bindings:
            if binding.namespace is not None and binding.namespace != req.namespace:
                continue
            for rule in binding.rules:
                if rules.rule_allows(rule, req.verb, req.api_group or "", req.resource or "",
                                     req.subresource, req.name):
                    return True
        return False

    def served(self, group: str, version: str) -> bool:
        gv = f"{group}/{version}" if group else version
        return version in rules.GROUP_VERSIONS.get(group, ()) and gv not in self.disabled_versions

    def list_objects(self, group: str, resource: str, namespace: str | None) -> list[dict[str, Any]]:
        store = self.objects.get((group, resource), {})
        return [obj for (ns, _name), obj in sorted(store.items()) if namespace is None or ns == namespace]

    def get_object(self, group: str, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((group, resource), {}).get((namespace or "", name))

    # ------------------------------------------------------------------------ time

    def now(self) -> float:
        """The controllers' clock; its first reading is EPOCH in the timestamps they write."""
        t = self.clock()
        if self._t0 is None or self._clock_seen is not self.clock:
            self._t0, self._clock_seen = t, self.clock
        return t

    def wall(self, t: float, nanos: bool = False) -> str:
        """A clock reading as an RFC 3339 time (with nanoseconds, as kubelet stamps log lines)."""
        moment = EPOCH + timedelta(seconds=t - (self._t0 if self._t0 is not None else t))
        return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{moment.microsecond * 1000:09d}" if nanos else "") + "Z"

    def _uid(self) -> str:
        return str(uuid.UUID(int=self._random.getrandbits(128), version=4))

    def _store(self, kind: str, obj: dict[str, Any]) -> None:
        """Store (or store again) an object under a new resourceVersion."""
        group, _v, resource, namespaced = rules.KINDS[kind]
        meta = obj["metadata"]
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        key = (meta.get("namespace", "") if namespaced else "", meta["name"])
        store = self.objects.setdefault((group, resource), {})
        change = "MODIFIED" if key in store else "ADDED"
        store[key] = obj
        self._changes.append((self._rv, change, group, resource, key[0], copy.deepcopy(obj)))

    # ---------------------------------------------------------------------- writes

    def write(self, req: Request) -> tuple[int, dict[str, Any]]:
        """A POST, PUT, PATCH or DELETE as kube-apiserver answers it: (HTTP code, object or Status)."""
        with self._lock:
            self.reconcile()
            try:
                return self._write(req)
            except rules.Refusal as refusal:
                return refusal.code, refusal.body

    def _write(self, req: Request) -> tuple[int, dict[str, Any]]:
        group, version, resource = req.api_group or "", req.version or "", req.resource or ""
        kind = rules.RESOURCE_KINDS[(group, resource)]
        action = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(req.method)
        if action is None:
            raise rules.Refusal(405, rules.method_not_supported(group, resource, req.verb or req.method.lower()))
        if (req.name is None) != (action == "create") or req.subresource not in (None, "status", "scale"):
            raise rules.Refusal(405, rules.method_not_supported(group, resource, action))
        if action == "delete" and req.subresource is not None:
            raise rules.Refusal(405, rules.method_not_supported(group, resource, action))
        if (req.subresource == "scale" and kind not in SCALABLE) or (
                req.subresource == "status" and kind not in rules.STATUS_KINDS):
            raise rules.Refusal(404, rules.no_such_resource())
        # the field manager: ?fieldManager=, else the client's User-Agent up to its first "/" (as the
        # real server names it); the controllers of the stand-in write under their own names
        self.manager = req.query.get("fieldManager") or (req.user_agent or "unknown").split("/")[0]
        dry = req.query.get("dryRun")
        if dry is not None and dry != "All":
            options = {"create": "CreateOptions", "update": "UpdateOptions", "patch": "PatchOptions",
                       "delete": "DeleteOptions"}[action]
            raise rules.Refusal(422, rules.invalid("meta.k8s.io", options, "",
                                                   [rules.not_supported("dryRun", [dry], ["All"])]))
        dry_run = dry == "All"
        if action == "delete":
            return self._delete(kind, group, version, resource, req.namespace or "", req.name or "", req.body, dry_run)
        if action == "create":
            doc = rules.decode_object(kind, version, group, req.body, req.content_type)
            return self._create(kind, group, version, resource, req.namespace or "", doc, dry_run)
        target = "Scale" if req.subresource == "scale" else kind
        if action == "update":
            t_group, t_version = ("autoscaling", "v1") if target == "Scale" else (group, version)
            doc = rules.decode_object(target, t_version, t_group, req.body, req.content_type)

            def change(current: dict[str, Any]) -> dict[str, Any]:
                return copy.deepcopy(doc)
        else:
            patch_type = (req.content_type or "").split(";")[0].strip().lower()
            if patch_type not in rules.PATCH_TYPES:
                raise rules.Refusal(415, rules.unsupported_media_type())
            if kind in rules.CUSTOM_KINDS and patch_type not in rules.CUSTOM_PATCH_TYPES:
                raise rules.Refusal(415, rules.unsupported_media_type(rules.CUSTOM_PATCH_TYPES))
            patch = rules.decode_patch(patch_type, req.body, req.query.get("fieldValidation"))

            def change(current: dict[str, Any]) -> dict[str, Any]:
                return _apply_patch(patch_type, patch, target, current)
        assert req.name is not None
        if target == "Scale":
            return self._write_scale(kind, group, version, resource, req.namespace or "", req.name, change, dry_run)
        return self._update(kind, group, version, resource, req.namespace or "", req.name, req.subresource,
                            change, action, dry_run)

    def _create(self, kind: str, group: str, version: str, resource: str, namespace: str, doc: dict[str, Any],
                dry_run: bool) -> tuple[int, dict[str, Any]]:
        namespaced = rules.KINDS[kind][3]
        obj = copy.deepcopy(doc)
        obj["apiVersion"], obj["kind"] = (f"{group}/{version}" if group else version), kind
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise rules.Refusal(400, rules.bad_request(
                f'{kind} in version "{version}" cannot be handled as a {kind}: json: cannot unmarshal '
                f"{rules._json_kind(meta).split()[0]} into Go struct field {kind}.metadata of type v1.ObjectMeta"))
        if namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise rules.Refusal(400, rules.bad_request(NAMESPACE_MISMATCH))
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if not meta.get("name"):
            if not meta.get("generateName"):
                raise rules.Refusal(422, rules.invalid(group, kind, "", [
                    rules.required("metadata.name", "name or generateName is required")]))
            # names.SimpleNameGenerator: the prefix cut to 58 characters, 5 random ones after it
            meta["name"] = meta["generateName"][:58] + "".join(self._random.choice(rules.SAFE_ALPHABET) for _ in range(5))
        name = meta["name"]
        errors = rules.validate_name(kind, name)
        if kind in rules.STATUS_KINDS:  # PrepareForCreate: status is not the client's to set
            obj["status"] = copy.deepcopy(_CREATED_STATUS.get(kind, {}))
        if kind in rules.GENERATION_KINDS:
            meta["generation"] = 1
        else:
            meta.pop("generation", None)
        rules.apply_defaults(kind, obj)
        errors += rules.validate(kind, obj)
        if errors:
            raise rules.Refusal(422, rules.invalid(group, kind, name, errors))
        rv = str(meta.get("resourceVersion") or "")
        if rv.isdigit() and int(rv) != 0 and not dry_run:  # etcd3 store.Create; a dry run does not check
            raise rules.Refusal(500, rules.internal_unknown("resourceVersion should not be set on objects to be created"))
        if (namespace if namespaced else "", name) in self.objects.get((group, resource), {}):
            raise rules.Refusal(409, rules.already_exists(group, resource, name))
        t = self.now()
        meta["uid"] = self._uid()
        meta["creationTimestamp"] = self.wall(t)
        if kind == "Service":
            self._allocate_cluster_ip(obj, dry_run)
        if dry_run:  # answered as it would be stored (no resourceVersion given to it)
            return 201, obj
        meta.pop("resourceVersion", None)
        self._store(kind, obj)
        self._after_write(kind, None, obj, t)
        return 201, copy.deepcopy(obj)

    def _delete(self, kind: str, group: str, version: str, resource: str, namespace: str, name: str, body: str | None,
                dry_run: bool) -> tuple[int, dict[str, Any]]:
        """DELETE of one object: DeleteOptions.preconditions (uid, resourceVersion) hold or it is a
        409; a dry run answers the object and keeps it; a Deployment's ReplicaSets and their pods
        are collected with it. Answers the object as it was (200)."""
        namespaced = rules.KINDS[kind][3]
        key = (namespace if namespaced else "", name)
        stored = self.objects.get((group, resource), {}).get(key)
        if stored is None:
            raise rules.Refusal(404, rules.not_found(group, resource, name))
        try:
            options = json.loads(body) if body and body.strip() else {}
        except ValueError:
            raise rules.Refusal(400, rules.bad_request("the body of the request was not valid JSON")) from None
        pre = (options.get("preconditions") or {}) if isinstance(options, dict) else {}
        meta = stored.get("metadata") or {}
        for field_name, label in (("uid", "UID"), ("resourceVersion", "ResourceVersion")):
            if pre.get(field_name) is not None and str(pre[field_name]) != str(meta.get(field_name)):
                raise rules.Refusal(409, rules.conflict(group, resource, name, (
                    f"Precondition failed: {label} in precondition: {pre[field_name]}, "
                    f"{label} in object meta: {meta.get(field_name)}")))
        served = rules.as_served(stored, version, group)
        if dry_run:
            return 200, served
        gone = self.objects[(group, resource)].pop(key)
        self._rv += 1
        self._changes.append((self._rv, "DELETED", group, resource, key[0], copy.deepcopy(gone)))
        if kind == "Deployment":
            for rs in self._replicasets_of(namespace, name):
                for pod in self._pods_of_rs(rs):
                    pod_key = (namespace, pod["metadata"]["name"])
                    self.objects.get(("", "pods"), {}).pop(pod_key, None)
                    self._plans.pop(pod_key, None)
                    self._rv += 1
                    self._changes.append((self._rv, "DELETED", "", "pods", namespace, copy.deepcopy(pod)))
                self.objects.get(("apps", "replicasets"), {}).pop((namespace, rs["metadata"]["name"]), None)
                self._rv += 1
                self._changes.append((self._rv, "DELETED", "apps", "replicasets", namespace, copy.deepcopy(rs)))
            self._watched.pop(key, None)
        if kind == "HorizontalPodAutoscaler":
            self._hpa_due.pop(key, None)
        return 200, served

    def _update(self, kind: str, group: str, version: str, resource: str, namespace: str, name: str,
                subresource: str | None, change: Callable[[dict[str, Any]], dict[str, Any]], action: str,
                dry_run: bool) -> tuple[int, dict[str, Any]]:
        namespaced = rules.KINDS[kind][3]
        stored = self.objects.get((group, resource), {}).get((namespace if namespaced else "", name))
        if stored is None:
            raise rules.Refusal(404, rules.not_found(group, resource, name))
        current = rules.as_served(stored, version, group)
        current.setdefault("kind", kind)
        new = change(current)
        new["apiVersion"], new["kind"] = current["apiVersion"], kind
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        if namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise rules.Refusal(400, rules.bad_request(NAMESPACE_MISMATCH))
            meta["namespace"] = namespace
        if meta.get("name") != name:
            raise rules.Refusal(400, rules.bad_request(
                f"the name of the object ({meta.get('name') or ''}) does not match the name on the URL ({name})"))
        old_meta = stored["metadata"]
        if action == "update" and meta.get("uid") and meta["uid"] != old_meta.get("uid"):
            raise rules.Refusal(409, rules.conflict(group, resource, name, (
                f"Precondition failed: UID in precondition: {meta['uid']}, UID in object meta: {old_meta.get('uid')}")))
        if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta.get("resourceVersion"):
            raise rules.Refusal(409, rules.conflict(group, resource, name))
        old = copy.deepcopy(stored)
        if subresource == "status":  # the status strategy keeps the stored spec (and a workload's labels)
            _keep(new, old, "spec")
            if kind in _WORKLOADS:
                _keep(meta, old_meta, "labels")
        elif kind in rules.STATUS_KINDS:  # ... and the main resource keeps the stored status
            _keep(new, old, "status")
        errors = []
        if meta.get("uid") and old_meta.get("uid") and meta["uid"] != old_meta["uid"]:
            errors.append(rules.invalid_value("metadata.uid", meta["uid"], "field is immutable"))
        for system in ("uid", "creationTimestamp", "generation", "managedFields"):  # rest.BeforeUpdate
            _keep(meta, old_meta, system)
        rules.apply_defaults(kind, new)
        baseline = copy.deepcopy(old)  # what etcd holds (stored objects are always defaulted)
        rules.apply_defaults(kind, baseline)
        if subresource is None:
            errors += rules.validate(kind, new)
        if errors:
            raise rules.Refusal(422, rules.invalid(group, kind, name, errors))
        if subresource is None and kind in rules.GENERATION_KINDS and (
                not rules.json_equal(new.get("spec"), baseline.get("spec"))
                or (kind == "Deployment" and not rules.json_equal(meta.get("annotations") or {},
                                                                  baseline["metadata"].get("annotations") or {}))):
            meta["generation"] = int(old_meta.get("generation") or 0) + 1
        meta["resourceVersion"] = old_meta.get("resourceVersion")
        if rules.json_equal(_comparable(new), _comparable(baseline)):
            return 200, rules.as_served(baseline, version, group)  # nothing to write: no new resourceVersion
        if dry_run:  # answered as it would be stored: new generation, same resourceVersion
            return 200, new
        t = self.now()
        paths = rules.changed_fields(baseline, new)
        if paths and self.managed_fields:
            meta["managedFields"] = rules.managed_after(old_meta.get("managedFields") or [], self.manager,
                                                        new["apiVersion"], self.wall(t), paths)
        self._store(kind, new)
        self._after_write(kind, baseline, new, t)
        return 200, copy.deepcopy(new)

    def scale_of(self, obj: dict[str, Any]) -> dict[str, Any]:
        """The autoscaling/v1 Scale a workload's `scale` subresource serves."""
        spec, status, meta = obj.get("spec") or {}, obj.get("status") or {}, obj["metadata"]
        doc: dict[str, Any] = {
            "kind": "Scale", "apiVersion": "autoscaling/v1",
            "metadata": {k: meta[k] for k in ("name", "namespace", "uid", "resourceVersion", "creationTimestamp")
                         if k in meta},
            "spec": {}, "status": {"replicas": int(status.get("replicas") or 0)}}
        if spec.get("replicas"):
            doc["spec"]["replicas"] = spec["replicas"]
        if spec.get("selector"):
            doc["status"]["selector"] = rules.format_selector(spec["selector"])
        return doc

    def _write_scale(self, kind: str, group: str, version: str, resource: str, namespace: str, name: str,
                     change: Callable[[dict[str, Any]], dict[str, Any]], dry_run: bool) -> tuple[int, dict[str, Any]]:
        stored = self.objects.get((group, resource), {}).get((namespace, name))
        if stored is None:
            raise rules.Refusal(404, rules.not_found(group, resource, name))
        scale = change(self.scale_of(stored))
        meta = scale.get("metadata") if isinstance(scale.get("metadata"), dict) else {}
        if meta.get("name") != name:
            raise rules.Refusal(400, rules.bad_request(
                f"the name of the object ({meta.get('name') or ''}) does not match the name on the URL ({name})"))
        errors = rules.validate("Scale", scale)
        if errors:
            raise rules.Refusal(422, rules.invalid("autoscaling", "Scale", name, errors))
        replicas = (scale.get("spec") or {}).get("replicas") or 0

        def rescale(current: dict[str, Any]) -> dict[str, Any]:
            current.setdefault("spec", {})["replicas"] = replicas
            if meta.get("resourceVersion"):
                current["metadata"]["resourceVersion"] = meta["resourceVersion"]
            else:
                current["metadata"].pop("resourceVersion", None)
            return current

        code, obj = self._update(kind, group, version, resource, namespace, name, None, rescale, "patch", dry_run)
        return code, self.scale_of(obj)

    def _allocate_cluster_ip(self, service: dict[str, Any], dry_run: bool) -> None:
        spec = service["spec"]
        if spec.get("type") == "ExternalName":
            return
        if not spec.get("clusterIP"):
            n = self._addresses + 1
            if not dry_run:
                self._addresses = n
            spec["clusterIP"] = f"10.96.{n // 250}.{n % 250 + 10}"
        spec.setdefault("clusterIPs", [spec["clusterIP"]])
        if spec["clusterIP"] != "None":
            spec.setdefault("ipFamilies", ["IPv4"])
            spec.setdefault("ipFamilyPolicy", "SingleStack")

    def _after_write(self, kind: str, old: dict[str, Any] | None, new: dict[str, Any], t: float) -> None:
        for r in self.reverters:
            if r.kind == kind and (new["metadata"].get("namespace") or "", new["metadata"]["name"]) == (
                    r.namespace, r.name) and self.manager != r.manager:
                r.changed_at = t
        """What the controllers notice of a stored write."""
        meta = new["metadata"]
        key = (meta.get("namespace", ""), meta["name"])
        old_spec = (old or {}).get("spec") or {}
        spec = new.get("spec") or {}
        if kind == "Deployment" and (old is None or not rules.json_equal(old_spec, spec)):
            self._notice_deployment(key, t, old)
            if old is None or old_spec.get("replicas") != spec.get("replicas"):
                for hpa in self.list_objects("autoscaling", "horizontalpodautoscalers", key[0]):
                    ref = (hpa.get("spec") or {}).get("scaleTargetRef") or {}
                    if ref.get("kind") == "Deployment" and ref.get("name") == key[1]:
                        self._notice_hpa((key[0], hpa["metadata"]["name"]), t)
        elif kind == "HorizontalPodAutoscaler" and (old is None or not rules.json_equal(old_spec, spec)):
            self._notice_hpa(key, t)
        elif kind in ("StatefulSet", "LeaderWorkerSet") and (old is None or not rules.json_equal(old_spec, spec)):
            self._notice_set(kind, key, t, old)

    def run(self, kind: str, namespace: str, name: str) -> None:
        """Start the controller of a StatefulSet or LeaderWorkerSet `add()`ed (as a create would):
        it makes the pods its template declares, ready after `rollout.ready_after_s`."""
        with self._lock:
            self._notice_set(kind, (namespace, name), self.now(), None)
            self.reconcile()

    # ----------------------------------------------------------------- controllers

    def _advance(self, now: float) -> None:
        """Run the controllers' steps that fall due up to `now`, in time order; then the kubelet."""
        for _ in range(100_000):
            step = self._next_step(now)
            if step is None:
                break
            step[1](step[0])
        self._render_pods(now)

    def _next_step(self, now: float) -> tuple[float, Callable[[float], None]] | None:
        best: tuple[float, Callable[[float], None]] | None = None

        def offer(t: float | None, action: Callable[[float], None]) -> None:
            nonlocal best
            if t is not None and t <= now and (best is None or t < best[0]):
                best = (t, action)

        for key in [k for k in self._watched if self._deployment(k) is None]:
            del self._watched[key]
        for key, w in sorted(self._watched.items()):
            offer(w.due, lambda t, key=key: self._sync_deployment(key, t))
            offer(self._next_pod_event(key, w.synced), lambda t, key=key: self._sync_deployment(key, t))
            offer(self._deadline(key, w), lambda t, key=key: self._time_out(key, t))
        for key, due in sorted(self._hpa_due.items()):
            offer(due, lambda t, key=key: self._sync_hpa(key, t))
        for key3 in [k for k in self._sets if self._set_object(k) is None]:
            del self._sets[key3]
        for key3, st in sorted(self._sets.items()):
            offer(st.due, lambda t, key3=key3: self._sync_set(key3, t))
            if key3[0] == "StatefulSet":
                offer(self._next_set_pod_event(key3, st.synced), lambda t, key3=key3: self._sync_set(key3, t))
        for r in self.reverters:
            offer(self._revert_due(r), lambda t, r=r: self._revert(r, t))
        for timer in self.timers:
            offer(timer.due(self), lambda t, timer=timer: timer.fire(self, t))
        return best

    def _revert_due(self, r: Reverter) -> float | None:
        """When `r` puts its field back: `after_s` after the write that changed it (the controller's
        reconcile, the GitOps tool's next self-heal sync); None while the field holds its value."""
        group, _v, resource, _n = rules.KINDS[r.kind]
        obj = self.objects.get((group, resource), {}).get((r.namespace, r.name))
        if obj is None or r.changed_at is None:
            return None
        value: Any = obj
        for step in r.path:
            value = value[step] if isinstance(value, list) else (value or {}).get(step)
        return None if rules.json_equal(value, r.value) else r.changed_at + r.after_s

    def _revert(self, r: Reverter, t: float) -> None:
        group, version, resource, _n = rules.KINDS[r.kind]

        def put_back(current: dict[str, Any]) -> dict[str, Any]:
            node: Any = current
            for step in r.path[:-1]:
                node = node[step]
            node[r.path[-1]] = copy.deepcopy(r.value)
            return current
        manager, self.manager = self.manager, r.manager
        try:
            self._update(r.kind, group, version, resource, r.namespace, r.name, None, put_back, "patch", False)
        finally:
            self.manager = manager
        r.changed_at, r.reverts = None, r.reverts + 1

    def _deployment(self, key: tuple[str, str]) -> dict[str, Any] | None:
        return self.objects.get(("apps", "deployments"), {}).get(key)

    def _replicasets_of(self, namespace: str, deployment: str) -> list[dict[str, Any]]:
        sets = [rs for rs in self.list_objects("apps", "replicasets", namespace) if _owner(rs, "Deployment") == deployment]
        return sorted(sets, key=lambda rs: (rs["metadata"].get("creationTimestamp", ""), rs["metadata"]["name"]))

    def _pods_of_rs(self, rs: dict[str, Any]) -> list[dict[str, Any]]:
        name = rs["metadata"]["name"]
        return [p for p in self.list_objects("", "pods", rs["metadata"]["namespace"]) if _owner(p, "ReplicaSet") == name]

    def _notice_deployment(self, key: tuple[str, str], t: float, old: dict[str, Any] | None) -> None:
        due = t + self.rollout.observe_after_s
        w = self._watched.get(key)
        if w is not None:
            w.due = due
            return
        w = self._watched[key] = _Watched(due=due, progress_at=due)
        if old is not None:  # what the controller had as current before this write
            template = (old.get("spec") or {}).get("template") or {}
            sets = self._replicasets_of(*key)
            match = [rs for rs in sets if _template_key(rs["spec"].get("template") or {}) == _template_key(template)]
            latest = match or sorted(sets, key=lambda rs: int(_revision(rs)))
            if latest:
                w.adopted = (latest[-1]["metadata"]["name"], _template_key(template))

    def _current_replicaset(self, d: dict[str, Any], w: _Watched,
                            sets: list[dict[str, Any]]) -> dict[str, Any] | None:
        """The ReplicaSet whose template is the Deployment's (EqualIgnoreHash)."""
        wanted = _template_key(d["spec"].get("template") or {})
        for rs in sets:
            if _template_key(rs["spec"].get("template") or {}) == wanted:
                return rs
        if w.adopted is not None and w.adopted[1] == wanted:
            return next((rs for rs in sets if rs["metadata"]["name"] == w.adopted[0]), None)
        return None

    def _sync_deployment(self, key: tuple[str, str], t: float) -> None:
        d, w = self._deployment(key), self._watched[key]
        w.synced, w.due = t, None
        if d is None:
            return
        for _ in range(50):  # each step's result is seen by the next, and shows in the status
            if not self._rollout_step(d, w, t):
                break
            self._sync_status(d, w, t)
        self._sync_status(d, w, t)

    def _rolling(self, d: dict[str, Any]) -> tuple[int, int]:
        """maxSurge (rounded up) and maxUnavailable (rounded down) resolved against replicas."""
        spec = d["spec"]
        replicas = int(spec.get("replicas", 1))
        strategy = spec.get("strategy") or {}
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return 0, 0
        rolling = strategy.get("rollingUpdate") or {}
        surge = _scaled(rolling.get("maxSurge", "25%"), replicas, up=True)
        unavailable = _scaled(rolling.get("maxUnavailable", "25%"), replicas, up=False)
        if surge == 0 and unavailable == 0:
            unavailable = 1
        return surge, min(unavailable, replicas)

    def _rollout_step(self, d: dict[str, Any], w: _Watched, t: float) -> bool:
        """One step of the Deployment controller (sync, rolloutRolling / rolloutRecreate); True
        when it changed something, so the next step sees the result."""
        ns, name = d["metadata"]["namespace"], d["metadata"]["name"]
        spec = d["spec"]
        replicas = int(spec.get("replicas", 1))
        sets = self._replicasets_of(ns, name)
        new_rs = self._current_replicaset(d, w, sets)
        if spec.get("paused"):  # dc.sync: no new ReplicaSet while paused, only scaling
            active = [rs for rs in sets if _count(rs) > 0] or ([new_rs] if new_rs is not None else [])
            return len(active) == 1 and self._scale_rs(active[0], replicas, t)
        if new_rs is None:
            self._create_replicaset(d, w, t, sets)
            return True
        if int(_revision(new_rs)) < max((int(_revision(rs)) for rs in sets), default=0):  # a rollback
            new_rs["metadata"].setdefault("annotations", {})[REVISION] = str(max(int(_revision(rs)) for rs in sets) + 1)
            self._store("ReplicaSet", new_rs)
        olds = [rs for rs in sets if rs is not new_rs]
        old_total = sum(_count(rs) for rs in olds)
        if (spec.get("strategy") or {}).get("type") == "Recreate":
            if old_total:
                for rs in olds:
                    self._scale_rs(rs, 0, t)
                return True
            return self._scale_rs(new_rs, replicas, t)
        if old_total == 0:
            return self._scale_rs(new_rs, replicas, t)
        surge, unavailable = self._rolling(d)
        new_count = _count(new_rs)
        if new_count > replicas:
            return self._scale_rs(new_rs, replicas, t)
        if new_count < replicas and old_total + new_count < replicas + surge:
            up = min(replicas + surge - old_total - new_count, replicas - new_count)
            return self._scale_rs(new_rs, new_count + up, t)
        min_ready = int(spec.get("minReadySeconds") or 0)
        min_available = replicas - unavailable
        max_down = old_total + new_count - min_available - (new_count - self._available(new_rs, t, min_ready))
        if max_down <= 0:
            return False
        changed, cleaned = False, 0
        for rs in olds:  # unhealthy old pods go first, or they would block the rollout
            have, ok = _count(rs), self._available(rs, t, min_ready)
            if cleaned >= max_down or have == ok:
                continue
            down = min(max_down - cleaned, have - ok)
            changed |= self._scale_rs(rs, have - down, t)
            cleaned += down
        available = sum(self._available(rs, t, min_ready) for rs in sets)
        if available > min_available:
            todo = available - min_available
            for rs in olds:
                if todo <= 0:
                    break
                down = min(_count(rs), todo)
                if down:
                    changed |= self._scale_rs(rs, _count(rs) - down, t)
                    todo -= down
        return changed

    def _create_replicaset(self, d: dict[str, Any], w: _Watched, t: float, sets: list[dict[str, Any]]) -> None:
        meta, spec = d["metadata"], d["spec"]
        template = copy.deepcopy(spec.get("template") or {})
        digest = rules.pod_template_hash(template)
        taken = {rs["metadata"]["name"] for rs in sets}
        collisions = 0
        while f"{meta['name']}-{digest}" in taken:  # status.collisionCount goes into the hash
            collisions += 1
            digest = rules.pod_template_hash({**template, "collisionCount": collisions})
        name = f"{meta['name']}-{digest}"
        labels = {**((template.get("metadata") or {}).get("labels") or {}), "pod-template-hash": digest}
        template.setdefault("metadata", {})["labels"] = labels
        selector = copy.deepcopy(spec.get("selector") or {})
        selector.setdefault("matchLabels", {})["pod-template-hash"] = digest
        replicas = int(spec.get("replicas", 1))
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _NOT_COPIED}
        annotations.update({"deployment.kubernetes.io/desired-replicas": str(replicas),
                            "deployment.kubernetes.io/max-replicas": str(replicas + self._rolling(d)[0]),
                            REVISION: str(max((int(_revision(rs)) for rs in sets), default=0) + 1)})
        rs_spec: dict[str, Any] = {"replicas": 0, "selector": selector, "template": template}
        if spec.get("minReadySeconds"):
            rs_spec["minReadySeconds"] = spec["minReadySeconds"]
        self._store("ReplicaSet", {
            "apiVersion": "apps/v1", "kind": "ReplicaSet",
            "metadata": {"name": name, "namespace": meta["namespace"], "uid": self._uid(),
                         "creationTimestamp": self.wall(t), "generation": 1, "labels": labels,
                         "annotations": annotations,
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": meta["name"],
                                              "uid": meta.get("uid", ""), "controller": True,
                                              "blockOwnerDeletion": True}]},
            "spec": rs_spec, "status": {"replicas": 0}})
        _set_condition(d, "Progressing", "True", "NewReplicaSetCreated", f'Created new replica set "{name}"',
                       self.wall(t))
        w.progress_at = t
        self._store("Deployment", d)

    def _scale_rs(self, rs: dict[str, Any], replicas: int, t: float) -> bool:
        """The ReplicaSet controller: spec.replicas set, pods created or deleted to match."""
        changed = _count(rs) != replicas
        if changed:
            before = _count(rs)
            rs["spec"]["replicas"] = replicas
            rs["metadata"]["generation"] = int(rs["metadata"].get("generation") or 1) + 1
            self._store("ReplicaSet", rs)
            owner = self._deployment((rs["metadata"]["namespace"], _owner(rs, "Deployment") or ""))
            if owner is not None:
                self._event(owner, "ScalingReplicaSet", (
                    f"Scaled {'up' if replicas > before else 'down'} replica set {rs['metadata']['name']} "
                    f"to {replicas} from {before}"), t, "deployment-controller")
        pods = self._pods_of_rs(rs)
        for _ in range(replicas - len(pods)):
            self._create_pod(rs, t)
            changed = True
        if len(pods) > replicas:  # getPodsToDelete: unscheduled, then not ready, then newest first
            ranked = sorted(pods, key=lambda p: (bool(p["spec"].get("nodeName")), self._ready(p, t),
                                                 -self._created(p)))
            for pod in ranked[: len(pods) - replicas]:
                self._delete_pod(pod, rs, t)
            changed = True
        return changed

    def _event(self, about: dict[str, Any], reason: str, message: str, t: float, component: str,
               warning: bool = False, field_path: str | None = None, count: int = 1,
               first: float | None = None) -> None:
        """A core/v1 Event as a controller or the kubelet records it; the same reason about the
        same object and field is one event whose count and lastTimestamp move (the recorder's
        aggregation), so a crash loop's BackOff counts up."""
        meta = about["metadata"]
        ns = meta.get("namespace", "default")
        involved: dict[str, Any] = {"kind": about.get("kind"), "namespace": ns, "name": meta["name"],
                                    "uid": meta.get("uid", ""), "apiVersion": about.get("apiVersion", "v1"),
                                    "resourceVersion": meta.get("resourceVersion", "")}
        if field_path:
            involved["fieldPath"] = field_path
        key = (ns, str(about.get("kind")), meta["name"], field_path or "", reason,
               message if reason != "BackOff" else "")
        events = self.objects.setdefault(("", "events"), {})
        existing = events.get((ns, self._event_names.get(key, "")))
        if existing is not None:
            if existing["count"] == count and existing["message"] == message:
                return
            existing.update(message=message, count=count, lastTimestamp=self.wall(t))
            self._store("Event", existing)
            return
        nanos = int((EPOCH + timedelta(seconds=t - (self._t0 or 0.0))).timestamp() * 1e9)
        while (ns, f"{meta['name']}.{nanos:x}") in events:  # record.go names events <object>.<UnixNano hex>
            nanos += 1
        self._event_names[key] = f"{meta['name']}.{nanos:x}"
        self._store("Event", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": self._event_names[key], "namespace": ns, "uid": self._uid(),
                         "creationTimestamp": self.wall(t)},
            "involvedObject": involved, "reason": reason, "message": message,
            "source": {"component": component}, "firstTimestamp": self.wall(first if first is not None else t),
            "lastTimestamp": self.wall(t), "count": count, "type": "Warning" if warning else "Normal",
            "eventTime": None, "reportingComponent": component, "reportingInstance": ""})

    def _created(self, pod: dict[str, Any]) -> float:
        plan = self._plans.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        return plan.created if plan is not None else float("-inf")

    def _ready(self, pod: dict[str, Any], t: float, min_ready: int = 0) -> bool:
        plan = self._plans.get((pod["metadata"]["namespace"], pod["metadata"]["name"]))
        if plan is not None:
            return plan.ready_at is not None and plan.ready_at + min_ready <= t
        status = pod.get("status") or {}
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        if "Ready" in conditions:
            return conditions["Ready"] == "True"
        containers = status.get("containerStatuses")
        return all(c.get("ready") for c in containers) if containers else status.get("phase") == "Running"

    def _available(self, rs: dict[str, Any], t: float, min_ready: int) -> int:
        return sum(self._ready(p, t, min_ready) for p in self._pods_of_rs(rs))

    def _next_pod_event(self, key: tuple[str, str], after: float) -> float | None:
        d = self._deployment(key)
        min_ready = int(((d or {}).get("spec") or {}).get("minReadySeconds") or 0)
        times = []
        for rs in self._replicasets_of(*key):
            for pod in self._pods_of_rs(rs):
                plan = self._plans.get((key[0], pod["metadata"]["name"]))
                if plan is not None and plan.ready_at is not None:
                    times += [x for x in (plan.ready_at, plan.ready_at + min_ready) if x > after]
        return min(times, default=None)

    def _sync_status(self, d: dict[str, Any], w: _Watched, t: float) -> None:
        """syncRolloutStatus: counts from the ReplicaSets' pods, Available and Progressing."""
        meta, spec = d["metadata"], d["spec"]
        replicas = int(spec.get("replicas", 1))
        min_ready = int(spec.get("minReadySeconds") or 0)
        sets = self._replicasets_of(meta["namespace"], meta["name"])
        new_rs = self._current_replicaset(d, w, sets)
        counts = {"replicas": 0, "updatedReplicas": 0, "readyReplicas": 0, "availableReplicas": 0}
        wanted = 0
        for rs in sets:
            pods = self._pods_of_rs(rs)
            ready = sum(self._ready(p, t) for p in pods)
            available = sum(self._ready(p, t, min_ready) for p in pods)
            self._set_rs_status(rs, len(pods), ready, available)
            counts["replicas"] += len(pods)
            counts["readyReplicas"] += ready
            counts["availableReplicas"] += available
            wanted += _count(rs)
            if rs is new_rs:
                counts["updatedReplicas"] = len(pods)
        before = copy.deepcopy(d.get("status") or {})
        status = copy.deepcopy(before)
        status["observedGeneration"] = int(meta.get("generation") or 0)
        for name, value in {**counts, "unavailableReplicas": max(wanted - counts["availableReplicas"], 0)}.items():
            if value:
                status[name] = value
            else:
                status.pop(name, None)  # omitempty
        holder = {"status": status}
        when = self.wall(t)
        if counts["availableReplicas"] >= replicas - self._rolling(d)[1]:
            _set_condition(holder, "Available", "True", "MinimumReplicasAvailable",
                           "Deployment has minimum availability.", when)
        else:
            _set_condition(holder, "Available", "False", "MinimumReplicasUnavailable",
                           "Deployment does not have minimum availability.", when)
        rs_name = new_rs["metadata"]["name"] if new_rs is not None else meta["name"]
        progressed = (counts["updatedReplicas"] > int(before.get("updatedReplicas") or 0)
                      or counts["replicas"] - counts["updatedReplicas"]
                      < int(before.get("replicas") or 0) - int(before.get("updatedReplicas") or 0)
                      or counts["readyReplicas"] > int(before.get("readyReplicas") or 0)
                      or counts["availableReplicas"] > int(before.get("availableReplicas") or 0))
        progressing = _condition(holder, "Progressing")
        paused_before = progressing is not None and progressing.get("reason") == "DeploymentPaused"
        if progressing is not None and progressing.get("reason") == "ProgressDeadlineExceeded" and spec.get("paused"):
            pass  # checkPausedConditions: a reported lack of progress is not overwritten
        elif spec.get("paused"):
            _set_condition(holder, "Progressing", "Unknown", "DeploymentPaused", "Deployment is paused", when)
            progressed = False
        elif paused_before:
            _set_condition(holder, "Progressing", "Unknown", "DeploymentResumed", "Deployment is resumed", when)
            w.progress_at = t
            progressing = _condition(holder, "Progressing")
        if spec.get("paused"):
            pass  # syncRolloutStatus does not run while paused
        elif counts["updatedReplicas"] == counts["replicas"] == counts["availableReplicas"] == replicas:
            _set_condition(holder, "Progressing", "True", "NewReplicaSetAvailable",
                           f'ReplicaSet "{rs_name}" has successfully progressed.', when)
        elif progressed:
            # the Progressing condition is updated on every progress, keeping its transition time
            kept = progressing["lastTransitionTime"] if progressing and progressing["status"] == "True" else when
            status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "Progressing"]
            _set_condition(holder, "Progressing", "True", "ReplicaSetUpdated",
                           f'ReplicaSet "{rs_name}" is progressing.', when, transition=kept)
            w.progress_at = t
        elif progressing is None and new_rs is not None:
            _set_condition(holder, "Progressing", "True", "FoundNewReplicaSet",
                           f'Found new replica set "{rs_name}"', when)
            w.progress_at = t
        changed = not rules.json_equal(status, before)
        if new_rs is not None and meta.get("annotations", {}).get(REVISION) != _revision(new_rs):
            meta.setdefault("annotations", {})[REVISION] = _revision(new_rs)
            changed = True
        if changed:  # a status write: no new generation
            d["status"] = status
            self._store("Deployment", d)

    def _set_rs_status(self, rs: dict[str, Any], replicas: int, ready: int, available: int) -> None:
        status: dict[str, Any] = {"replicas": replicas}
        for name, value in (("fullyLabeledReplicas", replicas), ("readyReplicas", ready),
                            ("availableReplicas", available)):
            if value:
                status[name] = value
        status["observedGeneration"] = int(rs["metadata"].get("generation") or 1)
        if not rules.json_equal(status, rs.get("status") or {}):
            rs["status"] = status
            self._store("ReplicaSet", rs)

    def _deadline(self, key: tuple[str, str], w: _Watched) -> float | None:
        """When the Progressing condition times out: progressDeadlineSeconds after its last
        update, noticed a second later (requeueStuckDeployment)."""
        d = self._deployment(key)
        deadline = ((d or {}).get("spec") or {}).get("progressDeadlineSeconds")
        progressing = _condition(d or {}, "Progressing")
        if progressing is None or deadline is None or (d or {})["spec"].get("paused") or progressing.get("reason") in (
                "NewReplicaSetAvailable", "ProgressDeadlineExceeded", "DeploymentPaused"):
            return None
        return w.progress_at + int(deadline) + 1

    def _time_out(self, key: tuple[str, str], t: float) -> None:
        d = self._deployment(key)
        if d is None:
            return
        sets = self._replicasets_of(*key)
        new_rs = self._current_replicaset(d, self._watched[key], sets)
        rs_name = new_rs["metadata"]["name"] if new_rs is not None else key[1]
        _set_condition(d, "Progressing", "False", "ProgressDeadlineExceeded",
                       f'ReplicaSet "{rs_name}" has timed out progressing.', self.wall(t))
        self._store("Deployment", d)

    def _notice_hpa(self, key: tuple[str, str], t: float) -> None:
        if self.rollout.hpa_sync_s is not None:
            due = t + self.rollout.hpa_sync_s
            self._hpa_due[key] = min(due, self._hpa_due.get(key, due))

    def _sync_hpa(self, key: tuple[str, str], t: float) -> None:
        """The HPA controller's clamp: a target below minReplicas or above maxReplicas is scaled
        into range (it does this before, and without, reading any metric)."""
        del self._hpa_due[key]
        hpa = self.objects.get(("autoscaling", "horizontalpodautoscalers"), {}).get(key)
        if hpa is None:
            return
        spec = hpa.get("spec") or {}
        ref = spec.get("scaleTargetRef") or {}
        d = self._deployment((key[0], ref.get("name", ""))) if ref.get("kind") == "Deployment" else None
        if d is None:
            return
        current = int(d["spec"].get("replicas", 1))
        low, high = int(spec.get("minReplicas") or 1), int(spec.get("maxReplicas") or 1)
        desired = current if current == 0 else min(max(current, low), high)  # 0: scaling is disabled
        status = copy.deepcopy(hpa.get("status") or {})
        status["currentReplicas"] = int((d.get("status") or {}).get("replicas") or 0)
        status["desiredReplicas"] = desired
        if desired != current:  # through the scale subresource: a spec write
            status["lastScaleTime"] = self.wall(t)
            why = "above Spec.MaxReplicas" if current > high else "below Spec.MinReplicas"
            self._event(hpa, "SuccessfulRescale", f"New size: {desired}; reason: Current number of replicas {why}",
                        t, "horizontal-pod-autoscaler")
            old = copy.deepcopy(d)
            d["spec"]["replicas"] = desired
            d["metadata"]["generation"] = int(d["metadata"].get("generation") or 0) + 1
            self._store("Deployment", d)
            self._notice_deployment((key[0], d["metadata"]["name"]), t, old)
        if not rules.json_equal(status, hpa.get("status") or {}):
            hpa["status"] = status
            self._store("HorizontalPodAutoscaler", hpa)


    # ------------------------------------------- StatefulSet and LeaderWorkerSet controllers

    def _set_object(self, key3: tuple[str, str, str]) -> dict[str, Any] | None:
        group, _v, resource, _n = rules.KINDS[key3[0]]
        return self.objects.get((group, resource), {}).get((key3[1], key3[2]))

    def _notice_set(self, kind: str, key: tuple[str, str], t: float, old: dict[str, Any] | None) -> None:
        due = t + self.rollout.observe_after_s
        st = self._sets.get((kind, *key))
        if st is not None:
            st.due = due if st.due is None else min(st.due, due)
            return
        st = self._sets[(kind, *key)] = _SetState(due=due)
        if kind == "StatefulSet" and old is not None:  # the revision the pods ran before this write
            template = (old.get("spec") or {}).get("template") or {}
            st.current = _set_revision(key[1], template)
            st.revisions[st.current] = copy.deepcopy(template)

    def _sync_set(self, key3: tuple[str, str, str], t: float) -> None:
        st = self._sets[key3]
        st.synced, st.due = t, None
        obj = self._set_object(key3)
        if obj is None:
            return
        if key3[0] == "LeaderWorkerSet":
            self._sync_lws(obj, t)
            return
        for _ in range(200):  # each step's result is seen by the next
            if not self._sts_step(obj, st, t):
                break
        self._sts_status(obj, st, t)
        owner = (obj["metadata"].get("labels") or {}).get(LWS_NAME)  # a LeaderWorkerSet follows its StatefulSets
        lws = self._sets.get(("LeaderWorkerSet", key3[1], str(owner))) if owner else None
        if lws is not None:
            lws.due = t if lws.due is None else min(lws.due, t)

    def _sts_pods(self, sts: dict[str, Any]) -> dict[int, dict[str, Any]]:
        name, ns = sts["metadata"]["name"], sts["metadata"]["namespace"]
        out = {}
        for pod in self.list_objects("", "pods", ns):
            if _owner(pod, "StatefulSet") == name:
                ordinal = pod["metadata"]["name"][len(name) + 1:]
                if ordinal.isdigit():
                    out[int(ordinal)] = pod
        return out

    def _sts_step(self, sts: dict[str, Any], st: _SetState, t: float) -> bool:
        """One step of the StatefulSet controller (OrderedReady); True when it changed something."""
        spec = sts["spec"]
        name = sts["metadata"]["name"]
        template = spec.get("template") or {}
        update = _set_revision(name, template)
        st.revisions[update] = copy.deepcopy(template)
        if st.current is None:
            st.current = update
        replicas = int(spec.get("replicas", 1))
        start = int((spec.get("ordinals") or {}).get("start") or 0)
        strategy = spec.get("updateStrategy") or {}
        partition = int((strategy.get("rollingUpdate") or {}).get("partition") or 0)
        pods = self._sts_pods(sts)
        for i in range(start, start + replicas):
            if i not in pods:
                rev = update if i - start >= partition or st.current not in st.revisions else st.current
                self._create_set_pod(sts, i, rev, st.revisions[rev], t)
                return True
            if not self._ready(pods[i], t):
                return False  # OrderedReady: the next waits for this one
        for i in sorted((i for i in pods if not start <= i < start + replicas), reverse=True):
            self._delete_set_pod(sts, pods[i], t)
            return True
        if strategy.get("type", "RollingUpdate") != "RollingUpdate":
            return False  # OnDelete: a pod takes the new template only once someone deletes it
        for i in sorted(pods, reverse=True):
            if i - start >= partition and _pod_revision(pods[i]) != update:
                self._delete_set_pod(sts, pods[i], t)  # made again at the update revision next step
                return True
        return False

    def _create_set_pod(self, sts: dict[str, Any], ordinal: int, revision: str, template: dict[str, Any],
                        t: float) -> None:
        ns, set_name = sts["metadata"]["namespace"], sts["metadata"]["name"]
        name = f"{set_name}-{ordinal}"
        tmeta = template.get("metadata") or {}
        labels = {**(tmeta.get("labels") or {}), "controller-revision-hash": revision,
                  "statefulset.kubernetes.io/pod-name": name, "apps.kubernetes.io/pod-index": str(ordinal)}
        meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": self._uid(), "creationTimestamp": self.wall(t),
                                "labels": labels}
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": set_name,
                                    "uid": sts["metadata"].get("uid", ""), "controller": True,
                                    "blockOwnerDeletion": True}]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {}),
               "status": {"phase": "Pending"}}
        plan = self._start_pod(pod, t, "10.5")
        self._event(sts, "SuccessfulCreate", f"create Pod {name} in StatefulSet {set_name} successful", t,
                    "statefulset-controller")
        self._write_logs(pod, plan, t)

    def _delete_set_pod(self, sts: dict[str, Any], pod: dict[str, Any], t: float) -> None:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.objects.get(("", "pods"), {}).pop(key, None)
        self._plans.pop(key, None)
        for log_key in [k for k in self.logs if k[:2] == key]:
            del self.logs[log_key]  # a pod made again under this name starts with no log
        self._rv += 1
        self._changes.append((self._rv, "DELETED", "", "pods", key[0], copy.deepcopy(pod)))
        self._event(sts, "SuccessfulDelete", f"delete Pod {key[1]} in StatefulSet {sts['metadata']['name']} successful",
                    t, "statefulset-controller")

    def _next_set_pod_event(self, key3: tuple[str, str, str], after: float) -> float | None:
        sts = self._set_object(key3)
        if sts is None:
            return None
        times = []
        for pod in self._sts_pods(sts).values():
            plan = self._plans.get((key3[1], pod["metadata"]["name"]))
            if plan is not None and plan.ready_at is not None and plan.ready_at > after:
                times.append(plan.ready_at)
        return min(times, default=None)

    def _sts_status(self, sts: dict[str, Any], st: _SetState, t: float) -> None:
        """updateStatefulSetStatus: counts per revision; the current revision becomes the update
        revision once every pod runs it."""
        spec, meta = sts["spec"], sts["metadata"]
        update = _set_revision(meta["name"], spec.get("template") or {})
        pods = list(self._sts_pods(sts).values())
        ready = sum(self._ready(p, t) for p in pods)
        updated = sum(_pod_revision(p) == update for p in pods)
        replicas = int(spec.get("replicas", 1))
        if updated == len(pods) == replicas:
            st.current = update
        current = sum(_pod_revision(p) == st.current for p in pods)
        before = copy.deepcopy(sts.get("status") or {})
        status: dict[str, Any] = {"observedGeneration": int(meta.get("generation") or 0), "replicas": len(pods),
                                  "currentRevision": st.current, "updateRevision": update,
                                  "collisionCount": 0}
        for name, value in (("readyReplicas", ready), ("availableReplicas", ready), ("currentReplicas", current),
                            ("updatedReplicas", updated)):
            if value:
                status[name] = value
        if not rules.json_equal(status, before):
            sts["status"] = status
            self._store("StatefulSet", sts)

    def _sync_lws(self, lws: dict[str, Any], t: float) -> None:
        """The LeaderWorkerSet controller: the leader StatefulSet, one worker StatefulSet per group
        whose leader runs the new template, and the status from the groups."""
        meta, spec = lws["metadata"], lws.get("spec") or {}
        ns, name = meta["namespace"], meta["name"]
        groups = int(spec.get("replicas", 1))
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = int(lwt.get("size") or 1)
        worker = lwt.get("workerTemplate") or {}
        leader = lwt.get("leaderTemplate") or worker
        digest = hashlib.sha256(json.dumps([leader, worker], sort_keys=True).encode()).hexdigest()[:10]
        common = {LWS_NAME: name, LWS_HASH: digest}
        owner = [{"apiVersion": lws.get("apiVersion", "leaderworkerset.x-k8s.io/v1"), "kind": "LeaderWorkerSet",
                  "name": name, "uid": meta.get("uid", ""), "controller": True, "blockOwnerDeletion": True}]
        self._own_set(ns, name, groups, _labelled(leader, {**common, LWS_WORKER_INDEX: "0"}), owner, 0, t)
        leader_pods = self._sts_pods(self._set_object(("StatefulSet", ns, name)) or {"metadata": {"name": name,
                                                                                                   "namespace": ns}})
        for g in range(groups):
            pod = leader_pods.get(g)
            if size <= 1 or pod is None:
                continue
            existing = self._set_object(("StatefulSet", ns, f"{name}-{g}"))
            group_hash = (pod["metadata"].get("labels") or {}).get(LWS_HASH)
            if group_hash != digest and existing is not None:
                continue  # the group's workers change once its leader has
            self._own_set(ns, f"{name}-{g}", size - 1,
                          _labelled(worker, {**common, LWS_HASH: group_hash or digest, LWS_GROUP_INDEX: str(g)}),
                          [{"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                            "uid": pod["metadata"].get("uid", ""), "controller": True}], 1, t)
        ready = updated = 0
        for g in range(groups):
            members = [p for p in ([leader_pods[g]] if g in leader_pods else [])]
            workers = self._set_object(("StatefulSet", ns, f"{name}-{g}"))
            if size > 1 and workers is not None:
                members += list(self._sts_pods(workers).values())
            whole = len(members) == size
            if whole and all(self._ready(p, t) for p in members):
                ready += 1
            if whole and all((p["metadata"].get("labels") or {}).get(LWS_HASH) == digest for p in members):
                updated += 1
        status = copy.deepcopy(lws.get("status") or {})
        generation = int(meta.get("generation") or 1)
        status.update({"replicas": len(leader_pods), "readyReplicas": ready, "updatedReplicas": updated,
                       "hpaPodSelector": f"{LWS_NAME}={name},{LWS_WORKER_INDEX}=0"})
        holder = {"status": status}
        when = self.wall(t)
        done = ready == updated == groups
        for kind, ok, reason, message in (
                ("Available", ready == groups, "AllGroupsReady" if ready == groups else "GroupsNotReady",
                 "All replicas are ready" if ready == groups else f"{ready} of {groups} groups are ready"),
                ("Progressing", not done, "GroupsProgressing" if not done else "GroupsReady",
                 "Replicas are progressing" if not done else "All groups are ready"),
                ("UpdateInProgress", updated < groups, "GroupsUpdating" if updated < groups else "UpdateDone",
                 f"{updated} of {groups} groups run the new template")):
            _set_condition(holder, kind, "True" if ok else "False", reason, message, when)
            for c in status["conditions"]:
                if c["type"] == kind:
                    c["observedGeneration"] = generation
        if not rules.json_equal(status, lws.get("status") or {}):
            lws["status"] = status
            self._store("LeaderWorkerSet", lws)

    def _own_set(self, ns: str, name: str, replicas: int, template: dict[str, Any], owner: list[dict[str, Any]],
                 start: int, t: float) -> None:
        """Create or rewrite a StatefulSet a LeaderWorkerSet runs, as its controller's write."""
        sts = self._set_object(("StatefulSet", ns, name))
        selector = {k: v for k, v in (template.get("metadata") or {}).get("labels", {}).items()
                    if k in (LWS_NAME, LWS_GROUP_INDEX, LWS_WORKER_INDEX)}
        spec = {"replicas": replicas, "selector": {"matchLabels": selector}, "serviceName": name,
                "podManagementPolicy": "Parallel" if start else "OrderedReady",
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                "template": template}
        if start:
            spec["ordinals"] = {"start": start}
        if sts is None:
            sts = {"apiVersion": "apps/v1", "kind": "StatefulSet",
                   "metadata": {"name": name, "namespace": ns, "uid": self._uid(), "generation": 1,
                                "creationTimestamp": self.wall(t), "ownerReferences": owner,
                                "labels": dict(selector)},
                   "spec": spec}
            self._store("StatefulSet", sts)
            self._notice_set("StatefulSet", (ns, name), t, None)
            return
        if rules.json_equal(sts["spec"], spec):
            return
        old = copy.deepcopy(sts)
        sts["spec"] = spec
        sts["metadata"]["generation"] = int(sts["metadata"].get("generation") or 0) + 1
        self._store("StatefulSet", sts)
        self._notice_set("StatefulSet", (ns, name), t, old)

    # ------------------------------------------------------------------ kubelet

    def _start_pod(self, pod: dict[str, Any], t: float, subnet: str) -> _PodPlan:
        """Schedule a new pod, draw its rollout outcome, give it an address in `subnet` and store it."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        node = self._schedule(pod)
        outcome = self.rollout.outcome(copy.deepcopy(pod)) if callable(self.rollout.outcome) else self.rollout.outcome
        if outcome not in ("ready", "crashloop"):
            raise ValueError(f"rollout outcome must be 'ready' or 'crashloop', not {outcome!r}")
        if node is False:
            outcome = "unschedulable"
        elif node:
            pod["spec"]["nodeName"] = node
        self._addresses += 1
        n = self._addresses
        plan = _PodPlan(created=t, outcome=outcome, ready_at=t + self.rollout.ready_after_s if outcome == "ready" else None,
                        ip=f"{subnet}.{100 + n // 250}.{n % 250 + 1}")
        self._plans[(ns, name)] = plan
        pod["status"] = self._pod_status(pod, plan, t)
        self._store("Pod", pod)
        return plan

    def _create_pod(self, rs: dict[str, Any], t: float) -> None:
        ns, rs_name = rs["metadata"]["namespace"], rs["metadata"]["name"]
        name = ""
        while not name or (ns, name) in self.objects.get(("", "pods"), {}):
            name = f"{rs_name}-" + "".join(self._random.choice(rules.SAFE_ALPHABET) for _ in range(5))
        template = rs["spec"].get("template") or {}
        tmeta = template.get("metadata") or {}
        meta: dict[str, Any] = {"name": name, "generateName": f"{rs_name}-", "namespace": ns, "uid": self._uid(),
                                "creationTimestamp": self.wall(t), "labels": dict(tmeta.get("labels") or {})}
        if tmeta.get("annotations"):
            meta["annotations"] = dict(tmeta["annotations"])
        meta["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs_name,
                                    "uid": rs["metadata"].get("uid", ""), "controller": True,
                                    "blockOwnerDeletion": True}]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": copy.deepcopy(template.get("spec") or {}),
               "status": {"phase": "Pending"}}
        plan = self._start_pod(pod, t, "10.4")
        outcome = plan.outcome
        self._event(rs, "SuccessfulCreate", f"Created pod: {name}", t, "replicaset-controller")
        if outcome == "unschedulable":
            self._event(pod, "FailedScheduling", self._unschedulable(pod), t, "default-scheduler", warning=True)
        else:
            self._event(pod, "Scheduled", f"Successfully assigned {ns}/{name} to {pod['spec'].get('nodeName', '')}",
                        t, "default-scheduler")
        self._write_logs(pod, plan, t)

    def _delete_pod(self, pod: dict[str, Any], rs: dict[str, Any], t: float) -> None:
        """Gone at once (the stand-in has no graceful termination)."""
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        self.objects.get(("", "pods"), {}).pop(key, None)
        self._plans.pop(key, None)
        self._rv += 1
        self._changes.append((self._rv, "DELETED", "", "pods", key[0], copy.deepcopy(pod)))
        self._event(rs, "SuccessfulDelete", f"Deleted pod: {key[1]}", t, "replicaset-controller")
        for container in pod["spec"].get("containers") or []:
            self._event(pod, "Killing", f"Stopping container {container.get('name')}", t, "kubelet",
                        field_path=f"spec.containers{{{container.get('name')}}}")

    def _schedule(self, pod: dict[str, Any]) -> str | bool | None:
        """A node for the pod: round robin over the schedulable nodes its nodeSelector matches;
        None when the store holds no nodes (no scheduling modelled), False when none fits."""
        nodes = self.list_objects("", "nodes", None)
        if not nodes:
            return None
        selector = pod["spec"].get("nodeSelector") or {}
        fits = [n for n in nodes if not (n.get("spec") or {}).get("unschedulable")
                and all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())]
        if not fits:
            return False
        self._node_turn += 1
        return fits[(self._node_turn - 1) % len(fits)]["metadata"]["name"]

    def _unschedulable(self, pod: dict[str, Any]) -> str:
        nodes = self.list_objects("", "nodes", None)
        cordoned = sum(1 for n in nodes if (n.get("spec") or {}).get("unschedulable"))
        reasons = [f"{cordoned} node(s) were unschedulable"] if cordoned else []
        if len(nodes) - cordoned:
            reasons.append(f"{len(nodes) - cordoned} node(s) didn't match Pod's node affinity/selector")
        return (f"0/{len(nodes)} nodes are available: {', '.join(sorted(reasons))}. preemption: 0/{len(nodes)} "
                f"nodes are available: {len(nodes)} Preemption is not helpful for scheduling.")

    def _crash_state(self, plan: _PodPlan, t: float) -> tuple[int, float, float | None, float]:
        """(restarts, start of the current or last run, end of the last crashed run or None,
        back-off seconds) of a crash-looping container at t."""
        run = max(self.rollout.crash_after_s, 0.001)
        start, crashes, last_end, wait = plan.created, 0, None, 0.0
        for _ in range(100_000):
            end = start + run
            if t < end:
                return crashes, start, last_end, wait
            crashes += 1
            wait = min(self.rollout.backoff_s * 2 ** (crashes - 1), self.rollout.backoff_cap_s)
            if t < end + wait:
                return crashes, start, end, -wait  # negative: waiting in back-off
            start, last_end = end + wait, end
        return crashes, start, last_end, wait

    def _pod_status(self, pod: dict[str, Any], plan: _PodPlan, t: float) -> dict[str, Any]:
        created = self.wall(plan.created)
        qos = _qos_class(pod["spec"])
        if plan.outcome == "unschedulable":
            return {"phase": "Pending", "conditions": [{
                "type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": created,
                "reason": "Unschedulable", "message": self._unschedulable(pod)}], "qosClass": qos}
        statuses, unready = [], []
        for i, container in enumerate(pod["spec"].get("containers") or []):
            image = str(container.get("image") or "")
            digest = hashlib.sha256(image.encode()).hexdigest()
            item: dict[str, Any] = {"name": container.get("name"), "image": image,
                                    "imageID": f"{image.rsplit(':', 1)[0] if ':' in image.rsplit('/', 1)[-1] else image}"
                                               f"@sha256:{digest}",
                                    "containerID": f"containerd://{pod['metadata']['uid'][:8]}{i:056x}"}
            if plan.outcome == "crashloop" and i == 0:
                crashes, start, last_end, wait = self._crash_state(plan, t)
                # a startup probe never passes before the OOM: not started either
                item.update(ready=False, restartCount=crashes, started=wait >= 0 and not container.get("startupProbe"))
                if wait < 0:
                    item["state"] = {"waiting": {"reason": "CrashLoopBackOff", "message": (
                        f"back-off {rules.go_duration(-wait)} restarting failed container={container.get('name')} "
                        f"pod={pod['metadata']['name']}_{pod['metadata']['namespace']}({pod['metadata']['uid']})")}}
                else:
                    item["state"] = {"running": {"startedAt": self.wall(start)}}
                if last_end is not None or wait < 0:
                    end = last_end if wait >= 0 else start + self.rollout.crash_after_s
                    item["lastState"] = {"terminated": {
                        "exitCode": 1, "reason": "Error", "startedAt": self.wall(end - self.rollout.crash_after_s),
                        "finishedAt": self.wall(end), "containerID": item["containerID"]}}
            else:
                ready_at = plan.ready_at if plan.ready_at is not None else plan.created + self.rollout.ready_after_s
                ready = ready_at <= t
                item.update(ready=ready, restartCount=0, started=ready or not container.get("startupProbe"),
                            state={"running": {"startedAt": created}})
            if not item["ready"]:
                unready.append(container.get("name"))
            statuses.append(item)
        ready_since = self.wall(plan.ready_at) if plan.ready_at is not None and not unready else created

        def condition(kind: str, ok: bool) -> dict[str, Any]:
            out: dict[str, Any] = {"type": kind, "status": "True" if ok else "False", "lastProbeTime": None,
                                   "lastTransitionTime": ready_since if kind in ("Ready", "ContainersReady") else created}
            if not ok:
                out.update(reason="ContainersNotReady", message=f"containers with unready status: [{' '.join(unready)}]")
            return out

        return {"phase": "Running",
                "conditions": [condition("Initialized", True), condition("Ready", not unready),
                               condition("ContainersReady", not unready), condition("PodScheduled", True)],
                "podIP": plan.ip, "podIPs": [{"ip": plan.ip}], "startTime": created,
                "containerStatuses": statuses, "qosClass": qos}

    def _render_pods(self, now: float) -> None:
        """The kubelet's status updates and logs for the pods the stand-in runs, as of now."""
        for key, plan in sorted(self._plans.items()):
            pod = self.objects.get(("", "pods"), {}).get(key)
            if pod is None:
                continue
            status = self._pod_status(pod, plan, now)
            if not rules.json_equal(status, pod.get("status") or {}):
                pod["status"] = status
                self._store("Pod", pod)
            self._write_logs(pod, plan, now)
            if plan.outcome == "crashloop":
                self._back_off_event(pod, plan, now)

    def _back_off_event(self, pod: dict[str, Any], plan: _PodPlan, now: float) -> None:
        """kubelet's BackOff warning, counted once per back-off since the first crash."""
        crashes, start, last_end, wait = self._crash_state(plan, now)
        if not crashes:
            return
        container = (pod["spec"].get("containers") or [{}])[0].get("name", "")
        latest = start + self.rollout.crash_after_s if wait < 0 else (last_end or start)
        meta = pod["metadata"]
        self._event(pod, "BackOff", (f"Back-off restarting failed container {container} in pod "
                                     f"{meta['name']}_{meta['namespace']}({meta['uid']})"),
                    latest, "kubelet", warning=True, field_path=f"spec.containers{{{container}}}", count=crashes,
                    first=plan.created + self.rollout.crash_after_s)

    def _run_log(self, lines: tuple[tuple[float, str | None, str, str], ...], start: float, length: float,
                 until: float, args: str) -> str:
        out = []
        for fraction, level, source, message in lines:
            at = start + fraction * length
            if at > until:
                break
            stamp = EPOCH + timedelta(seconds=at - (self._t0 or 0.0))
            text = message.replace("{args}", args)
            line = f"{level} {stamp.strftime('%m-%d %H:%M:%S')} {source}] {text}" if level else text
            out.append(f"{self.wall(at, nanos=True)} {line}\n")
        return "".join(out)

    def _write_logs(self, pod: dict[str, Any], plan: _PodPlan, t: float) -> None:
        if plan.outcome == "unschedulable":
            return
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        containers = pod["spec"].get("containers") or []
        for i, container in enumerate(containers):
            cname = container.get("name", "")
            args = repr(list(container.get("args") or []))
            if plan.outcome == "crashloop" and i == 0:
                crashes, start, last_end, wait = self._crash_state(plan, t)
                run = self.rollout.crash_after_s
                custom = self.rollout.crash_log
                if crashes:
                    crashed_start = start if wait < 0 else (last_end or start) - run
                    full = custom if custom is not None else self._run_log(CUDA_OOM_RUN, crashed_start, run,
                                                                           crashed_start + run, args)
                    self.logs[(ns, name, cname, True)] = full
                if wait < 0:
                    self.logs[(ns, name, cname, False)] = self.logs[(ns, name, cname, True)]
                else:
                    partial = "" if custom is not None else self._run_log(CUDA_OOM_RUN[:3], start, run, t, args)
                    self.logs[(ns, name, cname, False)] = partial
            else:
                self.logs[(ns, name, cname, False)] = self._run_log(READY_RUN, plan.created, self.rollout.ready_after_s,
                                                                    t, args)


#: kinds with a `scale` subresource
SCALABLE = frozenset({"Deployment", "ReplicaSet", "StatefulSet"})
NAMESPACE_MISMATCH = "the namespace of the provided object does not match the namespace sent on the request"
REVISION = "deployment.kubernetes.io/revision"
#: the annotations a Deployment does not copy to its ReplicaSets (deployment/util skipCopyAnnotation)
_NOT_COPIED = frozenset({"kubectl.kubernetes.io/last-applied-configuration", REVISION,
                         "deployment.kubernetes.io/revision-history", "deployment.kubernetes.io/desired-replicas",
                         "deployment.kubernetes.io/max-replicas", "deprecated.deployment.rollback.to"})
_WORKLOADS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"})
#: status as PrepareForCreate leaves it (the Go zero value, as it serializes)
_CREATED_STATUS: dict[str, dict[str, Any]] = {"Service": {"loadBalancer": {}},
                                              "HorizontalPodAutoscaler": {"desiredReplicas": 0},
                                              "Pod": {"phase": "Pending"}}


def _keep(new: dict[str, Any], old: dict[str, Any], key: str) -> None:
    """new[key] = old[key], absent when old has none."""
    if key in old:
        new[key] = copy.deepcopy(old[key])
    else:
        new.pop(key, None)


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("apiVersion", "kind")}


def _apply_patch(patch_type: str, patch: Any, kind: str, current: dict[str, Any]) -> dict[str, Any]:
    """A decoded patch applied to the object as served; a result that does not decode into the
    Go type is a 422 naming the field `patch` (patch.go), as the real server answers it."""
    if patch_type == "application/json-patch+json":
        new = rules.json_patch(current, patch)
    elif patch_type == "application/merge-patch+json":
        new = rules.merge_patch(current, patch)
    else:
        new = rules.strategic_merge(current, patch, kind)
    error = rules.decode_error(kind, new) if isinstance(new, dict) else (
        f"json: cannot unmarshal {rules._json_kind(new).split()[0]} into Go value of type map[string]interface {{}}")
    if error is None and not isinstance(new.get("metadata", {}), dict):
        error = (f"json: cannot unmarshal {rules._json_kind(new['metadata']).split()[0]} into Go struct field "
                 f"{kind}.metadata of type v1.ObjectMeta")
    if error is not None:
        shown = rules.go_v(patch) if patch_type == "application/strategic-merge-patch+json" else rules.go_json(new)
        raise rules.Refusal(422, rules.invalid("", "", "", [rules.invalid_value("patch", shown, error)]))
    return new


#: the LeaderWorkerSet's labels on its StatefulSets and pods
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"
LWS_HASH = "leaderworkerset.sigs.k8s.io/template-revision-hash"
LWS_GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
LWS_WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"


def _set_revision(name: str, template: dict[str, Any]) -> str:
    """A StatefulSet's revision name for a pod template (NAME-HASH, as its ControllerRevisions)."""
    return f"{name}-" + hashlib.sha256(_template_key(template).encode()).hexdigest()[:10]


def _pod_revision(pod: dict[str, Any]) -> str | None:
    return (pod["metadata"].get("labels") or {}).get("controller-revision-hash")


def _labelled(template: dict[str, Any], labels: dict[str, str]) -> dict[str, Any]:
    out = copy.deepcopy(template)
    out.setdefault("metadata", {}).setdefault("labels", {}).update(labels)
    return out


def _owner(obj: dict[str, Any], kind: str) -> str | None:
    """The name of the object's controller of `kind`, if any."""
    for ref in obj.get("metadata", {}).get("ownerReferences") or []:
        if ref.get("kind") == kind:
            return ref.get("name")
    return None


def _template_key(template: dict[str, Any]) -> str:
    """A pod template compared as EqualIgnoreHash does (and as defaulted when stored)."""
    copied = copy.deepcopy(template)
    labels = (copied.get("metadata") or {}).get("labels")
    if isinstance(labels, dict):
        labels.pop("pod-template-hash", None)
    if isinstance(copied.get("spec"), dict):
        rules.apply_defaults("Pod", copied)
    return json.dumps(copied, sort_keys=True)


def _revision(rs: dict[str, Any]) -> str:
    value = (rs["metadata"].get("annotations") or {}).get(REVISION, "0")
    return value if str(value).isdigit() else "0"


def _count(rs: dict[str, Any]) -> int:
    return int((rs.get("spec") or {}).get("replicas") or 0)


def _scaled(value: Any, total: int, up: bool) -> int:
    """intstr.GetScaledValueFromIntOrPercent."""
    if isinstance(value, int):
        return value
    text = str(value)
    if text.endswith("%") and text[:-1].isdigit():
        exact = int(text[:-1]) * total / 100
        return int(-(-exact // 1)) if up else int(exact // 1)
    return int(text) if text.isdigit() else 0


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), None)


def _set_condition(obj: dict[str, Any], kind: str, status: str, reason: str, message: str, when: str,
                   transition: str | None = None) -> None:
    """SetDeploymentCondition: nothing changes when status and reason are the same; otherwise the
    condition is replaced (its transition time kept if its status is) and goes last."""
    conditions = obj.setdefault("status", {}).setdefault("conditions", [])
    current = next((c for c in conditions if c.get("type") == kind), None)
    if current is not None and current.get("status") == status and current.get("reason") == reason:
        return
    if transition is None:
        transition = current["lastTransitionTime"] if current is not None and current.get("status") == status else when
    conditions[:] = [c for c in conditions if c.get("type") != kind]
    conditions.append({"type": kind, "status": status, "lastUpdateTime": when, "lastTransitionTime": transition,
                       "reason": reason, "message": message})


def _qos_class(spec: dict[str, Any]) -> str:
    """Guaranteed when every container's requests equal its limits for cpu and memory,
    BestEffort with none at all, Burstable otherwise."""
    containers = spec.get("containers") or []
    resources = [(c.get("resources") or {}) for c in containers]
    if not any(r.get("requests") or r.get("limits") for r in resources):
        return "BestEffort"
    for r in resources:
        limits, requests = r.get("limits") or {}, r.get("requests") or {}
        for name in ("cpu", "memory"):
            if name not in limits or requests.get(name, limits[name]) != limits[name]:
                return "Burstable"
    return "Guaranteed"


def parse_request(method: str, raw_path: str) -> Request:
    """Map a URL to (verb, group, version, resource, subresource, namespace, name)."""
    split = urlsplit(raw_path)
    query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
    parts = [unquote(p) for p in split.path.strip("/").split("/")]
    base = Request(method, split.path, query)
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return base
    if not rest:
        return base
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
    return Request(method, split.path, query, verb, group, version, resource, subresource, namespace, name,
                   dry_run=method in WRITE_METHODS and "dryRun" in query)



class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server_version = "fake-kube/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # ------------------------------------------------------------------ replies

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        fault, self.after_write = getattr(self, "after_write", None), None
        if fault is not None:  # the write is stored: its answer is replaced
            if fault.outcome == "drop":
                pending = getattr(self, "pending", None)
                if pending is not None and not self.recorded:  # before the close, as above
                    self.kube._record(dataclasses.replace(pending, status=code))
                    self.recorded = True
                self.close_connection = True
                self.connection.shutdown(2)
                return
            if fault.outcome == "stall":
                time.sleep(fault.stall_s)
            else:
                code = int(fault.outcome)
                body = json.dumps(rules.status(code, rules.REASONS.get(code, "InternalError"),
                                               f"injected failure {code} after the write was stored")).encode()
                content_type = "application/json"
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, doc: dict[str, Any]) -> int:
        self._send(code, json.dumps(doc).encode(), "application/json")
        return code

    def _text(self, code: int, text: str) -> int:
        self._send(code, text.encode(), "text/plain")
        return code

    # ------------------------------------------------------------------ routing

    def _serve(self, method: str) -> None:
        kube = self.kube
        raw = b""
        if method != "GET" and self.headers.get("Content-Length"):
            raw = self.rfile.read(int(self.headers["Content-Length"]))
        req = dataclasses.replace(parse_request(method, self.path), content_type=self.headers.get("Content-Type"),
                                  user_agent=self.headers.get("User-Agent"),
                                  body=raw.decode("utf-8", errors="replace"))
        target = self.path
        delay = kube._delay_for(target)
        if delay > 0:
            time.sleep(delay)
        outcome = kube._failure_for(target)
        fault = kube._fault_for(req, target) if outcome is None else None
        if fault is not None and not fault.after_write:
            outcome = fault.outcome
        self.after_write = fault if fault is not None and fault.after_write else None
        code = 0
        self.recorded = False
        self.pending = req
        kube._begin()  # nothing is sent before this, so no client can finish unrecorded
        try:
            if outcome == "drop":
                # recorded before the close: the client moves on once it sees it, and the log
                # keeps the order the requests came in
                kube._record(dataclasses.replace(req, status=code))
                self.recorded = True
                self.close_connection = True
                self.connection.shutdown(2)
            elif isinstance(outcome, int):
                code = self._json(outcome, rules.status(outcome, rules.REASONS.get(outcome, "InternalError"),
                                                        f"injected failure {outcome}"))
            else:
                code = self._route(req)
        except (BrokenPipeError, ConnectionResetError, OSError):
            code = -1  # the client gave up (timeout) before the answer
        finally:
            if not self.recorded:
                kube._record(dataclasses.replace(req, status=code))

    def _route(self, req: Request) -> int:
        kube = self.kube
        if kube.token is not None and self.headers.get("Authorization") != f"Bearer {kube.token}":
            return self._json(401, rules.unauthorized())
        if req.verb is None:
            if req.path in ("/version", "/version/"):
                return self._json(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"})
            found = rules.discovery(req.path.split("?")[0], kube.served)
            if found is not None:
                return self._json(200, found)
            return self._json(404, rules.no_such_resource())
        if not kube.authorize(req):
            return self._json(403, rules.forbidden(kube.user, req.verb, req.api_group or "", req.resource or "",
                                                   req.subresource, req.namespace, req.name))
        group, version, resource = req.api_group or "", req.version or "", req.resource or ""
        if not kube.served(group, version) or (group, resource) not in rules.RESOURCE_KINDS:
            return self._json(404, rules.no_such_resource())
        if req.method != "GET":
            code, doc = kube.write(req)
            return self._json(code, doc)
        if req.verb == "watch":
            return self._watch(req, group, version, resource)
        with kube._lock:  # the controllers catch up with the clock before anything is read
            kube.reconcile()
            if req.name is None:
                return self._list(req, group, version, resource)
            obj = kube.get_object(group, resource, req.namespace, req.name.split(":")[0])
            if obj is None or (req.subresource == "proxy" and resource != "pods"):
                return self._json(404, rules.not_found(group, resource, req.name.split(":")[0]))
            if req.subresource is None:
                return self._json(200, rules.as_served(obj, version, group))
            if req.subresource == "log" and resource == "pods":
                return self._log(req, obj)
            if req.subresource == "status":
                return self._json(200, rules.as_served(obj, version, group))
            if req.subresource == "scale" and rules.RESOURCE_KINDS[(group, resource)] in SCALABLE:
                return self._json(200, kube.scale_of(obj))
            if req.subresource != "proxy":
                return self._json(404, rules.no_such_resource())
            obj = copy.deepcopy(obj)
        return self._proxy(req, obj)  # not under the lock: the upstream may take its time

    def _list(self, req: Request, group: str, version: str, resource: str) -> int:
        try:
            labels = rules.parse_label_selector(req.query.get("labelSelector", ""))
            fields = rules.parse_field_selector(req.query.get("fieldSelector", ""), resource)
        except rules.SelectorError as e:
            return self._json(400, rules.bad_request(str(e)))
        items = []
        for obj in self.kube.list_objects(group, resource, req.namespace):
            if rules.labels_match(labels, obj["metadata"].get("labels") or {}) and rules.fields_match(fields, obj):
                item = copy.deepcopy(obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
        kind = rules.RESOURCE_KINDS[(group, resource)]
        return self._json(200, {
            "kind": f"{kind}List",
            "apiVersion": f"{group}/{version}" if group else version,
            "metadata": {"resourceVersion": str(self.kube._rv)},
            "items": items,
        })

    def _watch(self, req: Request, group: str, version: str, resource: str) -> int:
        """A watch as the API server streams it: chunked JSON lines {"type", "object"}, ADDED for
        what exists when no resourceVersion (or "0") is given, then every change after it, until
        timeoutSeconds; a resourceVersion older than the stand-in's history is an ERROR event
        with the 410 Expired Status, as the watch cache sends it."""
        kube = self.kube
        try:
            labels = rules.parse_label_selector(req.query.get("labelSelector", ""))
            fields = rules.parse_field_selector(req.query.get("fieldSelector", ""), resource)
        except rules.SelectorError as e:
            return self._json(400, rules.bad_request(str(e)))
        since = req.query.get("resourceVersion", "")
        timeout = float(req.query.get("timeoutSeconds") or 1800)
        kind = rules.RESOURCE_KINDS[(group, resource)]
        with kube._lock:
            kube.reconcile()
            first = kube._changes[0][0] if kube._changes else kube._rv + 1
            if since in ("", "0"):
                initial = [("ADDED", obj) for obj in kube.list_objects(group, resource, req.namespace)]
                cursor = kube._rv
            else:
                initial, cursor = [], int(since) if since.isdigit() else -1
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        self.close_connection = True
        kube._record(dataclasses.replace(req, status=200))  # a watch is recorded when it starts
        self.recorded = True

        def send(event: str, obj: dict[str, Any]) -> None:
            if event != "ERROR":
                if not (rules.labels_match(labels, obj["metadata"].get("labels") or {})
                        and rules.fields_match(fields, obj)):
                    return
                obj = {**rules.as_served(obj, version, group), "kind": kind}
            line = (json.dumps({"type": event, "object": obj}) + "\n").encode()
            self.wfile.write(f"{len(line):x}\r\n".encode() + line + b"\r\n")
            self.wfile.flush()

        if 0 <= cursor < first - 1 or cursor < 0:
            send("ERROR", rules.status(410, "Expired", f"too old resource version: {since} ({first})"))
        else:
            for event, obj in initial:
                send(event, obj)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline and kube._server is not None:
                with kube._lock:
                    kube.reconcile()
                    start = bisect.bisect_right(kube._changes, cursor, key=lambda c: c[0])
                    fresh = [c for c in kube._changes[start:] if (c[2], c[3]) == (group, resource)
                             and (req.namespace is None or c[4] == req.namespace)]
                    cursor = kube._rv
                for _rv, event, _g, _r, _ns, obj in fresh:
                    send(event, obj)
                time.sleep(0.02)
        self.wfile.write(b"0\r\n\r\n")
        return 200

    def _log(self, req: Request, pod: dict[str, Any]) -> int:
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = req.query.get("container")
        if not container:
            if len(containers) != 1:
                return self._json(400, rules.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"))
            container = containers[0]
        if container not in containers:
            return self._json(400, rules.bad_request(f"container {container} is not valid for pod {name}"))
        previous = req.query.get("previous") in ("true", "1")
        text = self.kube.logs.get((ns, name, container, previous))
        if text is None and previous:
            return self._json(400, rules.bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'))
        if text is None:
            waiting = rules.waiting_reason(pod, container)
            if waiting:
                return self._json(400, rules.bad_request(
                    f'container "{container}" in pod "{name}" is waiting to start: {waiting}'))
            text = ""
        return self._text(200, rules.log_body(text, req.query))

    def _proxy(self, req: Request, pod: dict[str, Any]) -> int:
        parts = (req.name or "").split(":")
        if len(parts) == 3:  # scheme:name:port
            parts = parts[1:]
        port = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 80
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        rest = self.path.split("/proxy", 1)[1] if "/proxy" in self.path else "/"
        base = self.kube.upstreams.get((ns, name, port))
        pod_ip = (pod.get("status") or {}).get("podIP", "10.0.0.1")
        if base is None:
            return self._json(503, rules.status(
                503, "ServiceUnavailable",
                f"error trying to reach service: dial tcp {pod_ip}:{port}: connect: connection refused"))
        split = urlsplit(base)
        conn = http.client.HTTPConnection(split.hostname or "127.0.0.1", split.port, timeout=30)
        try:
            conn.request("GET", rest or "/")
            answer = conn.getresponse()
            body = answer.read()
            content_type = answer.getheader("Content-Type", "text/plain")
            code = answer.status
        except OSError as e:
            return self._json(503, rules.status(503, "ServiceUnavailable", f"error trying to reach service: {e}"))
        finally:
            conn.close()
        self._send(code, body, content_type)
        return code


FakeKube.handler, FakeKube.handler_attr, FakeKube.thread_name = _Handler, "kube", "fake-kube"
