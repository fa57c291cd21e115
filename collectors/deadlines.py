"""Run evidence sources in parallel, each under its own deadline and all under one overall.

A slow or dead source never holds up the verdict: when its time is up it becomes a
"timeout" ReadIssue and the triage goes on without it. Its thread may still finish in the
background; the result is dropped.

>>> from concurrent.futures import ThreadPoolExecutor
>>> with ThreadPoolExecutor(2) as pool:
...     out = run_parallel({"a": lambda: 1}, pool, per_source_s=1.0, overall_s=2.0)
>>> out["a"]
1
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor, Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from runbooks.evidence import ReadIssue


class SourceFailed(Exception):
    """A source could not be read; `kind` is a ReadIssue kind (forbidden, unreachable, ...)."""

    def __init__(self, source: str, message: str, kind: str = "unreadable"):
        super().__init__(message)
        self.source = source
        self.message = message
        self.kind = kind

    def issue(self) -> ReadIssue:
        return ReadIssue(self.source, self.message, kind=self.kind)


def run_parallel(
    sources: Mapping[str, Callable[[], Any]],
    pool: Executor,
    per_source_s: float,
    overall_s: float,
    clock: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Start every source at once; return name -> result, or name -> ReadIssue on failure.

    Each source gets `per_source_s`, and none waits past `overall_s` from the start.
    """
    start = clock()
    futures: dict[str, Future] = {name: pool.submit(fn) for name, fn in sources.items()}
    out: dict[str, Any] = {}
    for name, fut in futures.items():
        remaining = min(per_source_s - (clock() - start), overall_s - (clock() - start))
        try:
            out[name] = fut.result(timeout=max(0.0, remaining))
        except FutureTimeout:
            fut.cancel()
            out[name] = ReadIssue(name, f"no answer within {min(per_source_s, overall_s):g} s", kind="timeout")
        except SourceFailed as e:
            out[name] = e.issue()
        except Exception as e:  # one broken source must not cost the others
            out[name] = ReadIssue(name, f"{type(e).__name__}: {str(e)[:200]}")
    return out
