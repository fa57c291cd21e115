"""`/gpumem handover`: the parent and its thread (golden files in en and zh, Block Kit limits),
and, through the Slack stand-in, posted into the channel and recorded in the store."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from bot.render import slack_blocks as B
from bot.render.slack_handover import MAX_HANDOVER_THREAD, handover_parent, handover_thread
from bot.service.handover import build_handover
from bot.service.notes import add_note, record_triage
from bot.store.db import Store
from bot.store.notes import Journal
from runbooks.model.changes import SetArg
from runbooks.model.report import Report, Verdict
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support import prom_harness as h
from tests.support.fake_slack import block_errors
from tests.support.slack_kit import CHANNEL, ZH_CHANNEL, check_golden, dispatch_command, drain, running_bot

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
NOW = T0 + timedelta(hours=6)


def _plan(plan_id: str, changes: tuple, name: str = "vllm-server", action: str = "lower_max_num_seqs",
          at: datetime = T0) -> Plan:
    return Plan(plan_id, PlanTarget(None, "llm", "Deployment", name), action, changes, "41", 3, (),
                "application/json-patch+json", "U1", at, at + timedelta(minutes=15), 1, "triage")


def _shift(store: Store, channel: str = CHANNEL, notes: int = 1, t0: datetime = T0, plan: bool = True) -> Store:
    if plan:
        p = _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),), at=t0)
        store.add_plan(p, now=t0)
        store.approve(p.id, "U2", p.content_hash, now=t0)
        store.move(p.id, "applying", actor="U2", now=t0)
        store.move(p.id, "applied", actor="U2", now=t0)
    record_triage(store, Report(target="llm/vllm-server", model="Qwen2.5-72B", engine="vllm", gpu="H100 80GB",
                                verdict=Verdict("kv_cache_pressure", priority="highest")), actor="U0ONCALL", channel=channel,
                  now=t0 - timedelta(minutes=2))
    for i in range(notes):
        add_note(store, "U042", f"max-num-seqs lowered while the batch job runs ({i})", target="llm/vllm-server",
                 channel=channel, now=t0 + timedelta(minutes=1 + i))
    return store


def _check(msg: dict) -> None:
    assert msg["text"] and len(msg["text"]) <= B.FALLBACK_CHARS
    assert block_errors(msg["blocks"]) == [] and B.violations(msg["blocks"]) == []


_check_golden = check_golden


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_handover_renders_as_its_golden_file(lang):
    store = _shift(Store.memory())
    ho = build_handover(store, channel=CHANNEL, since=T0 - timedelta(hours=1), now=NOW)
    parent = handover_parent(ho, lang)
    thread, overflow = handover_thread(ho, lang)
    for msg in (parent, *thread):
        _check(msg)
    assert not overflow
    _check_golden(f"_handover.{lang}", {"parent": parent, "thread": list(thread)})


def test_a_long_handover_stays_within_limits_and_overflows_to_a_file():
    store = Store.memory()
    _shift(store, notes=0)
    for i in range(300):
        add_note(store, "U042", f"note {i} " + "x" * 1500, channel=CHANNEL, now=T0 + timedelta(seconds=i))
    ho = build_handover(store, channel=CHANNEL, since=T0 - timedelta(hours=1), now=NOW)
    parent = handover_parent(ho, "en")
    thread, overflow = handover_thread(ho, "en")
    assert overflow and len(thread) == MAX_HANDOVER_THREAD
    for msg in (parent, *thread):
        _check(msg)


def test_slash_handover_posts_parent_and_thread_and_records_it(tmp_path):
    db = tmp_path / "gpumem.db"
    store = Store.open(db)
    t0 = datetime.now(UTC) - timedelta(hours=2)
    _shift(store, notes=2, t0=t0)
    _shift(store, channel=ZH_CHANNEL, notes=1, t0=t0, plan=False)
    store.close()
    extra = f"store:\n  path: {db}\n"
    with running_bot(tmp_path, extra=extra) as (fake, bot):
        resp = dispatch_command(bot, fake, "handover")
        fake.wait_for("chat.postMessage", 2)
        dispatch_command(bot, fake, "handover", channel=ZH_CHANNEL, n=2)
        fake.wait_for("chat.postMessage", 4)
        drain(bot)
    assert "the shift handover" in json.loads(resp.body)["text"]
    posts = fake.calls_to("chat.postMessage", ok_only=True)
    parents = [c for c in posts if not c.args.get("thread_ts")]
    assert [c.args["channel"] for c in parents] == [CHANNEL, ZH_CHANNEL]
    en, zh = parents
    assert "Shift handover" in en.args["text"] and "2 incidents, 1 change, 1 stop-gap, 2 to watch." in en.args["text"]
    assert "交接班" in zh.args["text"]
    thread = fake.thread(CHANNEL, en.response["ts"])
    body = json.dumps([c.args.get("blocks") for c in thread], ensure_ascii=False)
    assert "max-num-seqs lowered while the batch job runs (1)" in body and "2.0 h" in body
    assert "llm/vllm-server" in body and "p-seqs" in body
    store = Store.open(db)
    try:
        last = Journal(store).last_handover(CHANNEL)
        assert last is not None and last.actor == "U0ONCALL" and not last.late
        assert Journal(store).last_handover(ZH_CHANNEL) is not None
    finally:
        store.close()


def test_slash_handover_without_a_store_is_refused(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        ack = json.loads(dispatch_command(bot, fake, "handover").body)
        drain(bot)
    assert "store.path" in ack["text"] and not fake.calls_to("chat.postMessage")


def test_the_handover_shows_the_channels_watched_services_and_charts_the_shift(tmp_path, prom):
    db = tmp_path / "gpumem.db"
    store = Store.open(db)
    # the shift triaged SGLang only; the channel watches the vLLM service
    record_triage(store, Report(target=f"{h.SGL_NS}/sgl", verdict=Verdict("kv_cache_pressure")), actor="U0ONCALL",
                  channel=CHANNEL, now=datetime.now(UTC) - timedelta(minutes=30))
    store.close()
    extra = f"store:\n  path: {db}\nprometheus:\n  url: {prom.url}\n  timeout_s: 20\n"
    with running_bot(tmp_path, extra=extra, channel_extra=", watch: [llm/vllm-server]") as (fake, bot):
        dispatch_command(bot, fake, "handover")
        parent = fake.wait_for("chat.postMessage", 1, timeout=30, where=lambda c: not c.args.get("thread_ts"))[0]
        deadline = datetime.now(UTC) + timedelta(seconds=30)
        while not any(u.get("completed") for u in fake.uploads.values()) and datetime.now(UTC) < deadline:
            time.sleep(0.05)
        drain(bot)
    thread = json.dumps([c.args.get("blocks") for c in fake.thread(CHANNEL, parent.response["ts"])])
    # the history ends 5 minutes before now: the peaks and counts of the shift, no reading "now"
    assert "`llm/vllm-server` KV 97% (now not measured, headroom 3%), queue 18 (now not measured), 90 preemptions" in thread
    assert "3 restarts" in thread
    assert f"`{h.SGL_NS}/sgl` KV " not in thread  # triaged, but not watched: no state line
    (upload,) = fake.uploads.values()
    assert upload["filename"] == "gpumem-shift.png" and upload["thread_ts"] == parent.response["ts"]
    assert upload["channel"] == CHANNEL and "KV cache usage" in upload["title"]
    assert upload["data"][:8] == b"\x89PNG\r\n\x1a\n"
