"""A write whose answer does not settle it is settled by reading the object again, never assumed.

The stand-in API server stores the write and then answers 500 or 503, stalls past the client's
deadline, or drops the connection (`FakeKube.fail_after_write`); or it answers 503 without
storing anything (`FakeKube.fail`); or it cannot be read for a while after the write
(`then_refuse_reads`, `refuse_reads`). Each test counts the writes the API server received."""

from __future__ import annotations

import json
import re

import pytest

from bot.actuator.apply import PLAN_ANNOTATION, apply_plan, rollback_plan
from bot.actuator.writer import KubeWriter
from bot.main import main
from bot.render.i18n import Catalog
from bot.service import remediate
from bot.service.reconcile import RECONCILE_ACTOR, reconcile_applying
from bot.store.db import Store
from runbooks.model.changes import HpaOnQueueDepth
from runbooks.model.errors import ChangedAfterApply, OutcomeUnknown, TemporaryError
from runbooks.model.phrases import Phrase
from runbooks.remediation.policy import ApprovalPolicy
from tests.support import words
from tests.support.kube_fixtures import running_scenario
from tests.test_actuator import NAME, NS, _scale_plan

EN = Catalog.load("en")

#: the real write of a plan (the dry run carries `&dryRun=All` after it)
WRITE = r"deployments/vllm-server\?fieldManager=gpumem$"
OBJECT = r"deployments/vllm-server$"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _patches(sc) -> list:
    return sc.kube.writes(verb="patch", resource="deployments")


def _replicas(sc) -> int:
    return sc.kube.get("Deployment", NS, NAME)["spec"]["replicas"]


def _max_num_seqs(sc) -> int | None:
    from collectors.parsers.flags import server_config_from_container

    obj = sc.kube.get("Deployment", NS, NAME)
    container = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    return server_config_from_container(container).max_num_seqs


def _plan_on_object(sc) -> str | None:
    """The plan the Deployment's gpumem.io/plan annotation names."""
    return (sc.kube.get("Deployment", NS, NAME)["metadata"].get("annotations") or {}).get(PLAN_ANNOTATION)


# ----------------------------------------------------------------------------- the actuator


@pytest.mark.parametrize(("outcome", "reason"), [
    (500, "HTTP 500"),
    (503, "HTTP 503"),
    ("drop", "connection closed without an answer"),
    ("stall", "no answer within 0.5 s"),
])
def test_a_write_that_landed_despite_its_answer_is_applied_after_a_re_read(cluster, outcome, reason):
    writer = KubeWriter(cluster.api("prod"), timeout_s=0.5)
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    cluster.kube.fail_after_write(WRITE, outcome, stall_s=1.5)
    written = apply_plan(writer, plan, "gpumem plan p-scale")
    assert words.en(written.unclear) == reason
    assert written.obj["metadata"]["annotations"][PLAN_ANNOTATION] == "p-scale" and written.obj["spec"]["replicas"] == 3
    assert _replicas(cluster) == 3 and len(_patches(cluster)) == 1, "one write, and no second one"
    assert len(cluster.kube.dry_runs(verb="patch")) == 1


