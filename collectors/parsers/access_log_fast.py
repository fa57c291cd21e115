"""Access logs of any size as a RequestProfile, fast: the same profile as `read_access_log`
(identical counts, exact percentiles, shift, skipped lines), read with numpy and, for large
files, by several processes at once.

A file over PARALLEL_MIN_BYTES is split at line boundaries into one byte range per worker
(the CPUs this process may use, at most MAX_WORKERS); each range is scanned in 4 MiB blocks
by `access_log_scan.scan_block`, and the tallies are merged in file order, so arrival order
(which the shift of an untimed log depends on) is kept. A line longer than MAX_LINE_BYTES
makes the file be read again in the reference reader's own 4 MiB blocks in one process,
because the reference reader's handling of such a line depends on where its blocks fall.

>>> import tempfile, os
>>> with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as fh:
...     _ = fh.write("time=2026-03-09T2011Z input_tokens=7420 output_tokens=312\\n")
>>> read_access_log_fast(fh.name).buckets[2].count
1
>>> os.unlink(fh.name)
"""

from __future__ import annotations

import multiprocessing
import os
import threading
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, replace
from datetime import datetime
from itertools import pairwise
from os import PathLike
from typing import BinaryIO

import numpy as np

from collectors.errors import ParseError
from collectors.parsers.access_log import NO_LENGTHS
from collectors.parsers.access_log_scan import PAD_BYTES, BlockTally, LineTooLong, scan_block
from collectors.parsers.textio import CHUNK_BYTES, MAX_LINE_BYTES, BlockReader
from runbooks.model.evidence import RequestProfile
from runbooks.model.units import MIB
from runbooks.profile.detail import DEFAULT_SLICES, DetailBuilder, ProfileDetail
from runbooks.profile.requests import ProfileBuilder

#: files smaller than this are scanned in this process (starting workers costs more)
PARALLEL_MIN_BYTES = 32 * MIB
MAX_WORKERS = 8


@dataclass(frozen=True)
class AccessScan:
    """A scanned access log: the profile, its detail when asked for, and how it was read."""

    profile: RequestProfile
    detail: ProfileDetail | None = None
    workers: int = 1
    #: True when a very long line made it read in the reference reader's blocks, in one process
    reference_blocks: bool = False


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
    try:
        tallies = _scan_ranges(str(path), ranges, detail) if len(ranges) > 1 else None
        if tallies is None:
            ranges = [(0, size)]
            tallies = [_scan_range(str(path), 0, size, detail, False)]
        used, reference = len(ranges), False
    except LineTooLong:
        tallies = [_scan_range(str(path), 0, size, detail, True)]
        used, reference = 1, True
    profile, built = _merge(tallies, source, detail, max_slices)
    if built is not None:
        profile = replace(profile, p50_total_tokens=built.p50_total_tokens, p95_total_tokens=built.p95_total_tokens,
                          p99_total_tokens=built.p99_total_tokens)
    return AccessScan(profile=profile, detail=built, workers=used, reference_blocks=reference)


def _scan_ranges(path: str, ranges: list[tuple[int, int]], detail: bool) -> list[BlockTally] | None:
    """Each range in its own process; None when processes cannot be started or die (then the
    caller scans here)."""
    try:
        with ProcessPoolExecutor(max_workers=len(ranges), mp_context=_pool_context()) as pool:
            futures = [pool.submit(_scan_range, path, start, end, detail, False) for start, end in ranges]
            return [f.result() for f in futures]
    except (BrokenProcessPool, OSError):
        return None


def _pool_context() -> multiprocessing.context.BaseContext:
    """fork (workers start at once) unless other threads run here: forking a threaded process
    can copy a lock some thread holds, so then workers are spawned fresh."""
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


def _scan_range(path: str, start: int, end: int, detail: bool, allow_long: bool) -> BlockTally:
    """Tally the lines in [start, end) of the file; with `allow_long`, in the reference reader's
    own blocks (lines of any length), else raising LineTooLong at a line over MAX_LINE_BYTES."""
    tally = BlockTally(detail)
    cache: dict[bytes, datetime | None] = {}
    with open(path, "rb", buffering=0) as fh:
        if allow_long:
            _scan_reference_blocks(fh, tally, cache)
        else:
            _scan_direct(fh, start, end, tally, cache)
    return tally


