"""Remediation in Slack, end to end: a live triage of the Kubernetes stand-in posts its diagnosis
with "Plan" buttons to the Slack stand-in; a click makes the plan against the live object and
posts it in the incident thread; a second person's approval runs the dry run, the write with
its precondition and the watch, editing the plan message through each stage; Roll back
restores. Every guard refuses with the exact number of writes the API server received."""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.writer import JSON_PATCH, MERGE_PATCH, KubeWriter
from bot.config.settings import load_settings
from bot.render import slack_remediation as P
from bot.slack.app import build_bot
from bot.slack.serve import choose_runner
from bot.store.db import Store
from collectors.parsers.flags import server_config_from_container
from tests.support.fake_slack import FakeSlack, action_body, signed_headers
from tests.support.kube_fixtures import manual_clock, running_scenario
from tests.support.slack_kit import (
    CHANNEL,
    SECRET,
    USER,
    dispatch_command,
    env_for,
    is_diagnosis,
    live_config,
)

APPROVER, SECOND, STRANGER, GROUPIE = "U0APPROVER", "U0SECOND", "U0STRANGER", "U0GROUPIE"
NS, NAME = "llm", "vllm-server"


def _remediation(tmp_path, kubeconfig, enabled: bool = True, extra: str = "") -> str:
    return f"""\
store: {{path: {tmp_path / 'gpumem.db'}}}
remediation:
  enabled: {'true' if enabled else 'false'}
  approvers: {{llm: [{APPROVER}, {SECOND}, S0SRE]}}
  watch_s: 120
  writer: {{kubeconfig: {kubeconfig}, context: prod}}
{extra}"""


@contextmanager
def remediation_bot(tmp_path, enabled: bool = True, extra: str = "", ready_after_s: float = 30.0):
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        clock = manual_clock(sc, ready_after_s=ready_after_s)
        config = live_config(tmp_path, sc.kubeconfig)
        with open(config, "a") as f:
            f.write(_remediation(tmp_path, sc.kubeconfig, enabled, extra))
        settings = load_settings(config, env_for(fake))
        bot = build_bot(settings, choose_runner(settings))
        desk = bot.handlers.remediation
        desk.watch_clock, desk.watch_sleep, desk.poll_s = clock, clock.advance, 30.0
        fake.groups["S0SRE"] = [GROUPIE]
        try:
            yield sc, fake, bot
        finally:
            bot.close(timeout_s=30)


def _triage(bot, fake) -> dict:
    dispatch_command(bot, fake, "triage llm/vllm-server --context prod")
    return fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0].args


def _click(bot, fake, action_id: str, value: str, message_ts: str, user: str, thread_ts: str | None = None,
           n: int = 50) -> None:
    body = action_body(action_id, value, fake.response_url(n), channel=CHANNEL, message_ts=message_ts, user=user,
                       thread_ts=thread_ts)
    from slack_bolt.request import BoltRequest

    response = bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))
    assert response.status == 200


def _plan_button(diagnosis: dict, action: str) -> dict:
    block = next(b for b in diagnosis["blocks"] if b.get("block_id") == P.PLAN_BLOCK)
    return next(e for e in block["elements"] if json.loads(e["value"])["a"] == action)


def _respond(fake, n: int, count: int = 1) -> list[dict]:
    return [c.args for c in fake.wait_for("respond", count, where=lambda c: c.args.get("_url") == str(n), timeout=20)]


def _plan_posted(fake, thread_ts: str) -> tuple[str, str]:
    """(plan id, message ts) of the plan message posted in the thread."""
    call = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == thread_ts
                         and any(b.get("type") == "actions" for b in c.args.get("blocks") or []), timeout=20)[-1]
    approve = next(e for b in call.args["blocks"] if b.get("type") == "actions" for e in b["elements"]
                   if e["action_id"] == P.APPROVE_ACTION)
    return approve["value"], call.response["ts"]


def _edits(fake, ts: str) -> list[str]:
    return [c.args["text"] for c in fake.calls_to("chat.update", ok_only=True) if c.args.get("ts") == ts]