def test_a_5xx_for_a_write_that_did_not_land_is_not_applied_and_says_how_that_is_known(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    cluster.kube.fail(WRITE, 503)  # answered without storing it
    with pytest.raises(TemporaryError) as e:
        apply_plan(writer, plan, "gpumem plan p-scale")
    assert e.value.code == "not_applied" and words.en(e.value.params["reason"]) == "HTTP 503"
    assert e.value.params["proof"] == Phrase("reason.annotation_absent", {"annotation": "gpumem.io/plan", "plan": "p-scale"})
    assert EN.phrase(e.value.params["proof"]) == "the object's gpumem.io/plan annotation is absent, not p-scale"
    assert _replicas(cluster) == 2 and len(_patches(cluster)) == 1


def test_when_the_object_cannot_be_read_again_the_outcome_is_unknown(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    cluster.kube.fail_after_write(WRITE, 503, then_refuse_reads=1)
    with pytest.raises(OutcomeUnknown) as e:
        apply_plan(writer, plan, "gpumem plan p-scale")
    assert (e.value.code, e.value.params["plan"], words.en(e.value.params["reason"])) == ("outcome_unknown", "p-scale", "HTTP 503")
    assert e.value.params["reread"] == "HTTP 503: injected failure 503"
    assert _replicas(cluster) == 3, "it did land: that is why nobody may say nothing was written"
    assert len(_patches(cluster)) == 1
    reads = cluster.kube.calls(method="GET", resource="deployments", name=NAME)
    assert [r.status for r in reads][-1] == 503


def test_reads_and_dry_runs_without_an_answer_are_temporary_errors_not_urllib3_ones(cluster):
    writer = KubeWriter(cluster.api("prod"), timeout_s=0.3)
    cluster.kube.add_latency(OBJECT, 1.0)
    with pytest.raises(TemporaryError) as e:
        writer.read("Deployment", NS, NAME)
    assert (e.value.code, words.en(e.value.params["reason"])) == ("timeout", "no answer within 0.3 s")
    cluster.kube.fail(r"dryRun=All", "drop")
    with pytest.raises(TemporaryError) as dropped:
        writer.patch("Deployment", NS, NAME, [], "application/json-patch+json", dry_run=True)
    assert type(dropped.value) is TemporaryError and dropped.value.code == "unreachable"
    assert _patches(cluster) == []


def test_a_write_that_never_reached_the_server_is_temporary_not_unknown(tmp_path):
    from kubernetes import client as k8s

    configuration = k8s.Configuration()
    configuration.host = "http://127.0.0.1:9"  # nothing listens: the connection is refused
    writer = KubeWriter(k8s.ApiClient(configuration), timeout_s=1.0)
    with pytest.raises(TemporaryError) as e:
        writer.patch("Deployment", NS, NAME, [], "application/json-patch+json")
    assert e.value.code == "unreachable" and not isinstance(e.value, OutcomeUnknown)


def test_a_rollback_whose_answer_was_lost_is_settled_by_a_re_read(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    apply_plan(writer, plan, "gpumem plan p-scale")
    cluster.kube.fail_after_write(WRITE, "drop")
    done = rollback_plan(writer, plan, "gpumem rollback p-scale")
    assert words.en(done.unclear) == "connection closed without an answer" and _replicas(cluster) == 2
    assert len(_patches(cluster)) == 2
    # a second plan whose rollback is answered 503 without being stored: not rolled back, known
    plan2 = _scale_plan(writer.read("Deployment", NS, NAME), 4, plan_id="p-four")
    apply_plan(writer, plan2, "gpumem plan p-four")
    cluster.kube.fail(WRITE, 503)
    with pytest.raises(TemporaryError) as e:
        rollback_plan(writer, plan2, "gpumem rollback p-four")
    assert e.value.code == "rollback_not_applied" and _replicas(cluster) == 4
    assert e.value.params["proof"] == Phrase("reason.still_written", {"paths": "/spec/replicas"})
    assert EN.phrase(e.value.params["proof"]) == "the values the plan wrote are still on the object: /spec/replicas"
    assert len(_patches(cluster)) == 4


def test_a_rollback_re_read_that_finds_someone_elses_values_is_a_conflict(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    apply_plan(writer, plan, "gpumem plan p-scale")

    class _Meanwhile(KubeWriter):  # someone scales to 7 while the rollback's answer is lost
        def patch(self, kind, namespace, name, body, content_type, dry_run=False):
            if dry_run:
                return super().patch(kind, namespace, name, body, content_type, dry_run)
            cluster.kube.fail(WRITE, 503)
            try:
                return super().patch(kind, namespace, name, body, content_type)
            finally:
                cluster.kube._failures.clear()
                writer.patch(kind, namespace, name, [{"op": "replace", "path": "/spec/replicas", "value": 7}],
                             content_type)

    with pytest.raises(ChangedAfterApply) as e:
        rollback_plan(_Meanwhile(cluster.api("prod")), plan, "gpumem rollback p-scale")
    assert e.value.code == "changed_after_apply"
    assert e.value.params["differences"] == [{"path": "/spec/replicas", "before": 2, "gpumem": 3, "now": 7}]


# ----------------------------------------------------------------------------- an HPA gpumem creates


def _hpa_plan(cluster, store: Store):
    """A plan that creates a queue-depth HPA (the scenario's own HPA removed first)."""
    for hpa in cluster.kube.list_objects("autoscaling", "horizontalpodautoscalers", NS):
        cluster.kube.remove("HorizontalPodAutoscaler", NS, hpa["metadata"]["name"])
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, cluster="prod", changes=(
        HpaOnQueueDepth(None, None, 4),), requested_by="U1")
    return writer, remediate.make_plan(store, writer, request, ApprovalPolicy())


def test_an_hpa_created_despite_a_503_is_applied_and_its_delete_despite_a_drop_is_rolled_back(cluster):
    store = Store.memory()
    writer, stored = _hpa_plan(cluster, store)
    assert stored.plan.patch_type == "create"
    name = stored.plan.target.name
    cluster.kube.fail_after_write(r"horizontalpodautoscalers\?fieldManager=gpumem$", 503)
    done = remediate.apply_now(store, writer, stored.plan.id, "cli:op")
    assert done.state == "applied" and cluster.kube.get("HorizontalPodAutoscaler", NS, name) is not None
    assert words.en(store.plan_audit(stored.plan.id)[-1].detail["unclear"]) == "HTTP 503"
    cluster.kube.fail_after_write(rf"horizontalpodautoscalers/{re.escape(name)}\?fieldManager=gpumem$", "drop")
    assert remediate.rollback_now(store, writer, stored.plan.id, "cli:op").state == "rolled_back"
    assert cluster.kube.get("HorizontalPodAutoscaler", NS, name) is None
    writes = cluster.kube.writes(resource="horizontalpodautoscalers")
    assert [w.verb for w in writes] == ["create", "delete"]


def test_an_hpa_create_answered_503_and_not_stored_is_not_applied(cluster):
    store = Store.memory()
    writer, stored = _hpa_plan(cluster, store)
    cluster.kube.fail(r"horizontalpodautoscalers\?fieldManager=gpumem$", 503)
    with pytest.raises(TemporaryError) as e:
        remediate.apply_now(store, writer, stored.plan.id, "cli:op")
    assert e.value.code == "not_applied" and e.value.params["proof"].key == "reason.not_there"
    assert EN.phrase(e.value.params["proof"]).endswith(" is not there")
    assert store.get(stored.plan.id).state == "failed"
    assert len(cluster.kube.writes(resource="horizontalpodautoscalers")) == 1


# ----------------------------------------------------------------------------- the store's states


def test_an_unknown_outcome_leaves_the_plan_applying_and_the_reconcile_pass_settles_it_at_once(cluster):
    store = Store.memory()
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, cluster="prod", flags=(("max-num-seqs", 64),), requested_by="U1")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy())
    cluster.kube.fail_after_write(WRITE, 500, then_refuse_reads=1)
    with pytest.raises(OutcomeUnknown):
        remediate.apply_now(store, writer, stored.plan.id, "cli:op")
    assert store.get(stored.plan.id).state == "applying"
    assert store.plan_audit(stored.plan.id)[-1].event == "outcome_unknown"
    # the reconcile pass does not wait for the age of a plan whose apply is known to be over
    (done,) = reconcile_applying(store, lambda name: KubeWriter(cluster.api("prod")))
    assert (done.outcome, store.get(stored.plan.id).state) == ("applied", "applied")
    assert store.plan_audit(stored.plan.id)[-1].actor == RECONCILE_ACTOR
    assert len(_patches(cluster)) == 1


def test_the_reconcile_pass_keeps_reading_an_unreadable_object_and_records_each_reason_once(cluster):
    store = Store.memory()
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, cluster="prod", flags=(("max-num-seqs", 64),), requested_by="U1")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy())
    cluster.kube.fail_after_write(WRITE, 503, then_refuse_reads=3)
    with pytest.raises(OutcomeUnknown):
        remediate.apply_now(store, writer, stored.plan.id, "cli:op")
    reader = KubeWriter(cluster.api("prod"))
    first, second = (reconcile_applying(store, lambda name: reader) for _ in range(2))
    assert [r.outcome for r in first + second] == ["unknown", "unknown"]
    assert [r.event for r in store.plan_audit(stored.plan.id)].count("reconcile") == 1
    (third,) = reconcile_applying(store, lambda name: reader)
    assert third.outcome == "applied" and store.get(stored.plan.id).state == "applied"


