"""The rules use case (`gpumem rules`): the runbook's alerts for the chosen engines, with the
labels gpumem's webhook reads, and the recording rules the fleet view reads (group
`gpumem-fleet`), as a plain rule file or a PrometheusRule object.

A bad value of one flag is refused by its argparse type (`bot.grammar.argtypes`); choices
that only clash together raise UsageError, worded from `rules_cli.error.<code>`.
"""

from __future__ import annotations

from bot.grammar.requests import RulesRequest
from bot.service.deps import Deps
from bot.service.outcomes import DEFAULT_OBJECT_NAME, RulesOutcome
from runbooks.alerts.engines import ENGINES
from runbooks.alerts.fleet_queries import recording_rules
from runbooks.alerts.rules import build_rules
from runbooks.model.errors import UsageError


def run_rules(request: RulesRequest, deps: Deps) -> RulesOutcome:
    """The rules for parsed `rules` arguments; flags that clash raise UsageError."""
    if request.namespace_label == request.deployment_label:
        raise UsageError("same_label", label=request.namespace_label)
    if request.output != "prometheusrule":
        for flag, given in (("--name", request.name), ("--object-label", request.object_label)):
            if given:
                raise UsageError("object_flags_need_prometheusrule", flag=flag)
    ruleset = build_rules(request.engine or ENGINES, request.namespace_label, request.deployment_label)
    recordings = recording_rules(ruleset.engines) if request.recording_rules else ()
    return RulesOutcome(ruleset=ruleset, output=request.output, runbook_url=request.runbook_url,
                        name=request.name or DEFAULT_OBJECT_NAME, object_labels=dict(request.object_label or ()),
                        recordings=recordings)
