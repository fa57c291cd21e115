"""The Bolt app against FakeSlack: acks, refusals, queueing, retries, failures, the button, redaction.

Requests are signed and dispatched straight into `App.dispatch` (the HTTP path is in
test_slack_e2e.py). Listeners and jobs run on other threads, so tests wait on FakeSlack or
drain the bot before asserting on what was, or was not, posted.
"""

from __future__ import annotations

import io
import json
import logging
import re
import socket
import threading
import time
from pathlib import Path

import pytest
import yaml
from slack_bolt import App
from slack_sdk import WebClient
from slack_sdk.http_retry.builtin_interval_calculators import FixedValueRetryIntervalCalculator

import bot.service.triage as live
from bot.service.redact import RedactingFilter, install, redact
from bot.service.runners import live_runner
from bot.slack.api import ConnectionRetries, SlackPoster
from bot.slack.app import listeners, register
from bot.telemetry.metrics import BotMetrics
from bot.verbs.worker import VerbOutput
from runbooks.model.evidence import Evidence
from tests.support.fake_slack import signed_headers, slash_body
from tests.support.slack_kit import (
    CHANNEL,
    OTHER_CHANNEL,
    ROOT,
    SECRET,
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


def _ack(resp) -> dict:
    assert resp.status == 200, resp.body
    return json.loads(resp.body) if resp.body else {}


def _sample(bot, name: str, **labels) -> float:
    value = bot.metrics.registry.get_sample_value(name, labels)
    return value or 0.0


# ----------------------------------------------------------------------------- wiring and signatures


def test_the_listener_registry_names_the_command_and_the_button(tmp_path):
    with running_bot(tmp_path) as (_, bot):
        registry = listeners(bot.handlers, "/gpumem")
        assert [(item.kind, item.matcher) for item in registry] == [
            ("command", "/gpumem"), ("action", "gpumem_rerun"),
            ("action", re.compile(r"^gpumem_fleet_triage_[0-9]+$")),
            ("action", re.compile(r"^gpumem_plan:\d+$")), ("action", "gpumem_plan_approve"),
            ("action", "gpumem_plan_reject"), ("action", "gpumem_plan_rollback"), ("action", "gpumem_plan_replan"),
            ("action", "gpumem_plan_routing")]
        assert registry[1].fn == registry[2].fn == bot.handlers.on_rerun  # the fleet's Triage buttons start a triage
        desk = bot.handlers.remediation
        assert [item.fn for item in registry[3:]] == [desk.on_plan, desk.on_approve, desk.on_reject, desk.on_rollback,
                                                      desk.on_replan, desk.on_routing]
        fresh = App(client=bot.client, signing_secret=SECRET, token_verification_enabled=False)
        register(fresh, registry)
        assert len(fresh._listeners) == 9


@pytest.mark.parametrize("case", ["unsigned", "tampered", "stale", "wrong_secret"])
def test_requests_without_a_valid_signature_get_401(tmp_path, case):
    from slack_bolt.request import BoltRequest

    with running_bot(tmp_path) as (fake, bot):
        body = slash_body("triage llm/vllm-server", fake.response_url(1))
        headers = signed_headers(SECRET, body)
        if case == "unsigned":
            headers = {"Content-Type": headers["Content-Type"]}
        elif case == "tampered":
            body = body.replace("vllm-server", "other-server")
        elif case == "stale":
            headers = signed_headers(SECRET, body, timestamp=time.time() - 360)
        else:
            headers = signed_headers("not-the-secret", body)
        resp = bot.app.dispatch(BoltRequest(body=body, headers=headers))
        drain(bot)
        assert resp.status == 401
        assert fake.calls_to("chat.postMessage") == []


# ----------------------------------------------------------------------------- ephemeral answers


def test_help_is_an_ephemeral_ack_and_nothing_is_posted(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, "help"))
        drain(bot)
    assert ack.get("response_type", "ephemeral") == "ephemeral"
    assert "/gpumem triage NAMESPACE/DEPLOYMENT" in json.dumps(ack)
    assert fake.calls_to("chat.postMessage") == []


def test_help_follows_the_channels_language(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, "", channel=ZH_CHANNEL))
    assert "gpumem：LLM 推理服务的 GPU 显存排查" in ack["text"]


