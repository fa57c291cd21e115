"""SIGTERM: /health says 503 while the bot drains, and the process ends in bounded time even when
Slack and the Kubernetes API server have stopped answering.

The process tests start the real `python -m bot serve --http` (as tests/test_slack_e2e.py does)
against FakeSlack and the stand-in API server, with a scaled-down drain (GPUMEM_DRAIN_S,
GPUMEM_EXIT_GRACE_S) so they stay quick. The in-process tests drive `Bot.drain` and its parts.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import pytest
import requests

from bot.slack.app import build_bot
from bot.slack.drain import Stopping, Watchdog, run_bounded
from bot.slack.jobs import JobPool
from bot.slack.limits import ServeLimits
from tests.support.fake_slack import FakeSlack
from tests.support.kube_fixtures import running_scenario
from tests.support.slack_kit import (
    CHANNEL,
    ExampleRunner,
    ServeProcess,
    dispatch_command,
    is_diagnosis,
    make_settings,
)


def _live_config(tmp_path: Path, kubeconfig: Path, pool: int = 2, source_s: int = 5, collect_s: int = 20) -> Path:
    path = tmp_path / "gpumem.yaml"
    path.write_text(f"""\
default_namespace: llm
allowed_namespaces: [llm]
default_context: prod
clusters:
  - {{name: prod, context: prod, kubeconfig: {kubeconfig}}}
slack:
  default_lang: en
  channels:
    {CHANNEL}: {{lang: en}}
workers: {{pool_size: {pool}, queue_length: 64, listener_threads: 64, http_threads: 64}}
deadlines: {{triage_s: 300, progress_interval_s: 0.5, source_s: {source_s}, collect_s: {collect_s}}}
""")
    return path


Served = ServeProcess


def _parents(fake: FakeSlack) -> list:
    return [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]


# ----------------------------------------------------------------------------- item 6: /health while draining


def test_health_answers_503_while_a_slow_job_drains_after_sigterm(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        sc.kube.add_latency(r"/log", 4.0)  # the job reads logs for 4 s: it is in flight at SIGTERM
        served = Served(_live_config(tmp_path, sc.kubeconfig), fake, GPUMEM_DRAIN_S="20", GPUMEM_EXIT_GRACE_S="2")
        try:
            assert requests.get(served.url + "/health", timeout=5).status_code == 200
            assert served.command(fake, "triage llm/vllm-server --context prod").status_code == 200
            fake.wait_for("chat.update", timeout=20, where=lambda c: "▰" in (c.args.get("text") or ""))
            assert not [c for c in fake.calls_to("chat.update") if is_diagnosis(c)], "the job is still running"
            sent = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            health = None
            while time.monotonic() - sent < 5:
                health = requests.get(served.url + "/health", timeout=5)
                if health.status_code == 503:
                    break
                time.sleep(0.05)
            assert health is not None and health.status_code == 503, "the port stays open and says it is draining"
            state = health.json()
            assert state["ok"] is False and state["draining"] is True and state["jobs_running"] == 1
            late = served.command(fake, "triage llm/vllm-server --context prod", n=2)
            assert late.status_code == 200 and "gpumem is restarting" in late.json()["text"]
            final = fake.wait_for("chat.update", where=is_diagnosis, timeout=20)[0]
            rc = served.proc.wait(15)
            took = time.monotonic() - sent
        finally:
            served.stop()
    assert rc == 0, served.log()
    assert "llm/vllm-server" in final.args["text"], "the job in flight finished and answered"
    assert took < 20, "the drain ended when the job did, not at the deadline"
    assert len(_parents(fake)) == 1, "the command sent during the drain posted nothing"
    with pytest.raises(requests.ConnectionError):
        requests.get(served.url + "/health", timeout=2)


# ----------------------------------------------------------------------------- item 7: bounded stop


def _black_hole(port: int) -> socket.socket:
    """A listener on `port` that never accepts: connections hang until the client's timeout."""
    hole = socket.socket()
    hole.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    hole.bind(("127.0.0.1", port))
    hole.listen(0)
    return hole


def test_sigterm_ends_the_process_in_bounded_time_with_slack_and_the_cluster_gone(tmp_path):
    limits = ServeLimits(drain_s=3.0, exit_grace_s=2.0)
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        sc.kube.latency_s = 120  # the API server stops answering: every read hangs
        served = Served(_live_config(tmp_path, sc.kubeconfig), fake, GPUMEM_DRAIN_S="3", GPUMEM_EXIT_GRACE_S="2")
        hole = None
        try:
            for n in range(50):
                assert served.command(fake, "triage llm/vllm-server --context prod", n=n).status_code == 200
            fake.wait_for("chat.postMessage", 50, timeout=30, where=lambda c: not c.args.get("thread_ts"))
            port = int(fake.base.rsplit(":", 1)[1])
            fake.stop()  # and Slack is gone too
            hole = _black_hole(port)
            sent = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            try:
                rc = served.proc.wait(limits.stop_s + 10)
            except subprocess.TimeoutExpired:
                rc = None
            took = time.monotonic() - sent
        finally:
            served.stop()
            if hole is not None:
                hole.close()
    assert rc == 0, served.log()[-3000:]
    assert took < limits.stop_s + 2.0, f"stopped after {took:.1f} s"
    log = served.log()
    assert "cancelling 48 queued job(s)" in log
    assert "not retrying" in log, "retries stop once they would outlast the drain"


