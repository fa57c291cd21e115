"""No secret reaches a terminal, a bundle, Slack or a log: a distinct secret is planted in every
place one can hide, live triage runs through every surface, and every output is scanned.

Planted (one distinct value each):
- the Deployment's env: a variable by name (WANDB_KEY) and one by value shape (a GitHub token);
- server flags: `--api-key VALUE` in the args list (Deployment, ReplicaSets, a pod), and
  `--hf-token=VALUE` inside the `sh -c` string of the restarted pod;
- server logs: a Hugging Face token in a log line, vLLM's `args: Namespace(... api_key='...')`;
- Kubernetes: the API token, echoed back by a proxy in front of the API server in an error body;
- Prometheus: the bearer token (GPUMEM_PROMETHEUS_TOKEN) and basic auth in the URL, echoed back
  by a proxy in front of the real Prometheus in the error of one query;
- Slack: the bot token and the signing secret.

Scanned: `gpumem triage` live (text, JSON, stderr), the `--save-bundle` folder, the folder of
`gpumem collect`, every Slack Web API call the stand-in received (bodies, and each file of the
uploaded bundle archive), and every log record the run wrote at DEBUG.
"""

from __future__ import annotations

import base64
import copy
import http.client
import io
import json
import logging
import os
import tarfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit

import pytest
import requests

from bot.config.settings import load_settings
from bot.main import main
from bot.serve import serve_http
from bot.service.redact import install
from bot.slack.app import secrets_of
from bot.slack.serve import build_from_settings
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.kube_fixtures import INCIDENT_POD_A, INCIDENT_POD_B, running_scenario, write_kubeconfig
from tests.support.loopback import LoopbackServer
from tests.support.prom_harness import run_prometheus
from tests.support.slack_kit import CHANNEL, is_diagnosis

TARGET = "llm/vllm-server"
PROM_USER = "promreader"
SECRETS = {
    "slack bot token": "xoxb-4242-1717-PlantedSlackBotTokenZ9",
    "slack signing secret": "planted-signing-secret-5s6g7n",
    "kube token": "planted-kube-api-token-k7u8b9",
    "prometheus token": "planted-prom-bearer-p1r2m3",
    "prometheus password": "planted-prom-pass-w4r5d6",
    "env by name": "planted-wandb-value-e1n2v3",
    "env by shape": "ghp_PlantedEnvShape0123456789abcdefABCD",
    "flag in args": "planted-api-key-a4r5g6",
    "flag in sh -c": "planted-hf-flag-s7h8c9",
    "token in a log line": "hf_PlantedLogLineToken0123456789abcd",
    "api_key in a log's args": "planted-ns-key-n3s4k5",
}
LOG_ARGS = "api_key in a log's args"
BASIC = base64.b64encode(f"{PROM_USER}:{SECRETS['prometheus password']}".encode()).decode()
SECRETS["prometheus basic header"] = BASIC


# ------------------------------------------------------------------ the stand-ins' echoes


class EchoProxy(LoopbackServer):
    """Forwards every request to `upstream`; a request `echo` picks is answered with an error
    whose body quotes the request's headers back (as a misconfigured proxy or server does)."""

    thread_name = "echo-proxy"

    def __init__(self, upstream: str, echo: Callable[[str, str, bytes], bool],
                 answer: Callable[[str], tuple[int, bytes]]):
        self.upstream = urlsplit(upstream)
        self.echo = echo
        self.answer = answer
        self.echoed = 0

    class handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_state: EchoProxy

        def log_message(self, *args: object) -> None:
            pass

        def _forward(self) -> None:
            proxy = self.server_state
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            if proxy.echo(self.command, self.path, body):
                proxy.echoed += 1
                quoted = "; ".join(f"{k}: {v}" for k, v in self.headers.items())
                status, data = proxy.answer(quoted)
                self._reply(status, data, "application/json")
                return
            conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port, timeout=30)
            try:
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                conn.request(self.command, self.path, body=body or None, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                self._reply(resp.status, data, resp.getheader("Content-Type") or "text/plain",
                            resp.getheader("Content-Encoding"))
            finally:
                conn.close()

        def _reply(self, status: int, data: bytes, ctype: str, encoding: str | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = _forward


def _prometheus_error(quoted: str) -> tuple[int, bytes]:
    return 400, json.dumps({"status": "error", "errorType": "bad_data",
                            "error": f"query rejected by the gateway; request headers were {quoted}"}).encode()


def _kube_error(quoted: str) -> tuple[int, bytes]:
    return 500, json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 500,
                            "reason": "InternalError",
                            "message": f"admission webhook failed for request with {quoted}"}).encode()


