"""A late 5xx (Slack did the work, then answered 500) leaves exactly one message per job.

FakeSlack's `fail_after` processes a call and then answers 500, the way a Slack edge can after
the message is already in the channel. The bot must look for what the first try left (every
message carries its job id in Slack message metadata) before it tries again, so that no parent
is doubled, none stays at "starting", and no upload is reported as failed when it was shared.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from types import SimpleNamespace

import pytest
import requests

from bot.serve import serve_http
from bot.slack.api import JOB_EVENT, SlackPoster, job_metadata
from bot.slack.app import build_bot
from bot.telemetry.metrics import BotMetrics
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.slack_kit import (
    CHANNEL,
    SECRET,
    DrawnOnce,
    ExampleRunner,
    drain,
    is_diagnosis,
    make_settings,
)

COMMANDS = 20


@pytest.fixture
def served(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=DrawnOnce()))
        bot.poster.backoff_s = 0.05  # the retries' waits, scaled down
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            yield SimpleNamespace(fake=fake, bot=bot, server=server)
        finally:
            server.close()
            bot.close(timeout_s=30)


def _run_commands(served, n: int = COMMANDS) -> None:
    for i in range(n):
        body = slash_body("triage llm/vllm-server", served.fake.response_url(i))
        resp = requests.post(served.server.url + "/slack/events", data=body, headers=signed_headers(SECRET, body),
                             timeout=10)
        assert resp.status_code == 200
    served.fake.wait_for("chat.update", n, where=is_diagnosis, timeout=90)
    drain(served.bot)


def _errors(bot, prefix: str) -> float:
    total = 0.0
    for family in bot.metrics.registry.collect():
        if family.name == "gpumem_slack_api_errors":
            total += sum(s.value for s in family.samples
                         if s.name.endswith("_total") and s.labels["method"].startswith(prefix))
    return total


def test_late_server_errors_leave_one_parent_per_command_and_every_file_shared_once(served):
    fake = served.fake
    fake.fail_after("chat.postMessage", 500, count=5)  # the first five parents: posted, then 500
    fake.fail_after("files.completeUploadExternal", 500, count=5)
    fake.fail_after("upload", 500, count=5)
    _run_commands(served)

    parents = fake.parents(CHANNEL)
    assert len(parents) == COMMANDS
    assert all(any(b.get("type") == "actions" for b in m["blocks"] or []) for m in parents), \
        "every parent ends in its diagnosis: none is left at 'starting'"
    job_ids = [m["metadata"]["event_payload"]["job_id"] for m in parents]
    assert {m["metadata"]["event_type"] for m in parents} == {JOB_EVENT} and len(set(job_ids)) == COMMANDS

    posts = fake.calls_to("chat.postMessage")
    parent_posts = [c for c in posts if not c.args.get("thread_ts")]
    assert len(parent_posts) == COMMANDS, "a parent whose first try was posted is found, not posted again"
    # each of the five parents answered 500 after it was posted is looked for before any second
    # try (a second try would be a sixth parent post, refused above); on a loaded machine a run
    # now and then makes one or two looks more (not yet explained, see the issue notes): the
    # looks are a floor here, the one parent per command is the contract
    assert len(fake.calls_to("conversations.history")) >= 5

    shares = [f for m in fake.messages.values() for f in m.get("files") or []]
    assert len(shares) == 3 * COMMANDS and len({f["id"] for f in shares}) == 3 * COMMANDS
    per_thread = Counter(m["thread_ts"] for m in fake.messages.values() if m.get("files"))
    assert sorted(per_thread) == sorted(m["ts"] for m in parents) and set(per_thread.values()) == {3}
    assert _errors(served.bot, "files") == 0, "no upload reported as failed"
    assert _errors(served.bot, "chat.postMessage") == 0


def test_a_late_error_on_a_thread_reply_does_not_double_it(served):
    fake = served.fake
    body = slash_body("triage llm/vllm-server", fake.response_url(1))
    requests.post(served.server.url + "/slack/events", data=body, headers=signed_headers(SECRET, body), timeout=10)
    parent = fake.wait_for("chat.postMessage", 1)[0]
    fake.fail_after("chat.postMessage", 500, count=1)  # the first thread reply: posted, then 500
    fake.wait_for("chat.update", where=is_diagnosis, timeout=30)
    fake.wait_for("files.completeUploadExternal", 3, timeout=30)
    drain(served.bot)
    ts = parent.response["ts"]
    replies = [m for m in fake.messages.values() if m.get("thread_ts") == ts and not m.get("files")]
    parts = Counter(m["metadata"]["event_payload"]["part"] for m in replies)
    assert parts and set(parts.values()) == {1}, parts
    assert len(fake.calls_to("conversations.replies")) == 1


def test_without_history_access_a_post_is_tried_again_and_the_operator_is_told_once(served, caplog):
    fake = served.fake
    fake.scopes.discard("channels:history")
    fake.fail_after("chat.postMessage", 500, count=2)
    _run_commands(served, n=2)
    warnings = [r.getMessage() for r in caplog.records if "cannot read channel history" in r.getMessage()]
    assert len(warnings) == 1 and "channels:history" in warnings[0]
    assert len(fake.calls_to("conversations.history")) == 1, "asked once, then not again"
    diagnoses = [m for m in fake.parents(CHANNEL) if any(b.get("type") == "actions" for b in m["blocks"] or [])]
    assert len(diagnoses) == 2, "every command is still answered (a doubled parent is the price)"


def test_a_lookup_is_only_made_when_the_first_try_may_have_worked(tmp_path):
    with FakeSlack() as fake:
        client = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=False)).client
        poster = SlackPoster(client, BotMetrics(), backoff_s=0)
        meta = job_metadata("abc123", "parent")
        fake.fail_next("chat.postMessage", 500)  # refused before processing: looked for, not found, posted
        ts, error = poster.post_or_error(CHANNEL, {"text": "hello"}, meta=meta)
        assert error is None and [m["ts"] for m in fake.parents(CHANNEL)] == [ts]
        assert len(fake.calls_to("conversations.history")) == 1
        fake.fail_next("chat.postMessage", 200, error="invalid_blocks")  # a clear refusal: no retry, no lookup
        assert poster.post_or_error(CHANNEL, {"text": "x"}, meta=meta) == (None, "invalid_blocks")
        assert len(fake.calls_to("conversations.history")) == 1
        history = fake.calls_to("conversations.history")[0]
    assert history.args["include_all_metadata"] in ("1", "true", "True")
    assert float(history.args["oldest"]) < float(ts)


def test_the_stand_in_returns_metadata_only_when_asked(tmp_path):
    with FakeSlack() as fake:
        client = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=False)).client
        sent = client.chat_postMessage(channel=CHANNEL, text="x", metadata=job_metadata("j1", "parent"))
        plain = client.conversations_history(channel=CHANNEL)["messages"]
        full = client.conversations_history(channel=CHANNEL, include_all_metadata=True)["messages"]
        bad = fake.answer("chat.postMessage", {"channel": CHANNEL, "text": "x", "metadata": {"event_type": 1},
                                               "token": fake.token}, {})[2]
    assert "metadata" not in plain[0] and full[0]["metadata"]["event_payload"] == {"job_id": "j1", "part": "parent"}
    assert full[0]["ts"] == sent["ts"]
    assert bad == {"ok": False, "error": "invalid_metadata_format"}
    assert json.dumps(full)  # plain JSON, as Slack answers
