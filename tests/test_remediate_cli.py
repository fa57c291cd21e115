"""`gpumem plan` / `apply` / `rollback` against the stand-in API server: every step in the store and
the audit, every guard refusing with the number of writes the server received."""

from __future__ import annotations

import pytest

from bot.store.db import Store
from collectors.parsers.flags import server_config_from_container
from tests.support.kube_fixtures import run_cli, running_scenario

TARGET = "llm/vllm-server"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


_run = run_cli


def _seqs(sc) -> int:
    obj = sc.kube.get("Deployment", "llm", "vllm-server")
    container = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    return server_config_from_container(container).max_num_seqs


def test_plan_apply_rollback_round_trip(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    rc, plan = _run(capsys, cluster, store, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0 and plan["state"] == "proposed"
    assert [c["diff"] for c in plan["changes"]] == ["--max-num-seqs 128 -> 64"]
    assert plan["patch"][0]["op"] == "test" and cluster.kube.writes() == []
    rc, text = _run(capsys, cluster, store, "apply", plan["id"])
    assert rc == 2 and "--yes" in text and cluster.kube.writes() == []
    rc, applied = _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
    assert (rc, applied["state"]) == (0, "applied") and _seqs(cluster) == 64
    assert len(cluster.kube.writes(verb="patch")) == 1 and len(cluster.kube.dry_runs(verb="patch")) == 1
    rc, back = _run(capsys, cluster, store, "rollback", plan["id"], "--yes", "--json")
    assert (rc, back["state"]) == (0, "rolled_back") and _seqs(cluster) == 128
    events = [(r.event, r.to_state) for r in Store.open(store).audit()]
    assert events == [("proposed", "proposed"), ("approval", "proposed"), ("approved", "approved"),
                      ("applying", "applying"), ("rollback_note", None), ("applied", "applied"),
                      ("rolled_back", "rolled_back")]


def test_a_plan_applies_once(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    _, plan = _run(capsys, cluster, store, "plan", TARGET, "--replicas", "3", "--json")
    assert _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
    rc, text = _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 2 and "is applied already" in text
    assert len(cluster.kube.writes(verb="patch")) == 1


def test_a_plan_for_an_object_changed_since_fails_with_no_write(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    _, plan = _run(capsys, cluster, store, "plan", TARGET, "--replicas", "3", "--json")
    other = tmp_path / "other.db"
    _, theirs = _run(capsys, cluster, other, "plan", TARGET, "--replicas", "4", "--json")
    assert _run(capsys, cluster, other, "apply", theirs["id"], "--yes", "--no-watch")[0] == 0
    rc, text = _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 2 and "changed since plan" in text
    assert len(cluster.kube.writes(verb="patch")) == 1, "only the other plan's write"
    assert Store.open(store).get(plan["id"]).state == "failed"


def test_a_rollback_refuses_to_clobber_a_later_change(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    _, plan = _run(capsys, cluster, store, "plan", TARGET, "--replicas", "3", "--json")
    _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    _, later = _run(capsys, cluster, tmp_path / "b.db", "plan", TARGET, "--replicas", "5", "--json")
    _run(capsys, cluster, tmp_path / "b.db", "apply", later["id"], "--yes", "--no-watch")
    rc, text = _run(capsys, cluster, store, "rollback", plan["id"], "--yes")
    assert rc == 2 and "Before gpumem / what gpumem wrote / now:\n  /spec/minReplicas: 2 / 3 / 5" in text
    # an HPA (vllm-server-queue) scales vllm-server: both plans changed its minReplicas
    assert cluster.kube.get("HorizontalPodAutoscaler", "llm", "vllm-server-queue")["spec"]["minReplicas"] == 5
    assert len(cluster.kube.writes(verb="patch")) == 2


@pytest.mark.parametrize(("argv", "words"), [
    (("--set", "max-num-seqs"), "expected FLAG=VALUE"),
    ((), "nothing to change"),
])
def test_a_plan_that_asks_for_nothing_usable_is_exit_2(cluster, tmp_path, capsys, argv, words):
    rc, text = _run(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, *argv)
    assert rc == 2 and words in text and "Traceback" not in text


def test_plan_from_the_action_of_the_last_recorded_triage(cluster, tmp_path, capsys):
    from bot.service.notes import record_triage
    from runbooks.model.changes import Scale, SetArg
    from runbooks.model.report import Action, Report

    store = tmp_path / "gpumem.db"
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--action", "lower_max_num_seqs")
    assert rc == 2 and "no recorded triage of llm/vllm-server recommended lower_max_num_seqs" in text
    db = Store.open(store)
    record_triage(db, Report(target=TARGET, actions=(
        Action("lower_max_num_seqs", changes=(SetArg("vllm", "max-num-seqs", 128, 96),)),
        Action("bigger_gpu", tier="escalate", changes=(Scale(2, 3),)))), actor="cli:test")
    db.close()
    rc, plan = _run(capsys, cluster, store, "plan", TARGET, "--action", "lower_max_num_seqs", "--json")
    assert rc == 0 and [c["diff"] for c in plan["changes"]] == ["--max-num-seqs 128 -> 96"]
    assert plan["action"] == "lower_max_num_seqs"
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--action", "bigger_gpu")
    assert rc == 2 and "recommended bigger_gpu" in text, "an escalate-tier action is never planned"
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--action", "lower_max_num_seqs", "--replicas", "3")
    assert rc == 2 and "not both" in text
    assert cluster.kube.writes() == []
