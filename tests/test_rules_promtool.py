"""`gpumem rules` against Prometheus' own tool: `promtool check rules` accepts what it writes,
and `promtool test rules` runs the unit tests in tests/data/rules/ against freshly generated
rules, so a change that breaks a rule's behaviour (fires where it should not, stays silent
where it should fire, labels or wording that no longer route) fails here.

The unit-test files name their rule file: `gpumem-rules.yaml` is `gpumem rules -o rules`,
`gpumem-rules-custom-labels.yaml` the same with the webhook's labels renamed. `make test`
installs promtool (Debian's prometheus package); without it these tests skip and say so.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from bot.main import main

DATA = Path(__file__).resolve().parent / "data" / "rules"
TESTS = sorted(DATA.glob("*.test.yaml"))
#: rule file name the unit tests load -> the `gpumem rules` arguments that write it
RULE_FILES = {
    "gpumem-rules.yaml": ["-o", "rules"],
    "gpumem-rules-custom-labels.yaml": ["-o", "rules", "--namespace-label", "gpumem_namespace",
                                        "--deployment-label", "gpumem_deployment"],
}
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed: `make system-deps` (Debian's prometheus package) installs it")


def _rules(capsys, *argv: str) -> str:
    capsys.readouterr()
    assert main(["rules", *argv]) == 0
    return capsys.readouterr().out


def _promtool(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([PROMTOOL, *argv], capture_output=True, text=True, timeout=120)


@pytest.fixture
def rule_dir(tmp_path, capsys) -> Path:
    """A folder with the freshly generated rule files and copies of the unit tests."""
    for name, argv in RULE_FILES.items():
        (tmp_path / name).write_text(_rules(capsys, *argv))
    for test in TESTS:
        shutil.copy(test, tmp_path / test.name)
    return tmp_path


@needs_promtool
@pytest.mark.parametrize("argv", [
    ["-o", "rules"],
    ["-o", "rules", "--lang", "zh"],
    ["-o", "rules", "--engine", "tgi"],
    ["-o", "rules", "--namespace-label", "ns", "--deployment-label", "app", "--runbook-url",
     "https://git.example.com/ops/gpumem/-/blob/main/README.md"],
], ids=["all-engines", "zh", "tgi-only", "custom-labels"])
def test_promtool_check_rules_accepts_the_rule_file(tmp_path, capsys, argv):
    path = tmp_path / "rules.yaml"
    path.write_text(_rules(capsys, *argv))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


@needs_promtool
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_promtool_check_rules_accepts_the_prometheusrule_spec(tmp_path, capsys, lang):
    obj = yaml.safe_load(_rules(capsys, "--lang", lang))
    assert (obj["apiVersion"], obj["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(obj["spec"], allow_unicode=True))
    done = _promtool("check", "rules", str(path))
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
@pytest.mark.real_services  # `promtool test rules` evaluates the rules in Prometheus' own query engine
@pytest.mark.parametrize("test", TESTS, ids=[t.name for t in TESTS])
def test_promtool_unit_tests_pass_against_the_generated_rules(rule_dir, test):
    done = _promtool("test", "rules", str(rule_dir / test.name))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def _expected_alerts() -> set[tuple[str, str | None]]:
    """(alert name, engine label) of every alert some unit test expects to fire."""
    seen = set()
    for test in TESTS:
        for case in yaml.safe_load(test.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                for alert in check.get("exp_alerts") or []:
                    seen.add((check["alertname"], alert["exp_labels"].get("engine")))
    return seen


def test_every_rule_of_every_engine_is_shown_to_fire_by_a_unit_test(capsys):
    written = yaml.safe_load(_rules(capsys, "-o", "rules"))
    rules = {(r["alert"], r["labels"].get("engine")) for g in written["groups"] for r in g["rules"] if "alert" in r}
    assert len(rules) == 16
    assert rules - _expected_alerts() == set()


def test_every_unit_test_loads_a_rule_file_this_suite_writes():
    assert len(TESTS) >= 6
    for test in TESTS:
        assert set(yaml.safe_load(test.read_text())["rule_files"]) <= set(RULE_FILES), test.name
