"""Helpers for tests against the stand-in API server: load a scenario (objects, logs, metrics
served by stand-in engines), write a kubeconfig with several contexts, read RBAC rules out of
deploy/'s RBAC manifests.

A scenario is a folder under tests/data/kube_live/:
- `objects.yaml`: every object, as multi-document YAML (Lists are unpacked);
- `logs/<pod>.<container>.log` and `logs/<pod>.<container>.previous.log`;
- `scenario.yaml`: `metrics: {<pod>: {port: 8000, file: <path under tests/data>}}` — a stand-in
  engine serves that text and the pod proxy forwards `<pod>:<port>` to it.

>>> with running_scenario("vllm-incident") as sc:
...     sc.kube.url.startswith("http://127.0.0.1:")
True
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from collectors.kube.client import make_api_client
from tests.support import yaml_c
from tests.support.fake_engines import FakeEngine
from tests.support.fake_kube import FakeKube, ManualClock

DATA = Path(__file__).parent.parent / "data"
SCENARIOS = DATA / "kube_live"
DEPLOY = Path(__file__).parent.parent.parent / "deploy"
#: the reader (the ClusterRole the bot runs with), the one-namespace reader, the remediation writer
RBAC_MANIFEST = DEPLOY / "base" / "rbac-reader.yaml"
RBAC_NAMESPACED_MANIFEST = DEPLOY / "rbac-namespaced.yaml"
WRITER_MANIFEST = DEPLOY / "overlays" / "remediation" / "rbac-writer.yaml"
TEST_TOKEN = "test-token-0123456789abcdef"


@dataclass
class Scenario:
    kube: FakeKube
    engines: dict[str, FakeEngine] = field(default_factory=dict)
    kubeconfig: Path | None = None

    def api(self, context: str | None = None) -> k8s.ApiClient:
        assert self.kubeconfig is not None, "write a kubeconfig first"
        return make_api_client(str(self.kubeconfig), context)


def load_objects(path: Path) -> list[dict[str, Any]]:
    objects = []
    for doc in yaml_c.safe_load_all(path.read_text(encoding="utf-8")):
        if not doc:
            continue
        if str(doc.get("kind", "")).endswith("List"):
            objects.extend(doc.get("items") or [])
        else:
            objects.append(doc)
    return objects


def load_scenario(kube: FakeKube, name: str, engines: dict[str, FakeEngine] | None = None,
                  direct: bool = False) -> dict[str, FakeEngine]:
    """Put a scenario into a running FakeKube; start one FakeEngine per pod with metrics.

    `direct`: also give each pod with metrics a port named "metrics" (the engine's real
    loopback port) and 127.0.0.1 as its IP, so /metrics can be read without the proxy.
    """
    folder = SCENARIOS / name
    objects = load_objects(folder / "objects.yaml")
    spec = yaml_c.safe_load((folder / "scenario.yaml").read_text(encoding="utf-8")) if (folder / "scenario.yaml").exists() else {}
    engines = {} if engines is None else engines
    namespaces = {o["metadata"]["name"]: o for o in objects if o.get("kind") == "Pod"}
    for pod_name, served in (spec or {}).get("metrics", {}).items():
        engine = FakeEngine.from_file(DATA / served["file"]).start()
        engines[pod_name] = engine
        pod = namespaces[pod_name]
        ns = pod["metadata"].get("namespace", "default")
        kube.set_upstream(ns, pod_name, int(served["port"]), engine.url)
        if direct:
            pod.setdefault("status", {})["podIP"] = "127.0.0.1"
            container = pod["spec"]["containers"][0]
            container["ports"] = [{"containerPort": engine.port, "name": "metrics"}]
    kube.add(*objects)
    logs = folder / "logs"
    if logs.is_dir():
        for path in sorted(logs.glob("*.log")):
            parts = path.name[: -len(".log")].split(".")
            previous = parts[-1] == "previous"
            pod, container = parts[0], parts[1]
            ns = namespaces[pod]["metadata"].get("namespace", "default") if pod in namespaces else "default"
            kube.set_log(ns, pod, container, path.read_text(encoding="utf-8"), previous=previous)
    return engines


def add_replicas(kube: FakeKube, namespace: str, template_pod: str, count: int, metrics_url: str,
                 port: int = 8000) -> list[str]:
    """Clone a loaded pod `count` times, each on its own new node, restarted once (so it has a
    previous log), with its /metrics served from `metrics_url`. For round-trip and latency
    measurements of many-pod Deployments. Returns the new pod names."""
    template = kube.get_object("", "pods", namespace, template_pod)
    assert template is not None, f"no pod {namespace}/{template_pod}"
    names = []
    for i in range(count):
        pod = copy.deepcopy(template)
        name = f"{template_pod[: template_pod.rfind('-')]}-r{i:03d}"
        node = f"{template['spec'].get('nodeName', 'node')}-r{i:03d}"
        pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
        pod["metadata"]["name"] = name
        pod["spec"]["nodeName"] = node
        for status in pod.get("status", {}).get("containerStatuses", []):
            status["restartCount"] = max(1, status.get("restartCount", 0))
        kube.add(pod, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
                       "status": {"capacity": {"nvidia.com/gpu": "8"}, "allocatable": {"nvidia.com/gpu": "8"}}})
        container = pod["spec"]["containers"][0]["name"]
        kube.set_log(namespace, name, container, "INFO 03-09 20:00:00 server.py:1] previous run\n", previous=True)
        kube.set_log(namespace, name, container, "INFO 03-09 20:05:00 server.py:1] current run\n")
        kube.set_upstream(namespace, name, port, metrics_url)
        names.append(name)
    return names


def write_kubeconfig(path: Path, clusters: Mapping[str, str], current: str | None = None,
                     token: str = TEST_TOKEN, namespace: str | None = None) -> Path:
    """A kubeconfig with one context per entry of `clusters` (context name -> server URL)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Config",
        "preferences": {},
        "clusters": [{"name": f"{ctx}-cluster", "cluster": {"server": url}} for ctx, url in clusters.items()],
        "users": [{"name": f"{ctx}-user", "user": {"token": token}} for ctx in clusters],
        "contexts": [
            {"name": ctx, "context": {"cluster": f"{ctx}-cluster", "user": f"{ctx}-user",
                                      **({"namespace": namespace} if namespace else {})}}
            for ctx in clusters
        ],
        "current-context": current or next(iter(clusters)),
    }
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def rbac_rules(kind: str = "ClusterRole", manifest: Path = RBAC_MANIFEST) -> list[dict[str, Any]]:
    """The rules of the first ClusterRole (or Role) in a manifest (the reader's by default)."""
    for doc in yaml_c.safe_load_all(manifest.read_text(encoding="utf-8")):
        if doc and doc.get("kind") == kind:
            return list(doc.get("rules") or [])
    raise AssertionError(f"no {kind} in {manifest}")


