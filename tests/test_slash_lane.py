"""The slash-command lane answers exactly as Bolt's dispatch does, and leaves the rest to Bolt.

Two bots from the same config get the same requests in the same order: one through the lane,
one through Bolt alone. Every answer (status, headers, body) and what each bot then did (jobs
queued, Slack calls made) must be the same.
"""

from __future__ import annotations

import io
import json
from contextlib import ExitStack
from wsgiref.util import setup_testing_defaults

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.http.app import EVENTS_PATH
from bot.slack.events import events_app
from bot.slack.slash import SlashLane
from tests.support.fake_slack import action_body, signed_headers, slash_body
from tests.support.slack_kit import CHANNEL, OTHER_CHANNEL, SECRET, running_bot


def post(app, body: str, headers: dict[str, str]) -> tuple[str, list[tuple[str, str]], bytes]:
    raw = body.encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": EVENTS_PATH, "CONTENT_LENGTH": str(len(raw)),
               "CONTENT_TYPE": headers.get("Content-Type", "application/x-www-form-urlencoded"),
               "wsgi.input": io.BytesIO(raw)}
    for k, v in headers.items():
        if k.lower() != "content-type":
            environ["HTTP_" + k.upper().replace("-", "_")] = v
    setup_testing_defaults(environ)
    seen: list = []
    out = b"".join(app(environ, lambda status, hdrs, exc=None: seen.append((status, hdrs))))
    return seen[0][0], sorted(seen[0][1]), out


class Pair:
    """The same bot twice: `lane` answers through the SlashLane, `bolt` through Bolt only."""

    def __init__(self, stack: ExitStack, tmp_path):
        (tmp_path / "a").mkdir()
        (tmp_path / "b").mkdir()
        self.fake_a, self.a = stack.enter_context(running_bot(tmp_path / "a"))
        self.fake_b, self.b = stack.enter_context(running_bot(tmp_path / "b"))
        self.lane = SlashLane(self.a.app, self.a.settings.slack.command, self.a.handlers.on_command)
        self.taken = 0
        answer = self.lane.answer

        def counted(environ):
            got = answer(environ)
            self.taken += got is not None
            return got

        self.lane.answer = counted  # type: ignore[method-assign]
        self.with_lane = events_app(self.a.app, self.a.metrics, EVENTS_PATH, self.a.handlers.answering, lane=self.lane)
        self.bolt_only = events_app(self.b.app, self.b.metrics, EVENTS_PATH, self.b.handlers.answering)

    def both(self, body: str, headers: dict[str, str]):
        got, want = post(self.with_lane, body, headers), post(self.bolt_only, body, headers)
        assert got == want, body
        return got


@pytest.fixture
def pair(tmp_path):
    with ExitStack() as stack:
        yield Pair(stack, tmp_path)


def _signed(body: str, **kw) -> dict[str, str]:
    return signed_headers(SECRET, body, **kw)


def test_without_a_kept_auth_test_result_bolt_answers_and_makes_the_call(pair):
    body = slash_body("help", "http://127.0.0.1:1/r/0")
    pair.both(body, _signed(body))
    assert pair.taken == 1  # the bot called auth.test at start (slack.verify_token_at_start)
    for bot in (pair.a, pair.b):  # as a bot started without that check has it
        next(m for m in bot.app._middleware_list if type(m).__name__ == "SingleTeamAuthorization").auth_test_result = None
    before = len(pair.fake_a.calls_to("auth.test"))
    body = slash_body("help", "http://127.0.0.1:1/r/1")
    assert pair.both(body, _signed(body))[0] == "200 OK"
    assert pair.taken == 1  # Bolt's
    assert len(pair.fake_a.calls_to("auth.test")) == before + 1
    body = slash_body("help", "http://127.0.0.1:1/r/2")
    pair.both(body, _signed(body))
    assert pair.taken == 2  # kept now: the lane's, with no further call
    assert len(pair.fake_a.calls_to("auth.test")) == before + 1


