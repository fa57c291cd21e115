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
        assert entry.get("signals") or entry.get("startup"), entry["id"]
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
