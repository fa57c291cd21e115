"""Timestamps as logs write them, read as timezone-aware UTC datetimes (None when unreadable).

Accepted: RFC 3339 / ISO 8601 with `T` or a space, any number of fraction digits (kubectl
prints nanoseconds), `Z` or an offset, and the compact forms `2026-03-09T2011Z` (HHMM) and
`20260309T201105Z`; times without a zone are UTC. Unix epochs in seconds, milliseconds,
microseconds or nanoseconds. The Common Log Format time that nginx and Apache write,
`10/Oct/2026:13:55:36 +0000`, is read by `clf_time` (not by `parse_time`).

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

#: the nginx/Apache `$time_local` form inside its brackets: day/month name/year:hh:mm:ss zone
CLF_TIME = re.compile(r"(\d{2})/([A-Za-z]{3})/(\d{4}):(\d{2}):(\d{2}):(\d{2}) ([+-])(\d{2})(\d{2})", re.ASCII)
_MONTHS = {name: i for i, name in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct",
                                              "Nov", "Dec"), start=1)}

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


def clf_time(text: str) -> datetime | None:
    """A Common Log Format time (`10/Oct/2026:13:55:36 +0000`, English month names as nginx and
    Apache write them) as a UTC datetime, or None.

    >>> clf_time("10/Oct/2026:13:55:36 +0200").isoformat()
    '2026-10-10T11:55:36+00:00'
    """
    m = CLF_TIME.fullmatch(text.strip())
    if m is None:
        return None
    day, month_name, year, hour, minute, second, sign, zone_h, zone_m = m.groups()
    month = _MONTHS.get(month_name)
    if month is None or int(zone_h) > 23 or int(zone_m) > 59:
        return None
    try:
        at = datetime(int(year), month, int(day), int(hour), int(minute), int(second), tzinfo=UTC)
        offset = timedelta(hours=int(zone_h), minutes=int(zone_m))
        return at - offset if sign == "+" else at + offset
    except (ValueError, OverflowError):
        return None


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
