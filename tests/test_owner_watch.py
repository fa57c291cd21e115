"""The watch of StatefulSet and LeaderWorkerSet plans, over HTTP with the real kubernetes client
against the stand-in, whose controllers roll them out: a StatefulSet's update revision replacing
its pods from the highest ordinal down (a partition keeping the lower ones), a LeaderWorkerSet's
groups (leader StatefulSet, then each group's workers) and its status. The same outcomes as a
Deployment's: held, failed (auto-rolled back), reverted (never rolled back); "not watched" only
where no status can be read, saying why. Each outcome counts the writes the stand-in received."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest

from bot.actuator.writer import KubeWriter
from bot.render.i18n import Catalog
from bot.service import remediate
from bot.store.db import Store
from runbooks.model.phrases import Phrase
from runbooks.remediation.policy import ApprovalPolicy
from tests.support.fake_kube import LWS_HASH, LWS_NAME, Reverter
from tests.support.kube_fixtures import manual_clock, run_cli, running_scenario
from tests.test_crd_schemas import LWS

EN = Catalog.load("en")

NS = "llm"
CONTAINER = {"name": "vllm", "image": "vllm/vllm-openai:v0.8.5",
             "args": ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "128"]}


@pytest.fixture
def sc(tmp_path):
    with running_scenario(None, tmp_path) as scenario:
        yield scenario


def _sts(replicas: int = 3, partition: int | None = None) -> dict:
    spec = {"replicas": replicas, "serviceName": "vllm", "selector": {"matchLabels": {"app": "vllm"}},
            "template": {"metadata": {"labels": {"app": "vllm"}}, "spec": {"containers": [copy.deepcopy(CONTAINER)]}}}
    if partition is not None:
        spec["updateStrategy"] = {"type": "RollingUpdate", "rollingUpdate": {"partition": partition}}
    return {"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "vllm", "namespace": NS},
            "spec": spec}


def _lws(groups: int = 2, size: int = 2) -> dict:
    lws = copy.deepcopy(LWS)
    lws["spec"]["replicas"] = groups
    lws["spec"]["leaderWorkerTemplate"]["size"] = size
    return lws


def _running(sc, kind: str, obj: dict, ready_after_s: float = 20.0):
    """The object added and its controller run until every pod is ready, on a manual clock."""
    clock = manual_clock(sc, ready_after_s=ready_after_s)
    sc.kube.add(obj)
    sc.kube.run(kind, NS, obj["metadata"]["name"])
    clock.advance(ready_after_s * 10)
    return clock


def _plan_apply_watch(sc, tmp_path, kind: str, name: str, clock, window: float = 600, auto_rollback: bool = True):
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(sc.api("prod"))
    request = remediate.PlanRequest(NS, name, kind, flags=(("max-num-seqs", 64),), requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    assert remediate.watchable(stored.plan)
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    looks = []
    final, seen = remediate.watch_after(store, writer, stored.plan.id, window, auto_rollback=auto_rollback,
                                        poll_s=30, clock=clock, sleep=clock.advance, on_look=looks.append)
    return store, stored, final, seen, looks


def _patches(sc) -> int:
    return sum(r.verb == "patch" for r in sc.kube.writes())


def _seqs(pod: dict) -> str:
    args = pod["spec"]["containers"][0]["args"]
    return args[args.index("--max-num-seqs") + 1]


def _pods(sc, prefix: str) -> list[dict]:
    sc.kube.reconcile()  # the controllers caught up with the clock, as a request would
    return sorted((p for p in sc.kube.list_objects("", "pods", NS) if p["metadata"]["name"].startswith(prefix)),
                  key=lambda p: p["metadata"]["name"])


# ----------------------------------------------------------------------------- StatefulSet


def test_a_statefulset_plan_holds_once_every_pod_runs_the_update_revision(sc, tmp_path):
    clock = _running(sc, "StatefulSet", _sts())
    before = sc.kube.get("StatefulSet", NS, "vllm")["status"]["currentRevision"]
    _store, _stored, final, seen, looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock)
    assert seen.outcome == "held" and final.state == "watched", seen.notes
    status = sc.kube.get("StatefulSet", NS, "vllm")["status"]
    assert status["currentRevision"] == status["updateRevision"] != before
    assert (seen.replicas, seen.updated, seen.ready, seen.restarts) == (3, 3, 3, 0)
    assert sorted(seen.new_pods) == ["vllm-0", "vllm-1", "vllm-2"]
    assert [_seqs(p) for p in _pods(sc, "vllm-")] == ["64", "64", "64"]
    # mid-rollout looks were not decided: one pod at a time, from the highest ordinal down
    assert looks[0].outcome == "rolling_out" and looks[0].updated < 3
    assert _patches(sc) == 1 and len(sc.kube.dry_runs()) == 1  # the patch and its dry run, nothing else


def test_a_statefulset_whose_new_pods_crash_fails_and_is_rolled_back(sc, tmp_path):
    clock = _running(sc, "StatefulSet", _sts())
    sc.kube.rollout.outcome = lambda pod: "crashloop" if _seqs(pod) == "64" else "ready"
    store, stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock)
    assert seen.outcome == "failed" and final.state == "rolled_back", seen.notes
    assert seen.restarts >= 1 and seen.oom_lines >= 1 and seen.new_pods == ("vllm-2",)
    # the controller waits for vllm-2 before it replaces vllm-1: the others never took the change
    states = [e.to_state for e in store.plan_audit(stored.plan.id)]
    assert states[-2:] == ["failed", "rolled_back"]
    assert _patches(sc) == 2  # the plan's patch and the automatic rollback's, no other write
    spec = sc.kube.get("StatefulSet", NS, "vllm")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert spec == CONTAINER["args"]


def test_a_partition_keeps_the_lower_pods_and_says_so(sc, tmp_path):
    clock = _running(sc, "StatefulSet", _sts(replicas=3, partition=2))
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock)
    assert seen.outcome == "held" and final.state == "watched", seen.notes
    assert Phrase("watch.partition", {"partition": 2}) in seen.notes
    assert "partition 2: the pods below ordinal 2 keep the old template" in EN.phrases(seen.notes)
    assert [_seqs(p) for p in _pods(sc, "vllm-")] == ["128", "128", "64"]
    assert seen.new_pods == ("vllm-2",) and _patches(sc) == 1


def test_a_statefulset_field_put_back_is_reverted_not_held_and_not_rolled_back(sc, tmp_path):
    sc.kube.managed_fields = True
    clock = _running(sc, "StatefulSet", _sts())
    argocd = Reverter("StatefulSet", NS, "vllm", ("spec", "template", "spec", "containers", 0, "args"),
                      list(CONTAINER["args"]), "argocd-controller", after_s=45)
    sc.kube.reverters.append(argocd)
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock)
    assert seen.outcome == "reverted" and final.state == "reverted"
    (r,) = seen.reverted
    assert r.manager == "argocd-controller" and r.put_back
    assert argocd.reverts == 1 and _patches(sc) == 1  # gpumem's one patch; the revert was the stand-in's


def test_a_statefulset_that_never_rolls_out_fails_at_the_end_of_the_window(sc, tmp_path):
    clock = _running(sc, "StatefulSet", _sts())
    sc.kube.rollout.outcome = lambda pod: "ready"
    sc.kube.rollout.ready_after_s = 10_000  # the new pod never gets ready within the window
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock,
                                                             auto_rollback=False)
    assert seen.outcome == "failed" and seen.notes[-1] == Phrase("watch.not_rolled_out")
    assert final.state == "failed" and _patches(sc) == 1


# ----------------------------------------------------------------------------- LeaderWorkerSet


def test_a_leader_worker_set_plan_holds_once_every_group_runs_the_new_template(sc, tmp_path):
    clock = _running(sc, "LeaderWorkerSet", _lws(groups=2, size=2))
    old_hash = sc.kube.get("StatefulSet", NS, "vllm")["spec"]["template"]["metadata"]["labels"][LWS_HASH]
    before = sc.kube.get("StatefulSet", NS, "vllm")["metadata"]["generation"]
    _store, stored, final, seen, looks = _plan_apply_watch(sc, tmp_path, "LeaderWorkerSet", "vllm", clock)
    assert stored.plan.workload is not None and (stored.plan.workload.kind, stored.plan.workload.name) == (
        "StatefulSet", "vllm")
    assert seen.outcome == "held" and final.state == "watched", seen.notes
    assert seen.observed_generation > before
    status = sc.kube.get("LeaderWorkerSet", NS, "vllm")["status"]
    assert (status["updatedReplicas"], status["readyReplicas"]) == (2, 2)
    assert sorted(seen.new_pods) == ["vllm-0", "vllm-0-1", "vllm-1", "vllm-1-1"]
    pods = _pods(sc, "vllm-")
    assert {p["metadata"]["labels"][LWS_HASH] for p in pods} != {old_hash}
    assert [_seqs(p) for p in pods] == ["64"] * 4
    assert looks[0].outcome == "rolling_out"
    assert _patches(sc) == 1 and len(sc.kube.dry_runs()) == 1


def test_a_leader_worker_set_whose_workers_crash_fails_and_is_rolled_back(sc, tmp_path):
    clock = _running(sc, "LeaderWorkerSet", _lws(groups=1, size=3))
    sc.kube.rollout.outcome = lambda pod: ("crashloop" if _seqs(pod) == "64"
                                           and pod["metadata"]["name"] != "vllm-0" else "ready")
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "LeaderWorkerSet", "vllm", clock)
    assert seen.outcome == "failed" and final.state == "rolled_back", seen.notes
    assert seen.oom_lines >= 1 and {"vllm-0-1", "vllm-0-2"} & set(seen.new_pods)
    assert _patches(sc) == 2
    lwt = sc.kube.get("LeaderWorkerSet", NS, "vllm")["spec"]["leaderWorkerTemplate"]
    assert lwt == _lws(groups=1, size=3)["spec"]["leaderWorkerTemplate"]


def test_a_leader_worker_set_whose_leader_statefulset_is_not_found_is_not_watched_and_says_why(
        sc, tmp_path, capsys):
    sc.kube.add(_lws())  # no controller runs: no leader StatefulSet, no status to read
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/lws/vllm", "--set", "max-num-seqs=64", "--json")
    assert rc == 0 and p.get("workload") is None, p
    rc, text = run_cli(capsys, sc, tmp_path / "gpumem.db", "apply", p["id"], "--yes")
    assert rc == 0, text
    assert "not watched: its status cannot be read" in text and "leader StatefulSet" in text
    assert _patches(sc) == 1


def test_slack_approves_a_leader_worker_set_plan_and_reports_it_held(tmp_path):
    from tests.test_slack_remediation import (
        APPROVER,
        _click,
        _command,
        _top_level_plan,
        _wait_edit,
        remediation_bot,
    )

    with remediation_bot(tmp_path) as (kube_sc, fake, bot):
        kube_sc.kube.add(_lws(groups=2, size=2))
        kube_sc.kube.run("LeaderWorkerSet", NS, "vllm")
        kube_sc.kube.clock.advance(600)  # every group ready before the plan
        _command(bot, fake, "plan llm/lws/vllm --set max-num-seqs=64 --context prod", n=301)
        plan_id, plan_ts = _top_level_plan(fake)
        _click(bot, fake, "gpumem_plan_approve", plan_id, plan_ts, APPROVER, n=302)
        _wait_edit(fake, plan_ts, "Held: 2 of 2 updated and available")
        assert [(r.verb, r.resource) for r in kube_sc.kube.writes()] == [("patch", "leaderworkersets")]
        pods = [p for p in _pods(kube_sc, "vllm-") if LWS_NAME in p["metadata"]["labels"]]
        assert [_seqs(p) for p in pods] == ["64"] * 4


@pytest.mark.parametrize("kind, obj", [("StatefulSet", _sts()), ("LeaderWorkerSet", _lws())])
def test_rolled_out_with_kv_cache_still_full_is_symptoms_remain_not_held(sc, tmp_path, kind, obj):
    from bot.actuator.watch import Symptoms

    clock = _running(sc, kind, obj)
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(sc.api("prod"))
    request = remediate.PlanRequest(NS, "vllm", kind, flags=(("max-num-seqs", 64),), requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    final, seen = remediate.watch_after(store, writer, stored.plan.id, 600, auto_rollback=True, poll_s=30,
                                        clock=clock, sleep=clock.advance,
                                        symptoms=lambda: Symptoms(kv_usage=0.97, queue=4.0, preemptions=0.0))
    assert seen.outcome == "symptoms_remain" and final.state == "watched", seen.notes
    assert Phrase("watch.kv_usage_high", {"usage": "97%", "high": "90%"}) in seen.notes
    assert "KV cache usage 97% (at or above 90%)" in EN.phrases(seen.notes)
    assert _patches(sc) == 1  # held or not, symptoms are never rolled back


def test_a_leader_worker_set_field_put_back_by_argo_cd_is_reverted_and_not_rolled_back(sc, tmp_path):
    sc.kube.managed_fields = True
    clock = _running(sc, "LeaderWorkerSet", _lws())
    path = ("spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "args")
    original = list(_lws()["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"])
    argocd = Reverter("LeaderWorkerSet", NS, "vllm", path, original, "argocd-controller", after_s=45)
    sc.kube.reverters.append(argocd)
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "LeaderWorkerSet", "vllm", clock)
    assert seen.outcome == "reverted" and final.state == "reverted"
    (r,) = seen.reverted
    assert r.manager == "argocd-controller" and r.path.startswith("/spec/leaderWorkerTemplate/workerTemplate/")
    assert argocd.reverts == 1 and _patches(sc) == 1


def test_an_on_delete_statefulset_never_rolls_out_on_its_own_and_the_watch_says_why(sc, tmp_path):
    obj = _sts()
    obj["spec"]["updateStrategy"] = {"type": "OnDelete"}
    clock = _running(sc, "StatefulSet", obj)
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock,
                                                             auto_rollback=False)
    assert seen.outcome == "failed" and final.state == "failed"
    assert "updateStrategy OnDelete: a pod takes the change only once someone deletes it" in EN.phrases(seen.notes)
    assert Phrase("watch.on_delete") in seen.notes or Phrase("watch.leader", {"note": Phrase("watch.on_delete")}) in seen.notes
    assert seen.notes[-1] == Phrase("watch.not_rolled_out")
    assert [_seqs(p) for p in _pods(sc, "vllm-")] == ["128"] * 3 and seen.new_pods == ()
    assert _patches(sc) == 1


def test_a_statefulset_scaled_up_judges_only_its_new_pod_and_a_pod_made_again_counts_whole(sc, tmp_path):
    """The pods are recorded right before the write with their uids: scaling 2 -> 3 keeps vllm-0
    and vllm-1 (judged since the write), a template change makes every pod again under its name
    (another uid: new, judged whole)."""
    clock = _running(sc, "StatefulSet", _sts(replicas=2))
    uids = {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(sc, "vllm-")}
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(sc.api("prod"))
    request = remediate.PlanRequest(NS, "vllm", "StatefulSet", replicas=3, requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    applied = remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    assert applied.state == "applied"
    baseline = [e.detail for e in store.plan_audit(stored.plan.id) if e.to_state == "applied"][-1]["baseline"]
    assert baseline["uids"] == uids
    final, seen = remediate.watch_after(store, writer, stored.plan.id, 300, poll_s=30, clock=clock,
                                        sleep=clock.advance)
    assert seen.outcome == "held" and final.state == "watched", seen.notes
    assert seen.new_pods == ("vllm-2",)
    assert {p["metadata"]["name"]: p["metadata"]["uid"] for p in _pods(sc, "vllm-")}.items() >= uids.items()
    _store, _stored, final, seen, _looks = _plan_apply_watch(sc, tmp_path, "StatefulSet", "vllm", clock)
    assert seen.outcome == "held" and seen.new_pods == ("vllm-0", "vllm-1", "vllm-2")
    assert _patches(sc) == 2
