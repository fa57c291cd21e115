"""The fleet view's reads (`gpumem fleet`): a fixed set of PromQL queries, whatever the fleet's size.

The queries are `runbooks.alerts.fleet_queries`': from gpumem's recording rules when the
server has loaded every one the view needs (asked once, `/api/v1/rules?type=record`) and the
window is the rules' hour, else from the raw series, with the reason (`FleetReadings.recorded_reason`):

| reason | when |
| --- | --- |
| `loaded` | every rule needed is loaded: the recorded queries were sent |
| `not_loaded` | some are not (`missing_records` says how many): raw queries |
| `window` | another window than the rules' hour was asked for: raw queries |
| `unread` | the rules API did not answer (`rules_issue`): raw queries |

Fetch apart from parse: `read_fleet` sends the queries in parallel and never raises for
Prometheus trouble; a query that fails costs its columns (`FleetReadings.not_read`), not the
view. `parse_answers` turns answers into `runbooks.alerts.fleet.Service`s without I/O.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime

from collectors.errors import ParseError
from collectors.prometheus.client import SOURCE, PrometheusClient, PrometheusError, QueryResult
from runbooks.alerts.engines import ENGINES, SERIES
from runbooks.alerts.fleet import Service
from runbooks.alerts.fleet_queries import (
    COLUMN_LABEL,
    DEFAULT_WINDOW_S,
    LONG_SHARE,
    QUERY_COLUMNS,
    needed_records,
    queries,
    recorded_queries,
)
from runbooks.model.evidence import ReadIssue
from runbooks.profile.requests import SHIFT_MIN_PART

#: columns whose values add up across the engines of one deployment (the rest take the most)
_ADDED = ("queue", "preemptions", "oom_kills", "restarts")
#: the `count`s of the long-share query's series
_COUNTS = ("short", "total", LONG_SHARE)


@dataclass(frozen=True)
class NotRead:
    """A query that gave no answer: the columns it costs and why."""

    query: str
    columns: tuple[str, ...]
    issue: ReadIssue


@dataclass(frozen=True)
class FleetReadings:
    services: tuple[Service, ...] = ()
    not_read: tuple[NotRead, ...] = ()
    #: query id -> PromQL, as sent
    queries: Mapping[str, str] = field(default_factory=dict)
    #: whether the queries read gpumem's recording rules (else the raw series)
    recorded: bool = False
    #: why: loaded, not_loaded, window, unread (see the module's table)
    recorded_reason: str = "not_loaded"
    #: how many of the rules the view needs are not loaded (reason not_loaded)
    missing_records: int = 0
    #: what the rules API answered, when it did not (reason unread)
    rules_issue: ReadIssue | None = None

    @property
    def nothing_read(self) -> bool:
        return bool(self.queries) and len(self.not_read) == len(self.queries)


# ------------------------------------------------------------------ parsing


def parse_answers(answers: Mapping[str, QueryResult]) -> tuple[Service, ...]:
    """Answers (query id -> result) to one Service per (namespace, deployment), sorted by name.

    Series without a namespace or deployment label are ignored; so is a long share from fewer
    than SHIFT_MIN_PART requests (and a jump unless both parts have that many). The long-share
    query answers either counts (`count` short or total, raw: added up over engines) or, from
    the recording rules, each part's share itself (`count` LONG_SHARE, its workload's prompts of
    every engine already added up).
    """
    engines: dict[tuple[str, str], set[str]] = {}
    values: dict[tuple[str, str], dict[str, float]] = {}
    counts: dict[tuple[str, str], dict[tuple[str, str], float]] = {}
    known = SERIES.keys()

    for query_id, result in answers.items():
        columns = QUERY_COLUMNS.get(query_id, ())
        many, added = len(columns) > 1, columns[0] in _ADDED if columns else False
        long_share = query_id == "long_share"
        for s in result.series:
            labels, points = s.labels, s.points
            ns, dep = labels.get("namespace"), labels.get("deployment")
            if not ns or not dep or not points:
                continue
            key, value = (ns, dep), points[-1][1]
            got_engines = engines.get(key)
            if got_engines is None:
                got_engines = engines[key] = set()
            engine = labels.get("engine")
            if engine in known:
                got_engines.add(engine)
            if long_share:
                part, kind = labels.get("part"), labels.get("count")
                if part in ("now", "before") and kind in _COUNTS:
                    got = counts.setdefault(key, {})
                    got[(part, kind)] = got.get((part, kind), 0.0) + value
                continue
            if many:
                column = labels.get(COLUMN_LABEL)
                if column not in columns:
                    continue
            elif columns:
                column = columns[0]
            else:
                continue
            have = values.get(key)
            if have is None:
                values[key] = {column: value}
            elif column in have:
                have[column] = have[column] + value if added else max(have[column], value)
            else:
                have[column] = value
    for key, got in counts.items():
        values.setdefault(key, {}).update(long_share_values(got))
    return tuple(Service(ns, dep, tuple(e for e in ENGINES if e in engines[(ns, dep)]),
                         values.get((ns, dep), {}))
                 for ns, dep in sorted(engines))


def long_share_values(counts: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """{(part, short|total): requests} (or {(part, LONG_SHARE): share}, a part's share of long
    prompts as the recording rules give it) -> long_share (the last quarter hour) and long_jump.

    >>> long_share_values({("now", "short"): 63, ("now", "total"): 100, ("before", "short"): 92,
    ...                    ("before", "total"): 100})
    {'long_share': 0.37, 'long_jump': 0.29}
    >>> long_share_values({("now", "long_share"): 0.37, ("before", "long_share"): 0.08})
    {'long_share': 0.37, 'long_jump': 0.29}
    >>> long_share_values({("now", "short"): 5, ("now", "total"): 5})
    {}
    """
    def share(part: str) -> float | None:
        if (part, LONG_SHARE) in counts:  # the recording rules' share, from SHIFT_MIN_PART requests on
            return round(counts[(part, LONG_SHARE)], 4)
        total = counts.get((part, "total"), 0.0)
        if total < SHIFT_MIN_PART:
            return None
        return round(1.0 - min(counts.get((part, "short"), 0.0), total) / total, 4)

    now, before = share("now"), share("before")
    out: dict[str, float] = {}
    if now is not None:
        out["long_share"] = now
        if before is not None:
            out["long_jump"] = round(now - before, 4)
    return out


# ------------------------------------------------------------------ fetching


def read_fleet(client: PrometheusClient, *, now: datetime, engines: Sequence[str] = ENGINES,
               namespaces: Sequence[str] = (), window_s: int = DEFAULT_WINDOW_S) -> FleetReadings:
    """Send the view's queries in parallel (instant queries at `now`), from the recording rules
    when they serve (module table), else raw; never raises for Prometheus trouble: a query that
    fails is a NotRead naming its columns."""
    now = now if now.tzinfo is not None else now.replace(tzinfo=UTC)
    chosen = tuple(engines) or ENGINES
    recorded, reason, missing, issue = _recorded_mode(client, chosen, window_s)
    sent = recorded_queries(chosen, namespaces) if recorded else queries(chosen, namespaces, window_s)

    def one(item: tuple[str, str]) -> tuple[str, QueryResult | ReadIssue]:
        query_id, promql = item
        try:
            return query_id, client.query(promql, at=now)
        except PrometheusError as e:
            return query_id, e.issue(query_id)
        except ParseError as e:
            return query_id, ReadIssue(SOURCE, field(query_id, e.message), kind="unreadable")

    with _collector_paused(), ThreadPoolExecutor(len(sent), thread_name_prefix="gpumem-fleet") as pool:
        done = dict(pool.map(one, sent.items()))
        answers = {k: v for k, v in done.items() if isinstance(v, QueryResult)}
        services = parse_answers(answers)
    lost = tuple(NotRead(k, QUERY_COLUMNS[k], v) for k, v in done.items() if isinstance(v, ReadIssue))
    return FleetReadings(services, lost, sent, recorded, reason, missing, issue)


_paused_lock = threading.Lock()
#: [readers in a pause, whether the collector was on when the first began]
_pause = [0, False]


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while the answers are read. A large fleet's answers
    are some 100,000 series of small dicts and tuples, none in a cycle (reference counting frees
    them); the collector, run every 700 allocations, would walk them all again and again, about
    40% of reading them. Readers on other threads share one pause: it ends with the last, and
    the collector is back on only if it was on when the first began."""
    with _paused_lock:
        if _pause[0] == 0:
            _pause[1] = gc.isenabled()
            gc.disable()
        _pause[0] += 1
    try:
        yield
    finally:
        with _paused_lock:
            _pause[0] -= 1
            if _pause[0] == 0 and _pause[1]:
                gc.enable()


def _recorded_mode(client: PrometheusClient, engines: Sequence[str],
                   window_s: int) -> tuple[bool, str, int, ReadIssue | None]:
    """(read the recording rules?, reason, rules missing, the rules API's issue)."""
    if window_s != DEFAULT_WINDOW_S:
        return False, "window", 0, None
    try:
        loaded = client.recording_rules()
    except PrometheusError as e:
        return False, "unread", 0, e.issue("rules")
    missing = needed_records(engines) - loaded
    if missing:
        return False, "not_loaded", len(missing), None
    return True, "loaded", 0, None
