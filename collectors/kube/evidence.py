"""A live KubeSnapshot as Evidence, and as the files of an evidence bundle.

Both start from the snapshot with credentials masked (`redact_snapshot`: objects through
`pod_reads.scrub`, log tails, /metrics texts and issues through `runbooks.model.secrets`), so
no copy of a secret reaches the evidence or a file. Both go through the same parsers the
bundle reader uses, so a bundle written with
`bundle_files` (plus bundle.json for what has no raw file) reads back to the same evidence:

- deployment.yaml, pods.yaml (a v1 List), events.yaml (a List), hpa.yaml;
- logs.txt: the server container's log tails, pod by pod, the previous run first, each
  block headed by a `# ----` line that matches no log signal;
- metrics-<pod>.txt: each pod's /metrics (the Deployment total has no raw file: it travels
  in bundle.json as server_metrics, beside the per-pod readings in pod_metrics);
- replicasets.yaml, pdb.yaml, services.yaml, nodes.yaml, node-pods.yaml: what the rest was
  read from, for people (their evidence travels in bundle.json).

>>> # ev = snapshot_evidence(gather_workload(api, "llm", "vllm-server"))
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

import yaml

from collectors.errors import ParseError
from collectors.kube.managers import managers_of
from collectors.kube.pod_reads import scrub
from collectors.kube.snapshot import KubeSnapshot
from collectors.parsers.kube_events import events_from_objects
from collectors.parsers.kube_objects import (
    autoscaler_from_object,
    pods_from_objects,
    spec_owner_config,
    workload_from_object,
)
from collectors.parsers.kube_related import (
    colocated_from_object,
    disruption_from_object,
    node_from_object,
    replica_set_from_object,
    routes_from_objects,
)
from collectors.parsers.logs import parse_server_log
from collectors.parsers.metrics import parse_metrics
from collectors.parsers.metrics_total import sum_server_metrics
from collectors.parsers.textio import iter_lines
from runbooks.model.evidence import Evidence, LogSignals, ReadIssue
from runbooks.model.managers import Manager
from runbooks.model.secrets import redact_evidence, redact_text

try:
    from yaml import CSafeDumper as _Dumper
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeDumper as _Dumper  # type: ignore[assignment]

T = TypeVar("T")

LOG_HEADER = "# ---- pod/{pod} container/{container} {run} ----"


def snapshot_target(snap: KubeSnapshot) -> str:
    """NAMESPACE/NAME of the workload, or NAMESPACE/KIND/NAME of the InferenceService or
    LeaderWorkerSet the target named (the one target grammar, `bot.grammar.slack.parse_target`)."""
    if snap.spec_owner is not None and snap.declared_in is not None:
        kind, name = snap.declared_in
        return f"{snap.namespace}/{kind.lower()}/{name}"
    return f"{snap.namespace}/{snap.name}"


def redact_snapshot(snap: KubeSnapshot) -> KubeSnapshot:
    """The snapshot with credentials masked in every object (`scrub`), log tail, /metrics text
    and issue. Numbers are never touched; a snapshot already redacted is returned as it is.

    >>> from datetime import datetime
    >>> from collectors.kube.snapshot import LogTail
    >>> snap = KubeSnapshot("llm", "x", "Deployment", "https://k", None, datetime(2026, 1, 1),
    ...                     logs=(LogTail("p", "c", False, "login with hf_" + "a" * 34 + "\\n"),))
    >>> redact_snapshot(snap).logs[0].text
    'login with <redacted>\\n'
    """
    if snap.redacted:
        return snap

    def objects(items: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        return tuple(scrub(o) if isinstance(o, dict) else o for o in items)

    return replace(
        snap,
        workload=scrub(snap.workload) if isinstance(snap.workload, dict) else snap.workload,
        replica_sets=objects(snap.replica_sets), pods=objects(snap.pods), events=objects(snap.events),
        hpa=scrub(snap.hpa) if isinstance(snap.hpa, dict) else snap.hpa, pdbs=objects(snap.pdbs),
        spec_owner=scrub(snap.spec_owner) if isinstance(snap.spec_owner, dict) else snap.spec_owner,
        services=objects(snap.services), ingresses=objects(snap.ingresses), nodes=objects(snap.nodes),
        node_pods=objects(snap.node_pods),
        logs=tuple(replace(t, text=redact_text(t.text)) for t in snap.logs),
        scrapes=tuple(replace(s, url=redact_text(s.url), text=redact_text(s.text)) for s in snap.scrapes),
        issues=redact_evidence(snap.issues),
        redacted=True,
    )


def snapshot_evidence(snap: KubeSnapshot) -> Evidence:
    """Typed evidence from a snapshot (credentials masked first); an object that does not parse
    becomes a ReadIssue."""
    snap = redact_snapshot(snap)
    issues = list(snap.issues)
    fields: dict[str, Any] = {}

    def guarded(source: str, read: Callable[[], T]) -> T | None:
        try:
            return read()
        except ParseError as e:
            issues.append(ReadIssue(e.source or source, e.message, e.line))
            return None

    if snap.workload is not None:
        found = guarded("deployment.yaml", lambda: workload_from_object(snap.workload, "deployment.yaml"))
        if found is not None:
            fields["workload"] = replace(found[0], managers=workload_managers(snap))
            if found[1] is not None:
                fields["server_config"] = found[1]
    if snap.spec_owner is not None:  # the flags as the InferenceService or LeaderWorkerSet declares them
        owner_file = f"{str(snap.spec_owner.get('kind') or 'owner').lower()}.yaml"
        config = guarded(owner_file, lambda: spec_owner_config(snap.spec_owner, owner_file))
        if config is not None:
            fields["server_config"] = config
    fields["pods"] = guarded("pods.yaml", lambda: pods_from_objects(list(snap.pods), "pods.yaml")) or ()
    fields["events"] = guarded("events.yaml", lambda: events_from_objects(list(snap.events), "events.yaml")) or ()
    if snap.hpa is not None:
        fields["hpa"] = guarded("hpa.yaml", lambda: autoscaler_from_object(snap.hpa, "hpa.yaml"))
    if snap.logs:
        fields["logs"] = parse_logs(logs_text(snap), snap.collected_at.year)
    pod_metrics = []
    for scrape in snap.scrapes:
        name = metrics_file(scrape.pod)
        parsed = guarded(name, lambda s=scrape, n=name: parse_metrics(s.text, source=n))
        if parsed is not None:
            pod_metrics.append(parsed)
    if pod_metrics:
        fields["pod_metrics"] = tuple(pod_metrics)
        fields["server_metrics"] = sum_server_metrics(pod_metrics)
    fields["replica_sets"] = tuple(
        r for r in (guarded("replicasets.yaml", lambda o=o: replica_set_from_object(o, "replicasets.yaml"))
                    for o in snap.replica_sets) if r is not None)
    if snap.pdbs:
        fields["pdb"] = guarded("pdb.yaml", lambda: disruption_from_object(snap.pdbs[0], "pdb.yaml"))
    fields["routes"] = guarded("services.yaml", lambda: routes_from_objects(
        list(snap.services), list(snap.ingresses), "services.yaml")) or ()
    fields["nodes"] = tuple(n for n in (guarded("nodes.yaml", lambda o=o: node_from_object(o, "nodes.yaml"))
                                        for o in snap.nodes) if n is not None)
    fields["colocated"] = tuple(c for c in (guarded("node-pods.yaml", lambda o=o: colocated_from_object(
        o, "node-pods.yaml")) for o in snap.node_pods) if c is not None)
    return Evidence(
        target=snapshot_target(snap),
        collected_at=snap.collected_at,
        sources=tuple(dict.fromkeys(snap.sources)),
        issues=tuple(issues),
        **{k: v for k, v in fields.items() if v is not None},
    )


def workload_managers(snap: KubeSnapshot) -> tuple[Manager, ...]:
    """Who manages the workload (`managers_of`), with where its spec is declared when the owner
    chain says so: a pod-owned StatefulSet (a LeaderWorkerSet's workers) names the
    LeaderWorkerSet, not its leader pod; and the managers of the InferenceService or
    LeaderWorkerSet the target named (Argo CD tracking it, say), after the workload's own."""
    managers = list(managers_of(snap.workload))
    if snap.declared_in is not None:
        kind, name = snap.declared_in
        if not any(m.kind == "controller" and m.owner_kind == kind and m.name == name for m in managers):
            managers = [m for m in managers if not (m.kind == "controller" and m.owner_kind == "Pod")]
            managers.insert(0, Manager("controller", name, f"owner references of the pods lead to {kind}/{name}",
                                       namespace=snap.namespace, owner_kind=kind))
    if snap.spec_owner is not None:
        seen = {(m.kind, m.name) for m in managers}
        managers += [m for m in managers_of(snap.spec_owner) if (m.kind, m.name) not in seen]
    return tuple(managers)


def parse_logs(text: str, year: int) -> LogSignals:
    """logs.txt text through the same line splitting the bundle reader uses."""
    return parse_server_log(iter_lines(io.BytesIO(text.encode("utf-8"))), source="logs.txt", year=year)


def logs_text(snap: KubeSnapshot) -> str:
    """The server container's log tails of every pod, previous run first, each block headed."""
    blocks = []
    for tail in snap.logs:
        run = "previous" if tail.previous else "current"
        header = LOG_HEADER.format(pod=tail.pod, container=tail.container, run=run)
        body = tail.text if tail.text.endswith("\n") or not tail.text else tail.text + "\n"
        blocks.append(f"{header}\n{body}")
    return "".join(blocks)


def metrics_file(pod: str) -> str:
    return f"metrics-{pod}.txt"


def to_yaml(obj: Any) -> str:
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=200)