@pytest.mark.parametrize("text", [
    "triage llm/vllm-server", "help", "", "help triage", "frobnicate", "triage", "triage --context",
    "triage llm/vllm-server --lang zh", "note the pager went off", "notes", "plans", "budget llm/vllm-server",
    "triage " + "x" * 3000, 'triage "unclosed', "fleet --all",
])
def test_every_answer_is_bolts(pair, text):
    warm = slash_body("help", "http://127.0.0.1:1/r/w")
    pair.both(warm, _signed(warm))
    for channel in (CHANNEL, OTHER_CHANNEL):
        body = slash_body(text, "http://127.0.0.1:1/r/1", channel=channel)
        status, headers, answer = pair.both(body, _signed(body))
        assert ("content-type", "application/json;charset=utf-8") in headers
        assert status == "200 OK"
        assert json.loads(answer)  # an ack with a message
    assert pair.taken == 3  # the warm-up command and both of these
    assert pair.a.pool.queued + pair.a.pool.running == pair.b.pool.queued + pair.b.pool.running


def test_refusals_and_replays_are_the_gates_in_both(pair):
    warm = slash_body("help", "http://127.0.0.1:1/r/w")
    pair.both(warm, _signed(warm))
    body = slash_body("help", "http://127.0.0.1:1/r/1")
    assert pair.both(body, {**_signed(body), "X-Slack-Signature": "v0=" + "0" * 64})[0] == "401 Unauthorized"
    assert pair.both(body, _signed(body, timestamp=1_000_000_000))[0] == "401 Unauthorized"
    assert pair.both(body, {**_signed(body), "X-Slack-Request-Timestamp": "1e9"})[0] == "401 Unauthorized"
    headers = _signed(body)
    assert pair.both(body, headers)[0] == "200 OK"
    replay = pair.both(body, headers)  # the same signature again: acked, not run
    assert (replay[0], replay[2]) == ("200 OK", b"")
    retry = pair.both(body, {**_signed(body), "X-Slack-Retry-Num": "1"})  # same trigger_id
    assert retry[2] == b""


def test_what_is_not_a_gpumem_slash_command_goes_to_bolt(pair):
    warm = slash_body("help", "http://127.0.0.1:1/r/w")
    pair.both(warm, _signed(warm))
    taken = pair.taken
    other = slash_body("help", "http://127.0.0.1:1/r/2", command="/other")
    assert pair.both(other, _signed(other))[0] == "404 Not Found"
    ssl = "ssl_check=1&token=legacy-verification"
    assert pair.both(ssl, _signed(ssl))[0] == "200 OK"
    click = action_body("gpumem_rerun", "llm/vllm-server", "http://127.0.0.1:1/r/3")
    pair.both(click, _signed(click))
    as_json = json.dumps({"command": "/gpumem", "text": "help"})
    pair.both(as_json, {**_signed(as_json), "Content-Type": "application/json"})
    assert pair.taken == taken


def test_a_chain_with_middleware_the_lane_does_not_know_stays_with_bolt(pair):
    pair.a.app.use(lambda next: next())
    lane = SlashLane(pair.a.app, "/gpumem", pair.a.handlers.on_command)
    assert not lane.open and "CustomMiddleware" in lane.reason
    body = slash_body("help", "http://127.0.0.1:1/r/1")
    assert lane.answer(_environ(body)) is None


def _environ(body: str) -> dict:
    raw = body.encode()
    return {"REQUEST_METHOD": "POST", "CONTENT_TYPE": "application/x-www-form-urlencoded",
            "CONTENT_LENGTH": str(len(raw)), "wsgi.input": io.BytesIO(raw), **{
                "HTTP_" + k.upper().replace("-", "_"): v for k, v in _signed(body).items() if k != "Content-Type"}}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=60))
def test_any_text_gets_bolts_answer(pair, text):
    body = slash_body(text, "http://127.0.0.1:1/r/1")
    status, _, answer = pair.both(body, _signed(body))
    assert status == "200 OK" and answer
