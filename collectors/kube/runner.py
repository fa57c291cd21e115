"""Run API calls on a pool under one deadline, with callbacks in the caller's thread.

A callback may start more calls (the next wave) as soon as its answer is in, so waves do
not wait for each other's slowest member. When the deadline passes, every call still out
becomes a "timeout" ReadIssue and is abandoned (its own timeout is what was left of the
deadline when it started, so its thread ends soon after).

>>> from concurrent.futures import ThreadPoolExecutor
>>> with ThreadPoolExecutor(2) as pool:
...     runner = CallRunner(pool, deadline_s=1.0, server="http://127.0.0.1:1")
...     got = []
...     runner.submit(Call("get", "nodes", None, "n1"), lambda timeout_s: {"ok": 1}, got.append)
...     runner.run()
>>> got, runner.issues
([{'ok': 1}], [])
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Executor, Future, wait
from dataclasses import dataclass, field
from typing import Any

from collectors.errors import ParseError
from collectors.kube.client import Call, issue_for
from runbooks.model.evidence import ReadIssue


@dataclass
class _Pending:
    call: Call
    on_ok: Callable[[Any], None]
    on_error: Callable[[BaseException], bool] | None
    depth: int


@dataclass
class CallRunner:
    """Calls in flight, the issues met, and the sources read.

    `submit(call, fn, on_ok, on_error)`: `fn(timeout_s)` runs on the pool; then, in `run()`,
    `on_ok(result)` or `on_error(error)` (True: handled; else the error becomes a ReadIssue).
    `depth` counts round trips in a row: a call started by a callback is one deeper.
    """

    pool: Executor
    deadline_s: float
    server: str
    clock: Callable[[], float] = time.monotonic
    deadline_at: float = 0.0
    pending: dict[Future[Any], _Pending] = field(default_factory=dict)
    issues: list[ReadIssue] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)
    calls: int = 0
    #: the longest chain of calls that waited on one another (round trips in a row)
    depth: int = 0
    _settling_depth: int = 0

    def __post_init__(self) -> None:
        self.deadline_at = self.clock() + self.deadline_s

    def submit(self, call: Call, fn: Callable[[float], Any], on_ok: Callable[[Any], None],
               on_error: Callable[[BaseException], bool] | None = None) -> None:
        left = self.deadline_at - self.clock()
        if left <= 0.01:
            self.issues.append(self.timeout_issue(call))
            return
        self.calls += 1
        depth = self._settling_depth + 1
        self.depth = max(self.depth, depth)
        self.pending[self.pool.submit(fn, left)] = _Pending(call, on_ok, on_error, depth)

    def run(self) -> None:
        """Settle calls as they finish (callbacks may add more) until none is left or time is up."""
        while self.pending:
            left = self.deadline_at - self.clock()
            if left <= 0:
                break
            done, _ = wait(list(self.pending), timeout=left, return_when=FIRST_COMPLETED)
            for future in done:
                self._settle(future, self.pending.pop(future))
        for future, pending in self.pending.items():
            future.cancel()
            self.issues.append(self.timeout_issue(pending.call))
        self.pending.clear()

    def _settle(self, future: Future[Any], pending: _Pending) -> None:
        self._settling_depth = pending.depth  # calls the callbacks start wait on this one
        error = future.exception()
        if error is not None:
            if pending.on_error is None or not pending.on_error(error):
                self.issues.append(issue_for(error, pending.call, self.server, self.deadline_s))
            return
        try:
            pending.on_ok(future.result())
            self.sources.append(pending.call.source)
        except (ParseError, ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
            # an answer of an unexpected shape costs this call, not the gathering
            self.issues.append(ReadIssue(pending.call.source, f"unexpected answer: {str(e)[:200]}"))

    def timeout_issue(self, call: Call) -> ReadIssue:
        return ReadIssue(call.source, f"no answer within {self.deadline_s:.1f} s: {call.permission}", kind="timeout")
