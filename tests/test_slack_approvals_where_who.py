"""Who can approve, and where: a button of a plan counts only on that plan's own message (the
channel and ts the store recorded when it was posted), and only from a full, active Slack member
(users.info: no deactivated account, guest or bot, whatever the config lists; without users:read,
nothing counts). Every refusal is ephemeral, audited, and leaves the API server with the writes it
had: the stand-in counts them."""

from __future__ import annotations

from contextlib import contextmanager

import pytest
from slack_bolt.request import BoltRequest
from slack_sdk import WebClient

from bot.config.settings import load_settings
from bot.render import slack_remediation as P
from bot.slack.accounts import AccountCheck
from bot.slack.api import SlackPoster
from bot.slack.app import build_bot
from bot.slack.serve import choose_runner
from bot.store.db import Store
from bot.telemetry.metrics import BotMetrics
from tests.support.fake_slack import FakeSlack, action_body, signed_headers
from tests.support.kube_fixtures import manual_clock, running_scenario
from tests.support.slack_kit import CHANNEL, SECRET, USER, env_for, live_config
from tests.test_slack_remediation import (
    APPROVER,
    SECOND,
    _diagnosis,
    _max_model_len,
    _patches,
    _plan,
    _remediation,
    _respond,
    _wait_edit,
)

#: a second channel the config allows, with the same namespaces: still not the plan's
ELSEWHERE = "C0ELSEWHERE"


@contextmanager
def two_channel_bot(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        clock = manual_clock(sc, ready_after_s=30.0)
        config = live_config(tmp_path, sc.kubeconfig)
        with open(config) as f:
            text = f.read().replace(f"    {CHANNEL}: {{lang: en}}\n",
                                    f"    {CHANNEL}: {{lang: en}}\n    {ELSEWHERE}: {{lang: en}}\n")
        with open(config, "w") as f:
            f.write(text + _remediation(tmp_path, sc.kubeconfig))
        bot = build_bot(load_settings(config, env_for(fake)), choose_runner(load_settings(config, env_for(fake))))
        desk = bot.handlers.remediation
        desk.watch_clock, desk.watch_sleep, desk.poll_s = clock, clock.advance, 30.0
        try:
            yield sc, fake, bot
        finally:
            bot.close(timeout_s=30)


def _click(bot, fake, action_id: str, value: str, *, channel: str, ts: str, user: str, n: int,
           thread_ts: str | None = None) -> None:
    body = action_body(action_id, value, fake.response_url(n), channel=channel, message_ts=ts, user=user,
                       thread_ts=thread_ts)
    assert bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body))).status == 200


def _planned(bot, fake, ts: str, diagnosis: dict) -> tuple[str, str]:
    """A plan posted from the diagnosis, with its exact-patch reply in the thread (posted after it)."""
    plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
    fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                  and "Exact patch" in (c.args.get("text") or ""), timeout=20)
    return plan_id, plan_ts


def _slack_writes(fake) -> list[tuple[str, str, str]]:
    """Every chat.postMessage and chat.update Slack took: (method, channel, ts or thread)."""
    return [(c.method, c.args.get("channel"), c.args.get("ts") or c.args.get("thread_ts"))
            for c in fake.calls if c.method in ("chat.postMessage", "chat.update") and c.ok]


def _buttons(fake, plan_ts: str) -> list[str]:
    return [e["action_id"] for b in fake.messages[(CHANNEL, plan_ts)]["blocks"] if b.get("type") == "actions"
            for e in b["elements"]]


def _refusals(tmp_path, plan_id: str) -> list[tuple[str, str, str]]:
    store = Store.open(tmp_path / "gpumem.db")
    try:
        return [(r.event, r.actor, r.detail.get("reason")) for r in store.plan_audit(plan_id)
                if r.event.endswith("_refused")]
    finally:
        store.close()


# ----------------------------------------------------------------------------- where


