"""Triage on evidence real users pasted into public issue threads (tests/data/real).

Each case holds the paste as posted and a source.md with the verdict the thread reached,
decided before gpumem ran. A case the rules cannot get right says so (`known_wrong:`) and is
a strict xfail, so fixing it is noticed; every other case must stay right.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.render.text import render_text
from tests.support.real_corpus_report import (
    CORPUS,
    Case,
    CorpusError,
    accuracy,
    load_cases,
    read_case,
    run_all,
    score,
    table,
)

CASES = load_cases()
BUNDLE_FILES = {"nvidia-smi.txt", "metrics.txt", "deployment.yaml", "inferenceservice.yaml", "leaderworkerset.yaml",
                "pods.yaml", "pods.txt", "hpa.yaml",
                "events.yaml", "events.txt", "logs.txt", "access.log", "config.json"}


def test_the_corpus_is_large_and_varied():
    assert len(CASES) >= 30
    expected = {c.expected for c in CASES}
    assert {"params_near_edge", "weights_too_large", "kv_cache_pressure", "parallelism_misconfig",
            "platform_amplifier", "healthy", "insufficient_evidence"} <= expected
    urls = {c.url for c in CASES}
    assert len(urls) == len(CASES), "one case per thread"
    engines = {line.split(":", 1)[1].split()[0] for c in CASES
               for line in (c.path / "source.md").read_text().splitlines() if line.startswith("engine:")}
    assert {"vllm", "tgi", "sglang"} <= engines


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_case_is_a_bundle_with_its_source(case: Case):
    assert case.url.startswith("https://github.com/")
    files = {p.name for p in case.path.iterdir()} - {"source.md"}
    assert files and files <= BUNDLE_FILES, files
    text = (case.path / "source.md").read_text()
    for section in ("## Evidence as posted", "## Key lines", "## What the thread concluded", "## Why this verdict"):
        assert section in text, section


def test_a_source_without_an_expectation_is_refused(tmp_path: Path):
    (tmp_path / "source.md").write_text("# a thread\n\nurl: https://github.com/a/b/issues/1\n")
    with pytest.raises(CorpusError, match="expected"):
        read_case(tmp_path)
    (tmp_path / "source.md").write_text("url: https://github.com/a/b/issues/1\nexpected: oom\n")
    with pytest.raises(CorpusError, match="not a verdict id"):
        read_case(tmp_path)


def test_the_corpus_lives_beside_the_other_test_data():
    assert CORPUS.parent.name == "data" and CORPUS.is_dir()


#: computed once: every case through the real bundle loader and the real triage
RESULTS = {r.case.id: r for r in run_all()}
#: batch 1 was collected with the rules in view; batches 2, 3 and 4 (issue 20) were not: each
#: floor is the score its batch reached after the rule changes, so a regression is caught.
#: First runs, before any rule saw them: batch 2 11/29; batch 3 17/26 (13 exact, 1 false healthy),
#: 20/26 (17 exact, none false healthy) after; batch 2 23/29 once SGLang's allocator figures were read (issue 21);
#: batch 4 21/21 (16 exact, none false healthy), 21/21 (17 exact) after: its floor is every case
ACCURACY_FLOOR = {1: 0.90, 2: 23 / 29, 3: 20 / 26, 4: 21 / 21}
#: the smallest batch a floor is held on (batch 4 has 21 cases)
MIN_BATCH = 20


@pytest.mark.parametrize("batch", sorted(ACCURACY_FLOOR))
def test_triage_reaches_the_threads_verdict_above_each_batchs_floor(batch: int):
    results = [r for r in RESULTS.values() if r.case.batch == batch]
    assert len(results) >= MIN_BATCH
    assert accuracy(results) >= ACCURACY_FLOOR[batch], table(results)


def test_no_fault_is_ever_called_healthy():
    s = score(list(RESULTS.values()))
    assert s.false_healthy == 0, table(list(RESULTS.values()))


def test_every_healthy_verdict_says_what_it_rests_on_and_every_other_says_what_to_capture():
    for r in RESULTS.values():
        v = r.report.verdict
        if v.primary == "healthy":
            assert v.health_evidence, r.case.id
        elif v.primary == "insufficient_evidence":
            assert v.capture_next or any(f.id.startswith("unexplained_failure") for c in r.report.checks
                                         for f in c.findings), r.case.id


def test_a_batch_that_is_not_a_number_is_refused(tmp_path: Path):
    (tmp_path / "source.md").write_text("url: https://github.com/a/b/issues/1\nexpected: healthy\nbatch: two\n")
    with pytest.raises(CorpusError, match="batch"):
        read_case(tmp_path)


def _marks(case: Case):
    if case.known_wrong:
        return [pytest.mark.xfail(strict=True, reason=case.known_wrong)]
    return []


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_marks(c)) for c in CASES])
def test_the_case_stays_right(case: Case):
    result = RESULTS[case.id]
    assert result.ok, f"{case.id}: expected {case.accepted}, got {result.got}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_cause_named_has_a_sized_action_and_no_wording_says_n_a(case: Case):
    report = RESULTS[case.id].report
    for cause in report.verdict.causes:
        assert cause.actions, f"{cause.id} has no action"
    for lang in ("en", "zh"):
        text = render_text(report, lang)
        assert "n/a" not in text, [line for line in text.splitlines() if "n/a" in line]


def test_the_same_action_has_the_same_tier_in_every_verdict():
    tiers: dict[str, set[str]] = {}
    for r in RESULTS.values():
        for cause in r.report.verdict.causes:
            for a in cause.actions:
                tiers.setdefault(a.id, set()).add(a.tier)
    assert {k: v for k, v in tiers.items() if len(v) > 1} == {}


def test_no_action_sets_a_flag_to_the_value_it_has():
    for r in RESULTS.values():
        for a in r.report.actions:
            for ch in a.changes:
                assert ch.kind != "set_arg" or ch.old is None or ch.old != ch.new, (r.case.id, a.id, ch)


def test_the_priority_says_restarts_or_rejects_only_when_the_evidence_has_them():
    for r in RESULTS.values():
        ids = {f.id for c in r.report.checks for f in c.findings}
        why = r.report.verdict.priority_why
        if why in ("restarting", "oom_restarting"):
            assert ids & {"pods_restarting", "container_oomkilled"}, r.case.id
        if why == "rejects":
            assert ids & {"kv_rejects_logged", "queue_and_rejects_rising", "rejects_seen"}, r.case.id
        text = render_text(r.report, "en")
        if "pods keep restarting" in text:
            assert ids & {"pods_restarting", "container_oomkilled"}, r.case.id


def test_flags_at_the_edge_is_never_named_beside_none():
    for r in RESULTS.values():
        if any(c.id == "params_near_edge" for c in r.report.verdict.causes):
            text = render_text(r.report, "en")
            section = text.split("== Flags at the edge", 1)[1].split("==", 1)[0]
            assert section.strip() != "none", r.case.id


def test_each_flag_is_changed_by_one_action_in_a_report():
    for r in RESULTS.values():
        setters: dict[str, set[str]] = {}
        for cause in r.report.verdict.causes:
            for a in cause.actions:
                for ch in a.changes:
                    if ch.kind == "set_arg":
                        setters.setdefault(ch.flag, set()).add(a.id)
        assert {f: ids for f, ids in setters.items() if len(ids) > 1} == {}, r.case.id


def test_no_action_sets_an_unset_flag_to_the_engines_default_or_pastes_a_flag_it_leaves_alone():
    from collectors.bundle import load_bundle
    from runbooks.triage.actions import engine_default
    from runbooks.triage.context import build_context

    for r in RESULTS.values():
        ctx = build_context(load_bundle(r.case.path))
        for a in r.report.actions:
            set_args = [ch for ch in a.changes if ch.kind == "set_arg"]
            for ch in set_args:
                assert ch.old is not None or ch.new is None or ch.new != engine_default(ctx, ch.flag), (r.case.id, a.id)
            if isinstance(a.params.get("args"), str):
                pasted = {arg[2:].split("=")[0] for arg in a.params["args"].split()}
                assert pasted == {ch.flag for ch in set_args}, (r.case.id, a.id)


def test_every_action_has_the_tier_of_its_table():
    from runbooks.triage.actions import ESCALATE_ONLY

    for r in RESULTS.values():
        for cause in r.report.verdict.causes:
            for a in cause.actions:
                assert a.tier == ("escalate" if a.id in ESCALATE_ONLY else "now"), (r.case.id, a.id)
