"""The bounded work pool behind the Slack app, and two small helpers for jobs.

Slash commands are acked on Bolt's listener threads; the work (evidence, runbook, posting)
runs here, on `workers` threads with room for `queue_length` waiting jobs. A command first
reserves a place (so a full pool is refused before anything is posted), learns how many jobs
wait ahead of it ("queued, 3 ahead"), then submits its job.

>>> pool = JobPool(workers=2, queue_length=8)
>>> ticket = pool.reserve()
>>> ticket.ahead, ticket.queued
(0, False)
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("gpumem.jobs")


@dataclass(frozen=True)
class Ticket:
    """A reserved place in the pool. `queued`: no worker was free; `ahead`: jobs waiting before it."""

    id: int
    ahead: int
    queued: bool


class JobPool:
    def __init__(self, workers: int, queue_length: int, name: str = "gpumem-work"):
        if workers < 1:
            raise ValueError("workers must be at least 1")
        self.workers = workers
        self.queue_length = queue_length
        self._cond = threading.Condition()
        self._queue: deque[tuple[Ticket, Callable[[], None], Callable[[], None] | None]] = deque()
        self._reserved: set[int] = set()
        self._running = 0
        self._closed = False
        self._ids = itertools.count(1)
        self._threads = [threading.Thread(target=self._loop, name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    @property
    def running(self) -> int:
        return self._running

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._queue) + len(self._reserved)

    @property
    def closed(self) -> bool:
        return self._closed

    def reserve(self) -> Ticket | None:
        """A place for one job, or None when the pool and its queue are full (or closing)."""
        with self._cond:
            if self._closed:
                return None
            outstanding = self._running + len(self._queue) + len(self._reserved)
            if outstanding >= self.workers + self.queue_length:
                return None
            ticket = Ticket(next(self._ids), max(0, outstanding - self.workers), outstanding >= self.workers)
            self._reserved.add(ticket.id)
            return ticket

    def release(self, ticket: Ticket) -> None:
        """Give back a reserved place that will not be used."""
        with self._cond:
            self._reserved.discard(ticket.id)

    def submit(self, ticket: Ticket, run: Callable[[], None], cancel: Callable[[], None] | None = None) -> None:
        """Queue the job of a reserved place. `cancel` runs instead if the pool shuts down first."""
        with self._cond:
            self._reserved.discard(ticket.id)
            if self._closed:
                closed = True
            else:
                closed = False
                self._queue.append((ticket, run, cancel))
                self._cond.notify()
        if closed and cancel is not None:
            _safely(cancel, "cancel")

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                _, run, _ = self._queue.popleft()
                self._running += 1
            try:
                _safely(run, "job")
            finally:
                with self._cond:
                    self._running -= 1
                    self._cond.notify_all()

    def close(self) -> list[Callable[[], None]]:
        """Refuse new jobs and drop the waiting ones; returns their `cancel` calls, not yet run
        (the caller runs them, within its own deadline)."""
        with self._cond:
            self._closed = True
            waiting = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        return [cancel for _, _, cancel in waiting if cancel is not None]

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait up to `timeout_s` for the running jobs to end; True when none runs."""
        deadline = time.monotonic() + max(0.0, timeout_s)
        with self._cond:
            while self._running or self._queue:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(left)
            return not self._running and not self._queue

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Refuse new jobs, cancel the waiting ones, give running ones `timeout_s` to finish."""
        deadline = time.monotonic() + timeout_s
        for cancel in self.close():
            _safely(cancel, "cancel")
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))


def _safely(fn: Callable[[], None], what: str) -> None:
    try:
        fn()
    except Exception:  # one job's bug must not take a worker down with it
        log.exception("%s raised", what)


class Throttle:
    """At most one event per `interval_s` (progress edits: chat.update about once a second)."""

    def __init__(self, interval_s: float, clock: Callable[[], float] = time.monotonic):
        self.interval_s = interval_s
        self.clock = clock
        self._last: float | None = None

    def ready(self) -> bool:
        now = self.clock()
        if self._last is not None and now - self._last < self.interval_s:
            return False
        self._last = now
        return True


class Answering:
    """How many Slack requests are being answered right now. Work that follows an ack (posting
    a parent message, queueing its job) waits for a lull first, up to `max_wait_s`: in a burst of
    commands the acks go first, the posts right after, so no ack queues behind a post for the
    interpreter.

    One waiter watches the clock (it wakes each `quiet_s` while requests are answered); the
    others sleep until it sees the lull. An answer's end wakes nobody: in a burst of 50 acks the
    eight after-ack threads woke about twice an ack, each time taking the interpreter from the
    ack being answered, to find the burst still going."""

    def __init__(self, max_wait_s: float = 0.5, quiet_s: float = 0.01, clock: Callable[[], float] = time.monotonic):
        self.max_wait_s = max_wait_s
        #: how long no request must have been answered for a lull: in a burst the next request
        #: is read a moment after the last answer, and work woken in between would take turns
        #: with it for the interpreter
        self.quiet_s = quiet_s
        self.clock = clock
        self._count = 0
        self._last_end = float("-inf")
        self._cond = threading.Condition()
        self._watching = False

    def __enter__(self) -> Answering:
        with self._cond:
            self._count += 1
        return self

    def __exit__(self, *exc: object) -> None:
        with self._cond:
            self._count -= 1
            self._last_end = self.clock()

    @property
    def count(self) -> int:
        return self._count

    def lull(self) -> bool:
        """Wait until no request has been answered for `quiet_s` (at most `max_wait_s` in all);
        True when such a lull came."""
        deadline = self.clock() + self.max_wait_s
        with self._cond:
            while True:
                now = self.clock()
                if self._count == 0 and now - self._last_end >= self.quiet_s:
                    self._cond.notify_all()  # the others sleep until the watcher sees it
                    return True
                if now >= deadline:
                    return False
                if self._watching:
                    self._cond.wait(deadline - now)
                    continue
                self._watching = True
                try:
                    quiet_in = self.quiet_s if self._count else self.quiet_s - (now - self._last_end)
                    self._cond.wait(max(0.0, min(deadline - now, quiet_in)))
                finally:
                    self._watching = False
                    if self.clock() >= deadline:
                        self._cond.notify()  # leaving at its deadline: another waiter takes the watch


class Claims:
    """First-come claims on keys for `ttl_s` seconds: a double click runs once.

    In-process: the guard of a bot without a store. With `store.path` the bot uses
    `StoreClaims`, so two replicas or a restart sharing the store still run a click once.
    """

    def __init__(self, ttl_s: float = 60.0, clock: Callable[[], float] = time.monotonic):
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._until: dict[Hashable, float] = {}

    def claim(self, key: Hashable) -> bool:
        now = self.clock()
        with self._lock:
            self._until = {k: t for k, t in self._until.items() if t > now}
            if key in self._until:
                return False
            self._until[key] = now + self.ttl_s
            return True


class StoreClaims:
    """`Claims` in the store's claims table (one row per key, with its expiry): the first
    replica or process to claim a key for `ttl_s` seconds wins, whichever of them the click
    reached. `store` is the bot's `SharedStore`; `holder` names this process in the row."""

    def __init__(self, store: Any, ttl_s: float = 60.0, holder: str | None = None):
        self.store = store
        self.ttl_s = ttl_s
        self.holder = holder or f"{socket.gethostname()}:{os.getpid()}"

    def claim(self, key: Hashable) -> bool:
        name = ":".join(str(part) for part in key) if isinstance(key, tuple) else str(key)
        with self.store.use() as store:
            return bool(store.claim(f"rerun:{name}", self.holder, ttl_s=self.ttl_s))
