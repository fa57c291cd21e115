"""Notes and triage records: the migration that adds them, the CLI verbs, the JSON keys."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from sqlite_utils import Database

from bot.config.environ import Environment
from bot.main import main
from bot.service.deps import Deps
from bot.service.notes import add_note, list_notes, record_triage, summarize_report
from bot.store.db import Store
from bot.store.migrations import MIGRATIONS
from bot.store.notes import Journal
from runbooks.model.errors import UsageError
from runbooks.model.report import Report, Verdict

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)


def test_a_store_made_by_the_first_release_gains_the_new_tables_and_keeps_its_rows(tmp_path):
    import sqlite3

    path = tmp_path / "old.db"
    db = Database(sqlite3.connect(str(path), isolation_level=None))
    first = MIGRATIONS._migrations[0]  # what 0001 alone made
    db.execute("CREATE TABLE IF NOT EXISTS _sqlite_migrations (id INTEGER PRIMARY KEY, migration_set TEXT, "
               "name TEXT, applied_at TEXT)")
    first.fn(db)
    db.execute("INSERT INTO _sqlite_migrations (migration_set, name, applied_at) VALUES ('gpumem', ?, '2026')",
               [first.name])
    db.execute("INSERT INTO claims VALUES ('k', 'h', '2026-12-01T00:00:00+00:00', '2099-01-01T00:00:00+00:00')")
    db.conn.close()
    store = Store.open(path)
    assert {"notes", "triages", "handovers", "schedule_slots"} <= set(store.db.table_names())
    assert store.db.execute("SELECT holder FROM claims").fetchone()[0] == "h"
    assert [m.name for m in MIGRATIONS.applied(store.db)] == [m.name for m in MIGRATIONS._migrations]
    assert "0002_notes_triages_handovers_slots" in [m.name for m in MIGRATIONS.applied(store.db)]


def test_a_note_keeps_author_channel_target_and_time_and_writes_its_audit_row():
    store = Store.memory()
    note = add_note(store, "U042", "  max-num-seqs 64   as a stop-gap ", target="llm/vllm-server", channel="C1",
                    now=T0)
    assert (note.author, note.channel, note.namespace, note.name, note.text, note.at) == (
        "U042", "C1", "llm", "vllm-server", "max-num-seqs 64 as a stop-gap", T0)
    row = store.audit()[-1]
    assert (row.event, row.actor, row.namespace, row.detail) == ("note", "U042", "llm", {"note": note.id})
    add_note(store, "U7", "quiet night", now=T0 + timedelta(hours=1))
    add_note(store, "U7", "other channel", channel="C2", now=T0 + timedelta(hours=2))
    assert [n.text for n in list_notes(store, since=timedelta(hours=2), now=T0 + timedelta(hours=2, minutes=30))] == [
        "quiet night", "other channel"]
    assert [n.text for n in list_notes(store, target="llm/vllm-server")] == ["max-num-seqs 64 as a stop-gap"]
    assert [n.text for n in Journal(store).notes(channel="C1")] == ["max-num-seqs 64 as a stop-gap", "quiet night"]
    with pytest.raises(UsageError) as e:
        add_note(store, "U1", "   ")
    assert e.value.code == "empty_note"
    with pytest.raises(UsageError):
        add_note(store, "U1", "x" * 2001)


def test_the_cli_records_and_lists_notes_with_stable_json_keys(tmp_path, capsys):
    db = str(tmp_path / "s.db")
    assert main(["note", "llm/vllm-server", "raised", "replicas", "to", "3", "--store", db, "--json"]) == 0
    saved = json.loads(capsys.readouterr().out)
    assert set(saved) == {"id", "at", "author", "channel", "cluster", "target", "text"}
    assert saved["target"] == "llm/vllm-server" and saved["text"] == "raised replicas to 3"
    assert saved["author"].startswith("cli:")
    assert main(["note", "a/b/c", "is", "not", "a", "target", "--store", db]) == 0
    capsys.readouterr()
    assert main(["notes", "--since", "1h", "--store", db, "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(n["target"], n["text"]) for n in listed] == [("llm/vllm-server", "raised replicas to 3"),
                                                         (None, "a/b/c is not a target")]
    assert main(["notes", "--target", "llm/vllm-server", "--store", db, "--lang", "en"]) == 0
    assert "raised replicas to 3" in capsys.readouterr().out
    assert main(["note", " ", "--store", db, "--lang", "en"]) == 2
    assert capsys.readouterr().err.strip() == "gpumem note: the note is empty."


def test_a_triage_summary_says_what_it_knew_and_none_for_the_rest():
    report = Report(target="llm/vllm-server", model="Qwen2.5-7B-Instruct", engine="vllm", gpu="H100 80GB",
                    verdict=Verdict("kv_cache", priority="high"), generated_at=T0)
    summary = summarize_report(report)
    assert (summary["verdict"], summary["priority"], summary["model"], summary["gpu"]) == (
        "kv_cache", "high", "Qwen2.5-7B-Instruct", "H100 80GB")
    assert summary["precision"] is None and summary["profile"] is None and summary["oom"] is None
    rec = record_triage(Store.memory(), report, actor="cli:ana", channel="C1", now=T0)
    assert (rec.namespace, rec.name, rec.verdict, rec.priority, rec.channel) == ("llm", "vllm-server", "kv_cache",
                                                                                  "high", "C1")
    assert json.dumps(rec.summary)  # plain JSON


def test_the_cli_triage_records_only_where_a_store_is_in_use(tmp_path):
    import argparse

    from bot.service.notes import record_cli_triage

    env = Environment.from_mapping({"XDG_STATE_HOME": str(tmp_path / "state")})
    args = argparse.Namespace(config=None, context=None)
    report = Report(target="llm/vllm-server", verdict=Verdict("scheduling"))
    assert record_cli_triage(args, report, Deps(env)) is None and not (tmp_path / "state").exists()
    Store.open(tmp_path / "state" / "gpumem" / "gpumem.db").close()  # something created the store
    assert record_cli_triage(args, report, Deps(env)).verdict == "scheduling"
    assert record_cli_triage(argparse.Namespace(config=None, context="prod", store=str(tmp_path / "x.db")),
                             report, Deps(env)).cluster == "prod"
