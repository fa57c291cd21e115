"""What a shift remembers beside plans: notes, triage summaries, handovers and scheduled slots.

`Journal(store)` wraps a `Store` (same SQLite file, same one-IMMEDIATE-transaction-per-change
rule). A note also writes its audit row in the same transaction, so `gpumem audit` shows who
wrote what and when. A scheduled slot is claimed with `Store.claim` first; `finish_slot`
records what became of it, and `slot_done` tells a later attempt that it was posted already.

>>> from datetime import UTC, datetime
>>> j = Journal(Store.memory())
>>> n = j.add_note("cli:ana", "raised replicas to 3 for the launch", namespace="llm", name="vllm",
...                now=datetime(2026, 12, 1, 2, 14, tzinfo=UTC))
>>> [x.text for x in j.notes(since=datetime(2026, 12, 1, tzinfo=UTC))]
['raised replicas to 3 for the launch']
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.store.chain import append as append_audit
from bot.store.db import Store, _filters, _iso, _parse


@dataclass(frozen=True)
class Note:
    id: int
    at: datetime
    author: str
    channel: str | None
    cluster: str | None
    namespace: str | None
    name: str | None
    text: str

    @property
    def target(self) -> str | None:
        return f"{self.namespace}/{self.name}" if self.namespace and self.name else None


@dataclass(frozen=True)
class TriageRecord:
    id: int
    at: datetime
    actor: str
    channel: str | None
    cluster: str | None
    namespace: str | None
    name: str | None
    verdict: str | None
    priority: str | None
    #: the report's summary (`bot.service.notes.summarize_report`)
    summary: dict[str, Any]


@dataclass(frozen=True)
class HandoverRecord:
    id: int
    at: datetime
    channel: str | None
    since: datetime
    until: datetime
    actor: str
    slot: str | None
    late: bool
    body: dict[str, Any]


@dataclass(frozen=True)
class SlotRecord:
    key: str
    channel: str
    slot: datetime
    state: str
    holder: str
    at: datetime
    late: bool
    handover_id: int | None
    error: str | None


class Journal:
    """Notes, triages, handovers and slots in the store's file."""

    def __init__(self, store: Store):
        self.store = store

    # ------------------------------------------------------------------ notes

    def add_note(self, author: str, text: str, *, channel: str | None = None, cluster: str | None = None,
                 namespace: str | None = None, name: str | None = None, now: datetime | None = None) -> Note:
        """Record a note (and its audit row) in one transaction; the stored note."""
        at = _iso(now or datetime.now(UTC))
        with self.store._tx() as conn:
            cur = conn.execute("INSERT INTO notes (at, author, channel, cluster, namespace, name, text) "
                               "VALUES (?, ?, ?, ?, ?, ?, ?)", (at, author, channel, cluster, namespace, name, text))
            note_id = int(cur.lastrowid or 0)
            append_audit(conn, at=at, actor=author, event="note", channel=channel, cluster=cluster,
                         namespace=namespace, name=name, detail=json.dumps({"note": note_id}, sort_keys=True))
        return self.notes(ids=(note_id,))[0]

    def notes(self, *, since: datetime | None = None, until: datetime | None = None, namespace: str | None = None,
              name: str | None = None, channel: str | None = None, ids: tuple[int, ...] = (),
              limit: int = 500) -> list[Note]:
        """Notes, oldest first; `channel` keeps that channel's and the channel-less ones."""
        where, params = _filters(since, until, namespace, name, ids)
        if channel:
            where.append("(channel = ? OR channel IS NULL)")
            params.append(channel)
        sql = "SELECT id, at, author, channel, cluster, namespace, name, text FROM notes"
        rows = self.store.db.execute(_where(sql, where) + " ORDER BY at, id LIMIT ?", [*params, limit]).fetchall()
        return [Note(r[0], _parse(r[1]), *r[2:]) for r in rows]

    # ------------------------------------------------------------------ triages

    def add_triage(self, actor: str, summary: dict[str, Any], *, channel: str | None = None,
                   cluster: str | None = None, namespace: str | None = None, name: str | None = None,
                   now: datetime | None = None) -> TriageRecord:
        at = _iso(now or datetime.now(UTC))
        with self.store._tx() as conn:
            cur = conn.execute(
                "INSERT INTO triages (at, actor, channel, cluster, namespace, name, verdict, priority, summary) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (at, actor, channel, cluster, namespace, name, summary.get("verdict"), summary.get("priority"),
                 json.dumps(summary, sort_keys=True, default=str)))
            triage_id = int(cur.lastrowid or 0)
        return self.triages(ids=(triage_id,))[0]

    def triages(self, *, since: datetime | None = None, until: datetime | None = None,
                namespace: str | None = None, name: str | None = None, ids: tuple[int, ...] = (),
                limit: int = 500) -> list[TriageRecord]:
        """Triages, oldest first."""
        where, params = _filters(since, until, namespace, name, ids)
        sql = "SELECT id, at, actor, channel, cluster, namespace, name, verdict, priority, summary FROM triages"
        rows = self.store.db.execute(_where(sql, where) + " ORDER BY at, id LIMIT ?", [*params, limit]).fetchall()
        return [TriageRecord(r[0], _parse(r[1]), *r[2:9], json.loads(r[9])) for r in rows]

    def last_triage(self, namespace: str, name: str, *, until: datetime | None = None) -> TriageRecord | None:
        """The newest triage of one service (before `until`), whatever the window."""
        sql = "SELECT id FROM triages WHERE namespace = ? AND name = ?"
        params: list[Any] = [namespace, name]
        if until is not None:
            sql += " AND at <= ?"
            params.append(_iso(until))
        row = self.store.db.execute(sql + " ORDER BY at DESC, id DESC LIMIT 1", params).fetchone()
        return self.triages(ids=(row[0],))[0] if row else None

    # ------------------------------------------------------------------ handovers

    def add_handover(self, actor: str, body: dict[str, Any], *, since: datetime, until: datetime,
                     channel: str | None = None, slot: datetime | None = None, late: bool = False,
                     now: datetime | None = None) -> HandoverRecord:
        """Record a handover given (the next one for `channel` starts at its `until`)."""
        at = _iso(now or datetime.now(UTC))
        with self.store._tx() as conn:
            cur = conn.execute(
                "INSERT INTO handovers (at, channel, since, until, actor, slot, late, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (at, channel, _iso(since), _iso(until), actor, _iso(slot) if slot else None, int(late),
                 json.dumps(body, sort_keys=True, default=str)))
            handover_id = int(cur.lastrowid or 0)
            append_audit(conn, at=at, actor=actor, event="handover", channel=channel,
                         detail=json.dumps({"handover": handover_id, "late": late}, sort_keys=True))
        return self._handover("id = ?", [handover_id])  # type: ignore[return-value]

    def last_handover(self, channel: str | None) -> HandoverRecord | None:
        """The channel's newest handover (channel None: the terminal's, given without one)."""
        if channel is None:
            return self._handover("channel IS NULL", [])
        return self._handover("channel = ?", [channel])

    def _handover(self, cond: str, params: list[Any]) -> HandoverRecord | None:
        row = self.store.db.execute(
            f"SELECT id, at, channel, since, until, actor, slot, late, body FROM handovers WHERE {cond} "
            "ORDER BY until DESC, id DESC LIMIT 1", params).fetchone()
        if row is None:
            return None
        return HandoverRecord(row[0], _parse(row[1]), row[2], _parse(row[3]), _parse(row[4]), row[5],
                              row[6], bool(row[7]), json.loads(row[8]))

    # ------------------------------------------------------------------ scheduled slots

    def slot_done(self, key: str) -> SlotRecord | None:
        """The slot's record when it was posted already (or given up on), else None."""
        row = self.store.db.execute(
            "SELECT key, channel, slot, state, holder, at, late, handover_id, error FROM schedule_slots WHERE key = ?",
            [key]).fetchone()
        if row is None:
            return None
        return SlotRecord(row[0], row[1], _parse(row[2]), row[3], row[4], _parse(row[5]), bool(row[6]), row[7],
                          row[8])

    def finish_slot(self, key: str, channel: str, slot: datetime, *, state: str, holder: str, late: bool,
                    handover_id: int | None = None, error: str | None = None,
                    now: datetime | None = None) -> SlotRecord:
        """Record what became of a claimed slot: "posted", "missed" (past its grace) or "failed"
        (a failed one may be tried again once its claim runs out)."""
        at = _iso(now or datetime.now(UTC))
        with self.store._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO schedule_slots (key, channel, slot, state, holder, at, late, "
                         "handover_id, error) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                         (key, channel, _iso(slot), state, holder, at, int(late), handover_id, error))
        done = self.slot_done(key)
        assert done is not None
        return done

    def slots(self, channel: str | None = None) -> list[SlotRecord]:
        sql = "SELECT key FROM schedule_slots" + (" WHERE channel = ?" if channel else "") + " ORDER BY slot"
        keys = [r[0] for r in self.store.db.execute(sql, [channel] if channel else []).fetchall()]
        return [s for s in (self.slot_done(k) for k in keys) if s is not None]


def _where(sql: str, where: list[str]) -> str:
    return sql + (" WHERE " + " AND ".join(where) if where else "")
