"""LiveSource: gather a running Deployment's evidence from Kubernetes and Prometheus.

Kubernetes first (the workload, its pods, logs, events, /metrics through the pod proxy, in
dependent waves run in parallel), then Prometheus with the pod names it found. Every source
has its own deadline and the whole collection one more; what does not answer in time becomes
a "timeout" ReadIssue and the verdict goes on without it.

The result carries the bundle files too, so `gpumem collect` can write a bundle that
`gpumem triage --bundle` reads back to the same evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from collectors.errors import said
from collectors.kube.client import make_api_client
from collectors.kube.evidence import bundle_files, redact_snapshot, snapshot_evidence
from collectors.kube.live import KubeSnapshot, gather_workload
from collectors.kube.managers import with_sync_policy
from collectors.kube.rest import KubeRest
from runbooks.model.evidence import Evidence, GpuDevice, GpuSnapshot, MemoryHistory, ReadIssue
from runbooks.model.secrets import redact_evidence

#: the default deadline per source and for the whole collection, seconds (issue contract)
SOURCE_DEADLINE_S = 5.0
TOTAL_DEADLINE_S = 20.0


@dataclass(frozen=True)
class PrometheusOptions:
    url: str
    bearer_token: str | None = field(default=None, repr=False)
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    verify: bool | str = True
    window_s: float = 3600.0


@dataclass(frozen=True)
class LiveOptions:
    """Where and how to read. Secrets are never part of the repr."""

    kubeconfig: str | None = None
    context: str | None = None
    in_cluster: bool = False
    kind: str | None = None
    prometheus: PrometheusOptions | None = None
    source_deadline_s: float = SOURCE_DEADLINE_S
    total_deadline_s: float = TOTAL_DEADLINE_S
    tail_lines: int = 2000
    direct_metrics: bool = False
    #: where Argo CD's Applications are when a tracking id names no namespace
    #: (`remediation.argocd_namespace`)
    argocd_namespace: str = "argocd"


@dataclass(frozen=True)
class LiveCollection:
    evidence: Evidence
    #: bundle file name -> text (deployment.yaml, pods.yaml, events.yaml, logs.txt, metrics-<pod>.txt, ...)
    files: dict[str, str]
    kube: KubeSnapshot | None = None
    prometheus: Any = None


Progress = Callable[[str], None]


def collect_live(namespace: str, name: str, options: LiveOptions, now: datetime,
                 on_source: Progress | None = None, api: Any = None,
                 clock: Callable[[], float] = time.monotonic) -> LiveCollection:
    """Everything gpumem can read about `namespace/name`, within the deadlines.

    Raises `runbooks.model.errors.TargetNotFound` when the workload does not exist and
    `KubeConfigError` when no cluster is configured; every other failure is a ReadIssue.
    """
    start = clock()
    if api is None:
        api = make_api_client(options.kubeconfig, options.context, options.in_cluster)
    if on_source:
        on_source("kubernetes")
    prometheus = _PrometheusInParallel(options.prometheus, namespace, now, options.source_deadline_s)
    snap = gather_workload(api, namespace, name, kind=options.kind, context=options.context,
                           deadline_s=options.total_deadline_s, source_deadline_s=options.source_deadline_s,
                           tail_lines=options.tail_lines, direct_metrics=options.direct_metrics, now=now,
                           clock=clock, on_pods=prometheus.start if options.prometheus is not None else None)
    snap = redact_snapshot(snap)
    ev = snapshot_evidence(snap)
    if ev.workload is not None and any(m.kind == "argocd" for m in ev.workload.managers or ()):
        # the Application's sync policy (automated, selfHeal), as the plan reads it: a 403 or 404
        # leaves it unknown, and said so
        managers = with_sync_policy(ev.workload.managers or (), KubeRest(api), options.argocd_namespace,
                                    options.source_deadline_s)
        ev = replace(ev, workload=replace(ev.workload, managers=managers))
    issues = list(ev.issues)
    sources = list(ev.sources)
    extra: dict[str, Any] = {}
    history = None
    if options.prometheus is not None:
        if on_source:
            on_source("prometheus")
        history = prometheus.result([p.name for p in ev.pods],
                                    remaining_s=options.total_deadline_s - (clock() - start))
        if isinstance(history, ReadIssue):
            issues.append(history)
            history = None
        else:
            issues.extend(history.issues)
            found = history.evidence_fields()
            if found:
                sources.append("prometheus")
            if ev.requests is not None:
                found.pop("requests", None)  # per-request lines beat histogram estimates
            extra.update(found)
    else:
        issues.append(ReadIssue("prometheus", said("no_prometheus_url"), kind="skipped"))
    if ev.gpus is None and "memory_history" in extra:
        snapshot = latest_gpu_readings(extra["memory_history"])
        if snapshot is not None:
            extra["gpus"] = snapshot
    evidence = redact_evidence(replace(ev, collected_at=now, issues=tuple(issues),
                                       sources=tuple(dict.fromkeys(sources)), **extra), known=_secrets(options, api))
    return LiveCollection(evidence=evidence, files=bundle_files(snap), kube=snap, prometheus=history)


def _secrets(options: LiveOptions, api: Any) -> tuple[str, ...]:
    """The credentials this collection used (the Prometheus token and password, the cluster's
    token or password), masked wherever a server echoed them back."""
    found = [options.prometheus.bearer_token, options.prometheus.password] if options.prometheus else []
    config = getattr(api, "configuration", None)
    for value in (getattr(config, "api_key", None) or {}).values():
        found += str(value).split()[-1:]
    found.append(getattr(config, "password", None))
    return tuple(s for s in found if isinstance(s, str) and s)


class _PrometheusInParallel:
    """The Prometheus history, started as soon as the pods are known (while Kubernetes is still
    reading logs and metrics) and given its own deadline from then: the per-source deadline
    plus a second for the client's connect, never more than the collection has left."""

    def __init__(self, opts: PrometheusOptions | None, namespace: str, now: datetime, per_source_s: float):
        self.opts, self.namespace, self.now, self.per_source_s = opts, namespace, now, per_source_s
        self.pool: ThreadPoolExecutor | None = None
        self.future = None
        self.started_at = 0.0

    def start(self, pods: list[str]) -> None:
        if self.opts is None or self.future is not None or not pods:
            return
        # imported here, not at the top: a bundle triage imports this module too (through
        # bot.service.triage) and would pay 8-10 ms (python -X importtime) for a client it never uses
        from collectors.prometheus.client import PrometheusClient
        from collectors.prometheus.history import gather_history

        opts = self.opts
        basic = (opts.username, opts.password) if opts.username and opts.password is not None else None
        client = PrometheusClient(opts.url, bearer_token=opts.bearer_token, basic_auth=basic,
                                  timeout_s=self.per_source_s, verify=opts.verify)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="gpumem-prom")
        self.started_at = time.monotonic()
        self.future = self.pool.submit(gather_history, client, self.namespace, pods, window_s=opts.window_s,
                                       now=self.now)

    def result(self, pods: list[str], remaining_s: float):
        """The history, or a ReadIssue saying why there is none."""
        try:
            if self.future is None:
                if remaining_s <= 0:
                    return ReadIssue("prometheus", said("deadline_before_prometheus"), kind="timeout")
                self.start(pods)
            if self.future is None:  # no pods: nothing to look up
                from collectors.prometheus.history import PrometheusHistory  # lazy: see start()

                return PrometheusHistory(issues=(ReadIssue("prometheus", said("no_pods"), kind="skipped"),))
            limit_s = self.per_source_s + 1.0
            waited = time.monotonic() - self.started_at
            wait_s = max(0.0, min(limit_s - waited, remaining_s))
            try:
                # the client's own timeout bounds each query; this bounds the whole history, and a
                # history still running when it is up is left behind (shutdown does not wait for it)
                return self.future.result(timeout=wait_s)
            except FutureTimeout:
                return ReadIssue("prometheus", said("no_answer_within", seconds=f"{min(limit_s, waited + wait_s):.1f}"),
                                 kind="timeout")
        finally:
            if self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)


def latest_gpu_readings(history: MemoryHistory) -> GpuSnapshot | None:
    """The last DCGM reading of each device in the window, as a GPU snapshot.

    Live triage has no nvidia-smi; the newest point of Prometheus' history is the closest
    thing to it (at most one scrape interval old).
    """
    devices = []
    last_at = None
    for series in history.series:
        if not series.points:
            continue
        point = series.points[-1]
        host, _, rest = series.label.partition("/")
        profile = rest.split("/", 1)[1].split("#", 1)[0] if rest.count("/") else None
        devices.append(GpuDevice(index=series.label, used_bytes=int(point.used_bytes),
                                 total_bytes=int(point.total_bytes) if point.total_bytes else None,
                                 host=host or None, mig_profile=profile))
        last_at = point.at if last_at is None or point.at > last_at else last_at
    if not devices:
        return None
    return GpuSnapshot(source="dcgm", devices=tuple(devices), taken_at=last_at)