def _wait_edit(fake, ts: str, words: str, timeout: float = 30) -> str:
    return fake.wait_for("chat.update", where=lambda c: c.args.get("ts") == ts and words in c.args["text"],
                         timeout=timeout)[-1].args["text"]


def _max_model_len(sc) -> int:
    obj = sc.kube.get("Deployment", NS, NAME)
    container = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    return server_config_from_container(container).max_model_len


def _patches(sc) -> int:
    return len(sc.kube.writes(verb="patch"))


def _plan(bot, fake, diagnosis_ts: str, diagnosis: dict, action: str = "cap_max_model_len",
          user: str = USER, n: int = 10) -> tuple[str, str]:
    button = _plan_button(diagnosis, action)
    _click(bot, fake, button["action_id"], button["value"], diagnosis_ts, user, n=n)
    return _plan_posted(fake, diagnosis_ts)


def _diagnosis(bot, fake) -> tuple[str, dict]:
    diagnosis = _triage(bot, fake)
    return diagnosis["ts"], diagnosis


# ----------------------------------------------------------------------------- the whole flow


def test_triage_plan_second_approver_dry_run_apply_watch_held_then_rollback(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        labels = [e["text"]["text"] for b in diagnosis["blocks"] if b.get("block_id") == P.PLAN_BLOCK
                  for e in b["elements"]]
        assert len(labels) == 4 and all(label.startswith("Plan: ") for label in labels)
        assert labels[-1].startswith("Plan: Raise the container memory limit")
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        posted = fake.messages[(CHANNEL, plan_ts)]
        assert posted["thread_ts"] == ts and "Waiting for 1 approval from" in posted["text"]
        # the headline and the notification name who may approve (the requester is not one: four-eyes)
        assert posted["text"].startswith("Approve --max-model-len 8192 -> 4096 on llm/vllm-server? "
                                         f"(needs 1 of: <@{APPROVER}>, <@{SECOND}>, <!subteam^S0SRE>): ")
        assert "`--max-model-len 8192 -&gt; 4096`" in json.dumps(posted["blocks"], ensure_ascii=False)
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []

        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=11)
        held = _wait_edit(fake, plan_ts, "Held:")
        assert "2 of 2 updated and available" in held
        stages = _edits(fake, plan_ts)
        firsts = [next(i for i, text in enumerate(stages) if words in text)
                  for words in ("Approved by", "Dry run passed", "Watching the rollout", "Held:")]
        assert firsts == sorted(firsts)
        assert _patches(sc) == 1 and len(sc.kube.dry_runs(verb="patch")) == 1 and _max_model_len(sc) == 4096
        # the rollback note was in the thread before the write (before the dry run passed)
        note = next(i for i, c in enumerate(fake.calls) if c.method == "chat.postMessage"
                    and c.args.get("thread_ts") == ts and "Rollback note" in (c.args.get("text") or ""))
        dry_ok = next(i for i, c in enumerate(fake.calls) if c.method == "chat.update"
                      and "Dry run passed" in (c.args.get("text") or ""))
        assert note < dry_ok
        assert f"<@{APPROVER}>" in fake.calls[note].args["text"] and "--max-model-len 4096 -> 8192" in \
            fake.calls[note].args["text"]
        final = fake.messages[(CHANNEL, plan_ts)]
        assert [e["action_id"] for b in final["blocks"] if b.get("type") == "actions"
                for e in b["elements"]] == [P.ROLLBACK_ACTION]

        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=12)
        _wait_edit(fake, plan_ts, "Rolled back by")
        assert _patches(sc) == 2 and _max_model_len(sc) == 8192
        store = Store.open(tmp_path / "gpumem.db")
        assert store.get(plan_id).state == "rolled_back"
        events = [(r.event, r.actor) for r in store.plan_audit(plan_id)]
        assert events[:2] == [("proposed", USER), ("slack_message", "gpumem")]
        assert ("approved", APPROVER) in events and ("rollback_note", APPROVER) in events
        assert events.index(("rollback_note", APPROVER)) < events.index(("applied", "gpumem"))
        assert events[-1] == ("rolled_back", APPROVER)


