"""Every guard on a StatefulSet and a LeaderWorkerSet plan refuses as it does on a Deployment,
each with the writes the stand-in received counted: the re-read (changed since planned: no dry
run, no write), the dry run (refused: no write), the `test` ops and resourceVersion
precondition (a change between the dry run and the write: one write, refused), the rollback's
preconditions (someone changed the field after gpumem: no rollback write); and every call the
watch makes of them is one the writer's Role or the reader's ClusterRole grants."""

from __future__ import annotations

import json

import pytest

from bot.main import main
from bot.service import remediate
from bot.store.db import Store
from runbooks.model.errors import ChangedSincePlanned
from tests.support.fake_kube_rules import KINDS, rule_allows
from tests.support.kube_fixtures import WRITER_MANIFEST, manual_clock, rbac_rules, run_cli, running_scenario
from tests.test_owner_watch import _lws, _sts

#: (kind, target, the pointer of the first container's args under the object)
CASES = [
    ("StatefulSet", "llm/sts/vllm", ("spec", "template", "spec", "containers", 0, "args")),
    ("LeaderWorkerSet", "llm/lws/vllm",
     ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec", "containers", 0, "args")),
]


@pytest.fixture
def sc(tmp_path):
    with running_scenario(None, tmp_path) as scenario:
        yield scenario


def _obj(kind: str) -> dict:
    return _sts() if kind == "StatefulSet" else _lws()


def _edit(sc, kind: str, where: tuple, value, bump_rv: bool = False) -> None:
    """Someone else edits the stored object (as another client's write lands)."""
    now = sc.kube.get(kind, "llm", "vllm")
    node = now
    for step in where[:-1]:
        node = node[step]
    node[where[-1]] = value
    sc.kube.add(now)
    if bump_rv:
        group, _v, resource, _n = KINDS[kind]
        sc.kube.objects[(group, resource)][("llm", "vllm")]["metadata"]["resourceVersion"] = "9"


def _plan(capsys, sc, tmp_path, target: str) -> dict:
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", target, "--set", "max-num-seqs=64", "--json")
    assert rc == 0, p
    return p


def _args(kind: str) -> list:
    obj = _obj(kind)
    return list((obj["spec"]["template"] if kind == "StatefulSet"
                 else obj["spec"]["leaderWorkerTemplate"]["leaderTemplate"])["spec"]["containers"][0]["args"])


@pytest.mark.parametrize("kind, target, where", CASES)
def test_changed_since_planned_is_refused_at_the_re_read_with_no_dry_run_and_no_write(sc, tmp_path, capsys, kind,
                                                                                       target, where):
    sc.kube.add(_obj(kind))
    p = _plan(capsys, sc, tmp_path, target)
    _edit(sc, kind, (*where[:-1], "image"), "vllm/vllm-openai:v0.9.0", bump_rv=True)
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "apply", p["id"], "--yes", "--no-watch")
    assert rc == 2 and "changed since plan" in text
    assert sc.kube.writes() == [] and sc.kube.dry_runs() == []


@pytest.mark.parametrize("kind, target, where", CASES)
def test_a_refused_dry_run_writes_nothing(sc, tmp_path, capsys, kind, target, where):
    sc.kube.add(_obj(kind))
    p = _plan(capsys, sc, tmp_path, target)
    sc.kube.fail(rf"{KINDS[kind][2]}/vllm\?.*dryRun=All", 422)
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "apply", p["id"], "--yes", "--no-watch")
    assert rc == 2, text
    assert sc.kube.writes() == [] and len(sc.kube.dry_runs()) == 1


