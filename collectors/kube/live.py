"""Read one Deployment (or StatefulSet) and everything around it from a live cluster.

Calls run in parallel in dependent waves, each started as soon as what it needs is known:

1. the workload (Deployment and StatefulSet looked up together when the kind is not given);
2. from its selector: pods and ReplicaSets; and, per namespace, ONE list each of events,
   HPAs, PDBs, Services and Ingresses, filtered here (constant round trips);
3. per pod: the previous container's log tail (only after a restart: the OOM evidence the
   restart hides), the current log tail and /metrics (through the API server's pod proxy,
   or directly by pod IP); per node: the Node and one `spec.nodeName=` list of its pods;
4. only for a TGI pod whose main port has no /metrics: its Prometheus port.

So the depth is three round trips (four at most), whatever the number of pods. The whole
gathering has one deadline; each call gets what is left of it as its timeout, and a call
still out when it passes becomes a "timeout" ReadIssue. Every other failure is a ReadIssue
too (see collectors.kube.client), except a workload that does not exist: TargetNotFound.

>>> # api = make_api_client(context="prod")
>>> # snap = gather_workload(api, "llm", "vllm-server", deadline_s=5.0)
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from collectors.errors import ParseError, field, said
from collectors.kube import pick as pick
from collectors.kube.client import (
    Call,
    HttpStatusError,
    cluster_url,
    issue_for,
)
from collectors.kube.owners import SPEC_OWNER_KINDS, controller_of, spec_owner_of_pod
from collectors.kube.pod_reads import (
    container_status,
    metrics_ports,
    restarted,
    scrub,
    server_container,
    started,
    trim_pod,
)
from collectors.kube.rest import KubeRest, path
from collectors.kube.runner import CallRunner
from collectors.kube.selectors import selector_query
from collectors.kube.snapshot import KubeSnapshot, LogTail, Scrape
from collectors.parsers.kube_related import colocated_from_object
from runbooks.model.errors import EvidenceUnavailable, TargetNotFound
from runbooks.model.evidence import ReadIssue, ServerConfig
from runbooks.model.units import MIB

DEFAULT_DEADLINE_S = 5.0
DEFAULT_TAIL_LINES = 2000
#: enough for ~3 calls per pod and 2 per node of an 8-pod Deployment at once, with room
DEFAULT_WORKERS = 64
_LOG_LIMIT_BYTES = 16 * MIB


# ------------------------------------------------------------------------- gather


def gather_workload(
    api: k8s.ApiClient,
    namespace: str,
    name: str,
    *,
    kind: str | None = None,
    context: str | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
    pool: Executor | None = None,
    tail_lines: int = DEFAULT_TAIL_LINES,
    direct_metrics: bool = False,
    metrics_port: int | None = None,
    metrics_path: str = "/metrics",
    now: datetime | None = None,
    clock: Callable[[], float] = time.monotonic,
    source_deadline_s: float | None = None,
    on_pods: Callable[[list[str]], None] | None = None,
) -> KubeSnapshot:
    """Read the workload `namespace/name` and what surrounds it, within `deadline_s` seconds in
    all and `source_deadline_s` for each call (None: `deadline_s`).

    `on_pods(names)` is told the workload's pods as soon as they are listed, so a caller can
    start reading another source about them while logs and metrics are still being read.

    `kind`: "Deployment", "StatefulSet", or None to look for both at once. `pool` runs the
    calls (give one with enough workers for ~3 calls per pod at once, and not the pool this
    function itself runs on); None uses a private pool. `direct_metrics`: read /metrics from
    the pod IP instead of through the API server's pod proxy. Raises TargetNotFound when the
    workload does not exist; every other failure is in `issues`.
    """
    own_pool = pool is None
    executor = pool if pool is not None else ThreadPoolExecutor(DEFAULT_WORKERS, thread_name_prefix="gpumem-kube")
    job = _Gather(api, namespace, name, context, tail_lines, direct_metrics, metrics_port, metrics_path)
    job.on_pods = on_pods
    runner = job.run = CallRunner(executor, deadline_s, cluster_url(api), clock, call_deadline_s=source_deadline_s)
    try:
        job.start(kind)
        runner.run()
    finally:
        if own_pool:
            executor.shutdown(wait=False, cancel_futures=True)
        if job.http is not None:
            job.http.clear()
    return job.snapshot(kind, now or datetime.now(UTC))


class _Gather:
    run: CallRunner
    on_pods: Callable[[list[str]], None] | None = None

    def __init__(self, api: k8s.ApiClient, namespace: str, name: str, context: str | None,
                 tail_lines: int, direct_metrics: bool, metrics_port: int | None, metrics_path: str) -> None:
        self.rest = KubeRest(api)
        self.ns, self.name, self.context = namespace, name, context
        self.tail_lines, self.direct, self.metrics_port = tail_lines, direct_metrics, metrics_port
        self.metrics_path = "/" + metrics_path.lstrip("/")
        self.http = urllib3.PoolManager(maxsize=16, retries=False) if direct_metrics else None
        self.kind: str | None = None
        self.workload: dict[str, Any] | None = None
        self.lookup_errors: list[tuple[Call, BaseException]] = []
        self.lookups = 0
        self.lists: dict[str, list[dict[str, Any]]] = {}
        self.pods: list[dict[str, Any]] = []
        self.container: str | None = None
        self.nodes: dict[str, dict[str, Any]] = {}
        self.node_pods: list[dict[str, Any]] = []
        self.logs: list[LogTail] = []
        self.scrapes: list[Scrape] = []
        #: the InferenceService or LeaderWorkerSet a target named, and whether it was found
        self.spec_owner: dict[str, Any] | None = None
        self.owner_kind: str | None = None
        self.owner_missing = False
        self.declared_in: tuple[str, str] | None = None

    # ---------------------------------------------------------------- wave 1

    def start(self, kind: str | None) -> None:
        if kind in SPEC_OWNER_KINDS:
            self._owner(kind)
            return
        readers = {"Deployment": "deployments", "StatefulSet": "statefulsets"}
        for wanted in [kind] if kind else list(readers):
            resource = readers[wanted]
            self.lookups += 1
            call = Call("get", resource, self.ns, self.name, group="apps")
            where = path("apis", "apps", "v1", "namespaces", self.ns, resource, self.name)
            self.run.submit(call, lambda t, w=where: self.rest.get_json(w, timeout_s=t),
                            lambda obj, k=wanted: self._on_workload(k, obj),
                            lambda e, c=call: self._on_lookup_error(c, e))

    # ---------------------------------------------------------------- wave 0: a spec owner

    def _owner(self, kind: str) -> None:
        """An InferenceService or LeaderWorkerSet: read it, then the one Deployment (KServe's raw
        deployment mode) or leader StatefulSet its controller made, found by owner reference."""
        group, version, plural = SPEC_OWNER_KINDS[kind]
        self.owner_kind = kind
        self.lookups += 1
        call = Call("get", plural, self.ns, self.name, group=group)
        where = path("apis", group, version, "namespaces", self.ns, plural, self.name)
        self.run.submit(call, lambda t: self.rest.get_json(where, timeout_s=t),
                        lambda obj: self._on_owner(kind, obj), lambda e, c=call: self._on_lookup_error(c, e))

    def _on_owner(self, kind: str, obj: dict[str, Any]) -> None:
        self.spec_owner = pick.with_kind(scrub(obj), kind, "/".join(SPEC_OWNER_KINDS[kind][:2]))
        self.declared_in = (kind, self.name)
        made, resource = ("Deployment", "deployments") if kind == "InferenceService" else ("StatefulSet", "statefulsets")

        def on_list(doc: dict[str, Any]) -> None:
            owned = [o for o in doc.get("items") or [] if isinstance(o, dict) and controller_of(o) == (kind, self.name)]
            if not owned:
                self.owner_missing = True
                return
            self._on_workload(made, sorted(owned, key=pick.name_of)[0])

        where = path("apis", "apps", "v1", "namespaces", self.ns, resource)
        self.run.submit(Call("list", resource, self.ns, group="apps"),
                        lambda t: self.rest.get_json(where, timeout_s=t), on_list)

    def _on_lookup_error(self, call: Call, error: BaseException) -> bool:
        self.lookup_errors.append((call, error))
        return True

    def _on_workload(self, kind: str, obj: dict[str, Any]) -> None:
        if self.workload is not None:
            return  # both kinds exist under this name (rare): the first answer is used
        self.kind, self.workload = kind, pick.with_kind(scrub(obj), kind, "apps/v1")
        if self.declared_in is None:
            self._declared_in(obj)
        try:
            query = selector_query((obj.get("spec") or {}).get("selector"), source=f"kube:{kind}")
        except ParseError as e:
            query = ""
            self.run.issues.append(ReadIssue(f"kube:{kind}", field("selector", e.message)))
        if query:
            self._list("pods", "", "v1", self._on_pods, labelSelector=query)
            if kind == "Deployment":
                self._list("replicasets", "apps", "v1", None, labelSelector=query)
        self._list("events", "", "v1", None)
        self._list("horizontalpodautoscalers", "autoscaling", "v2", None)
        self._list("poddisruptionbudgets", "policy", "v1", None)
        self._list("services", "", "v1", None)
        self._list("ingresses", "networking.k8s.io", "v1", None)

    def _declared_in(self, obj: dict[str, Any]) -> None:
        """Where the workload's spec is declared, by owner references: its controller when that is
        an InferenceService or LeaderWorkerSet; for a StatefulSet a pod owns (a LeaderWorkerSet's
        workers), the pod's own chain (`owners.spec_owner_of_pod`)."""
        owner = controller_of(obj)
        if owner is None:
            return
        if owner[0] in SPEC_OWNER_KINDS:
            self.declared_in = owner
            return
        if owner[0] != "Pod":
            return
        call = Call("get", "pods", self.ns, owner[1])

        def found(link: tuple[str, str] | None) -> None:
            self.declared_in = link

        self.run.submit(call, lambda t: spec_owner_of_pod(self.rest, self.ns, owner[1], timeout_s=t), found)

    def _list(self, resource: str, group: str, version: str, then: Callable[[list[dict[str, Any]]], None] | None,
              **query: Any) -> None:
        def on_ok(doc: dict[str, Any]) -> None:
            items = [item for item in doc.get("items") or [] if isinstance(item, dict)]
            self.lists[resource] = items
            if then is not None:
                then(items)

        prefix = ("apis", group, version) if group else ("api", version)
        where = path(*prefix, "namespaces", self.ns, resource)
        self.run.submit(Call("list", resource, self.ns, group=group),
                        lambda t: self.rest.get_json(where, query, timeout_s=t), on_ok)

    # ---------------------------------------------------------------- wave 3

    def _on_pods(self, items: list[dict[str, Any]]) -> None:
        kind = self.kind or "Deployment"
        name = pick.name_of(self.workload) if self.workload else self.name
        owned = (pick.with_kind(scrub(p), "Pod", "v1") for p in items if pick.owns_pod(kind, name, p))
        self.pods = sorted(owned, key=pick.name_of)
        if self.on_pods is not None:
            self.on_pods([pick.name_of(p) for p in self.pods])
        for pod in self.pods:
            name = pick.name_of(pod)
            index, config = server_container(pod)
            containers = (pod.get("spec") or {}).get("containers") or []
            if index is None:
                continue
            container = containers[index]
            self.container = self.container or container.get("name")
            status = container_status(pod, container.get("name"))
            if restarted(status):
                self._log(name, container["name"], previous=True)
            if started(status):
                self._log(name, container["name"], previous=False)
            self._metrics(pod, container, config)
            node = (pod.get("spec") or {}).get("nodeName")
            if node and node not in self.nodes:
                self.nodes[node] = {}
                self._node(node)

    def _log(self, pod: str, container: str, previous: bool) -> None:
        detail = f"{container},previous" if previous else container
        call = Call("get", "pods", self.ns, pod, "log", detail=detail)
        self.run.submit(
            call,
            lambda t: self.rest.get_text(
                path("api", "v1", "namespaces", self.ns, "pods", pod, "log"),
                {"container": container, "previous": True if previous else None, "tailLines": self.tail_lines,
                 "timestamps": True, "limitBytes": _LOG_LIMIT_BYTES}, timeout_s=t),
            lambda text: self.logs.append(LogTail(pod, container, previous, text)),
        )

    def _metrics(self, pod: dict[str, Any], container: dict[str, Any], config: ServerConfig | None) -> None:
        name = pick.name_of(pod)
        status = pod.get("status") or {}
        ports = metrics_ports(container, config, self.metrics_port)
        if status.get("phase") != "Running" or not ports or (self.direct and not status.get("podIP")):
            why = (said("metrics_not_read_phase", phase=str(status.get("phase")))
                   if status.get("phase") != "Running" else said("metrics_not_read_no_port"))
            self.run.issues.append(ReadIssue(f"kube:pods/proxy/{self.ns}/{name}", why, kind="skipped"))
            return
        self._scrape(name, status.get("podIP"), ports)

    def _scrape(self, pod: str, pod_ip: str | None, ports: list[int]) -> None:
        port, rest = ports[0], ports[1:]
        if self.direct:
            url = f"http://{pod_ip}:{port}{self.metrics_path}"
            call = Call("get", "pods", self.ns, pod, detail=f"direct:{port}")
            fn: Callable[[float], str] = lambda t: _http_get(self.http, url, t)  # noqa: E731
        else:
            url = f"pods/{pod}:{port}/proxy{self.metrics_path}"
            call = Call("get", "pods", self.ns, f"{pod}:{port}", "proxy", detail=self.metrics_path.lstrip("/"))
            where = path("api", "v1", "namespaces", self.ns, "pods", f"{pod}:{port}", "proxy",
                         *self.metrics_path.lstrip("/").split("/"))
            fn = lambda t: self.rest.get_text(where, timeout_s=t)  # noqa: E731

        def on_error(error: BaseException) -> bool:
            if rest and _worth_another_port(error):
                self._scrape(pod, pod_ip, rest)
                return True
            return False

        self.run.submit(call, fn, lambda text: self.scrapes.append(Scrape(pod, url, text)), on_error)

    def _node(self, node: str) -> None:
        def on_node(obj: dict[str, Any]) -> None:
            self.nodes[node] = scrub(obj)

        def on_pods(doc: dict[str, Any]) -> None:
            ours = {pick.name_of(p) for p in self.pods}
            for item in doc.get("items") or []:
                meta = item.get("metadata") or {}
                if meta.get("namespace") == self.ns and meta.get("name") in ours:
                    continue
                trimmed = trim_pod(item)
                if colocated_from_object(trimmed, source="kube:pods") is not None:
                    self.node_pods.append(trimmed)

        self.run.submit(Call("get", "nodes", None, node),
                        lambda t: self.rest.get_json(path("api", "v1", "nodes", node), timeout_s=t), on_node)
        selector = f"spec.nodeName={node},status.phase!=Succeeded,status.phase!=Failed"
        self.run.submit(Call("list", "pods", None, detail=f"spec.nodeName={node}"),
                        lambda t: self.rest.get_json(path("api", "v1", "pods"), {"fieldSelector": selector},
                                                     timeout_s=t),
                        on_pods)

    # ---------------------------------------------------------------- result

    def snapshot(self, kind: str | None, now: datetime) -> KubeSnapshot:
        issues = list(self.run.issues)
        if self.owner_missing:
            made = "Deployment" if self.owner_kind == "InferenceService" else "StatefulSet"
            why = (" (KServe's serverless mode runs Knative Services, which gpumem does not read)"
                   if self.owner_kind == "InferenceService" else "")
            raise EvidenceUnavailable("no_owned_workload", target=f"{self.ns}/{self.name}", kind=self.owner_kind,
                                      detail=f"{self.owner_kind} {self.ns}/{self.name} owns no {made} in namespace "
                                             f"{self.ns}{why}")
        if self.workload is None:
            errors = self.lookup_errors
            if len(errors) == self.lookups and all(isinstance(e, ApiException) and e.status == 404 for _, e in errors):
                raise TargetNotFound(kind or "Deployment", self.ns, self.name, self.context)
            seen = {(i.kind, i.message) for i in issues}
            for call, error in errors:
                issue = issue_for(error, call, self.run.server, self.run.per_call_s)
                if issue.kind != "not_found" and (issue.kind, issue.message) not in seen:
                    seen.add((issue.kind, issue.message))
                    issues.append(issue)
        kind = self.kind or (kind if kind not in SPEC_OWNER_KINDS else None) or "Deployment"
        name = pick.name_of(self.workload) if self.workload else self.name
        workload = self.workload or {}
        lists = self.lists
        replica_sets = pick.owned_replica_sets(workload, lists.get("replicasets", [])) if workload else []
        hpa = pick.target_hpa(kind, name, lists.get("horizontalpodautoscalers", []))
        services = pick.selecting_services(workload, lists.get("services", [])) if workload else []
        return KubeSnapshot(
            namespace=self.ns, name=name, kind=kind, server=self.run.server, context=self.context,
            collected_at=now, workload=self.workload, replica_sets=tuple(scrub(rs) for rs in replica_sets),
            pods=tuple(self.pods),
            events=tuple(pick.related_events(kind, name, lists.get("events", []), replica_sets, self.pods, hpa)),
            hpa=hpa,
            pdbs=tuple(pick.selecting_pdbs(workload, lists.get("poddisruptionbudgets", []))) if workload else (),
            services=tuple(services),
            ingresses=tuple(pick.routing_ingresses(services, lists.get("ingresses", []))),
            nodes=tuple(n for _, n in sorted(self.nodes.items()) if n),
            node_pods=tuple(sorted(self.node_pods, key=lambda p: (p["metadata"].get("namespace", ""),
                                                                  pick.name_of(p)))),
            container=self.container,
            logs=tuple(sorted(self.logs, key=lambda t: (t.pod, t.container, not t.previous))),
            scrapes=tuple(sorted(self.scrapes, key=lambda s: s.pod)),
            issues=tuple(issues), sources=tuple(self.run.sources), calls=self.run.calls,
            depth=self.run.depth, spec_owner=self.spec_owner, declared_in=self.declared_in,
        )


def _worth_another_port(error: BaseException) -> bool:
    """A refused, missing or unreachable /metrics may be served on the next port; 403 will not."""
    status = getattr(error, "status", None)
    return status in (404, 502, 503) or not isinstance(error, (ApiException, HttpStatusError))


def _http_get(http: urllib3.PoolManager | None, url: str, timeout_s: float) -> str:
    assert http is not None
    response = http.request("GET", url, timeout=urllib3.Timeout(total=timeout_s), redirect=False)
    if not 200 <= response.status <= 299:
        raise HttpStatusError(response.status, url)
    return bytes(response.data).decode("utf-8", errors="replace")
