"""The request profile: the runbook's length buckets, exact percentiles, and the long-share shift.

A request falls in the smallest bucket whose input AND output limits both hold it:

| bucket | input tokens | output tokens |
|---|---|---|
| S | <=512 | <=128 |
| M | <=2048 | <=256 |
| L | <=8192 | <=512 |
| XL | anything longer | |

`ProfileBuilder` accumulates any number of requests in bounded memory: token counts are kept
as Counters of distinct values (bounded by the context length), so percentiles stay exact
(nearest rank); the shift keeps counts per time bin (or per block of arrivals), coarsened
when there are too many bins.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from itertools import compress
from operator import or_

from runbooks.model.lengths import BUCKETS, BucketShare, Histogram, ProfileShift, RequestProfile

#: (bucket, input limit, output limit), smallest first
BUCKET_LIMITS = (("S", 512, 128), ("M", 2048, 256), ("L", 8192, 512))
#: buckets whose share the shift compares
LONG_BUCKETS = ("L", "XL")

#: a time window shorter than this gives no shift (too little to compare)
SHIFT_MIN_SPAN_S = 600
#: without times: blocks of arrivals needed for a shift
SHIFT_MIN_BLOCKS = 4
#: each compared part needs at least this many requests
SHIFT_MIN_PART = 20

_PERCENTILES = (50, 95, 99)
_LONG_CLASS = 2  # index of "L" in BUCKETS
# add_many tags each request with a mask, (1 << class) - 1, so that `or` of the input's and the
# output's masks is the mask of the larger class: a C-level or_ instead of a max() call each
_MASKS = (0b000, 0b001, 0b011, 0b111)
_LONG_MASKS = (0b011, 0b111)
_IS_LONG = tuple(m in _LONG_MASKS for m in range(8))  # by mask
_LONG_CLASSES = (2, 3)  # bucket indexes of L and XL
_BIN_S = 60
_MAX_BINS = 20_000
_BLOCK = 1000
_MAX_BLOCKS = 4096


def _class_of(tokens: int, limits: tuple[int, int, int]) -> int:
    for i, limit in enumerate(limits):
        if tokens <= limit:
            return i
    return 3


_IN_LIMITS = tuple(lim[1] for lim in BUCKET_LIMITS)
_OUT_LIMITS = tuple(lim[2] for lim in BUCKET_LIMITS)


def bucket_of(input_tokens: int, output_tokens: int) -> str:
    """The runbook bucket of one request.

    >>> bucket_of(300, 200), bucket_of(100, 600), bucket_of(512, 128)
    ('M', 'XL', 'S')
    """
    return BUCKETS[max(_class_of(input_tokens, _IN_LIMITS), _class_of(output_tokens, _OUT_LIMITS))]


def _aware(at: datetime) -> datetime:
    # naive times are read as UTC so that every comparison in a profile is between aware times
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def nearest_rank(counts: Mapping[int, int], total: int, pct: int) -> float | None:
    """The nearest-rank percentile of a value Counter: the smallest value with rank >= ceil(pct% of n)."""
    if total <= 0:
        return None
    rank = max(1, (pct * total + 99) // 100)
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if seen >= rank:
            return float(value)
    return float(max(counts))


def _share(long: int, total: int) -> float:
    return long / total if total else 0.0


def _classify_new(
    values: Sequence[int | bytes], known: dict[int | bytes, int], limits: tuple[int, int, int]
) -> dict[int | bytes, int]:
    """The class of each value not yet in `known` (converted once per distinct value)."""
    fresh = {key: int(key) for key in set(values).difference(known)}
    if fresh and min(fresh.values()) < 0:
        raise ValueError("token counts must not be negative")
    return {key: _MASKS[_class_of(value, limits)] for key, value in fresh.items()}


def _as_ints(raw: Counter[int | bytes]) -> Counter[int]:
    counts: Counter[int] = Counter()
    for key, count in raw.items():
        counts[int(key)] += count
    return counts


class ProfileBuilder:
    """Streaming accumulator of request lengths; memory stays bounded whatever the request count.

    >>> b = ProfileBuilder()
    >>> b.add(7420, 312); b.add(300, 100)
    >>> p = b.build("access.log")
    >>> p.total, p.share("L", "XL")
    (2, 0.5)

    Times are optional; naive times are taken as UTC. Requests may arrive out of order.
    """

    def __init__(self) -> None:
        # counts by value as given (ints, or digit bytes from a regex), made ints once in build()
        self._inputs: Counter[int | bytes] = Counter()
        self._outputs: Counter[int | bytes] = Counter()
        # class mask of each distinct value seen by add_many; bounded like the counts
        self._in_mask: dict[int | bytes, int] = {}
        self._out_mask: dict[int | bytes, int] = {}
        self._classes = [0, 0, 0, 0]
        self._total = 0
        self._skipped = 0
        self._first_at: datetime | None = None
        self._last_at: datetime | None = None
        self._timed = 0
        # time bin key (epoch seconds // _bin_s) -> [requests, long requests]
        self._bins: dict[int, list[int]] = {}
        self._bin_s = _BIN_S
        # arrival order blocks of _block requests each: [requests, long requests]
        self._blocks: list[list[int]] = []
        self._block = _BLOCK

    # ------------------------------------------------------------------ input

    def skip(self, lines: int = 1) -> None:
        """Count lines that could not be read."""
        self._skipped += lines

    def add(self, input_tokens: int, output_tokens: int, at: datetime | None = None) -> None:
        """Add one request. Raises ValueError for negative token counts."""
        if input_tokens < 0 or output_tokens < 0:
            raise ValueError("token counts must not be negative")
        cls = max(_class_of(input_tokens, _IN_LIMITS), _class_of(output_tokens, _OUT_LIMITS))
        self._inputs[input_tokens] += 1
        self._outputs[output_tokens] += 1
        self._classes[cls] += 1
        long = 1 if cls >= _LONG_CLASS else 0
        self._add_to_blocks(self._total, [_MASKS[cls]])
        self._total += 1
        if at is not None:
            at = _aware(at)
            self._see_time(at)
            self._timed += 1
            self._add_to_bin(int(at.timestamp()), 1, long)

    def add_many(
        self,
        input_tokens: Sequence[int | bytes],
        output_tokens: Sequence[int | bytes],
        at: Sequence[datetime | None] | None = None,
    ) -> None:
        """Add requests given as parallel sequences (`at` may be None, or hold None items).

        The same result as calling `add` for each, in order, but the per-request work runs in
        C loops: values are counted first and converted once per distinct value, so token
        counts may also be given as ASCII digit bytes (b"7420"), as a regex finds them.
        Raises ValueError for negative or non-numeric counts, or sequences of unequal length.
        """
        n = len(input_tokens)
        if len(output_tokens) != n or (at is not None and len(at) != n):
            raise ValueError("input_tokens, output_tokens and at must have the same length")
        if n == 0:
            return
        new_in = _classify_new(input_tokens, self._in_mask, _IN_LIMITS)
        new_out = _classify_new(output_tokens, self._out_mask, _OUT_LIMITS)
        self._in_mask.update(new_in)
        self._out_mask.update(new_out)
        self._inputs.update(input_tokens)  # a sequence, not a mapping: counted in C
        self._outputs.update(output_tokens)
        masks = list(map(or_, map(self._in_mask.__getitem__, input_tokens), map(self._out_mask.__getitem__, output_tokens)))
        for cls, mask in enumerate(_MASKS):
            self._classes[cls] += masks.count(mask)
        self._add_to_blocks(self._total, masks)
        self._total += n
        if at is None:
            return
        # two C-level counts over the times (all, then the long ones) instead of a Python loop
        long_at = Counter(compress(at, map(_IS_LONG.__getitem__, masks)))
        for when, count in Counter(at).items():
            if when is None:
                continue
            aware = _aware(when)
            self._see_time(aware)
            self._timed += count
            self._add_to_bin(int(aware.timestamp()), count, long_at.get(when, 0))

    def add_tallied(
        self,
        input_counts: Mapping[int, int],
        output_counts: Mapping[int, int],
        bucket_indexes: bytes,
        times: Iterable[tuple[datetime, int, int]] = (),
        bucket_counts: Sequence[int] | None = None,
    ) -> None:
        """Add requests another reader has already tallied (e.g. a vectorised scan).

        The same result as `add` for each request in arrival order: `bucket_indexes` holds one
        byte per request in that order (0 S, 1 M, 2 L, 3 XL), `input_counts`/`output_counts`
        count the requests by token count, and `times` gives (time, requests, long requests)
        for each distinct time, in the order each time first arrived. `bucket_counts`, when
        the caller has counted `bucket_indexes` already, saves counting them again.
        Raises ValueError when the tallies disagree on the number of requests.

        >>> b = ProfileBuilder(); b.add_tallied({300: 1, 7420: 1}, {100: 1, 312: 1}, bytes([0, 2]))
        >>> b.build("scan").share("L")
        0.5
        """
        n = len(bucket_indexes)
        if sum(input_counts.values()) != n or sum(output_counts.values()) != n:
            raise ValueError("input_counts, output_counts and bucket_indexes disagree on the request count")
        if bucket_indexes.translate(None, b"\x00\x01\x02\x03"):
            raise ValueError("bucket indexes are 0..3")
        if min(input_counts, default=0) < 0 or min(output_counts, default=0) < 0:
            raise ValueError("token counts must not be negative")
        if min(input_counts.values(), default=0) < 0 or min(output_counts.values(), default=0) < 0:
            raise ValueError("request counts must not be negative")
        # zero counts would leave keys that `max()` in build() would take for seen values
        self._inputs.update({k: v for k, v in input_counts.items() if v})
        self._outputs.update({k: v for k, v in output_counts.items() if v})
        if bucket_counts is not None and (len(bucket_counts) != 4 or sum(bucket_counts) != n):
            raise ValueError("bucket_counts must count the four buckets of bucket_indexes")
        for cls in range(4):
            self._classes[cls] += bucket_indexes.count(cls) if bucket_counts is None else bucket_counts[cls]
        self._add_to_blocks(self._total, bucket_indexes, _LONG_CLASSES)
        self._total += n
        for when, count, long in times:
            aware = _aware(when)
            self._see_time(aware)
            self._timed += count
            self._add_to_bin(int(aware.timestamp()), count, long)

    def _see_time(self, at: datetime) -> None:
        if self._first_at is None or at < self._first_at:
            self._first_at = at
        if self._last_at is None or at > self._last_at:
            self._last_at = at

    def _add_to_bin(self, epoch_s: int, count: int, long: int) -> None:
        key = epoch_s // self._bin_s
        cell = self._bins.get(key)
        if cell is None:
            cell = self._bins[key] = [0, 0]
            if len(self._bins) > _MAX_BINS:
                self._coarsen_bins()
                key = epoch_s // self._bin_s
                cell = self._bins[key]
        cell[0] += count
        cell[1] += long

    def _coarsen_bins(self) -> None:
        # doubling the bin width keeps memory bounded on month-long logs; floor division nests
        merged: dict[int, list[int]] = {}
        for key, (count, long) in self._bins.items():
            cell = merged.setdefault(key // 2, [0, 0])
            cell[0] += count
            cell[1] += long
        self._bins = merged
        self._bin_s *= 2

    def _add_to_blocks(self, start: int, masks: Sequence[int], long_values: tuple[int, ...] = _LONG_MASKS) -> None:
        pos, i, n = start, 0, len(masks)
        while i < n:
            index = pos // self._block
            take = min(n - i, (index + 1) * self._block - pos)
            while len(self._blocks) <= index:
                self._blocks.append([0, 0])
            cell = self._blocks[index]
            cell[0] += take
            part = masks[i : i + take]
            cell[1] += sum(map(part.count, long_values))
            pos += take
            i += take
            if len(self._blocks) > _MAX_BLOCKS:
                self._blocks = [
                    [a[0] + b[0], a[1] + b[1]]
                    for a, b in zip(self._blocks[0::2], [*self._blocks[1::2], [0, 0]], strict=False)
                ]
                self._block *= 2

    # ----------------------------------------------------------------- output

    def build(self, source: str) -> RequestProfile:
        """The profile of everything added so far."""
        total = self._total
        buckets = tuple(
            BucketShare(name, count, _share(count, total)) for name, count in zip(BUCKETS, self._classes, strict=True)
        )
        inputs, outputs = _as_ints(self._inputs), _as_ints(self._outputs)
        p_in = [nearest_rank(inputs, total, p) for p in _PERCENTILES]
        p_out = [nearest_rank(outputs, total, p) for p in _PERCENTILES]
        return RequestProfile(
            source=source,
            total=total,
            buckets=buckets,
            p50_input_tokens=p_in[0],
            p95_input_tokens=p_in[1],
            p99_input_tokens=p_in[2],
            p50_output_tokens=p_out[0],
            p95_output_tokens=p_out[1],
            p99_output_tokens=p_out[2],
            max_input_tokens=max(inputs) if inputs else None,
            max_output_tokens=max(outputs) if outputs else None,
            first_at=self._first_at,
            last_at=self._last_at,
            shift=self._shift(),
            skipped_lines=self._skipped,
        )

    def _shift(self) -> ProfileShift | None:
        if self._timed and self._timed * 2 >= self._total:
            return self._time_shift()
        return self._block_shift()

    def _time_shift(self) -> ProfileShift | None:
        if self._first_at is None or self._last_at is None:
            return None
        first_s, last_s = self._first_at.timestamp(), self._last_at.timestamp()
        span_s = last_s - first_s
        if span_s < SHIFT_MIN_SPAN_S:
            return None
        early_end, late_start = first_s + span_s / 4, last_s - span_s / 4
        before, after = [0, 0], [0, 0]
        for key, (count, long) in self._bins.items():
            start = key * self._bin_s
            # a bin that starts before the first quarter ends counts as early; one that ends
            # after the last quarter starts counts as late (bins are far narrower than a quarter)
            part = before if start < early_end else after if start + self._bin_s > late_start else None
            if part is not None:
                part[0] += count
                part[1] += long
        return _shift_of(before, after)

    def _block_shift(self) -> ProfileShift | None:
        blocks = [list(b) for b in self._blocks]
        if len(blocks) > 1 and blocks[-1][0] * 2 < self._block:
            tail = blocks.pop()
            blocks[-1][0] += tail[0]
            blocks[-1][1] += tail[1]
        if len(blocks) < SHIFT_MIN_BLOCKS:
            return None
        quarter = len(blocks) // 4
        before = [sum(b[0] for b in blocks[:quarter]), sum(b[1] for b in blocks[:quarter])]
        after = [sum(b[0] for b in blocks[-quarter:]), sum(b[1] for b in blocks[-quarter:])]
        return _shift_of(before, after)


def _shift_of(before: list[int], after: list[int]) -> ProfileShift | None:
    if before[0] < SHIFT_MIN_PART or after[0] < SHIFT_MIN_PART:
        return None
    return ProfileShift(
        long_share_before=_share(before[1], before[0]),
        long_share_after=_share(after[1], after[0]),
        before_count=before[0],
        after_count=after[0],
    )


def profile_of(requests: Iterable[tuple[int, int]], source: str) -> RequestProfile:
    """A profile of (input_tokens, output_tokens) pairs, without times.

    >>> profile_of([(7420, 312), (8011, 448)], "sample").share("L")
    1.0
    """
    builder = ProfileBuilder()
    for input_tokens, output_tokens in requests:
        builder.add(input_tokens, output_tokens)
    return builder.build(source)


def compare(profile: RequestProfile, baseline: RequestProfile) -> ProfileShift:
    """The L+XL share of `profile` against that of `baseline`."""
    return ProfileShift(
        long_share_before=baseline.share(*LONG_BUCKETS),
        long_share_after=profile.share(*LONG_BUCKETS),
        before_count=baseline.total,
        after_count=profile.total,
        before_label="baseline",
        after_label="current",
    )


# ------------------------------------------------------------------ histograms


def _split(hist: Histogram, limits: tuple[int, int, int]) -> list[float]:
    above = [hist.share_above(float(limit)) or 0.0 for limit in limits]
    shares = [1.0 - above[0], above[0] - above[1], above[1] - above[2], above[2]]
    return [max(0.0, s) for s in shares]


def _counts_of(shares: list[float], total: int) -> list[int]:
    """Whole counts that sum to `total`, by largest remainder."""
    raw = [s * total for s in shares]
    counts = [math.floor(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (counts[i] - raw[i], i))
    for i in order[: max(0, total - sum(counts))]:
        counts[i] += 1
    return counts


def _quantiles(hist: Histogram | None) -> list[float | None]:
    if hist is None or hist.count <= 0:
        return [None, None, None]
    return [hist.quantile(p / 100) for p in _PERCENTILES]


def profile_from_histograms(
    prompt: Histogram | None, generation: Histogram | None, source: str
) -> RequestProfile | None:
    """Estimate the profile from token histograms (vLLM/SGLang/TGI /metrics); `estimated=True`.

    Histograms say nothing of how input and output lengths pair up, so requests are put in
    buckets by input length alone (S: <=512, M: <=2048, L: <=8192, XL: longer), interpolating
    linearly inside a histogram bucket. With no prompt histogram the output length is used
    instead (S: <=128, M: <=256, L: <=512, XL: longer). None when neither has observations.
    """
    if prompt is not None and prompt.count > 0 and prompt.buckets:
        base, limits = prompt, _IN_LIMITS
    elif generation is not None and generation.count > 0 and generation.buckets:
        base, limits = generation, _OUT_LIMITS
    else:
        return None
    shares = _split(base, limits)
    norm = sum(shares) or 1.0
    shares = [s / norm for s in shares]
    total = round(base.count)
    counts = _counts_of(shares, total)
    p_in, p_out = _quantiles(prompt), _quantiles(generation)
    return RequestProfile(
        source=source,
        total=total,
        buckets=tuple(BucketShare(n, c, s) for n, c, s in zip(BUCKETS, counts, shares, strict=True)),
        p50_input_tokens=p_in[0],
        p95_input_tokens=p_in[1],
        p99_input_tokens=p_in[2],
        p50_output_tokens=p_out[0],
        p95_output_tokens=p_out[1],
        p99_output_tokens=p_out[2],
        estimated=True,
    )
