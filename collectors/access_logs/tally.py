"""What a scan of access-log blocks found (`BlockTally`), and the block scan itself: the compiled
line scanner (`_access_native.c`) reads and tallies the lines in C, and hands each line it
cannot show to read as the reference reads to `parse_access_line`, in arrival order. Where the
install could not build it, the numpy scan in `scan` reads the blocks instead.

Nothing here imports numpy: a `gpumem profile` read by the compiled scanner never loads it.

>>> tally = BlockTally()
>>> buf = bytearray(FRONT_BYTES) + b"time=2026-03-09T2011Z input_tokens=7420 output_tokens=312\\n" + bytearray(PAD_BYTES)
>>> _ = scan_block(buf, FRONT_BYTES, len(buf) - PAD_BYTES, tally)
>>> bytes(tally.classes), tally.inputs[7420], list(tally.times.values())
(b'\\x02', 1, [[0, 0, 1, 0]])
"""

from __future__ import annotations

import threading
from array import array
from collections import Counter
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from collectors.access_logs.reference import parse_access_line
from collectors.parsers.textio import MAX_LINE_BYTES
from runbooks.model.lengths import BUCKETS
from runbooks.profile.requests import bucket_of

try:  # the compiled line scanner, where the install could build it
    from collectors.access_logs import _access_native as _compiled
except ImportError:  # pragma: no cover - an install without a C compiler
    _compiled = None

NATIVE: Any = _compiled
NOT_TAKEN = ("not taken",)

#: bytes a block's buffer holds after its end (the scans read words past a line's end)
PAD_BYTES = 256
#: bytes a block's buffer holds before its start
FRONT_BYTES = 32
#: token counts below this are tallied in arrays, larger ones in counters
SMALL_TOKENS = 1 << 17

#: per thread: scratch arrays the block scans reuse, and the numpy scan's line plans kept from
#: earlier blocks (`release` frees them)
LOCAL = threading.local()

_IGNORED_LINE = ("ignored",)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)
# states of the compiled scanner's lines (ST_* in _access_native.c)
_N_FALLBACK, _N_IGNORED, _N_SKIPPED, _N_TIMED = 0, 2, 3, 4
# what one call of the compiled tally may write before it hands back
_CLASSES_CAP, _RUNS_CAP, _BIG_CAP = 1 << 16, 1 << 12, 1 << 12


def _zeros(n: int) -> array[int]:
    return array("q", bytes(8 * n))


class BlockTally:
    """What a scan of some blocks found: token counts, the bucket of each request in arrival
    order, per-bucket lengths, requests per bucket for each minute (in order of first
    arrival), and the earliest and latest time to the microsecond."""

    def __init__(self, detail: bool = False) -> None:
        self.inputs = _zeros(SMALL_TOKENS)
        self.outputs = _zeros(SMALL_TOKENS)
        self.inputs_big: Counter[int] = Counter()
        self.outputs_big: Counter[int] = Counter()
        #: requests by (input + output tokens) x 4 + bucket index, for lengths below SMALL_TOKENS
        self.lengths = _zeros(4 * SMALL_TOKENS) if detail else None
        self.lengths_big: list[Counter[int]] = [Counter() for _ in range(4)]
        self.classes = bytearray()
        #: int(time.timestamp()) // 60 -> requests per bucket, in order of first arrival
        self.times: dict[int, list[int]] = {}
        #: have times (0 or 1), the earliest and the latest time in µs, lines skipped
        self.stats = array("q", [0, 0, 0, 0])

    @property
    def first_us(self) -> int | None:
        return self.stats[1] if self.stats[0] else None

    @property
    def last_us(self) -> int | None:
        return self.stats[2] if self.stats[0] else None

    @property
    def skipped(self) -> int:
        return self.stats[3]

    @skipped.setter
    def skipped(self, n: int) -> None:
        self.stats[3] = n

    def see_times(self, lo: int, hi: int) -> None:
        """Timed requests from `lo` to `hi` µs were tallied."""
        if self.stats[0]:
            self.stats[1], self.stats[2] = min(self.stats[1], lo), max(self.stats[2], hi)
        else:
            self.stats[0], self.stats[1], self.stats[2] = 1, lo, hi

    def add_time(self, minute: int, counts: Sequence[int]) -> None:
        cell = self.times.get(minute)
        if cell is None:
            self.times[minute] = list(counts)
        else:
            for i, n in enumerate(counts):
                cell[i] += n

    def add_request(self, n_in: int, n_out: int, cls: int) -> None:
        """One request, read by the reference reader (the scans tally theirs in bulk)."""
        self.classes.append(cls)
        _count(self.inputs, self.inputs_big, n_in)
        _count(self.outputs, self.outputs_big, n_out)
        if self.lengths is not None:
            total = n_in + n_out
            if total < SMALL_TOKENS:
                self.lengths[total * 4 + cls] += 1
            else:
                self.lengths_big[cls][total] += 1


def _count(small: array[int], big: Counter[int], value: int) -> None:
    if value < SMALL_TOKENS:
        small[value] += 1
    else:
        big[value] += 1


def scan_block(buf: bytearray, start: int, end: int, tally: BlockTally, json: bool = False) -> bool:
    """Tally the lines of `buf[start:end]` (whole lines, the last one ending with b"\\n");
    `buf` must hold FRONT_BYTES before `start` and PAD_BYTES after `end`. `json`: look for
    the tokens JSON lines need (the numpy scan does so anyway when it meets such a line).
    Returns whether the block held JSON lines (a hint for the next block)."""
    if NATIVE is None:
        from collectors.access_logs.scan import scan_block_numpy  # numpy, only where nothing was compiled

        return scan_block_numpy(buf, start, end, tally, json)
    _scan_native(NATIVE, buf, start, end, tally)
    return json


