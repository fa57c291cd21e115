"""The terminal contract: exit codes, bad input, partly unreadable bundles, JSON keys."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bot.main import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.fixture
def incident_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "incident"
    shutil.copytree(EXAMPLES / "runbook-incident", dst)
    return dst


def test_missing_bundle_folder_is_a_usage_error_naming_the_path(tmp_path, capsys):
    rc = main(["triage", "--bundle", str(tmp_path / "nope"), "--lang", "en"])
    err = capsys.readouterr().err
    assert rc == 2
    assert str(tmp_path / "nope") in err


def test_empty_bundle_means_nothing_could_be_read(tmp_path, capsys):
    rc = main(["triage", "--bundle", str(tmp_path), "--lang", "en"])
    captured = capsys.readouterr()
    assert rc == 3
    assert "Nothing in" in captured.err
    assert "Not enough evidence" in captured.out


def test_malformed_file_is_reported_and_the_rest_still_decides(incident_copy, capsys):
    (incident_copy / "metrics.txt").write_text("vllm:num_requests_waiting{model_name=\"q\"} 18\nthis is { not metrics\n")
    rc = main(["triage", "--bundle", str(incident_copy), "--json", "--lang", "en"])
    doc = json.loads(capsys.readouterr().out)
    issues = [i for i in doc["read_issues"] if i["source"] == "metrics.txt"]
    assert issues and issues[0]["line"] == 2
    assert doc["verdict"]["primary"] == "kv_cache_pressure"
    assert rc == 1
    assert "metrics.txt" not in doc["sources"]


def test_malformed_file_shows_under_could_not_read_in_text(incident_copy, capsys):
    (incident_copy / "deployment.yaml").write_text("spec:\n  replicas: [1\n")
    main(["triage", "--bundle", str(incident_copy), "--lang", "en"])
    out = capsys.readouterr().out
    section = out.split("== Could not read", 1)[1]
    assert "deployment.yaml line" in section


def test_json_report_has_the_documented_keys(capsys):
    main(["triage", "--bundle", str(EXAMPLES / "runbook-incident"), "--json", "--lang", "en"])
    doc = json.loads(capsys.readouterr().out)
    for key in ("schema_version", "target", "engine", "model", "gpu", "verdict", "memory", "budget", "profile",
                "flags_at_edge", "findings", "not_checked", "checks", "actions", "read_issues", "sources", "lang"):
        assert key in doc, key
    assert set(doc["verdict"]) >= {"primary", "causes", "misjudgements", "priority", "evidence_coverage", "title"}
    cause = doc["verdict"]["causes"][0]
    assert set(cause) >= {"id", "confidence", "confidence_label", "evidence_for", "rule_out", "actions", "title"}
    assert 0 < cause["confidence"] <= 1
    assert {"id", "round", "severity", "facts", "supports", "check", "title"} <= set(doc["findings"][0])
    assert doc["target"] == "llm/vllm-server"


def test_unknown_language_is_rejected_by_usage(capsys):
    with pytest.raises(SystemExit) as e:
        main(["triage", "--bundle", str(EXAMPLES / "runbook-incident"), "--lang", "fr"])
    assert e.value.code == 2


def test_parsing_any_verb_imports_no_heavy_library():
    """`gpumem --help` and argument errors stay fast: clients load only on the paths that use them."""
    import subprocess
    import sys

    heavy = ("kubernetes", "slack_bolt", "slack_sdk", "matplotlib", "numpy", "requests", "pynvml", "waitress")
    code = ("import sys; from bot.grammar.commands import build_parser; build_parser(); "
            f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({heavy!r})))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.stdout.strip() == "[]"
