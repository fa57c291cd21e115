"""A plan left `applying` (the process was killed between the store's move and the end of its
write) is settled at start-up by reading the object: the write landed -> applied, else ->
failed with the reason, both by "gpumem-reconcile". Reconciliation never writes to the cluster.
kill -9 is simulated by moving the plan to `applying` (and writing, or not) and stopping there."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.apply import apply_plan
from bot.actuator.writer import KubeWriter
from bot.main import main
from bot.render.i18n import Catalog
from bot.service import remediate
from bot.service.reconcile import RECONCILE_ACTOR, reconcile_applying
from bot.store.db import Store
from runbooks.model.phrases import Phrase, phrase_of
from runbooks.remediation.policy import ApprovalPolicy
from tests.support.kube_fixtures import running_scenario

EN = Catalog.load("en")

NS, NAME = "llm", "vllm-server"
T0 = datetime.now(UTC) - timedelta(minutes=10)


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _left_applying(sc, store: Store, landed: bool, cluster: str | None = None, at: datetime = T0,
                   seqs: int = 64) -> str:
    """A plan approved and moved to `applying`, its write sent (`landed`) or not, then nothing."""
    writer = KubeWriter(sc.api("prod"))
    request = remediate.PlanRequest(NS, NAME, cluster=cluster, flags=(("max-num-seqs", seqs),), requested_by="U1")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=at)
    store.approve(stored.plan.id, "U2", stored.plan.content_hash, now=at)
    store.move(stored.plan.id, "applying", actor="U2", expect="approved", now=at)
    if landed:
        apply_plan(writer, stored.plan, "gpumem plan (killed before it recorded the write)")
    return stored.plan.id


def _moves(store: Store, plan_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(r.actor, r.from_state, r.to_state) for r in store.plan_audit(plan_id) if r.to_state]


def test_a_write_that_landed_is_reconciled_to_applied_without_writing(cluster, tmp_path):
    store = Store.open(tmp_path / "gpumem.db")
    plan_id = _left_applying(cluster, store, landed=True)
    writes = len(cluster.kube.writes())
    assert writes == 1
    reader = KubeWriter(cluster.api("prod"))
    (done,) = reconcile_applying(store, lambda cluster_name: reader)
    assert (done.plan_id, done.outcome, done.reason) == (plan_id, "applied", "")
    assert store.get(plan_id).state == "applied"
    assert _moves(store, plan_id)[-1] == (RECONCILE_ACTOR, "applying", "applied")
    detail = store.plan_audit(plan_id)[-1].detail
    obj = cluster.kube.get("Deployment", NS, NAME)
    assert detail["reconciled"] is True and detail["generation"] == obj["metadata"]["generation"]
    assert len(cluster.kube.writes()) == writes and reader.writes == 0 and len(cluster.kube.dry_runs()) == 1
    assert reconcile_applying(store, lambda cluster_name: reader) == [], "once settled, nothing more to do"


def test_a_write_that_did_not_land_is_reconciled_to_failed_with_the_reason(cluster, tmp_path):
    store = Store.open(tmp_path / "gpumem.db")
    plan_id = _left_applying(cluster, store, landed=False)
    (done,) = reconcile_applying(store, lambda cluster_name: KubeWriter(cluster.api("prod")))
    assert done.outcome == "failed" and done.reason == Phrase("reason.annotation_absent", {
        "annotation": "gpumem.io/plan", "plan": plan_id})
    assert EN.phrase(done.reason) == f"the object's gpumem.io/plan annotation is absent, not {plan_id}"
    assert store.get(plan_id).state == "failed"
    last = store.plan_audit(plan_id)[-1]
    assert (last.actor, last.to_state, phrase_of(last.detail["reason"])) == (RECONCILE_ACTOR, "failed", done.reason)
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []


def test_an_annotation_without_the_values_is_not_a_landed_write(cluster, tmp_path):
    store = Store.open(tmp_path / "gpumem.db")
    plan_id = _left_applying(cluster, store, landed=True)
    # someone put the old value back by hand after the write, keeping the annotation
    writer = KubeWriter(cluster.api("prod"))
    obj = writer.read("Deployment", NS, NAME)
    plan = store.get(plan_id).plan
    path = next(op["path"] for op in plan.patch if op["op"] in ("replace", "add"))
    old = next(op["value"] for op in plan.patch if op["op"] == "test" and op["path"] == path)
    writer.patch("Deployment", NS, NAME, [{"op": "replace", "path": path, "value": old}], "application/json-patch+json")
    assert obj["metadata"]["annotations"]["gpumem.io/plan"] == plan_id
    writes = len(cluster.kube.writes())
    (done,) = reconcile_applying(store, lambda cluster_name: KubeWriter(cluster.api("prod")))
    assert done.outcome == "failed" and done.reason == Phrase("reason.not_written", {"paths": path})
    assert EN.phrase(done.reason) == f"the values the plan writes are not on the object: {path}"
    assert len(cluster.kube.writes()) == writes


def test_a_plan_applying_right_now_is_left_alone_and_an_unreadable_one_stays_applying(cluster, tmp_path):
    store = Store.open(tmp_path / "gpumem.db")
    recent = _left_applying(cluster, store, landed=False, at=datetime.now(UTC) - timedelta(seconds=20))
    assert reconcile_applying(store, lambda cluster_name: KubeWriter(cluster.api("prod"))) == []
    assert store.get(recent).state == "applying"

    def unreachable(cluster_name):
        raise ConnectionError("connection refused")

    (done,) = reconcile_applying(store, unreachable, now=datetime.now(UTC) + timedelta(minutes=5))
    assert (done.outcome, done.reason) == ("unknown", "ConnectionError: connection refused")
    assert store.get(recent).state == "applying"
    row = store.plan_audit(recent)[-1]
    assert (row.event, row.actor, row.detail["outcome"]) == ("reconcile", RECONCILE_ACTOR, "unknown")


def test_gpumem_plans_and_apply_reconcile_first(cluster, tmp_path, capsys):
    db = tmp_path / "gpumem.db"
    store = Store.open(db)
    landed = _left_applying(cluster, store, landed=True, cluster="prod")
    store.close()
    common = ["--kubeconfig", str(cluster.kubeconfig), "--context", "prod", "--store", str(db), "--lang", "en"]
    writes = len(cluster.kube.writes())
    assert main(["plans", "--all", "--json", *common]) == 0
    out = capsys.readouterr()
    assert out.err == f"gpumem: plan {landed} (prod:llm/deployment/vllm-server) was left applying; its change is " \
                      "on the object: now applied\n"
    assert {p["id"]: p["state"] for p in json.loads(out.out)}[landed] == "applied"
    assert len(cluster.kube.writes()) == writes
    # `gpumem apply` of another plan settles a plan left applying before it starts its own
    store = Store.open(db)
    stuck = _left_applying(cluster, store, landed=False, cluster="prod")
    store.close()
    assert main(["plan", NS + "/" + NAME, "--replicas", "3", "--json", *common]) == 0
    fresh = json.loads(capsys.readouterr().out)["id"]
    assert main(["apply", fresh, "--yes", "--no-watch", *common]) == 0
    err = capsys.readouterr().err
    assert f"gpumem: plan {stuck} (prod:llm/deployment/vllm-server) was left applying; its change is not on the " \
           f"object (the object's gpumem.io/plan annotation is {landed}, not {stuck}): now failed" in err
    assert [r.status for r in cluster.kube.writes()][writes:] == [200], "one write: the new plan's"
    store = Store.open(db)
    assert (store.get(stuck).state, store.get(fresh).state) == ("failed", "applied")


def test_gpumem_serve_settles_plans_left_applying_when_the_bot_is_built(cluster, tmp_path):
    from bot.config.settings import load_settings
    from bot.slack.app import build_bot
    from bot.slack.serve import choose_runner
    from tests.support.fake_slack import FakeSlack
    from tests.support.slack_kit import env_for, live_config

    db = tmp_path / "gpumem.db"
    store = Store.open(db)
    landed = _left_applying(cluster, store, landed=True, cluster="prod")
    store.close()
    writes, dry_runs = len(cluster.kube.writes()), len(cluster.kube.dry_runs())
    with FakeSlack() as fake:
        config = live_config(tmp_path, cluster.kubeconfig)
        with open(config, "a") as f:
            f.write(f"store: {{path: {db}}}\n")
        bot = build_bot(load_settings(config, env_for(fake)), choose_runner(load_settings(config, env_for(fake))))
        try:
            assert bot.store is not None
            with bot.store.use() as s:
                assert s.get(landed).state == "applied"
                assert _moves(s, landed)[-1] == (RECONCILE_ACTOR, "applying", "applied")
        finally:
            bot.close(timeout_s=5)
    assert (len(cluster.kube.writes()), len(cluster.kube.dry_runs())) == (writes, dry_runs)
    assert cluster.kube.calls(verb="get", resource="deployments", name=NAME), "the object was read"


def test_serve_edits_the_plan_messages_of_plans_settled_at_start_up_once_it_is_up(cluster, tmp_path):
    """The plan message of a plan left applying is edited to its outcome, with a thread reply:
    applied (the write had landed; Roll back) and failed (it had not; the reason, Plan again).
    Not while the bot is built: once it is up, with the background. Nothing is written."""
    from slack_sdk import WebClient

    from bot.config.settings import load_settings
    from bot.render import slack_remediation as P
    from bot.service.approvals import record_message
    from bot.slack.app import build_bot
    from bot.slack.serve import choose_runner
    from tests.support.fake_slack import FakeSlack
    from tests.support.slack_kit import CHANNEL, env_for, live_config

    db = tmp_path / "gpumem.db"
    store = Store.open(db)
    lost = _left_applying(cluster, store, landed=False, cluster="prod", seqs=64)  # killed before its write
    landed = _left_applying(cluster, store, landed=True, cluster="prod", seqs=32)  # killed after it
    cli = _left_applying(cluster, store, landed=False, cluster="prod", seqs=16)    # made on the CLI: no message
    writes, dry_runs = len(cluster.kube.writes()), len(cluster.kube.dry_runs())
    with FakeSlack() as fake:
        slack = WebClient(token=fake.token, base_url=fake.api_url)
        incident = slack.chat_postMessage(channel=CHANNEL, text="diagnosis")["ts"]
        where = {}
        for plan_id in (lost, landed):
            msg = P.plan_message(store.get(plan_id), "en", "approved", users=("U2",))
            where[plan_id] = slack.chat_postMessage(channel=CHANNEL, thread_ts=incident, **msg)["ts"]
            record_message(store, plan_id, CHANNEL, where[plan_id], incident)
        store.close()
        config = live_config(tmp_path, cluster.kubeconfig)
        with open(config, "a") as f:
            f.write(f"store: {{path: {db}}}\n")
        settings = load_settings(config, env_for(fake))
        bot = build_bot(settings, choose_runner(settings))
        try:
            with bot.store.use() as s:
                assert [s.get(p).state for p in (lost, landed, cli)] == ["failed", "applied", "failed"]
            assert fake.calls_to("chat.update") == [], "nothing is edited before the bot is up"
            bot.start_background()
            (notices,) = bot.background
            assert notices.join(20)
        finally:
            bot.close(timeout_s=5)
        applied = fake.messages[(CHANNEL, where[landed])]
        assert "Applied; reconciled by reading the object again: the write had landed." in applied["text"]
        assert [e["action_id"] for b in applied["blocks"] if b.get("type") == "actions"
                for e in b["elements"]] == [P.ROLLBACK_ACTION]
        failed = fake.messages[(CHANNEL, where[lost])]
        assert (f"Failed; reconciled by reading the object again: the write had not landed (the object's "
                f"gpumem.io/plan annotation "
                f"is {landed}, not {lost}).") in failed["text"]
        assert [e["action_id"] for b in failed["blocks"] if b.get("type") == "actions"
                for e in b["elements"]] == [P.REPLAN_ACTION]
        assert len(fake.calls_to("chat.update", ok_only=True)) == 2
        replies = {c.args["text"].split(" was left")[0]: c.args["text"] for c in fake.thread(CHANNEL, incident)[2:]}
        assert set(replies) == {f"Plan {landed}", f"Plan {lost}"}
        assert "the write had landed, and the plan is applied" in replies[f"Plan {landed}"]
        assert "restores --max-num-seqs 32 -> 128." in replies[f"Plan {landed}"]
        assert (f"does not carry its change: the object's gpumem.io/plan annotation is {landed}, not {lost}. "
                "The plan is failed") in replies[f"Plan {lost}"]
    assert (len(cluster.kube.writes()), len(cluster.kube.dry_runs())) == (writes, dry_runs)
