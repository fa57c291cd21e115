"""Plans nobody approved in time: the expiry sweep moves each to `expired` (one store transition,
audited by gpumem-expiry) and edits its Slack plan message to the expired stage with Plan again,
so an unattended message keeps no Approve button. It runs on the scheduler's leader only (and
at its first round); an approval that lands at the same moment is left alone; nothing is ever
sent to the cluster."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.actuator.writer import KubeWriter
from bot.config.settings import SettingsError, load_settings
from bot.render import slack_remediation as P
from bot.scheduler.leader import FileLockElector
from bot.scheduler.runner import HandoverScheduler
from bot.serve import serve_background
from bot.service import approvals, remediate
from bot.service.expiry import APPROVED_GRACE_S, EXPIRY_ACTOR, expire_due
from bot.slack.app import build_bot
from bot.slack.plan_notices import PlanNotices
from bot.slack.serve import choose_runner
from bot.slack.work import SharedStore
from bot.store.db import Store
from runbooks.remediation.policy import ApprovalPolicy
from tests.support.fake_slack import FakeSlack
from tests.support.kube_fixtures import running_scenario
from tests.support.slack_kit import CHANNEL, env_for, live_config
from tests.test_slack_remediation import (
    APPROVER,
    _click,
    _diagnosis,
    _edits,
    _plan,
    _wait_edit,
    remediation_bot,
)
from tests.test_store import T0
from tests.test_store import _plan as stored_plan

# ----------------------------------------------------------------------------- the store's moves


def _moves(store: Store, plan_id: str) -> list[tuple[str, str | None, str | None]]:
    return [(r.actor, r.from_state, r.to_state) for r in store.plan_audit(plan_id) if r.to_state]


def test_the_sweep_expires_proposed_and_long_approved_plans_past_their_time_and_audits_each():
    store = Store.memory()
    store.add_plan(stored_plan("p-due", name="a"), now=T0)                         # expires T0+15
    store.add_plan(replace(stored_plan("p-fresh", name="b"), expires_at=T0 + timedelta(minutes=30)), now=T0)
    store.add_plan(stored_plan("p-lost", name="c"), now=T0)                         # approved, apply never ran
    store.approve("p-lost", "U2", store.get("p-lost").plan.content_hash, now=T0 + timedelta(minutes=1))
    store.add_plan(stored_plan("p-starting", name="d"), now=T0)                     # approved just before expiry
    store.approve("p-starting", "U2", store.get("p-starting").plan.content_hash,
                  now=T0 + timedelta(minutes=15) - timedelta(seconds=5))

    now = T0 + timedelta(minutes=16)
    moved = expire_due(store, now)
    assert [s.plan.id for s in moved] == ["p-due", "p-lost"]
    assert [s.state for s in moved] == ["expired", "expired"]
    assert _moves(store, "p-due")[-1] == (EXPIRY_ACTOR, "proposed", "expired")
    assert _moves(store, "p-lost")[-1] == (EXPIRY_ACTOR, "approved", "expired")
    # not yet due, and an approval younger than the grace: its apply is starting
    assert (store.get("p-fresh").state, store.get("p-starting").state) == ("proposed", "approved")
    assert expire_due(store, now) == [], "a second sweep finds nothing more"
    later = T0 + timedelta(minutes=15) + timedelta(seconds=APPROVED_GRACE_S)
    assert [s.plan.id for s in expire_due(store, later)] == ["p-starting"]
    assert [r.actor for r in store.audit() if r.to_state == "expired"] == [EXPIRY_ACTOR] * 3


class _ApprovedMeanwhile(Store):
    """A store where an approver's click lands between the sweep's look and its move."""

    def move(self, plan_id, to_state, **kw):
        if to_state == "expired" and not self.get(plan_id).approvals:
            self.approve(plan_id, "U2", self.get(plan_id).plan.content_hash,
                         now=T0 + timedelta(minutes=15) - timedelta(milliseconds=1))
        return super().move(plan_id, to_state, **kw)


def test_an_approval_between_the_sweeps_look_and_its_move_wins_by_the_stores_transition():
    store = _ApprovedMeanwhile.memory()
    store.add_plan(stored_plan("p1"), now=T0)
    # no grace: only the transition (expecting `proposed`, as the sweep found it) decides
    assert store.expire_due(T0 + timedelta(minutes=15), actor=EXPIRY_ACTOR, approved_grace_s=0.0) == []
    after = store.get("p1")
    assert (after.state, after.approvals) == ("approved", ("U2",))
    assert [r.event for r in store.plan_audit("p1")] == ["proposed", "approval", "approved"]


# ----------------------------------------------------------------------------- in Slack


def _message_recorded(store: Store, plan_id: str, timeout: float = 10.0) -> tuple[str, str, str | None]:
    """Where the plan message is, once the desk recorded it (right after the post)."""
    deadline = time.monotonic() + timeout
    while (found := approvals.slack_message(store, plan_id)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert found is not None, "the plan message was never recorded"
    return found


def _buttons(fake, ts: str) -> list[tuple[str, str]]:
    return [(e["action_id"], e["value"]) for b in fake.messages[(CHANNEL, ts)]["blocks"] if b.get("type") == "actions"
            for e in b["elements"]]


def test_a_plan_left_proposed_past_its_expiry_is_expired_by_one_sweep_and_its_message_edited(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        store = Store.open(tmp_path / "gpumem.db")
        assert _message_recorded(store, plan_id)[:2] == (CHANNEL, plan_ts)
        assert [a for a, _ in _buttons(fake, plan_ts)] == [P.APPROVE_ACTION, P.REJECT_ACTION]

        later = datetime.now(UTC) + timedelta(minutes=16)
        assert bot.notices.sweep(later) == [plan_id]
        (edited,) = _edits(fake, plan_ts)
        assert "Expired at" in edited and "nothing was applied" in edited
        assert _buttons(fake, plan_ts) == [(P.REPLAN_ACTION, plan_id)], "Approve gone, Plan again offered"
        assert store.get(plan_id).state == "expired"
        row = store.plan_audit(plan_id)[-1]
        assert (row.actor, row.event, row.from_state, row.to_state) == (EXPIRY_ACTOR, "expired", "proposed", "expired")
        assert bot.notices.sweep(later + timedelta(minutes=1)) == [] and len(_edits(fake, plan_ts)) == 1
        assert sc.kube.writes() == [] and sc.kube.dry_runs() == []

        # Plan again from the edited message makes a fresh plan; still nothing written
        _click(bot, fake, P.REPLAN_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=71)
        fresh = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                              and "Waiting for" in (c.args.get("text") or ""), n=2, timeout=20)[-1]
        assert plan_id not in fresh.args["text"] and sc.kube.writes() == []
        store.close()


class _HeldJobs:
    """The desk's apply executor, holding each job until released: the approval has happened,
    its apply has not started (the plan is `approved`)."""

    def __init__(self, inner):
        self.inner, self.held = inner, []

    def submit(self, fn, *args, **kw):
        self.held.append((fn, args, kw))

    def release(self) -> None:
        for fn, args, kw in self.held:
            self.inner.submit(fn, *args, **kw)

    def shutdown(self, **kw) -> None:
        self.inner.shutdown(**kw)


def test_a_plan_approved_at_the_moment_of_the_sweep_is_not_expired_and_applies(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        desk = bot.handlers.remediation
        desk.jobs = _HeldJobs(desk.jobs)
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        store = Store.open(tmp_path / "gpumem.db")
        expires = store.get(plan_id).plan.expires_at
        desk.now = lambda: expires - timedelta(seconds=1)  # the click comes in the plan's last second
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=72)
        _wait_edit(fake, plan_ts, "Approved by")
        deadline = time.monotonic() + 10  # the apply is handed over right after that edit
        while not desk.jobs.held and time.monotonic() < deadline:
            time.sleep(0.01)
        assert store.get(plan_id).state == "approved" and len(desk.jobs.held) == 1
        # the sweep runs a second after the expiry, the apply not yet started: the plan is left to it
        assert bot.notices.sweep(expires + timedelta(seconds=1)) == []
        assert store.get(plan_id).state == "approved"
        desk.jobs.release()
        _wait_edit(fake, plan_ts, "Held:")
        assert store.get(plan_id).state == "watched"
        assert not any("Expired" in text for text in _edits(fake, plan_ts))
        assert EXPIRY_ACTOR not in {r.actor for r in store.plan_audit(plan_id)}
        assert len(sc.kube.writes(verb="patch")) == 1
        store.close()


def test_two_scheduler_instances_one_leader_sweeps_and_the_message_is_edited_once(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        db = tmp_path / "gpumem.db"
        _message_recorded(Store.open(db), plan_id)
        swept: list[tuple[str, list[str]]] = []

        def instance(name: str) -> HandoverScheduler:
            notices = PlanNotices(bot.settings, bot.poster, SharedStore(Store.open(db)))

            def sweep(now):
                swept.append((name, got := notices.sweep(now)))
                return got

            own = Store.open(db)
            return HandoverScheduler(own, (), lambda *a: None, sweep=sweep, sweep_every_s=60.0,
                                     elector=FileLockElector(tmp_path / "sched.lock", name), on_shutdown=own.close)

        a, b = instance("a"), instance("b")
        later = datetime.now(UTC) + timedelta(minutes=16)
        try:
            a.tick(later)
            b.tick(later)
            assert (a.leader, b.leader) == (True, False)
            assert swept == [("a", [plan_id])] and b.last_sweep is None
            assert len(_edits(fake, plan_ts)) == 1
            a.tick(later + timedelta(seconds=30))  # not a period yet: no sweep
            a.tick(later + timedelta(seconds=60))  # a period: it sweeps, nothing left to expire
            assert swept == [("a", [plan_id]), ("a", [])]
            a.shutdown()  # the leader goes; the standby's first round sweeps: nothing twice
            b.tick(later + timedelta(seconds=61))
            assert b.leader and swept[-1] == ("b", [])
        finally:
            a.shutdown()
            b.shutdown()
        (edited,) = _edits(fake, plan_ts)
        assert "Expired at" in edited
        assert [r.actor for r in Store.open(db).plan_audit(plan_id) if r.to_state == "expired"] == [EXPIRY_ACTOR]
        assert sc.kube.writes() == []


def test_serve_sweeps_on_the_scheduler_at_start_up_a_plan_that_expired_while_the_bot_was_down(tmp_path):
    with remediation_bot(tmp_path, extra="  expiry_sweep_s: 30\n") as (sc, fake, bot):
        assert bot.settings.remediation.expiry_sweep_s == 30.0
        store = Store.open(tmp_path / "gpumem.db")
        made = datetime.now(UTC) - timedelta(minutes=40)
        request = remediate.PlanRequest("llm", "vllm-server", cluster="prod", flags=(("max-num-seqs", 64),),
                                        requested_by="U0ONCALL")
        stored = remediate.make_plan(store, KubeWriter(sc.api("prod")), request, ApprovalPolicy(), channel=CHANNEL,
                                     now=made)
        plan_ts = bot.poster.post(CHANNEL, P.plan_message(stored, "en", "proposed"))
        approvals.record_message(store, stored.plan.id, CHANNEL, plan_ts, plan_ts)
        (scheduler,) = serve_background(bot)
        assert (scheduler.schedules, scheduler.reviews, scheduler.sweep_every_s) == ((), None, 30.0)
        bot.background += [scheduler]
        bot.start_background()  # the first round runs at once
        edited = _wait_edit(fake, plan_ts, "Expired at")
        assert "nothing was applied" in edited
        assert _buttons(fake, plan_ts) == [(P.REPLAN_ACTION, stored.plan.id)]
        assert _moves(store, stored.plan.id)[-1] == (EXPIRY_ACTOR, "proposed", "expired")
        assert sc.kube.writes() == []
        store.close()


def test_without_a_store_there_is_no_sweep(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        config = Path(live_config(tmp_path, sc.kubeconfig))
        config.write_text(config.read_text() + "remediation:\n  enabled: true\n  approvers: {llm: [U0A]}\n")
        settings = load_settings(config, env_for(fake))
        bot = build_bot(settings, choose_runner(settings))
        try:
            assert settings.remediation.enabled and bot.store is None and bot.notices is None
            assert serve_background(bot) == []
        finally:
            bot.close(timeout_s=5)


@pytest.mark.parametrize(("value", "words"), [
    ("0", "remediation.expiry_sweep_s: must be more than 0"),
    ("soon", "remediation.expiry_sweep_s: expected a number, got 'soon'"),
])
def test_a_bad_sweep_period_is_named_by_its_field(tmp_path, value, words):
    config = tmp_path / "gpumem.yaml"
    config.write_text(f"remediation:\n  approvers: {{llm: [U1]}}\n  expiry_sweep_s: {value}\n")
    with pytest.raises(SettingsError) as e:
        load_settings(config, {})
    assert words in str(e.value) and "gpumem.yaml" in str(e.value)
