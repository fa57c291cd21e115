"""Run API calls on a pool, each under its own deadline, with callbacks in the caller's thread.

A callback may start more calls (the next wave) as soon as its answer is in, so waves do
not wait for each other's slowest member. Each call gets `call_deadline_s` from the moment it
starts (never more than what is left of the whole collection's `deadline_s`): a slow server
that answers every call in 3 s delays a three-wave collection to 9 s instead of failing its
later waves, and a call past its own deadline becomes a "timeout" ReadIssue and is abandoned
(its HTTP timeout is the same deadline, so its thread ends soon after).

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

from collectors.errors import ParseError, quoted, said
from collectors.kube.client import Call, issue_for, no_answer_within
from runbooks.model.evidence import ReadIssue


@dataclass
class _Pending:
    call: Call
    on_ok: Callable[[Any], None]
    on_error: Callable[[BaseException], bool] | None
    depth: int
    #: when this call's own deadline passes (clock seconds), and how long it was given
    expires_at: float = 0.0
    limit_s: float = 0.0


@dataclass
class CallRunner:
    """Calls in flight, the issues met, and the sources read.

    `submit(call, fn, on_ok, on_error)`: `fn(timeout_s)` runs on the pool; then, in `run()`,
    `on_ok(result)` or `on_error(error)` (True: handled; else the error becomes a ReadIssue).
    `depth` counts round trips in a row: a call started by a callback is one deeper.
    """

    pool: Executor
    #: the whole collection's deadline
    deadline_s: float
    server: str
    clock: Callable[[], float] = time.monotonic
    #: each call's own deadline (None: the whole collection's)
    call_deadline_s: float | None = None
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
        now = self.clock()
        left = self.deadline_at - now
        if left <= 0.01:
            self.issues.append(self.timeout_issue(call, self.deadline_s))
            return
        limit = min(self.per_call_s, left)
        self.calls += 1
        depth = self._settling_depth + 1
        self.depth = max(self.depth, depth)
        self.pending[self.pool.submit(fn, limit)] = _Pending(call, on_ok, on_error, depth, now + limit, limit)

    @property
    def per_call_s(self) -> float:
        return self.call_deadline_s if self.call_deadline_s is not None else self.deadline_s

    def run(self) -> None:
        """Settle calls as they finish (callbacks may add more) until none is left or time is up."""
        while self.pending:
            now = self.clock()
            for future, pending in list(self.pending.items()):
                if pending.expires_at <= now and not future.done():
                    self._abandon(future)
            if not self.pending:
                break
            if now >= self.deadline_at:
                break
            soonest = min(p.expires_at for p in self.pending.values())
            done, _ = wait(list(self.pending), timeout=max(0.0, soonest - now), return_when=FIRST_COMPLETED)
            for future in done:
                self._settle(future, self.pending.pop(future))
        for future in list(self.pending):
            self._abandon(future)

    def _abandon(self, future: Future[Any]) -> None:
        pending = self.pending.pop(future)
        future.cancel()
        self.issues.append(self.timeout_issue(pending.call, pending.limit_s))

    def _settle(self, future: Future[Any], pending: _Pending) -> None:
        self._settling_depth = pending.depth  # calls the callbacks start wait on this one
        error = future.exception()
        if error is not None:
            if pending.on_error is None or not pending.on_error(error):
                self.issues.append(issue_for(error, pending.call, self.server, pending.limit_s))
            return
        try:
            pending.on_ok(future.result())
            self.sources.append(pending.call.source)
        except (ParseError, ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
            # an answer of an unexpected shape costs this call, not the gathering
            why = e.message if isinstance(e, ParseError) else quoted(e)
            self.issues.append(ReadIssue(pending.call.source, said("unexpected_answer", detail=why)))

    def timeout_issue(self, call: Call, limit_s: float) -> ReadIssue:
        return ReadIssue(call.source, no_answer_within(limit_s, call.rbac), kind="timeout")
