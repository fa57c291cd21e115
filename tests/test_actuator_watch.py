"""After a change: the watch says held, symptoms remain or failed from the rollout, new pods'
restarts and what their logs say (against the stand-in's simulated rollouts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.apply import apply_plan
from bot.actuator.launch_edit import edit_flags
from bot.actuator.watch import look, watch
from bot.actuator.writer import JSON_PATCH, KubeWriter
from runbooks.model.changes import Change
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
    edit = edit_flags(obj, None, {"max-num-seqs": 64})
    meta = obj["metadata"]
    plan = Plan("p-w", PlanTarget("prod", NS, "Deployment", NAME), "lower_max_num_seqs",
                (Change.set_arg("vllm", "max-num-seqs", 128, 64),), meta["resourceVersion"], meta.get("generation"),
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
    assert any("CUDA OOM" in n for n in final.notes)
    assert clock() < 600, "a failure ends the watch early"


def test_a_rollout_that_does_not_finish_in_the_window_is_not_held(cluster):
    clock = manual_clock(cluster, ready_after_s=10_000.0)
    writer = KubeWriter(cluster.api("prod"))
    generation = _apply(writer)
    final = watch(writer, NS, NAME, generation, window_s=120, poll_s=60, clock=clock, sleep=clock.advance)
    assert final.outcome == "failed" and "not rolled out within the watch window" in final.notes


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
