"""Command parsing stays linear: too long a text or too many words is refused before argparse.

argparse looks up the next option position with a scan of all of them, once per option, so
its cost grows with the square of the number of flags (140 KB of repeated flags: 24 s of CPU).
These tests feed the worst inputs and assert the answer; `benchmarks/bench_slack_parse.py`
measures the cost.
"""

from __future__ import annotations

import argparse
import json

import pytest

import bot.grammar.slack as grammar
from bot.grammar.slack import MAX_COMMAND_CHARS, MAX_COMMAND_WORDS, CommandError, parse_command
from tests.support.slack_kit import ZH_CHANNEL, dispatch_command, drain, running_bot

ATTACK = "triage llm/vllm-server " + "--context prod-a " * 8300  # about 140 KB


def _ack_json(resp) -> dict:
    assert resp.status == 200, resp.body
    return json.loads(resp.body)


@pytest.fixture
def no_argparse(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("argparse must not see this input")

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", refuse)


def test_140_kb_of_repeated_flags_is_refused_before_it_is_tokenized(monkeypatch, no_argparse):
    def refuse(*a, **k):
        raise AssertionError("shlex must not see this input")

    monkeypatch.setattr(grammar.shlex, "split", refuse)
    assert len(ATTACK) > 140_000
    with pytest.raises(CommandError) as caught:
        parse_command(ATTACK, "llm")
    assert caught.value.key == "too_long"
    assert caught.value.params == {"length": len(ATTACK), "limit": MAX_COMMAND_CHARS}


def test_the_worst_input_under_the_length_cap_is_refused_before_argparse(no_argparse):
    text = ("triage x " + "-n llm " * 1000)[:MAX_COMMAND_CHARS]
    assert len(text) == MAX_COMMAND_CHARS
    with pytest.raises(CommandError) as caught:
        parse_command(text, "llm")
    assert caught.value.key == "too_many_words"
    assert caught.value.params == {"count": len(text.split()), "limit": MAX_COMMAND_WORDS}


def test_the_most_words_allowed_still_parse_to_the_right_command():
    words = ["triage", "vllm-server"] + ["-n", "llm"] * ((MAX_COMMAND_WORDS - 2) // 2)
    assert len(words) == MAX_COMMAND_WORDS
    cmd = parse_command(" ".join(words), None)
    assert (cmd.verb, str(cmd.target)) == ("triage", "llm/vllm-server")
    with pytest.raises(CommandError) as caught:
        parse_command(" ".join([*words, "-n", "llm"]), None)
    assert caught.value.key == "too_many_words"


def test_the_longest_text_allowed_still_parses():
    text = "triage llm/vllm-server --context " + "a" * (MAX_COMMAND_CHARS - len("triage llm/vllm-server --context "))
    assert len(text) == MAX_COMMAND_CHARS
    assert parse_command(text).context == "a" * (MAX_COMMAND_CHARS - 33)
    with pytest.raises(CommandError) as caught:
        parse_command(text + "a")
    assert caught.value.key == "too_long"


@pytest.mark.parametrize("channel,expected", [
    (None, f"That command is {len(ATTACK):,} characters long; gpumem takes at most {MAX_COMMAND_CHARS}."),
    (ZH_CHANNEL, f"该命令长 {len(ATTACK):,} 个字符；gpumem 最多接受 {MAX_COMMAND_CHARS} 个。"),
])
def test_slack_refuses_the_attack_in_the_channels_language_and_posts_nothing(tmp_path, channel, expected):
    with running_bot(tmp_path) as (fake, bot):
        kw = {"channel": channel} if channel else {}
        ack = _ack_json(dispatch_command(bot, fake, ATTACK, **kw))
        drain(bot)
    assert expected in ack["text"]
    assert ack.get("response_type", "ephemeral") == "ephemeral"
    assert fake.calls_to("chat.postMessage") == [] and fake.calls_to("respond") == []
    assert bot.metrics.registry.get_sample_value("gpumem_slack_commands_total",
                                                 {"verb": "triage", "outcome": "usage"}) == 1
    assert len(json.dumps(ack)) < 4000, "the refusal does not echo the text back"
