"""The store: one SQLite file (WAL), one transaction per state change, nothing half-written.

`Store.open(path)` creates the file and applies the migrations. A plan's state moves only with
`move(plan_id, to_state, ...)`, which names the state it leaves in its UPDATE: of two clicks at
once, two approvers or a retried delivery, exactly one moves the plan and the others get
`PlanMoved`. Every move writes its audit row in the same transaction.

>>> store = Store.memory()
>>> store.claim("rerun:C1:1700000000.1", "U1", ttl_s=30, now=_t(0))
True
>>> store.claim("rerun:C1:1700000000.1", "U2", ttl_s=30, now=_t(1))
False
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlite_utils import Database

from bot.store.chain import ChainReport, ensure_triggers, verify
from bot.store.chain import append as append_audit
from bot.store.migrations import MIGRATIONS
from runbooks.model.errors import AlreadyApproved, PlanExpired, PlanMoved, PlanNotFound, UsageError
from runbooks.model.phrases import Phrase
from runbooks.model.serde import from_jsonable, to_jsonable
from runbooks.remediation.plan import FINAL, Plan, can_move


def default_path(environ: Mapping[str, str]) -> Path:
    """`$XDG_STATE_HOME/gpumem/gpumem.db`, else `~/.local/state/gpumem/gpumem.db` (the container
    sets `store.path: /var/lib/gpumem/gpumem.db` in its config)."""
    base = environ.get("XDG_STATE_HOME") or os.path.join(environ.get("HOME") or os.path.expanduser("~"),
                                                         ".local", "state")
    return Path(base) / "gpumem" / "gpumem.db"


@dataclass(frozen=True)
class StoredPlan:
    plan: Plan
    state: str
    channel: str | None
    thread_ts: str | None
    approvals: tuple[str, ...]
    updated_at: datetime


@dataclass(frozen=True)
class AuditRow:
    id: int
    at: datetime
    actor: str
    event: str
    plan_id: str | None
    content_hash: str | None
    channel: str | None
    cluster: str | None
    namespace: str | None
    name: str | None
    from_state: str | None
    to_state: str | None
    detail: dict[str, Any]


class Store:
    def __init__(self, db: Database, path: Path | None = None):
        self.db = db
        self.path = path

    # ------------------------------------------------------------------ opening

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> Store:
        """Open (or create) the store at `path` and bring its schema up to date.

        Raises UsageError store_unusable naming the file when it is not a usable database."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(str(path), timeout=10.0, isolation_level=None, check_same_thread=False)
            db = Database(conn)
            db.execute("PRAGMA busy_timeout = 10000")
            db.enable_wal()
            db.execute("PRAGMA foreign_keys = ON")
            db.execute("PRAGMA synchronous = FULL")
            MIGRATIONS.apply(db)
            ensure_triggers(db.conn)  # dropped with file access: back before anything is written
        except (sqlite3.DatabaseError, OSError) as e:
            raise UsageError("store_unusable", path=str(path), reason=str(e)) from None
        return cls(db, path)

    @classmethod
    def memory(cls) -> Store:
        conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        db = Database(conn)
        db.execute("PRAGMA foreign_keys = ON")
        MIGRATIONS.apply(db)
        ensure_triggers(db.conn)
        return cls(db)

    def close(self) -> None:
        self.db.conn.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        """One IMMEDIATE transaction: the write lock is taken at the start, so two writers queue
        instead of both reading the old state."""
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    # ------------------------------------------------------------------ plans

    def add_plan(self, plan: Plan, *, channel: str | None = None, thread_ts: str | None = None,
                 now: datetime | None = None) -> StoredPlan:
        """Record a new plan as `proposed` (and its audit row). Earlier open plans for the same
        object are superseded in the same transaction."""
        now = now or datetime.now(UTC)
        at = _iso(now)
        with self._tx() as conn:
            older = conn.execute(
                "SELECT id, state, content_hash FROM plans WHERE namespace = ? AND name = ? AND kind = ? "
                "AND state IN ('proposed', 'approved')",
                (plan.target.namespace, plan.target.name, plan.target.kind)).fetchall()
            for old_id, old_state, old_hash in older:
                conn.execute("UPDATE plans SET state = 'superseded', updated_at = ? WHERE id = ? AND state = ?",
                             (at, old_id, old_state))
                self._audit(conn, at, plan.requested_by, "superseded", old_id, old_hash, channel, plan,
                            old_state, "superseded", {"by": plan.id})
            conn.execute(
                "INSERT INTO plans (id, created_at, updated_at, state, content_hash, cluster, namespace, kind, name, "
                "action_id, requested_by, channel, thread_ts, expires_at, approvals_needed, body) "
                "VALUES (?, ?, ?, 'proposed', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (plan.id, at, at, plan.content_hash, plan.target.cluster, plan.target.namespace, plan.target.kind,
                 plan.target.name, plan.action_id, plan.requested_by, channel, thread_ts, _iso(plan.expires_at),
                 plan.approvals_needed, json.dumps(to_jsonable(plan), sort_keys=True)))
            self._audit(conn, at, plan.requested_by, "proposed", plan.id, plan.content_hash, channel, plan,
                        None, "proposed", {"action": plan.action_id})
        return self.get(plan.id)

    def get(self, plan_id: str) -> StoredPlan:
        """The stored plan. Raises PlanNotFound."""
        row = self.db.execute("SELECT body, state, channel, thread_ts, updated_at FROM plans WHERE id = ?",
                              [plan_id]).fetchone()
        if row is None:
            raise PlanNotFound(plan=plan_id)
        approvals = tuple(r[0] for r in self.db.execute(
            "SELECT approver FROM approvals WHERE plan_id = ? ORDER BY at", [plan_id]).fetchall())
        plan = from_jsonable(Plan, json.loads(row[0]))
        return StoredPlan(plan, row[1], row[2], row[3], approvals, _parse(row[4]))

    def plans(self, *, namespace: str | None = None, open_only: bool = False, limit: int = 50) -> list[StoredPlan]:
        where, params = [], []
        if namespace:
            where.append("namespace = ?")
            params.append(namespace)
        if open_only:
            marks = ",".join("?" * len(FINAL))
            where.append(f"state NOT IN ({marks})")
            params += sorted(FINAL)
        sql = "SELECT id FROM plans" + (" WHERE " + " AND ".join(where) if where else "")
        rows = self.db.execute(sql + " ORDER BY created_at DESC LIMIT ?", [*params, limit]).fetchall()
        return [self.get(r[0]) for r in rows]

    def move(self, plan_id: str, to_state: str, *, actor: str, channel: str | None = None,
             expect: str | tuple[str, ...] | None = None, detail: Mapping[str, Any] | None = None,
             now: datetime | None = None) -> StoredPlan:
        """Move a plan to `to_state` in one transaction with its audit row.

        Raises PlanMoved when the plan is no longer in `expect` (or may not move to
        `to_state` from where it is): someone else moved it first."""
        now = now or datetime.now(UTC)
        at = _iso(now)
        expected = (expect,) if isinstance(expect, str) else expect
        with self._tx() as conn:
            row = conn.execute("SELECT state, content_hash, body FROM plans WHERE id = ?", (plan_id,)).fetchone()
            if row is None:
                raise PlanNotFound(plan=plan_id)
            state, content_hash, body = row
            if (expected is not None and state not in expected) or not can_move(state, to_state):
                raise PlanMoved(plan=plan_id, state=state, wanted=to_state)
            done = conn.execute("UPDATE plans SET state = ?, updated_at = ? WHERE id = ? AND state = ?",
                                (to_state, at, plan_id, state)).rowcount
            if done != 1:  # cannot happen inside an IMMEDIATE transaction; kept as the guard it is
                raise PlanMoved(plan=plan_id, state=state, wanted=to_state)
            plan = from_jsonable(Plan, json.loads(body))
            self._audit(conn, at, actor, to_state, plan_id, content_hash, channel, plan, state, to_state,
                        dict(detail or {}))
        return self.get(plan_id)

    def approve(self, plan_id: str, approver: str, content_hash: str, *, channel: str | None = None,
                now: datetime | None = None) -> StoredPlan:
        """Record `approver`'s approval of exactly `content_hash`; the plan becomes `approved` when
        it has as many as it needs. All in one transaction.

        Raises PlanMoved plan_changed (the hash is not the plan's), PlanMoved (not proposed any
        more: approved already, ...), PlanExpired or AlreadyApproved."""
        now = now or datetime.now(UTC)
        at = _iso(now)
        with self._tx() as conn:
            row = conn.execute("SELECT state, content_hash, approvals_needed, body FROM plans WHERE id = ?",
                               (plan_id,)).fetchone()
            if row is None:
                raise PlanNotFound(plan=plan_id)
            state, stored_hash, needed, body = row
            plan = from_jsonable(Plan, json.loads(body))
            if content_hash != stored_hash:
                raise PlanMoved("plan_changed", plan=plan_id)
            if state != "proposed":
                raise PlanMoved(plan=plan_id, state=state, wanted="approved")
            if plan.expired(now):
                conn.execute("UPDATE plans SET state = 'expired', updated_at = ? WHERE id = ? AND state = ?",
                             (at, plan_id, state))
                self._audit(conn, at, "gpumem", "expired", plan_id, stored_hash, channel, plan, state, "expired", {})
                return_expired = True
            else:
                return_expired = False
                try:
                    conn.execute("INSERT INTO approvals (plan_id, approver, content_hash, at) VALUES (?, ?, ?, ?)",
                                 (plan_id, approver, content_hash, at))
                except sqlite3.IntegrityError:
                    raise AlreadyApproved(plan=plan_id, approver=approver) from None
                count = conn.execute("SELECT COUNT(*) FROM approvals WHERE plan_id = ?", (plan_id,)).fetchone()[0]
                self._audit(conn, at, approver, "approval", plan_id, stored_hash, channel, plan, state, state,
                            {"approvals": count, "needed": needed})
                if count >= needed:
                    conn.execute("UPDATE plans SET state = 'approved', updated_at = ? WHERE id = ? AND state = ?",
                                 (at, plan_id, state))
                    self._audit(conn, at, approver, "approved", plan_id, stored_hash, channel, plan, state,
                                "approved", {})
        if return_expired:
            raise PlanExpired(plan=plan_id)
        return self.get(plan_id)

    def expire_due(self, now: datetime | None = None, *, actor: str = "gpumem",
                   approved_grace_s: float = 0.0) -> list[str]:
        """Move every proposed or approved plan past its expiry to `expired`, one transaction and
        audit row (by `actor`) each; the ids it moved.

        Each move expects the state the plan was found in: a plan another caller moved meanwhile
        (an approval between the look and the move, a rejection, a second sweep) gets PlanMoved
        inside `move` and is left as that caller left it. An approved plan whose approval is less
        than `approved_grace_s` old is left to the apply that starts right after an approval."""
        now = now or datetime.now(UTC)
        due = self.db.execute(
            "SELECT id, state, updated_at FROM plans WHERE state IN ('proposed', 'approved') AND expires_at <= ? "
            "ORDER BY expires_at, id", [_iso(now)]).fetchall()
        moved = []
        for plan_id, state, updated_at in due:
            if state == "approved" and (now - _parse(updated_at)).total_seconds() < approved_grace_s:
                continue
            try:
                self.move(plan_id, "expired", actor=actor, expect=state, now=now)
                moved.append(plan_id)
            except PlanMoved:
                continue
        return moved

    # ------------------------------------------------------------------ audit

    def _audit(self, conn: sqlite3.Connection, at: str, actor: str, event: str, plan_id: str | None,
               content_hash: str | None, channel: str | None, plan: Plan | None, from_state: str | None,
               to_state: str | None, detail: dict[str, Any]) -> None:
        target = plan.target if plan is not None else None
        append_audit(conn, at=at, actor=actor, event=event, plan_id=plan_id, content_hash=content_hash,
                     channel=channel, cluster=target.cluster if target else None,
                     namespace=target.namespace if target else None, name=target.name if target else None,
                     from_state=from_state, to_state=to_state, detail=json.dumps(detail, sort_keys=True, default=_jsonable))

    def record(self, event: str, *, actor: str, channel: str | None = None, detail: Mapping[str, Any] | None = None,
               now: datetime | None = None) -> None:
        """An audit row that is not a plan's move (a note, a refused click, a rollback note)."""
        with self._tx() as conn:
            self._audit(conn, _iso(now or datetime.now(UTC)), actor, event, (detail or {}).get("plan"), None,
                        channel, None, None, None, dict(detail or {}))

    def audit(self, *, since: datetime | None = None, namespace: str | None = None, name: str | None = None,
              limit: int = 1000) -> list[AuditRow]:
        where, params = _filters(since, None, namespace, name, ())
        sql = "SELECT id, at, actor, event, plan_id, content_hash, channel, cluster, namespace, name, from_state, " \
              "to_state, detail FROM audit" + (" WHERE " + " AND ".join(where) if where else "")
        rows = self.db.execute(sql + " ORDER BY id LIMIT ?", [*params, limit]).fetchall()
        return [AuditRow(r[0], _parse(r[1]), *r[2:12], json.loads(r[12] or "{}")) for r in rows]

    def verify_audit(self) -> ChainReport:
        """The audit's hash chain checked, oldest row first (`bot.store.chain.verify`)."""
        return verify(self.db.conn)

    def plan_audit(self, plan_id: str) -> list[AuditRow]:
        """Every audit row of one plan, oldest first: its moves and the rows recorded about it
        (the rollback note, refused clicks, where its Slack message is)."""
        rows = self.db.execute(
            "SELECT id, at, actor, event, plan_id, content_hash, channel, cluster, namespace, name, from_state, "
            "to_state, detail FROM audit WHERE plan_id = ? ORDER BY id", [plan_id]).fetchall()
        return [AuditRow(r[0], _parse(r[1]), *r[2:12], json.loads(r[12] or "{}")) for r in rows]

    # ------------------------------------------------------------------ claims

    def claim(self, key: str, holder: str, *, ttl_s: float, now: datetime | None = None) -> bool:
        """Take `key` for `ttl_s` seconds unless someone holds it: one winner for a "Run again"
        double click, a scheduled slot, a retried delivery, across threads and processes."""
        now = now or datetime.now(UTC)
        with self._tx() as conn:
            row = conn.execute("SELECT expires_at FROM claims WHERE key = ?", (key,)).fetchone()
            if row is not None and _parse(row[0]) > now:
                return False
            conn.execute("INSERT OR REPLACE INTO claims (key, holder, at, expires_at) VALUES (?, ?, ?, ?)",
                         (key, holder, _iso(now), _iso(now + timedelta(seconds=ttl_s))))
        return True

    def release(self, key: str, holder: str) -> None:
        """Give back a claim `holder` took before it runs out (the work it guarded is over)."""
        with self._tx() as conn:
            conn.execute("DELETE FROM claims WHERE key = ? AND holder = ?", (key, holder))


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat(timespec="microseconds")


