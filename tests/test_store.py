"""The store: migrations, single-use state moves, approvals bound to content, an append-only audit,
and nothing half-written after kill -9."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.store.db import Store, default_path
from bot.store.migrations import MIGRATIONS
from runbooks.model.changes import SetArg
from runbooks.model.errors import PlanExpired, PlanMoved, UsageError
from runbooks.remediation.plan import Plan, PlanTarget

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)


def _plan(plan_id: str = "p1", needed: int = 1, seqs: int = 64, name: str = "vllm-server") -> Plan:
    return Plan(plan_id, PlanTarget("prod", "llm", "Deployment", name), "lower_max_num_seqs",
                (SetArg("vllm", "max-num-seqs", 128, seqs),), "4711", 3,
                ({"op": "test", "path": "/spec/template/spec/containers/0/args/3", "value": "--max-num-seqs=128"},
                 {"op": "replace", "path": "/spec/template/spec/containers/0/args/3", "value": f"--max-num-seqs={seqs}"}),
                "application/json-patch+json", "U1", T0, T0 + timedelta(minutes=15), needed, "triage llm/vllm-server")


def test_the_schema_comes_from_migrations_and_a_second_open_changes_nothing(tmp_path):
    path = tmp_path / "state" / "gpumem.db"
    store = Store.open(path)
    store.add_plan(_plan(), now=T0)
    store.close()
    again = Store.open(path)
    assert [m.name for m in MIGRATIONS.applied(again.db)] == ["0001_plans_audit_claims",
                                                         "0002_notes_triages_handovers_slots", "0003_alerts",
                                                         "0004_audit_hash_chain"]
    assert MIGRATIONS.pending(again.db) == []
    assert again.get("p1").state == "proposed"
    assert again.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_file_that_is_not_a_database_is_named_and_left_alone(tmp_path):
    path = tmp_path / "gpumem.db"
    path.write_bytes(b"this is not sqlite\n" * 100)
    with pytest.raises(UsageError) as e:
        Store.open(path)
    assert e.value.code == "store_unusable" and e.value.params["path"] == str(path)
    assert path.read_bytes() == b"this is not sqlite\n" * 100


def test_the_default_path_follows_xdg_state_home(tmp_path):
    assert default_path({"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "gpumem" / "gpumem.db"
    assert default_path({"HOME": "/home/oncall"}) == Path("/home/oncall/.local/state/gpumem/gpumem.db")


def test_the_audit_refuses_update_and_delete():
    store = Store.memory()
    store.add_plan(_plan(), now=T0)
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store.db.execute("UPDATE audit SET actor = 'someone else'")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        store.db.execute("DELETE FROM audit")
    assert [(r.actor, r.event) for r in store.audit()] == [("U1", "proposed")]


def test_a_plan_moves_once_and_a_second_move_from_the_same_state_is_a_conflict():
    store = Store.memory()
    store.add_plan(_plan(), now=T0)
    store.approve("p1", "U2", _plan().content_hash, now=T0)
    store.move("p1", "applying", actor="U2", expect="approved", now=T0)
    with pytest.raises(PlanMoved) as e:
        store.move("p1", "applying", actor="U3", expect="approved", now=T0)
    assert e.value.code == "plan_moved" and e.value.params["state"] == "applying"
    with pytest.raises(PlanMoved):
        store.move("p1", "approved", actor="U3", now=T0)  # not a step a plan may take
    assert [r.event for r in store.audit()] == ["proposed", "approval", "approved", "applying"]


def test_approval_binds_to_the_content_hash_and_counts_distinct_people():
    store = Store.memory()
    plan = _plan(needed=2)
    store.add_plan(plan, now=T0)
    with pytest.raises(PlanMoved) as changed:
        store.approve("p1", "U2", _plan(seqs=32).content_hash, now=T0)
    assert changed.value.code == "plan_changed"
    assert store.approve("p1", "U2", plan.content_hash, now=T0).state == "proposed"
    with pytest.raises(PlanMoved) as twice:
        store.approve("p1", "U2", plan.content_hash, now=T0)
    assert twice.value.code == "already_approved"
    stored = store.approve("p1", "U3", plan.content_hash, now=T0)
    assert (stored.state, stored.approvals) == ("approved", ("U2", "U3"))


def test_an_expired_plan_cannot_be_approved():
    store = Store.memory()
    store.add_plan(_plan(), now=T0)
    with pytest.raises(PlanExpired) as e:
        store.approve("p1", "U2", _plan().content_hash, now=T0 + timedelta(minutes=16))
    assert e.value.code == "plan_expired"
    assert store.get("p1").state == "expired"
    assert store.expire_due(now=T0 + timedelta(hours=1)) == []


def test_a_new_plan_for_the_same_object_supersedes_the_open_one():
    store = Store.memory()
    store.add_plan(_plan("p1"), now=T0)
    store.add_plan(_plan("p2", seqs=32), now=T0)
    assert (store.get("p1").state, store.get("p2").state) == ("superseded", "proposed")
    assert [p.plan.id for p in store.plans(open_only=True)] == ["p2"]


def test_two_approvers_at_once_on_two_connections_give_one_approval(tmp_path):
    path = tmp_path / "gpumem.db"
    Store.open(path).add_plan(_plan(), now=T0)
    results: list[str] = []

    def approve(user: str) -> None:
        store = Store.open(path)  # a second replica: its own connection
        try:
            store.approve("p1", user, _plan().content_hash, now=T0)
            results.append("ok")
        except PlanMoved as e:
            results.append(e.code)

    threads = [threading.Thread(target=approve, args=(f"U{i}",)) for i in range(2, 10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(results) == ["ok"] + ["plan_moved"] * 7
    assert [r.event for r in Store.open(path).audit()].count("approved") == 1


def test_claims_have_one_holder_until_they_expire():
    store = Store.memory()
    assert store.claim("rerun:C1:1.2", "U1", ttl_s=10, now=T0)
    assert not store.claim("rerun:C1:1.2", "U2", ttl_s=10, now=T0 + timedelta(seconds=9))
    assert store.claim("rerun:C1:1.2", "U2", ttl_s=10, now=T0 + timedelta(seconds=11))


_WRITER = """
import sys, itertools
from datetime import UTC, datetime, timedelta
from bot.store.db import Store
from runbooks.model.changes import Scale
from runbooks.remediation.plan import Plan, PlanTarget
store = Store.open(sys.argv[1])
t = datetime(2026, 12, 1, tzinfo=UTC)
print("ready", flush=True)
for i in itertools.count():
    p = Plan(f"p{i}", PlanTarget("prod", "llm", "Deployment", f"svc-{i}"), "scale_out", (Scale(1, 2),),
             "1", 1, ({"op": "replace", "path": "/spec/replicas", "value": 2},), "application/json-patch+json",
             "U1", t, t + timedelta(days=1))
    store.add_plan(p, now=t)
    store.approve(p.id, "U2", p.content_hash, now=t)
    store.move(p.id, "applying", actor="U2", now=t)
    store.move(p.id, "applied", actor="gpumem", now=t)
"""


def test_kill_9_leaves_every_plan_in_a_state_its_audit_agrees_with(tmp_path):
    path = tmp_path / "gpumem.db"
    proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(1.0)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    store = Store.open(path)
    assert store.db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    plans = store.plans(limit=100_000)
    assert len(plans) > 5
    last = {}
    for row in store.audit(limit=1_000_000):
        if row.to_state:
            last[row.plan_id] = row.to_state
    assert {p.plan.id: p.state for p in plans} == last
    assert all(p.state in ("proposed", "approved", "applying", "applied") for p in plans)
    assert sum(p.state != "applied" for p in plans) <= 1, "only the last plan may be mid-way"


def test_plans_read_back_equal_what_was_stored():
    store = Store.memory()
    plan = replace(_plan(), approvals_needed=2)
    assert store.add_plan(plan, channel="C1", thread_ts="1.2", now=T0).plan == plan