def test_a_rollback_with_an_unknown_outcome_is_settled_by_the_reconcile_pass(cluster):
    store = Store.memory()
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, cluster="prod", flags=(("max-num-seqs", 64),), requested_by="U1")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy())
    remediate.apply_now(store, writer, stored.plan.id, "cli:op")
    cluster.kube.fail_after_write(WRITE, 503, then_refuse_reads=1)
    with pytest.raises(OutcomeUnknown) as e:
        remediate.rollback_now(store, writer, stored.plan.id, "cli:op")
    assert e.value.code == "rollback_outcome_unknown" and store.get(stored.plan.id).state == "applied"
    (done,) = reconcile_applying(store, lambda name: KubeWriter(cluster.api("prod")))
    assert (done.outcome, done.rollback) == ("rolled_back", True)
    assert store.get(stored.plan.id).state == "rolled_back"
    assert _max_num_seqs(cluster) == 128
    assert reconcile_applying(store, lambda name: writer) == []
    assert len(_patches(cluster)) == 2


# ----------------------------------------------------------------------------- gpumem apply --yes


def _cli_plan(cluster, tmp_path, capsys) -> tuple[list[str], str]:
    db = tmp_path / "gpumem.db"
    common = ["--kubeconfig", str(cluster.kubeconfig), "--context", "prod", "--store", str(db), "--lang", "en"]
    assert main(["plan", f"{NS}/{NAME}", "--set", "max-num-seqs=64", "--json", *common]) == 0
    return common, json.loads(capsys.readouterr().out)["id"]


