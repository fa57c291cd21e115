"""A live KubeSnapshot as Evidence, and as the files of an evidence bundle.

Both go through the same parsers the bundle reader uses, so a bundle written with
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
from typing import Any, TypeVar

import yaml

from collectors.errors import ParseError
from collectors.kube.snapshot import KubeSnapshot
from collectors.parsers.kube_events import events_from_objects
from collectors.parsers.kube_objects import autoscaler_from_object, pods_from_objects, workload_from_object
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

try:
    from yaml import CSafeDumper as _Dumper
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeDumper as _Dumper  # type: ignore[assignment]

T = TypeVar("T")

LOG_HEADER = "# ---- pod/{pod} container/{container} {run} ----"


def snapshot_evidence(snap: KubeSnapshot) -> Evidence:
    """Typed evidence from a snapshot; an object that does not parse becomes a ReadIssue."""
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
            fields["workload"] = found[0]
            if found[1] is not None:
                fields["server_config"] = found[1]
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
        target=f"{snap.namespace}/{snap.name}",
        collected_at=snap.collected_at,
        sources=tuple(dict.fromkeys(snap.sources)),
        issues=tuple(issues),
        **{k: v for k, v in fields.items() if v is not None},
    )


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
    """File name -> text for the bundle folder (bundle.json is written apart, from the evidence)."""
    files: dict[str, str] = {}
    if snap.workload is not None:
        files["deployment.yaml"] = to_yaml(snap.workload)
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
