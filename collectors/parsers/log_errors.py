"""Errors a log states, whatever printed them: the generic failure reader.

The signal catalog names the failures gpumem knows (a CUDA OOM, a KV-cache refusal, NCCL...).
Everything else a user pastes can still say that something broke: a line at ERROR, CRITICAL
or FATAL level, a Python traceback (its header, its frames, its closing exception), an
exception class with its message (`RuntimeError: ...`, `DriverError(...)`, a Rust `Error:`),
a "failed to start" or "crashed" line, a shard, worker or engine-core exit, a process killed
by a signal (an orderly stop in a router's or gateway's own log is that process's, not an
engine's: `router_exit`), a host-memory kill (Ray's memory monitor or raylet, the OOM killer), or an error from a GPU-sharing layer (HAMi-core's
`[HAMI-core ERROR ...]`, its allocator's `cuMemoryAllocate failed`). Such a line is evidence, and triage quotes it; whether a rule
explains it is decided by the caller (`explained=` on `feed`).

Tracebacks are one error: the frames between `Traceback (most recent call last):` and the
exception that closes it are not counted again, and vLLM's `ERROR ... ` prefix on every line
of a worker's traceback does not make each frame an error of its own. A log cut inside a
traceback (frames, no closing exception) still counts as one traceback, quoted by its last
frame.

>>> r = ErrorReader()
>>> for line in ["Traceback (most recent call last):", '  File "x.py", line 3, in load_model',
...              "RuntimeError: Worker failed"]:
...     r.feed(line, line)
>>> [(e.kind, e.example) for e in r.result()]
[('exception', 'RuntimeError: Worker failed')]
"""

from __future__ import annotations

import re
from dataclasses import replace

from runbooks.catalogs.signals import ORDERLY_SHUTDOWN, router_named
from runbooks.model.evidence import LoggedError

EXAMPLE_CHARS = 300
#: distinct errors kept (the first ones: a crash loop repeats the same lines)
MAX_ERRORS = 8

_LEVEL = re.compile(
    r"(?:^|[\s|\[(])(?:ERROR|CRITICAL|FATAL)(?=[\s:|\]]|$)|\blevel=(?:error|fatal|critical)\b|\"level\":\s*\"(?:ERROR|error)\""
)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")
_FRAME = re.compile(r"^\s*File \"[^\"]{1,400}\", line \d{1,7}(?:, in [\w<>.]{1,120})?")
#: an exception named at the start of a message: `ValueError: ...`, `torch.OutOfMemoryError: ...`,
#: `DriverError(CUDA_ERROR_UNKNOWN, ...)`, a class cut mid-name after a module path
_EXCEPTION = re.compile(
    r"^(?:[a-z_][\w]{0,40}\.){0,6}[A-Z]\w{0,60}(?:Error|Exception|Exit|Fault)(?::|\(|$)"
    r"|^(?:[a-z_]\w{0,40}\.){1,6}exceptions\.\w{1,60}"
    r"|^Error: \w"
)
_DOWN = re.compile(
    r"failed to start|ShardCannotStart|[Cc]rash(?:ed|ing)\b|is already dead|EngineDeadError|[Ee]ngine core"
    r" initialization failed|terminating server process|[Ww]orker (?:died|exited|unexpectedly exits)"
    r"|died or was killed|killed by SIGKILL|SIGKILL|SIGSEGV|[Ss]egmentation fault|core dumped"
    r"|OOM killer|[Ss]hard \d{1,4} (?:terminated|exited|failed)|process (?:exited|was signaled)"
    r"|exit(?:ed)? with (?:exit )?code [1-9]|exit code:? [1-9]\d{0,2}\b|[Ee]ngine ?(?:[Cc]ore)? ?(?:died|is dead|exited)"
    r"|Shutting down shards|[Ss]hutting down|[Ee]ngine background task failed"
)
#: a process killed for host memory: Ray's memory monitor, the kernel's OOM killer
_HOST_OOM = re.compile(
    r"ray\.exceptions\.OutOfMe|node (?:is )?running low on memory|killed by SIGKILL by OOM killer"
    r"|memory usage threshold|Out of memory: Kill(?:ed)? process|\boom-kill(?:er)?\b|\bOOMKilled\b"
    r"|killed due to memory pressure \(OOM\)"  # raylet's summary of the workers it killed
)
#: `cuMemoryAllocate` is HAMi-core's allocator (allocator.c), not a CUDA driver call: its failure is
#: the sharing layer's even when the `[HAMI-core ERROR ...]` prefix was not pasted
_SHARING = re.compile(r"HAMI-core (?:ERROR|Warn)|\blibvgpu\b.{0,80}(?:error|fail)|vGPU.{0,40}(?:OOM|error)"
                      r"|\bcuMemoryAllocate failed\b",
                      re.IGNORECASE)