@pytest.mark.parametrize("text,channel,expected", [
    ("diagnose llm/x", CHANNEL, "diagnose is not a gpumem command"),
    ("triage llm/x --dry-run", CHANNEL, "unrecognized arguments: --dry-run"),
    ("triage LLM/X", CHANNEL, "LLM/X is not NAMESPACE/DEPLOYMENT"),
    ("triage llm/x --bundle /etc", CHANNEL, "--bundle is not available in Slack"),
    ("triage llm/vllm-server", OTHER_CHANNEL, "does not answer in this channel"),
    ("triage kube-system/x", ZH_CHANNEL, "kube-system。本频道可用：llm, search"),
    ("triage llm/x --context prod-z", CHANNEL, "prod-z is not a configured cluster. Known: prod-a, prod-b"),
    ("triage search/x --context prod-b", CHANNEL, "may not read namespace search from this channel. "
                                                  "Namespaces here: llm."),
])
def test_refusals_are_ephemeral_and_post_nothing(tmp_path, text, channel, expected):
    with running_bot(tmp_path) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, text, channel=channel))
        drain(bot)
    assert expected in json.dumps(ack, ensure_ascii=False)
    assert ack.get("response_type", "ephemeral") == "ephemeral"
    assert fake.calls_to("chat.postMessage") == [] and fake.calls_to("chat.postEphemeral") == []
    outcome = "refused" if channel != CHANNEL or "context" in text or "search" in text else "usage"
    assert sum(_sample(bot, "gpumem_slack_commands_total", verb=v, outcome=outcome)
               for v in ("triage", "unknown")) == 1


def test_bad_flags_show_the_usage(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, "triage llm/x --dry-run"))
    assert "```usage: /gpumem triage" in json.dumps(ack)


# ----------------------------------------------------------------------------- triage on the pool


def test_triage_acks_then_posts_one_parent_edited_to_the_diagnosis(tmp_path):
    with running_bot(tmp_path, runner=ExampleRunner(charts=True)) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        final = fake.wait_for("chat.update", where=is_diagnosis)[0]
        fake.wait_for("files.completeUploadExternal", 3)
        drain(bot)
    assert "On it: triage of llm/vllm-server" in ack["text"]
    parents = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]
    assert len(parents) == 1
    ts = parents[0].response["ts"]
    updates = [c for c in fake.calls_to("chat.update", ok_only=True) if c.args["ts"] == ts]
    assert any("3/7 · KV cache" in c.args["text"] for c in updates)
    assert final.args["ts"] == ts and "KV-cache pressure" in final.args["text"]
    assert fake.thread(CHANNEL, ts), "the detail goes to the thread"
    assert _sample(bot, "gpumem_slack_commands_total", verb="triage", outcome="cause") == 1


def test_a_full_pool_queues_with_the_number_ahead_and_then_answers_all(tmp_path):
    gate = threading.Event()
    runner = ExampleRunner(charts=False, gate=gate)
    with running_bot(tmp_path, runner=runner, pool=1, queue=4) as (fake, bot):
        for n in (1, 2, 3):
            _ack(dispatch_command(bot, fake, "triage llm/vllm-server", n=n))
        parents = fake.wait_for("chat.postMessage", 3, where=lambda c: not c.args.get("thread_ts"))
        texts = sorted(c.args["text"] for c in parents)
        gate.set()
        fake.wait_for("chat.update", 3, where=is_diagnosis)
        drain(bot)
    assert any("queued, next in line" in t for t in texts)
    assert any("queued, 1 ahead" in t for t in texts)
    assert any("starting" in t for t in texts)


def test_beyond_the_queue_a_command_is_refused_as_busy_before_posting(tmp_path):
    gate = threading.Event()
    with running_bot(tmp_path, runner=ExampleRunner(charts=False, gate=gate), pool=1, queue=0) as (fake, bot):
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server", n=1))
        fake.wait_for("chat.postMessage", 1)
        busy = _ack(dispatch_command(bot, fake, "triage llm/vllm-server", n=2))
        gate.set()
        drain(bot)
    assert "gpumem is busy" in busy["text"]
    assert len([c for c in fake.calls_to("chat.postMessage") if not c.args.get("thread_ts")]) == 1
    assert _sample(bot, "gpumem_slack_commands_total", verb="triage", outcome="busy") == 1


