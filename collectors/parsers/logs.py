"""Server logs (vLLM, TGI, SGLang) as LogSignals: signal counts, start-up memory, stats, engine.

Streaming, line by line, in flat memory; any text is accepted (a line that cannot be read is
passed over, never fatal). Timestamps of every shape the engines print are read:

- vLLM `INFO 05-10 12:00:05 [file.py:12]`, after an optional `(APIServer pid=1)` tag: the
  line has no year, so its time is kept only when `year` is given (a Dec -> Jan roll-over
  moves to the next year); with `year=None` only lines with a full date carry a time;
- TGI (and `kubectl logs --timestamps`) RFC 3339 `2024-06-01T12:00:00.123456Z` at the start;
- SGLang `[2025-03-01 12:00:00 TP0]`;
- `time=2026-03-09T2017Z` / `ts=` / `timestamp=` key=value, compact or ISO;
- JSON lines (TGI `--json-output`): `timestamp`, and `fields.message` / `message` / `msg`.

Times without a zone are taken as UTC.

>>> ls = parse_server_log(['time=2026-03-09T2017Z level=error msg="CUDA out of memory"'])
>>> ls.count("cuda_oom"), ls.signals[0].first_at.isoformat()
(1, '2026-03-09T20:17:00+00:00')
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import replace
from datetime import datetime
from os import PathLike

from collectors.parsers.kube_tables import PodTextReader
from collectors.parsers.launch_devices import DeviceScanner
from collectors.parsers.log_errors import ErrorReader
from collectors.parsers.log_failures import FailureReader
from collectors.parsers.log_launch import LaunchScanner
from collectors.parsers.log_startup import StartupReader
from collectors.parsers.log_stats import merge_peak, parse_stats
from collectors.parsers.log_time import month_day_time, parse_time
from collectors.parsers.textio import MAX_LINE_BYTES, decode_line, iter_lines
from runbooks.catalogs.signals import COUNT_MAX, COUNT_SUM, RULES_BY_KEY, is_startup_error, match_line
from runbooks.catalogs.tgi_router_lines import TGI_RELEASE_COMMITS
from runbooks.catalogs.versions import release_span, tgi_releases_of
from runbooks.model.evidence import LogSignals, SignalCount, StatsSample

EXAMPLE_CHARS = 300

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_RFC3339 = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,12})?(?:Z|[+-]\d\d:?\d\d))\s+")
_PROC_TAG = re.compile(r"\((\w[\w =]{0,40}?) pid=\d{1,10}\)\s*")
#: `docker compose` service prefix ("vllm-1  | "), and `[rank0]: ` of torch's per-rank output
_COMPOSE = re.compile(r"[\w.\-]{1,80}\s{1,40}\|\s")
_RANK = re.compile(r"\[rank(\d{1,5})\]:\s?")
#: FastChat-style fields after a timestamp ("| ERROR | stderr | ")
_PIPE_FIELDS = re.compile(r"\|\s*[A-Z]{3,8}\s*\|\s*\w{1,20}\s*\|\s?")
_LEVEL = r"(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL|TRACE)"
_VLLM_PREFIX = re.compile(
    _LEVEL + r"\s+(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,]\d{1,9})?\s+(?:\[?[\w./\-]{1,120}:\d{1,6}\]\s*)?"
)
_TGI_LEVEL = re.compile(r"\s*" + _LEVEL + r"\s+")
_SGLANG_PREFIX = re.compile(
    r"\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?)((?: [A-Za-z]{1,8}\d{1,4}){0,6})\]\s*"
)
_ISO_PREFIX = re.compile(r"(\d{4}-\d\d-\d\d[T ]\d\d:\d\d(?::\d\d(?:[.,]\d{1,12})?)?(?:Z|[+-]\d\d:?\d\d)?)\s")
_KV_TIME = re.compile(r"(?:^|\s)(?:time|ts|timestamp)=(?:\"([^\"]{1,60})\"|([^\s\"]{1,60}))")

_VLLM_VERSION = re.compile(
    r"vLLM API server version:? v?(\d[\w.+\-]{0,40})|Initializing an? (?:V\d )?LLM engine \(v(\d[\w.+\-]{0,40})\)"
    r"|\bvllm==(\d+\.\d+[\w.+\-]{0,30})|vllm-openai:v(\d+\.\d+[\w.+\-]{0,30})|vLLM version:? v?(\d+\.\d+[\w.+\-]{0,30})"
)
_TGI_MARK = re.compile(r"text_generation_(?:launcher|router|server|client)|text-generation-(?:launcher|inference)"
                       r"|\bArgs \{ model_id|^\{ model_id:")
_TGI_VERSION = re.compile(r"text-generation-inference:v?(\d+\.\d+[\w.+\-]{0,30})")
#: the source position a TGI router line carries ("text_generation_router: router/src/main.rs:354: ..."),
#: which bounds the release (`runbooks.catalogs.versions.tgi_releases_of`)
_TGI_ROUTER_AT = re.compile(r"\btext_generation_\w+(?:::\w+)*: ((?:router|backends/v\d+)/[\w/]+\.rs):(\d{1,6}): (.*)")
#: the build's commit in `text-generation-launcher --env` ("- Commit sha: c38a7d7d...")
_TGI_COMMIT = re.compile(r"\bCommit sha: ([0-9a-f]{40})\b")
#: router lines kept for that, at most (a start-up's are the first few dozen)
_TGI_ROUTER_LINES_KEPT = 64
_SGLANG_MARK = re.compile(r"\bsglang[./:]|sglang\.launch_server|\bsglang serve\b|\bLoad weight (?:begin|end)\b"
                          r"|KV Cache is allocated|server_args=ServerArgs|\b(?:Decode|Prefill) batch[.,]"
                          r"|Received sigquit from a child process|Scheduler hit an exception")
_SGLANG_VERSION = re.compile(r"\bsglang(?:==| version:? v?| v|:v)(\d+\.\d+[\w.+\-]{0,30})", re.IGNORECASE)
_VLLM_MARKS = ("VllmWorker", "EngineCore", "site-packages/vllm/", "vllm.entrypoints", "GPU KV cache usage",
               "# GPU blocks", "LLM engine", "vllm/v1/", "/vllm/worker/", "vllm/vllm-openai")
_DIGITS = re.compile(r"\d+")
#: a line some rank printed (several print the same event): counted once
_RANKED = re.compile(r"\b(?:TP|DP|PP|EP)\d{1,4}\b|\brank\s?=?\d|Worker|\[rank\d")

_MAX_CACHE = 4096
#: signals that say an engine failed without saying why: they do not explain an error line
_GENERIC_FAILURES = frozenset({"engine_start_failed", "engine_init_failed"})


class _Signal:
    __slots__ = ("amount_max", "amount_sum", "example", "first_at", "first_line", "last_at", "lines")

    def __init__(self, line_no: int, example: str) -> None:
        self.lines = 0
        self.amount_max = 0
        self.amount_sum = 0
        self.first_line = line_no
        self.first_at: datetime | None = None
        self.last_at: datetime | None = None
        self.example = example


class _LogReader:
    def __init__(self, source: str, year: int | None) -> None:
        self.source = source
        self.year = year
        self.last_month: int | None = None
        self.lines = 0
        self.first_at: datetime | None = None
        self.last_at: datetime | None = None
        self.signals: dict[str, _Signal] = {}
        self.startup = StartupReader()
        self.stats_last: StatsSample | None = None
        self.stats_peak: StatsSample | None = None
        self.engine_votes: dict[str, int] = {}
        self.engine_hints: dict[str, int] = {}
        self.versions: dict[str, str] = {}
        #: TGI router lines with their source positions (file, line, message)
        self.tgi_router_at: list[tuple[str, int, str]] = []
        self.tgi_release_commit: str | None = None
        self.time_cache: dict[str, datetime | None] = {}
        self.launch = LaunchScanner(source)
        self.failures = FailureReader()
        self.errors = ErrorReader()
        self.devices = DeviceScanner()
        self.pod_text = PodTextReader()
        #: (signal, time, message) of events a rank-tagged line already counted
        self.seen_ranked: set[tuple[str, datetime | None, str]] = set()

    # -------------------------------------------------------------- one line

    def feed(self, raw: str | bytes) -> None:
        self.lines += 1
        line = decode_line(raw, MAX_LINE_BYTES)
        if not line or line.isspace():
            return
        if "\x1b" in line:
            line = _ANSI.sub("", line)
        self.pod_text.feed(line)
        stripped = line.lstrip()
        at: datetime | None = None
        if stripped.startswith("{") and not stripped.startswith("{ model_id:"):
            parsed = self._json_line(stripped)
            if parsed is not None:
                text, message, at = parsed
                # the message is what a text log would print (TGI's --json-output keeps its
                # launcher's Args printout, one field per line, in one message)
                for part in message.splitlines():
                    self.launch.feed(part)
                    self.devices.feed(part)
                self._read(text, message, at, False)
                return
        compose = _COMPOSE.match(stripped)
        if compose:
            stripped = stripped[compose.end() :].lstrip()
        self.launch.feed(line if compose is None else stripped)
        self.devices.feed(line if compose is None else stripped)
        text, at, ranked = self._prefix(stripped)
        self._read(stripped, text, at, ranked)

    def _read(self, line: str, message: str, at: datetime | None, ranked: bool) -> None:
        if at is not None:
            if self.first_at is None or at < self.first_at:
                self.first_at = at
            if self.last_at is None or at > self.last_at:
                self.last_at = at
        self._detect_engine(line)
        copy = False
        hits = match_line(line)
        for hit in hits:
            if ranked:
                # ranks print the same event with their own GPU index and pid
                event = (hit.key, at, _DIGITS.sub("#", message.strip()))
                if event in self.seen_ranked:
                    copy = True
                    continue
                if len(self.seen_ranked) >= _MAX_CACHE:
                    self.seen_ranked.clear()
                self.seen_ranked.add(event)
            self._count(hit.key, hit.amount, line, at)
            if is_startup_error(hit.key):
                self.startup.set_error(message)
        self.failures.feed(message, counted=not copy, line=line)
        self.errors.feed(message, line, explained=any(h.key not in _GENERIC_FAILURES for h in hits))
        self.startup.feed(message)
        sample = parse_stats(message, at)
        if sample is not None:
            self.stats_last = sample
            self.stats_peak = merge_peak(self.stats_peak, sample)

    def _count(self, key: str, amount: int | None, line: str, at: datetime | None) -> None:
        sig = self.signals.get(key)
        if sig is None:
            sig = self.signals[key] = _Signal(self.lines, line.strip()[:EXAMPLE_CHARS])
        sig.lines += 1
        if amount is not None:
            sig.amount_max = max(sig.amount_max, amount)
        sig.amount_sum += amount if amount is not None else 1
        if at is not None:
            if sig.first_at is None or at < sig.first_at:
                sig.first_at = at
            if sig.last_at is None or at > sig.last_at:
                sig.last_at = at

    # -------------------------------------------------------------- prefixes

    def _prefix(self, line: str) -> tuple[str, datetime | None, bool]:
        """The message without its log prefix, the line's time, and whether a rank printed it."""
        at: datetime | None = None
        ranked = False
        rest = line
        m = _RFC3339.match(rest)
        if m:
            at = self._cached(m.group(1))
            rest = rest[m.end() :]
            lvl = _TGI_LEVEL.match(rest)
            if lvl:
                rest = rest[lvl.end() :]
        m = _RANK.match(rest)
        if m:
            ranked = True
            rest = rest[m.end() :]
        m = _PROC_TAG.match(rest)
        while m:
            self._vote("vllm")
            ranked = ranked or bool(_RANKED.search(m.group(1)))
            rest = rest[m.end() :]
            m = _PROC_TAG.match(rest)
        m = _VLLM_PREFIX.match(rest)
        if m:
            if at is None and self.year is not None:
                at = self._month_day(m)
            return rest[m.end() :], at, ranked
        m = _SGLANG_PREFIX.match(rest)
        if m:
            if m.group(2):
                self._vote("sglang")
                ranked = True
            return rest[m.end() :], at or self._cached(m.group(1)), ranked
        if at is None:
            m = _ISO_PREFIX.match(rest)
            if m:
                rest = rest[m.end() :]
                pipes = _PIPE_FIELDS.match(rest)
                return (rest[pipes.end() :] if pipes else rest), self._cached(m.group(1)), ranked
            if "=" in rest:
                m = _KV_TIME.search(rest)
                if m:
                    at = self._cached(m.group(1) or m.group(2))
        return rest, at, ranked

    def _cached(self, stamp: str) -> datetime | None:
        at = self.time_cache.get(stamp, False)
        if at is False:
            if len(self.time_cache) >= _MAX_CACHE:
                self.time_cache.clear()
            at = self.time_cache[stamp] = parse_time(stamp)
        return at  # type: ignore[return-value]

    def _month_day(self, m: re.Match[str]) -> datetime | None:
        assert self.year is not None
        month = int(m.group(1))
        if 1 <= month <= 12:
            if self.last_month is not None and self.last_month - month >= 6:
                self.year += 1  # the log crossed New Year
            self.last_month = month
        return month_day_time(month, int(m.group(2)), int(m.group(3)), int(m.group(4)), int(m.group(5)), self.year)

    def _json_line(self, line: str) -> tuple[str, str, datetime | None] | None:
        """(all the text of a JSON log line, its message, its time), or None when no JSON object."""
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):
            return None
        if not isinstance(obj, dict):
            return None
        fields = obj.get("fields")
        parts: list[str] = []
        for holder in (fields, obj):
            if isinstance(holder, dict):
                for key in ("message", "msg", "error"):
                    value = holder.get(key)
                    if isinstance(value, str):
                        parts.append(value)
        message = " ".join(parts)
        if isinstance(fields, dict):
            parts.extend(f"{k}={v}" for k, v in fields.items() if k not in ("message", "msg", "error")
                         and isinstance(v, (str, int, float)))
        target = obj.get("target")
        if isinstance(target, str):
            parts.append(target)
        if not parts:
            parts.append(line)
        if not message:
            message = line
        at = None
        for key in ("timestamp", "time", "ts", "@timestamp"):
            stamp = obj.get(key)
            if isinstance(stamp, str):
                at = self._cached(stamp)
                break
        return " ".join(parts), message, at

    # ----------------------------------------------------------------- engine

    def _vote(self, engine: str) -> None:
        self.engine_votes[engine] = self.engine_votes.get(engine, 0) + 1

    def _detect_engine(self, line: str) -> None:
        low = line.lower()
        if "vllm" in low or "LLM engine" in line:
            m = _VLLM_VERSION.search(line)
            if m:
                self._vote("vllm")
                self.versions["vllm"] = next(g for g in m.groups() if g)
        if any(map(line.__contains__, _VLLM_MARKS)):
            self._vote("vllm")
        if ("text" in line or "model_id" in line) and _TGI_MARK.search(line):
            self._vote("tgi")
            m = _TGI_VERSION.search(line)
            if m:
                self.versions["tgi"] = m.group(1)
            at = _TGI_ROUTER_AT.search(line) if len(self.tgi_router_at) < _TGI_ROUTER_LINES_KEPT else None
            if at:
                self.tgi_router_at.append((at.group(1), int(at.group(2)), at.group(3)))
        if "Commit sha" in line:
            sha = _TGI_COMMIT.search(line)
            if sha and sha.group(1) in TGI_RELEASE_COMMITS:
                self.tgi_release_commit = TGI_RELEASE_COMMITS[sha.group(1)]
        if _SGLANG_MARK.search(line):
            self._vote("sglang")
        if "sglang" in low:
            m = _SGLANG_VERSION.search(line)
            if m:
                self._vote("sglang")
                self.versions["sglang"] = m.group(1)

    def _engine(self) -> str | None:
        votes = self.engine_votes
        if not votes:
            # no marker: engine-specific signals are a weaker clue
            for key in self.signals:
                engine = RULES_BY_KEY[key].engine
                if engine is not None:
                    votes[engine] = votes.get(engine, 0) + 1
        return max(votes, key=lambda e: votes[e]) if votes else None

    # ----------------------------------------------------------------- result

    def result(self) -> LogSignals:
        signals = []
        for key, sig in self.signals.items():
            rule = RULES_BY_KEY[key]
            if rule.count == COUNT_MAX:
                count = max(sig.amount_max, sig.lines)
            elif rule.count == COUNT_SUM:
                count = sig.amount_sum
            else:
                count = sig.lines
            signals.append(SignalCount(key, count, sig.first_line, sig.first_at, sig.last_at, sig.example))
        signals.sort(key=lambda s: (s.first_line or 0, s.key))
        launch = self.launch.result()
        if launch is not None and launch.engine:
            # a command or the engine's own printout is the strongest clue there is
            self.engine_votes[launch.engine] = self.engine_votes.get(launch.engine, 0) + 100
        engine = self._engine()
        version = self.versions.get(engine) if engine else None
        if engine == "tgi" and version is None and not (launch is not None and launch.engine_version):
            # no image tag: the release whose commit the env block names, else the releases
            # whose router logs these lines where this log has them
            version = self.tgi_release_commit or release_span(tgi_releases_of(self.tgi_router_at))
        if launch is not None and launch.engine_version is None and version and launch.engine in (engine, None):
            launch = replace(launch, engine_version=version, engine=launch.engine or engine)
        return LogSignals(
            source=self.source,
            lines=self.lines,
            engine=engine,
            engine_version=version or (launch.engine_version if launch else None),
            signals=tuple(signals),
            startup=self.startup.result(),
            stats_last=self.stats_last,
            stats_peak=self.stats_peak,
            first_at=self.first_at,
            last_at=self.last_at,
            server_config=launch,
            oom=self.failures.oom(),
            parallel_error=self.failures.parallel(),
            kv_alloc_failure=self.failures.kv_alloc(),
            pods=self.pod_text.result(),
            events=self.pod_text.events(),
            errors=self.errors.result(),
            launches=self.devices.result(),
        )


def parse_server_log(
    lines: Iterable[str] | Iterable[bytes] | str, source: str = "logs.txt", year: int | None = None
) -> LogSignals:
    """Read a server log, one line at a time (an open file handle works; memory stays flat).

    `year`: the year of vLLM's `MM-DD` stamps (None: those lines carry no time). A whole text
    given as one str is split into lines. Never raises on any text.
    """
    reader = _LogReader(source, year)
    if isinstance(lines, str):
        lines = lines.splitlines()
    for raw in lines:
        reader.feed(raw.rstrip("\n") if isinstance(raw, str) else raw.rstrip(b"\n"))
    return reader.result()


def read_server_log(path: str | PathLike[str], source: str | None = None, year: int | None = None) -> LogSignals:
    """`parse_server_log` over a file, read in binary chunks (undecodable bytes are replaced).

    Raises OSError when the file cannot be opened.
    """
    name = source if source is not None else str(path)
    with open(path, "rb") as fh:
        return parse_server_log(iter_lines(fh), source=name, year=year)