_DIGITS = re.compile(r"\d+")
#: a line at another level ends a traceback the log cut before its exception
_OTHER_LEVEL = re.compile(r"(?:^|[\s|\[(])(?:INFO|WARNING|WARN|DEBUG)(?=[\s:|\]])")
#: lines a traceback may run before it is taken as cut
_TRACEBACK_LINES = 400


class ErrorReader:
    """Feeds on log lines (the message without its prefix, and the whole line); `result()`
    gives the distinct errors, in the order they first appeared."""

    def __init__(self) -> None:
        self._line = 0
        self._in_traceback: int | None = None
        self._last_frame: str | None = None
        self._frames_unclosed = False
        self._errors: list[LoggedError] = []
        self._seen: set[str] = set()
        self._down = False
        #: the router or gateway the log names (its lines are that process's)
        self._router: str | None = None

    def feed(self, message: str, line: str | None = None, explained: bool = False) -> None:
        """Read one line. `explained`: a rule of the signal catalog matched it (a CUDA OOM,
        an NCCL error...): it is recorded as explained, not as an unexplained failure."""
        self._line += 1
        whole = line if line is not None else message
        if self._router is None:
            self._router = router_named(whole)
        text = message.strip()
        if not text or not text.strip("^~ "):
            return  # empty, or torch's caret marks under a source line
        if _TRACEBACK.search(text):
            self._in_traceback = self._line
            self._last_frame = None
            return
        if _FRAME.match(text):
            if self._in_traceback is None:
                self._frames_unclosed = True
            self._last_frame = text
            return
        if self._in_traceback is not None or self._frames_unclosed:
            if _EXCEPTION.match(text) or _HOST_OOM.search(text):
                self._close_traceback()
                self._add("host_memory_kill" if _HOST_OOM.search(text) else "exception", text, explained,
                          down=bool(_HOST_OOM.search(text)))
                return
            if not _OTHER_LEVEL.search(whole) and self._line - (self._in_traceback or self._line) < _TRACEBACK_LINES:
                return  # a source line, a caret mark or an ERROR-prefixed line of the traceback
            self._close_traceback(cut=True)
        if _SHARING.search(whole):
            self._add("sharing_layer", text, explained)
            return
        if _HOST_OOM.search(text):
            self._add("host_memory_kill", text, explained, down=True)
            return
        if _EXCEPTION.match(text):
            self._close_traceback()
            self._add("exception", text, explained)
            return
        if _DOWN.search(text):
            self._add("process_exit", text, explained, down=True)
            return
        if _LEVEL.search(whole):
            self._add("error_line", text, explained)

    def _close_traceback(self, cut: bool = False) -> None:
        if cut and self._last_frame:
            # cut inside a traceback: the frames say where it failed, not what
            self._add("traceback", self._last_frame, False)
        self._in_traceback = None
        self._frames_unclosed = False
        self._last_frame = None

    def _add(self, kind: str, text: str, explained: bool, down: bool = False) -> None:
        down = down or bool(_DOWN.search(text))
        self._down = self._down or down
        key = kind + ":" + _DIGITS.sub("#", text)[:120]
        if key in self._seen:
            return
        self._seen.add(key)
        if len(self._errors) < MAX_ERRORS:
            self._errors.append(LoggedError(kind, text[:EXAMPLE_CHARS], self._line, explained, down))

    def result(self) -> tuple[LoggedError, ...]:
        """The distinct errors so far (a traceback still open counts as cut). In a router's or
        gateway's log (one line names it, before or after) an orderly stop is the router's.

        >>> r = ErrorReader()
        >>> for line in ["INFO:     Shutting down", "[2025-05-21 11:44:46,899] INFO: httpx AsyncClient closed "
        ...              "(httpx_client.py:43:vllm_router.httpx_client)"]:
        ...     r.feed(line, line)
        >>> [(e.kind, e.down, e.process) for e in r.result()]
        [('router_exit', False, 'vllm_router')]
        """
        out = [replace(e, kind="router_exit", down=False, process=self._router)
               if self._router and e.kind == "process_exit" and ORDERLY_SHUTDOWN.search(e.example) else e
               for e in self._errors]
        if (self._in_traceback is not None or self._frames_unclosed) and self._last_frame and len(out) < MAX_ERRORS:
            out.append(LoggedError("traceback", self._last_frame[:EXAMPLE_CHARS], self._line, False, False))
        return tuple(out)