def test_the_memory_limit_plan_button_plans_the_limit_and_request_raised_by_half(tmp_path):
    """raise_memory_limit (an OOMKilled pod) carries a typed change: its Plan button plans the
    container's limit 48Gi -> 72Gi, and the request with it (it equals the limit); approved, one
    PATCH, and the rollback restores both."""
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis, action="raise_memory_limit")
        text = json.dumps(fake.messages[(CHANNEL, plan_ts)]["blocks"], ensure_ascii=False)
        assert "memory limit 48Gi -&gt; 72Gi" in text and "memory request 48Gi -&gt; 72Gi" in text
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=11)
        _wait_edit(fake, plan_ts, "Held:")
        resources = sc.kube.get("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"][0]["resources"]
        assert (resources["limits"]["memory"], resources["requests"]["memory"]) == ("72Gi", "72Gi")
        assert _patches(sc) == 1
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=12)
        _wait_edit(fake, plan_ts, "Rolled back by")
        resources = sc.kube.get("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"][0]["resources"]
        assert (resources["limits"]["memory"], resources["requests"]["memory"]) == ("48Gi", "48Gi")
        assert _patches(sc) == 2


# ----------------------------------------------------------------------------- the guards


def test_the_requester_cannot_approve_and_a_non_approver_is_told_who_may(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis, user=APPROVER)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=21)
        (own,) = _respond(fake, 21)
        assert "four-eyes" in own["text"] and own["response_type"] == "ephemeral"
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, STRANGER, thread_ts=ts, n=22)
        (other,) = _respond(fake, 22)
        assert f"<@{APPROVER}>, <@{SECOND}>, <!subteam^S0SRE>" in other["text"] and "Nothing changed" in other["text"]
        store = Store.open(tmp_path / "gpumem.db")
        assert store.get(plan_id).state == "proposed" and store.get(plan_id).approvals == ()
        # (the plan message's ts, `slack_message`, is recorded once posted: maybe after a quick click)
        events = [r.event for r in store.plan_audit(plan_id) if r.event != "slack_message"]
        assert events[-2:] == ["approval_refused", "approval_refused"]
        assert _edits(fake, plan_ts) == []
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []


def test_an_approver_by_user_group_may_approve(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, GROUPIE, thread_ts=ts, n=23)
        _wait_edit(fake, plan_ts, "Held:")
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096
        assert fake.calls_to("usergroups.users.list", ok_only=True)[0].args["usergroup"] == "S0SRE"


def test_a_double_click_and_two_approvers_at_once_write_once(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        clicks = [threading.Thread(target=_click, args=(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, user),
                                   kwargs={"thread_ts": ts, "n": 30 + i})
                  for i, user in enumerate((APPROVER, APPROVER, SECOND))]
        for c in clicks:
            c.start()
        for c in clicks:
            c.join()
        _wait_edit(fake, plan_ts, "Held:")
        told = [c.args["text"] for c in fake.wait_for("respond", 2, timeout=20)]
        assert len(told) == 2 and all("already" in t for t in told)
        # a click after it all: says so, changes nothing
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, SECOND, thread_ts=ts, n=39)
        (late,) = _respond(fake, 39)
        assert f"Plan {plan_id} is watched already; nothing changed." == late["text"]
        assert _patches(sc) == 1 and len(sc.kube.dry_runs(verb="patch")) == 1


def test_an_expired_plan_says_so_and_offers_a_new_plan(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        bot.handlers.remediation.now = lambda: datetime.now(UTC) + timedelta(minutes=16)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=41)
        (told,) = _respond(fake, 41)
        assert told["text"] == f"Plan {plan_id} expired; nothing was applied. Plan again from its message."
        expired = _wait_edit(fake, plan_ts, "Expired at")
        assert "nothing was applied" in expired
        buttons = [e for b in fake.messages[(CHANNEL, plan_ts)]["blocks"] if b.get("type") == "actions"
                   for e in b["elements"]]
        assert [(e["action_id"], e["value"]) for e in buttons] == [(P.REPLAN_ACTION, plan_id)]
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "expired"
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []
        bot.handlers.remediation.now = lambda: datetime.now(UTC)
        _click(bot, fake, P.REPLAN_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=42)
        fresh = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                              and "Waiting for" in (c.args.get("text") or ""), n=2, timeout=20)[-1]
        assert plan_id not in fresh.args["text"] and f"<@{APPROVER}>" in json.dumps(fresh.args["blocks"])
        assert _patches(sc) == 0


