"""The audit's hash chain: a row changed, removed or slipped into the SQLite file directly (the
append-only triggers dropped with file access) is named by `gpumem audit --verify` (exit 1);
`gpumem serve` checks it at start and shows it in /metrics; the triggers come back when a store
opens; writers on two connections at once keep one valid chain."""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
import threading
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlite_utils import Database

from bot.main import main
from bot.serve import serve_http
from bot.slack.app import build_bot
from bot.store.chain import GENESIS, row_hash
from bot.store.db import Store
from bot.store.migrations import MIGRATIONS
from bot.store.notes import Journal
from runbooks.model.changes import Scale
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.fake_slack import FakeSlack
from tests.support.slack_kit import ExampleRunner, make_settings

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent


def _plan(plan_id: str) -> Plan:
    return Plan(plan_id, PlanTarget("prod", "llm", "Deployment", "vllm-server"), "scale_out", (Scale(2, 3),),
                "7", 2, ({"op": "replace", "path": "/spec/replicas", "value": 3},), "application/json-patch+json",
                "U1", T0, T0 + timedelta(minutes=15))


def _filled(path) -> None:
    """Six audit rows: proposed, approval, approved, a refused click, a note, a handover."""
    store = Store.open(path)
    store.add_plan(_plan("p1"), now=T0)
    store.approve("p1", "U2", _plan("p1").content_hash, channel="C1", now=T0)
    store.record("approval_refused", actor="U3", channel="C1", detail={"plan": "p1", "reason": "not_an_approver"})
    records = Journal(store)
    records.add_note("U1", "restarted pod 2", channel="C1", namespace="llm", name="vllm-server", now=T0)
    records.add_handover("gpumem", {"x": 1}, since=T0, until=T0 + timedelta(hours=8), channel="C1", now=T0)
    store.close()


