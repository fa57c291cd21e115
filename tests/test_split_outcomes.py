"""A pool split's phase 1 (`--split-pools`: create `<name>-long`, a Deployment and a Service)
whose write answer is lost is settled by reading each object again, as a single-object plan is:
all there -> applied; none -> not applied, nothing was written; some -> partly applied (failed,
naming which, and its rollback deletes what exists); unreadable -> unknown, the plan stays
`applying` and the reconcile pass settles it later. The rollback's deletes likewise. The stand-in
API server stores a create and loses its answer (`fail_after_write`), answers 503 without
storing it (`fail`), or cannot be read for a while (`refuse_reads`); each test counts the writes
it received."""

from __future__ import annotations

import pytest

from bot.actuator.split_apply import read_created
from bot.actuator.writer import KubeWriter
from bot.render.i18n import Catalog
from bot.service import remediate
from bot.service.reconcile import RECONCILE_ACTOR, reconcile_applying
from bot.store.db import Store
from runbooks.model.errors import OutcomeUnknown
from runbooks.model.phrases import Phrase
from tests.support import words
from tests.support.kube_fixtures import run_cli, running_scenario

EN = Catalog.load("en")

TARGET = "llm/vllm-server"
NS, LONG = "llm", "vllm-server-long"
#: the real creates (a dry run carries `&dryRun=All` after the query)
DEPLOY_POST = r"namespaces/llm/deployments\?fieldManager=gpumem$"
SERVICE_POST = r"namespaces/llm/services\?fieldManager=gpumem$"
#: the reads of the objects phase 1 creates
DEPLOY_READ = rf"deployments/{LONG}$"
SERVICE_READ = rf"services/{LONG}$"
#: their deletes
DEPLOY_DELETE = rf"deployments/{LONG}\?fieldManager=gpumem$"
SERVICE_DELETE = rf"services/{LONG}\?fieldManager=gpumem$"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _plan(capsys, sc, store) -> str:
    rc, plan = run_cli(capsys, sc, store, "plan", TARGET, "--split-pools", "--json")
    assert rc == 0 and plan["action"] == "split_pools", plan
    return plan["id"]


def _apply(capsys, sc, store, plan_id: str) -> tuple[int, str]:
    rc, out = run_cli(capsys, sc, store, "apply", plan_id, "--yes", "--no-watch")
    return rc, out if isinstance(out, str) else str(out)


def _creates(sc) -> list[tuple[str, str]]:
    return [(r.resource, r.verb) for r in sc.kube.writes(verb="create")]


def _deletes(sc) -> list[str]:
    return [r.resource for r in sc.kube.writes(verb="delete")]


def _there(sc) -> tuple[bool, bool]:
    return sc.kube.get("Deployment", NS, LONG) is not None, sc.kube.get("Service", NS, LONG) is not None


def _state(store_path, plan_id: str) -> str:
    store = Store.open(store_path)
    try:
        return store.get(plan_id).state
    finally:
        store.close()


def _audit(store_path, plan_id: str) -> list:
    store = Store.open(store_path)
    try:
        return store.plan_audit(plan_id)
    finally:
        store.close()


def _reconcile(sc, store_path) -> list:
    store = Store.open(store_path)
    try:
        return reconcile_applying(store, lambda _cluster: KubeWriter(sc.api("prod")))
    finally:
        store.close()


class _UnreadableAfter(KubeWriter):
    """A writer after whose real write of `kind` the API server refuses `times` reads matching
    `pattern` (the reads before the write, the guards', are served)."""

    def __init__(self, sc, kind: str, pattern: str, times: int = 1):
        super().__init__(sc.api("prod"))
        self.sc, self.kind, self.pattern, self.times = sc, kind, pattern, times

    def create(self, kind, namespace, body, dry_run=False):
        try:
            return super().create(kind, namespace, body, dry_run)
        finally:
            if kind == self.kind and not dry_run:
                self.sc.kube.refuse_reads(self.pattern, times=self.times)

    def delete(self, kind, namespace, name, preconditions, dry_run=False):
        try:
            return super().delete(kind, namespace, name, preconditions, dry_run)
        finally:
            if kind == self.kind and not dry_run:
                self.sc.kube.refuse_reads(self.pattern, times=self.times)


