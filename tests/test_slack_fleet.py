"""`/gpumem fleet [NAMESPACE|--all]` in Slack, end to end: the bot (FakeSlack on loopback) reads a
real Prometheus loaded with the test fleet (tests/support/prom_fleet.py, history ending a few
seconds ago, so the bot's "now" reads it), posts the ranked services with their reasons and
Triage buttons, and uploads the headroom chart into the message's thread. A Triage button
starts the triage of its service, once."""

from __future__ import annotations

import json
import struct
import time
from datetime import UTC, datetime

import pytest

from bot.render import slack_blocks as B
from bot.render.chart_fleet import MAX_BARS, fleet_chart
from bot.render.slack_fleet import TRIAGE_BUTTONS, fleet_message
from bot.service.outcomes import FleetOutcome, Missing
from runbooks.alerts.fleet import Service, rank
from tests.support import prom_fleet as f
from tests.support.fake_slack import block_errors
from tests.support.slack_kit import (
    CHANNEL,
    ZH_CHANNEL,
    ExampleRunner,
    dispatch_action,
    dispatch_command,
    drain,
    running_bot,
)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    end_s = (int(time.time()) // 15) * 15 - 15  # the bot asks at its own now: samples within the lookback
    try:
        with f.run_fleet_prometheus(tmp_path_factory.mktemp("slack-fleet"), f.big_fleet(), end_s) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


def _extra(url: str) -> str:
    return f"prometheus:\n  url: {url}\n  timeout_s: 20\n"


class RecordingRunner(ExampleRunner):
    def __init__(self) -> None:
        super().__init__(charts=False)
        self.targets: list[str] = []

    def __call__(self, target, context, on_step):
        self.targets.append(target)
        return super().__call__(target, context, on_step)


def _png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def _fleet_post(fake):
    posts = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]
    assert len(posts) == 1
    return posts[0]


def _buttons(msg: dict) -> list[dict]:
    return [e for b in msg["blocks"] if b["type"] == "actions" for e in b["elements"]]


def _text(msg: dict) -> str:
    return json.dumps(msg["blocks"], ensure_ascii=False)


def test_fleet_all_posts_the_ranking_with_reasons_buttons_and_the_headroom_chart(tmp_path, prom):
    with running_bot(tmp_path, extra=_extra(prom.url)) as (fake, bot):
        ack = json.loads(dispatch_command(bot, fake, "fleet --all").body)
        fake.wait_for("files.completeUploadExternal", 1, timeout=60)
        drain(bot)
    assert "fleet view" in ack["text"]
    post = _fleet_post(fake)
    msg = post.args
    assert block_errors(msg["blocks"]) == [] and B.violations(msg["blocks"]) == []
    body = _text(msg)
    assert "every namespace: 10 of 31 services" in body and "+21 more" in body
    # rank, target and the reading that places it, against its line, as the CLI words it
    for rank_no, target in enumerate(f.BIG_ORDER[:10], 1):
        assert f"*{rank_no}. {target}*" in body
    assert "*4. search/rag-sgl* (SGLang) · queue 20, line 12 (167% of it)" in body
    assert "*6. ml/embedder* (no engine) · GPU memory used 97%, line 95% (102% of it)" in body
    # chat-70b is at the line on more than its top reading: the others are named too
    chat = next(line for line in body.split("\\n") if "1. prod/chat-70b" in line)
    assert "also at the line:" in chat and "OOM kills 2" in chat and "KV cache max 96%" in chat
    assert f.BIG_ORDER[10] not in body
    buttons = _buttons(msg)
    assert [b["action_id"] for b in buttons] == [f"gpumem_fleet_triage_{i}" for i in range(1, TRIAGE_BUTTONS + 1)]
    assert [json.loads(b["value"]) for b in buttons] == [{"target": t, "context": None}
                                                          for t in f.BIG_ORDER[:TRIAGE_BUTTONS]]
    assert buttons[0]["text"]["text"] == "Triage 1. prod/chat-70b" and buttons[0]["style"] == "primary"
    # the chart: into the ranking's thread, one bar per service with a memory reading (all 31), at most 25
    (upload,) = fake.uploads.values()
    assert upload["filename"] == "gpumem-fleet-headroom.png" and upload["channel"] == CHANNEL
    assert upload["thread_ts"] == post.response["ts"] and "headroom" in upload["title"]
    assert _png_size(upload["data"]) == (1100, 270 + 42 * MAX_BARS)


