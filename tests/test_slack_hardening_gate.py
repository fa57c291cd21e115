"""The request gate: malformed timestamps and payloads are refused cleanly, and replays run once.

Requests go over real HTTP to the server `gpumem serve --http` runs, or straight into the WSGI
app when the header cannot travel through an HTTP client (non-ASCII digits); FakeSlack counts
what the bot posted.
"""

from __future__ import annotations

import json
import logging
import time
from types import SimpleNamespace
from urllib.parse import urlencode

import pytest
import requests
from slack_bolt.middleware.request_verification import RequestVerification
from slack_sdk.signature import SignatureVerifier

from bot.serve import http_app, serve_http
from bot.slack.app import build_bot
from bot.slack.gate import RequestGate, SeenRequests, payload_problem
from tests.support.fake_slack import FakeSlack, action_body, new_trigger_id, signed_headers, slash_body
from tests.support.slack_kit import (
    CHANNEL,
    SECRET,
    ExampleRunner,
    drain,
    is_diagnosis,
    make_settings,
    wsgi_post,
)


@pytest.fixture
def served(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    runner = ExampleRunner(charts=False)
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake), runner)
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            yield SimpleNamespace(fake=fake, bot=bot, server=server, runner=runner)
        finally:
            server.close()
            bot.close(timeout_s=10)


def _post(server, body: str, headers: dict[str, str]) -> requests.Response:
    return requests.post(server.url + "/slack/events", data=body.encode(), headers=headers, timeout=10)


def _refused(bot, reason: str) -> float:
    return bot.metrics.registry.get_sample_value("gpumem_http_refused_total", {"reason": reason}) or 0.0


def _parents(fake) -> list:
    return [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]


def _no_tracebacks(caplog) -> None:
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []
    assert [r for r in caplog.records if r.levelno >= logging.ERROR] == []


def _sign_with(timestamp: str, body: str) -> dict[str, str]:
    """Headers with `timestamp` as given and a signature that is right for it."""
    signature = SignatureVerifier(SECRET).generate_signature(timestamp=timestamp, body=body)
    return {"Content-Type": "application/x-www-form-urlencoded", "X-Slack-Request-Timestamp": timestamp,
            "X-Slack-Signature": signature}


# ----------------------------------------------------------------------------- item 2: timestamps, payloads


@pytest.mark.parametrize("timestamp", ["abc", "1e9", "9" * 5000, "", "-1", "1700000000.5", "+1700000000", "0x10"])
def test_a_timestamp_that_is_not_a_plain_integer_gets_401_over_http(served, caplog, timestamp):
    body = slash_body("triage llm/vllm-server", served.fake.response_url(1))
    resp = _post(served.server, body, _sign_with(timestamp, body) if timestamp else
                 {**signed_headers(SECRET, body), "X-Slack-Request-Timestamp": ""})
    assert resp.status_code == 401, resp.text
    assert resp.json() == {"error": "invalid request"}
    drain(served.bot)
    assert _parents(served.fake) == []
    assert _refused(served.bot, "bad_timestamp") == 1
    _no_tracebacks(caplog)


_wsgi = wsgi_post


@pytest.mark.parametrize("digits", ["١٢٣", "now"])
def test_non_ascii_digits_in_the_timestamp_get_401(served, caplog, digits):
    # '١٢٣' is 123 to int(); the current time written in Arabic-Indic digits, correctly signed, too
    if digits == "now":
        digits = str(int(time.time())).translate(str.maketrans("0123456789", "٠١٢٣٤٥٦٧٨٩"))
    app = http_app(served.bot)
    body = slash_body("triage llm/vllm-server", served.fake.response_url(1))
    status, out = _wsgi(app, body, _sign_with(digits, body))
    assert status == 401 and json.loads(out) == {"error": "invalid request"}
    drain(served.bot)
    assert _parents(served.fake) == [] and served.fake.calls_to("respond") == []
    _no_tracebacks(caplog)


def _interaction(fake, **payload) -> str:
    base = {"type": "block_actions", "user": {"id": "U0ONCALL"}, "team": {"id": "T0FAKE"},
            "container": {"type": "message", "channel_id": CHANNEL, "message_ts": "1700000000.000001"},
            "channel": {"id": CHANNEL}, "response_url": fake.response_url(5), "trigger_id": new_trigger_id()}
    return urlencode({"payload": json.dumps({**base, **payload})})


@pytest.mark.parametrize("payload", [
    {"actions": []}, {"actions": [7]}, {"actions": "gpumem_rerun"}, {"actions": [{}]},
    {"actions": [{"action_id": ["gpumem_rerun"]}]}, {"actions": None}, {"user": ["U1"], "actions": [{"action_id": "x"}]},
    {"response_url": 7, "actions": [{"action_id": "gpumem_rerun"}]},
])
def test_a_signed_interaction_the_bot_cannot_route_gets_400(served, caplog, payload):
    body = _interaction(served.fake, **payload)
    resp = _post(served.server, body, signed_headers(SECRET, body))
    assert resp.status_code == 400, resp.text
    assert resp.json() == {"error": "invalid request body"}
    drain(served.bot)
    assert [c.method for c in served.fake.calls if c.method != "auth.test"] == []
    assert _refused(served.bot, "bad_payload") == 1
    _no_tracebacks(caplog)


def test_payload_problems_are_named():
    assert payload_problem([]) == "not an object"
    assert payload_problem({"type": "block_actions", "actions": [{"action_id": "a"}]}) is None
    assert payload_problem({"type": "interactive_message", "actions": [{}]}) == "callback_id is not a string"
    assert payload_problem({"type": "view_submission"}) is None


