"""The bot's log: one record on one line whatever a request carries, and no credential in it.

The filter `gpumem serve` installs (`bot.service.redact`) escapes control characters in the
message, its arguments and the messages of a logged exception, and masks credentials.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from contextlib import contextmanager

import requests

from bot.serve import serve_http
from bot.service.redact import RedactingFilter, escape_controls, escape_traceback, install, redact
from bot.slack.app import secrets_of
from tests.support.fake_slack import signed_headers, slash_body
from tests.support.slack_kit import CHANNEL, SECRET, running_bot

#: the format `gpumem serve` logs with (bot.serve.configure_logging)
SERVE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
FORGED = "ERROR fake record written by the request"


@contextmanager
def serve_log(secrets: tuple[str, ...] = ()) -> Iterator[io.StringIO]:
    """Root records at DEBUG, formatted as `gpumem serve` formats them, through its filter."""
    root = logging.getLogger()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter(SERVE_FORMAT))
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.DEBUG)
    filt = install(secrets, root)
    try:
        yield stream
    finally:
        for h in root.handlers:
            h.removeFilter(filt)
        root.removeHandler(handler)
        root.setLevel(old_level)


def _forged_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("ERROR fake")]


def test_a_newline_in_a_slack_request_cannot_forge_a_log_line(tmp_path):
    """A signed slash command from a channel id carrying "\\nERROR fake ...", through the real
    HTTP face: the refusal is logged with the channel id, on one line."""
    with running_bot(tmp_path) as (fake, bot):
        with serve_log(secrets_of(bot.settings)) as stream:
            server = serve_http(bot, "127.0.0.1", 0)
            try:
                for channel, text in ((f"C0NOWHERE\n{FORGED}", "triage llm/vllm-server"),
                                      (f"C0NOWHERE\r\n{FORGED}", f"triage\n{FORGED}"),
                                      (CHANNEL, f"triage llm/vllm-server\n{FORGED}")):
                    body = slash_body(text, fake.response_url(1), channel=channel)
                    answer = requests.post(server.url + "/slack/events", data=body.encode(), timeout=10,
                                           headers=signed_headers(SECRET, body))
                    assert answer.status_code == 200
            finally:
                server.close()
                bot.close(timeout_s=10)
        written = stream.getvalue()
    assert _forged_lines(written) == []
    assert "refused /gpumem from channel C0NOWHERE\\nERROR fake" in written
    assert "C0NOWHERE\\r\\nERROR fake" in written
    assert all(line[:4].isdigit() for line in written.splitlines() if line), written


def test_control_characters_in_the_message_and_its_args_are_escaped():
    with serve_log() as stream:
        log = logging.getLogger("gpumem.test.forge")
        log.warning("target %s from %r", f"llm/x\n{FORGED}", "a\rb")
        log.warning(f"inline\n{FORGED}\x1b[2J\x85\u2028end\ttab")
    written = stream.getvalue()
    assert _forged_lines(written) == []
    assert "llm/x\\nERROR fake" in written and "a\\rb" in written
    assert "\\x1b[2J\\x85\\u2028end\ttab" in written
    assert len(written.splitlines()) == 2


def test_an_exception_message_cannot_forge_a_line_but_the_traceback_keeps_its_lines():
    with serve_log() as stream:
        log = logging.getLogger("gpumem.test.forge")
        try:
            try:
                raise KeyError(f"inner\n{FORGED}")
            except KeyError as inner:
                raise ValueError(f"bad target llm/x\n{FORGED}") from inner
        except ValueError:
            log.exception("job failed")
    written = stream.getvalue()
    assert _forged_lines(written) == []
    assert "ValueError: bad target llm/x\\nERROR fake" in written
    assert "inner\\nERROR fake" in written
    assert "Traceback (most recent call last):" in written and "\n  File " in written


def test_escaping_a_traceback_leaves_lines_without_messages_alone():
    text = "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: a\nb\n"
    assert escape_traceback(text, ValueError("a\nb")) == (
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in <module>\nValueError: a\\nb\n")
    assert escape_controls("tab\tkept, bell\x07 and nul\x00 escaped") == "tab\tkept, bell\\x07 and nul\\x00 escaped"


def test_the_filter_masks_credentials_the_settings_do_not_know():
    filt = RedactingFilter(["configured-secret-value"])
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "%s %s %s %s", (
        "Authorization: Bearer abcdefgh12345678", "https://user:hunter22@prom.example/api",
        "api_key='k-123456789'", "configured-secret-value"), None)
    filt.filter(record)
    message = record.getMessage()
    for secret in ("abcdefgh12345678", "hunter22", "k-123456789", "configured-secret-value"):
        assert secret not in message
    assert message == ("Authorization: Bearer <redacted> https://user:<redacted>@prom.example/api "
                       "api_key='<redacted>' <redacted>")
    # the Slack conventions stay: the token's kind is visible
    assert redact("xoxb-1-2-abcdef and hooks.slack.com/services/T0/B0/zz") == "xoxb-*** and hooks.slack.com/services/***"