def test_a_job_past_its_deadline_says_so_and_its_late_result_is_dropped(tmp_path):
    gate = threading.Event()
    with running_bot(tmp_path, runner=ExampleRunner(charts=False, gate=gate), deadline=1) as (fake, bot):
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        timeout = fake.wait_for("chat.update", where=lambda c: "stopped after 1 s" in c.args["text"])
        gate.set()
        drain(bot)
    assert timeout[0].args["blocks"][0]["text"]["text"].startswith(":x:")
    assert not [c for c in fake.calls_to("chat.update") if is_diagnosis(c)]
    assert _sample(bot, "gpumem_slack_commands_total", verb="triage", outcome="timeout") == 1


def test_an_unknown_target_and_a_failing_runner_end_the_parent_with_the_reason(tmp_path):
    class Broken(ExampleRunner):
        def __call__(self, target, context, on_step):
            if target == "llm/broken":
                raise RuntimeError(f"Prometheus said 401 to Authorization: Bearer {self.token}")
            return super().__call__(target, context, on_step)

    runner = Broken(charts=False)
    with running_bot(tmp_path, runner=runner) as (fake, bot):
        runner.token = fake.token
        _ack(dispatch_command(bot, fake, "triage llm/nothing-here", n=1))
        _ack(dispatch_command(bot, fake, "triage llm/broken", n=2))
        ends = fake.wait_for("chat.update", 2, where=lambda c: c.args["text"].startswith("gpumem triage"))
        drain(bot)
    texts = " ".join(c.args["text"] for c in ends)
    assert "no evidence source knows llm/nothing-here" in texts
    assert "gpumem hit an internal error and stopped. Error id" in texts
    posted = json.dumps([c.args for c in fake.calls])
    assert "RuntimeError" not in posted and "Prometheus said" not in posted
    assert fake.token not in posted


def test_profile_and_snapshot_answer_in_their_parent(tmp_path):
    with running_bot(tmp_path, runner=ExampleRunner(charts=True)) as (fake, bot):
        _ack(dispatch_command(bot, fake, "profile llm/vllm-server", n=1))
        _ack(dispatch_command(bot, fake, "snapshot llm/vllm-server", n=2))
        profile = fake.wait_for("chat.update", where=lambda c: "Request profile" in c.args["text"])[0]
        snap = fake.wait_for("chat.update", where=lambda c: "GPU snapshot" in c.args["text"])[0]
        fake.wait_for("files.completeUploadExternal", 1)
        drain(bot)
    assert "S 43.8%" in profile.args["text"]
    assert "NVIDIA A100-SXM4-80GB" in json.dumps(snap.args["blocks"])
    upload = fake.calls_to("files.completeUploadExternal")[0]
    assert upload.args["thread_ts"] == profile.args["ts"]


# ----------------------------------------------------------------------------- CLI verbs


def test_budget_runs_the_cli_verb_and_posts_its_output(tmp_path):
    verbs = FakeVerbs({"budget": VerbOutput(0, "KV cache 59.9 GiB = 1,120,992 tokens\nfits: yes\n", "")})
    with running_bot(tmp_path, verbs=verbs, parser_factory=parser_with_budget) as (fake, bot):
        ack = _ack(dispatch_command(bot, fake, "budget --engine vllm --model Qwen/Qwen2.5-7B-Instruct"))
        post = fake.wait_for("chat.postMessage")[0]
        drain(bot)
    assert "On it: gpumem budget" in ack["text"]
    assert verbs.calls == [(["budget", "--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct", "--lang", "en"],
                            "en")]
    assert "fits: yes" in json.dumps(post.args["blocks"])


def test_a_failing_cli_verb_tells_only_the_asker(tmp_path):
    verbs = FakeVerbs({"budget": VerbOutput(2, "", "gpumem budget: unknown model 'Qwen9'")})
    with running_bot(tmp_path, verbs=verbs, parser_factory=parser_with_budget) as (fake, bot):
        _ack(dispatch_command(bot, fake, "budget --engine vllm --model Qwen9"))
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert "unknown model 'Qwen9'" in told.args["text"]
    assert told.args["response_type"] == "ephemeral"
    assert fake.calls_to("chat.postMessage") == []


def test_long_cli_output_is_attached_as_a_file(tmp_path):
    verbs = FakeVerbs({"budget": VerbOutput(0, "\n".join(f"row {i} " + "x" * 90 for i in range(300)), "")})
    with running_bot(tmp_path, verbs=verbs, parser_factory=parser_with_budget) as (fake, bot):
        _ack(dispatch_command(bot, fake, "budget --engine vllm --model m"))
        done = fake.wait_for("files.completeUploadExternal")[0]
        drain(bot)
    post = fake.calls_to("chat.postMessage", ok_only=True)[0]
    assert done.args["thread_ts"] == post.response["ts"]


