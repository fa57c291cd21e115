"""After a change: the watch says held, symptoms remain or failed from the rollout, new pods'
restarts and what their logs say (against the stand-in's simulated rollouts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.apply import apply_plan
from bot.actuator.watch import look, watch
from bot.actuator.writer import JSON_PATCH, KubeWriter
from bot.render.i18n import Catalog
from bot.service.container_reader import CONTAINER_READER
from runbooks.model.changes import SetArg
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.launch_edit import edit_flags
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.kube_fixtures import manual_clock, running_scenario

NS, NAME = "llm", "vllm-server"
NOW = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _apply(writer: KubeWriter) -> int:
    obj = writer.read("Deployment", NS, NAME)
    edit = edit_flags(obj, None, {"max-num-seqs": 64}, reader=CONTAINER_READER)
    meta = obj["metadata"]
    plan = Plan("p-w", PlanTarget("prod", NS, "Deployment", NAME), "lower_max_num_seqs",
                (SetArg("vllm", "max-num-seqs", 128, 64),), meta["resourceVersion"], meta.get("generation"),
                tuple(edit.json_patch), JSON_PATCH, "U1", NOW, NOW + timedelta(minutes=15))
    return apply_plan(writer, plan, "watch test").generation


def test_a_rollout_that_completes_cleanly_holds(cluster):
    clock = manual_clock(cluster, ready_after_s=30.0)
    writer = KubeWriter(cluster.api("prod"))
    generation = _apply(writer)
    assert look(writer, NS, NAME, generation).outcome == "rolling_out"
    seen = []

    def sleep(s: float) -> None:
        clock.advance(s)

    final = watch(writer, NS, NAME, generation, window_s=600, poll_s=60, clock=clock, sleep=sleep,
                  on_look=seen.append)
    assert final.outcome == "held" and final.restarts == 0 and final.oom_lines == 0
    assert final.updated == final.available == final.replicas and final.observed_generation >= generation
    assert len(final.new_pods) == final.replicas and seen[0].outcome == "rolling_out"


def test_new_pods_that_crash_loop_with_a_cuda_oom_fail_the_watch(cluster):
    clock = manual_clock(cluster, ready_after_s=30.0)
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    writer = KubeWriter(cluster.api("prod"))
    generation = _apply(writer)
    final = watch(writer, NS, NAME, generation, window_s=600, poll_s=30, clock=clock, sleep=clock.advance)
    assert final.outcome == "failed"
    assert final.restarts >= 1 and final.oom_lines >= 1
    assert Phrase("watch.ooms_new", {"count": final.oom_lines}) in final.notes
    assert clock() < 600, "a failure ends the watch early"


def test_a_rollout_that_does_not_finish_in_the_window_is_not_held(cluster):
    clock = manual_clock(cluster, ready_after_s=10_000.0)
    writer = KubeWriter(cluster.api("prod"))
    generation = _apply(writer)
    final = watch(writer, NS, NAME, generation, window_s=120, poll_s=60, clock=clock, sleep=clock.advance)
    assert final.outcome == "failed" and final.notes[-1] == Phrase("watch.not_rolled_out")


def test_a_failed_watch_rolls_back_by_itself_only_when_configured(cluster, tmp_path):
    from bot.service import remediate
    from bot.store.db import Store
    from runbooks.remediation.policy import ApprovalPolicy

    clock = manual_clock(cluster, ready_after_s=30.0)
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, flags=(("max-num-seqs", 512),), requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    final, seen = remediate.watch_after(store, writer, stored.plan.id, 600, auto_rollback=True, poll_s=30,
                                        clock=clock, sleep=clock.advance)
    assert seen.outcome == "failed" and final.state == "rolled_back"
    events = [(r.event, r.detail.get("outcome"), r.detail.get("auto")) for r in store.audit() if r.plan_id == stored.plan.id]
    assert ("failed", "failed", None) in events and ("rolled_back", None, True) in events
    vllm = next(c for c in cluster.kube.get("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"]
                if c["name"] == "vllm")
    assert "--max-num-seqs=128" in " ".join(vllm.get("args") or []) + " ".join(vllm.get("command") or [])


# ------------------------------------------------------------------ a replica change (no new revision)

OLD_POD = "vllm-server-7d9c8b6f4-q8wvn"  # restarted once after a CUDA OOM, before any plan


def _scale(cluster, store, replicas: int = 3):
    from bot.service import remediate
    from runbooks.remediation.policy import ApprovalPolicy

    # its HPA (2..2) scales it: the plan raises the HPA's minReplicas (and maxReplicas), and the
    # stand-in's HPA controller scales the Deployment
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, replicas=replicas, requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    return writer, stored.plan.id


def _restarts(cluster, pod: str) -> int:
    found = next(p for p in cluster.kube.pods_of(NS, NAME) if p["metadata"]["name"] == pod)
    return sum(int(cs.get("restartCount") or 0) for cs in found["status"]["containerStatuses"])


def test_a_scale_plan_that_holds_is_held_whatever_the_old_pods_did_before(cluster, tmp_path):
    from bot.service import remediate
    from bot.store.db import Store

    clock = manual_clock(cluster, ready_after_s=30.0)
    store = Store.open(tmp_path / "gpumem.db")
    writer, plan_id = _scale(cluster, store)
    assert _restarts(cluster, OLD_POD) == 1, "the scenario's pod restarted before the plan"
    final, seen = remediate.watch_after(store, writer, plan_id, 600, poll_s=60, clock=clock, sleep=clock.advance)
    assert seen.outcome == "held" and final.state == "watched"
    assert seen.replicas == seen.available == 3 and seen.restarts == 0 and seen.oom_lines == 0
    assert len(seen.new_pods) == 1 and OLD_POD not in seen.new_pods and seen.notes == ()
    # without the baseline the same look counts the old pod's restart and OOM: the misread fixed here
    generation = cluster.kube.get("Deployment", NS, NAME)["metadata"]["generation"]
    blind = look(writer, NS, NAME, generation)
    assert blind.outcome == "failed" and blind.restarts == 1 and blind.oom_lines >= 1


def test_a_scale_plan_whose_new_pods_crash_loop_with_a_cuda_oom_fails(cluster, tmp_path):
    from bot.service import remediate
    from bot.store.db import Store

    clock = manual_clock(cluster, ready_after_s=30.0)
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    store = Store.open(tmp_path / "gpumem.db")
    writer, plan_id = _scale(cluster, store)
    final, seen = remediate.watch_after(store, writer, plan_id, 600, poll_s=30, clock=clock, sleep=clock.advance)
    assert seen.outcome == "failed" and final.state == "failed"
    (new,) = seen.new_pods
    assert seen.restarts == _restarts(cluster, new) >= 1, "only the new pod's restarts count"
    assert seen.oom_lines >= 1 and seen.notes[0] == Phrase("watch.restarts_new", {"count": seen.restarts})
    assert Catalog.load("en").phrase(seen.notes[0]) == f"{seen.restarts} restart{'' if seen.restarts == 1 else 's'} in new pods"
    assert not any(n.key.endswith("_since") for n in seen.notes)
    assert clock() < 600


def test_restarts_and_oom_lines_of_old_pods_count_only_after_the_write(cluster, tmp_path):
    from bot.actuator.watch import Baseline
    from bot.store.db import Store

    clock = manual_clock(cluster, ready_after_s=30.0)
    store = Store.open(tmp_path / "gpumem.db")
    writer, plan_id = _scale(cluster, store)
    applied = next(e.detail for e in store.plan_audit(plan_id) if e.to_state == "applied")
    baseline = Baseline.from_json(applied["baseline"])
    assert baseline is not None and baseline.restarts[OLD_POD] == {"vllm": 1}
    assert baseline.marks[OLD_POD]["vllm"].startswith("2026-03-09T20:26:05")
    clock.advance(60)
    # the plan wrote the HPA; the Deployment's generation is the one its controller moved
    generation = cluster.kube.get("Deployment", NS, NAME)["metadata"]["generation"]
    held = look(writer, NS, NAME, generation, baseline)
    assert held.outcome == "held" and held.restarts == 0 and held.oom_lines == 0
    # the old pod now crashes again, after the write: one more restart, one more CUDA OOM line
    kube = cluster.kube
    pod = kube.objects[("", "pods")][(NS, OLD_POD)]
    pod["status"]["containerStatuses"][0]["restartCount"] = 2
    old_previous = kube.logs[(NS, OLD_POD, "vllm", True)]
    stamp = kube.wall(clock(), nanos=True)
    kube.set_log(NS, OLD_POD, "vllm", kube.logs[(NS, OLD_POD, "vllm", False)]
                 + f"{stamp} ERROR 03-09 21:01:00 engine.py:366] CUDA out of memory. Tried to allocate 2.00 GiB.\n",
                 previous=True)
    kube.set_log(NS, OLD_POD, "vllm", f"{stamp} INFO 03-09 21:01:00 api_server.py:585] vLLM API server version 0.6.6\n")
    seen = look(writer, NS, NAME, applied["generation"], baseline)
    assert seen.outcome == "failed" and seen.restarts == 1 and seen.oom_lines == 1
    assert seen.notes == (Phrase("watch.restarts_since", {"count": 1}), Phrase("watch.ooms_since", {"count": 1}))
    assert Catalog.load("en").phrases(seen.notes) == ("1 restart in pods that ran before the change, since it; "
                                                      "1 CUDA OOM line in the logs of pods that ran before the change, since it")
    assert "CUDA out of memory" in old_previous, "the earlier OOM is in the log, and did not count"