def _unknown_apply(sc, store_path, plan_id: str, kind: str, pattern: str) -> OutcomeUnknown:
    store = Store.open(store_path)
    try:
        with pytest.raises(OutcomeUnknown) as e:
            remediate.apply_now(store, _UnreadableAfter(sc, kind, pattern), plan_id, "cli:op")
        return e.value
    finally:
        store.close()


def _unknown_rollback(sc, store_path, plan_id: str, kind: str, pattern: str) -> OutcomeUnknown:
    store = Store.open(store_path)
    try:
        with pytest.raises(OutcomeUnknown) as e:
            remediate.rollback_now(store, _UnreadableAfter(sc, kind, pattern), plan_id, "cli:op")
        return e.value
    finally:
        store.close()


# ----------------------------------------------------------------------------- apply


@pytest.mark.parametrize(("where", "outcome", "reason"), [
    (DEPLOY_POST, 503, "HTTP 503"),
    (SERVICE_POST, "drop", "connection closed without an answer"),
])
def test_creates_that_landed_despite_a_lost_answer_are_applied_after_a_re_read(cluster, tmp_path, capsys,
                                                                               where, outcome, reason):
    store = tmp_path / "gpumem.db"
    plan_id = _plan(capsys, cluster, store)
    cluster.kube.fail_after_write(where, outcome)
    rc, out = _apply(capsys, cluster, store, plan_id)
    assert rc == 0 and _state(store, plan_id) == "applied", out
    applied = next(r for r in _audit(store, plan_id) if r.to_state == "applied")
    assert words.en(applied.detail["unclear"]) == reason
    assert _creates(cluster) == [("deployments", "create"), ("services", "create")], "each sent once"
    assert _there(cluster) == (True, True)
    assert "nothing was written" not in out