def _scan_direct(fh: BinaryIO, start: int, end: int, tally: BlockTally, cache: dict[bytes, datetime | None]) -> None:
    """Read straight into one buffer (no copies), carrying the partial last line forward."""
    buf = bytearray(CHUNK_BYTES + MAX_LINE_BYTES + PAD_BYTES + 2)
    fh.seek(start)
    left, carry = end - start, 0
    with memoryview(buf) as view:
        while True:
            got = fh.readinto(view[carry : carry + min(CHUNK_BYTES, left)]) if left > 0 else 0
            left -= got
            filled = carry + got
            cut = buf.rfind(b"\n", 0, filled) + 1
            if not got and cut < filled:  # the file's last line has no newline: end it as $ does
                buf[filled] = 10
                filled += 1
                cut = filled
            if cut:
                scan_block(buf, cut, tally, cache)
            carry = filled - cut
            if carry > MAX_LINE_BYTES:
                raise LineTooLong()
            if not got:
                return
            buf[:carry] = buf[cut:filled]


def _scan_reference_blocks(fh: BinaryIO, tally: BlockTally, cache: dict[bytes, datetime | None]) -> None:
    buf = bytearray(CHUNK_BYTES + PAD_BYTES + 1)
    blocks = BlockReader(fh, chunk_bytes=CHUNK_BYTES)
    for block in blocks:
        size = len(block)
        if size + PAD_BYTES + 1 > len(buf):
            buf = bytearray(size + PAD_BYTES + 1)
        buf[:size] = block
        if not block.endswith(b"\n"):  # the file's last line: end it as the reference regex's $ does
            buf[size] = 10
            size += 1
        scan_block(buf, size, tally, cache, allow_long=True)
    tally.skipped += blocks.dropped_lines


def _merge(tallies: list[BlockTally], source: str, detail: bool,
           max_slices: int) -> tuple[RequestProfile, ProfileDetail | None]:
    inputs = _counts(sum(t.inputs for t in tallies), [t.inputs_big for t in tallies])
    outputs = _counts(sum(t.outputs for t in tallies), [t.outputs_big for t in tallies])
    classes = b"".join(bytes(t.classes) for t in tallies)
    times: dict[datetime, list[int]] = {}
    for t in tallies:
        for at, counts in t.times.items():
            cell = times.get(at)
            if cell is None:
                times[at] = counts
            else:
                for i, n in enumerate(counts):
                    cell[i] += n
    builder = ProfileBuilder()
    arr = np.frombuffer(classes, np.uint8)
    bucket_counts = [int(np.count_nonzero(arr == c)) for c in range(4)]  # bincount would copy to int64
    builder.add_tallied(inputs, outputs, classes, ((at, sum(c), c[2] + c[3]) for at, c in times.items()),
                        bucket_counts)
    builder.skip(sum(t.skipped for t in tallies))
    profile = builder.build(source)
    if profile.total == 0 and profile.skipped_lines > 0:
        raise ParseError(source, NO_LENGTHS, line=1)
    if not detail:
        return profile, None
    lengths = sum(t.lengths for t in tallies if t.lengths is not None)
    per_bucket = [_counts(lengths[cls::4], [t.lengths_big[cls] for t in tallies]) for cls in range(4)]
    extra = DetailBuilder()
    extra.add_tallied(per_bucket, classes, times.items(), _arrival_counts(classes))
    return profile, extra.build(max_slices)


def _arrival_counts(classes: bytes, block: int = 1000) -> list[list[int]]:
    """Bucket counts of each run of `block` arrivals (the last run may be shorter)."""
    if not classes:
        return []
    arr = np.frombuffer(classes, np.uint8)
    full = len(arr) // block * block
    rows = [np.stack([(arr[:full].reshape(-1, block) == c).sum(axis=1) for c in range(4)], axis=1).tolist()]
    if full < len(arr):
        rows.append([[int((arr[full:] == c).sum()) for c in range(4)]])
    return [r for part in rows for r in part]


def _counts(small: np.ndarray, big: list[Counter[int]]) -> dict[int, int]:
    values = np.flatnonzero(small)
    out = dict(zip(values.tolist(), small[values].tolist(), strict=True))
    for counter in big:
        for value, n in counter.items():
            out[value] = out.get(value, 0) + n
    return out
