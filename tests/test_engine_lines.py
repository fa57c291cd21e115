"""Lines rendered from the engines' own format strings (tests/data/engine_lines/lines.yaml) are
read for their facts: the signals they carry, the start-up numbers, and for a refusal its cause
(never healthy)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from collectors.parsers.logs import parse_server_log
from runbooks.catalogs.signals import SIGNAL_KEYS
from runbooks.model.evidence import Evidence
from runbooks.triage.runbook import triage

CORPUS = Path(__file__).parent / "data" / "engine_lines" / "lines.yaml"
LINES = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))


def rendered(entry: dict) -> str:
    return entry["prefix"] + entry["format"].format(**entry["values"])


def test_each_entry_names_its_engine_version_and_source():
    assert len(LINES) >= 13
    assert len({e["id"] for e in LINES}) == len(LINES)
    for entry in LINES:
        assert entry["engine"] in ("vllm", "tgi", "sglang")
        assert entry["version"].count(".") == 2
        assert "@" in entry["source"] and ":" in entry["source"]
        assert entry.get("signals") or entry.get("startup") or entry.get("kv_alloc") or entry.get("stats"), entry["id"]
        assert set(entry.get("signals", {})) <= set(SIGNAL_KEYS), entry["id"]


@pytest.mark.parametrize("entry", LINES, ids=[e["id"] for e in LINES])
def test_the_line_is_read_for_its_facts(entry):
    logs = parse_server_log(rendered(entry), year=2026)
    assert {s.key: s.count for s in logs.signals} == entry.get("signals", {})
    expected = entry.get("startup", {})
    if expected:
        assert logs.startup is not None
        for name, value in expected.items():
            assert getattr(logs.startup, name) == pytest.approx(value, abs=0.005), name
    alloc = entry.get("kv_alloc")
    if alloc is None:
        assert logs.kv_alloc_failure is None
    else:
        got = logs.kv_alloc_failure
        assert got is not None, entry["id"]
        assert (got.phase, got.requested, got.available) == (alloc["phase"], alloc["requested"], alloc["available"])
        assert (got.free, got.evictable) == (alloc.get("free"), alloc.get("evictable"))
        assert got.pool == alloc.get("pool"), entry["id"]


@pytest.mark.parametrize("entry", [e for e in LINES if "cause" in e], ids=[e["id"] for e in LINES if "cause" in e])
def test_a_refusal_is_read_as_its_cause_not_healthy(entry):
    logs = parse_server_log(rendered(entry), year=2026)
    report = triage(Evidence(logs=logs, server_config=logs.server_config))
    assert report.verdict.primary == entry["cause"]
    assert report.verdict.primary not in ("healthy", "insufficient_evidence")


def test_sglang_0_5_23_graph_memory_is_the_sum_of_its_phases():
    decode, prefill = (next(e for e in LINES if e["id"] == i) for i in
                       ("sglang-0.5.23-decode-graph-end", "sglang-0.5.23-prefill-graph-end"))
    logs = parse_server_log(rendered(decode) + "\n" + rendered(prefill), year=2026)
    assert logs.startup.cudagraph_gib == pytest.approx(1.63, abs=0.005)
    # a restart prints the decode phase again: its part is replaced, not added
    again = dict(decode, values={**decode["values"], "usage": 1.0})
    logs = parse_server_log("\n".join([rendered(decode), rendered(prefill), rendered(again)]), year=2026)
    assert logs.startup.cudagraph_gib == pytest.approx(1.4, abs=0.005)


def test_vllm_0_10_2_bytes_become_gib():
    entry = next(e for e in LINES if e["id"] == "vllm-0.10.2-kv-in-use-bytes")
    logs = parse_server_log(rendered(entry), year=2026)
    assert logs.startup.kv_cache_gib == pytest.approx(entry["values"]["kv_bytes"] / 2**30, rel=1e-6)


def _alloc_entries() -> list[dict]:
    return [e for e in LINES if "kv_alloc" in e]


def test_sglang_allocator_refusals_cover_both_spellings_and_both_sides():
    entries = _alloc_entries()
    formats = " ".join(e["format"] for e in entries)
    assert "Avaliable tokens" in formats and "Available tokens" in formats and "available_size=" in formats
    sides = {e["kv_alloc"]["available"] >= e["kv_alloc"]["requested"] for e in entries}
    assert sides == {True, False}


@pytest.mark.parametrize("entry", _alloc_entries(), ids=[e["id"] for e in _alloc_entries()])
def test_sglang_allocator_figures_decide_kv_pressure(entry):
    """Fewer tokens available than asked: KV pressure. As many or more: pressure is
    contradicted, and a fraction at its edge alone does not name a cause for the crash."""
    text = rendered(entry) + "\n[2026-11-20 10:00:00] server_args=ServerArgs(mem_fraction_static=0.9, tp_size=1)"
    logs = parse_server_log(text, year=2026)
    report = triage(Evidence(logs=logs, server_config=logs.server_config))
    ids = {f.id for c in report.checks for f in c.findings}
    alloc = entry["kv_alloc"]
    if alloc["available"] >= alloc["requested"]:
        assert "kv_alloc_tokens_free" in ids and "kv_alloc_failed" not in ids
        assert report.verdict.primary not in ("kv_cache_pressure", "params_near_edge", "healthy")
    else:
        assert "kv_alloc_failed" in ids and "kv_alloc_tokens_free" not in ids
        assert report.verdict.primary == "kv_cache_pressure"


def test_an_allocator_head_without_figures_reads_nothing():
    logs = parse_server_log("Decode out of memory. Try to lower your batch size.\nsomething else\n", year=2026)
    assert logs.kv_alloc_failure is None
    far = ("Decode out of memory. Try to lower your batch size.\n" + "x\n" * 6 +
           "Try to allocate 5 tokens.\nAvailable tokens: 1\n")
    assert parse_server_log(far, year=2026).kv_alloc_failure is None


def test_a_logged_then_raised_refusal_counts_once_and_two_refusals_twice():
    entry = next(e for e in LINES if e["id"] == "sglang-0.4.5-decode-oom-avaliable-tokens-free")
    logged = "[2025-04-01 10:00:00 TP0] " + entry["format"].format(**entry["values"])
    raised = "Traceback (most recent call last):\n  File \"x.py\", line 1\n" + rendered(entry)
    assert parse_server_log(logged + "\n" + raised, year=2026).kv_alloc_failure.count == 1
    other = entry["format"].format(**{**entry["values"], "requested": 150})
    assert parse_server_log(logged + "\n" + other, year=2026).kv_alloc_failure.count == 2


_STATS = [e for e in LINES if "stats" in e]


@pytest.mark.parametrize("entry", _STATS, ids=[e["id"] for e in _STATS])
def test_a_stats_line_is_read_for_running_waiting_kv_use_and_preemptions(entry):
    from collectors.parsers.log_stats import parse_stats

    sample = parse_stats(rendered(entry))
    want = entry["stats"]
    assert sample is not None, entry["id"]
    assert (sample.running, sample.waiting) == (want["running"], want["waiting"])
    assert sample.kv_cache_usage_ratio == pytest.approx(want["kv"], abs=1e-9)
    assert sample.preemptions == want.get("preemptions")
    logs = parse_server_log(rendered(entry), year=2026)
    assert logs.stats_peak is not None and logs.stats_peak.kv_cache_usage_ratio == pytest.approx(want["kv"], abs=1e-9)


def test_stats_lines_cover_each_engine_at_its_first_and_newest_form():
    versions = {(e["engine"], e["version"]) for e in _STATS}
    assert {("vllm", "0.4.3"), ("vllm", "0.33.0"), ("sglang", "0.3.0"), ("sglang", "0.5.23")} <= versions
