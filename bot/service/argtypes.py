"""argparse value types shared by the verbs: numbers with bounds, and messages that say which.

Every numeric flag uses one of these, so `inf`, `nan`, `1e308` or a negative value is a usage
error naming the flag (exit 2; in Slack an ephemeral reply), never a traceback or a
"nan GiB" budget in a channel.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable


def whole_number(low: int, high: int | None = None, what: str = "a whole number") -> Callable[[str], int]:
    """A type for `add_argument(type=...)`: an int within [low, high].

    >>> whole_number(1)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}")
        return value

    return parse


def seconds(high: float) -> Callable[[str], float]:
    """A type for a duration in seconds within [0, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(value) or not 0 <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between 0 and {high:g} seconds")
        return value

    return parse


def number(low: float, high: float, what: str = "a number", *, above_low: bool = False) -> Callable[[str], float]:
    """A type for a finite float within [low, high] (or (low, high] with `above_low`).

    >>> fraction("0.9")
    0.9
    >>> fraction("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be above 0 and at most 1
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        below = value <= low if above_low else value < low
        if not math.isfinite(value) or below or value > high:
            bound = f"above {low:g}" if above_low else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound} and at most {high:g}")
        return value

    return parse


port = whole_number(0, 65535, "a port number")
#: a share of memory: vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TGI --cuda-memory-fraction
fraction = number(0, 1, "a fraction", above_low=True)
#: GiB of one GPU (the largest cards hold under 300 GiB; 4 TiB leaves room without allowing nonsense)
gib = number(0, 4096, "a number of GiB", above_low=True)
#: tokens of context or per step (10M covers the longest contexts models support today)
tokens = whole_number(1, 100_000_000, "a whole number of tokens")


def since(text: str):
    """A point in the past: a duration back from now (`90m`, `12h`, `7d`) or an ISO 8601 time.
    Returns a timedelta or an aware datetime.

    >>> since("12h")
    datetime.timedelta(seconds=43200)
    >>> since("2026-12-01T02:14:00+08:00").isoformat()
    '2026-12-01T02:14:00+08:00'
    """
    import re
    from datetime import UTC, datetime, timedelta

    found = re.fullmatch(r"(\d{1,6})([smhd])", text.strip())
    if found:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[found.group(2)]
        return timedelta(seconds=int(found.group(1)) * unit)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (90m, 12h, 7d) or an ISO 8601 time: {text!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)
