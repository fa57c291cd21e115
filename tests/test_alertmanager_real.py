"""A real Alertmanager in front of gpumem's webhook: deploy/components/alerts/alertmanager-receiver.yaml as Alertmanager
reads it (`amtool check-config`), then the same receiver, pointed at a bot on 127.0.0.1, delivering
a firing alert (a triage under its summary) and its resolution (the message edited).

Needs Debian's prometheus-alertmanager package (`prometheus-alertmanager` and `amtool`);
without it these tests skip and say so."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml

from tests.support.alertmanager import TOKEN, serving
from tests.support.slack_kit import CHANNEL, is_diagnosis

pytestmark = pytest.mark.real_services

RECEIVER = Path(__file__).resolve().parent.parent / "deploy" / "components" / "alerts" / "alertmanager-receiver.yaml"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
AMTOOL = shutil.which("amtool")


def _config(tmp_path: Path, url: str | None = None) -> Path:
    """The deploy snippet, its token file in tmp_path (and, for a run, the bot's URL and quick timings)."""
    doc = yaml.safe_load(RECEIVER.read_text())
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    (hook,) = next(r for r in doc["receivers"] if r["name"] == "gpumem")["webhook_configs"]
    hook["http_config"]["authorization"]["credentials_file"] = str(token)
    if url is not None:
        hook["url"] = url + "/alertmanager"
        route = doc["route"]["routes"][0]
        route.update(group_wait="0s", group_interval="1s", repeat_interval="1h")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


@pytest.mark.skipif(AMTOOL is None, reason="amtool not installed (Debian: apt-get install prometheus-alertmanager)")
def test_the_receiver_snippet_is_a_valid_alertmanager_config(tmp_path):
    doc = yaml.safe_load(RECEIVER.read_text())
    route = doc["route"]["routes"][0]
    assert route["receiver"] == "gpumem" and route["matchers"] == ['gpumem="triage"'] and route["continue"] is True
    (hook,) = next(r for r in doc["receivers"] if r["name"] == "gpumem")["webhook_configs"]
    assert hook["url"].endswith("/alertmanager") and hook["send_resolved"] is True and hook["max_alerts"] == 0
    assert hook["http_config"]["authorization"]["type"] == "Bearer"
    out = subprocess.run([AMTOOL, "check-config", str(_config(tmp_path))], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _post_alert(base: str, ends: datetime | None, starts: datetime) -> None:
    alert = {"labels": {"alertname": "GpumemKVCacheHigh", "gpumem": "triage", "severity": "warning",
                        "namespace": "llm", "deployment": "vllm-server", "engine": "vllm"},
             "annotations": {"summary": "KV cache of llm/vllm-server above 90% for 10 minutes"},
             "startsAt": starts.isoformat().replace("+00:00", "Z"),
             "generatorURL": "http://prometheus.monitoring:9090/graph?g0.expr=vllm"}
    if ends is not None:
        alert["endsAt"] = ends.isoformat().replace("+00:00", "Z")
    r = requests.post(f"{base}/api/v2/alerts", data=json.dumps([alert]),
                      headers={"Content-Type": "application/json"}, timeout=5)
    assert r.status_code == 200, r.text


@pytest.mark.skipif(ALERTMANAGER is None, reason="Alertmanager not installed (Debian: prometheus-alertmanager)")
def test_a_real_alertmanager_delivers_firing_and_resolved_to_the_webhook(tmp_path):
    with serving(tmp_path) as s:
        port = _free_port()
        base = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen([ALERTMANAGER, f"--config.file={_config(tmp_path, s.url)}",
                                 f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{port}",
                                 "--cluster.listen-address=", "--log.level=warn"],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    if requests.get(f"{base}/-/ready", timeout=1).status_code == 200:
                        break
                except requests.ConnectionError:
                    pass
                assert time.monotonic() < deadline and proc.poll() is None, "Alertmanager did not start"
                time.sleep(0.2)
            starts = datetime.now(UTC) - timedelta(minutes=12)
            _post_alert(base, None, starts)
            final = s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0]
            s.settle()
            parent = s.parents(CHANNEL)[0]
            assert parent.args["text"].startswith("Alert GpumemKVCacheHigh (warning) firing since ")
            assert final.args["ts"] == parent.response["ts"]
            ended = datetime.now(UTC) - timedelta(seconds=1)
            _post_alert(base, ended, starts)
            resolved = s.fake.wait_for("chat.update", timeout=30,
                                       where=lambda c: c.args["text"].startswith("Resolved at "))[0]
            assert resolved.args["ts"] == parent.response["ts"]
            assert resolved.args["text"].startswith(f"Resolved at {ended:%Y-%m-%d %H:%M}Z: GpumemKVCacheHigh")
            s.settle()
            records = s.records()
            assert [r.outcome for r in records if r.outcome != "duplicate"] == ["triaged", "resolved"]
            first = records[0]
            assert first.group_key.startswith("{}/{gpumem=\"triage\"}:") and len(first.fingerprint) == 16
            assert first.labels["deployment"] == "vllm-server"
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
