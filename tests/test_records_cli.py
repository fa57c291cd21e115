"""`gpumem audit` and `gpumem plans` print what the store remembers, filtered, as text or JSON."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.main import main
from bot.store.db import Store
from runbooks.model.changes import Scale
from runbooks.remediation.plan import Plan, PlanTarget

NOW = datetime.now(UTC)


def _plan(plan_id: str, name: str, at: datetime) -> Plan:
    return Plan(plan_id, PlanTarget("prod", "llm", "Deployment", name), "scale_out", (Scale(2, 3),), "7", 2,
                ({"op": "replace", "path": "/spec/replicas", "value": 3},), "application/json-patch+json", "U1", at,
                at + timedelta(minutes=15))


@pytest.fixture
def store_file(tmp_path):
    path = tmp_path / "gpumem.db"
    store = Store.open(path)
    old = NOW - timedelta(days=3)
    store.add_plan(_plan("p-old", "vllm-a", old), now=old)
    store.add_plan(_plan("p-new", "vllm-b", NOW), now=NOW)
    store.approve("p-new", "U2", _plan("p-new", "vllm-b", NOW).content_hash, now=NOW)
    store.close()
    return path


def test_audit_since_and_target_filter_the_rows(store_file, capsys):
    assert main(["audit", "--store", str(store_file), "--since", "12h", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["event"], r["plan"], r["actor"]) for r in rows] == [
        ("proposed", "p-new", "U1"), ("approval", "p-new", "U2"), ("approved", "p-new", "U2")]
    assert main(["audit", "--store", str(store_file), "--target", "llm/vllm-a", "--json"]) == 0
    assert [r["plan"] for r in json.loads(capsys.readouterr().out)] == ["p-old"]


def test_plans_lists_the_open_ones_unless_all(store_file, capsys):
    assert main(["plans", "--store", str(store_file), "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)
    assert [(p["id"], p["state"], p["approvals"]) for p in plans] == [("p-new", "approved", ["U2"]),
                                                                     ("p-old", "proposed", [])]
    assert plans[0]["changes"] == ["replicas 2 -> 3"]
    assert main(["plans", "--store", str(store_file), "--lang", "zh"]) == 0
    zh = capsys.readouterr().out
    assert "变更计划（2 个，最新在前）" in zh
    # states in words, never the stored id, in either language
    rows = {line.split()[0]: line for line in zh.splitlines()[1:]}
    assert rows["p-new"].split()[1] == "已批准" and rows["p-old"].split()[1] == "已提议"
    assert "approved" not in zh and "proposed" not in zh
    assert main(["plans", "--store", str(store_file), "--lang", "en"]) == 0
    en = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()[1:]}
    assert en["p-new"].split()[1:3] == ["approved", "llm/vllm-b"] and en["p-old"].split()[1:3] == ["proposed", "llm/vllm-a"]


def test_a_store_that_is_not_a_database_is_exit_2_naming_it(tmp_path, capsys):
    bad = tmp_path / "gpumem.db"
    bad.write_text("not a database")
    assert main(["audit", "--store", str(bad), "--lang", "en"]) == 2
    err = capsys.readouterr().err
    assert f"the store {bad} cannot be used" in err and "Traceback" not in err


def test_since_refuses_what_is_not_a_time(capsys):
    with pytest.raises(SystemExit) as e:
        main(["audit", "--since", "yesterday-ish"])
    assert e.value.code == 2 and "not a duration" in capsys.readouterr().err
