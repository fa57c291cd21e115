"""Each live source has a deadline of its own: a slow API server delays a triage, it does not
change its verdict, and Prometheus does not wait behind Kubernetes."""

from __future__ import annotations

import copy
import json
import time

import pytest

from bot.main import main
from tests.support.kube_fixtures import running_scenario
from tests.support.prom_harness import NS, POD_A, POD_B, run_prometheus

TARGET = "llm/vllm-server"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    with run_prometheus(tmp_path_factory.mktemp("prom-deadlines")) as server:
        yield server


def _clone_pod(sc, name: str) -> None:
    pod = copy.deepcopy(sc.kube.get_object("", "pods", NS, "vllm-server-7d9c8b6f4-2xkqp"))
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
    pod["metadata"]["name"] = name
    sc.kube.add(pod)


def _triage(tmp_path, capsys, prometheus, latency_s: float) -> tuple[dict, float]:
    folder = tmp_path / f"at-{latency_s}"
    folder.mkdir()
    with running_scenario("vllm-incident", folder) as sc:
        for name in (POD_A, POD_B):
            _clone_pod(sc, name)
        sc.kube.latency_s = latency_s
        started = time.monotonic()
        rc = main(["triage", TARGET, "--kubeconfig", str(sc.kubeconfig), "--prometheus", prometheus.url,
                   "--json", "--lang", "en"])
        took = time.monotonic() - started
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    return doc, took


def _verdict(doc: dict) -> tuple:
    v = doc["verdict"]
    return v["primary"], v["priority"], [(c["id"], c["confidence"]) for c in v["causes"]]


def test_one_to_three_seconds_per_call_gives_the_verdict_of_a_fast_server(tmp_path, capsys, prometheus):
    fast, _ = _triage(tmp_path, capsys, prometheus, 0.0)
    assert fast["verdict"]["primary"] == "kv_cache_pressure" and "prometheus" in fast["sources"]
    for latency in (1.0, 2.0, 3.0):
        slow, took = _triage(tmp_path, capsys, prometheus, latency)
        timeouts = [i for i in slow["read_issues"] if i["kind"] == "timeout"]
        assert timeouts == [], (latency, timeouts)
        assert _verdict(slow) == _verdict(fast), latency
        assert set(slow["sources"]) == set(fast["sources"]), latency
        # three waves of calls (workload, its pods and lists, then logs and metrics), each
        # with its own 5 s deadline: slower, never cut short
        assert took >= 3 * latency


def test_a_call_past_its_own_deadline_is_named_with_that_deadline(tmp_path, capsys):
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.add_latency(r"/log\b", 3.0)  # only the logs are slow
        rc = main(["triage", TARGET, "--kubeconfig", str(sc.kubeconfig), "--source-deadline", "1",
                   "--json", "--lang", "en"])
    doc = json.loads(capsys.readouterr().out)
    timeouts = [i for i in doc["read_issues"] if i["kind"] == "timeout"]
    assert timeouts and all(i["source"].startswith("kube:pods/log/") for i in timeouts)
    assert all("no answer within 1.0 s" in i["message"] for i in timeouts)
    assert {"kube:deployments/llm/vllm-server", "kube:pods/llm"} <= set(doc["sources"])
    assert rc == 1
