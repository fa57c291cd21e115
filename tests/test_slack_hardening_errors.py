"""No traceback, path or exception text is ever posted to Slack: a crash is an apology and an id.

Every place where the Slack surface turns an exception into words is driven into a crash with
an exception whose text holds a path and a secret-looking value; the test then reads every
request FakeSlack received, and the log record that carries the same error id.
"""

from __future__ import annotations

import json
import logging
import re

import pytest

import bot.slack.handlers as handlers_module
import bot.slack.work as work_module
from bot.slack.api import POST_TRIES, SlackPoster, error_of
from bot.telemetry.metrics import BotMetrics
from bot.verbs.worker import VerbOutput
from tests.support.slack_kit import (
    CHANNEL,
    ZH_CHANNEL,
    ExampleRunner,
    FakeVerbs,
    dispatch_action,
    dispatch_command,
    drain,
    is_diagnosis,
    parser_with_budget,
    running_bot,
)

LEAK = "/srv/gpumem/secret-path.py: token=hunter2"
_ID = re.compile(r"Error id ([0-9a-f]{8})|错误编号 ([0-9a-f]{8})")


class Crash(RuntimeError):
    pass


def _posted(fake) -> str:
    return json.dumps([c.args for c in fake.calls], ensure_ascii=False)


def _assert_nothing_leaked(fake) -> None:
    posted = _posted(fake)
    for leak in ("Crash", "RuntimeError", "Traceback", "secret-path", "hunter2", "/srv/gpumem", "MemoryError"):
        assert leak not in posted, leak


def _the_id_matches_a_log_record(text: str, caplog, exc_type: type | None = Crash) -> logging.LogRecord:
    m = _ID.search(text)
    assert m, text
    error_id = m.group(1) or m.group(2)
    (record,) = [r for r in caplog.records if f"[error {error_id}]" in r.getMessage()]
    assert record.levelno == logging.ERROR
    if exc_type is not None:
        assert record.exc_info and record.exc_info[0] is exc_type
        assert LEAK in str(record.exc_info[1]), "the log keeps the exception and its text"
    return record


@pytest.fixture(autouse=True)
def _log(caplog):
    caplog.set_level(logging.INFO)


def test_a_crashing_runner_ends_its_parent_with_an_apology_and_the_id_of_its_log_line(tmp_path, caplog):
    class Broken(ExampleRunner):
        def __call__(self, target, context, on_step):
            raise Crash(LEAK)

    with running_bot(tmp_path, runner=Broken(charts=False)) as (fake, bot):
        dispatch_command(bot, fake, "triage llm/vllm-server")
        end = fake.wait_for("chat.update", where=lambda c: "internal error" in c.args["text"])[0]
        drain(bot)
    assert end.args["text"].startswith("gpumem triage · llm/vllm-server: gpumem hit an internal error and stopped.")
    assert end.args["blocks"][0]["text"]["text"].startswith(":x:")
    record = _the_id_matches_a_log_record(end.args["text"], caplog)
    assert "triage llm/vllm-server failed" in record.getMessage()
    _assert_nothing_leaked(fake)


def test_a_crash_while_answering_is_worded_alike_in_chinese(tmp_path, caplog, monkeypatch):
    def broken(*a, **k):
        raise Crash(LEAK)

    monkeypatch.setattr(work_module.R, "diagnosis_message", broken)
    with running_bot(tmp_path) as (fake, bot):
        dispatch_command(bot, fake, "triage llm/vllm-server", channel=ZH_CHANNEL)
        end = fake.wait_for("chat.update", where=lambda c: "内部出错" in c.args["text"])[0]
        drain(bot)
    assert "gpumem 内部出错，已停止。错误编号" in end.args["text"]
    _the_id_matches_a_log_record(end.args["text"], caplog)
    _assert_nothing_leaked(fake)


@pytest.mark.parametrize("out", [VerbOutput(-1, "", "MemoryError"), VerbOutput(-1, "", "worker_died")])
def test_a_verb_worker_that_died_is_an_apology_and_an_id(tmp_path, caplog, out):
    verbs = FakeVerbs({"budget": out})
    with running_bot(tmp_path, verbs=verbs, parser_factory=parser_with_budget) as (fake, bot):
        dispatch_command(bot, fake, "budget --engine vllm --model m")
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert told.args["text"].startswith("gpumem hit an internal error. Error id")
    assert told.args["response_type"] == "ephemeral"
    record = _the_id_matches_a_log_record(told.args["text"], caplog, exc_type=None)
    assert out.error in record.getMessage(), "what the worker said stays in the log"
    assert fake.calls_to("chat.postMessage") == []
    _assert_nothing_leaked(fake)
    assert bot.metrics.registry.get_sample_value("gpumem_slack_commands_total",
                                                 {"verb": "budget", "outcome": "error"}) == 1