def test_remediation_disabled_offers_no_plan_button_and_refuses_a_forged_click(tmp_path):
    with remediation_bot(tmp_path, enabled=False) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        assert not any(b.get("block_id") == P.PLAN_BLOCK for b in diagnosis["blocks"])
        value = json.dumps({"t": "llm/vllm-server", "c": "prod", "a": "scale_out",
                            "ch": [["scale", None, None, 3]]})
        _click(bot, fake, f"{P.PLAN_ACTION}:2", value, ts, USER, n=51)
        (told,) = _respond(fake, 51)
        assert "Remediation is off for llm on prod" in told["text"]
        assert Store.open(tmp_path / "gpumem.db").plans() == []
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []


def test_an_object_changed_since_planned_is_not_overwritten(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        someone = KubeWriter(sc.api("prod"))
        someone.patch("Deployment", NS, NAME, {"metadata": {"annotations": {"team/note": "hand edit"}}}, MERGE_PATCH)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=61)
        changed = _wait_edit(fake, plan_ts, "Changed since planned")
        assert "nothing was written" in changed
        buttons = [e["action_id"] for b in fake.messages[(CHANNEL, plan_ts)]["blocks"] if b.get("type") == "actions"
                   for e in b["elements"]]
        assert buttons == [P.REPLAN_ACTION]
        assert _patches(sc) == 1, "only the hand edit"
        assert sc.kube.dry_runs() == [] and _max_model_len(sc) == 8192
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "failed"


def test_a_rollback_refuses_with_the_three_values_when_someone_changed_it_after(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=71)
        _wait_edit(fake, plan_ts, "Held:")
        (path,) = [op["path"] for op in Store.open(tmp_path / "gpumem.db").get(plan_id).plan.patch
                   if op["op"] == "replace"]
        args = sc.kube.get("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"][0]["args"]
        i = args.index("--max-model-len=4096")
        assert path.endswith(f"/args/{i}"), "the plan names the one element it changes"
        someone = KubeWriter(sc.api("prod"))
        someone.patch("Deployment", NS, NAME, [{"op": "replace", "path": path, "value": "--max-model-len=2048"}],
                      JSON_PATCH)
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=72)
        (told,) = _respond(fake, 72)
        assert f"{path}: --max-model-len=8192 / --max-model-len=4096 / --max-model-len=2048" in told["text"]
        assert "Nothing was written" in told["text"]
        assert _max_model_len(sc) == 2048
        assert _patches(sc) == 2, "the plan's write and the hand edit; no rollback write"
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, STRANGER, thread_ts=ts, n=73)
        (stranger,) = _respond(fake, 73)
        assert "Only approvers for llm may roll back" in stranger["text"]
        assert _patches(sc) == 2


def test_a_plan_needing_two_approvals_waits_for_the_second(tmp_path):
    extra = "  two_approvals_for: [set_arg]\n"
    with remediation_bot(tmp_path, extra=extra) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=81)
        partly = _wait_edit(fake, plan_ts, "1 of 2 approvals")
        assert f"<@{APPROVER}>" in partly or APPROVER in partly
        assert _patches(sc) == 0
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=82)
        (again,) = _respond(fake, 82)
        assert "approved plan" in again["text"] and _patches(sc) == 0
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, SECOND, thread_ts=ts, n=83)
        _wait_edit(fake, plan_ts, "Held:")
        assert _patches(sc) == 1


def test_reject_records_and_edits_the_message(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        _click(bot, fake, P.REJECT_ACTION, plan_id, plan_ts, STRANGER, thread_ts=ts, n=91)
        (refused,) = _respond(fake, 91)
        assert "Only approvers for llm may reject" in refused["text"]
        _click(bot, fake, P.REJECT_ACTION, plan_id, plan_ts, SECOND, thread_ts=ts, n=92)
        _wait_edit(fake, plan_ts, "Rejected by")
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=93)
        (late,) = _respond(fake, 93)
        assert "is rejected already" in late["text"]
        assert Store.open(tmp_path / "gpumem.db").get(plan_id).state == "rejected"
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []


