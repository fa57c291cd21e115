"""The table of start-up lines (`runbooks.catalogs.engine_logs`) is what the start-up reader
reads, each entry names where and since when the engine prints it, and the lines rendered from
the engines' own format strings (tests/data/engine_lines/lines.yaml) fall in the versions the
table gives."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import yaml

from collectors.parsers import log_startup
from runbooks.catalogs.engine_logs import ENGINES, KINDS, STARTUP_LINES
from runbooks.model.evidence import StartupMemory

CORPUS = yaml.safe_load((Path(__file__).parent / "data" / "engine_lines" / "lines.yaml").read_text(encoding="utf-8"))
NEWEST = {"vllm": "0.33.0", "sglang": "0.5.23", "tgi": "v3.3.7"}
FIELDS = {f.name for f in dataclasses.fields(StartupMemory)}
BY_ID = {line.id: line for line in STARTUP_LINES}


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def _shown(engine: str, version: tuple[int, int, int]) -> str:
    return ("v" if engine == "tgi" else "") + ".".join(map(str, version))


def test_the_reader_is_built_from_the_table_and_nothing_else():
    assert len(log_startup._RULES) == len(STARTUP_LINES)
    for (needle, pattern, _), line in zip(log_startup._RULES, STARTUP_LINES, strict=True):
        assert (needle, pattern.pattern) == (line.needle, line.pattern)
    # the module compiles no line pattern of its own (only the key=value splitter of one reader)
    source = Path(log_startup.__file__).read_text(encoding="utf-8")
    assert source.count("re.compile(") == 2


def test_each_entry_is_well_formed():
    assert len(BY_ID) == len(STARTUP_LINES)
    assert set(log_startup._CONVERT) == set(KINDS)
    for line in STARTUP_LINES:
        assert line.engine in ENGINES and line.id.startswith(line.engine + "."), line.id
        assert line.needle and re.compile(line.pattern), line.id
        assert bool(line.reader) != bool(line.fields), f"{line.id}: fields or a reader, one of them"
        if line.reader:
            assert line.reader in log_startup._READERS, line.id
        for spec in line.fields:
            if spec is not None:
                assert spec[0] in FIELDS and spec[1] in KINDS, (line.id, spec)
        # as many fields as the pattern has groups
        if line.fields:
            assert len(line.fields) == re.compile(line.pattern).groups, line.id


@pytest.mark.parametrize("line", [x for x in STARTUP_LINES if x.engine != "torch"], ids=lambda x: x.id)
def test_each_engine_entry_cites_its_first_and_newest_version(line):
    assert line.since is not None
    assert line.until is None or line.since <= line.until
    cited = re.findall(r"@(v?[\d.]+)", line.source)
    assert _shown(line.engine, line.since) in cited, f"{line.id}: no file:line at {line.since}"
    last = NEWEST[line.engine] if line.until is None else _shown(line.engine, line.until)
    assert last in cited, f"{line.id}: no file:line at {last}"
    assert re.search(r"\.(py|rs):\d+", line.source), line.id


def test_every_line_rendered_from_an_engine_falls_in_the_versions_the_table_gives():
    checked, read, at_ends = 0, set(), set()
    for entry in CORPUS:
        text = entry["prefix"] + entry["format"].format(**entry["values"])
        version = _v(entry["version"])
        for line in STARTUP_LINES:
            if line.needle in text and re.search(line.pattern, text, re.ASCII):
                assert line.engine in (entry["engine"], "torch"), (entry["id"], line.id)
                assert line.printed_by(version), f"{entry['id']} ({entry['version']}) is read by {line.id}, " \
                                                 f"which the table says is printed {line.since}-{line.until}"
                checked += 1
                read.add(line.id)
                if line.since is not None and version in (line.since, line.until or _v(NEWEST[line.engine].lstrip("v"))):
                    at_ends.add(line.id)
    assert checked >= 75
    # every engine's line of the table has a rendered line in the corpus (torch's come from real logs)
    engine_lines = {line.id for line in STARTUP_LINES if line.engine != "torch"}
    assert engine_lines - read == set()
    # ... at its first or its newest version
    assert engine_lines - at_ends == set()


def test_versions_in_and_out_of_a_range():
    consumed = BY_ID["vllm.summary_consumed"]
    assert not consumed.printed_by((0, 26, 0)) and consumed.printed_by((0, 27, 1))
    assert consumed.printed_by((0, 40, 0))  # until None: the newest read still prints it
    weights = BY_ID["vllm.summary_weights"]
    assert weights.printed_by((0, 26, 0)) and not weights.printed_by((0, 27, 1))
    assert not BY_ID["vllm.estimated_max_model_len"].printed_by((0, 8, 5))  # built and dropped there
    assert BY_ID["torch.total_capacity"].printed_by((0, 8, 5))  # torch's: no engine version
