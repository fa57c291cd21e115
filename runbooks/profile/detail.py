"""What a RequestProfile leaves out: a typical request's length in each bucket, and the bucket
mix over time.

`DetailBuilder` accumulates beside a `ProfileBuilder`, in bounded memory:
- per bucket, a Counter of request lengths (input + output tokens), so the per-bucket p95 is
  exact (nearest rank, as the profile's percentiles are);
- a timeline of bucket counts: per time bin (60 s, doubled when there are too many bins) when
  at least half of the requests carry a time, else per block of arrivals.

>>> b = DetailBuilder()
>>> b.add(300, 100); b.add(7420, 312)
>>> d = b.build()
>>> d.p95_tokens("S"), d.p95_tokens("L"), d.p95_tokens("XL")
(400.0, 7732.0, None)
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from runbooks.model.lengths import BUCKETS
from runbooks.profile.requests import bucket_of, nearest_rank

_BIN_S = 60
_MAX_BINS = 20_000
_BLOCK = 1000
_MAX_BLOCKS = 4096
#: slices a timeline is regrouped into by default (a chart stays readable)
DEFAULT_SLICES = 48

Counts = tuple[int, int, int, int]


@dataclass(frozen=True)
class BucketSlice:
    """Requests of each bucket in one slice of the window (a time span, or a run of arrivals)."""

    index: int
    counts: Counts
    start: datetime | None = None
    end: datetime | None = None
    #: arrival numbers covered (0-based, end exclusive) when slices are by arrival
    first_request: int | None = None
    last_request: int | None = None

    @property
    def total(self) -> int:
        return sum(self.counts)

    def share(self, bucket: str) -> float:
        return self.counts[BUCKETS.index(bucket)] / self.total if self.total else 0.0


@dataclass(frozen=True)
class ProfileDetail:
    """Per-bucket p95 length (input + output tokens) and the bucket mix over time."""

    #: (bucket, p95 of input + output tokens, or None when the bucket is empty), S..XL
    bucket_p95: tuple[tuple[str, float | None], ...] = ()
    slices: tuple[BucketSlice, ...] = ()
    #: True when slices are time spans; False when they are blocks of arrivals
    by_time: bool = False
    #: exact percentiles of a request's input + output tokens (not the sum of the two p99s)
    p50_total_tokens: float | None = None
    p95_total_tokens: float | None = None
    p99_total_tokens: float | None = None

    def p95_tokens(self, bucket: str) -> float | None:
        for name, value in self.bucket_p95:
            if name == bucket:
                return value
        return None


class DetailBuilder:
    """Streaming accumulator of what `ProfileDetail` holds; feed it the requests a
    ProfileBuilder gets."""

    def __init__(self) -> None:
        self._lengths: list[Counter[int]] = [Counter() for _ in BUCKETS]
        self._total = 0
        self._timed = 0
        self._bins: dict[int, list[int]] = {}
        self._bin_s = _BIN_S
        self._blocks: list[list[int]] = []
        self._block = _BLOCK

    def add(self, input_tokens: int, output_tokens: int, at: datetime | None = None) -> None:
        """One request. Raises ValueError for negative token counts."""
        if input_tokens < 0 or output_tokens < 0:
            raise ValueError("token counts must not be negative")
        cls = BUCKETS.index(bucket_of(input_tokens, output_tokens))
        self._lengths[cls][input_tokens + output_tokens] += 1
        self._add_to_blocks(bytes([cls]))
        self._total += 1
        if at is not None:
            counts = [0, 0, 0, 0]
            counts[cls] = 1
            self._add_timed(at, counts)

    def add_tallied(
        self,
        lengths_by_bucket: Sequence[Mapping[int, int]],
        bucket_indexes: bytes,
        times: Iterable[tuple[datetime, Sequence[int]]] = (),
        arrival_counts: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Requests tallied elsewhere: length Counters per bucket (S..XL), one bucket index
        byte per request in arrival order, and (time, counts per bucket) per distinct time.

        `arrival_counts`, when given, are the bucket counts of each run of 1000 arrivals (the
        last run may be shorter), already counted; they stand for a scan of `bucket_indexes`
        and need a builder that has no arrivals yet.
        """
        if len(lengths_by_bucket) != len(BUCKETS):
            raise ValueError("one length tally per bucket")
        for cls, counts in enumerate(lengths_by_bucket):
            self._lengths[cls].update({k: v for k, v in counts.items() if v > 0})
        if arrival_counts is not None and self._total == 0 and self._block == _BLOCK:
            if sum(sum(c) for c in arrival_counts) != len(bucket_indexes):
                raise ValueError("arrival_counts and bucket_indexes disagree on the request count")
            self._blocks = [list(c) for c in arrival_counts]
            while len(self._blocks) > _MAX_BLOCKS:
                self._blocks = [[a + b for a, b in zip(x, y, strict=True)]
                                for x, y in zip(self._blocks[0::2], [*self._blocks[1::2], [0, 0, 0, 0]],
                                                strict=False)]
                self._block *= 2
        else:
            self._add_to_blocks(bucket_indexes)
        self._total += len(bucket_indexes)
        for at, counts in times:
            self._add_timed(at, counts)

    # ------------------------------------------------------------------ timeline

    def _add_timed(self, at: datetime, counts: Sequence[int]) -> None:
        at = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        self._timed += sum(counts)
        key = int(at.timestamp()) // self._bin_s
        cell = self._bins.get(key)
        if cell is None:
            if len(self._bins) >= _MAX_BINS:
                self._coarsen_bins()
                key = int(at.timestamp()) // self._bin_s
            cell = self._bins.setdefault(key, [0, 0, 0, 0])
        for i, n in enumerate(counts):
            cell[i] += n

    def _coarsen_bins(self) -> None:
        merged: dict[int, list[int]] = {}
        for key, counts in self._bins.items():
            cell = merged.setdefault(key // 2, [0, 0, 0, 0])
            for i, n in enumerate(counts):
                cell[i] += n
        self._bins = merged
        self._bin_s *= 2

    def _add_to_blocks(self, classes: bytes) -> None:
        pos, i, n = self._total, 0, len(classes)
        while i < n:
            index = pos // self._block
            take = min(n - i, (index + 1) * self._block - pos)
            while len(self._blocks) <= index:
                self._blocks.append([0, 0, 0, 0])
            part = classes[i : i + take]
            cell = self._blocks[index]
            for cls in range(4):
                cell[cls] += part.count(cls)
            pos += take
            i += take
            if len(self._blocks) > _MAX_BLOCKS:
                self._blocks = [[a + b for a, b in zip(x, y, strict=True)]
                                for x, y in zip(self._blocks[0::2], [*self._blocks[1::2], [0, 0, 0, 0]],
                                                strict=False)]
                self._block *= 2

    # ------------------------------------------------------------------ output

    def build(self, max_slices: int = DEFAULT_SLICES) -> ProfileDetail:
        """The detail of everything added so far, the timeline in at most `max_slices` slices."""
        p95 = tuple((name, nearest_rank(self._lengths[i], sum(self._lengths[i].values()), 95)) for i, name in enumerate(BUCKETS))
        every: Counter[int] = Counter()
        for counts in self._lengths:
            every.update(counts)
        totals = {f"p{p}_total_tokens": nearest_rank(every, sum(every.values()), p) for p in (50, 95, 99)}
        max_slices = max(1, max_slices)
        if self._timed and self._timed * 2 >= self._total:
            return ProfileDetail(p95, self._time_slices(max_slices), True, **totals)
        return ProfileDetail(p95, self._arrival_slices(max_slices), False, **totals)

    def _time_slices(self, max_slices: int) -> tuple[BucketSlice, ...]:
        keys = sorted(self._bins)
        first, last = keys[0], keys[-1]
        bins_per_slice = max(1, math.ceil((last - first + 1) / max_slices))
        grouped: dict[int, list[int]] = {}
        for key in keys:
            cell = grouped.setdefault((key - first) // bins_per_slice, [0, 0, 0, 0])
            for i, n in enumerate(self._bins[key]):
                cell[i] += n
        width_s = bins_per_slice * self._bin_s
        origin = datetime.fromtimestamp(first * self._bin_s, tz=UTC)
        return tuple(
            BucketSlice(index=i, counts=_counts(grouped.get(i, [0, 0, 0, 0])),
                        start=origin + timedelta(seconds=i * width_s),
                        end=origin + timedelta(seconds=(i + 1) * width_s))
            for i in range(max(grouped) + 1)
        )

    def _arrival_slices(self, max_slices: int) -> tuple[BucketSlice, ...]:
        if not self._blocks:
            return ()
        per_slice = max(1, math.ceil(len(self._blocks) / max_slices))
        out = []
        for i in range(0, len(self._blocks), per_slice):
            group = self._blocks[i : i + per_slice]
            counts = [sum(b[c] for b in group) for c in range(4)]
            first = i * self._block
            out.append(BucketSlice(index=len(out), counts=_counts(counts), first_request=first,
                                   last_request=min(self._total, first + len(group) * self._block)))
        return tuple(out)


def _counts(values: Sequence[int]) -> Counts:
    return (values[0], values[1], values[2], values[3])