@pytest.mark.parametrize("outcome", [503, "drop"])
def test_cli_apply_reports_applied_with_its_rollback_when_the_write_landed_despite_the_answer(
        cluster, tmp_path, capsys, outcome):
    common, plan_id = _cli_plan(cluster, tmp_path, capsys)
    cluster.kube.fail_after_write(WRITE, outcome)
    assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 0
    out = capsys.readouterr().out
    assert f"Plan {plan_id}: applied" in out and f"gpumem rollback {plan_id} --yes" in out
    assert _plan_on_object(cluster) == plan_id and len(_patches(cluster)) == 1


def test_cli_apply_says_nothing_was_written_only_when_the_re_read_proves_it(cluster, tmp_path, capsys):
    common, plan_id = _cli_plan(cluster, tmp_path, capsys)
    cluster.kube.fail(WRITE, 503)
    assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"gpumem apply: plan {plan_id} not applied, nothing was written: the write's answer was "
                          "lost (HTTP 503), and read again the object does not carry the change (the object's "
                          f"gpumem.io/plan annotation is absent, not {plan_id}).")
    assert len(_patches(cluster)) == 1 and _plan_on_object(cluster) is None
    assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "failed"


def test_cli_apply_says_unknown_when_it_cannot_read_and_gpumem_plans_settles_it(cluster, tmp_path, capsys):
    common, plan_id = _cli_plan(cluster, tmp_path, capsys)
    cluster.kube.fail_after_write(WRITE, 503, then_refuse_reads=1)
    assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 3
    err = capsys.readouterr().err
    assert err.startswith("gpumem apply: outcome unknown: re-reading.") and "nothing was written" not in err
    assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "applying"
    assert main(["plans", "--all", "--json", *common]) == 0
    out = capsys.readouterr()
    assert f"plan {plan_id} (prod:llm/deployment/vllm-server) was left applying; its change is on the object: " \
           "now applied" in out.err
    assert {p["id"]: p["state"] for p in json.loads(out.out)}[plan_id] == "applied"
    assert len(_patches(cluster)) == 1


