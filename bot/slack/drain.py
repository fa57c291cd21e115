"""Stopping in bounded time: the shared shutdown state, bounded fan-out, and the last resort.

On SIGTERM `gpumem serve` stops taking work (/health answers 503, a new command is told the
bot is restarting), cancels the queued jobs (their parents say so), gives the running ones
until the drain deadline, then edits what is still running to say it was interrupted, and
exits. Nothing in that sequence may wait on Slack or the Kubernetes API without a bound:

- `Stopping` carries the deadlines; the Slack client's retry handlers ask it before they
  sleep (no retry that would end after the drain deadline, none at all after it);
- `run_bounded` runs best-effort calls (goodbye edits) on daemon threads and returns at its
  deadline whatever they are doing;
- `Watchdog` ends the process at the hard deadline (drain + grace) even if a thread is stuck
  in a socket read the interpreter would otherwise wait for at exit.

>>> s = Stopping(clock=lambda: 100.0)
>>> s.may_wait(5.0), s.is_set
(True, False)
>>> s.begin(drain_s=3.0, grace_s=2.0)
>>> s.may_wait(1.0), s.may_wait(2.5), s.drain_left(), s.hard_left()
(True, False, 3.0, 5.0)
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence

log = logging.getLogger("gpumem.drain")


class Stopping:
    """Whether the bot is stopping, and by when the drain and the whole process must end."""

    def __init__(self, clock: Callable[[], float] = time.monotonic):
        self.clock = clock
        self._event = threading.Event()
        self.drain_deadline: float | None = None
        self.hard_deadline: float | None = None

    @property
    def is_set(self) -> bool:
        return self._event.is_set()

    def begin(self, drain_s: float, grace_s: float) -> None:
        now = self.clock()
        self.drain_deadline = now + drain_s
        self.hard_deadline = now + drain_s + grace_s
        self._event.set()

    def drain_left(self) -> float:
        """Seconds until the drain deadline (inf while not stopping)."""
        return float("inf") if self.drain_deadline is None else max(0.0, self.drain_deadline - self.clock())

    def hard_left(self) -> float:
        return float("inf") if self.hard_deadline is None else max(0.0, self.hard_deadline - self.clock())

    def may_wait(self, seconds: float) -> bool:
        """May a retry sleep `seconds` and try again? Always while serving; while stopping only
        if it would be done (with a second to spare for the call) before the drain deadline."""
        return not self.is_set or seconds + 1.0 < self.drain_left()


def run_bounded(calls: Sequence[Callable[[], object]], deadline_s: float, threads: int = 8,
                what: str = "call") -> int:
    """Run `calls` on up to `threads` daemon threads; return after `deadline_s` at the latest.

    Returns how many finished. A call still running at the deadline is left to its thread
    (daemon: it does not hold the process), one not started is skipped.
    """
    if not calls:
        return 0
    end = time.monotonic() + max(0.0, deadline_s)
    todo: queue.SimpleQueue[Callable[[], object]] = queue.SimpleQueue()
    for call in calls:
        todo.put(call)
    done = [0]
    lock = threading.Lock()

    def worker() -> None:
        while time.monotonic() < end:
            try:
                call = todo.get_nowait()
            except queue.Empty:
                return
            try:
                call()
            except Exception:  # best effort: one failure must not stop the others
                log.exception("%s failed", what)
            with lock:
                done[0] += 1

    workers = [threading.Thread(target=worker, name=f"gpumem-{what}-{i}", daemon=True)
               for i in range(min(threads, len(calls)))]
    for w in workers:
        w.start()
    for w in workers:
        w.join(max(0.0, end - time.monotonic()))
    with lock:
        finished = done[0]
    if finished < len(calls):
        log.warning("%d of %d %s(s) not done by the deadline; left behind", len(calls) - finished, len(calls), what)
    return finished


class Watchdog:
    """Ends the process `after_s` seconds from now unless `disarm()` is called first.

    The last resort behind the orderly drain: a thread blocked in a socket read (a Slack call,
    a Kubernetes read) in a non-daemon pool would otherwise hold the interpreter at exit.
    """

    def __init__(self, after_s: float, exit_code: int = 0, on_fire: Callable[[], str] | None = None,
                 exit_fn: Callable[[int], object] = os._exit):
        self.after_s = after_s
        self.exit_code = exit_code
        self.on_fire = on_fire
        self.exit_fn = exit_fn
        self._disarmed = threading.Event()
        self._thread = threading.Thread(target=self._run, name="gpumem-watchdog", daemon=True)

    def start(self) -> Watchdog:
        self._thread.start()
        return self

    def disarm(self) -> None:
        self._disarmed.set()

    def _run(self) -> None:
        if self._disarmed.wait(self.after_s):
            return
        detail = ""
        if self.on_fire is not None:
            try:
                detail = self.on_fire()
            except Exception:  # the exit must happen whatever the report does
                detail = "(no detail)"
        log.error("stopping took longer than %.1f s: exiting now %s", self.after_s, detail)
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):  # a broken handler must not stop the exit
                handler.flush()
        sys.stderr.flush()
        self.exit_fn(self.exit_code)
