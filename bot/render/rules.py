"""Rendering of `gpumem rules`: a Prometheus rule file or a PrometheusRule, as YAML or JSON.

Annotations are worded from `rules_cli.alert.<wording>` in the chosen language, with
Prometheus' own templates in the placeholders: `{target}` becomes
`{{ $labels.<namespace label> }}/{{ $labels.<deployment label> }}` and `{value}` the alert's
value, humanized by its kind, so Alertmanager shows the workload and the reading.
"""

from __future__ import annotations

from typing import Any

import yaml

from bot.render.i18n import Catalog
from bot.service.outcomes import RulesOutcome
from runbooks.alerts.fleet_queries import RECORDING_GROUP, RECORDING_INTERVAL_S, Recording
from runbooks.alerts.promql import duration
from runbooks.alerts.rules import Rule

SCHEMA_VERSION = 1
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}
#: Rule.value -> the template that shows `$value`
_VALUE = {
    "ratio": "{{ $value | humanizePercentage }}",
    "count": "{{ $value | humanize }}",
    "seconds": "{{ $value | humanizeDuration }}",
}
#: labels every alert carries so that Alertmanager can route it to gpumem's webhook
ROUTE_LABEL = ("gpumem", "triage")


def rule_object(rule: Rule, outcome: RulesOutcome, cat: Catalog) -> dict[str, Any]:
    """One rule as Prometheus reads it: alert, expr, for, labels, annotations."""
    rs = outcome.ruleset
    target = f"{{{{ $labels.{rs.namespace_label} }}}}/{{{{ $labels.{rs.deployment_label} }}}}"
    params = {**rule.params, "engine": ENGINE_NAMES.get(rule.engine or "", rule.engine),
              "target": target, "value": _VALUE[rule.value]}
    if "engines" in params:
        params["engines"] = cat.join(ENGINE_NAMES[e] for e in params["engines"])
    if isinstance(params.get("metrics"), str):  # the series a rule reads, listed in the language's way
        params["metrics"] = cat.join(params["metrics"].split(", "))
    labels = {ROUTE_LABEL[0]: ROUTE_LABEL[1], "severity": rule.severity}
    if rule.engine:
        labels["engine"] = rule.engine
    out: dict[str, Any] = {"alert": rule.alert, "expr": rule.expr}
    if rule.for_s:
        out["for"] = duration(rule.for_s)
    out["labels"] = labels
    out["annotations"] = {
        "summary": cat.t(f"rules_cli.alert.{rule.wording}.summary", params),
        "description": cat.t(f"rules_cli.alert.{rule.wording}.description", params),
        "runbook_url": f"{outcome.runbook_url}#{rule.anchor}",
    }
    return out


def recording_object(rec: Recording) -> dict[str, Any]:
    """One recording rule as Prometheus reads it: record, expr, and the engine label when it is one engine's."""
    out: dict[str, Any] = {"record": rec.record, "expr": rec.expr}
    if rec.engine:
        out["labels"] = {"engine": rec.engine}
    return out


def document(outcome: RulesOutcome, lang: str) -> dict[str, Any]:
    """The rule file (`groups:`) or the monitoring.coreos.com/v1 PrometheusRule holding it."""
    cat = Catalog.load(lang)
    groups = [{"name": name, "rules": [rule_object(r, outcome, cat) for r in rules]}
              for name, rules in outcome.ruleset.groups().items()]
    if outcome.recordings:
        groups.append({"name": RECORDING_GROUP, "interval": duration(RECORDING_INTERVAL_S),
                       "rules": [recording_object(r) for r in outcome.recordings]})
    if outcome.output == "rules":
        return {"groups": groups}
    labels = {"app.kubernetes.io/name": "gpumem", "app.kubernetes.io/component": "alert-rules",
              **outcome.object_labels}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": outcome.name, "labels": labels}, "spec": {"groups": groups}}


def not_written(outcome: RulesOutcome, lang: str) -> list[dict[str, str]]:
    """The rules an engine does not get: engine, alert, reason (a stable id) and its wording."""
    cat = Catalog.load(lang)
    return [{"engine": s.engine, "alert": s.alert, "reason": s.reason,
             "text": cat.t(f"rules_cli.missing.{s.reason}", engine=ENGINE_NAMES[s.engine])}
            for s in outcome.ruleset.skipped]


def version_limited(outcome: RulesOutcome, lang: str) -> list[dict[str, str]]:
    """The rules written that fire only from some engine version: engine, alert, reason, wording."""
    cat = Catalog.load(lang)
    return [{"engine": s.engine, "alert": s.alert, "reason": s.reason,
             "text": cat.t(f"rules_cli.version.{s.reason}", engine=ENGINE_NAMES[s.engine])}
            for s in outcome.ruleset.version_limited]


def rules_yaml(outcome: RulesOutcome, lang: str) -> str:
    """The document as YAML, after comment lines that say what it holds and what it left out."""
    cat = Catalog.load(lang)
    rs = outcome.ruleset
    lines = [cat.t("rules_cli.header", engines=cat.join(ENGINE_NAMES[e] for e in rs.engines),
                   namespace_label=rs.namespace_label, deployment_label=rs.deployment_label)]
    lines += [cat.t("rules_cli.not_written", engine=ENGINE_NAMES[s["engine"]], alert=s["alert"], reason=s["text"])
              for s in not_written(outcome, lang)]
    lines += [cat.t("rules_cli.version_limited", engine=ENGINE_NAMES[s["engine"]], alert=s["alert"], reason=s["text"])
              for s in version_limited(outcome, lang)]
    if outcome.recordings:
        lines.append(cat.t("rules_cli.recording", count=len(outcome.recordings), group=RECORDING_GROUP))
    lines.append(cat.t("rules_cli.check_rules" if outcome.output == "rules" else "rules_cli.check_prometheusrule"))
    head = "".join(f"# {line}\n" for line in lines)
    return head + yaml.dump(document(outcome, lang), Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                            default_flow_style=False, width=1 << 30)


def rules_json(outcome: RulesOutcome, lang: str) -> dict[str, Any]:
    """`gpumem rules --json`: stable keys, see README ("Alert rules")."""
    rs = outcome.ruleset
    return {
        "schema_version": SCHEMA_VERSION,
        "output": outcome.output,
        "lang": lang,
        "engines": list(rs.engines),
        "namespace_label": rs.namespace_label,
        "deployment_label": rs.deployment_label,
        "runbook_url": outcome.runbook_url,
        "rules": [{"id": r.id, "alert": r.alert, "group": r.group, "engine": r.engine, "severity": r.severity,
                   "for_s": r.for_s} for r in rs.rules],
        "recording_rules": [{"record": r.record, "engine": r.engine} for r in outcome.recordings],
        "not_written": not_written(outcome, lang),
        "version_limited": version_limited(outcome, lang),
        "document": document(outcome, lang),
    }


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the expressions) as literal blocks, so a reader sees the PromQL's lines."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)