# ----------------------------------------------------------------------------- item 3: replays


def test_a_replayed_command_runs_once_and_posts_one_parent(served, caplog):
    fake, server = served.fake, served.server
    body = slash_body("triage llm/vllm-server", fake.response_url(1))
    headers = signed_headers(SECRET, body)
    first = _post(server, body, headers)
    second = _post(server, body, headers)  # the same bytes and headers, within the 5-minute window
    assert first.status_code == 200 and first.json()["text"].startswith("On it: triage")
    assert second.status_code == 200 and second.text == ""
    assert second.headers.get("x-slack-no-retry") == "1"
    fake.wait_for("chat.update", where=is_diagnosis, timeout=30)
    drain(served.bot)
    assert len(_parents(fake)) == 1
    assert len(fake.calls_to("chat.update", ok_only=True)) >= 1
    assert served.runner.started.acquire(timeout=0) and not served.runner.started.acquire(timeout=0)
    assert _refused(served.bot, "replay") == 1
    assert any("replayed Slack request" in r.getMessage() for r in caplog.records)


def test_a_replay_with_a_fresh_timestamp_is_caught_by_its_trigger_id(served):
    fake, server = served.fake, served.server
    body = slash_body("triage llm/vllm-server", fake.response_url(1), trigger_id="77.1700000000.abc")
    assert _post(server, body, signed_headers(SECRET, body)).status_code == 200
    again = _post(server, body, signed_headers(SECRET, body, timestamp=time.time() + 2))
    assert again.status_code == 200 and again.text == ""
    fake.wait_for("chat.update", where=is_diagnosis, timeout=30)
    drain(served.bot)
    assert len(_parents(fake)) == 1


def test_slacks_own_retry_is_acked_without_running_twice(served, caplog):
    fake, server = served.fake, served.server
    trigger = new_trigger_id()
    body = slash_body("triage llm/vllm-server", fake.response_url(1), trigger_id=trigger)
    assert _post(server, body, signed_headers(SECRET, body)).status_code == 200
    retry = {**signed_headers(SECRET, body, timestamp=time.time() + 1), "X-Slack-Retry-Num": "1",
             "X-Slack-Retry-Reason": "http_timeout"}
    resp = _post(server, body, retry)
    assert resp.status_code == 200 and resp.text == ""
    fake.wait_for("chat.update", where=is_diagnosis, timeout=30)
    drain(served.bot)
    assert len(_parents(fake)) == 1
    assert any("Slack retry 1 (http_timeout)" in r.getMessage() for r in caplog.records)


def test_a_retry_whose_first_attempt_never_arrived_runs_once(served):
    fake, server = served.fake, served.server
    body = slash_body("triage llm/vllm-server", fake.response_url(1))
    headers = {**signed_headers(SECRET, body), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_error"}
    assert _post(server, body, headers).json()["text"].startswith("On it: triage")
    fake.wait_for("chat.update", where=is_diagnosis, timeout=30)
    drain(served.bot)
    assert len(_parents(fake)) == 1


def test_a_replayed_click_runs_once(served):
    fake, server = served.fake, served.server
    body = slash_body("triage llm/vllm-server", fake.response_url(1))
    _post(server, body, signed_headers(SECRET, body))
    final = fake.wait_for("chat.update", where=is_diagnosis, timeout=30)[0]
    button = final.args["blocks"][-1]["elements"][0]
    click = action_body(button["action_id"], button["value"], fake.response_url(7), message_ts=final.args["ts"])
    headers = signed_headers(SECRET, click)
    assert [_post(server, click, headers).status_code for _ in range(3)] == [200, 200, 200]
    fake.wait_for("chat.update", 2, where=is_diagnosis, timeout=30)
    drain(served.bot)
    assert len(_parents(fake)) == 2
    assert fake.calls_to("respond") == [], "a replay is not a double click: nobody is told 'one click is enough'"


def test_distinct_commands_with_the_same_text_all_run(served):
    fake, server = served.fake, served.server
    for _ in range(3):
        body = slash_body("triage llm/vllm-server", fake.response_url(1))  # same text, same second, new trigger
        assert _post(server, body, signed_headers(SECRET, body)).json()["text"].startswith("On it")
    fake.wait_for("chat.update", 3, where=is_diagnosis, timeout=30)
    drain(served.bot)
    assert len(_parents(fake)) == 3


def test_the_seen_set_expires_and_stays_bounded():
    now = [0.0]
    seen = SeenRequests(window_s=600, max_keys=3, clock=lambda: now[0])
    assert seen.first_sight([("signature", "a")])
    now[0] = 599.0
    assert not seen.first_sight([("signature", "a")])
    now[0] = 601.0
    assert seen.first_sight([("signature", "a")]), "after the window a signature is stale anyway"
    for key in "bcde":
        assert seen.first_sight([("signature", key)])
    assert len(seen) == 3
    assert seen.first_sight([("signature", "a")]), "the oldest key made room"


def test_the_gate_takes_the_place_of_bolts_request_verification(tmp_path):
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=False))
        chain = [type(m).__name__ for m in bot.app._middleware_list]
        bot.close(timeout_s=5)
    assert not any(isinstance(m, RequestVerification) for m in bot.app._middleware_list)
    assert chain.index("RequestGate") < chain.index("SingleTeamAuthorization")
    assert isinstance(bot.app._middleware_list[chain.index("RequestGate")], RequestGate)
