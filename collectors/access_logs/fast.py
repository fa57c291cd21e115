"""Access logs of any size as a RequestProfile, fast: the same profile as `read_access_log`
(identical counts, exact percentiles, shift, skipped lines), read by the compiled line
scanner (or, where the install could not build it, with numpy; only then is numpy loaded) and, for large files, by several
processes at once.

A file over PARALLEL_MIN_BYTES is split at line boundaries into one byte range per worker
(the CPUs this process may use, at most MAX_WORKERS); each range is scanned in 2 MiB blocks
by `tally.scan_block`, and the tallies are merged in file order, so arrival order
(which the shift of an untimed log depends on) is kept. A line longer than MAX_LINE_BYTES is
never held whole: it is counted as skipped, as the reference reader counts it.

>>> import tempfile, os
>>> with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
...     _ = fh.write("time=2026-03-09T2011Z input_tokens=7420 output_tokens=312\\n")
>>> read_access_log_fast(fh.name).buckets[2].count
1
>>> os.unlink(fh.name)
"""

from __future__ import annotations

import os
import threading
from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from os import PathLike
from typing import TYPE_CHECKING, Any, BinaryIO

from collectors.access_logs.reference import NO_LENGTHS
from collectors.access_logs.tally import (
    FRONT_BYTES,
    PAD_BYTES,
    BlockTally,
    bucket_runs,
    hist_items,
    release,
    scan_block,
)
from collectors.errors import ParseError
from collectors.parsers.textio import MAX_LINE_BYTES
from runbooks.model.lengths import RequestProfile
from runbooks.model.units import MIB
from runbooks.profile.detail import DEFAULT_SLICES, DetailBuilder, ProfileDetail
from runbooks.profile.requests import ProfileBuilder

if TYPE_CHECKING:
    import multiprocessing.context

#: files smaller than this are scanned in this process (starting workers costs more)
PARALLEL_MIN_BYTES = 32 * MIB
#: bytes read and scanned at a time (the scan's arrays stay in the CPU's caches better than at 4 MiB)
CHUNK_BYTES = 2 * MIB
MAX_WORKERS = 8
#: arrivals per row of the detail's bucket mix in arrival order
ARRIVAL_RUN = 1000


@dataclass(frozen=True)
class AccessScan:
    """A scanned access log: the profile, its detail when asked for, and how it was read."""

    profile: RequestProfile
    detail: ProfileDetail | None = None
    workers: int = 1


def available_cpus() -> int:
    """CPUs this process may run on (taskset and cgroup CPU sets respected where the OS says)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def read_access_log_fast(path: str | PathLike[str], source: str = "access.log",
                         workers: int | None = None) -> RequestProfile:
    """The profile `read_access_log(path, source)` returns, computed faster.

    Raises ParseError (no line readable) or OSError (cannot open).
    """
    return scan_access_log(path, source, workers=workers).profile


def scan_access_log(path: str | PathLike[str], source: str = "access.log", *, workers: int | None = None,
                    detail: bool = False, max_slices: int = DEFAULT_SLICES) -> AccessScan:
    """Profile an access log (and, with `detail`, per-bucket p95 lengths and the bucket mix
    over time in at most `max_slices` slices). `workers`: processes to use (default: the
    available CPUs, at most MAX_WORKERS; files under PARALLEL_MIN_BYTES use one)."""
    size = os.path.getsize(path)
    wanted = workers if workers is not None else min(available_cpus(), MAX_WORKERS)
    wanted = max(1, wanted) if size >= PARALLEL_MIN_BYTES or workers is not None else 1
    ranges = _ranges(path, size, wanted)
    tallies = _scan_ranges(str(path), ranges, detail) if len(ranges) > 1 else None
    if tallies is None:
        ranges = [(0, size)]
        tallies = [_scan_range(str(path), 0, size, detail)]
    profile, built = _merge(tallies, source, detail, max_slices)
    if built is not None:
        profile = replace(profile, p50_total_tokens=built.p50_total_tokens, p95_total_tokens=built.p95_total_tokens,
                          p99_total_tokens=built.p99_total_tokens)
    return AccessScan(profile=profile, detail=built, workers=len(ranges))


def _scan_ranges(path: str, ranges: list[tuple[int, int]], detail: bool) -> list[BlockTally] | None:
    """Each range in its own process; None when processes cannot be started or die (then the
    caller scans here)."""
    # imported here: a file too small to split (every bundle's) never needs a process pool
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    try:
        with ProcessPoolExecutor(max_workers=len(ranges), mp_context=_pool_context()) as pool:
            futures = [pool.submit(_scan_range, path, start, end, detail) for start, end in ranges]
            return [f.result() for f in futures]
    except (BrokenProcessPool, OSError):
        return None


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork (workers start at once) unless other threads run here: forking a threaded process
    can copy a lock some thread holds, so then workers are spawned fresh."""
    import multiprocessing

    methods = multiprocessing.get_all_start_methods()
    if "fork" in methods and threading.active_count() == 1:
        return multiprocessing.get_context("fork")
    return multiprocessing.get_context("spawn")


