"""The store's schema, as sqlite-utils `Migrations` steps: applied in order, each once, each in a
transaction with the record that it was applied. A new version adds a step; a step is never
edited once released (tests apply them from an empty database and from every earlier one)."""

from __future__ import annotations

from sqlite_utils import Database, Migrations

from bot.store.chain import build, ensure_triggers

MIGRATIONS = Migrations("gpumem")


@MIGRATIONS(name="0001_plans_audit_claims")
def _plans_audit_claims(db: Database) -> None:
    db["plans"].create({
        "id": str, "created_at": str, "updated_at": str, "state": str, "content_hash": str,
        "cluster": str, "namespace": str, "kind": str, "name": str, "action_id": str,
        "requested_by": str, "channel": str, "thread_ts": str, "expires_at": str,
        "approvals_needed": int, "body": str,
    }, pk="id", not_null={"created_at", "updated_at", "state", "content_hash", "namespace", "kind", "name", "body"})
    db["plans"].create_index(["namespace", "name"])
    db["plans"].create_index(["state"])
    db["approvals"].create({"plan_id": str, "approver": str, "content_hash": str, "at": str},
                           pk=("plan_id", "approver"), foreign_keys=[("plan_id", "plans", "id")])
    db["audit"].create({
        "id": int, "at": str, "actor": str, "event": str, "plan_id": str, "content_hash": str,
        "channel": str, "cluster": str, "namespace": str, "name": str, "from_state": str, "to_state": str,
        "detail": str,
    }, pk="id", not_null={"at", "actor", "event"})
    db["audit"].create_index(["at"])
    # the audit is append-only: the database itself refuses to change or remove a row
    db.execute("CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit "
               "BEGIN SELECT RAISE(ABORT, 'the audit is append-only'); END")
    db.execute("CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit "
               "BEGIN SELECT RAISE(ABORT, 'the audit is append-only'); END")
    db["claims"].create({"key": str, "holder": str, "at": str, "expires_at": str}, pk="key")


@MIGRATIONS(name="0002_notes_triages_handovers_slots")
def _notes_triages_handovers_slots(db: Database) -> None:
    """What a shift handover reads and writes: the notes people leave, every triage's summary,
    the handovers posted (a channel's next one starts where its last ended) and each scheduled
    slot's outcome (posted, late)."""
    db["notes"].create({
        "id": int, "at": str, "author": str, "channel": str, "cluster": str, "namespace": str, "name": str,
        "text": str,
    }, pk="id", not_null={"at", "author", "text"})
    db["notes"].create_index(["at"])
    db["triages"].create({
        "id": int, "at": str, "actor": str, "channel": str, "cluster": str, "namespace": str, "name": str,
        "verdict": str, "priority": str, "summary": str,
    }, pk="id", not_null={"at", "actor", "summary"})
    db["triages"].create_index(["at"])
    db["triages"].create_index(["namespace", "name"])
    db["handovers"].create({
        "id": int, "at": str, "channel": str, "since": str, "until": str, "actor": str, "slot": str, "late": int,
        "body": str,
    }, pk="id", not_null={"at", "since", "until", "actor", "body"})
    db["handovers"].create_index(["channel", "until"])
    db["schedule_slots"].create({
        "key": str, "channel": str, "slot": str, "state": str, "holder": str, "at": str, "late": int,
        "handover_id": int, "error": str,
    }, pk="key", not_null={"channel", "slot", "state", "holder", "at"})


@MIGRATIONS(name="0003_alerts")
def _alerts(db: Database) -> None:
    """Every alert the Alertmanager webhook received, with what gpumem did about it (`outcome`:
    triaged, joined, duplicate, resolved, no_target, no_route, refused, busy, ...) and where
    (the channel and the thread of the triage it started or joined)."""
    db["alerts"].create({
        "id": int, "at": str, "fingerprint": str, "group_key": str, "status": str, "alertname": str,
        "severity": str, "cluster": str, "namespace": str, "name": str, "pod": str, "channel": str,
        "thread_ts": str, "outcome": str, "detail": str, "summary": str, "starts_at": str, "ends_at": str,
        "labels": str,
    }, pk="id", not_null={"at", "fingerprint", "status", "outcome"})
    db["alerts"].create_index(["at"])
    db["alerts"].create_index(["fingerprint"])
    db["alerts"].create_index(["namespace", "name"])


@MIGRATIONS(name="0004_audit_hash_chain")
def _audit_hash_chain(db: Database) -> None:
    """Each audit row carries the hash of the row before it and of its own content
    (`bot.store.chain`). The rows already there are chained as they stand now: the chain starts
    here. The append-only triggers are dropped only while those rows get their hashes."""

    db["audit"].add_column("prev_hash", str)
    db["audit"].add_column("row_hash", str)
    db.execute("DROP TRIGGER IF EXISTS audit_no_update")
    db.execute("DROP TRIGGER IF EXISTS audit_no_delete")
    build(db.conn)
    ensure_triggers(db.conn)
