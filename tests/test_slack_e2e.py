"""End to end over HTTP: signed requests to the real `gpumem serve --http` code path, FakeSlack behind.

The server is the one `gpumem serve --http` runs (waitress, /slack/events, /health, /metrics),
built from a config file by the same functions; one test starts the real command as a child
process. Every request and every Slack call stays on 127.0.0.1.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import requests

from bot.config.settings import load_settings
from bot.serve import serve_http
from bot.slack.app import build_bot
from bot.slack.serve import build_from_settings
from bot.verbs import VERBS
from tests.support.fake_slack import FakeSlack, action_body, signed_headers, slash_body
from tests.support.slack_kit import (
    CHANNEL,
    OTHER_CHANNEL,
    ROOT,
    SECRET,
    ZH_CHANNEL,
    ExampleRunner,
    env_for,
    example_targets,
    is_diagnosis,
    write_config,
)

PNG = b"\x89PNG\r\n\x1a\n"


def _bundles_yaml() -> str:
    lines = ["bundles:"] + [f"  {target}: {folder}" for target, folder in example_targets().items()]
    return "\n".join(lines) + "\n"


@pytest.fixture
def served(tmp_path):
    """FakeSlack + `gpumem serve --http` in-process, from a config file naming every example bundle."""
    with FakeSlack() as fake:
        settings = load_settings(write_config(tmp_path, extra=_bundles_yaml()), env_for(fake))
        bot = build_from_settings(settings, {**os.environ, **env_for(fake)})
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            yield SimpleNamespace(fake=fake, bot=bot, server=server)
        finally:
            server.close()
            bot.close(timeout_s=30)


SHARED_POOL = 2


@pytest.fixture(scope="module")
def _one_server(tmp_path_factory):
    with FakeSlack() as fake:
        folder = tmp_path_factory.mktemp("served")
        # two triage workers (each warmed by a triage at start) where `served` has four
        settings = load_settings(write_config(folder, pool=SHARED_POOL, extra=_bundles_yaml()), env_for(fake))
        bot = build_from_settings(settings, {**os.environ, **env_for(fake)})
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            yield SimpleNamespace(fake=fake, bot=bot, server=server)
        finally:
            server.close()
            bot.close(timeout_s=30)


@pytest.fixture
def shared(_one_server):
    """The server `served` starts (with two workers), started once for the tests that read only
    what they cause (calls to Slack, replies, codes, not counters): each starts with the bot idle
    and FakeSlack's record empty, and leaves the bot idle. `served` keeps the cold start of one
    test."""
    bot, fake = _one_server.bot, _one_server.fake
    assert bot.pool.wait_idle(60), "a job of an earlier test still runs"
    fake.forget()
    yield _one_server
    assert bot.pool.wait_idle(60), "a job of this test still runs after it"


def _post(server, body: str, headers: dict | None = None) -> requests.Response:
    return requests.post(server.url + "/slack/events", data=body.encode(),
                         headers=headers if headers is not None else signed_headers(SECRET, body), timeout=10)


def _command(fake, server, text: str, channel: str = CHANNEL, n: int = 1) -> requests.Response:
    return _post(server, slash_body(text, fake.response_url(n), channel=channel))


def _parents(fake) -> list:
    return [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]


def test_triage_from_command_to_diagnosis_thread_charts_and_bundle(served):
    fake, server = served.fake, served.server
    resp = _command(fake, server, "triage llm/vllm-server")
    assert resp.status_code == 200
    ack = resp.json()
    assert ack["text"].startswith("On it: triage of llm/vllm-server")
    assert ack.get("response_type", "ephemeral") == "ephemeral"

    final = fake.wait_for("chat.update", where=is_diagnosis, timeout=30)[0]
    uploads = fake.wait_for("files.completeUploadExternal", 3, timeout=30)
    parents = _parents(fake)
    assert len(parents) == 1
    ts = parents[0].response["ts"]
    assert parents[0].args["text"] == "gpumem triage · llm/vllm-server: starting"

    progress = [c.args["text"] for c in fake.calls_to("chat.update", ok_only=True) if c.args["ts"] == ts]
    assert any(text.endswith("3/7 · KV cache") for text in progress)
    assert progress[-1] == final.args["text"]

    blocks = final.args["blocks"]
    assert blocks[0]["text"]["text"].startswith(":red_circle: *KV-cache pressure")
    assert "high confidence" in blocks[0]["text"]["text"]
    assert final.args["text"].startswith("KV-cache pressure")

    replies = fake.thread(CHANNEL, ts)
    assert replies and all(r.args["thread_ts"] == ts for r in replies)
    assert "Round 2 · KV cache" in json.dumps(replies[0].args["blocks"], ensure_ascii=False)

    assert {u.args["thread_ts"] for u in uploads} == {ts}
    assert {u.args["channel_id"] for u in uploads} == {CHANNEL}
    files = {f["name"]: fake.uploads[f["id"]]["data"] for u in uploads for f in u.response["files"]}
    assert sorted(files) == ["gpumem-llm-vllm-server-buckets.png", "gpumem-llm-vllm-server-bundle.tar.gz",
                             "gpumem-llm-vllm-server-memory.png"]
    assert files["gpumem-llm-vllm-server-memory.png"].startswith(PNG)
    assert files["gpumem-llm-vllm-server-buckets.png"].startswith(PNG)
    with tarfile.open(fileobj=io.BytesIO(files["gpumem-llm-vllm-server-bundle.tar.gz"])) as tar:
        names = tar.getnames()
    assert "gpumem-llm-vllm-server/deployment.yaml" in names and "gpumem-llm-vllm-server/logs.txt" in names

    metrics = requests.get(server.url + "/metrics", timeout=5).text
    assert 'gpumem_slack_commands_total{outcome="cause",verb="triage"} 1.0' in metrics
    assert 'gpumem_http_request_duration_seconds_count{path="/slack/events"} 1.0' in metrics


@pytest.mark.parametrize("lang,channel", [("en", CHANNEL), ("zh", ZH_CHANNEL)])
def test_every_example_is_answered_within_slacks_limits(shared, lang, channel):
    fake, server = shared.fake, shared.server
    targets = [t for t in example_targets()
               if channel == CHANNEL or t.split("/")[0] in ("llm", "search")]
    for n, target in enumerate(targets, 1):
        assert _command(fake, server, f"triage {target}", channel=channel, n=n).status_code == 200
    finals = fake.wait_for("chat.update", len(targets), where=is_diagnosis, timeout=60)
    fake.wait_for("files.completeUploadExternal", len(targets), timeout=60,
                  where=lambda c: c.response["files"][0]["name"].endswith(".tar.gz"))
    assert not [c for c in fake.calls if c.response.get("error") == "invalid_blocks"]
    assert len(finals) == len(targets)
    if lang == "zh":
        assert all(re.search(r"[\u4e00-\u9fff]", f.args["text"]) for f in finals)


def test_refusals_over_http_are_ephemeral_and_post_nothing(shared):
    fake, server = shared.fake, shared.server
    unknown = _command(fake, server, "diagnose llm/x").json()
    refused = _command(fake, server, "triage llm/vllm-server", channel=OTHER_CHANNEL, n=2).json()
    assert "diagnose is not a gpumem command" in unknown["text"]
    assert "does not answer in this channel" in refused["text"]
    time.sleep(0.2)  # nothing is queued behind an ephemeral refusal; give a wrong post the chance to show
    assert _parents(fake) == []


@pytest.mark.parametrize("case", ["unsigned", "tampered", "stale"])
def test_bad_signatures_get_401_over_http(shared, case):
    fake, server = shared.fake, shared.server
    body = slash_body("triage llm/vllm-server", fake.response_url(1))
    headers = signed_headers(SECRET, body, timestamp=time.time() - 301 if case == "stale" else None)
    if case == "unsigned":
        headers = {"Content-Type": "application/x-www-form-urlencoded"}
    if case == "tampered":
        body = body.replace("vllm-server", "vllm-serverx")
    resp = _post(server, body, headers)
    assert resp.status_code == 401
    assert resp.json() == {"error": "invalid request"}


def test_health_and_metrics_are_served(shared):
    server = shared.server
    health = requests.get(server.url + "/health", timeout=5)
    assert health.status_code == 200
    assert health.json() == {"ok": True, "draining": False, "jobs_running": 0, "jobs_queued": 0,
                             "workers": SHARED_POOL}
    metrics = requests.get(server.url + "/metrics", timeout=5)
    assert metrics.headers["Content-Type"].startswith("text/plain")
    for name in ("gpumem_jobs_running", "gpumem_jobs_queued"):
        assert name in metrics.text
    assert requests.get(server.url + "/nope", timeout=5).status_code == 404
    assert requests.get(server.url + "/slack/events", timeout=5).status_code == 404


def test_the_run_again_button_over_http(shared):
    fake, server = shared.fake, shared.server
    _command(fake, server, "triage search/qwen-14b")
    first = fake.wait_for("chat.update", where=is_diagnosis, timeout=30)[0]
    button = first.args["blocks"][-1]["elements"][0]
    body = action_body(button["action_id"], button["value"], fake.response_url(7), message_ts=first.args["ts"])
    assert _post(server, body).status_code == 200
    fake.wait_for("chat.update", 2, where=is_diagnosis, timeout=30)
    assert len(_parents(fake)) == 2


@pytest.mark.skipif("budget" not in VERBS, reason="gpumem budget is not in this build")
def test_budget_runs_the_real_cli_verb_and_posts_its_output(shared):
    fake, server = shared.fake, shared.server
    ack = _command(fake, server, "budget --engine vllm --model Qwen/Qwen2.5-7B-Instruct --gpu A100-80GB").json()
    assert "gpumem budget" in ack["text"]
    post = fake.wait_for("chat.postMessage", timeout=60)[0]
    text = json.dumps(post.args["blocks"])
    assert "/gpumem budget" in text and "KV cache" in text


def test_fifty_concurrent_commands_are_all_acked_and_all_answered(tmp_path):
    with FakeSlack() as fake:
        settings = load_settings(write_config(tmp_path, pool=4, queue=64, interval=1.0), env_for(fake))
        bot = build_bot(settings, ExampleRunner(charts=False))
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            barrier = threading.Barrier(50)

            def one(n: int) -> tuple[int, str]:
                body = slash_body("triage llm/vllm-server", fake.response_url(n))
                headers = signed_headers(SECRET, body)
                barrier.wait()
                resp = _post(server, body, headers)
                return resp.status_code, resp.json().get("text", "")

            with ThreadPoolExecutor(50) as pool:
                results = list(pool.map(one, range(50)))
            finals = fake.wait_for("chat.update", 50, where=is_diagnosis, timeout=120)
        finally:
            server.close()
            bot.close(timeout_s=30)
    assert [status for status, _ in results] == [200] * 50
    assert all(text.startswith("On it: triage of llm/vllm-server") for _, text in results)
    assert len({f.args["ts"] for f in finals}) == 50
    queued = [c for c in fake.calls_to("chat.postMessage") if "queued" in (c.args.get("text") or "")]
    assert queued, "with 4 workers most of the 50 wait, and their parents say so"


def test_socket_mode_uses_the_app_token_and_the_configured_api(tmp_path):
    from slack_bolt.adapter.socket_mode import SocketModeHandler

    with FakeSlack() as fake:
        env = {**env_for(fake), "SLACK_APP_TOKEN": fake.app_token}
        settings = load_settings(write_config(tmp_path), env)
        settings.require("bot_token", "app_token")
        bot = build_bot(settings, ExampleRunner(charts=False))
        try:
            handler = SocketModeHandler(bot.app, settings.slack.app_token.reveal())
            assert handler.client.web_client.base_url == fake.api_url
            assert handler.client.issue_new_wss_url().startswith("ws://127.0.0.1:9/")
        finally:
            bot.close()
    opened = fake.calls_to("apps.connections.open")
    assert opened and opened[0].headers["authorization"] == f"Bearer {fake.app_token}"


def test_gpumem_serve_http_as_a_process_answers_and_never_logs_a_token(tmp_path):
    with FakeSlack() as fake:
        # one worker process: what is checked is the log of one triage, not the pool's warm-ups
        config = write_config(tmp_path, pool=1, extra=_bundles_yaml())
        env = {**os.environ, **env_for(fake), "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--http", "--host", "127.0.0.1",
                                 "--port", "0", "--config", str(config), "--log-level", "DEBUG", "--lang", "en"],
                                cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
        lines: list[str] = []
        try:
            url = None
            deadline = time.monotonic() + 90  # four warm-ups on a loaded two-core machine can take 30 s
            while url is None and time.monotonic() < deadline and proc.poll() is None:
                line = proc.stderr.readline()
                lines.append(line)
                m = re.search(r"listening on (http://\S+)", line)
                url = m.group(1) if m else None
            assert url, "".join(lines)
            reader = threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True)
            reader.start()
            assert requests.get(url + "/health", timeout=5).json()["ok"] is True
            body = slash_body("triage llm/vllm-server", fake.response_url(1))
            assert requests.post(url + "/slack/events", data=body, headers=signed_headers(SECRET, body),
                                 timeout=10).status_code == 200
            fake.wait_for("files.completeUploadExternal", 3, timeout=60)
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(30)
        reader.join(5)
    log = "".join(lines)
    assert rc == 0
    assert "chat.postMessage" in log or "chat_postMessage" in log or "Sending a request" in log
    assert fake.token not in log and SECRET not in log
    assert fake.token.split("-", 1)[1] not in log


def test_a_service_without_a_request_profile_gets_no_bucket_chart_but_its_bundle(shared):
    fake, server = shared.fake, shared.server
    _command(fake, server, "triage search/qwen-14b")
    bundle = fake.wait_for("files.completeUploadExternal", timeout=30,
                           where=lambda c: c.response["files"][0]["name"].endswith(".tar.gz"))[0]
    fake.wait_for("files.completeUploadExternal", 2, timeout=30)
    names = sorted(f["name"] for u in fake.calls_to("files.completeUploadExternal") for f in u.response["files"])
    assert names == ["gpumem-search-qwen-14b-bundle.tar.gz", "gpumem-search-qwen-14b-memory.png"]
    archive = fake.uploads[bundle.response["files"][0]["id"]]["data"]
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(archive))) as tar:
        assert "gpumem-search-qwen-14b/events.txt" in tar.getnames()