def _list(items: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": ""}, "items": list(items)}


def bundle_files(snap: KubeSnapshot) -> dict[str, str]:
    """File name -> text for the bundle folder (bundle.json is written apart, from the evidence),
    credentials masked first."""
    snap = redact_snapshot(snap)
    files: dict[str, str] = {}
    if snap.workload is not None:
        files["deployment.yaml"] = to_yaml(snap.workload)
    if snap.spec_owner is not None:  # what the flags were read from, for people and a replay
        files[f"{str(snap.spec_owner.get('kind') or 'owner').lower()}.yaml"] = to_yaml(snap.spec_owner)
    if snap.pods:
        files["pods.yaml"] = to_yaml(_list(snap.pods))
    if snap.events:
        files["events.yaml"] = to_yaml(_list(snap.events))
    if snap.hpa is not None:
        files["hpa.yaml"] = to_yaml(snap.hpa)
    if snap.logs:
        files["logs.txt"] = logs_text(snap)
    for scrape in snap.scrapes:
        files[metrics_file(scrape.pod)] = scrape.text
    extras = {"replicasets.yaml": snap.replica_sets, "pdb.yaml": snap.pdbs,
              "services.yaml": snap.services + snap.ingresses, "nodes.yaml": snap.nodes,
              "node-pods.yaml": snap.node_pods}
    for name, items in extras.items():
        if items:
            files[name] = to_yaml(_list(items))
    return files
