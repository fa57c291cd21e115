"""Triage in worker processes, warmed at start-up: behaviour only (the speed is the benchmark's,
`benchmarks/bench_slack_ack.py`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bot.service.runners import ProcessRunner, WorkerCrashed
from runbooks.model.errors import TargetNotFound

ROOT = Path(__file__).resolve().parent.parent


class PidRunner:
    """A picklable runner that says which process ran it, with two progress steps."""

    def __call__(self, target: str, context: str | None, on_step):
        if target == "llm/unknown":
            raise TargetNotFound.no_source(target)
        if target == "llm/bug":
            raise ValueError("a bug")
        on_step(1, 2, "evidence")
        on_step(2, 2, "verdict")
        return {"pid": os.getpid(), "target": target, "context": context}


@pytest.fixture(scope="module")
def runner():
    run = ProcessRunner(PidRunner(), workers=2)
    pids = run.start()
    yield run, pids
    run.close()


def test_triage_runs_in_a_warmed_worker_process_and_relays_its_progress(runner):
    run, pids = runner
    assert len(pids) == 2 and os.getpid() not in pids
    steps = []
    out = run("llm/vllm-server", "prod", lambda *step: steps.append(step))
    assert out["pid"] in pids and out["pid"] != os.getpid()
    assert out["target"] == "llm/vllm-server" and out["context"] == "prod"
    assert steps == [(1, 2, "evidence"), (2, 2, "verdict")]


def test_a_worker_error_comes_back_as_itself_and_a_bug_as_a_crash(runner):
    run, _ = runner
    with pytest.raises(TargetNotFound) as e:
        run("llm/unknown", None, lambda *_: None)
    assert e.value.code == TargetNotFound.NO_SOURCE and e.value.source_unknown and str(e.value) == "llm/unknown"
    with pytest.raises(ValueError, match="a bug"):
        run("llm/bug", None, lambda *_: None)
    assert not issubclass(WorkerCrashed, ValueError)


def test_a_closed_runner_refuses_and_its_workers_end():
    run = ProcessRunner(PidRunner(), workers=1)
    pids = run.start()
    run.close()
    with pytest.raises(RuntimeError):
        run("llm/vllm-server", None, lambda *_: None)
    deadline = time.monotonic() + 20
    while pids and time.monotonic() < deadline:  # terminated (and reaped by the forkserver)
        pids = [pid for pid in pids if _alive(pid)]
        time.sleep(0.05)
    assert pids == []


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


SCRIPT = r"""
import json, os, sys, threading
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.slack_kit import env_for, write_config, example_targets, is_diagnosis, SECRET, CHANNEL
from bot.config.settings import load_settings
from bot.serve import serve_http
from bot.slack.serve import build_from_settings
import requests, pathlib, tempfile

tmp = pathlib.Path(tempfile.mkdtemp())
bundles = "bundles:\n" + "".join(f"  {t}: {f}\n" for t, f in example_targets().items())
with FakeSlack() as fake:
    settings = load_settings(write_config(tmp, pool=1, extra=bundles), env_for(fake))  # one warmed worker
    bot = build_from_settings(settings, {**os.environ, **env_for(fake)})
    server = serve_http(bot, "127.0.0.1", 0)
    started_with = "matplotlib" in sys.modules
    try:
        body = slash_body("triage llm/vllm-server", fake.response_url(1), channel=CHANNEL)
        ack = requests.post(server.url + "/slack/events", data=body.encode(), headers=signed_headers(SECRET, body),
                            timeout=10)
        final = fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0]
        uploads = fake.wait_for("files.completeUploadExternal", 3, timeout=60)
        names = sorted(f["name"] for u in uploads for f in u.response["files"])
    finally:
        server.close()
        pids = bot.work.runner.pids()
        bot.close(timeout_s=30)
print(json.dumps({"ack": ack.status_code, "started_with_matplotlib": started_with,
                  "matplotlib": "matplotlib" in sys.modules, "main": os.getpid(), "workers": pids,
                  "text": final.args["text"], "names": names}))
