"""The alerts the Alertmanager webhook received, each with what gpumem did about it.

`AlertLog(store)` wraps a `Store` (same file, one IMMEDIATE transaction per batch: a storm of
500 alerts in one notification is one write). Rows are never changed: a resolved alert is a
row of its own.

>>> from datetime import UTC, datetime
>>> log = AlertLog(Store.memory())
>>> t = datetime(2026, 3, 9, 21, 0, tzinfo=UTC)
>>> log.add([{"fingerprint": "a1", "status": "firing", "outcome": "triaged", "namespace": "llm",
...           "name": "vllm", "channel": "C1", "thread_ts": "1.2", "alertname": "GpumemKVCacheHigh"}], now=t)
1
>>> [(a.outcome, a.target) for a in log.alerts(since=t)]
[('triaged', 'llm/vllm')]
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.store.db import Store, _iso, _parse

#: the columns a row may set (besides `at`, the time it was received)
COLUMNS = ("fingerprint", "group_key", "status", "alertname", "severity", "cluster", "namespace", "name", "pod",
           "channel", "thread_ts", "outcome", "detail", "summary", "starts_at", "ends_at", "labels")
#: a stored text field is cut to this many characters (labels and annotations come from outside)
MAX_FIELD_CHARS = 2000


@dataclass(frozen=True)
class AlertRecord:
    id: int
    at: datetime
    fingerprint: str
    group_key: str | None
    status: str
    alertname: str | None
    severity: str | None
    cluster: str | None
    namespace: str | None
    name: str | None
    pod: str | None
    channel: str | None
    thread_ts: str | None
    outcome: str
    detail: str | None
    summary: str | None
    starts_at: str | None
    ends_at: str | None
    labels: dict[str, str]

    @property
    def target(self) -> str | None:
        return f"{self.namespace}/{self.name}" if self.namespace and self.name else None


class AlertLog:
    def __init__(self, store: Store):
        self.store = store

    def add(self, rows: Iterable[dict[str, Any]], now: datetime | None = None) -> int:
        """Record alerts (dicts of `COLUMNS`; `labels` a dict) in one transaction; how many."""
        at = _iso(now or datetime.now(UTC))
        values = []
        for row in rows:
            unknown = set(row) - set(COLUMNS)
            if unknown:
                raise ValueError(f"unknown alert columns: {', '.join(sorted(unknown))}")
            cells = []
            for column in COLUMNS:
                value = row.get(column)
                if column == "labels":
                    value = json.dumps(value or {}, sort_keys=True, ensure_ascii=False)
                elif value is not None:
                    value = str(value)
                if isinstance(value, str) and len(value) > MAX_FIELD_CHARS:
                    value = value[:MAX_FIELD_CHARS] if column != "labels" else json.dumps({"truncated": True})
                cells.append(value)
            values.append((at, *cells))
        if not values:
            return 0
        with self.store._tx() as conn:
            conn.executemany(f"INSERT INTO alerts (at, {', '.join(COLUMNS)}) VALUES ({', '.join('?' * (len(COLUMNS) + 1))})",
                             values)
        return len(values)

    def alerts(self, *, since: datetime | None = None, until: datetime | None = None, channel: str | None = None,
               outcome: str | None = None, limit: int = 5000) -> list[AlertRecord]:
        """Alerts received, oldest first; `channel` keeps that channel's and the unrouted ones."""
        where: list[str] = []
        params: list[Any] = []
        for cond, value in (("at >= ?", since and _iso(since)), ("at <= ?", until and _iso(until)),
                            ("outcome = ?", outcome)):
            if value:
                where.append(cond)
                params.append(value)
        if channel:
            where.append("(channel = ? OR channel IS NULL)")
            params.append(channel)
        sql = f"SELECT id, at, {', '.join(COLUMNS)} FROM alerts"
        if where:
            sql += " WHERE " + " AND ".join(where)
        rows = self.store.db.execute(sql + " ORDER BY at, id LIMIT ?", [*params, limit]).fetchall()
        return [_record(r) for r in rows]

    def last_triaged(self, cluster: str | None, namespace: str, name: str, since: datetime) -> AlertRecord | None:
        """The newest alert that started a triage of this workload since `since` (its thread is
        where later alerts go)."""
        sql = (f"SELECT id, at, {', '.join(COLUMNS)} FROM alerts WHERE outcome = 'triaged' AND namespace = ? "
               "AND name = ? AND at >= ? AND thread_ts IS NOT NULL AND " +
               ("cluster IS NULL" if cluster is None else "cluster = ?"))
        params: list[Any] = [namespace, name, _iso(since)] + ([] if cluster is None else [cluster])
        row = self.store.db.execute(sql + " ORDER BY at DESC, id DESC LIMIT 1", params).fetchone()
        return _record(row) if row else None

    def counts(self) -> dict[str, int]:
        """outcome -> how many alerts ended so (for tests and the log line at start-up)."""
        rows = self.store.db.execute("SELECT outcome, COUNT(*) FROM alerts GROUP BY outcome").fetchall()
        return {r[0]: r[1] for r in rows}


def _record(r: Any) -> AlertRecord:
    values = dict(zip(("id", "at", *COLUMNS), r, strict=True))
    try:
        labels = json.loads(values["labels"] or "{}")
    except ValueError:
        labels = {}
    values["labels"] = labels if isinstance(labels, dict) else {}
    values["at"] = _parse(values["at"])
    return AlertRecord(**values)
