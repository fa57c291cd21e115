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

from collections.abc import Mapping, Sequence
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
    QUERY_COLUMNS,
    needed_records,
    queries,
    recorded_queries,
)
from runbooks.model.evidence import ReadIssue
from runbooks.profile.requests import SHIFT_MIN_PART

#: columns whose values add up across the engines of one deployment (the rest take the most)
_ADDED = ("queue", "preemptions", "oom_kills", "restarts")


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
    than SHIFT_MIN_PART requests (and a jump unless both parts have that many).
    """
    engines: dict[tuple[str, str], set[str]] = {}
    values: dict[tuple[str, str], dict[str, float]] = {}
    counts: dict[tuple[str, str], dict[tuple[str, str], float]] = {}

    for query_id, result in answers.items():
        for s in result.series:
            ns, dep = s.labels.get("namespace"), s.labels.get("deployment")
            if not ns or not dep or not s.points:
                continue
            key, value = (ns, dep), s.points[-1][1]
            engines.setdefault(key, set())
            if s.labels.get("engine") in SERIES:
                engines[key].add(s.labels["engine"])
            if query_id == "long_share":
                part, kind = s.labels.get("part"), s.labels.get("count")
                if part in ("now", "before") and kind in ("short", "total"):
                    got = counts.setdefault(key, {})
                    got[(part, kind)] = got.get((part, kind), 0.0) + value
                continue
            columns = QUERY_COLUMNS.get(query_id, ())
            if len(columns) > 1:
                columns = tuple(c for c in columns if c == s.labels.get(COLUMN_LABEL))
            for column in columns:
                have = values.setdefault(key, {})
                if column in have:
                    have[column] = have[column] + value if column in _ADDED else max(have[column], value)
                else:
                    have[column] = value
    for key, got in counts.items():
        values.setdefault(key, {}).update(long_share_values(got))
    return tuple(Service(ns, dep, tuple(e for e in ENGINES if e in engines.get((ns, dep), ())),
                         dict(values.get((ns, dep), {})))
                 for ns, dep in sorted(engines))


def long_share_values(counts: Mapping[tuple[str, str], float]) -> dict[str, float]:
    """{(part, short|total): requests} -> long_share (the last quarter hour) and long_jump.

    >>> long_share_values({("now", "short"): 63, ("now", "total"): 100, ("before", "short"): 92,
    ...                    ("before", "total"): 100})
    {'long_share': 0.37, 'long_jump': 0.29}
    >>> long_share_values({("now", "short"): 5, ("now", "total"): 5})
    {}
    """
    def share(part: str) -> float | None:
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
            return query_id, ReadIssue(SOURCE, f"{query_id}: {e.message}", kind="unreadable")

    with ThreadPoolExecutor(len(sent), thread_name_prefix="gpumem-fleet") as pool:
        done = dict(pool.map(one, sent.items()))
    answers = {k: v for k, v in done.items() if isinstance(v, QueryResult)}
    lost = tuple(NotRead(k, QUERY_COLUMNS[k], v) for k, v in done.items() if isinstance(v, ReadIssue))
    return FleetReadings(parse_answers(answers), lost, sent, recorded, reason, missing, issue)


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
