"""Typed commands that act on an existing plan (`/gpumem rollback PLAN`, `/gpumem plan ...
--phase 2 --routing-confirmed`) act under the policy of the channel the plan's message is in,
never the channel they are typed in: the typed channel may narrow (it must allow the namespace
too), never widen. What they do is shown on the plan's own message and in its thread; the typed
channel gets only the ephemeral acknowledgement and refusals. A plan with no recorded message,
or whose channel does not allow it now, is refused: ephemeral, audited, and the API server
stand-in receives no write."""

from __future__ import annotations

import json
from contextlib import contextmanager

from slack_bolt.request import BoltRequest

from bot.config.settings import load_settings
from bot.render import slack_remediation as P
from bot.slack.app import build_bot
from bot.slack.serve import choose_runner
from bot.store.db import Store
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.kube_fixtures import manual_clock, running_scenario
from tests.support.slack_kit import CHANNEL, SECRET, USER, env_for, live_config
from tests.test_slack_approvals_where_who import ELSEWHERE, _buttons, _click, _planned, _slack_writes
from tests.test_slack_remediation import (
    APPROVER,
    SECOND,
    _diagnosis,
    _max_model_len,
    _patches,
    _plan_posted,
    _remediation,
    _respond,
    _top_level_plan,
    _wait_edit,
)

BOTH = f"    {CHANNEL}: {{lang: en}}\n    {ELSEWHERE}: {{lang: en}}\n"
#: the plan's channel narrowed to another namespace since the plan was posted; ELSEWHERE allows llm
NARROWED = f"    {CHANNEL}: {{lang: en, namespaces: [search]}}\n    {ELSEWHERE}: {{lang: en}}\n"
#: the plan's channel taken out of slack.channels since
GONE = f"    {ELSEWHERE}: {{lang: en}}\n"


@contextmanager
def restartable_bot(tmp_path):
    """A bot on the stand-ins with CHANNEL and ELSEWHERE configured; `restart(channels)` stops it
    and starts another on the same store with `channels` as its slack.channels."""
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        clock = manual_clock(sc, ready_after_s=30.0)
        config = live_config(tmp_path, sc.kubeconfig)
        with open(config) as f:
            original = f.read()
        assert f"    {CHANNEL}: {{lang: en}}\n" in original
        bots = []

        def start(channels: str):
            with open(config, "w") as f:
                f.write(original.replace(f"    {CHANNEL}: {{lang: en}}\n", channels)
                        + _remediation(tmp_path, sc.kubeconfig))
            settings = load_settings(config, env_for(fake))
            bot = build_bot(settings, choose_runner(settings))
            desk = bot.handlers.remediation
            desk.watch_clock, desk.watch_sleep, desk.poll_s = clock, clock.advance, 30.0
            bots.append(bot)
            return bot

        def restart(channels: str):
            bots[-1].close(timeout_s=30)
            return start(channels)

        try:
            yield sc, fake, start(BOTH), restart
        finally:
            bots[-1].close(timeout_s=30)


def _typed(bot, fake, text: str, *, channel: str, user: str, n: int) -> dict:
    body = slash_body(text, fake.response_url(n), channel=channel, user=user)
    response = bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))
    assert response.status == 200
    return json.loads(response.body)


def _audit(tmp_path, plan_id: str) -> list:
    store = Store.open(tmp_path / "gpumem.db")
    try:
        return store.plan_audit(plan_id)
    finally:
        store.close()


def _applied(bot, fake, tmp_path) -> tuple[str, str, str]:
    """A plan made from the diagnosis in CHANNEL, approved there and held: (diagnosis ts, plan id, plan ts)."""
    ts, diagnosis = _diagnosis(bot, fake)
    plan_id, plan_ts = _planned(bot, fake, ts, diagnosis)
    _click(bot, fake, P.APPROVE_ACTION, plan_id, channel=CHANNEL, ts=plan_ts, user=APPROVER, n=30, thread_ts=ts)
    _wait_edit(fake, plan_ts, "Held:")
    return ts, plan_id, plan_ts


