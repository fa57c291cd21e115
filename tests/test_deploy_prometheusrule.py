"""deploy/components/alerts/prometheusrule.yaml is what `gpumem rules -o prometheusrule` writes today: a change to
a rule, a threshold or its wording that is not written back into the committed file fails here
(regenerate with `gpumem rules -o prometheusrule > deploy/components/alerts/prometheusrule.yaml`)."""

from __future__ import annotations

from pathlib import Path

import yaml

from bot.main import main

COMMITTED = Path(__file__).resolve().parent.parent / "deploy" / "components" / "alerts" / "prometheusrule.yaml"


def _generated(capsys) -> str:
    capsys.readouterr()
    assert main(["rules", "-o", "prometheusrule", "--lang", "en"]) == 0
    return capsys.readouterr().out


def test_the_committed_prometheusrule_is_the_generators_output(capsys):
    assert COMMITTED.read_text(encoding="utf-8") == _generated(capsys)


def test_the_committed_prometheusrule_holds_every_alert_with_the_runbooks_lines():
    obj = yaml.safe_load(COMMITTED.read_text(encoding="utf-8"))
    assert (obj["apiVersion"], obj["kind"], obj["metadata"]["name"]) == (
        "monitoring.coreos.com/v1", "PrometheusRule", "gpumem")
    rules = {(r["alert"], r["labels"].get("engine")): r for g in obj["spec"]["groups"] for r in g["rules"]
             if "alert" in r}
    assert len(rules) == 16 and all(r["labels"]["gpumem"] == "triage" for r in rules.values())
    gpu = rules[("GpumemGPUMemoryHigh", None)]
    assert gpu["expr"].rstrip().endswith("> 0.95") and gpu["for"] == "10m"
    assert rules[("GpumemKVCacheHigh", "vllm")]["expr"].rstrip().endswith("> 0.9")
    assert rules[("GpumemQueueDeep", "tgi")]["expr"].rstrip().endswith("> 12")
