"""Access logs as a RequestProfile: per-request input/output token counts, streamed.

Line kinds read:
- key=value: `time=2026-03-09T2011Z input_tokens=7420 output_tokens=312 model=qwen2.5-7b`
  (also `prompt_tokens=`/`completion_tokens=`, `ts=`/`timestamp=`/`@timestamp=`, quoted
  values, any order, among any other fields);
- JSON lines with OpenAI-style usage: `{"usage": {"prompt_tokens": 9, "completion_tokens": 3},
  "created": 1741550000}`, or the counts at the top level; the time from `created` (Unix
  seconds) or an ISO `time`/`timestamp`;
- SGLang request logs: `Finish: ... 'prompt_tokens': 9, 'completion_tokens': 3 ...`.

The time of a line, in this order: its first time key (`time=`, ISO 8601 / RFC 3339 or a Unix
epoch in s or ms); an ISO time in brackets at the start (`[2026-10-10T13:55:36.123Z]`, Envoy,
SGLang); the first nginx/Apache `[10/Oct/2026:13:55:36 +0000]`; a JSON-style `"created":` /
`"time":` key (JSON lines read as JSON take theirs from the parsed object); else an ISO time
in the first 40 characters. A line without one is counted without a time.

Other lines are counted in `skipped_lines`; blank lines are ignored, and so is nothing else: a
line longer than MAX_LINE_BYTES is counted as skipped. A file with lines but no readable one
raises ParseError.

The file is read in binary chunks and the runbook's key=value shape is matched by one bytes
regex over each whole chunk; lines it does not match go to `parse_access_line`, which is the
definition of what a line means (the regex takes only lines it reads the same way). Memory
stays flat whatever the file size (`benchmarks/bench_access_log.py` measures both).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from datetime import datetime
from operator import itemgetter
from os import PathLike
from typing import Any

from collectors.errors import ParseError, said
from collectors.parsers.log_time import clf_time, epoch_time, parse_time, search_time
from collectors.parsers.textio import CHUNK_BYTES, MAX_LINE_BYTES, BlockReader
from runbooks.model.lengths import RequestProfile
from runbooks.model.units import MIB
from runbooks.profile.requests import ProfileBuilder

NO_LENGTHS = said("no_lengths")

#: token counts of a billion or more are not request lengths
MAX_TOKENS = 10**9 - 1

# The runbook's shape, matched over a whole chunk. Group 4 takes any other non-empty line whole
# so that every line is consumed by exactly one match (no scanning between matches). Only
# lines `parse_access_line` reads the same way are taken: the stamp is the whole value its
# key=value reader sees (no byte it ends a value at, nothing but ASCII); `input_tokens=` and
# `output_tokens=` (the spellings it prefers wherever they are); and a line without a leading
# time key holds nothing another time could come from (a later time key, a `[`, a `"`). A
# stamp that is no time sends its line to `parse_access_line` too (see `_AccessReader`).
# (The shapes of the alternatives are tuned: sre is markedly faster on `t(?:ime|s)` and
# `(?:x|\r?)$`.)
_FAST = re.compile(
    rb"^(?:t(?:ime|s|imestamp)=([^\x00-\x20,;\"')}\x7f-\xff]{1,64})[ \t]+|(?![^\n]*(?:time=|ts=|timestamp=|\[|\")))"
    rb"input_tokens=(\d{1,9})[ \t]+output_tokens=(\d{1,9})(?:[ \t][^\n]*|\r?)$"
    rb"|^([^\n]+)$",
    re.MULTILINE,
)

_STAMP, _INPUT, _OUTPUT, _OTHER = itemgetter(0), itemgetter(1), itemgetter(2), itemgetter(3)

_KEY_VALUE = re.compile(r"""(?:^|[\s,;{(])([A-Za-z_@][\w.@\-]{0,40})=("[^"]*"|'[^']*'|[^\s,;"')}]*)""")
_IN_ANY = re.compile(r"""(?<![\w\-])(?:input|prompt)_tokens['"]?\s*[:=]\s*['"]?(\d{1,12})\b""")
_OUT_ANY = re.compile(r"""(?<![\w\-])(?:output|completion)_tokens['"]?\s*[:=]\s*['"]?(\d{1,12})\b""")
# [ISO time ...] at the start of a line: Envoy's `[2026-10-10T13:55:36.123Z]`, SGLang's `[2025-03-01 12:00:00 TP0]`
_BRACKET_TIME = re.compile(r"^\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:[Zz]|[+-]\d\d(?::?\d\d)?)?)", re.ASCII)
# nginx / Apache `[$time_local]` after whitespace (or at the start)
_CLF_BRACKET = re.compile(r"(?:^|\s)\[(\d{2}/[A-Za-z]{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\]", re.ASCII)
# a JSON-style time key in text that was not read as JSON
_JSON_TIME = re.compile(r'"(created|time|timestamp|ts|@timestamp)"\s*:\s*("[^"]*"|[-+.\w]+)')

_IN_KEYS = ("input_tokens", "prompt_tokens")
_OUT_KEYS = ("output_tokens", "completion_tokens")
_TIME_KEYS = ("time", "timestamp", "ts", "@timestamp")
#: the keys a JSON object's time comes from, first found first
_JSON_TIME_KEYS = ("created", *_TIME_KEYS)

_MAX_TIME_CACHE = 200_000
_TEXT_BLOCK_BYTES = MIB


def _tokens(value: Any) -> int | None:
    """A token count from a JSON or key=value value, or None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        n = value
    elif isinstance(value, float):
        if not value.is_integer():
            return None
        n = int(value)
    elif isinstance(value, str) and value.isascii() and value.isdigit() and len(value) <= 12:
        n = int(value)
    else:
        return None
    return n if 0 <= n <= MAX_TOKENS else None


def _time_value(value: Any) -> datetime | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return epoch_time(value)
    if isinstance(value, str) and len(value) <= 64:
        text = value.strip()
        if text.replace(".", "", 1).isdigit():
            return epoch_time(text)
        return parse_time(text) or clf_time(text)
    return None


def _first(obj: dict[str, Any], keys: tuple[str, ...]) -> Any:
    for key in keys:
        if key in obj:
            return obj[key]
    return None


def _from_json(obj: Any) -> tuple[int, int, datetime | None] | None:
    if not isinstance(obj, dict):
        return None
    holders: list[dict[str, Any]] = []
    for path in (("usage",), (), ("response", "usage"), ("meta_info",), ("out", "meta_info")):
        node: Any = obj
        for step in path:
            node = node.get(step) if isinstance(node, dict) else None
        if isinstance(node, dict):
            holders.append(node)
    for holder in holders:
        n_in, n_out = _tokens(_first(holder, _IN_KEYS)), _tokens(_first(holder, _OUT_KEYS))
        if n_in is not None and n_out is not None:
            at = None
            response = obj.get("response")
            for node in (obj, response if isinstance(response, dict) else {}):
                for key in _JSON_TIME_KEYS:
                    if key in node:
                        at = _time_value(node[key])
                        if at is not None:
                            return n_in, n_out, at
            return n_in, n_out, None
    return None


def _from_text(line: str) -> tuple[int, int, datetime | None] | None:
    """key=value pairs, or `'prompt_tokens': N`-style text anywhere in the line."""
    pairs: dict[str, str] = {}
    stamp: str | None = None
    if "=" in line:
        for key, value in _KEY_VALUE.findall(line):
            if value[:1] in "\"'":
                value = value[1:-1]
            pairs.setdefault(key, value)
            if stamp is None and key in _TIME_KEYS:
                stamp = value  # the first time key on the line, as the fast path reads it
    n_in = _tokens(_first(pairs, _IN_KEYS))
    n_out = _tokens(_first(pairs, _OUT_KEYS))
    if n_in is None or n_out is None:
        m_in, m_out = _IN_ANY.search(line), _OUT_ANY.search(line)
        if m_in is None or m_out is None:
            return None
        n_in, n_out = _tokens(m_in.group(1)), _tokens(m_out.group(1))
        if n_in is None or n_out is None:
            return None
    at = _time_value(stamp) if stamp is not None else None
    return n_in, n_out, at if at is not None else _line_time(line)


def _line_time(line: str) -> datetime | None:
    """The time of a line without a readable time key (the order is the module's)."""
    m = _BRACKET_TIME.match(line)
    if m:
        return parse_time(m.group(1))
    m = _CLF_BRACKET.search(line)
    if m:
        return clf_time(m.group(1))
    if '"' in line:
        at = _json_key_time(line)
        if at is not None:
            return at
    return search_time(line[:40])


def _json_key_time(line: str) -> datetime | None:
    """`"created": 1741550000` / `"time": "2026-..."` in text: the first of each key, in the
    order a JSON object's keys are tried."""
    first: dict[str, str] = {}
    for key, value in _JSON_TIME.findall(line):
        first.setdefault(key, value)
    for key in _JSON_TIME_KEYS:
        value = first.get(key)
        if value is not None:
            at = _time_value(value[1:-1] if value[:1] == '"' else value)
            if at is not None:
                return at
    return None


def parse_access_line(line: str) -> tuple[int, int, datetime | None] | None:
    """One access-log line as (input_tokens, output_tokens, time or None), or None.

    >>> parse_access_line("time=2026-03-09T2011Z input_tokens=7420 output_tokens=312 model=qwen2.5-7b")[:2]
    (7420, 312)
    """
    text = line.strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            found = _from_json(json.loads(text))
        except (ValueError, RecursionError):
            found = None
        if found is not None:
            return found
    return _from_text(text)


class _AccessReader:
    def __init__(self) -> None:
        self.builder = ProfileBuilder()
        self._times: dict[bytes, datetime | None] = {}

    def feed_block(self, block: bytes) -> None:
        matches = _FAST.findall(block)
        if not matches:
            return
        if self._needs_lines(block, matches):
            self._feed_lines(block)
            return
        if not any(map(_OTHER, matches)):
            self._add_fast(matches)
            return
        # mixed block: keep arrival order, which the shift of an untimed log depends on
        run: list[tuple[bytes, bytes, bytes, bytes]] = []
        for m in matches:
            if m[3]:
                if run:
                    self._add_fast(run)
                    run = []
                self._add_slow(m[3])
            else:
                run.append(m)
        if run:
            self._add_fast(run)

    def _needs_lines(self, block: bytes, matches: list[tuple[bytes, bytes, bytes, bytes]]) -> bool:
        """True when the block holds a line the regex took that must not be read its way: one
        longer than MAX_LINE_BYTES (skipped, as every such line is) or one whose stamp is no
        time (`parse_access_line` looks further)."""
        if len(block) > MAX_LINE_BYTES:
            import numpy as np  # only for a block longer than a line may be

            ends = np.flatnonzero(np.frombuffer(block, np.uint8) == 10)
            if len(ends) and (ends[0] > MAX_LINE_BYTES or (len(ends) > 1 and int(np.diff(ends).max()) > MAX_LINE_BYTES + 1)):
                return True
            if len(block) - 1 - (int(ends[-1]) if len(ends) else -1) > MAX_LINE_BYTES:
                return True
        stamps = set(map(_STAMP, matches))
        stamps.discard(b"")
        return None in map(self._time_of, stamps)

    def _time_of(self, stamp: bytes) -> datetime | None:
        cache = self._times
        at = cache.get(stamp, False)
        if at is False:
            if len(cache) >= _MAX_TIME_CACHE:
                cache.clear()
            at = cache[stamp] = _time_value(stamp.decode("ascii"))
        return at  # type: ignore[return-value]

    def _feed_lines(self, block: bytes) -> None:
        for m in _FAST.finditer(block):
            raw = m.group(0)
            stamp = m.group(1)
            if m.group(4) is not None or len(raw) > MAX_LINE_BYTES or (stamp and self._time_of(stamp) is None):
                self._add_slow(raw)
            else:
                self.builder.add(int(m.group(2)), int(m.group(3)), self._time_of(stamp) if stamp else None)

    def _add_fast(self, matches: list[tuple[bytes, bytes, bytes, bytes]]) -> None:
        stamps = list(map(_STAMP, matches))
        at: list[datetime | None] | None = None
        if any(stamps):
            at = [self._time_of(stamp) if stamp else None for stamp in stamps]
        self.builder.add_many(list(map(_INPUT, matches)), list(map(_OUTPUT, matches)), at)

    def _add_slow(self, raw: bytes) -> None:
        if len(raw) > MAX_LINE_BYTES:
            self.builder.skip()
            return
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            return  # blank (whitespace only): nothing to read, nothing to count
        found = parse_access_line(text)
        if found is None:
            self.builder.skip()
        else:
            self.builder.add(*found)

    def result(self, source: str) -> RequestProfile:
        profile = self.builder.build(source)
        if profile.total == 0 and profile.skipped_lines > 0:
            raise ParseError(source, NO_LENGTHS, line=1)
        return profile


def read_access_log(
    path: str | PathLike[str], source: str = "access.log", chunk_bytes: int = CHUNK_BYTES
) -> RequestProfile:
    """Profile an access log file of any size in flat memory.

    Raises ParseError (no line readable) or OSError (cannot open).
    """
    reader = _AccessReader()
    with open(path, "rb") as fh:
        blocks = BlockReader(fh, chunk_bytes=chunk_bytes)
        for block in blocks:
            reader.feed_block(block)
        if blocks.dropped_lines:
            reader.builder.skip(blocks.dropped_lines)
    return reader.result(source)


def parse_access_lines(lines: Iterable[str] | Iterable[bytes] | str, source: str = "access.log") -> RequestProfile:
    """Profile access-log lines already in memory (a whole text as one str works too).

    >>> parse_access_lines("input_tokens=300 output_tokens=200\\nnoise").buckets[1].count
    1
    """
    if isinstance(lines, (str, bytes)):
        lines = [lines]
    reader = _AccessReader()
    batch: list[bytes] = []
    size = 0
    for line in lines:
        raw = line.encode("utf-8", "replace") if isinstance(line, str) else bytes(line)
        batch.append(raw)
        size += len(raw) + 1
        if size >= _TEXT_BLOCK_BYTES:
            reader.feed_block(b"\n".join(batch))
            batch, size = [], 0
    if batch:
        reader.feed_block(b"\n".join(batch))
    return reader.result(source)