def _ranges(path: str | PathLike[str], size: int, workers: int) -> list[tuple[int, int]]:
    """Byte ranges starting at line starts, about size / workers each."""
    if workers <= 1 or size == 0:
        return [(0, size)]
    cuts = [0]
    with open(path, "rb") as fh:
        for i in range(1, workers):
            at = max(size * i // workers, cuts[-1])
            cut = _next_line_start(fh, at, size)
            if cut >= size:
                break
            if cut > cuts[-1]:
                cuts.append(cut)
    cuts.append(size)
    return [(a, b) for a, b in pairwise(cuts) if b > a] or [(0, size)]


def _next_line_start(fh: BinaryIO, at: int, size: int, chunk_bytes: int = 1 << 16) -> int:
    """The offset just past the first newline at or after `at` (`size` when there is none),
    reading a chunk at a time: a file without newlines is never read into memory whole."""
    fh.seek(at)
    pos = at
    while pos < size:
        buf = fh.read(min(chunk_bytes, size - pos))
        if not buf:
            break
        found = buf.find(b"\n")
        if found >= 0:
            return pos + found + 1
        pos += len(buf)
    return size


def _scan_range(path: str, start: int, end: int, detail: bool) -> BlockTally:
    """Tally the lines in [start, end) of the file."""
    tally = BlockTally(detail)
    try:
        with open(path, "rb", buffering=0) as fh:
            _scan_direct(fh, start, end, tally)
    finally:
        release()
    return tally


def _scan_direct(fh: BinaryIO, start: int, end: int, tally: BlockTally) -> None:
    """Read straight into one buffer (no copies), carrying the partial last line forward; the
    rest of a line longer than MAX_LINE_BYTES is read past and the line counted as skipped."""
    base = FRONT_BYTES
    buf = bytearray(base + CHUNK_BYTES + MAX_LINE_BYTES + PAD_BYTES + 2)
    fh.seek(start)
    left, carry, dropping, json = end - start, 0, False, False
    with memoryview(buf) as view:
        while True:
            got = fh.readinto(view[base + carry : base + carry + min(CHUNK_BYTES, left)]) if left > 0 else 0
            left -= got
            filled = base + carry + got
            if dropping:
                nl = buf.find(b"\n", base, filled)
                if nl < 0:
                    carry = 0
                    if not got:
                        tally.skipped += 1
                        return
                    continue
                tally.skipped += 1
                dropping = False
                buf[base : base + filled - nl - 1] = buf[nl + 1 : filled]
                filled = base + filled - nl - 1
            cut = buf.rfind(b"\n", base, filled) + 1
            if not got and base <= filled - 1 and cut < filled:  # the last line has no newline: end it as $ does
                buf[filled] = 10
                filled += 1
                cut = filled
            if cut > base:
                json = scan_block(buf, base, cut, tally, json)
            else:
                cut = base
            carry = filled - cut
            if carry > MAX_LINE_BYTES:
                carry, dropping = 0, True
                if not got:
                    tally.skipped += 1
                    return
                continue
            if not got:
                return
            buf[base : base + carry] = buf[cut:filled]


def _merge(tallies: list[BlockTally], source: str, detail: bool,
           max_slices: int) -> tuple[RequestProfile, ProfileDetail | None]:
    inputs = _counts([t.inputs for t in tallies], [t.inputs_big for t in tallies])
    outputs = _counts([t.outputs for t in tallies], [t.outputs_big for t in tallies])
    classes = b"".join(t.classes for t in tallies)
    times = _times(tallies)
    builder = ProfileBuilder()
    runs = bucket_runs(classes, ARRIVAL_RUN if detail else max(1, len(classes)))
    bucket_counts = [sum(column) for column in zip(*runs, strict=True)] if runs else [0, 0, 0, 0]
    builder.add_tallied(inputs, outputs, classes, ((at, sum(c), c[2] + c[3]) for at, c in times),
                        bucket_counts)
    builder.skip(sum(t.skipped for t in tallies))
    profile = builder.build(source)
    if profile.total == 0 and profile.skipped_lines > 0:
        raise ParseError(source, NO_LENGTHS, line=1)
    if not detail:
        return profile, None
    lengths = [t.lengths for t in tallies if t.lengths is not None]
    per_bucket = [_counts(lengths, [t.lengths_big[cls] for t in tallies], cls, 4) for cls in range(4)]
    extra = DetailBuilder()
    extra.add_tallied(per_bucket, classes, times, runs)
    return profile, extra.build(max_slices)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _times(tallies: list[BlockTally]) -> list[tuple[datetime, list[int]]]:
    """(time, requests per bucket) per minute, in order of first arrival, for the builders:
    each minute stands as its start, except that the earliest and the latest time stand as
    themselves to the microsecond. The same profile as handing them every request: a
    builder's first and last time are the least and the greatest it is given, and it bins
    int(time.timestamp()) by 60 s or a power of two times that, so by whole minutes."""
    minutes: dict[int, list[int]] = {}
    for t in tallies:
        for minute, counts in t.times.items():
            cell = minutes.get(minute)
            if cell is None:
                minutes[minute] = list(counts)
            else:
                for i, n in enumerate(counts):
                    cell[i] += n
    if not minutes:
        return []
    first_at = _EPOCH + timedelta(microseconds=min(t.first_us for t in tallies if t.first_us is not None))
    last_at = _EPOCH + timedelta(microseconds=max(t.last_us for t in tallies if t.last_us is not None))
    first, last = int(first_at.timestamp()) // 60, int(last_at.timestamp()) // 60  # the builders' own keys
    out = []
    for minute, counts in minutes.items():
        at = first_at if minute == first else last_at if minute == last else _EPOCH + timedelta(minutes=minute)
        out.append((at, counts))
    if first == last and first_at != last_at:
        out.append((last_at, [0, 0, 0, 0]))
    return out


def _counts(histograms: list[Any], big: list[Counter[int]], offset: int = 0, stride: int = 1) -> dict[int, int]:
    out = hist_items(histograms, offset, stride)
    for counter in big:
        for value, n in counter.items():
            out[value] = out.get(value, 0) + n
    return out
