"""Post-change review reminders: a stop-gap reaches its review time and the scheduler posts one
reminder for it, claimed in the store like a slot (retries, replicas and restarts find it taken),
to the plan's channel or the configured one, checked against the live object, in en and zh.
The clock is driven by hand."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.writer import KubeWriter
from bot.render import slack_blocks as B
from bot.render.slack_handover import handover_parent, handover_thread, review_message
from bot.scheduler.runner import HandoverScheduler
from bot.service.handover import build_handover
from bot.service.reviews import confirm, due_reviews, review_key
from bot.store.db import Store
from bot.store.notes import Journal
from runbooks.model.changes import Scale, SetArg
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.fake_slack import block_errors
from tests.support.kube_fixtures import running_scenario
from tests.support.slack_kit import CHANNEL, ZH_CHANNEL, drain, running_bot

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
TWELVE_H = 12 * 3600.0


def _plan(plan_id: str, changes: tuple, name: str = "vllm-server", action: str = "lower_max_num_seqs",
          at: datetime = T0) -> Plan:
    return Plan(plan_id, PlanTarget(None, "llm", "Deployment", name), action, changes, "41", 3, (),
                "application/json-patch+json", "U1", at, at + timedelta(minutes=15), 1, "triage")


def _applied(store: Store, plan: Plan, at: datetime = T0, channel: str | None = CHANNEL) -> None:
    store.add_plan(plan, channel=channel, now=at)
    store.approve(plan.id, "U2", plan.content_hash, now=at)
    store.move(plan.id, "applying", actor="U2", now=at)
    store.move(plan.id, "applied", actor="U2", now=at)


@pytest.fixture
def store() -> Store:
    s = Store.memory()
    _applied(s, _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),)))
    _applied(s, _plan("p-scale", (Scale(1, 2),), action="scale_out", at=T0 + timedelta(hours=1)),
             T0 + timedelta(hours=1), channel=None)
    # not stop-gaps: a raised max-num-seqs, and a stop-gap rolled back
    _applied(s, _plan("p-up", (SetArg("vllm", "max-num-seqs", 64, 128),), name="other"))
    _applied(s, _plan("p-back", (SetArg("vllm", "max-model-len", 32768, 16384),), name="third"))
    s.move("p-back", "rolled_back", actor="U2", now=T0 + timedelta(minutes=30))
    return s


class Reminders:
    def __init__(self, fail: int = 0):
        self.posted: list[tuple[str, str]] = []
        self.fail = fail

    def __call__(self, reminder) -> None:
        self.posted.append((reminder.key, reminder.channel))
        if self.fail:
            self.fail -= 1
            raise RuntimeError("slack said no")


def _scheduler(store: Store, remind: Reminders, holder: str, default: str | None = "C0DEFAULT") -> HandoverScheduler:
    return HandoverScheduler(store, [], lambda *a: None, holder=holder, remind=remind,
                             reviews=lambda now: due_reviews(store, now, review_after_s=TWELVE_H,
                                                             default_channel=default))


def test_a_stopgap_is_due_at_its_review_time_in_the_plans_channel_or_the_default_one(store):
    assert due_reviews(store, T0 + timedelta(hours=11, minutes=59), review_after_s=TWELVE_H,
                       default_channel="C0DEFAULT") == []
    due = due_reviews(store, T0 + timedelta(hours=12), review_after_s=TWELVE_H, default_channel="C0DEFAULT")
    assert [(r.key, r.channel, r.review_at) for r in due] == [
        ("review:p-seqs:max-num-seqs", CHANNEL, T0 + timedelta(hours=12))]
    m = due[0].measure
    assert (m.target, m.what, m.old, m.value, m.since, m.live) == ("llm/vllm-server", "max-num-seqs", 128, 64, T0,
                                                                   "unconfirmed")
    assert (due[0].requested_by, due[0].approvers) == ("U1", ("U2",))
    later = due_reviews(store, T0 + timedelta(hours=13), review_after_s=TWELVE_H, default_channel="C0DEFAULT")
    assert [(r.key, r.channel) for r in later] == [("review:p-seqs:max-num-seqs", CHANNEL),
                                                   ("review:p-scale:replicas", "C0DEFAULT")]
    # with no channel anywhere, a CLI plan's reminder has nowhere to go
    assert [r.key for r in due_reviews(store, T0 + timedelta(hours=13), review_after_s=TWELVE_H,
                                       default_channel=None)] == ["review:p-seqs:max-num-seqs"]
    store.move("p-seqs", "rolled_back", actor="U2", now=T0 + timedelta(hours=12, minutes=30))
    assert [r.key for r in due_reviews(store, T0 + timedelta(hours=13), review_after_s=TWELVE_H,
                                       default_channel="C0DEFAULT")] == ["review:p-scale:replicas"]


def test_each_reminder_is_posted_once_across_ticks_replicas_and_restarts(tmp_path):
    path = tmp_path / "gpumem.db"
    s = Store.open(path)
    _applied(s, _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),)))
    remind = Reminders()
    a = _scheduler(s, remind, "pod-a")
    assert [o for o in a.tick(T0 + timedelta(hours=11)) if o.kind == "review"] == []
    first = a.tick(T0 + timedelta(hours=12, seconds=5))
    assert [(o.kind, o.state, o.key, o.slot) for o in first] == [
        ("review", "posted", "review:p-seqs:max-num-seqs", T0 + timedelta(hours=12))]
    assert [o.state for o in a.tick(T0 + timedelta(hours=12, minutes=1))] == ["taken"]
    b = _scheduler(Store.open(path), remind, "pod-b")  # a second replica on the same file
    assert [o.state for o in b.tick(T0 + timedelta(hours=12, minutes=2))] == ["taken"]
    restarted = _scheduler(Store.open(path), remind, "pod-a")
    assert [o.state for o in restarted.tick(T0 + timedelta(days=2))] == ["taken"]
    assert remind.posted == [("review:p-seqs:max-num-seqs", CHANNEL)]
    rec = Journal(Store.open(path)).slot_done(review_key("p-seqs", "max-num-seqs"))
    assert (rec.state, rec.channel, rec.slot, rec.holder) == ("posted", CHANNEL, T0 + timedelta(hours=12), "pod-a")


def test_a_reminder_claimed_by_another_instance_or_failed_is_not_doubled(store):
    remind = Reminders(fail=1)
    a = _scheduler(store, remind, "pod-a")
    at = T0 + timedelta(hours=12, seconds=1)
    assert store.claim("review:p-seqs:max-num-seqs", "pod-b", ttl_s=60, now=at)  # pod-b is posting it
    assert [(o.key, o.state) for o in a.tick(at)] == [("review:p-seqs:max-num-seqs", "taken")]
    assert remind.posted == []
    # pod-b died without finishing and its claim ran out: pod-a posts it, and Slack refuses
    assert [(o.state, o.error) for o in a.tick(at + timedelta(minutes=2))] == [("failed", "slack said no")]
    assert [o.state for o in a.tick(at + timedelta(minutes=3))] == ["taken"]  # recorded, not retried
    out = a.tick(T0 + timedelta(hours=13, seconds=1))  # the replica change's review is due now
    assert [(o.key, o.state, o.channel) for o in out] == [("review:p-seqs:max-num-seqs", "taken", CHANNEL),
                                                          ("review:p-scale:replicas", "posted", "C0DEFAULT")]
    assert remind.posted == [("review:p-seqs:max-num-seqs", CHANNEL), ("review:p-scale:replicas", "C0DEFAULT")]
    assert Journal(store).slot_done("review:p-seqs:max-num-seqs").error == "slack said no"


def test_the_reminder_says_whether_the_stopgap_is_still_live(store, tmp_path):
    due = due_reviews(store, T0 + timedelta(hours=13), review_after_s=TWELVE_H, default_channel="C0DEFAULT")
    with running_scenario("vllm-incident", tmp_path) as sc:
        read = KubeWriter(sc.api()).read
        seqs, scale = (confirm(store, r, read, T0 + timedelta(hours=13)) for r in due)
    assert (scale.measure.live, scale.measure.live_value) == ("confirmed", 2)  # the Deployment runs 2 replicas
    assert (seqs.measure.live, seqs.measure.live_value) == ("changed", "128")  # someone restored it

    def unreachable(kind, namespace, name):
        raise OSError("connection refused")

    assert confirm(store, due[0], unreachable, T0 + timedelta(hours=13)).measure.live == "unconfirmed"
    assert confirm(store, due[0], None, T0 + timedelta(hours=13)).measure.live == "unconfirmed"
    en = review_message(scale, "en")
    zh = review_message(seqs, "zh")
    for msg in (en, zh):
        assert block_errors(msg["blocks"]) == [] and B.violations(msg["blocks"]) == []
    text = json.dumps(en["blocks"])
    assert "Review due: a stop-gap on llm/vllm-server" in en["text"]
    assert "replicas 1 \\u2192 2 (plan p-scale), applied 2026-12-01 03:14Z, 12.0 h ago; review due 2026-12-01 15:14Z" in text
    assert "confirmed live" in text and "gpumem rollback p-scale --yes" in text and "<@U1>" in text
    ztext = json.dumps(zh["blocks"], ensure_ascii=False)
    assert "到期复核" in zh["text"] and "线上已改动：现为 128" in ztext
    unconfirmed = review_message(confirm(store, due[0], None, T0 + timedelta(hours=13)), "zh")
    assert "未确认：无法读取线上对象" in json.dumps(unconfirmed["blocks"], ensure_ascii=False)
    assert "已在线上确认" not in json.dumps(unconfirmed["blocks"], ensure_ascii=False)


def test_the_slack_handover_marks_unconfirmed_stopgaps_and_only_read_ones_as_confirmed(store, tmp_path):
    now = T0 + timedelta(hours=6)
    offline = build_handover(store, channel=CHANNEL, since=T0, now=now)
    for lang, word, note in (("en", "unconfirmed: the live object could not be read", "2 of 2 stop-gaps unconfirmed"),
                             ("zh", "未确认：无法读取线上对象", "2 项临时措施中有 2 项未确认")):
        parent = json.dumps(handover_parent(offline, lang)["blocks"], ensure_ascii=False)
        thread = json.dumps([m["blocks"] for m in handover_thread(offline, lang)[0]], ensure_ascii=False)
        for text in (parent, thread):
            assert text.count(word) == 2 and note in text
            assert "confirmed live" not in text and "已在线上确认" not in text
        assert {"en": "restore or make permanent [not confirmed on the live object]",
                "zh": "恢复原值或转为长期配置［未在线上对象确认］"}[lang] in thread  # the template's review line too
    with running_scenario("vllm-incident", tmp_path) as sc:
        live = build_handover(store, channel=CHANNEL, since=T0, now=now, read_object=KubeWriter(sc.api()).read)
    parent = json.dumps(handover_parent(live, "en")["blocks"])
    assert "confirmed live" in parent and "changed live: now 128" in parent
    assert "unconfirmed" not in parent


def test_the_bot_posts_a_reminder_into_the_channel_in_its_language(tmp_path):
    db = tmp_path / "gpumem.db"
    s = Store.open(db)
    _applied(s, _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),)), channel=ZH_CHANNEL)
    s.close()
    with running_bot(tmp_path, extra=f"store:\n  path: {db}\n") as (fake, bot):
        s = Store.open(db)
        try:
            remind = Reminders()
            sched = HandoverScheduler(s, [], lambda *a: None, holder="test", reviews=lambda now: due_reviews(
                s, now, review_after_s=TWELVE_H, default_channel=CHANNEL),
                remind=lambda r: (remind(r), bot.work.post_review(r.channel, bot.settings.lang_for(r.channel), r)))
            out = [sched.tick(T0 + timedelta(hours=12, seconds=n)) for n in (1, 2)]
        finally:
            s.close()
        drain(bot)
    assert [[o.state for o in r] for r in out] == [["posted"], ["taken"]]
    posts = fake.calls_to("chat.postMessage", ok_only=True)
    assert len(posts) == 1 and posts[0].args["channel"] == ZH_CHANNEL
    assert "到期复核：llm/vllm-server 上的临时措施" in posts[0].args["text"]
    # the config's cluster (context prod-a) has no kubeconfig here: unconfirmed, never confirmed
    assert "未确认" in posts[0].args["text"] and "已在线上确认" not in posts[0].args["text"]
