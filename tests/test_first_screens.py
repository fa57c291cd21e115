"""The first screen of a terminal triage is the decision: verdict, priority and what to do
next within 20 lines, on every example and every real case, in English and Chinese; the
evidence comes after, each line once."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from bot.render.i18n import LANGS, Catalog
from bot.render.text import render_text
from bot.render.view import view
from bot.render.wording import QUOTE_CHARS, fact_text, quote_text
from bot.service import triage as triage_service
from runbooks.model.report import Fact, Report

ROOT = Path(__file__).resolve().parent.parent
BUNDLES = sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir()) + sorted(
    p for p in (ROOT / "tests" / "data" / "real").iterdir() if p.is_dir())
FIRST_SCREEN = 20


@cache
def _report(bundle: Path) -> Report:
    return triage_service.triage_bundle(str(bundle)).report


def _section(text: str, cat: Catalog, key: str) -> list[str]:
    """The lines of one `== Title` section of the terminal text (its body, indented)."""
    out, inside = [], False
    for line in text.splitlines():
        if line.startswith("== "):
            inside = re.split("[:：]", line[3:])[0] == cat.t(key)
            continue
        if inside and line.strip():
            out.append(line.strip().removeprefix("- ").removeprefix("· "))
    return out


def test_the_corpus_is_every_example_and_every_real_case():
    assert len(BUNDLES) >= 100
    assert any(b.name == "insufficient-evidence" for b in BUNDLES)


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_the_first_twenty_lines_hold_the_verdict_the_priority_and_the_first_action(bundle: Path, lang: str):
    report = _report(bundle)
    cat, v = Catalog.load(lang), view(report, lang)
    first = render_text(report, lang).splitlines()[:FIRST_SCREEN]
    colon = cat.t("punct.colon")
    assert any(line.startswith(f"== {cat.t('section.verdict')}{colon}{v.primary_title}") for line in first), first
    assert any(line.strip() == f"{cat.t('section.priority')}{colon}{v.priority} · {cat.t('section.coverage', pct=v.coverage)}"
               for line in first), first
    if v.capture:  # not enough evidence: what to capture, with its command, is the first thing to do
        assert f"  1. {v.capture[0]}" in first, first
    elif v.actions:
        assert f"  1. [{v.actions[0].tier}] {v.actions[0].title}" in first, first
    else:
        assert f"== {cat.t('section.actions')}" in first and f"  {cat.t('section.none')}" in first, first


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_the_decision_comes_before_the_evidence(bundle: Path):
    text = render_text(_report(bundle), "en")
    heads = [line.split(":")[0] for line in text.splitlines() if line.startswith("== ")]
    assert heads[0] == "== Verdict"
    decision = next(i for i, h in enumerate(heads) if h in ("== Next actions", "== Capture next (these would decide it)"))
    assert decision == 1, heads
    for evidence in ("== Why", "== Findings", "== Static vs dynamic memory (per GPU)"):
        if evidence in heads:
            assert heads.index(evidence) > decision


def test_insufficient_evidence_leads_with_the_commands_that_capture_it():
    report = _report(ROOT / "examples" / "insufficient-evidence")
    text = render_text(report, "en").splitlines()
    start = text.index("== Capture next (these would decide it)")
    assert start < 8
    assert "curl -s localhost:8000/metrics > metrics.txt" in text[start + 1]
    assert "nvidia-smi > nvidia-smi.txt" in text[start + 2]
    assert "== Next actions" not in text  # no empty "none" between the verdict and the capture


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_no_findings_line_repeats_a_why_line(bundle: Path, lang: str):
    report = _report(bundle)
    text, cat = render_text(report, lang), Catalog.load(lang)
    why = set(_section(text, cat, "section.why"))
    findings = _section(text, cat, "section.findings")
    assert not why & set(findings)
    if report.verdict.causes:  # what Why holds is the primary cause's evidence
        assert why >= set(view(report, lang).primary_cause.evidence)


def test_a_finding_whose_facts_are_all_under_why_says_so():
    report = _report(ROOT / "examples" / "runbook-incident")
    findings = _section(render_text(report, "en"), Catalog.load("en"), "section.findings")
    assert "[CRIT] KV-cache blocks are nearly all in use (its evidence is under Why, above)" in findings
    assert "TTFT p99 5.96 s" in findings  # a fact the mixed-pool finding adds to Why's


LONG = ("ERROR 07-14 11:01:40 [core.py:396] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. "
        "GPU 0 has a total capacity of 39.38 GiB of which 412.06 MiB is free. Process 1 has 38.9 GiB memory in use. "
        "Of the allocated memory 37.1 GiB is allocated by PyTorch, and 1.2 GiB is reserved but unallocated.")


def test_a_long_quote_keeps_its_error_class_and_number_and_says_where_it_is_cut():
    quoted = quote_text(LONG)
    assert quoted.startswith("…torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB.")
    assert quoted.endswith("…") and len(quoted) <= QUOTE_CHARS + 2
    assert "ERROR 07-14" not in quoted
    short = "Liveness probe failed: connection refused"
    assert quote_text(short) == short


@pytest.mark.parametrize("lang", LANGS)
def test_a_message_quotes_the_trimmed_line_and_the_json_keeps_it_whole(lang: str):
    from bot.render.report_json import report_json

    fact = Fact("log_signal", {"signal": "cuda_oom", "count": 3, "example": LONG}, source="logs.txt")
    text = fact_text(Catalog.load(lang), fact)
    assert quote_text(LONG) in text and LONG not in text
    report = _report(ROOT / "examples" / "runbook-incident")
    doc = report_json(report, lang)
    examples = [f["params"]["example"] for c in doc["verdict"]["causes"] for f in c["evidence_for"]
                if "example" in f["params"]]
    assert 'time=2026-03-09T2014Z level=warn msg="request rejected due to insufficient KV cache blocks"' in examples


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_no_quoted_log_line_in_the_terminal_runs_past_its_limit(bundle: Path):
    for line in render_text(_report(bundle), "en").splitlines():
        if 'e.g. "' in line:
            quoted = line.split('e.g. "', 1)[1].rsplit('"', 1)[0]
            assert len(quoted) <= QUOTE_CHARS + 2, line


#: a Chinese character or full-width closing mark followed by an ASCII colon (a URL's "://" aside)
_ASCII_COLON_AFTER_CHINESE = re.compile(r"[\u3400-\u9fff\uff09\u3011\u300d\u201d]\s*:(?!//)")


@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_a_chinese_triage_labels_with_the_full_width_colon(bundle: Path):
    """A Chinese reader sees "结论：", never "结论:": every label of the template and every
    message ends in the full-width colon (quoted log lines keep the engine's own ASCII)."""
    text = render_text(_report(bundle), "zh")
    for line in text.splitlines():
        prose = re.sub(r'"[^"]*"', "", line)
        assert not _ASCII_COLON_AFTER_CHINESE.search(prose), line


def test_the_colon_check_catches_an_ascii_colon_after_chinese():
    assert _ASCII_COLON_AFTER_CHINESE.search("== 结论: 可以启动")
    assert _ASCII_COLON_AFTER_CHINESE.search("  原因:")
    assert not _ASCII_COLON_AFTER_CHINESE.search("== 结论：可以启动 · curl -s http://localhost:8000/metrics")