def test_the_watchs_reads_without_an_answer_are_temporary_errors(cluster):
    from bot.actuator.watch import look

    writer = KubeWriter(cluster.api("prod"), timeout_s=0.3)
    cluster.kube.add_latency(r"/namespaces/llm/pods\?", 1.0)
    with pytest.raises(TemporaryError) as e:
        look(writer, NS, NAME, None)
    assert (e.value.code, words.en(e.value.params["reason"]), e.value.params["source"]) == (
        "timeout", "no answer within 0.3 s", "kube:pods/llm")
    assert _patches(cluster) == []


def test_cli_rollback_with_an_unknown_outcome_says_so_and_gpumem_plans_settles_it(cluster, tmp_path, capsys):
    common, plan_id = _cli_plan(cluster, tmp_path, capsys)
    assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 0
    capsys.readouterr()
    cluster.kube.fail_after_write(WRITE, 503, then_refuse_reads=1)
    assert main(["rollback", plan_id, "--yes", *common]) == 3
    err = capsys.readouterr().err
    assert err.startswith(f"gpumem rollback: outcome unknown: re-reading. The rollback of plan {plan_id} was sent "
                          "and its answer was lost (HTTP 503)")
    assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "applied"
    assert main(["plans", "--all", "--json", *common]) == 0
    out = capsys.readouterr()
    assert out.err == f"gpumem: plan {plan_id} (prod:llm/deployment/vllm-server): its rollback's answer was lost; " \
                      "the object has the old values back: now rolled back\n"
    assert {p["id"]: p["state"] for p in json.loads(out.out)}[plan_id] == "rolled_back"
    assert _max_num_seqs(cluster) == 128 and len(_patches(cluster)) == 2


def test_the_stand_ins_faults_store_the_write_first_and_refuse_reads_only_so_many_times(cluster):
    writer = KubeWriter(cluster.api("prod"))
    cluster.kube.refuse_reads(OBJECT, 2)
    for _ in range(2):
        with pytest.raises(TemporaryError) as e:
            writer.read("Deployment", NS, NAME)
        assert e.value.params["status"] == 503
    assert writer.read("Deployment", NS, NAME)["metadata"]["name"] == NAME
    cluster.kube.fail_after_write(WRITE, 500)
    with pytest.raises(OutcomeUnknown) as unknown:
        writer.patch("Deployment", NS, NAME, [{"op": "replace", "path": "/spec/replicas", "value": 5}],
                     "application/json-patch+json")
    assert words.en(unknown.value.params["reason"]) == "HTTP 500" and _replicas(cluster) == 5
    (patch,) = _patches(cluster)
    assert patch.status == 200, "recorded with the status of the stored write"
    writer.patch("Deployment", NS, NAME, [{"op": "replace", "path": "/spec/replicas", "value": 2}],
                 "application/json-patch+json")
    assert _replicas(cluster) == 2 and [r.status for r in _patches(cluster)] == [200, 200]