def _raw(path) -> sqlite3.Connection:
    """The file as someone with access to it sees it: the triggers dropped."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("DROP TRIGGER audit_no_update")
    conn.execute("DROP TRIGGER audit_no_delete")
    return conn


def _verify(path, capsys, *extra: str) -> tuple[int, str]:
    code = main(["audit", "--verify", "--store", str(path), *extra])
    return code, capsys.readouterr().out


@pytest.fixture
def db(tmp_path):
    path = tmp_path / "gpumem.db"
    _filled(path)
    return path


def test_an_untouched_chain_holds_and_verify_exits_0(db, capsys):
    code, out = _verify(db, capsys)
    assert code == 0
    assert out.startswith("The audit's hash chain holds: 6 rows, head ")
    code, out = _verify(db, capsys, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["intact"] is True and doc["rows"] == 6 and doc["first_bad"] is None
    last = sqlite3.connect(str(db)).execute("SELECT row_hash FROM audit ORDER BY id DESC LIMIT 1").fetchone()[0]
    assert doc["head"] == last


def test_verify_refuses_a_store_file_that_is_not_there_and_creates_none(tmp_path, capsys):
    missing = tmp_path / "typo.db"
    assert main(["audit", "--verify", "--store", str(missing)]) == 2
    assert "the store " + str(missing) + " cannot be used (no such file)" in capsys.readouterr().err
    assert not missing.exists()


def test_each_row_links_to_the_one_before_and_hashes_its_own_fields(db):
    rows = sqlite3.connect(str(db)).execute(
        "SELECT id, at, actor, event, plan_id, content_hash, channel, cluster, namespace, name, from_state, "
        "to_state, detail, prev_hash, row_hash FROM audit ORDER BY id").fetchall()
    prev = GENESIS
    names = ("id", "at", "actor", "event", "plan_id", "content_hash", "channel", "cluster", "namespace", "name",
             "from_state", "to_state", "detail")
    for row in rows:
        assert row[13] == prev
        assert row[14] == row_hash(dict(zip(names, row[:13], strict=True)), prev)
        prev = row[14]
    assert [r[0] for r in rows] == [1, 2, 3, 4, 5, 6]


def test_a_forged_actor_with_the_trigger_dropped_is_named_by_its_row(db, capsys):
    conn = _raw(db)
    conn.execute("UPDATE audit SET actor = 'U0FORGED' WHERE id = 3")  # the approval, by someone else
    conn.close()
    code, out = _verify(db, capsys)
    assert code == 1
    assert out == ("The audit's hash chain is broken at row 3: its content is not what its hash covers "
                   "(the row was changed).\n")
    code, out = _verify(db, capsys, "--json")
    assert code == 1 and json.loads(out)["first_bad"] == {"id": 3, "problem": "content_changed", "missing": None}


def test_a_forged_row_with_its_hash_recomputed_breaks_the_next_link(db, capsys):
    conn = _raw(db)
    cols = ("id", "at", "actor", "event", "plan_id", "content_hash", "channel", "cluster", "namespace", "name",
            "from_state", "to_state", "detail")
    row = conn.execute(f"SELECT {', '.join(cols)}, prev_hash FROM audit WHERE id = 2").fetchone()
    fields = dict(zip(cols, row[:13], strict=True), actor="U0FORGED")
    conn.execute("UPDATE audit SET actor = 'U0FORGED', row_hash = ? WHERE id = 2", (row_hash(fields, row[13]),))
    conn.close()
    code, out = _verify(db, capsys, "--json")
    assert code == 1 and json.loads(out)["first_bad"] == {"id": 3, "problem": "link_broken", "missing": None}
    code, out = _verify(db, capsys)
    assert "broken at row 3: it does not link to row 2 (row 2 was replaced, or this row was inserted)" in out


def test_a_deleted_row_is_named_as_missing(db, capsys):
    conn = _raw(db)
    conn.execute("DELETE FROM audit WHERE id = 4")
    conn.close()
    code, out = _verify(db, capsys, "--json")
    assert code == 1 and json.loads(out)["first_bad"] == {"id": 5, "problem": "row_missing", "missing": 4}
    code, out = _verify(db, capsys)
    assert out == ("The audit's hash chain is broken at row 5: rows are missing before it "
                   "(the first missing id is 4).\n")


def test_a_row_inserted_behind_gpumems_back_is_named(db, capsys):
    conn = sqlite3.connect(str(db), isolation_level=None)  # an INSERT needs no trigger dropped
    conn.execute("INSERT INTO audit (at, actor, event, plan_id) VALUES (?, 'U2', 'approved', 'p1')", (T0.isoformat(),))
    conn.close()
    code, out = _verify(db, capsys, "--json")
    assert code == 1 and json.loads(out)["first_bad"] == {"id": 7, "problem": "not_chained", "missing": None}
    # a later append by gpumem links to the forged row, which is still named first
    Store.open(db).record("note", actor="U1")
    code, out = _verify(db, capsys, "--json")
    assert json.loads(out)["first_bad"]["id"] == 7


def test_a_row_inserted_with_a_made_up_link_is_named(db, capsys):
    conn = sqlite3.connect(str(db), isolation_level=None)
    conn.execute("INSERT INTO audit (id, at, actor, event, detail, prev_hash, row_hash) "
                 "VALUES (7, ?, 'U2', 'approved', '{}', ?, ?)", (T0.isoformat(), "a" * 64, "b" * 64))
    conn.close()
    code, out = _verify(db, capsys, "--json")
    assert code == 1 and json.loads(out)["first_bad"] == {"id": 7, "problem": "content_changed", "missing": None}


def test_the_triggers_come_back_when_the_store_opens(db):
    _raw(db).close()
    names = {r[0] for r in sqlite3.connect(str(db)).execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")}
    assert names == set()
    store = Store.open(db)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store.db.execute("UPDATE audit SET actor = 'U0FORGED' WHERE id = 1")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store.db.execute("DELETE FROM audit WHERE id = 1")
    assert store.verify_audit().intact and [r.actor for r in store.audit()][:1] == ["U1"]


def test_rows_written_before_the_chain_are_chained_by_the_migration(tmp_path, capsys):
    path = tmp_path / "old.db"
    conn = sqlite3.connect(str(path), isolation_level=None)
    old = Database(conn)
    MIGRATIONS.apply(old, stop_before="0004_audit_hash_chain")
    for i in range(3):
        conn.execute("INSERT INTO audit (at, actor, event, detail) VALUES (?, ?, 'note', '{}')",
                     (T0.isoformat(), f"U{i}"))
    conn.close()
    store = Store.open(path)
    assert [m.name for m in MIGRATIONS.applied(store.db)][-1] == "0004_audit_hash_chain"
    store.record("note", actor="U9")
    report = store.verify_audit()
    assert report.intact and report.rows == 4
    assert [r.actor for r in store.audit()] == ["U0", "U1", "U2", "U9"]
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store.db.execute("UPDATE audit SET actor = 'x'")
    store.close()


def test_two_writers_on_two_connections_keep_one_chain(tmp_path):
    path = tmp_path / "gpumem.db"
    Store.open(path).close()
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        store = Store.open(path)
        try:
            for i in range(60):
                store.record("note", actor=name, detail={"i": i})
        except BaseException as e:  # the assertion below names it
            errors.append(e)
        finally:
            store.close()

    threads = [threading.Thread(target=writer, args=(f"U{n}",)) for n in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    store = Store.open(path)
    report = store.verify_audit()
    assert report.intact and report.rows == 120
    rows = store.audit(limit=1000)
    assert sorted(r.actor for r in rows) == ["U0"] * 60 + ["U1"] * 60
    assert [r.id for r in rows] == list(range(1, 121))


def test_two_processes_appending_at_once_keep_one_chain(tmp_path):
    path = tmp_path / "gpumem.db"
    Store.open(path).close()
    code = ("import sys; from bot.store.db import Store; s = Store.open(sys.argv[1]); "
            "[s.record('note', actor=sys.argv[2], detail={'i': i}) for i in range(80)]; s.close()")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"P{n}"], env=env) for n in range(2)]
    assert [p.wait(120) for p in procs] == [0, 0]
    store = Store.open(path)
    report = store.verify_audit()
    assert report.intact and report.rows == 160
    assert sorted(r.actor for r in store.audit(limit=1000)) == ["P0"] * 80 + ["P1"] * 80


def test_serve_checks_the_chain_at_start_and_shows_it_in_metrics(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="gpumem")
    path = tmp_path / "gpumem.db"
    _filled(path)
    conn = _raw(path)
    conn.execute("UPDATE audit SET actor = 'U0FORGED' WHERE id = 2")
    conn.close()
    with FakeSlack() as fake:
        settings = make_settings(tmp_path, fake, extra=f"store: {{path: {path}}}\n")
        bot = build_bot(settings, ExampleRunner(charts=False))
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10) as r:
                text = r.read().decode()
        finally:
            server.close()
            bot.close(timeout_s=10)
    assert "gpumem_audit_chain_broken 1.0" in text.splitlines()
    lines = [r.getMessage() for r in caplog.records if "hash chain" in r.getMessage()]
    assert lines == ["the audit's hash chain is broken at row 2 (content_changed); run gpumem audit --verify"]
    assert "U0FORGED" not in caplog.text
    # the start recreated the triggers: the forged row can no longer be changed back quietly
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        sqlite3.connect(str(path)).execute("UPDATE audit SET actor = 'U2' WHERE id = 2")


def test_serve_with_an_intact_chain_shows_0(tmp_path):
    path = tmp_path / "gpumem.db"
    _filled(path)
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake, extra=f"store: {{path: {path}}}\n"), ExampleRunner(charts=False))
        try:
            assert bot.metrics.registry.get_sample_value("gpumem_audit_chain_broken") == 0.0
        finally:
            bot.close(timeout_s=10)
