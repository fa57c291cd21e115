"""Triage workers end with the bot that started them, however it ended (SIGKILL included)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# a bot stand-in: starts two triage workers, prints their pids and the forkserver's, then waits
_BOT = """
import os, sys, time
from bot.service.runners import ProcessRunner
from tests.test_slack_latency import PidRunner
run = ProcessRunner(PidRunner(), workers=2)
pids = run.start()
print(" ".join(map(str, pids)), flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone: /proc answers ESRCH while it is reaped
        return False


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().split(") ", 1)[1].split()[1])


def test_a_killed_bot_leaves_no_worker_or_forkserver_behind():
    bot = subprocess.Popen([sys.executable, "-c", _BOT], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        workers = [int(p) for p in bot.stdout.readline().split()]
        assert len(workers) == 2 and all(_alive(p) for p in workers)
        forkserver = _parent(workers[0])
        assert forkserver != bot.pid and _alive(forkserver)  # workers are the forkserver's children
    finally:
        bot.send_signal(signal.SIGKILL)
        bot.wait(10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and any(_alive(p) for p in [*workers, forkserver]):
        time.sleep(0.1)
    left = [p for p in [*workers, forkserver] if _alive(p)]
    for p in left:  # never leave them to the next test
        with contextlib.suppress(ProcessLookupError):
            os.kill(p, signal.SIGKILL)
    assert left == []