def _scratch() -> tuple[bytearray, array[int], array[int]]:
    found = getattr(LOCAL, "native", None)
    if found is None:
        found = LOCAL.native = (bytearray(_CLASSES_CAP), _zeros(5 * _RUNS_CAP), _zeros(3 * _BIG_CAP))
    return found


def _scan_native(native: Any, buf: bytearray, start: int, end: int, tally: BlockTally) -> None:
    """The block read and tallied by the compiled scanner, a call at a time (a call ends at a
    line it leaves to the reference reader, which is read here, or where its outputs are full)."""
    classes, runs, big = _scratch()
    bigs = (tally.inputs_big, tally.outputs_big)
    pos = start
    while pos < end:
        was = pos
        pos, n_cls, n_runs, n_big, fallback_end = native.tally_lines(
            buf, pos, end, MAX_LINE_BYTES, tally.inputs, tally.outputs, tally.lengths, classes, runs, big, tally.stats)
        if n_cls:
            tally.classes += memoryview(classes)[:n_cls]
        for r in range(0, 5 * n_runs, 5):
            tally.add_time(runs[r], runs[r + 1 : r + 5])
        for b in range(0, 3 * n_big, 3):
            kind, value, cls = big[b], big[b + 1], big[b + 2]
            if kind < 2:
                bigs[kind][value] += 1
            else:
                tally.lengths_big[cls][value] += 1
        if fallback_end >= 0:
            tally_reference_line(tally, bytes(memoryview(buf)[pos:fallback_end]))
            pos = fallback_end + 1
        elif pos == was:
            break  # no newline left (blocks end with one)


def reference_request(tally: BlockTally, raw: bytes) -> tuple[int, int, int, datetime | None] | None:
    """One line (without its newline) as the reference reader reads it: (input, output, bucket
    index, time), or None for a blank line or one it skips (counted in `tally`)."""
    found = _reference(raw)
    if found is _IGNORED_LINE:
        return None
    if found is None:
        tally.skipped += 1
        return None
    n_in, n_out, at = found
    return n_in, n_out, BUCKETS.index(bucket_of(n_in, n_out)), at


def tally_reference_line(tally: BlockTally, raw: bytes) -> None:
    """One line (without its newline) read by the reference reader and tallied."""
    found = reference_request(tally, raw)
    if found is None:
        return
    n_in, n_out, cls, at = found
    tally.add_request(n_in, n_out, cls)
    if at is not None:
        us = epoch_micros(at)
        tally.see_times(us, us)
        counts = [0, 0, 0, 0]
        counts[cls] = 1
        tally.add_time(int(at.timestamp()) // 60, counts)


def epoch_micros(at: datetime) -> int:
    """A reference reading's time as the scans keep it: µs since the epoch."""
    return (at - _EPOCH) // _MICRO


def _reference(raw: bytes) -> Any:
    """The reference reader's reading of one line: (input, output, time), None when it counts
    the line as skipped, or _IGNORED_LINE for a blank line."""
    if len(raw) > MAX_LINE_BYTES:
        return None
    text = raw.decode("utf-8", "replace")
    if not text.strip():
        return _IGNORED_LINE
    return parse_access_line(text)


def native_reading(raw: bytes) -> Any:
    """What the compiled scanner makes of one line (without its newline): NOT_TAKEN when it
    leaves the line to the reference reader, else what `_reference(raw)` returns. For tests.

    >>> native_reading(b"time=2026-03-09T2011Z input_tokens=7420 output_tokens=312")[:2] if NATIVE else (7420, 312)
    (7420, 312)
    """
    if b"\n" in raw:
        raise ValueError("one line, without its newline")
    if NATIVE is None:
        return NOT_TAKEN
    buf = bytearray(raw + b"\n")
    state, v_in, v_out, micros, ends = bytearray(1), _zeros(1), _zeros(1), _zeros(1), _zeros(1)
    NATIVE.scan_lines(buf, 0, len(buf), MAX_LINE_BYTES, state, v_in, v_out, micros, ends)
    s = state[0]
    if s == _N_FALLBACK:
        return NOT_TAKEN
    if s == _N_IGNORED:
        return _IGNORED_LINE
    if s == _N_SKIPPED:
        return None
    at = _EPOCH + timedelta(microseconds=micros[0]) if s == _N_TIMED else None
    return v_in[0], v_out[0], at


def hist_items(histograms: Sequence[Any], offset: int = 0, stride: int = 1) -> dict[int, int]:
    """{value: count} of the histograms summed (int64 arrays of one length), read at offset,
    offset + stride, ...: the value of index i is (i - offset) // stride."""
    if NATIVE is not None:
        return NATIVE.hist_items(list(histograms), offset, stride)
    import numpy as np  # only where nothing was compiled

    total = sum(np.frombuffer(h, np.int64) for h in histograms)[offset::stride]
    values = np.flatnonzero(total)
    return dict(zip(values.tolist(), total[values].tolist(), strict=True))


def bucket_runs(classes: bytes, block: int) -> list[list[int]]:
    """Requests per bucket index in each run of `block` arrivals of `classes` (the last run may
    be shorter)."""
    if NATIVE is not None:
        return NATIVE.bucket_runs(classes, block)
    return [[classes.count(c, at, at + block) for c in range(4)] for at in range(0, len(classes), block)]


def release() -> None:
    """Free this thread's scratch arrays and plans (a scan ends)."""
    LOCAL.__dict__.clear()
