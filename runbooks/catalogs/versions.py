"""An engine (or torch) release as the catalogs hold it, and the one rule they share for a
range of releases read: `since` the first release read that has it, `until` the last (None:
the newest release read still has it)."""

from __future__ import annotations

from functools import cache

Version = tuple[int, int, int]


def within(version: Version, since: Version, until: Version | None) -> bool:
    """Whether `version` lies in [since, until] (`until` None: no end yet).

    >>> within((2, 1, 0), (2, 1, 0), (2, 1, 2)), within((2, 2, 0), (2, 1, 0), (2, 1, 2))
    (True, False)
    """
    return since <= version and (until is None or version <= until)


def tgi_releases_of(seen: list[tuple[str, int, str]]) -> tuple[str, ...] | None:
    """The TGI releases whose router logs every one of `seen` (file, line, the message after
    "file:line: "), oldest first, from `runbooks.catalogs.tgi_router_lines`; None when nothing
    was seen, or when a line is one no release logs there (a fork, a build from main, a line
    cut short), since the rest would then narrow to a release the log is not.

    >>> tgi_releases_of([("router/src/main.rs", 354, "Setting max batch total tokens to 15232")])
    ('2.0.2', '2.0.3', '2.0.4')
    >>> tgi_releases_of([("router/src/main.rs", 354, "Setting max batch total tokens to 15232"),
    ...                  ("router/src/main.rs", 317, "Warming up model")])
    ('2.0.2', '2.0.3', '2.0.4')
    >>> tgi_releases_of([("router/src/server.rs", 1651, "Setting max batch total tokens to 19056")])
    ('2.2.0',)
    >>> tgi_releases_of([("router/src/main.rs", 9999, "Warming up model")]) is None
    True
    """
    from runbooks.catalogs.tgi_router_lines import TGI_RELEASES

    if not seen:
        return None
    order = {r: i for i, r in enumerate(TGI_RELEASES)}
    by_place = _tgi_router_places()
    left = set(TGI_RELEASES)
    for path, line, message in seen:
        have = {r for prefix, runs in by_place.get((path, line), ()) if message.startswith(prefix)
                for first, last in runs for r in TGI_RELEASES[order[first]:order[last] + 1]}
        if not have:
            return None
        left &= have
    return tuple(sorted(left, key=order.__getitem__)) or None


def release_span(releases: tuple[str, ...] | None) -> str | None:
    """The releases as one version's text where they are one release or consecutive releases
    of one minor series ("2.0.2-2.0.4"), the oldest first so that parsing it reads the oldest
    (a flag added within the series is then not assumed); None otherwise.

    >>> release_span(("2.0.2", "2.0.3", "2.0.4")), release_span(("2.2.0",)), release_span(("2.4.1", "3.0.0"))
    ('2.0.2-2.0.4', '2.2.0', None)
    """
    from runbooks.catalogs.tgi_router_lines import TGI_RELEASES

    if not releases:
        return None
    first, last = releases[0], releases[-1]
    order = list(TGI_RELEASES)
    consecutive = order[order.index(first):order.index(last) + 1] == list(releases)
    if not consecutive or first.split(".")[:2] != last.split(".")[:2]:
        return None
    return first if first == last else f"{first}-{last}"


@cache
def _tgi_router_places() -> dict[tuple[str, int], tuple[tuple[str, tuple[tuple[str, str], ...]], ...]]:
    """`TGI_ROUTER_LINES` by (file, line), built once."""
    from runbooks.catalogs.tgi_router_lines import TGI_ROUTER_LINES

    places: dict[tuple[str, int], list[tuple[str, tuple[tuple[str, str], ...]]]] = {}
    for path, line, prefix, runs in TGI_ROUTER_LINES:
        places.setdefault((path, line), []).append((prefix, runs))
    return {place: tuple(entries) for place, entries in places.items()}