def test_a_triage_button_starts_the_triage_of_its_service_once(tmp_path, prom):
    runner = RecordingRunner()
    with running_bot(tmp_path, runner=runner, extra=_extra(prom.url)) as (fake, bot):
        dispatch_command(bot, fake, "fleet --all")
        fake.wait_for("chat.postMessage", 1, timeout=60)
        post = _fleet_post(fake)
        fourth = _buttons(post.args)[3]
        dispatch_action(bot, fake, fourth["action_id"], fourth["value"], post.response["ts"])
        again = dispatch_action(bot, fake, fourth["action_id"], fourth["value"], post.response["ts"], n=91)
        fake.wait_for("chat.update", 1, timeout=30)
        drain(bot)
    assert again.status == 200
    assert runner.targets == ["search/rag-sgl"]
    parents = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]
    assert len(parents) == 2 and "search/rag-sgl" in parents[1].args["text"]
    said = [json.dumps(c.args) for c in fake.calls_to("respond")]
    assert any("Already running again" in s for s in said)


def test_a_namespace_ranks_only_its_services_and_a_channel_only_its_namespaces(tmp_path, prom):
    with running_bot(tmp_path, extra=_extra(prom.url)) as (fake, bot):
        dispatch_command(bot, fake, f"fleet search --at {prom.end.isoformat()}", n=1)
        fake.wait_for("chat.postMessage", 1, timeout=60)
        dispatch_command(bot, fake, "fleet --all", channel=ZH_CHANNEL, n=2)
        fake.wait_for("chat.postMessage", 2, timeout=60)
        refused = json.loads(dispatch_command(bot, fake, "fleet prod", channel=ZH_CHANNEL, n=3).body)
        both = json.loads(dispatch_command(bot, fake, "fleet prod --all", n=4).body)
        drain(bot)
    posts = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]
    assert len(posts) == 2
    search, zh = (_text(p.args) for p in posts)
    search_targets = [d.target for d in f.big_fleet().deps if d.namespace == "search"]
    assert f"search: {len(search_targets)} of {len(search_targets)} services" in search
    assert "*1. search/rag-sgl*" in search and "prod/" not in search
    assert prom.end.strftime("at %Y-%m-%d %H:%M UTC") in search  # --at: the view as it was then
    # the Chinese channel may read llm and search: --all means those two (the fleet has none in llm)
    assert "集群总览 · llm、search" in zh and "search/rag-sgl" in zh and "prod/" not in zh
    assert "不允许 gpumem 读取命名空间 prod" in refused["text"] and "llm, search" in refused["text"]
    assert "not both" in both["text"]


def test_without_prometheus_fleet_is_refused_in_the_ack(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        ack = json.loads(dispatch_command(bot, fake, "fleet --all").body)
        bad = json.loads(dispatch_command(bot, fake, "fleet Prod_1", n=2).body)
        drain(bot)
    assert "needs Prometheus" in ack["text"] and "prometheus.url" in ack["text"]
    assert "Prod_1 is not a namespace name" in bad["text"]
    assert not fake.calls_to("chat.postMessage")


# ------------------------------------------------------------------ rendering alone


def _outcome(services, missing=(), total=None):
    rows = rank(services)
    return FleetOutcome(rows=rows, total=total or len(rows), missing=missing, queries={"kv": "x", "queue": "y"},
                        at=datetime(2026, 12, 1, 2, 14, tzinfo=UTC), window_s=3600, namespaces=("llm",))


def test_a_query_not_read_is_named_and_a_fleet_without_memory_readings_draws_no_chart():
    outcome = _outcome([Service("llm", "chat", ("vllm",), {"queue": 30})],
                       (Missing("kv", ("kv_now", "kv_max"), "timeout", "no answer within 10 s"),))
    msg = fleet_message(outcome, "en", "U1")
    body = _text(msg)
    assert "Not read: KV cache now, KV cache max (timed out)" in body and "<@U1>" in body
    assert "*1. llm/chat* (vLLM) · queue 30, line 12 (250% of it)" in body
    assert fleet_chart(outcome.rows, "t") is None
    assert block_errors(msg["blocks"]) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_chart_has_a_bar_per_service_with_a_memory_reading(lang):
    rows = rank([Service("llm", f"svc-{i}", ("vllm",), {"kv_now": 0.5 + i / 100, "kv_max": 0.97}) for i in range(3)]
                + [Service("ml", "embed", (), {"gpu_used": 0.96}), Service("llm", "q", ("tgi",), {"queue": 3})])
    assert _png_size(fleet_chart(rows, "Memory headroom · llm", lang)) == (1100, 270 + 42 * 4)