def _is_ttft_query(method: str, path: str, body: bytes) -> bool:
    return "histogram_quantile" in unquote_plus(path + body.decode("latin-1"))


def _is_events_list(method: str, path: str, body: bytes) -> bool:
    return path.startswith("/api/v1/namespaces/llm/events")


# ------------------------------------------------------------------ the planted cluster


def _plant(kube) -> None:
    deployment = kube.get_object("apps", "deployments", "llm", "vllm-server")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["args"] += ["--api-key", SECRETS["flag in args"]]
    container["env"] += [{"name": "WANDB_KEY", "value": SECRETS["env by name"]},
                         {"name": "LAUNCH_NOTE", "value": SECRETS["env by shape"]},
                         {"name": "MAX_NUM_BATCHED_TOKENS", "value": "8192"}]
    kube.add(deployment)
    for rs in ("vllm-server-7d9c8b6f4", "vllm-server-5b4f9c7d2"):
        obj = kube.get_object("apps", "replicasets", "llm", rs)
        obj["spec"]["template"]["spec"]["containers"][0] = copy.deepcopy(container)
        kube.add(obj)
    pod = kube.get_object("", "pods", "llm", INCIDENT_POD_A)
    pod["spec"]["containers"][0]["args"] += ["--api-key", SECRETS["flag in args"]]
    pod["spec"]["containers"][0]["env"] += [{"name": "WANDB_KEY", "value": SECRETS["env by name"]}]
    kube.add(pod)
    pod = kube.get_object("", "pods", "llm", INCIDENT_POD_B)
    server = pod["spec"]["containers"][0]
    server["command"] = ["/bin/sh", "-c"]
    server["args"] = ["pip list >/dev/null && exec python3 -m vllm.entrypoints.openai.api_server "
                      "--model=Qwen/Qwen2.5-7B-Instruct --max-model-len=8192 --gpu-memory-utilization=0.95 "
                      f"--port=8000 --hf-token={SECRETS['flag in sh -c']}"]
    server["env"] = [{"name": "LAUNCH_NOTE", "value": SECRETS["env by shape"]}]
    kube.add(pod)
    key = ("llm", INCIDENT_POD_A, "vllm", False)
    text = kube.logs[key].replace("gpu_memory_utilization=0.95)",
                                  f"gpu_memory_utilization=0.95, api_key='{SECRETS[LOG_ARGS]}')")
    text += (f"2026-03-09T20:40:01.000000000Z INFO 03-09 20:40:01 hub.py:88] logged in to the hub with token "
             f"{SECRETS['token in a log line']}\n")
    kube.set_log("llm", INCIDENT_POD_A, "vllm", text)


@contextmanager
def planted_world(tmp_path: Path, prometheus_url: str) -> Iterator[tuple[Path, str, str]]:
    """(kubeconfig, Prometheus URL, the same URL with basic auth) with every secret planted."""
    with running_scenario("vllm-incident", tmp_path, token=SECRETS["kube token"]) as sc:
        _plant(sc.kube)
        kube_proxy = EchoProxy(sc.kube.url, _is_events_list, _kube_error).start()
        prom_proxy = EchoProxy(prometheus_url, _is_ttft_query, _prometheus_error).start()
        try:
            kubeconfig = write_kubeconfig(tmp_path / "planted-kubeconfig", {"prod": kube_proxy.url},
                                          token=SECRETS["kube token"])
            basic = prom_proxy.url.replace("http://", f"http://{PROM_USER}:{SECRETS['prometheus password']}@")
            yield kubeconfig, prom_proxy.url, basic
            assert kube_proxy.echoed and prom_proxy.echoed, "the proxies never echoed: the test plants nothing"
        finally:
            kube_proxy.stop()
            prom_proxy.stop()


