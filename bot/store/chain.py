"""The audit's hash chain: every row carries the hash of the row before it (`prev_hash`) and the
hash of its own content with that link (`row_hash`), so a row changed, removed or slipped in
behind gpumem's back shows at the first place the chain no longer holds.

A row's hash is SHA-256 over a canonical JSON of its stored fields (sorted keys, no spaces,
UTF-8; `detail` as the text stored) plus `prev_hash`; the first row's `prev_hash` is `GENESIS`.
Rows are appended with the id after the last one, inside the writer's IMMEDIATE transaction,
so two writers (threads or processes) queue and each links to the row the other wrote.

The chain starts at migration `0004_audit_hash_chain`: rows written before it are chained as
they stood then. The chain proves the rows agree with each other; someone who can write the
file and recomputes every later hash is caught only by comparing the head hash (`verify` gives
it; `gpumem serve` logs it at start) with one kept elsewhere. The last rows removed leave a
shorter chain that still holds; the row count and head hash show that against a copy.

>>> conn = sqlite3.connect(":memory:", isolation_level=None)
>>> _ = conn.execute("CREATE TABLE audit (id INTEGER PRIMARY KEY, at TEXT, actor TEXT, event TEXT, "
...                  "plan_id TEXT, content_hash TEXT, channel TEXT, cluster TEXT, namespace TEXT, name TEXT, "
...                  "from_state TEXT, to_state TEXT, detail TEXT, prev_hash TEXT, row_hash TEXT)")
>>> append(conn, at="2026-12-01T00:00:00+00:00", actor="U1", event="note", detail="{}")
1
>>> verify(conn).intact, verify(conn).rows
(True, 1)
>>> _ = conn.execute("UPDATE audit SET actor = 'U2'")
>>> verify(conn).first_bad.problem
'content_changed'
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from dataclasses import dataclass
from typing import Any

#: the `prev_hash` of the first row
GENESIS = "0" * 64
#: the stored fields a row's hash covers, in the table's order
FIELDS = ("id", "at", "actor", "event", "plan_id", "content_hash", "channel", "cluster", "namespace", "name",
          "from_state", "to_state", "detail")
_COLUMNS = ", ".join(FIELDS)
#: the triggers that make the audit append-only (recreated whenever a store opens)
TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS audit_no_update BEFORE UPDATE ON audit "
    "BEGIN SELECT RAISE(ABORT, 'the audit is append-only'); END",
    "CREATE TRIGGER IF NOT EXISTS audit_no_delete BEFORE DELETE ON audit "
    "BEGIN SELECT RAISE(ABORT, 'the audit is append-only'); END",
)


def row_hash(fields: dict[str, Any], prev_hash: str) -> str:
    """SHA-256 (hex) of the row's canonical JSON with its link to the row before.

    >>> row_hash({"id": 1, "actor": "U1"}, GENESIS) == row_hash({"actor": "U1", "id": 1}, GENESIS)
    True
    """
    doc = {name: fields.get(name) for name in FIELDS}
    doc["prev_hash"] = prev_hash
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def append(conn: sqlite3.Connection, **fields: Any) -> int:
    """Insert one audit row linked to the last one; its id. Call it inside the transaction
    that holds the write lock (`Store._tx`), so nothing is appended between the look and the
    insert."""
    last = conn.execute("SELECT id, row_hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()
    row_id = (last[0] + 1) if last else 1
    prev = (last[1] or GENESIS) if last else GENESIS
    values = {name: fields.get(name) for name in FIELDS}
    values["id"] = row_id
    digest = row_hash(values, prev)
    conn.execute(f"INSERT INTO audit ({_COLUMNS}, prev_hash, row_hash) VALUES "
                 f"({', '.join('?' * len(FIELDS))}, ?, ?)", [*(values[n] for n in FIELDS), prev, digest])
    return row_id


def build(conn: sqlite3.Connection) -> int:
    """Chain the rows that are there (the migration that starts the chain); how many. Only for a
    table whose append-only triggers are dropped for the duration."""
    prev = GENESIS
    rows = conn.execute(f"SELECT {_COLUMNS} FROM audit ORDER BY id").fetchall()
    for row in rows:
        digest = row_hash(dict(zip(FIELDS, row, strict=True)), prev)
        conn.execute("UPDATE audit SET prev_hash = ?, row_hash = ? WHERE id = ?", (prev, digest, row[0]))
        prev = digest
    return len(rows)


def ensure_triggers(conn: Any) -> None:
    """Create the append-only triggers where they are missing (someone with the file dropped them)."""
    for sql in TRIGGERS:
        conn.execute(sql)


@dataclass(frozen=True)
class BadRow:
    """The first place the chain does not hold.

    problem: content_changed (the row's fields are not what its hash covers), row_missing (ids
    jump: `missing` is the first absent id), link_broken (its `prev_hash` is not the row before's
    hash: that row was replaced, or this one slipped in), not_chained (a row without hashes:
    written behind gpumem's back)."""

    id: int
    problem: str
    missing: int | None = None


@dataclass(frozen=True)
class ChainReport:
    rows: int
    head: str
    first_bad: BadRow | None

    @property
    def intact(self) -> bool:
        return self.first_bad is None


def verify(conn: Any) -> ChainReport:
    """Walk the audit oldest first and name the first row where the chain breaks."""
    prev, prev_id, count = GENESIS, 0, 0
    for row in conn.execute(f"SELECT {_COLUMNS}, prev_hash, row_hash FROM audit ORDER BY id"):
        count += 1
        fields = dict(zip(FIELDS, row[:len(FIELDS)], strict=True))
        stored_prev, stored_hash = row[len(FIELDS)], row[len(FIELDS) + 1]
        row_id = int(fields["id"])
        if not stored_prev or not stored_hash:
            return ChainReport(count, prev, BadRow(row_id, "not_chained"))
        if row_id != prev_id + 1:
            return ChainReport(count, prev, BadRow(row_id, "row_missing", missing=prev_id + 1))
        if row_hash(fields, stored_prev) != stored_hash:
            return ChainReport(count, prev, BadRow(row_id, "content_changed"))
        if stored_prev != prev:
            return ChainReport(count, prev, BadRow(row_id, "link_broken"))
        prev, prev_id = stored_hash, row_id
    return ChainReport(count, prev, None)