"""


def test_served_triage_never_loads_matplotlib_in_the_main_process():
    """`gpumem serve`'s bot: the charts are drawn in the warmed workers, so neither start-up nor
    the first command imports matplotlib in the process that acks."""
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=240,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["ack"] == 200 and "llm/vllm-server" in out["text"]
    assert out["workers"] and out["main"] not in out["workers"]
    assert not out["started_with_matplotlib"] and not out["matplotlib"]
    assert any(n.endswith("memory.png") for n in out["names"]) or any(n.endswith(".png") for n in out["names"])
    assert any(n.endswith("bundle.tar.gz") for n in out["names"])


def test_work_after_an_ack_waits_for_a_lull_in_the_answers_but_never_long():
    import threading
    import time

    from bot.slack.jobs import Answering

    answering = Answering(max_wait_s=5.0)
    order: list[str] = []
    release = threading.Event()

    def request() -> None:
        with answering:
            release.wait(5)
            order.append("ack")

    def after_ack() -> None:
        answering.lull()
        order.append("post")

    threads = [threading.Thread(target=request) for _ in range(3)]
    for t in threads:
        t.start()
    while answering.count < 3:
        time.sleep(0.001)
    poster = threading.Thread(target=after_ack)
    poster.start()
    time.sleep(0.05)
    assert order == [] and poster.is_alive()  # held while requests are being answered
    release.set()
    for t in [*threads, poster]:
        t.join(5)
    assert order == ["ack", "ack", "ack", "post"] and answering.count == 0
    # a request that never ends delays the work by max_wait_s at most
    stuck = Answering(max_wait_s=0.05)
    with stuck:
        started = time.monotonic()
        assert stuck.lull() is False
        assert 0.04 <= time.monotonic() - started < 1.0


def test_a_lull_is_a_quiet_moment_not_the_gap_between_two_answers_of_a_burst():
    from bot.slack.jobs import Answering

    now = [100.0]
    answering = Answering(max_wait_s=0.5, quiet_s=0.01, clock=lambda: now[0])
    with answering:
        pass
    # the last answer ended just now: a burst's next request may be being read, so no lull yet;
    # the clock stands still, so the wait can only end at its deadline... which it reaches
    # once the clock moves past it
    import threading
    result: list[bool] = []
    t = threading.Thread(target=lambda: result.append(answering.lull()))
    t.start()
    t.join(0.05)
    assert t.is_alive() and result == []  # count 0, but not quiet for 10 ms yet
    now[0] += 0.011
    with answering._cond:
        answering._cond.notify_all()
    t.join(2)
    assert result == [True]
    # quiet already: no wait at all
    now[0] += 1.0
    assert answering.lull() is True


def test_a_burst_of_answers_wakes_one_watcher_not_every_waiting_thread():
    """Eight after-ack threads wait through a burst of 50 answers: one of them ticks each
    quiet_s, the others sleep until it sees the lull (an answer's end used to wake all eight)."""
    import threading
    import time

    from bot.slack.jobs import Answering

    class Counting(threading.Condition):
        wakeups = 0

        def wait(self, timeout=None):
            try:
                return super().wait(timeout)
            finally:
                Counting.wakeups += 1

    answering = Answering(max_wait_s=5.0, quiet_s=0.01)
    answering._cond = Counting()
    first = threading.Event()

    def burst() -> None:
        for i in range(50):
            with answering:
                if i == 0:
                    first.set()
                time.sleep(0.0005)

    results: list[bool] = []
    ended: list[float] = []
    started = time.monotonic()
    answers = threading.Thread(target=burst)
    answers.start()
    first.wait(5)
    waiters = [threading.Thread(target=lambda: (results.append(answering.lull()), ended.append(time.monotonic())))
               for _ in range(8)]
    for t in waiters:
        t.start()
    answers.join(10)
    for t in waiters:
        t.join(10)
    elapsed = time.monotonic() - started
    assert results == [True] * 8
    assert min(ended) >= answering._last_end + answering.quiet_s  # nobody left before the burst's lull
    # the watcher's ticks over the whole run, then each of the other seven once (and a little slack)
    assert Counting.wakeups <= elapsed / answering.quiet_s + 2 + 8, (Counting.wakeups, elapsed)