def _parse(text: str) -> datetime:
    return datetime.fromisoformat(text)


def _t(seconds: float) -> datetime:
    """A fixed clock for the examples above."""
    return datetime(2026, 12, 1, tzinfo=UTC) + timedelta(seconds=seconds)


def _filters(since: datetime | None, until: datetime | None, namespace: str | None, name: str | None,
             ids: tuple[int, ...]) -> tuple[list[str], list[Any]]:
    """The WHERE terms (and their parameters) the readers of notes, triages and the audit share."""
    where, params = _window(since, until)
    if namespace:
        where.append("namespace = ?")
        params.append(namespace)
    if name:
        where.append("name = ?")
        params.append(name)
    if ids:
        where.append(f"id IN ({','.join('?' * len(ids))})")
        params += list(ids)
    return where, params


def _window(since: datetime | None, until: datetime | None) -> tuple[list[str], list[Any]]:
    where: list[str] = []
    params: list[Any] = []
    if since is not None:
        where.append("at >= ?")
        params.append(_iso(since))
    if until is not None:
        where.append("at <= ?")
        params.append(_iso(until))
    return where, params


def _jsonable(value: Any) -> Any:
    """An audit detail's value JSON does not know: a `Phrase` as its JSON (the renderers word it
    when the row is shown), anything else as its text."""
    return value.to_json() if isinstance(value, Phrase) else str(value)
