"""Triage on evidence real users pasted into public issue threads (tests/data/real).

Each case holds the paste as posted and a source.md with the verdict the thread reached,
decided before gpumem ran. A case the rules cannot get right says so (`known_wrong:`) and is
a strict xfail, so fixing it is noticed; every other case must stay right.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.real_corpus_report import CORPUS, Case, CorpusError, load_cases, read_case

CASES = load_cases()
BUNDLE_FILES = {"nvidia-smi.txt", "metrics.txt", "deployment.yaml", "pods.yaml", "pods.txt", "hpa.yaml",
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
