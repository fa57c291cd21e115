"""Slack input is outside input: the command grammar and the signed-request path are fuzzed.

Whatever a user types after `/gpumem`, and whatever form fields arrive signed, the result is a
parsed command or a typed CommandError, and the HTTP answer is an ack (200) with the user
told what was wrong, never a 500 and never a post to the channel for a refusal.
"""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from slack_bolt.request import BoltRequest

from bot.grammar.slack import Command, CommandError, parse_command
from tests.support.fake_slack import signed_headers
from tests.support.slack_kit import CHANNEL, SECRET, running_bot, wsgi_post

_WORDS = st.sampled_from(["triage", "budget", "profile", "snapshot", "help", "llm/vllm-server", "--context",
                          "--lang", "zh", "en", "--engine", "vllm", "--model", "-n", "--json", "--bundle", "/etc",
                          "'", '"', "\\", "--max-model-len", "8k", "--what-if", "a=b", "…", "全", "--", "-"])
_TEXT = st.one_of(st.text(max_size=200), st.lists(_WORDS, max_size=8).map(" ".join))


@settings(max_examples=300, deadline=None)
@given(text=_TEXT, default_ns=st.one_of(st.none(), st.sampled_from(["llm", ""])))
def test_any_command_text_parses_or_raises_a_typed_error(text, default_ns):
    try:
        cmd = parse_command(text, default_namespace=default_ns or None)
    except CommandError as e:
        assert e.key and isinstance(e.usage, str)
    else:
        assert isinstance(cmd, Command) and cmd.verb


@pytest.fixture(scope="module")
def bot_and_fake(tmp_path_factory):
    with running_bot(tmp_path_factory.mktemp("fuzz")) as (fake, bot):
        yield fake, bot


_FIELD = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_TEXT, user=_FIELD, channel=st.one_of(st.just(CHANNEL), _FIELD), command=st.sampled_from(
    ["/gpumem", "/other", ""]), extra=st.dictionaries(st.sampled_from(["team_id", "trigger_id", "api_app_id"]),
                                                     _FIELD, max_size=2))
def test_any_signed_slash_command_is_answered_without_a_server_error(bot_and_fake, text, user, channel, command,
                                                                       extra):
    fake, bot = bot_and_fake
    body = urlencode({"command": command, "text": text, "user_id": user, "channel_id": channel,
                      "response_url": fake.response_url(1), **extra})
    resp = bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))
    assert resp.status in (200, 404), (resp.status, resp.body)
    if resp.status == 404:
        # Bolt's answer for a command no listener takes (a slash command that is not /gpumem)
        assert command != "/gpumem"


_wsgi_post = wsgi_post


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.one_of(st.text(max_size=200), st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
                         st.just('{"type": "block_actions"}'), st.just("[]"), st.just("7")),
       signed=st.booleans())
def test_any_interaction_payload_gets_a_clean_http_answer(bot_and_fake, payload, signed):
    from bot.serve import http_app

    _, bot = bot_and_fake
    app = http_app(bot)
    body = urlencode({"payload": payload})
    headers = signed_headers(SECRET, body) if signed else {}
    status, out = _wsgi_post(app, body, headers)
    assert status in (200, 400, 401, 404), (status, out)
    if not signed:
        assert status in (400, 401)