# ------------------------------------------------------------------ capture and scan


class Outputs:
    """Every text a run produced, by where it came from."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}

    def add(self, where: str, data: bytes | str) -> None:
        text = data.decode("utf-8", "replace") if isinstance(data, bytes) else data
        self.texts[where] = self.texts.get(where, "") + text

    def add_folder(self, where: str, folder: Path) -> None:
        files = sorted(p for p in folder.rglob("*") if p.is_file())
        assert files, f"nothing in {folder}"
        for path in files:
            if path.suffix != ".png":
                self.add(f"{where}/{path.relative_to(folder)}", path.read_bytes())

    def add_archive(self, where: str, data: bytes) -> None:
        with tarfile.open(fileobj=io.BytesIO(data)) as tar:
            for member in tar.getmembers():
                handle = tar.extractfile(member)
                if handle is not None and not member.name.endswith(".png"):
                    self.add(f"{where}:{member.name}", handle.read())

    def leaks(self) -> list[str]:
        found = []
        for what, secret in SECRETS.items():
            for where, text in self.texts.items():
                if secret in text:
                    found.append(f"{what} in {where}: ...{_around(text, secret)}...")
        return found


def _around(text: str, secret: str) -> str:
    at = text.index(secret)
    return text[max(0, at - 80): at + len(secret) + 20].replace("\n", "\\n")


class _Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@contextmanager
def captured_logs(secrets: tuple[str, ...] | None) -> Iterator[_Capture]:
    """Every record at DEBUG; with `secrets`, through the filter `gpumem serve` installs on the
    root logger's handlers (the CLI installs none: its records are captured as written)."""
    root = logging.getLogger()
    handler = _Capture()
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    filt = install(secrets, root) if secrets is not None else None
    try:
        yield handler
    finally:
        for h in root.handlers:
            if filt is not None:
                h.removeFilter(filt)
        root.removeHandler(handler)
        root.setLevel(old_level)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    with run_prometheus(tmp_path_factory.mktemp("prom-secrets")) as server:
        yield server


def _config(tmp_path: Path, kubeconfig: Path, prom_url: str) -> Path:
    path = tmp_path / "gpumem.yaml"
    path.write_text(f"""\
default_namespace: llm
allowed_namespaces: [llm]
default_context: prod
prometheus: {{url: "{prom_url}"}}
clusters:
  - name: prod
    context: prod
    kubeconfig: {kubeconfig}
slack:
  default_lang: en
  channels:
    {CHANNEL}: {{lang: en}}
workers: {{pool_size: 2, queue_length: 8}}
deadlines: {{triage_s: 60, progress_interval_s: 0.0001, source_s: 5, collect_s: 20}}
""")
    return path


def _cli(outputs: Outputs, capsys, where: str, argv: list[str]) -> int:
    rc = main(argv)
    out = capsys.readouterr()
    outputs.add(f"{where} stdout", out.out)
    outputs.add(f"{where} stderr", out.err)
    return rc


def _slack(outputs: Outputs, tmp_path: Path, kubeconfig: Path, prom_url: str, env: dict[str, str]) -> None:
    with FakeSlack(token=SECRETS["slack bot token"]) as fake:
        slack_env = {"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": SECRETS["slack signing secret"],
                     "GPUMEM_SLACK_API_URL": fake.api_url, **env}
        settings = load_settings(_config(tmp_path, kubeconfig, prom_url), slack_env)
        with captured_logs(secrets_of(settings)) as logs:
            bot = build_from_settings(settings, {**os.environ, **slack_env})
            server = serve_http(bot, "127.0.0.1", 0)
            try:
                body = slash_body("triage llm/vllm-server --context prod", fake.response_url(1), channel=CHANNEL)
                ack = requests.post(server.url + "/slack/events", data=body.encode(), timeout=10,
                                    headers=signed_headers(SECRETS["slack signing secret"], body))
                outputs.add("slack ack", ack.content)
                fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
                uploads = fake.wait_for("files.completeUploadExternal", 1, timeout=60)
            finally:
                server.close()
                bot.close(timeout_s=30)
            names = {f["id"]: f["name"] for u in uploads for f in u.response["files"]}
            for call in list(fake.calls):
                if call.method == "upload":
                    name = names.get(call.args["file_id"], call.args["file_id"])
                    if name.endswith(".tar.gz"):
                        outputs.add_archive(f"slack upload {name}", call.body)
                    elif not name.endswith(".png"):
                        outputs.add(f"slack upload {name}", call.body)
                else:
                    outputs.add(f"slack {call.method}", call.body)
                    outputs.add(f"slack {call.method} (decoded)", json.dumps(call.args, ensure_ascii=False))
        assert any(n.endswith("bundle.tar.gz") for n in names.values())
        outputs.add("slack logs", "\n".join(logs.lines))