def test_a_verb_runner_that_raises_tells_the_asker_instead_of_nothing(tmp_path, caplog):
    def verbs(argv, lang):
        raise Crash(LEAK)

    with running_bot(tmp_path, verbs=verbs, parser_factory=parser_with_budget) as (fake, bot):
        dispatch_command(bot, fake, "budget --engine vllm --model m")
        told = fake.wait_for("respond")[0]
        drain(bot)
    _the_id_matches_a_log_record(told.args["text"], caplog)
    _assert_nothing_leaked(fake)


def test_a_worded_verb_error_is_still_shown(tmp_path):
    verbs = FakeVerbs({"budget": VerbOutput(2, "", "gpumem budget: unknown model 'Qwen9'")})
    with running_bot(tmp_path, verbs=verbs, parser_factory=parser_with_budget) as (fake, bot):
        dispatch_command(bot, fake, "budget --engine vllm --model Qwen9")
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert "unknown model 'Qwen9'" in told.args["text"] and "Error id" not in told.args["text"]


def test_a_crash_before_the_ack_is_acked_with_an_apology(tmp_path, caplog, monkeypatch):
    def broken(*a, **k):
        raise Crash(LEAK)

    monkeypatch.setattr(handlers_module, "parse_command", broken)
    with running_bot(tmp_path) as (fake, bot):
        resp = dispatch_command(bot, fake, "triage llm/vllm-server")
        drain(bot)
    assert resp.status == 200
    ack = json.loads(resp.body)
    assert ack["text"].startswith("gpumem hit an internal error. Error id")
    _the_id_matches_a_log_record(ack["text"], caplog)
    assert LEAK not in resp.body and "Crash" not in resp.body
    _assert_nothing_leaked(fake)


def test_a_crash_after_the_ack_is_told_through_the_response_url(tmp_path, caplog):
    with running_bot(tmp_path) as (fake, bot):
        def boom(*a, **k):
            raise Crash(LEAK)

        bot.handlers.poster.post_or_error = boom
        resp = dispatch_command(bot, fake, "triage llm/vllm-server")
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert resp.status == 200
    _the_id_matches_a_log_record(told.args["text"], caplog)
    _assert_nothing_leaked(fake)


def test_a_crashing_rerun_is_told_to_the_clicker(tmp_path, caplog):
    with running_bot(tmp_path) as (fake, bot):
        dispatch_command(bot, fake, "triage llm/vllm-server")
        final = fake.wait_for("chat.update", where=is_diagnosis)[0]
        button = final.args["blocks"][-1]["elements"][0]

        def boom(*a, **k):
            raise Crash(LEAK)

        bot.handlers._start = boom
        assert dispatch_action(bot, fake, button["action_id"], button["value"], final.args["ts"]).status == 200
        told = fake.wait_for("respond")[0]
        drain(bot)
    _the_id_matches_a_log_record(told.args["text"], caplog)
    _assert_nothing_leaked(fake)


def test_a_parent_that_cannot_be_posted_names_no_exception_class(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        fake.fail_next("chat.postMessage", 200, error="invalid_blocks")
        dispatch_command(bot, fake, "triage llm/vllm-server", channel=CHANNEL)
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert "could not post in this channel (invalid_blocks)" in told.args["text"]


@pytest.mark.parametrize("error,code", [
    (TimeoutError("read timed out after 30 s on /srv/x"), "timeout"),
    (ConnectionRefusedError(111, "Connection refused"), "connection_error"),
    (OSError("[Errno 101] Network is unreachable"), "connection_error"),
    (ValueError("no such host /srv/x"), "request_error"),
])
def test_slack_call_failures_become_codes_not_exception_text(error, code):
    assert error_of(error) == code

    tries: list[dict] = []

    class Client:
        def chat_postMessage(self, **kw):
            tries.append(kw)
            raise error

    if isinstance(error, OSError):  # what SlackPoster catches: the code, counted under it
        metrics = BotMetrics()
        waits: list[float] = []  # the backoff it would sleep, recorded instead of slept
        poster = SlackPoster(Client(), metrics, sleep=waits.append)
        assert poster.post_or_error("C1", {"text": "x"}) == (None, code)
        assert metrics.registry.get_sample_value("gpumem_slack_api_errors_total",
                                                 {"method": "chat.postMessage", "error": code}) == 1
        assert len(tries) == POST_TRIES
        assert waits == [poster.backoff_s * 2 ** k for k in range(POST_TRIES - 1)]