@pytest.mark.parametrize("kind, target, where", CASES)
@pytest.mark.parametrize("edit, status", [("args", 422), ("rv", 409)])
def test_a_change_between_the_dry_run_and_the_write_is_refused_by_its_precondition(sc, tmp_path, capsys, kind,
                                                                                   target, where, edit, status):
    sc.kube.add(_obj(kind))
    p = _plan(capsys, sc, tmp_path, target)
    store = Store.open(tmp_path / "gpumem.db")
    writer = remediate.writer_for(str(sc.kubeconfig), "prod")

    def someone_edits() -> None:
        if edit == "args":  # the element the `test` op checks
            _edit(sc, kind, where, [*_args(kind)[:-1], "100"])
        else:  # any other change: the resourceVersion precondition
            _edit(sc, kind, (*where[:-1], "image"), "vllm/vllm-openai:v0.9.0")
        group, _v, resource, _n = KINDS[kind]
        stored = sc.kube.objects[(group, resource)][("llm", "vllm")]["metadata"]
        stored["resourceVersion"] = str(int(stored["resourceVersion"]) + 50)

    try:
        store.approve(p["id"], "U1", store.get(p["id"]).plan.content_hash)
        with pytest.raises(ChangedSincePlanned):
            remediate.apply_approved(store, writer, p["id"], "U1", on_dry_run=someone_edits)
        assert store.get(p["id"]).state == "failed"
    finally:
        store.close()
    assert [(r.verb, r.status) for r in sc.kube.writes()] == [("patch", status)]


@pytest.mark.parametrize("kind, target, where", CASES)
def test_a_rollback_after_someone_changed_the_flag_is_refused_with_no_write(sc, tmp_path, capsys, kind, target,
                                                                            where):
    sc.kube.add(_obj(kind))
    p = _plan(capsys, sc, tmp_path, target)
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "apply", p["id"], "--yes", "--no-watch")
    assert rc == 0, text
    _edit(sc, kind, where, [*_args(kind)[:-1], "32"])
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "rollback", p["id"], "--yes")
    assert rc == 2 and "/".join(str(s) for s in where) in text
    assert [r.verb for r in sc.kube.writes()] == ["patch"]  # the apply's; no rollback write


def test_every_call_of_the_watch_of_a_statefulset_and_a_leader_worker_set_is_granted(tmp_path, capsys):
    writer_rules, reader_rules = rbac_rules("Role", WRITER_MANIFEST), rbac_rules()
    with running_scenario(None, tmp_path) as sc:
        clock = manual_clock(sc, ready_after_s=5.0)
        lws = _lws()
        lws["metadata"]["name"] = "big"  # its leader StatefulSet is named as it: not the StatefulSet vllm
        sc.kube.add(_sts(), lws)
        sc.kube.run("StatefulSet", "llm", "vllm")
        sc.kube.run("LeaderWorkerSet", "llm", "big")
        clock.advance(300)
        sc.kube.grant(writer_rules, namespace="llm")
        sc.kube.grant(reader_rules)
        store = tmp_path / "gpumem.db"
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        for target in ("llm/sts/vllm", "llm/lws/big"):
            capsys.readouterr()
            assert main(["plan", target, "--set", "max-num-seqs=64", "--json", *common]) == 0
            plan_id = json.loads(capsys.readouterr().out)["id"]
            assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 0
            s = Store.open(store)
            try:
                writer = remediate.writer_for(str(sc.kubeconfig), None)
                final, seen = remediate.watch_after(s, writer, plan_id, 300, poll_s=30, clock=clock,
                                                    sleep=clock.advance)
            finally:
                s.close()
            assert seen.outcome == "held" and final.state == "watched", (target, seen.notes)
        calls = sc.kube.calls()
    assert calls and all(r.status != 403 for r in calls)
    assert {(r.verb, r.resource) for r in calls if r.verb == "patch"} == {("patch", "statefulsets"),
                                                                          ("patch", "leaderworkersets")}
    for r in calls:
        by_writer = any(rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
                        for rule in writer_rules)
        by_reader = r.verb in ("list", "get") and any(
            rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
            for rule in reader_rules)
        assert by_writer or by_reader, (r.method, r.path)
