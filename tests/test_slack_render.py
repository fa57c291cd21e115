"""The Slack renderer: what each message says, in both languages, always within Block Kit's limits.

Golden files in tests/golden/slack/ lock the rendered messages of every example bundle in en
and zh. After an intended change: `GPUMEM_UPDATE_GOLDEN=1 pytest tests/test_slack_render.py`.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from bot.render import slack_triage as R
from bot.render import slack_verbs as V
from bot.render.slack_blocks import MAX_BLOCKS, violations
from bot.render.triage_charts import memory_chart, profile_chart
from collectors.bundle import load_bundle
from runbooks.model.evidence import Evidence, GpuDevice, GpuSnapshot
from runbooks.model.report import CheckResult, Finding, Report, fact
from runbooks.triage.runbook import triage
from tests.support.fake_slack import block_errors
from tests.support.slack_kit import EXAMPLES, NOW, check_golden

BUNDLES = sorted(p.name for p in EXAMPLES.iterdir() if (p / "expected.json").is_file())
LANGS = ("en", "zh")
CJK = re.compile(r"[\u4e00-\u9fff]")


def _report(name: str) -> Report:
    return triage(load_bundle(EXAMPLES / name), now=NOW)


def _assert_slack_takes(msg: dict) -> None:
    assert msg["text"], "every message carries text for notifications"
    assert len(msg["text"]) <= 3000
    assert block_errors(msg["blocks"]) == []
    assert violations(msg["blocks"]) == []


_check_golden = check_golden


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("bundle", BUNDLES)
def test_every_example_renders_as_its_golden_file(bundle, lang):
    report = _report(bundle)
    parent = R.diagnosis_message(report, lang, user="U0ONCALL", elapsed_s=4.2)
    detail = R.thread_detail(report, lang)
    for msg in (parent, *detail.messages):
        _assert_slack_takes(msg)
    _check_golden(f"{bundle}.{lang}", {"parent": parent, "thread": list(detail.messages),
                                        "overflow": detail.overflow})


@pytest.mark.parametrize("lang", LANGS)
def test_status_messages_render_as_their_golden_file(lang):
    doc = {
        "queued": R.queued_message(lang, "triage", "llm/vllm-server", 3, "U1"),
        "queued_next": R.queued_message(lang, "triage", "llm/vllm-server", 0, "U1"),
        "starting": R.starting_message(lang, "triage", "llm/vllm-server", "U1"),
        "progress": R.progress_message(lang, "triage", "llm/vllm-server", 3, 7, "kv_cache", "U1"),
        "failed": R.failed_message(lang, "triage", "llm/vllm-server", "timed_out", "U1", seconds=300),
        "help": V.help_message(lang, ("triage", "profile", "snapshot", "budget", "help")),
        "error": V.error_message(lang, "bad_target", "usage: /gpumem triage [target]\n", target="LLM/x"),
        "ack": V.ack_text(lang, "triage", "llm/vllm-server"),
    }
    for msg in doc.values():
        _assert_slack_takes(msg)
    _check_golden(f"_status.{lang}", doc)


def test_the_parent_leads_with_the_verdict_and_its_confidence():
    msg = R.diagnosis_message(_report("runbook-incident"), "en")
    first = msg["blocks"][0]["text"]["text"]
    assert first.startswith(":red_circle: *KV-cache pressure")
    assert "high confidence" in first
    assert msg["text"].startswith("KV-cache pressure")


def _block_text(block: dict) -> str:
    return block.get("text", {}).get("text", "") if isinstance(block.get("text"), dict) else ""


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("bundle", BUNDLES)
def test_the_parent_says_what_to_do_before_the_numbers(bundle, lang):
    from bot.render.i18n import Catalog

    cat = Catalog.load(lang)
    report = _report(bundle)
    blocks = R.diagnosis_message(report, lang)["blocks"]
    decide = cat.t("section.capture_next" if report.verdict.capture_next else "section.actions")
    heads = [i for i, b in enumerate(blocks) if _block_text(b).startswith(f"*{decide}*")]
    numbers = [i for i, b in enumerate(blocks) if b.get("fields") or _block_text(b).startswith(
        f"*{cat.t('section.flags')}*")]
    if report.actions or report.verdict.capture_next:
        assert heads and heads[0] == 2, [_block_text(b)[:40] for b in blocks]  # after the headline and context
        assert all(i > heads[0] for i in numbers)


def test_not_enough_evidence_gives_its_capture_commands_as_code_to_copy():
    blocks = R.diagnosis_message(_report("insufficient-evidence"), "en")["blocks"]
    text = "\n".join(_block_text(b) for b in blocks)
    assert "1. the engine's /metrics (KV-cache usage, queue, rejects): `curl -s localhost:8000/metrics &gt; metrics.txt`" in text


def test_the_thread_starts_with_the_actions_then_why():
    detail = R.thread_detail(_report("runbook-incident"), "en")
    texts = [_block_text(b) for b in detail.messages[0]["blocks"] if _block_text(b)]
    assert texts[0].startswith("*Next actions*")
    assert any(t.startswith("*Why") for t in texts[1:])


def test_the_parent_carries_the_key_numbers_and_flags_at_the_edge():
    msg = R.diagnosis_message(_report("runbook-incident"), "en")
    fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1]
              for b in msg["blocks"] if b["type"] == "section" for f in b.get("fields", [])}
    assert fields["*Static*"] == "16.58 GiB (weights 14.25)"
    assert fields["*KV cache*"] == "59.22 GiB"
    assert fields["*KV usage*"] == "98.3%"
    assert fields["*L+XL share*"] == "21.6% · 8.3% → 36.5%"
    texts = " ".join(b["text"]["text"] for b in msg["blocks"] if b["type"] == "section" and "text" in b)
    assert "`--gpu-memory-utilization=0.95` → `0.88`" in texts
    assert "1. Lower --max-num-seqs from 128 to 114" in texts
    # one action per flag: the fraction is lowered by its own action, not also inside a template
    assert "4. Lower --gpu-memory-utilization from 0.95 to 0.88" in texts and "more in the thread" not in texts


def test_the_thread_holds_why_every_action_findings_and_what_was_not_checked():
    detail = R.thread_detail(_report("tp-misconfig-kubeai"), "en")
    text = "\n".join(b.get("text", {}).get("text", "") for m in detail.messages for b in m["blocks"])
    for title in ("*Why", "*Next actions*", "rollback:", "*Findings*", "Round 4 · quantization and parallelism",
                  "*Not checked*"):
        assert title in text


def test_healthy_and_insufficient_evidence_have_their_own_status():
    assert R.diagnosis_message(_report("healthy-vllm-v1"), "en")["blocks"][0]["text"]["text"].startswith(
        ":white_check_mark:")
    assert R.diagnosis_message(_report("insufficient-evidence"), "en")["blocks"][0]["text"]["text"].startswith(
        ":grey_question:")


def test_chinese_messages_are_worded_in_chinese():
    msg = R.diagnosis_message(_report("runbook-incident"), "zh")
    detail = R.thread_detail(_report("runbook-incident"), "zh")
    text = json.dumps([msg, *detail.messages], ensure_ascii=False)
    assert CJK.search(msg["blocks"][0]["text"]["text"])
    for english in ("Next actions", "Findings", "Not checked", "confidence", "asked by"):
        assert english not in text


def _huge_report() -> Report:
    long_fact = fact("log_signal", "logs.txt", signal="cuda_oom", count=99, example="x" * 400)
    findings = tuple(Finding("runtime_cuda_oom", 3, "critical", facts=(long_fact,) * 6) for _ in range(60))
    checks = tuple(CheckResult(name, i, findings=findings, used=("logs",))
                   for i, name in enumerate(("static", "kv_cache", "concurrency", "parallelism", "platform"), 1))
    return replace(_report("runbook-incident"), checks=checks, target="llm/<script>&co")


def test_a_report_too_big_for_messages_overflows_to_a_file_and_every_message_fits():
    detail = R.thread_detail(_huge_report(), "en")
    assert detail.overflow
    assert len(detail.messages) == R.MAX_THREAD_MESSAGES
    for msg in detail.messages:
        _assert_slack_takes(msg)
        assert len(msg["blocks"]) <= MAX_BLOCKS
    assert "attached report file" in detail.messages[-1]["blocks"][-1]["text"]["text"]


def test_user_controlled_text_is_escaped_but_mentions_are_not():
    msg = R.diagnosis_message(_huge_report(), "en", user="U0ONCALL")
    context = msg["blocks"][1]["elements"][0]["text"]
    assert "llm/&lt;script&gt;&amp;co" in context
    assert "<@U0ONCALL>" in context


def test_help_lists_every_verb_with_an_example_in_the_channels_language():
    for lang, word in (("en", "e.g."), ("zh", "示例")):
        msg = V.help_message(lang, ("triage", "profile", "snapshot", "budget", "help"))
        text = json.dumps(msg, ensure_ascii=False)
        for verb in ("triage", "profile", "snapshot", "budget", "help"):
            assert f"/gpumem {verb}" in text
        assert word in text


def test_errors_show_what_was_wrong_and_the_right_form():
    msg = V.error_message("en", "unknown_verb", "", verb="diagnose", verbs="triage, help")
    assert "diagnose is not a gpumem command" in msg["text"]
    msg = V.error_message("en", "missing_target", "usage: /gpumem triage [target]")
    assert any("```usage: /gpumem triage [target]```" in b.get("text", {}).get("text", "") for b in msg["blocks"])


def test_profile_message_shows_buckets_and_the_shift():
    msg = V.profile_message(_report("runbook-incident"), "en", "llm/vllm-server")
    _assert_slack_takes(msg)
    fields = [f["text"] for b in msg["blocks"] for f in b.get("fields", [])]
    assert fields[0] == "*S*\n43.8% (1051)"
    assert "L+XL share 8.3%" in json.dumps(msg)
    none = V.profile_message(_report("insufficient-evidence"), "en", "llm/x")
    assert "No request profile" in none["text"]


def test_snapshot_message_lists_gpus_fullest_first_and_fits_any_count():
    devices = tuple(GpuDevice(index=str(i), name="NVIDIA H100 80GB HBM3", used_bytes=(40 + i % 40) * 2**30,
                              total_bytes=80 * 2**30, util_gpu_pct=50.0, pod=f"vllm-{i}") for i in range(120))
    ev = Evidence(gpus=GpuSnapshot(source="nvml", devices=devices, taken_at=NOW))
    msg = V.snapshot_message(ev, "en", "llm/vllm-server")
    _assert_slack_takes(msg)
    text = json.dumps(msg)
    assert text.index("`39`") < text.index("`38`")
    assert "`0`" not in text  # among the least full, past the 40 shown
    assert "+80 more GPUs" in text
    assert "No GPU readings" in V.snapshot_message(Evidence(), "en", "llm/x")["text"]


def test_long_cli_output_is_cut_and_returned_for_upload():
    out = "\n".join(f"row {i}: " + "x" * 80 for i in range(400))
    msg, attach = V.verb_output_message("en", "budget", ["--engine", "vllm"], out, 0)
    _assert_slack_takes(msg)
    assert attach == out
    short, none = V.verb_output_message("en", "budget", ["--engine", "vllm"], "fits: yes\n", 0)
    assert none is None and "fits: yes" in json.dumps(short)


def test_charts_are_png_and_absent_without_data():
    report = _report("runbook-incident")
    ev = load_bundle(EXAMPLES / "runbook-incident")
    for png in (memory_chart(report, ev, "en"), profile_chart(report, "zh")):
        assert png is not None and png.startswith(b"\x89PNG\r\n\x1a\n")
    empty = _report("insufficient-evidence")
    assert profile_chart(empty, "en") is None
    assert memory_chart(replace(empty, memory=None), Evidence(), "en") is None
