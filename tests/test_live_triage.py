"""Live triage end to end: the real kubernetes client against the stand-in API server, the real
Prometheus with history, `gpumem collect` round-tripping through `gpumem triage --bundle`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from bot.main import main
from tests.support.kube_fixtures import running_scenario
from tests.support.prom_harness import NS, POD_A, POD_B, run_prometheus

TARGET = "llm/vllm-server"


def _json_run(capsys, *argv: str) -> tuple[int, dict]:
    rc = main(list(argv))
    return rc, json.loads(capsys.readouterr().out)


def _verdict(doc: dict) -> tuple:
    v = doc["verdict"]
    return v["primary"], [(c["id"], c["confidence"]) for c in v["causes"]], v["priority"]


def test_live_triage_reads_the_cluster_and_names_the_cause(tmp_path, capsys):
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc, doc = _json_run(capsys, "triage", TARGET, "--kubeconfig", str(sc.kubeconfig), "--context", "prod",
                            "--json", "--lang", "en")
    assert rc == 1
    assert doc["target"] == TARGET
    assert doc["engine"] == "vllm"
    # the scenario's per-pod scrapes: queue 24, KV usage 0.983, 60 preemptions across 2 pods
    assert doc["verdict"]["primary"] == "kv_cache_pressure"
    assert {"kube:deployments/llm/vllm-server", "kube:pods/llm"} <= set(doc["sources"])
    # the OOM the restart hid is found in the previous container's log
    signals = [f for f in doc["findings"] if f["id"] == "runtime_cuda_oom"]
    assert signals, [f["id"] for f in doc["findings"]]
    skipped = [i for i in doc["read_issues"] if i["source"] == "prometheus"]
    assert skipped and skipped[0]["kind"] == "skipped"


def test_collect_then_triage_bundle_reaches_the_same_verdict(tmp_path, capsys):
    out = tmp_path / "bundle"
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc, live = _json_run(capsys, "triage", TARGET, "--kubeconfig", str(sc.kubeconfig), "--json")
        assert main(["collect", TARGET, "--kubeconfig", str(sc.kubeconfig), "--out", str(out), "--lang", "en"]) == 0
        capsys.readouterr()
    files = {p.name for p in out.iterdir()}
    assert {"deployment.yaml", "pods.yaml", "logs.txt", "bundle.json"} <= files
    assert any(name.startswith("metrics-") for name in files)
    rc_back, back = _json_run(capsys, "triage", "--bundle", str(out), "--json")
    assert rc_back == rc
    assert _verdict(back) == _verdict(live)
    assert back["memory"] == live["memory"] and back["profile"] == live["profile"]


def test_missing_deployment_is_exit_2_with_a_clear_line(tmp_path, capsys):
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc = main(["triage", "llm/nope", "--kubeconfig", str(sc.kubeconfig), "--lang", "en"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "llm/nope not found" in err and "Traceback" not in err


def test_unreachable_cluster_is_reported_not_raised(tmp_path, capsys):
    with running_scenario(None, tmp_path) as sc:
        kubeconfig = sc.kubeconfig
    # the server is stopped now: every call is refused
    rc = main(["triage", TARGET, "--kubeconfig", str(kubeconfig), "--lang", "en", "--deadline", "5"])
    captured = capsys.readouterr()
    assert rc == 3  # nothing could be read
    assert "cannot reach http://127.0.0.1" in captured.out and "connection refused" in captured.out
    assert "test-token" not in captured.out + captured.err


def _clone_pod(sc, name: str) -> None:
    template = sc.kube.get_object("", "pods", NS, "vllm-server-7d9c8b6f4-2xkqp")
    pod = copy.deepcopy(template)
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
    pod["metadata"]["name"] = name
    sc.kube.add(pod)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    with run_prometheus(tmp_path_factory.mktemp("prom")) as server:
        yield server


def test_live_triage_with_prometheus_history_saves_the_memory_chart(tmp_path, capsys, prometheus):
    bundle = tmp_path / "saved"
    with running_scenario("vllm-incident", tmp_path) as sc:
        for name in (POD_A, POD_B):
            _clone_pod(sc, name)
        rc = main(["triage", TARGET, "--kubeconfig", str(sc.kubeconfig), "--prometheus", prometheus.url,
                   "--save-bundle", str(bundle), "--json", "--lang", "zh"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert "prometheus" in doc["sources"]
    png = (bundle / "gpu-memory.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000
    saved = json.loads((bundle / "bundle.json").read_text())
    history = saved["evidence"]["memory_history"]
    assert history is not None and len(history["series"]) >= 2
    assert len(history["restarts_at"]) >= 1


def test_secrets_in_env_never_reach_the_bundle(tmp_path, capsys):
    out = tmp_path / "b"
    with running_scenario("vllm-incident", tmp_path) as sc:
        main(["collect", TARGET, "--kubeconfig", str(sc.kubeconfig), "--out", str(out)])
    capsys.readouterr()
    text = "".join(p.read_text(errors="replace") for p in Path(out).iterdir() if p.is_file())
    assert "hf_live_secret_value" not in text


def test_latest_dcgm_point_stands_in_for_nvidia_smi():
    from datetime import UTC, datetime

    from collectors.live import latest_gpu_readings
    from runbooks.model.evidence import MemoryHistory, MemoryPoint, MemorySeries

    t1, t2 = datetime(2026, 3, 9, 20, 0, tzinfo=UTC), datetime(2026, 3, 9, 20, 1, tzinfo=UTC)
    hist = MemoryHistory("prometheus", series=(
        MemorySeries("node-1/gpu0", (MemoryPoint(t1, 1.0e10, 8.5e10), MemoryPoint(t2, 7.6e10, 8.5e10))),
        MemorySeries("node-1/gpu2/3g.40gb#1", (MemoryPoint(t2, 3.0e10, 4.2e10),)),
        MemorySeries("node-2/gpu1", ()),
    ))
    snap = latest_gpu_readings(hist)
    assert snap.source == "dcgm" and snap.taken_at == t2
    assert [(d.index, d.used_bytes, d.mig_profile, d.host) for d in snap.devices] == [
        ("node-1/gpu0", 76_000_000_000, None, "node-1"),
        ("node-1/gpu2/3g.40gb#1", 30_000_000_000, "3g.40gb", "node-1"),
    ]
    assert latest_gpu_readings(MemoryHistory("prometheus")) is None


def test_unwritable_bundle_folder_is_exit_2_with_the_path(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc = main(["collect", TARGET, "--kubeconfig", str(sc.kubeconfig), "--out", str(blocker / "b"), "--lang", "en"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "cannot write the bundle to" in err and str(blocker) in err and "Traceback" not in err
