"""Request lengths: cumulative histograms and the request-length profile.

Part of the evidence model (`Evidence` and `ServerMetrics` hold these), kept in a module of its
own so that `gpumem profile`, which reads only these, does not create the evidence model's
other dataclasses at start-up (about 30 ms). Import these names from here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

# ------------------------------------------------------------------ histograms


@dataclass(frozen=True)
class Histogram:
    """A cumulative histogram: (upper bound, cumulative count) pairs, +Inf last.

    >>> Histogram(buckets=((10.0, 4.0), (math.inf, 5.0)), count=5.0).quantile(0.5)
    6.25
    """

    buckets: tuple[tuple[float, float], ...]
    count: float
    sum: float | None = None

    def quantile(self, q: float) -> float | None:
        """Prometheus-style histogram_quantile: linear interpolation inside a bucket.

        Returns the largest finite bound when the rank falls in +Inf, None when empty.
        """
        if not self.buckets or self.count <= 0:
            return None
        rank = q * self.count
        prev_bound, prev_count = 0.0, 0.0
        for bound, cum in self.buckets:
            if cum >= rank:
                if math.isinf(bound):
                    return prev_bound
                if cum == prev_count:
                    return bound
                return prev_bound + (bound - prev_bound) * (rank - prev_count) / (cum - prev_count)
            prev_bound, prev_count = bound, cum
        return prev_bound

    def share_above(self, threshold: float) -> float | None:
        """Fraction of observations above `threshold`, interpolating inside a bucket."""
        if not self.buckets or self.count <= 0:
            return None
        prev_bound, prev_count = 0.0, 0.0
        for bound, cum in self.buckets:
            if bound >= threshold:
                if math.isinf(bound):
                    below = prev_count
                else:
                    width = bound - prev_bound
                    frac = (threshold - prev_bound) / width if width > 0 else 1.0
                    below = prev_count + (cum - prev_count) * frac
                return max(0.0, min(1.0, 1.0 - below / self.count))
            prev_bound, prev_count = bound, cum
        return 0.0


# ------------------------------------------------------------ request profile

BUCKETS = ("S", "M", "L", "XL")


@dataclass(frozen=True)
class BucketShare:
    bucket: str
    count: int
    share: float


@dataclass(frozen=True)
class ProfileShift:
    """The L+XL share early in the window against late in it (or against a baseline)."""

    long_share_before: float
    long_share_after: float
    before_count: int
    after_count: int
    before_label: str = "first part"
    after_label: str = "last part"

    @property
    def delta(self) -> float:
        return self.long_share_after - self.long_share_before


@dataclass(frozen=True)
class RequestProfile:
    """Request lengths bucketed as the runbook does; percentiles in tokens."""

    source: str
    total: int = 0
    buckets: tuple[BucketShare, ...] = ()
    p50_input_tokens: float | None = None
    p95_input_tokens: float | None = None
    p99_input_tokens: float | None = None
    p50_output_tokens: float | None = None
    p95_output_tokens: float | None = None
    p99_output_tokens: float | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None
    shift: ProfileShift | None = None
    skipped_lines: int = 0
    #: True when built from histograms (metrics) rather than per-request lines
    estimated: bool = False
    #: exact percentiles of one request's input + output tokens (None: inputs and outputs
    #: were not paired, as in histograms); the safe-flag solver prefers these to summed ones
    p50_total_tokens: float | None = None
    p95_total_tokens: float | None = None
    p99_total_tokens: float | None = None

    def share(self, *names: str) -> float:
        return sum(b.share for b in self.buckets if b.bucket in names)