def test_a_rollback_typed_in_another_channel_edits_the_plans_own_message_and_posts_nothing_there(tmp_path):
    with restartable_bot(tmp_path) as (sc, fake, bot, _restart):
        _ts, plan_id, plan_ts = _applied(bot, fake, tmp_path)
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096
        ack = _typed(bot, fake, f"rollback {plan_id}", channel=ELSEWHERE, user=APPROVER, n=31)
        assert ack["text"] == f"On it: rolling back plan {plan_id}." and ack.get("response_type") != "in_channel"
        edited = _wait_edit(fake, plan_ts, "Rolled back by")
        assert edited.endswith(f"Rolled back by <@{APPROVER}>: restored --max-model-len 4096 -> 8192.")
        assert _patches(sc) == 2 and _max_model_len(sc) == 8192
        assert [w for w in _slack_writes(fake) if w[1] == ELSEWHERE] == []  # nothing posted or edited there
        assert _buttons(fake, plan_ts) == []
        moved = [r for r in _audit(tmp_path, plan_id) if r.to_state == "rolled_back"]
        assert [(r.actor, r.channel) for r in moved] == [(APPROVER, CHANNEL)]  # under the plan's channel


def test_a_rollback_typed_where_the_plans_channel_no_longer_allows_it_is_refused_and_writes_nothing(tmp_path):
    """ELSEWHERE allows llm; the plan's channel, since a restart, does not: ELSEWHERE's policy is
    not used to widen who may roll back, and nothing is written, edited or posted."""
    with restartable_bot(tmp_path) as (sc, fake, bot, restart):
        _ts, plan_id, plan_ts = _applied(bot, fake, tmp_path)
        bot = restart(NARROWED)
        before, dry_runs = _slack_writes(fake), len(sc.kube.dry_runs())
        _typed(bot, fake, f"rollback {plan_id}", channel=ELSEWHERE, user=APPROVER, n=32)
        (told,) = _respond(fake, 32)
        assert told["response_type"] == "ephemeral" and told["replace_original"] is False
        assert told["text"] == (f"Plan {plan_id}'s message is in <#{CHANNEL}>, and /gpumem rollback acts under "
                                f"that channel's policy, not this one's: llm is not allowed in <#{CHANNEL}> now. "
                                "Nothing changed.")
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096 and len(sc.kube.dry_runs()) == dry_runs
        assert _slack_writes(fake) == before and _buttons(fake, plan_ts) == [P.ROLLBACK_ACTION]
        refused = [r for r in _audit(tmp_path, plan_id) if r.event == "rollback_refused"]
        assert [(r.actor, r.channel, r.detail["reason"], r.detail["typed_channel"]) for r in refused] == [
            (APPROVER, CHANNEL, "typed_plan_namespace", ELSEWHERE)]
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "watched"


def test_a_rollback_typed_when_the_plans_channel_is_no_longer_configured_is_refused(tmp_path):
    with restartable_bot(tmp_path) as (sc, fake, bot, restart):
        _ts, plan_id, plan_ts = _applied(bot, fake, tmp_path)
        bot = restart(GONE)
        before = _slack_writes(fake)
        assert _buttons(fake, plan_ts) == [P.ROLLBACK_ACTION]
        _typed(bot, fake, f"rollback {plan_id}", channel=ELSEWHERE, user=APPROVER, n=33)
        (told,) = _respond(fake, 33)
        assert f"gpumem does not answer in <#{CHANNEL}> now. Nothing changed." in told["text"]
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096
        assert _slack_writes(fake) == before
        assert [r.detail["reason"] for r in _audit(tmp_path, plan_id)
                if r.event == "rollback_refused"] == ["typed_plan_channel"]


def test_a_rollback_typed_for_a_plan_with_no_recorded_message_is_refused(tmp_path):
    with restartable_bot(tmp_path) as (sc, fake, bot, _restart):
        fake.fail_next("chat.postMessage", status=200, error="not_in_channel")  # the plan message is never posted
        _typed(bot, fake, "plan llm/vllm-server --set max-num-seqs=64 --context prod", channel=CHANNEL, user=USER,
               n=34)
        (failed,) = _respond(fake, 34)
        assert "not_in_channel" in failed["text"]
        store = Store.open(tmp_path / "gpumem.db")
        (stored,) = store.plans()
        plan_id = stored.plan.id
        store.close()
        before = _slack_writes(fake)
        _typed(bot, fake, f"rollback {plan_id}", channel=CHANNEL, user=APPROVER, n=35)
        (told,) = _respond(fake, 35)
        assert told["text"].startswith(f"Plan {plan_id} has no plan message in Slack, and ")
        assert told["text"].endswith("Nothing changed.")
        assert _patches(sc) == 0 and sc.kube.dry_runs() == [] and _slack_writes(fake) == before
        assert [(r.actor, r.channel, r.detail["reason"]) for r in _audit(tmp_path, plan_id)
                if r.event == "rollback_refused"] == [(APPROVER, None, "typed_no_message")]