@pytest.mark.parametrize("where", ["another channel", "another message", "a message elsewhere"])
def test_an_approval_from_anywhere_but_the_plans_message_is_refused_and_writes_nothing(tmp_path, where):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        channel, message = {"another channel": (ELSEWHERE, plan_ts), "another message": (CHANNEL, ts),
                            "a message elsewhere": (ELSEWHERE, "1700000000.999999")}[where]
        before = _slack_writes(fake)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=channel, ts=message, user=APPROVER, n=60)
        (told,) = _respond(fake, 60)
        assert told["response_type"] == "ephemeral" and told["replace_original"] is False
        assert told["text"] == (f"Buttons of plan {plan_id} count only on its own plan message, and this click came "
                                "from another message or channel. Nothing changed.")
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []
        assert _slack_writes(fake) == before  # nothing edited, nothing posted, here or elsewhere
        assert _buttons(fake, plan_ts) == [P.APPROVE_ACTION, P.REJECT_ACTION]  # the real message is as it was
        store = Store.open(tmp_path / "gpumem.db")
        assert store.get(plan_id).state == "proposed" and store.get(plan_id).approvals == ()
        refused = [r for r in store.plan_audit(plan_id) if r.event == "approval_refused"]
        assert [(r.actor, r.channel, r.detail["reason"], r.detail["clicked_channel"], r.detail["clicked_ts"])
                for r in refused] == [(APPROVER, CHANNEL, "not_its_message", channel, message)]
        # the same approver on the plan's own message: it counts, and the plan is applied once
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=61,
               thread_ts=ts)
        _wait_edit(fake, plan_ts, "Held:")
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096


@pytest.mark.parametrize("action", [P.REJECT_ACTION, P.REPLAN_ACTION, P.ROUTING_ACTION, P.ROLLBACK_ACTION])
def test_every_plan_button_counts_only_on_the_plans_message(tmp_path, action):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        before = _slack_writes(fake)
        _click(bot, fake, action, plan_id, channel=ELSEWHERE, ts=plan_ts, user=APPROVER, n=62)
        (told,) = _respond(fake, 62)
        assert "count only on its own plan message" in told["text"]
        assert _slack_writes(fake) == before and _patches(sc) == 0 and sc.kube.dry_runs() == []
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "proposed"
        assert [r[2] for r in _refusals(tmp_path, plan_id)] == ["not_its_message"]


def test_a_rollback_from_another_channel_leaves_the_change_and_the_real_message_alone(tmp_path):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=63, thread_ts=ts)
        _wait_edit(fake, plan_ts, "Held:")
        before = _slack_writes(fake)
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, channel=ELSEWHERE, ts=plan_ts, user=APPROVER, n=64)
        (told,) = _respond(fake, 64)
        assert "count only on its own plan message" in told["text"]
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096
        assert _slack_writes(fake) == before and _buttons(fake, plan_ts) == [P.ROLLBACK_ACTION]
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "watched"


def test_a_forged_thread_on_the_right_message_does_not_move_the_rollback_note(tmp_path):
    """The click's channel and ts match; the thread it names is not the plan's. The note, the
    edits and everything after follow the store's record, never the payload."""
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=65,
               thread_ts="1600000000.000001")
        _wait_edit(fake, plan_ts, "Held:")
        notes = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if "Rollback note" in (c.args["text"] or "")]
        assert [(c.args["channel"], c.args["thread_ts"]) for c in notes] == [(CHANNEL, ts)]
        assert {c.args["ts"] for c in fake.calls_to("chat.update", ok_only=True)
                if c.args["ts"] != ts} == {plan_ts}  # besides the diagnosis, only the plan message was edited
        assert _patches(sc) == 1


# ----------------------------------------------------------------------------- who