@contextlib.contextmanager
def running_scenario(name: str | None, tmp_path: Path | None = None, *, token: str | None = TEST_TOKEN,
                     direct: bool = False, context: str = "prod") -> Iterator[Scenario]:
    """A FakeKube loaded with a scenario (or empty), its engines, and a kubeconfig; all stopped after."""
    kube = FakeKube(token=token).start()
    scenario = Scenario(kube)
    try:
        if name is not None:
            load_scenario(kube, name, scenario.engines, direct=direct)
        if tmp_path is not None:
            scenario.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", {context: kube.url},
                                                   token=token or TEST_TOKEN)
        yield scenario
    finally:
        kube.stop()
        for engine in scenario.engines.values():
            engine.stop()


#: the vllm-incident scenario's namespace and pods (q8wvn restarted once, after a CUDA OOM)
INCIDENT_NS = "llm"
INCIDENT_POD_A = "vllm-server-7d9c8b6f4-2xkqp"
INCIDENT_POD_B = "vllm-server-7d9c8b6f4-q8wvn"
#: ... its Deployment (2 replicas, maxSurge 1, maxUnavailable 0), the ReplicaSet that runs them,
#: and the HPA that keeps it between 2 and 2 replicas
INCIDENT_DEPLOYMENT = "vllm-server"
INCIDENT_REPLICASET = "vllm-server-7d9c8b6f4"
INCIDENT_HPA = "vllm-server-queue"

#: the PATCH content types, as the official client takes them in `_content_type`
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def manual_clock(scenario: Scenario, ready_after_s: float | None = None) -> ManualClock:
    """Put the scenario's controllers on a clock the test moves (`clock.advance(60)`), with new
    pods ready `ready_after_s` after they start when given. Call it before the first write."""
    clock = ManualClock()
    scenario.kube.clock = clock
    if ready_after_s is not None:
        scenario.kube.rollout.ready_after_s = ready_after_s
    return clock


def run_cli(capsys: Any, sc: Scenario, store: Path, *argv: str) -> tuple[int, Any]:
    """`gpumem ARGV` against the scenario's API server (context prod) with `store`: the exit
    code and the JSON it printed, else its stdout and stderr as text."""
    import json

    from bot.main import main

    rc = main([*argv, "--kubeconfig", str(sc.kubeconfig), "--context", "prod", "--store", str(store), "--lang", "en"])
    out = capsys.readouterr()
    try:
        return rc, json.loads(out.out)
    except ValueError:
        return rc, out.out + out.err
