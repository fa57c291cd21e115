"""Every log signal's pattern says where its text comes from, and every engine's own line has a
line rendered from that engine's format string, at a version that prints it, that the pattern
finds (tests/data/engine_lines/lines.yaml)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from collectors.parsers.logs import parse_server_log
from runbooks.catalogs.signals import RULES, Origin, SignalRule
from runbooks.model.evidence import ENGINES

CORPUS = Path(__file__).parent / "data" / "engine_lines" / "lines.yaml"
LINES = yaml.safe_load(CORPUS.read_text(encoding="utf-8"))
#: the newest version read of each engine (runbooks.catalogs.engine_logs)
NEWEST = {"vllm": (0, 33, 0), "tgi": (3, 3, 7), "sglang": (0, 5, 23)}
#: file:line@version, the first of them with the version after the "@" (TGI's tags keep their v)
_SOURCE = re.compile(r"^[\w./-]+\.(?:py|rs):\d+@v?\d+\.\d+\.\d+\b")


def _version(text: str) -> tuple[int, int, int]:
    a, b, c = text.split(".")
    return int(a), int(b), int(c)


def _rendered(entry: dict) -> str:
    return entry["prefix"] + entry["format"].format(**entry["values"])


def _engine_patterns() -> list[tuple[SignalRule, int, Origin]]:
    return [(rule, i, origin) for rule in RULES for i, origin in enumerate(rule.origins)
            if origin.by in ENGINES and origin.read]


def _id(item: tuple[SignalRule, int, Origin]) -> str:
    return f"{item[0].key}[{item[1]}]"


def test_every_pattern_has_its_origin():
    for rule in RULES:
        assert len(rule.origins) == len(rule.patterns), rule.key
        for origin in rule.origins:
            assert origin.by and origin.source, rule.key
            if rule.engine is not None:
                assert origin.by == rule.engine, rule.key


def test_an_engine_origin_names_its_versions_and_source_lines():
    for rule, i, origin in _engine_patterns():
        assert origin.since is not None, _id((rule, i, origin))
        assert origin.until is None or origin.since <= origin.until <= NEWEST[origin.by]
        assert _SOURCE.match(origin.source), origin.source
        first = origin.source.split("@", 1)[1].lstrip("v")
        assert _version(re.match(r"\d+\.\d+\.\d+", first).group()) == origin.since, origin.source
    unread = [o for r in RULES for o in r.origins if not o.read]
    assert unread and all(o.since is None and o.until is None for o in unread)
    assert not any(o.printed_by((0, 10, 0)) for o in unread)


@pytest.mark.parametrize("item", _engine_patterns(), ids=_id)
def test_each_engine_pattern_finds_a_line_its_engine_prints(item):
    rule, i, origin = item
    pattern = re.compile(rule.patterns[i], re.IGNORECASE if rule.ignore_case else 0)
    lines = [e for e in LINES if e["engine"] == origin.by and pattern.search(_rendered(e))]
    assert lines, f"no rendered {origin.by} line for {rule.key}[{i}]: {rule.patterns[i]}"
    versions = {_version(e["version"]) for e in lines}
    assert all(origin.printed_by(v) for v in versions), (rule.key, sorted(versions))
    ends = {origin.since, origin.until or NEWEST[origin.by]}
    assert versions & ends, (rule.key, i, sorted(versions), "a line at its first or newest version")
    for entry in lines:
        signals = {s.key for s in parse_server_log(_rendered(entry), year=2026).signals}
        assert rule.key in signals, entry["id"]


def test_origins_say_which_versions_print_a_line():
    preempted = next(r for r in RULES if r.key == "vllm_preemption").origins[0]
    assert preempted.printed_by((0, 6, 3)) and not preempted.printed_by((0, 11, 0))
    assert not preempted.printed_by((0, 4, 1))
    budget = next(r for r in RULES if r.key == "free_below_utilization").origins[1]
    assert budget.printed_by((0, 33, 0)) and not budget.printed_by((0, 20, 0))


@pytest.mark.parametrize("entry", [e for e in LINES if "gpus_insufficient" in e.get("signals", {})
                                   or "tp_indivisible" in e.get("signals", {})], ids=lambda e: e["id"])
def test_a_rendered_layout_refusal_is_read_for_its_figures(entry):
    """The layout refusals carry the sizes they compare (heads or layers against TP or PP, the
    world size against the GPUs): each rendered line is read for them, not only for its signal."""
    from collectors.parsers.log_failures import parallel_error

    found = parallel_error(_rendered(entry))
    assert found is not None, entry["id"]
    numbers = [v for v in entry["values"].values() if isinstance(v, int)]
    got = [v for v in (found.heads, found.size, found.gpus) if v is not None]
    assert got == numbers, entry["id"]
