"""The Approve path when the write's answer is lost, end to end through the Slack and Kubernetes
stand-ins: the plan message says what a re-read of the object shows (applied, with Roll back;
not applied, nothing was written; or "Outcome unknown: re-reading"), and the reconcile pass that
the scheduler's leader runs every minute settles what was unknown and edits the message. A plan
another replica left `applying` (kill -9) is settled by the running bot the same way. Each test
counts the writes the API server received."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.actuator.apply import apply_plan
from bot.actuator.writer import KubeWriter
from bot.render import slack_remediation as P
from bot.serve import serve_background
from bot.service import approvals, remediate
from bot.service.reconcile import RECONCILE_ACTOR
from bot.store.db import Store
from runbooks.remediation.policy import ApprovalPolicy
from tests.support import words
from tests.support.slack_kit import CHANNEL
from tests.test_plan_expiry import _buttons, _message_recorded
from tests.test_slack_remediation import (
    APPROVER,
    NAME,
    NS,
    _click,
    _diagnosis,
    _edits,
    _max_model_len,
    _patches,
    _plan,
    _wait_edit,
    remediation_bot,
)

WRITE = r"deployments/vllm-server\?fieldManager=gpumem$"


def _approved(bot, fake, sc, tmp_path, n: int) -> tuple[str, str, str, Store]:
    ts, diagnosis = _diagnosis(bot, fake)
    plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
    store = Store.open(tmp_path / "gpumem.db")
    _message_recorded(store, plan_id)
    _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=n)
    return ts, plan_id, plan_ts, store


def _scheduler(bot):
    (scheduler,) = serve_background(bot)
    assert scheduler.settle is not None and scheduler.settle_every_s == 60.0
    return scheduler


def test_a_write_that_landed_despite_a_503_is_applied_watched_and_offers_roll_back(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        sc.kube.fail_after_write(WRITE, 503)
        _ts, plan_id, plan_ts, store = _approved(bot, fake, sc, tmp_path, n=81)
        held = _wait_edit(fake, plan_ts, "Held:")
        assert "nothing was written" not in " ".join(_edits(fake, plan_ts))
        assert _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)]
        applied = next(r for r in store.plan_audit(plan_id) if r.to_state == "applied")
        assert words.en(applied.detail["unclear"]) == "HTTP 503" and "2 of 2" in held
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096
        store.close()


def test_a_503_for_a_write_that_did_not_land_says_nothing_was_written_and_how_that_is_known(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        sc.kube.fail(WRITE, 503)
        _ts, plan_id, plan_ts, store = _approved(bot, fake, sc, tmp_path, n=82)
        text = _wait_edit(fake, plan_ts, "Not applied")
        assert ("Not applied, nothing was written: the write's answer was lost (HTTP 503); read again, the object "
                f"does not carry the change (the object's gpumem.io/plan annotation is absent, not {plan_id}).") in text
        assert _buttons(fake, plan_ts) == [(P.REPLAN_ACTION, plan_id)]
        assert store.get(plan_id).state == "failed" and _patches(sc) == 1 and _max_model_len(sc) == 8192
        store.close()


def test_an_unreadable_outcome_says_unknown_then_the_leaders_reconcile_pass_settles_it(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        sc.kube.fail_after_write(WRITE, "drop", then_refuse_reads=1)
        ts, plan_id, plan_ts, store = _approved(bot, fake, sc, tmp_path, n=83)
        text = _wait_edit(fake, plan_ts, "Outcome unknown")
        assert "Outcome unknown: re-reading. The write was sent and its answer was lost (connection closed without " \
               "an answer); the object could not be read again (HTTP 503: injected failure 503)" in text
        assert "nothing was written" not in text and _buttons(fake, plan_ts) == []
        assert store.get(plan_id).state == "applying" and _patches(sc) == 1

        scheduler = _scheduler(bot)
        try:
            scheduler.tick()  # its first round: the leader runs the reconcile pass at once
            assert scheduler.leader and scheduler.last_settle is not None
        finally:
            scheduler.shutdown()
        edited = _wait_edit(fake, plan_ts, "reconciled by reading the object again")
        assert edited.startswith("--max-model-len 8192 -> 4096 on llm/vllm-server: Applied; reconciled")
        assert _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)]
        assert store.get(plan_id).state == "applied"
        assert [r.actor for r in store.plan_audit(plan_id) if r.to_state == "applied"] == [RECONCILE_ACTOR]
        reply = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                              and f"Plan {plan_id} was left applying" in (c.args.get("text") or ""))[-1]
        assert "the write had landed, and the plan is applied" in reply.args["text"]
        assert _patches(sc) == 1, "reconciling reads; it never writes"

        # the Roll back the settled message offers restores it
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=84)
        _wait_edit(fake, plan_ts, "Rolled back by")
        assert store.get(plan_id).state == "rolled_back" and _patches(sc) == 2 and _max_model_len(sc) == 8192
        store.close()


def test_a_plan_another_replica_left_applying_is_settled_by_the_running_bots_pass(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        store = Store.open(tmp_path / "gpumem.db")
        at = datetime.now(UTC) - timedelta(minutes=3)  # past the reconcile age, after the bot started
        writer = KubeWriter(sc.api("prod"))
        request = remediate.PlanRequest(NS, NAME, cluster="prod", flags=(("max-num-seqs", 64),),
                                        requested_by="U0ONCALL")
        stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), channel=CHANNEL, now=at)
        plan_id = stored.plan.id
        store.approve(plan_id, APPROVER, stored.plan.content_hash, now=at)
        store.move(plan_id, "applying", actor=APPROVER, expect="approved", now=at)
        plan_ts = bot.poster.post(CHANNEL, P.plan_message(store.get(plan_id), "en", "dry_run_ok"))
        approvals.record_message(store, plan_id, CHANNEL, plan_ts, plan_ts)
        apply_plan(writer, stored.plan, "gpumem plan (the replica was killed before it recorded the write)")
        writes = _patches(sc)
        assert writes == 1 and _buttons(fake, plan_ts) == []

        scheduler = _scheduler(bot)
        try:
            scheduler.tick()
            scheduler.tick(datetime.now(UTC) + timedelta(seconds=30))  # not a minute yet: no second pass
        finally:
            scheduler.shutdown()
        edited = _wait_edit(fake, plan_ts, "reconciled by reading the object again")
        assert "Applied; reconciled by reading the object again: the write had landed." in edited
        assert _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)]
        assert len(_edits(fake, plan_ts)) == 1
        assert store.get(plan_id).state == "applied" and _patches(sc) == writes
        store.close()


def test_a_write_whose_answer_never_comes_in_time_is_applied_after_a_re_read(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        desk = bot.handlers.remediation
        # every call of this writer has the timeout, the re-reads after the stalled write too:
        # 2 s leaves them room on a loaded host (at 0.5 s a busy CI host timed a read out)
        desk.writer_for = lambda cluster: KubeWriter(sc.api("prod"), timeout_s=2.0)
        sc.kube.fail_after_write(WRITE, "stall", stall_s=4.0)
        _ts, plan_id, plan_ts, store = _approved(bot, fake, sc, tmp_path, n=85)
        _wait_edit(fake, plan_ts, "Held:")
        applied = next(r for r in store.plan_audit(plan_id) if r.to_state == "applied")
        assert words.en(applied.detail["unclear"]) == "no answer within 2.0 s"
        assert not any("nothing was written" in text or "internal error" in text for text in _edits(fake, plan_ts))
        assert _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)] and _patches(sc) == 1
        store.close()


class _CrashesAfterTheWrite(KubeWriter):
    """A writer whose process fails in an unexpected way right after its write was sent."""

    def patch(self, kind, namespace, name, body, content_type, dry_run=False):
        answer = super().patch(kind, namespace, name, body, content_type, dry_run)
        if not dry_run:
            raise KeyError("an unexpected failure after the write")
        return answer


def test_an_internal_error_while_applying_is_unknown_not_nothing_was_written_and_is_settled(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        bot.handlers.remediation.writer_for = lambda cluster: _CrashesAfterTheWrite(sc.api("prod"))
        _ts, plan_id, plan_ts, store = _approved(bot, fake, sc, tmp_path, n=86)
        text = _wait_edit(fake, plan_ts, "Outcome unknown")
        assert "nothing was written" not in text and store.get(plan_id).state == "applying"
        assert store.plan_audit(plan_id)[-1].event == "outcome_unknown"
        scheduler = _scheduler(bot)
        try:
            scheduler.tick()
        finally:
            scheduler.shutdown()
        _wait_edit(fake, plan_ts, "Applied; reconciled by reading the object again")
        assert store.get(plan_id).state == "applied" and _patches(sc) == 1
        store.close()


def test_a_rollback_whose_outcome_is_unknown_says_so_and_the_pass_settles_it_rolled_back(tmp_path):
    from tests.test_slack_remediation import _respond

    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, plan_id, plan_ts, store = _approved(bot, fake, sc, tmp_path, n=87)
        _wait_edit(fake, plan_ts, "Held:")
        sc.kube.fail_after_write(WRITE, 503, then_refuse_reads=1)
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=88)
        text = _wait_edit(fake, plan_ts, "outcome unknown, re-reading")
        assert text.split(": ", 1)[1].startswith(f"Roll back by <@{APPROVER}>: outcome unknown, re-reading.")
        (told,) = _respond(fake, 88)
        assert f"Plan {plan_id}: the outcome of its rollback is unknown" in told["text"]
        assert "not rolled back" not in told["text"] and _buttons(fake, plan_ts) == []
        assert store.get(plan_id).state == "watched" and _patches(sc) == 2
        scheduler = _scheduler(bot)
        try:
            scheduler.tick()
        finally:
            scheduler.shutdown()
        edited = _wait_edit(fake, plan_ts, "Rolled back; reconciled")
        assert edited.endswith("the object has the old values back: restored --max-model-len 4096 -> 8192.")
        assert store.get(plan_id).state == "rolled_back" and _max_model_len(sc) == 8192
        reply = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                              and f"The rollback of plan {plan_id}" in (c.args.get("text") or ""))[-1]
        assert "has the old values back: the plan is rolled back" in reply.args["text"]
        assert _patches(sc) == 2, "settling the rollback wrote nothing"
        store.close()
