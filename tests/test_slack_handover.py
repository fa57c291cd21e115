"""`/gpumem note`, `/gpumem notes`, and the triage record, through the Slack stand-in."""

from __future__ import annotations

import json

from bot.store.db import Store
from bot.store.notes import Journal
from tests.support.slack_kit import (
    CHANNEL,
    OTHER_CHANNEL,
    ZH_CHANNEL,
    ExampleRunner,
    dispatch_command,
    drain,
    is_diagnosis,
    running_bot,
)


def _ack(resp) -> dict:
    assert resp.status == 200, resp.body
    return json.loads(resp.body) if resp.body else {}


def _with_store(tmp_path) -> dict:
    return {"extra": f"store:\n  path: {tmp_path / 'gpumem.db'}\n"}


def _journal(tmp_path) -> tuple[Store, Journal]:
    store = Store.open(tmp_path / "gpumem.db")
    return store, Journal(store)


def test_note_records_author_channel_target_and_text_and_answers_ephemerally(tmp_path):
    with running_bot(tmp_path, **_with_store(tmp_path)) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, "note llm/vllm-server  max-num-seqs lowered to 64 until Monday"))
        plain = _ack(dispatch_command(bot, fake, "note watch the 02:00 batch job"))
        drain(bot)
    store, journal = _journal(tmp_path)
    try:
        notes = journal.notes()
    finally:
        store.close()
    assert [(n.author, n.channel, n.target, n.text) for n in notes] == [
        ("U0ONCALL", CHANNEL, "llm/vllm-server", "max-num-seqs lowered to 64 until Monday"),
        ("U0ONCALL", CHANNEL, None, "watch the 02:00 batch job"),
    ]
    assert ack["response_type"] == "ephemeral"
    assert f"Note {notes[0].id} saved" in ack["text"] and "max-num-seqs lowered to 64" in ack["text"]
    assert "`llm/vllm-server`" in ack["blocks"][0]["text"]["text"]
    assert f"Note {notes[1].id} saved" in plain["text"]
    assert not fake.calls_to("chat.postMessage"), "nothing in the channel"


def test_notes_lists_this_channels_notes_only(tmp_path):
    with running_bot(tmp_path, **_with_store(tmp_path)) as (fake, bot):
        _ack(dispatch_command(bot, fake, "note llm/vllm-server first note"))
        _ack(dispatch_command(bot, fake, "note 另一个频道的备注", channel=ZH_CHANNEL))
        listing = _ack(dispatch_command(bot, fake, "notes --since 12h"))
        zh = _ack(dispatch_command(bot, fake, "notes", channel=ZH_CHANNEL))
        drain(bot)
    assert "Notes (1, oldest first)" in listing["text"]
    body = listing["blocks"][0]["text"]["text"]
    assert "<@U0ONCALL> `llm/vllm-server`: first note" in body and "另一个频道" not in body
    assert "备注（1 条" in zh["text"] and "另一个频道的备注" in zh["blocks"][0]["text"]["text"]


def test_note_refusals_empty_store_namespace(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        no_store = _ack(dispatch_command(bot, fake, "note hello"))
    assert "store.path" in no_store["text"]
    with running_bot(tmp_path, **_with_store(tmp_path)) as (fake, bot):
        outside = _ack(dispatch_command(bot, fake, "note kube-system/coredns restarted", channel=ZH_CHANNEL))
        too_long = _ack(dispatch_command(bot, fake, "note " + "x" * 2100))
        other = _ack(dispatch_command(bot, fake, "note hi", channel=OTHER_CHANNEL))
        drain(bot)
    assert "kube-system" in outside["text"]
    assert "2000" in too_long["text"]
    assert "not" in other["text"].lower()
    store, journal = _journal(tmp_path)
    try:
        assert journal.notes() == []
    finally:
        store.close()


def test_slack_triage_is_recorded_for_the_handover(tmp_path):
    with running_bot(tmp_path, runner=ExampleRunner(charts=False), **_with_store(tmp_path)) as (fake, bot):
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        fake.wait_for("chat.update", where=is_diagnosis)
        drain(bot)
    store, journal = _journal(tmp_path)
    try:
        triages = journal.triages()
    finally:
        store.close()
    assert len(triages) == 1
    t = triages[0]
    assert (t.actor, t.channel, t.namespace, t.name) == ("U0ONCALL", CHANNEL, "llm", "vllm-server")
    assert t.verdict == t.summary["verdict"] == "kv_cache_pressure"