def test_a_rollback_typed_in_the_plans_own_channel_still_works(tmp_path):
    with restartable_bot(tmp_path) as (sc, fake, bot, _restart):
        _ts, plan_id, plan_ts = _applied(bot, fake, tmp_path)
        before = len(_slack_writes(fake))
        _typed(bot, fake, f"rollback {plan_id}", channel=CHANNEL, user=APPROVER, n=36)
        _wait_edit(fake, plan_ts, "Rolled back by")
        assert _patches(sc) == 2 and _max_model_len(sc) == 8192
        # what the rollback changed in Slack: the plan message, edited; nothing posted
        assert _slack_writes(fake)[before:] == [("chat.update", CHANNEL, plan_ts)]


# ----------------------------------------------------------------------------- --routing-confirmed


def _phase1_watched(bot, fake, sc) -> tuple[str, str]:
    """A pool split's phase 1 typed in CHANNEL, approved there and held: (plan id, its message ts)."""
    _typed(bot, fake, "plan llm/vllm-server --split-pools --threshold 3000 --context prod", channel=CHANNEL,
           user=USER, n=40)
    first, first_ts = _top_level_plan(fake)
    _click(bot, fake, P.APPROVE_ACTION, first, channel=CHANNEL, ts=first_ts, user=SECOND, n=41)
    _wait_edit(fake, first_ts, "Held:", timeout=60)
    assert len(sc.kube.writes(verb="create")) == 2
    return first, first_ts


def test_routing_confirmed_typed_in_another_channel_posts_phase_2_in_phase_1s_thread(tmp_path):
    with restartable_bot(tmp_path) as (sc, fake, bot, _restart):
        first, first_ts = _phase1_watched(bot, fake, sc)
        writes = len(sc.kube.writes())
        _typed(bot, fake, "plan llm/vllm-server --split-pools --phase 2 --routing-confirmed", channel=ELSEWHERE,
               user=APPROVER, n=42)
        second, second_ts = _plan_posted(fake, first_ts)
        assert second != first and (CHANNEL, second_ts) in fake.messages
        assert [w for w in _slack_writes(fake) if w[1] == ELSEWHERE] == []
        assert len(sc.kube.writes()) == writes  # planned, not applied: it waits for its own approval
        confirmed = [r for r in Store.open(tmp_path / "gpumem.db").audit() if r.event == "routing_confirmed"]
        assert [(r.actor, r.channel) for r in confirmed] == [(APPROVER, CHANNEL)]


def test_routing_confirmed_typed_where_phase_1s_channel_no_longer_allows_it_is_refused(tmp_path):
    with restartable_bot(tmp_path) as (sc, fake, bot, restart):
        first, _first_ts = _phase1_watched(bot, fake, sc)
        bot = restart(NARROWED)
        writes, before = len(sc.kube.writes()), _slack_writes(fake)
        _typed(bot, fake, "plan llm/vllm-server --split-pools --phase 2 --routing-confirmed", channel=ELSEWHERE,
               user=APPROVER, n=43)
        (told,) = _respond(fake, 43)
        assert told["text"] == (f"Plan {first}'s message is in <#{CHANNEL}>, and /gpumem plan --routing-confirmed "
                                f"acts under that channel's policy, not this one's: llm is not allowed in <#{CHANNEL}> "
                                "now. Nothing changed.")
        assert len(sc.kube.writes()) == writes and _slack_writes(fake) == before
        store = Store.open(tmp_path / "gpumem.db")
        assert [p.plan.id for p in store.plans()] == [first]
        assert not [r for r in store.audit() if r.event == "routing_confirmed"]
        assert [(r.actor, r.detail["reason"], r.detail["typed_channel"]) for r in store.plan_audit(first)
                if r.event == "routing_refused"] == [(APPROVER, "typed_plan_namespace", ELSEWHERE)]
