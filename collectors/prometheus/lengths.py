"""Request lengths from the engines' token histograms: the runbook's buckets without access logs.

The lengths query answers, at the end of the first and of the last quarter of the window,
`sum by (le) (increase(<prompt|generation>_bucket[quarter]))` tagged `hist="prompt"` or
`hist="generation"`. Each becomes a `Histogram`, each pair a `RequestProfile`
(`runbooks.profile.requests.profile_from_histograms`), and the two profiles a `ProfileShift`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime

from collectors.prometheus.client import SOURCE, QueryResult
from runbooks.model.lengths import Histogram, RequestProfile
from runbooks.profile.requests import compare, profile_from_histograms


def histograms_from(result: QueryResult) -> dict[float, dict[str, Histogram]]:
    """time -> {"prompt": Histogram, "generation": Histogram} from the tagged `le` series."""
    raw: dict[float, dict[str, dict[float, float]]] = defaultdict(lambda: defaultdict(dict))
    for series in result.series:
        tag = series.labels.get("hist")
        bound = _bound(series.labels.get("le"))
        if tag not in ("prompt", "generation") or bound is None:
            continue
        for at, value in series.points:
            cell = raw[at][tag]
            # "2000" and "2000.0" are one bound written two ways (engines or versions differ)
            cell[bound] = cell.get(bound, 0.0) + max(0.0, value)
    out: dict[float, dict[str, Histogram]] = {}
    for at, tags in raw.items():
        out[at] = {tag: h for tag, cum in tags.items() if (h := _histogram(cum)) is not None}
    return out


def _bound(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def _histogram(cumulative: dict[float, float]) -> Histogram | None:
    if math.inf not in cumulative:
        return None
    buckets, running = [], 0.0
    for bound in sorted(cumulative):
        # increase() extrapolates each bucket on its own, so cumulative counts can dip
        running = max(running, cumulative[bound])
        buckets.append((bound, running))
    return Histogram(buckets=tuple(buckets), count=running) if 0 < running < math.inf else None


def profile_from_lengths(result: QueryResult) -> RequestProfile | None:
    """The last quarter's estimated profile, with its L+XL shift against the first quarter."""
    by_time = histograms_from(result)
    if not by_time:
        return None
    times = sorted(by_time)
    profiles = [
        profile_from_histograms(by_time[t].get("prompt"), by_time[t].get("generation"), SOURCE) for t in times
    ]
    last = profiles[-1]
    if last is None:
        return None
    first = profiles[0] if len(profiles) > 1 else None
    if first is None:
        return last
    shift = compare(last, first)
    # the defaults name the two parts of one window, as an access log's shift does
    shift = replace(shift, before_label="first part", after_label="last part")
    quarter_s = (times[-1] - times[0]) / 3  # the points are the ends of the first and last quarter
    return replace(last, shift=shift, first_at=_dt(times[-1] - quarter_s), last_at=_dt(times[-1]))


def _dt(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)