@pytest.mark.parametrize("value", ["not json", json.dumps({"t": "llm/x"}), json.dumps({"t": "LLM/x", "a": "a",
                                                                                       "ch": [["scale", None, None, 3]]})])
def test_a_plan_button_with_a_value_gpumem_did_not_make_is_refused(tmp_path, value):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        _click(bot, fake, f"{P.PLAN_ACTION}:1", value, "1700000000.000001", USER, n=95)
        (told,) = _respond(fake, 95)
        assert told["text"] == "That button does not carry a plan gpumem can read."
        assert _patches(sc) == 0


# ----------------------------------------------------------------------------- slash commands


def _command(bot, fake, text: str, user: str = USER, n: int = 100) -> dict:
    from slack_bolt.request import BoltRequest

    from tests.support.fake_slack import slash_body

    body = slash_body(text, fake.response_url(n), channel=CHANNEL, user=user)
    response = bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))
    assert response.status == 200
    return json.loads(response.body)


def _top_level_plan(fake) -> tuple[str, str]:
    call = fake.wait_for("chat.postMessage", where=lambda c: not c.args.get("thread_ts")
                         and "Waiting for" in (c.args.get("text") or ""), timeout=20)[-1]
    approve = next(e for b in call.args["blocks"] if b.get("type") == "actions" for e in b["elements"]
                   if e["action_id"] == P.APPROVE_ACTION)
    return approve["value"], call.response["ts"]


def test_slash_plan_then_approval_then_plans_and_slash_rollback(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ack = _command(bot, fake, "plan llm/vllm-server --set max-num-seqs=64 --context prod", n=101)
        assert ack["text"].startswith("On it: a plan for llm/vllm-server")
        plan_id, plan_ts = _top_level_plan(fake)
        assert "`--max-num-seqs 128 -&gt; 64`" in json.dumps(fake.messages[(CHANNEL, plan_ts)]["blocks"])
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, n=102)
        _wait_edit(fake, plan_ts, "Held:")
        # the rollback note went into the plan message's own thread
        assert any("Rollback note" in c.args["text"] for c in fake.thread(CHANNEL, plan_ts))
        listed = _command(bot, fake, "plans", n=103)
        assert listed["response_type"] == "ephemeral" and plan_id in json.dumps(listed["blocks"])
        assert _patches(sc) == 1
        refused = _command(bot, fake, f"rollback {plan_id}", user=STRANGER, n=104)
        assert refused["text"] == f"On it: rolling back plan {plan_id}."
        (told,) = _respond(fake, 104)
        assert "Only approvers for llm may roll back" in told["text"] and _patches(sc) == 1
        _command(bot, fake, f"rollback {plan_id}", user=APPROVER, n=105)
        _wait_edit(fake, plan_ts, "Rolled back by")
        assert _patches(sc) == 2
        _command(bot, fake, f"rollback {plan_id}", user=APPROVER, n=106)
        (again,) = _respond(fake, 106)
        assert again["text"] == f"Plan {plan_id} is rolled back already; nothing changed." and _patches(sc) == 2
        assert "No open plans." in json.dumps(_command(bot, fake, "plans", n=107)["blocks"])