def test_an_automatic_rollback_whose_answer_is_lost_is_unknown_then_settled(cluster):
    from datetime import UTC, datetime

    from tests.support.kube_fixtures import manual_clock

    clock = manual_clock(cluster, ready_after_s=30.0)
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    store = Store.memory()
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, flags=(("max-num-seqs", 512),), requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    cluster.kube.fail_after_write(WRITE, 503, then_refuse_reads=1)
    with pytest.raises(OutcomeUnknown) as e:
        remediate.watch_after(store, writer, stored.plan.id, 600, auto_rollback=True, poll_s=30, clock=clock,
                              sleep=clock.advance)
    assert e.value.code == "rollback_outcome_unknown" and store.get(stored.plan.id).state == "failed"
    assert store.plan_audit(stored.plan.id)[-1].event == "rollback_outcome_unknown"
    (done,) = reconcile_applying(store, lambda name: KubeWriter(cluster.api("prod")))
    assert (done.outcome, store.get(stored.plan.id).state) == ("rolled_back", "rolled_back")
    assert _max_num_seqs(cluster) == 128 and len(_patches(cluster)) == 2


def test_a_write_no_answer_came_for_is_not_called_not_written_until_the_api_server_gave_up(
        cluster, tmp_path, capsys):
    """A dropped connection and the change not on the object as read at once: the API server may
    still be at work on the request, so the outcome stays unknown (never "nothing was written");
    the reconcile pass says "not applied" only once IN_FLIGHT_S has passed."""
    from datetime import UTC, datetime, timedelta

    from runbooks.model.errors import IN_FLIGHT_S

    common, plan_id = _cli_plan(cluster, tmp_path, capsys)
    cluster.kube.fail(WRITE, "drop")  # the connection closes; the write is not stored
    assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 3
    err = capsys.readouterr().err
    assert err.startswith("gpumem apply: outcome unknown: re-reading.") and "nothing was written" not in err
    assert "the API server may still be at work on the request" in err
    store = Store.open(tmp_path / "gpumem.db")
    assert store.get(plan_id).state == "applying" and _plan_on_object(cluster) is None
    reader = KubeWriter(cluster.api("prod"))
    soon = datetime.now(UTC) + timedelta(seconds=IN_FLIGHT_S / 2)
    assert reconcile_applying(store, lambda name: reader, now=soon) == []
    assert store.get(plan_id).state == "applying"
    later = datetime.now(UTC) + timedelta(seconds=IN_FLIGHT_S + 5)
    (done,) = reconcile_applying(store, lambda name: reader, now=later)
    assert (done.plan_id, done.outcome) == (plan_id, "failed")
    assert store.get(plan_id).state == "failed" and reader.writes == 0


def test_a_write_no_answer_came_for_that_lands_late_is_applied_at_once_by_the_pass(cluster, tmp_path, capsys):
    from datetime import UTC, datetime, timedelta

    common, plan_id = _cli_plan(cluster, tmp_path, capsys)
    cluster.kube.fail(WRITE, "drop")
    assert main(["apply", plan_id, "--yes", "--no-watch", *common]) == 3
    capsys.readouterr()
    store = Store.open(tmp_path / "gpumem.db")
    plan = store.get(plan_id).plan
    cluster.kube._failures.clear()  # the request the server was still at work on lands now
    late = KubeWriter(cluster.api("prod"))
    late.patch(plan.target.kind, plan.target.namespace, plan.target.name,
               [{"op": "add", "path": f"/metadata/annotations/{PLAN_ANNOTATION.replace('/', '~1')}", "value": plan_id},
                *plan.patch], "application/json-patch+json")
    soon = datetime.now(UTC) + timedelta(seconds=5)
    (done,) = reconcile_applying(store, lambda name: KubeWriter(cluster.api("prod")), now=soon)
    assert (done.plan_id, done.outcome) == (plan_id, "applied") and store.get(plan_id).state == "applied"