# ----------------------------------------------------------------------------- Slack failing


def test_a_429_is_retried_after_retry_after_and_counted(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        fake.fail_next("chat.postMessage", 429, retry_after=0)
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        fake.wait_for("chat.update", where=is_diagnosis)
        drain(bot)
    statuses = [c.status for c in fake.calls_to("chat.postMessage")]
    assert statuses[:2] == [429, 200]
    assert _sample(bot, "gpumem_slack_api_retries_total", method="chat.postMessage", reason="ratelimited") == 1


def test_server_errors_are_retried_with_backoff(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        fake.fail_next("chat.update", 503, count=2)
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        fake.wait_for("chat.update", where=is_diagnosis)
        drain(bot)
    assert [c.status for c in fake.calls_to("chat.update")][:3] == [503, 503, 200]
    assert _sample(bot, "gpumem_slack_api_retries_total", method="chat.update", reason="server_error") == 2


def test_a_failed_post_is_logged_counted_and_told_to_the_asker(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpumem.slack")
    with running_bot(tmp_path) as (fake, bot):
        fake.not_in_channel.add(CHANNEL)
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert "invite it (/invite @gpumem)" in told.args["text"]
    assert any("chat.postMessage failed" in r.getMessage() and "not_in_channel" in r.getMessage()
               for r in caplog.records)
    assert _sample(bot, "gpumem_slack_api_errors_total", method="chat.postMessage", error="not_in_channel") == 1


def test_invalid_blocks_from_slack_fall_back_to_text_and_are_logged(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpumem.slack")
    with running_bot(tmp_path) as (fake, bot):
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server"))
        fake.wait_for("chat.postMessage")
        fake.fail_next("chat.update", 200, count=50, error="invalid_blocks")
        drain(bot)
    assert _sample(bot, "gpumem_slack_api_errors_total", method="chat.update", error="invalid_blocks") >= 1
    assert any("invalid_blocks" in r.getMessage() for r in caplog.records)


def test_an_error_after_the_ack_never_turns_into_a_404(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        def boom(*a, **k):
            raise RuntimeError("unexpected")

        bot.handlers.poster.post_or_error = boom
        resp = dispatch_command(bot, fake, "triage llm/vllm-server")
        told = fake.wait_for("respond")[0]
        drain(bot)
    assert resp.status == 200
    assert "gpumem hit an internal error. Error id" in told.args["text"]
    assert "RuntimeError" not in told.args["text"]


# ----------------------------------------------------------------------------- the button


def test_run_again_starts_a_new_triage_and_a_double_click_runs_once(tmp_path):
    with running_bot(tmp_path) as (fake, bot):
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server --context prod-a"))
        first = fake.wait_for("chat.update", where=is_diagnosis)[0]
        button = first.args["blocks"][-1]["elements"][0]
        assert json.loads(button["value"]) == {"target": "llm/vllm-server", "context": "prod-a"}
        for _ in range(2):
            assert dispatch_action(bot, fake, button["action_id"], button["value"], first.args["ts"]).status == 200
        fake.wait_for("chat.update", 2, where=is_diagnosis)
        told = fake.wait_for("respond")[0]
        drain(bot)
    parents = [c for c in fake.calls_to("chat.postMessage") if not c.args.get("thread_ts")]
    assert len(parents) == 2
    assert "one click is enough" in told.args["text"]


# ----------------------------------------------------------------------------- tokens out of logs


def test_the_log_filter_masks_tokens_and_secrets():
    text = ("token xoxb-1234-5678-abcdEFGH and xapp-1-A0-12-abc and xoxp-9-9 "
            "Authorization: Bearer xyz.secret hooks.slack.com/services/T0/B0/zzz signing s3cr3t-value")
    masked = redact(text, ["s3cr3t-value"])
    for secret in ("1234-5678-abcdEFGH", "A0-12-abc", "xoxp-9-9", "xyz.secret", "T0/B0/zzz", "s3cr3t-value"):
        assert secret not in masked
    assert "xoxb-***" in masked and "xapp-***" in masked


def test_the_installed_filter_redacts_messages_args_and_tracebacks():
    stream = io.StringIO()
    logger = logging.getLogger("gpumem.test.redact")
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.propagate = False
    logger.setLevel(logging.INFO)
    try:
        install(["my-signing-secret"], logger=logger)
        assert any(isinstance(f, RedactingFilter) for f in handler.filters)
        logger.info("posting with %s", "xoxb-111-222-tokenvalue")
        try:
            raise ValueError("bad secret my-signing-secret in xapp-1-XYZ")
        except ValueError:
            logger.exception("failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert "tokenvalue" not in out and "my-signing-secret" not in out and "XYZ" not in out
    assert "xoxb-***" in out and "ValueError" in out


# ----------------------------------------------------------------------------- the manifest


def test_the_manifest_asks_only_for_the_scopes_gpumem_uses():
    manifest = yaml.safe_load((ROOT / "deploy" / "slack-app-manifest.yaml").read_text())
    assert manifest["oauth_config"]["scopes"]["bot"] == ["commands", "chat:write", "files:write",
                                                         "channels:history", "groups:history", "usergroups:read",
                                                         "users:read"]
    assert "user" not in manifest["oauth_config"]["scopes"]
    (command,) = manifest["features"]["slash_commands"]
    assert command["command"] == "/gpumem"
    assert command["url"].endswith("/slack/events")
    assert manifest["settings"]["interactivity"] == {"is_enabled": True,
                                                     "request_url": command["url"]}
    assert 175 <= len(manifest["display_information"]["long_description"]) <= 4000


# ----------------------------------------------------------------------------- live triage adapter


def test_live_triage_is_called_with_the_settings_options_and_its_bundle_folder_is_removed(tmp_path, monkeypatch):
    seen = {}

    def fake_live(target, options, lang="en", on_step=None, bundle_dir=None, default_namespace=None, **_):
        seen.update(target=target, options=options, lang=lang, bundle_dir=bundle_dir, ns=default_namespace)
        (Path(bundle_dir) / "logs.txt").write_text("INFO ok\n")
        report = ExampleRunner(charts=False)("llm/vllm-server", None, on_step).report
        return live.TriageOutcome(report, Evidence(), str(bundle_dir))

    monkeypatch.setattr(live, "run_live_triage", fake_live)
    monkeypatch.setattr(live, "options_from_settings", lambda settings, context=None: ("options", context))
    with running_bot(tmp_path) as (fake, bot):
        bot.work.runner = live_runner(bot.settings)
        _ack(dispatch_command(bot, fake, "triage llm/vllm-server --context prod-b"))
        fake.wait_for("files.completeUploadExternal")
        drain(bot)
    assert seen["target"] == "llm/vllm-server" and seen["options"] == ("options", "prod-b")
    assert seen["ns"] == "llm" and seen["lang"] == "en"
    assert not Path(seen["bundle_dir"]).exists(), "the temporary bundle folder is removed after the upload"
    (done,) = fake.calls_to("files.completeUploadExternal")
    assert done.response["files"][0]["name"] == "gpumem-llm-vllm-server-bundle.tar.gz"


def test_connection_errors_are_retried_then_logged_and_counted(caplog):
    caplog.set_level(logging.WARNING, logger="gpumem.slack")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    metrics = BotMetrics()
    client = WebClient(token="xoxb-1", base_url=f"http://127.0.0.1:{closed_port}/api/", retry_handlers=[
        ConnectionRetries(metrics, max_retry_count=2, interval_calculator=FixedValueRetryIntervalCalculator(0))])
    # chat.postMessage is not repeatable, so the client leaves it to the poster, which tries a
    # refused connection again (Slack never saw it) without looking for an earlier post
    ts, error = SlackPoster(client, metrics, backoff_s=0).post_or_error("C1", {"text": "hello"})
    assert ts is None and error == "connection_error"
    sample = metrics.registry.get_sample_value
    assert sample("gpumem_slack_api_retries_total", {"method": "chat.postMessage", "reason": "connection"}) == 3
    assert sample("gpumem_slack_api_errors_total", {"method": "chat.postMessage", "error": error}) == 1
    assert any("chat.postMessage failed in channel C1" in r.getMessage() for r in caplog.records)
    # a repeatable call (chat.update) is retried by the client's ConnectionRetries (max 2)
    ok = SlackPoster(client, metrics, backoff_s=0).update("C1", "1.0", {"text": "x"})
    assert ok is False
    assert sample("gpumem_slack_api_retries_total", {"method": "chat.update", "reason": "connection"}) == 2
