"""The whole flow, live: `/gpumem triage` over HTTP to `gpumem serve --http`, evidence read by the
real kubernetes client from the stand-in API server (pods, logs, /metrics through the pod proxy
to stand-in engines) and from a real Prometheus, the diagnosis and charts posted to FakeSlack."""

from __future__ import annotations

import copy
import io
import os
import tarfile

import pytest
import requests

from bot.config.settings import load_settings
from bot.serve import serve_http
from bot.slack.serve import build_from_settings
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.kube_fixtures import running_scenario
from tests.support.prom_harness import NS, POD_A, POD_B, run_prometheus
from tests.support.slack_kit import CHANNEL, SECRET, env_for, is_diagnosis, live_config

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    with run_prometheus(tmp_path_factory.mktemp("prom-slack")) as server:
        yield server


def _clone_pod(kube, name: str) -> None:
    pod = copy.deepcopy(kube.get_object("", "pods", NS, "vllm-server-7d9c8b6f4-2xkqp"))
    pod["metadata"] = {k: v for k, v in pod["metadata"].items() if k not in ("uid", "resourceVersion")}
    pod["metadata"]["name"] = name
    kube.add(pod)


def _run(tmp_path, sc, prometheus_url: str | None):
    with FakeSlack() as fake:
        env = env_for(fake)
        settings = load_settings(live_config(tmp_path, sc.kubeconfig, prometheus_url), env)
        bot = build_from_settings(settings, {**os.environ, **env})
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            body = slash_body("triage llm/vllm-server --context prod", fake.response_url(1), channel=CHANNEL)
            ack = requests.post(server.url + "/slack/events", data=body.encode(),
                                headers=signed_headers(SECRET, body), timeout=10)
            final = fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0]
            uploads = fake.wait_for("files.completeUploadExternal", 1 if prometheus_url is None else 3, timeout=60)
            files = {f["name"]: fake.uploads[f["id"]]["data"] for u in uploads for f in u.response["files"]}
            return ack, final, files
        finally:
            server.close()
            bot.close(timeout_s=30)


def test_live_triage_from_slack_reads_the_stand_in_cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        ack, final, files = _run(tmp_path, sc, None)
        calls = sc.kube.calls()
    assert ack.status_code == 200 and ack.json()["text"].startswith("On it: triage of llm/vllm-server")
    assert final.args["blocks"][0]["text"]["text"].startswith(":")
    assert "llm/vllm-server" in final.args["text"]
    paths = [c.path for c in calls]
    assert any("/pods/vllm-server-7d9c8b6f4-q8wvn/log" in p for p in paths)
    assert any("/proxy/metrics" in p for p in paths)
    bundle = next(data for name, data in files.items() if name.endswith("bundle.tar.gz"))
    with tarfile.open(fileobj=io.BytesIO(bundle)) as tar:
        names = {n.rsplit("/", 1)[-1] for n in tar.getnames()}
    assert {"deployment.yaml", "pods.yaml", "logs.txt", "bundle.json"} <= names
    assert any(n.startswith("metrics-") for n in names)
    # no Prometheus and no access log: no history chart and no bucket chart, only the bundle
    assert [n for n in files if n.endswith(".png")] == []


def test_live_triage_from_slack_uploads_the_prometheus_memory_chart(tmp_path, prometheus):
    with running_scenario("vllm-incident", tmp_path) as sc:
        for name in (POD_A, POD_B):
            _clone_pod(sc.kube, name)
        _, final, files = _run(tmp_path, sc, prometheus.url)
    memory = next(data for name, data in files.items() if name.endswith("memory.png"))
    assert memory.startswith(PNG) and len(memory) > 10_000
    assert any(name.endswith("buckets.png") for name in files)
    assert "llm/vllm-server" in final.args["text"]
