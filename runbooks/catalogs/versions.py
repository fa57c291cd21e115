"""An engine (or torch) release as the catalogs hold it, and the one rule they share for a
range of releases read: `since` the first release read that has it, `until` the last (None:
the newest release read still has it)."""

from __future__ import annotations

Version = tuple[int, int, int]


def within(version: Version, since: Version, until: Version | None) -> bool:
    """Whether `version` lies in [since, until] (`until` None: no end yet).

    >>> within((2, 1, 0), (2, 1, 0), (2, 1, 2)), within((2, 2, 0), (2, 1, 0), (2, 1, 2))
    (True, False)
    """
    return since <= version and (until is None or version <= until)