def _wait_recorded(path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    store = Store.open(path)
    try:
        while not store.db.execute("SELECT COUNT(*) FROM triages").fetchone()[0]:
            assert time.monotonic() < deadline, "the triage was never recorded"
            time.sleep(0.05)
    finally:
        store.close()


def test_slash_plan_from_the_last_triages_action(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        _command(bot, fake, "plan llm/vllm-server --action cap_max_model_len", n=111)
        (told,) = _respond(fake, 111)
        assert "no triage of llm/vllm-server recorded action cap_max_model_len" in told["text"]
        _diagnosis(bot, fake)
        _wait_recorded(tmp_path / "gpumem.db")  # the triage is recorded after its uploads
        _command(bot, fake, "plan llm/vllm-server --action cap_max_model_len", n=112)
        plan_id, plan_ts = _top_level_plan(fake)
        assert "`--max-model-len 8192 -&gt; 4096`" in json.dumps(fake.messages[(CHANNEL, plan_ts)]["blocks"])
        plan = Store.open(tmp_path / "gpumem.db").get(plan_id).plan
        assert (plan.action_id, plan.requested_by) == ("cap_max_model_len", USER)
        assert plan.origin.endswith("action cap_max_model_len of the last triage")
        _command(bot, fake, "plan llm/vllm-server --action cap_max_model_len --replicas 3", n=113)
        (both,) = _respond(fake, 113)
        assert "not both" in both["text"]
        assert _patches(sc) == 0 and sc.kube.dry_runs() == []


@pytest.mark.parametrize(("text", "words"), [
    ("rollback p-nope", "No plan p-nope in the store"),
    ("plan llm/vllm-server --set max-num-seqs", "expected FLAG=VALUE"),
    ("plan llm/vllm-server", "nothing to change"),
])
def test_slash_commands_with_bad_input_get_a_clear_answer(tmp_path, text, words):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        _command(bot, fake, text, user=APPROVER, n=121)
        (told,) = _respond(fake, 121)
        assert words in told["text"] and "Traceback" not in told["text"]
        assert _patches(sc) == 0


def test_slash_plan_refuses_host_flags_and_a_disabled_namespace_in_the_ack(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ack = _command(bot, fake, "plan llm/vllm-server --replicas 3 --kubeconfig /etc/x", n=131)
        assert "--kubeconfig" in ack["text"]
    (tmp_path / "off").mkdir()
    with remediation_bot(tmp_path / "off", enabled=False) as (sc, fake, bot):
        ack = _command(bot, fake, "plan llm/vllm-server --replicas 3", n=132)
        assert "Remediation is off for llm on prod" in ack["text"]
        assert _patches(sc) == 0 and Store.open(tmp_path / "off" / "gpumem.db").plans() == []


def test_over_http_triage_plan_approval_by_a_second_user_held_and_rollback(tmp_path):
    """The same flow through `gpumem serve --http`'s server: signed form posts to /slack/events."""
    import requests

    from bot.serve import serve_http
    from tests.support.fake_slack import slash_body

    with remediation_bot(tmp_path) as (sc, fake, bot):
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            def post(body: str) -> requests.Response:
                return requests.post(server.url + "/slack/events", data=body.encode(),
                                     headers=signed_headers(SECRET, body), timeout=10)

            ack = post(slash_body("triage llm/vllm-server --context prod", fake.response_url(141), channel=CHANNEL))
            assert ack.status_code == 200
            diagnosis = fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0].args
            button = _plan_button(diagnosis, "cap_max_model_len")
            click = post(action_body(button["action_id"], button["value"], fake.response_url(142), channel=CHANNEL,
                                     message_ts=diagnosis["ts"], user=USER))
            assert click.status_code == 200 and click.text == ""
            plan_id, plan_ts = _plan_posted(fake, diagnosis["ts"])
            approve = post(action_body(P.APPROVE_ACTION, plan_id, fake.response_url(143), channel=CHANNEL,
                                       message_ts=plan_ts, user=SECOND, thread_ts=diagnosis["ts"]))
            assert approve.status_code == 200
            _wait_edit(fake, plan_ts, "Held:")
            assert _patches(sc) == 1 and _max_model_len(sc) == 4096
            back = post(action_body(P.ROLLBACK_ACTION, plan_id, fake.response_url(144), channel=CHANNEL,
                                    message_ts=plan_ts, user=SECOND, thread_ts=diagnosis["ts"]))
            assert back.status_code == 200
            _wait_edit(fake, plan_ts, "Rolled back by")
            assert _patches(sc) == 2 and _max_model_len(sc) == 8192
            assert post(action_body(P.APPROVE_ACTION, plan_id, fake.response_url(145), channel=CHANNEL,
                                    message_ts=plan_ts, user=APPROVER)).status_code == 200
            (late,) = _respond(fake, 145)
            assert "rolled back already" in late["text"] and _patches(sc) == 2
        finally:
            server.close()


def test_a_triage_an_alert_started_offers_the_same_plan_buttons(tmp_path):
    import requests

    from bot.serve import serve_http
    from tests.support.alertmanager import TOKEN, alert, notification

    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        config = live_config(tmp_path, sc.kubeconfig)
        with open(config, "a") as f:
            f.write(_remediation(tmp_path, sc.kubeconfig) + f"alerts: {{default_channel: {CHANNEL}}}\n")
        settings = load_settings(config, {**env_for(fake), "GPUMEM_WEBHOOK_TOKEN": TOKEN})
        bot = build_bot(settings, choose_runner(settings))
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            body = notification([alert(severity="critical", extra={"cluster": "prod"})])
            r = requests.post(server.url + "/alertmanager", json=body, timeout=10,
                              headers={"Authorization": f"Bearer {TOKEN}"})
            assert r.status_code == 200
            diagnosis = fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0].args
        finally:
            server.close()
            bot.close(timeout_s=30)
    assert diagnosis["blocks"][0]["text"]["text"].startswith(":rotating_light: *Alert GpumemKVCacheHigh")
    # the Plan buttons a typed /gpumem triage gets, under the alert's head; nothing written yet
    button = _plan_button(diagnosis, "cap_max_model_len")
    assert json.loads(button["value"])["a"] == "cap_max_model_len"
    assert _patches(sc) == 0


def test_slack_retrying_an_approve_delivery_writes_once(tmp_path):
    """Slack sends the same interaction again (X-Slack-Retry-Num) when the first answer was late:
    the retry is answered and not run, so the approval applies once."""
    from slack_bolt.request import BoltRequest

    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        body = action_body(P.APPROVE_ACTION, plan_id, fake.response_url(70), channel=CHANNEL, message_ts=plan_ts,
                           user=APPROVER, thread_ts=ts)
        headers = signed_headers(SECRET, body)
        assert bot.app.dispatch(BoltRequest(body=body, headers=headers)).status == 200
        retry = {**headers, "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
        again = bot.app.dispatch(BoltRequest(body=body, headers=retry))
        assert again.status == 200 and not again.body  # answered, not run again
        _wait_edit(fake, plan_ts, "Held:")
        assert _patches(sc) == 1 and len(sc.kube.dry_runs(verb="patch")) == 1
        assert [c for c in fake.calls_to("respond") if c.args.get("_url") == "70"] == []  # no "already" either


def test_the_exact_patch_follows_the_plan_in_its_thread_with_secrets_masked(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        obj = sc.kube.get("Deployment", NS, NAME)
        container = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
        container["args"] = [*container["args"], "--api-key", "sk-live-0123456789abcdef"]
        sc.kube.add(obj)
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, _ = _plan(bot, fake, ts, diagnosis)
        reply = fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == ts
                              and "Exact patch" in (c.args.get("text") or ""), timeout=20)[0].args
        text = reply["blocks"][0]["text"]["text"]
        stored = Store.open(tmp_path / "gpumem.db").get(plan_id).plan
        assert stored.content_hash[:12] in text and "application/json-patch+json" in text
        # every operation of the stored patch, in order, the API key masked in each
        ops = [json.loads(line) for line in text.split("```")[1].splitlines()]
        assert [(o["op"], o["path"]) for o in ops] == [(o["op"], o["path"]) for o in stored.patch]
        assert any(o["op"] == "test" for o in ops) and all(o["path"].rsplit("/", 1)[1].isdigit() for o in ops)
        assert "sk-live-0123456789abcdef" not in json.dumps([c.args for c in fake.calls])
        assert "sk-live-0123456789abcdef" not in json.dumps(list(stored.patch)), "the plan holds no secret to mask"
        assert _patches(sc) == 0


def test_a_rollback_note_that_cannot_reach_the_thread_stops_the_write_and_says_so(tmp_path):
    with remediation_bot(tmp_path) as (sc, fake, bot):
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        # the plan's own thread posts (its exact patch) are done; then Slack refuses every post
        # for a while, so the rollback note cannot reach the thread however often it is tried
        fake.wait_for("files.completeUploadExternal", timeout=30)
        fake.fail_next("chat.postMessage", error="channel_not_found", count=20)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=71)
        said = _wait_edit(fake, plan_ts, "the rollback note could not be posted in the thread")
        assert "nothing was written" in said and "?" not in said
        assert _patches(sc) == 0 and sc.kube.dry_runs() == [] and _max_model_len(sc) == 8192