def test_sigterm_with_slack_up_cancels_the_queue_and_interrupts_what_still_runs(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        sc.kube.latency_s = 120
        # a drain of 6 s gives each Slack call a 3 s timeout, so eight parallel cancel notes fit
        # it on a loaded two-core machine (a 2 s drain's 1 s timeout could drop one there); the
        # 30 s source deadline keeps the two running triages reading past the drain
        served = Served(_live_config(tmp_path, sc.kubeconfig, source_s=30, collect_s=60), fake,
                        GPUMEM_DRAIN_S="6", GPUMEM_EXIT_GRACE_S="3")
        try:
            for n in range(10):
                assert served.command(fake, "triage llm/vllm-server --context prod", n=n).status_code == 200
            fake.wait_for("chat.postMessage", 10, timeout=30, where=lambda c: not c.args.get("thread_ts"))
            sent = time.monotonic()
            served.proc.send_signal(signal.SIGTERM)
            rc = served.proc.wait(15)
            took = time.monotonic() - sent
        finally:
            served.stop()
    assert rc == 0 and took < 6 + 3 + 2.0, (rc, took)
    last = {}
    for c in fake.calls_to("chat.update", ok_only=True):
        last[c.args["ts"]] = c.args["text"]
    ends = sorted((text.split(": ", 1)[1:] or [text])[0].split(":")[0] for text in last.values())
    # two workers: at most two jobs were running when SIGTERM came (fewer if one had not yet
    # been picked up); every other job was still queued
    assert len(last) == 10, f"every parent got its last word; {len(last)} did: {ends}"
    assert ends.count("cancelled") + ends.count("stopped") == 10 and 1 <= ends.count("stopped") <= 2, ends
    assert all(text.endswith("Run the command again.") for text in last.values())


# ----------------------------------------------------------------------------- the parts


def test_bot_drain_in_process_cancels_queued_and_interrupts_running_within_the_bound(tmp_path):
    gate = threading.Event()
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake, pool=1, queue=8), ExampleRunner(charts=False, gate=gate),
                        limits=ServeLimits(drain_s=1.0, exit_grace_s=2.0))
        for n in range(3):
            dispatch_command(bot, fake, "triage llm/vllm-server", n=n)
        fake.wait_for("chat.postMessage", 3, where=lambda c: not c.args.get("thread_ts"))
        started = time.monotonic()
        idle = bot.drain()
        took = time.monotonic() - started
        assert bot.health()["ok"] is False and bot.health()["draining"] is True
        late = dispatch_command(bot, fake, "triage llm/vllm-server", n=9)
        gate.set()  # the runner returns now: its result must be dropped
        time.sleep(0.3)
    assert idle is False and took < 3.0
    assert "gpumem is restarting" in late.body
    texts = [c.args["text"] for c in fake.calls_to("chat.update", ok_only=True)]
    assert sum("cancelled: gpumem is restarting" in t for t in texts) == 2
    assert sum("stopped: gpumem restarted before it finished" in t for t in texts) == 1
    assert not [c for c in fake.calls_to("chat.update") if is_diagnosis(c)]


def test_stopping_refuses_retries_that_would_outlast_the_drain():
    now = [0.0]
    s = Stopping(clock=lambda: now[0])
    assert s.may_wait(100.0)
    s.begin(drain_s=10.0, grace_s=5.0)
    assert s.may_wait(8.0) and not s.may_wait(9.5)
    now[0] = 10.5
    assert not s.may_wait(0.0) and s.drain_left() == 0.0 and s.hard_left() == 4.5


def test_run_bounded_returns_at_its_deadline_whatever_the_calls_do():
    release = threading.Event()
    done: list[int] = []
    calls = [lambda i=i: (release.wait(10) if i < 2 else None, done.append(i)) for i in range(6)]
    started = time.monotonic()
    finished = run_bounded(calls, 0.5, threads=3)
    assert time.monotonic() - started < 1.5
    assert finished == 4 and sorted(done) == [2, 3, 4, 5]
    release.set()


def test_the_watchdog_exits_unless_disarmed():
    exits: list[int] = []
    Watchdog(0.2, exit_code=0, on_fire=lambda: "(1 job)", exit_fn=exits.append).start()
    spared = Watchdog(0.2, exit_fn=exits.append).start()
    spared.disarm()
    time.sleep(0.6)
    assert exits == [0]


def test_pool_close_hands_back_the_queued_cancels_and_wait_idle_is_bounded():
    gate = threading.Event()
    pool = JobPool(workers=1, queue_length=4)
    cancelled: list[int] = []
    for i in range(3):
        ticket = pool.reserve()
        pool.submit(ticket, lambda: gate.wait(10), cancel=lambda i=i: cancelled.append(i))
    time.sleep(0.1)
    cancels = pool.close()
    assert pool.reserve() is None and len(cancels) == 2 and cancelled == []
    assert pool.wait_idle(0.2) is False
    gate.set()
    assert pool.wait_idle(5) is True