def test_no_planted_secret_reaches_any_output(tmp_path, capsys, monkeypatch, prometheus):
    outputs = Outputs()
    with planted_world(tmp_path, prometheus.url) as (kubeconfig, prom_url, prom_basic_url):
        monkeypatch.setenv("GPUMEM_PROMETHEUS_TOKEN", SECRETS["prometheus token"])
        monkeypatch.delenv("GPUMEM_CONFIG", raising=False)
        live = ["--kubeconfig", str(kubeconfig), "--context", "prod", "--lang", "en"]
        with captured_logs(None) as cli_logs:
            saved = tmp_path / "saved"
            rc = _cli(outputs, capsys, "triage", ["triage", TARGET, *live, "--prometheus", prom_url,
                                                  "--save-bundle", str(saved)])
            assert rc == 1
            rc = _cli(outputs, capsys, "triage --json", ["triage", TARGET, *live, "--json",
                                                         "--prometheus", prom_basic_url])
            collected = tmp_path / "collected"
            assert _cli(outputs, capsys, "collect", ["collect", TARGET, *live, "--prometheus", prom_basic_url,
                                                     "--out", str(collected)]) == 0
            assert _cli(outputs, capsys, "triage --bundle", ["triage", "--bundle", str(collected), "--json"]) == rc
        outputs.add("cli logs", "\n".join(cli_logs.lines))
        outputs.add_folder("--save-bundle", saved)
        outputs.add_folder("collect", collected)
        _slack(outputs, tmp_path, kubeconfig, prom_url, {"GPUMEM_PROMETHEUS_TOKEN": SECRETS["prometheus token"]})

    leaks = outputs.leaks()
    assert leaks == [], "\n".join(leaks)
    # what was planted was read, and shows masked with its name: on-call sees it was set
    texts = outputs.texts
    assert "- --api-key\n        - <redacted>\n" in texts["collect/deployment.yaml"]
    assert "name: WANDB_KEY\n          value: <redacted>" in texts["collect/deployment.yaml"]
    assert "name: LAUNCH_NOTE\n          value: <redacted>" in texts["collect/deployment.yaml"]
    assert "name: MAX_NUM_BATCHED_TOKENS\n          value: '8192'" in texts["collect/deployment.yaml"]
    assert "--hf-token=<redacted>" in texts["collect/pods.yaml"]
    assert "api_key='<redacted>'" in texts["collect/logs.txt"] and "with token <redacted>" in texts["collect/logs.txt"]
    assert '"api-key": "<redacted>"' in texts["collect/bundle.json"]
    # both echoes came back, masked: the cluster's and Prometheus' (bearer, and basic from the URL)
    assert "authorization: Bearer <redacted>" in texts["triage stdout"]
    assert "Authorization: Bearer <redacted>" in texts["triage stdout"]
    assert "Authorization: Basic <redacted>" in texts["triage --json stdout"]
    assert "Authorization: Bearer &lt;redacted&gt;" in texts["slack chat.postMessage (decoded)"]  # Slack escapes <>
    # masking changed no number: the same verdict and memory, live and from the bundle read back
    doc = json.loads(texts["triage --json stdout"])
    back = json.loads(texts["triage --bundle stdout"])
    assert doc["verdict"]["primary"] == back["verdict"]["primary"] == "kv_cache_pressure"
    assert doc["memory"] == back["memory"]