def test_a_deployment_create_answered_503_and_not_stored_is_not_applied_and_nothing_more_is_sent(
        cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _plan(capsys, cluster, store)
    cluster.kube.fail(DEPLOY_POST, 503)
    rc, out = _apply(capsys, cluster, store, plan_id)
    assert rc == 3 and _state(store, plan_id) == "failed"
    assert f"plan {plan_id} not applied, nothing was written" in out
    assert f"Deployment/{LONG} is not there; Service/{LONG} is not there" in out
    assert _creates(cluster) == [("deployments", "create")], "the Service is never sent after a lost answer"
    assert _there(cluster) == (False, False)


def test_a_service_create_lost_and_not_stored_is_partly_applied_and_its_rollback_deletes_the_deployment(
        cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _plan(capsys, cluster, store)
    cluster.kube.fail(SERVICE_POST, 503)
    rc, out = _apply(capsys, cluster, store, plan_id)
    cluster.kube._failures.clear()
    assert rc == 2 and _state(store, plan_id) == "failed", out
    assert f"plan {plan_id} partly applied" in out and "nothing was written" not in out
    assert f"read again Deployment/{LONG} is there but not all of it: Service/{LONG} is not there" in out
    failed = next(r for r in _audit(store, plan_id) if r.to_state == "failed")
    assert (failed.detail["error"], failed.detail["created"]) == ("split_partly_applied", f"Deployment/{LONG}")
    assert _creates(cluster) == [("deployments", "create"), ("services", "create")]
    assert _there(cluster) == (True, False)

    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    assert rc == 0 and _state(store, plan_id) == "rolled_back", out
    assert _deletes(cluster) == ["deployments"], "only what exists is deleted"
    assert _there(cluster) == (False, False)


def test_an_unreadable_outcome_stays_applying_and_the_reconcile_pass_settles_it(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _plan(capsys, cluster, store)
    cluster.kube.fail_after_write(DEPLOY_POST, "drop")
    e = _unknown_apply(cluster, store, plan_id, "Deployment", DEPLOY_READ)
    assert (words.en(e.params["reason"]), e.params["reread"]) == ("connection closed without an answer",
                                                        "HTTP 503: injected failure 503")
    assert _state(store, plan_id) == "applying"
    unknown = [r for r in _audit(store, plan_id) if r.event == "outcome_unknown"]
    assert len(unknown) == 1 and unknown[0].detail["reread"] == "HTTP 503: injected failure 503"
    assert _creates(cluster) == [("deployments", "create")] and _there(cluster) == (True, False)

    # still unreadable: the pass says so once and moves nothing
    cluster.kube.refuse_reads(DEPLOY_READ, times=2)
    first, again = _reconcile(cluster, store), _reconcile(cluster, store)
    assert [r.outcome for r in first + again] == ["unknown", "unknown"]
    assert _state(store, plan_id) == "applying"
    assert len([r for r in _audit(store, plan_id) if r.event == "reconcile"]) == 1

    # readable: the Deployment is there, the Service never was: partly applied, failed (`gpumem plans` runs the pass)
    rc, out = run_cli(capsys, cluster, store, "plans", "--all")
    assert rc == 0
    assert (f"gpumem: plan {plan_id} (prod:llm/deployment/vllm-server) was left applying; " in str(out)
            and f"only part of what it creates is there (Deployment/{LONG} is there with gpumem.io/plan naming "
                f"the plan; Service/{LONG} is not there): now failed" in str(out)), out
    moved = next(r for r in _audit(store, plan_id) if r.to_state == "failed")
    assert (moved.actor, moved.detail["error"]) == (RECONCILE_ACTOR, "split_partly_applied")
    assert len(cluster.kube.writes()) == 1, "reconciling only reads"

    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    assert rc == 0 and _state(store, plan_id) == "rolled_back", out
    assert _deletes(cluster) == ["deployments"] and _there(cluster) == (False, False)


def test_the_reconcile_pass_settles_a_phase1_whose_service_landed_as_applied(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _plan(capsys, cluster, store)
    cluster.kube.fail_after_write(SERVICE_POST, 503)
    e = _unknown_apply(cluster, store, plan_id, "Service", SERVICE_READ)
    assert words.en(e.params["reason"]) == "HTTP 503" and _state(store, plan_id) == "applying"
    (settled,) = _reconcile(cluster, store)
    assert settled.outcome == "applied" and _state(store, plan_id) == "applied"
    assert _creates(cluster) == [("deployments", "create"), ("services", "create")]
    rc, out = run_cli(capsys, cluster, store, "plans", "--all")
    assert rc == 0 and plan_id in str(out) and len(cluster.kube.writes()) == 2, "plans only reads"


def test_someone_elses_object_under_the_name_is_not_counted_as_created(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _plan(capsys, cluster, store)
    stored = Store.open(store)
    plan = stored.get(plan_id).plan
    stored.close()
    writer = KubeWriter(cluster.api("prod"))
    service = cluster.kube.get("Service", NS, "vllm-server")
    other = {"apiVersion": "v1", "kind": "Service",
             "metadata": {"name": LONG, "namespace": NS, "annotations": {"gpumem.io/plan": "p-someone"}},
             "spec": {"selector": {"app": "x"}, "ports": service["spec"]["ports"]}}
    writer.create("Service", NS, other)
    found = read_created(writer, plan)
    assert found.there == () and found.outcome == "not_applied"
    assert [EN.phrase(a) for a in found.absent] == [
        f"Deployment/{LONG} is not there",
        f"Service/{LONG} is there, but its gpumem.io/plan annotation is p-someone, not {plan_id}"]
    assert found.absent[1] == Phrase("reason.split_not_ours", {"what": f"Service/{LONG}", "annotation": "gpumem.io/plan",
                                                               "named": "p-someone", "plan": plan_id})


# ----------------------------------------------------------------------------- rollback


def _applied(capsys, sc, store) -> str:
    plan_id = _plan(capsys, sc, store)
    rc, out = _apply(capsys, sc, store, plan_id)
    assert rc == 0, out
    return plan_id


def test_a_delete_that_landed_despite_a_dropped_answer_goes_on_and_is_rolled_back(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _applied(capsys, cluster, store)
    cluster.kube.fail_after_write(SERVICE_DELETE, "drop")
    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    assert rc == 0 and _state(store, plan_id) == "rolled_back", out
    rolled = next(r for r in _audit(store, plan_id) if r.to_state == "rolled_back")
    assert words.en(rolled.detail["unclear"]) == "connection closed without an answer"
    assert _deletes(cluster) == ["services", "deployments"] and _there(cluster) == (False, False)


def test_a_lost_delete_that_did_not_land_is_not_rolled_back_or_partly(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _applied(capsys, cluster, store)
    cluster.kube.fail(SERVICE_DELETE, 503)  # answered 503, nothing deleted
    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    cluster.kube._failures.clear()
    assert rc == 3 and _state(store, plan_id) == "applied"
    assert f"plan {plan_id} not rolled back, nothing was written" in out and f"Service/{LONG} is still there" in out
    assert _deletes(cluster) == ["services"] and _there(cluster) == (True, True)

    cluster.kube.fail(DEPLOY_DELETE, 503)  # the Service goes, the Deployment's delete is answered 503
    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    cluster.kube._failures.clear()
    assert rc == 3 and _state(store, plan_id) == "applied"
    assert f"plan {plan_id} partly rolled back" in out and "nothing was written" not in out
    assert f"Service/{LONG} is deleted and Deployment/{LONG}" in out
    assert _deletes(cluster) == ["services", "services", "deployments"] and _there(cluster) == (True, False)

    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    assert rc == 0 and _state(store, plan_id) == "rolled_back", out
    assert _deletes(cluster) == ["services", "services", "deployments", "deployments"]
    assert _there(cluster) == (False, False)


def test_an_unreadable_delete_is_recorded_and_the_reconcile_pass_settles_it(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _applied(capsys, cluster, store)
    cluster.kube.fail_after_write(SERVICE_DELETE, 503)
    e = _unknown_rollback(cluster, store, plan_id, "Service", SERVICE_READ)
    assert (e.code, words.en(e.params["reason"])) == ("rollback_outcome_unknown", "HTTP 503")
    assert _state(store, plan_id) == "applied"
    assert [r.event for r in _audit(store, plan_id)][-1] == "rollback_outcome_unknown"
    assert _deletes(cluster) == ["services"] and _there(cluster) == (True, False)

    # the Deployment's delete was never sent: not rolled back, the plan keeps its state
    (settled,) = _reconcile(cluster, store)
    assert (settled.outcome, settled.rollback) == ("rollback_not_applied", True)
    assert settled.reason == Phrase("reason.created_still_there", {"objects": f"Deployment/{LONG}"})
    assert EN.phrase(settled.reason) == f"still there: Deployment/{LONG}" and _state(store, plan_id) == "applied"
    assert _reconcile(cluster, store) == [], "settled once"

    rc, out = run_cli(capsys, cluster, store, "rollback", plan_id, "--yes")
    assert rc == 0 and _state(store, plan_id) == "rolled_back", out
    assert _deletes(cluster) == ["services", "deployments"] and _there(cluster) == (False, False)


def test_a_rollback_the_pass_finds_complete_is_rolled_back(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan_id = _applied(capsys, cluster, store)
    cluster.kube.fail_after_write(DEPLOY_DELETE, "drop")
    e = _unknown_rollback(cluster, store, plan_id, "Deployment", DEPLOY_READ)
    assert e.params["deleted"] == f"Service/{LONG}" and _state(store, plan_id) == "applied"
    (settled,) = _reconcile(cluster, store)
    assert (settled.outcome, settled.rollback) == ("rolled_back", True) and _state(store, plan_id) == "rolled_back"
    assert _deletes(cluster) == ["services", "deployments"] and _there(cluster) == (False, False)


# ----------------------------------------------------------------------------- Slack


def _slack_phase1(bot, fake, sc, tmp_path) -> tuple[str, str, str]:
    """A phase-1 plan posted from the mixed-pool diagnosis' Plan button (asked by SECOND):
    (diagnosis ts, plan id, plan message ts)."""
    import tests.test_slack_remediation as R
    from bot.render import slack_remediation as P
    from bot.render.slack_triage import diagnosis_message
    from bot.service.approvals import plannable_actions
    from bot.service.notes import record_triage
    from tests.support.slack_kit import CHANNEL, USER
    from tests.test_slack_split_pools import _mixed_pool_report, _posted_in_thread

    report = _mixed_pool_report()
    store = Store.open(tmp_path / "gpumem.db")
    record_triage(store, report, actor=USER, channel=CHANNEL, cluster="prod")
    store.close()
    plannable = plannable_actions(report, bot.settings, TARGET, "prod")
    ts = bot.poster.post(CHANNEL, diagnosis_message(report, "en", target=TARGET, context="prod",
                                                    plan_blocks=P.plan_buttons(report, "en", TARGET, "prod", plannable)))
    button = R._plan_button(fake.messages[(CHANNEL, ts)], "split_pools")
    R._click(bot, fake, button["action_id"], button["value"], ts, R.SECOND, n=1)
    plan_id, plan_ts = _posted_in_thread(fake, ts, 1)
    return ts, plan_id, plan_ts


def test_slack_approve_partly_applied_says_which_and_roll_back_deletes_what_exists(tmp_path):
    import tests.test_slack_remediation as R
    from bot.render import slack_remediation as P
    from tests.test_plan_expiry import _buttons

    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        ts, plan_id, plan_ts = _slack_phase1(bot, fake, sc, tmp_path)
        sc.kube.fail(SERVICE_POST, 503)  # the Service's create is answered 503 and not stored
        R._click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, R.APPROVER, thread_ts=ts, n=2)
        text = R._wait_edit(fake, plan_ts, "Partly applied")
        sc.kube._failures.clear()
        assert (f"Partly applied: the write's answer was lost, and read again Deployment/{LONG} is there with "
                f"gpumem.io/plan naming the plan; Service/{LONG} is not there.") in text
        assert "nothing was written" not in text
        assert _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)]
        assert _creates(sc) == [("deployments", "create"), ("services", "create")] and _there(sc) == (True, False)

        R._click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, R.APPROVER, thread_ts=ts, n=3)
        R._wait_edit(fake, plan_ts, "Rolled back by")
        assert _deletes(sc) == ["deployments"] and _there(sc) == (False, False)
        assert _state(tmp_path / "gpumem.db", plan_id) == "rolled_back"


def test_slack_unknown_phase1_is_settled_by_the_leaders_pass_and_the_message_edited(tmp_path):
    import tests.test_slack_remediation as R
    from bot.render import slack_remediation as P
    from bot.serve import serve_background
    from tests.test_plan_expiry import _buttons

    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        ts, plan_id, plan_ts = _slack_phase1(bot, fake, sc, tmp_path)
        desk = bot.handlers.remediation
        real = desk.writer_for
        desk.writer_for = lambda cluster: _UnreadableAfter(sc, "Deployment", DEPLOY_READ)
        sc.kube.fail_after_write(DEPLOY_POST, "drop")
        R._click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, R.APPROVER, thread_ts=ts, n=2)
        text = R._wait_edit(fake, plan_ts, "Outcome unknown")
        desk.writer_for = real
        assert "the object could not be read again (HTTP 503: injected failure 503)" in text and "by hand" not in text
        assert _buttons(fake, plan_ts) == [] and _state(tmp_path / "gpumem.db", plan_id) == "applying"
        assert _creates(sc) == [("deployments", "create")]

        (scheduler,) = serve_background(bot)
        try:
            scheduler.tick()  # the leader's first round runs the reconcile pass
        finally:
            scheduler.shutdown()
        edited = R._wait_edit(fake, plan_ts, "Partly applied")
        assert f"Service/{LONG} is not there" in edited and _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)]
        reply = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                              and f"Plan {plan_id} was left applying" in (c.args.get("text") or ""))[-1]
        assert "only part of it is on the cluster" in reply.args["text"]
        assert _creates(sc) == [("deployments", "create")], "the pass only reads"
