"""Every bundled example reaches its expected verdict, in both languages, text and JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bot.main import main
from bot.render.i18n import Catalog
from runbooks.model.report import CAUSE_IDS

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BUNDLES = sorted(p for p in EXAMPLES.iterdir() if (p / "expected.json").is_file())
CJK = re.compile(r"[\u4e00-\u9fff]")


def _expected(bundle: Path) -> dict:
    return json.loads((bundle / "expected.json").read_text())


def test_examples_cover_every_cause_and_both_non_causes():
    primaries = {_expected(b)["primary"] for b in BUNDLES}
    assert len(BUNDLES) >= 8
    assert set(CAUSE_IDS) <= primaries
    assert {"healthy", "insufficient_evidence"} <= primaries


def test_examples_span_engines_and_launch_forms():
    engines = set()
    for bundle in BUNDLES:
        dep = bundle / "deployment.yaml"
        if dep.is_file():
            text = dep.read_text()
            engines |= {e for e in ("vllm", "sglang", "text-generation-inference") if e in text}
    assert engines == {"vllm", "sglang", "text-generation-inference"}


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_example_reaches_expected_verdict_in_json(bundle: Path, lang: str, capsys):
    expected = _expected(bundle)
    rc = main(["triage", "--bundle", str(bundle), "--json", "--lang", lang])
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"]["primary"] == expected["primary"]
    cause_ids = [c["id"] for c in doc["verdict"]["causes"]]
    for also in expected["also"]:
        assert also in cause_ids
    assert rc == expected["exit_code"]
    assert doc["read_issues"] == [], "every file of a bundled example must be readable"
    assert doc["verdict"]["title"] == Catalog.load(lang).t(f"verdict.{expected['primary']}")


@pytest.mark.parametrize("lang", ["en", "zh"])
@pytest.mark.parametrize("bundle", BUNDLES, ids=lambda p: p.name)
def test_example_text_report_leads_with_the_verdict(bundle: Path, lang: str, capsys):
    expected = _expected(bundle)
    main(["triage", "--bundle", str(bundle), "--lang", lang])
    out = capsys.readouterr().out
    cat = Catalog.load(lang)
    verdict_line = next(line for line in out.splitlines() if line.startswith("== "))
    assert cat.t(f"verdict.{expected['primary']}") in verdict_line
    # what to do next: the actions, or for not enough evidence what to capture
    decide = "section.capture_next" if expected["primary"] == "insufficient_evidence" else "section.actions"
    assert f"== {cat.t(decide)}" in out
    if lang == "zh":
        assert CJK.search(verdict_line)
    else:
        assert not CJK.search(out)