@pytest.mark.parametrize("record, words", [
    ({"deleted": True}, "Your Slack account is deactivated, so it may not approve plans"),
    ({"is_restricted": True}, "Guest accounts (restricted or single-channel) may not approve plans"),
    ({"is_ultra_restricted": True}, "Guest accounts (restricted or single-channel) may not approve plans"),
    ({"is_bot": True}, "Bot and app users may not approve plans"),
    ({"is_app_user": True}, "Bot and app users may not approve plans"),
])
def test_a_listed_approver_whose_account_slack_rules_out_is_refused(tmp_path, record, words):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        fake.users[APPROVER] = record
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=70, thread_ts=ts)
        (told,) = _respond(fake, 70)
        assert told["text"].startswith(words) and told["text"].endswith("whatever remediation.approvers lists. "
                                                                        "Nothing changed.")
        assert told["response_type"] == "ephemeral"
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).approvals == ()
        assert _buttons(fake, plan_ts) == [P.APPROVE_ACTION, P.REJECT_ACTION]
        assert [c.args["user"] for c in fake.calls_to("users.info")] == [APPROVER]
        reason = "account_deleted" if "deleted" in record else "account_bot" if "Bot" in words else "account_guest"
        assert _refusals(tmp_path, plan_id) == [("approval_refused", APPROVER, reason)]


def test_without_users_read_approvals_fail_closed_naming_the_scope(tmp_path):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        fake.scopes.discard("users:read")
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=71, thread_ts=ts)
        (told,) = _respond(fake, 71)
        assert "the bot's token lacks the users:read scope" in told["text"] and "Nothing changed." in told["text"]
        assert fake.calls_to("users.info")[0].response["error"] == "missing_scope"
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []
        assert _refusals(tmp_path, plan_id) == [("approval_refused", APPROVER, "account_scope_missing")]
        # the scope granted: the next click counts
        fake.scopes.add("users:read")
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=72, thread_ts=ts)
        _wait_edit(fake, plan_ts, "Held:")
        assert _patches(sc) == 1


def test_an_account_slack_cannot_answer_for_fails_closed_and_is_asked_again(tmp_path):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        fake.unknown_users.add(APPROVER)
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=73, thread_ts=ts)
        (told,) = _respond(fake, 73)
        assert told["text"] == ("Your Slack account could not be checked (users.info: user_not_found), so nothing "
                                "changed; try again in a minute.")
        assert _patches(sc) == 0
        fake.unknown_users.clear()  # a failure is not kept: the next click asks Slack again
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=74, thread_ts=ts)
        _wait_edit(fake, plan_ts, "Held:")
        assert len(fake.calls_to("users.info")) == 2 and _patches(sc) == 1


def test_a_guest_cannot_roll_back_a_change_from_slack(tmp_path):
    with two_channel_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=75, thread_ts=ts)
        _wait_edit(fake, plan_ts, "Held:")
        fake.users[SECOND] = {"is_ultra_restricted": True}
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=SECOND, n=76, thread_ts=ts)
        (told,) = _respond(fake, 76)
        assert told["text"].startswith("Guest accounts (restricted or single-channel) may not roll back plans")
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096
        assert ("rollback_refused", SECOND, "account_guest") in _refusals(tmp_path, plan_id)


def test_users_info_answers_are_kept_a_minute_per_user(tmp_path):
    with FakeSlack() as fake:
        poster = SlackPoster(WebClient(token=fake.token, base_url=fake.api_url), BotMetrics(), backoff_s=0)
        now = [0.0]
        check = AccountCheck(poster.user_info, ttl_s=60.0, clock=lambda: now[0])
        fake.users["U0GUEST"] = {"is_restricted": True}
        assert check.refusal(APPROVER) is None and check.refusal(APPROVER) is None
        assert check.refusal("U0GUEST") == ("account_guest", {})
        assert [c.args["user"] for c in fake.calls_to("users.info")] == [APPROVER, "U0GUEST"]
        fake.users[APPROVER] = {"deleted": True}  # deactivated meanwhile: seen once the minute is over
        now[0] = 59.0
        assert check.refusal(APPROVER) is None
        now[0] = 60.5
        assert check.refusal(APPROVER) == ("account_deleted", {})
        assert len(fake.calls_to("users.info")) == 3
        assert USER not in [c.args["user"] for c in fake.calls_to("users.info")]
