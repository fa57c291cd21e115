"""Timestamps as logs write them, read as timezone-aware UTC datetimes (None when unreadable).

Accepted: RFC 3339 / ISO 8601 with `T` or a space, any number of fraction digits (kubectl
prints nanoseconds), `Z` or an offset, and the compact forms `2026-03-09T2011Z` (HHMM) and
`20260309T201105Z`; times without a zone are UTC. Unix epochs in seconds, milliseconds,
microseconds or nanoseconds.

>>> parse_time("2026-03-09T2011Z")
datetime.datetime(2026, 3, 9, 20, 11, tzinfo=datetime.timezone.utc)
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

_ISO = re.compile(
    r"(\d{4})-?(\d{2})-?(\d{2})[T ](\d{2}):?(\d{2})(?::?(\d{2})(?:[.,](\d{1,12}))?)?"
    r"\s*(Z|z|UTC|[+-]\d{2}(?::?\d{2})?)?",
    re.ASCII,
)

# epochs between 2000 and 2100 in each unit; anything else is not a time
_EPOCH_MIN_S, _EPOCH_MAX_S = 946_684_800, 4_102_444_800


def parse_time(text: str) -> datetime | None:
    """The datetime a timestamp string stands for, or None."""
    m = _ISO.fullmatch(text.strip())
    return _from_match(m) if m else None


def search_time(text: str) -> datetime | None:
    """The first ISO-looking timestamp anywhere in `text`, or None."""
    m = _ISO.search(text)
    return _from_match(m) if m else None


def _from_match(m: re.Match[str]) -> datetime | None:
    year, month, day, hour, minute, second, frac, zone = m.groups()
    micros = int((frac or "0")[:6].ljust(6, "0"))
    try:
        at = datetime(int(year), int(month), int(day), int(hour), int(minute), int(second or 0), micros, tzinfo=UTC)
    except ValueError:
        return None
    if zone and zone[0] in "+-":
        digits = zone[1:].replace(":", "")
        hours, minutes = int(digits[:2]), int(digits[2:4] or 0)
        if hours > 23 or minutes > 59:
            return None
        offset = timedelta(hours=hours, minutes=minutes)
        try:
            at = at - offset if zone[0] == "+" else at + offset
        except OverflowError:
            return None
    return at


def epoch_time(value: float | int | str) -> datetime | None:
    """A Unix epoch (s, ms, µs or ns, told apart by size) as a datetime, or None.

    >>> epoch_time(1741550000).isoformat()
    '2025-03-09T19:53:20+00:00'
    """
    try:
        seconds = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    for _ in range(4):
        if _EPOCH_MIN_S <= seconds < _EPOCH_MAX_S:
            try:
                return datetime.fromtimestamp(seconds, tz=UTC)
            except (OverflowError, OSError, ValueError):
                return None
        seconds /= 1000.0
    return None


def month_day_time(month: int, day: int, hour: int, minute: int, second: int, year: int) -> datetime | None:
    """A vLLM-style `MM-DD HH:MM:SS` stamp in a known year, or None when it is no real date."""
    try:
        return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
    except ValueError:
        return None
