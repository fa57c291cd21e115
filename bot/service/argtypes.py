"""argparse value types shared by the verbs: numbers with bounds, and messages that say which."""

from __future__ import annotations

import argparse
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
        if not 0 <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between 0 and {high:g} seconds")
        return value

    return parse


port = whole_number(0, 65535, "a port number")
