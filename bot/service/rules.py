"""The rules use case (`gpumem rules`): the runbook's alerts for the chosen engines, with the
labels gpumem's webhook reads, as a plain rule file or a PrometheusRule object.

The argparse types below refuse a bad value with a message naming the flag (exit 2, never a
traceback); choices that only clash together raise UsageError, worded from
`rules_cli.error.<code>`.

>>> engine_list("tgi, vllm,vllm")
('vllm', 'tgi')
>>> object_label("release=kube-prometheus-stack")
('release', 'kube-prometheus-stack')
"""

from __future__ import annotations

import argparse
import re
from typing import TYPE_CHECKING

from runbooks.alerts.engines import ENGINES
from runbooks.alerts.promql import is_label_name
from runbooks.model.errors import UsageError

if TYPE_CHECKING:
    from bot.render.rules import RulesOutcome

OUTPUTS = ("prometheusrule", "rules")
#: each rule links `<this>#<its alert name, lower case>`: the README's section on it
DEFAULT_RUNBOOK_URL = "README.md"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_PART = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_URL_REFUSED = re.compile(r"[\s{}#\x00-\x1f\x7f]")


def engine_list(text: str) -> tuple[str, ...]:
    """`--engine vllm,sglang`: known engines, in the catalog's order, each once."""
    names = [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown engine {unknown[0]!r}; give one or more of {', '.join(ENGINES)}, comma-separated")
    return tuple(e for e in ENGINES if e in names)


def label_name(text: str) -> str:
    """`--namespace-label` / `--deployment-label`: a label name an alert can carry for the webhook."""
    from runbooks.alerts.rules import RESERVED_LABELS

    if not is_label_name(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Prometheus label name: letters, digits and _, not starting with a digit or __")
    if text in RESERVED_LABELS:
        raise argparse.ArgumentTypeError(
            f"{text!r} is a label the rules read or set themselves ({', '.join(sorted(RESERVED_LABELS))})")
    return text


def runbook_url(text: str) -> str:
    """`--runbook-url`: where gpumem's README is published, without a #fragment (each rule adds its own)."""
    if not text or _URL_REFUSED.search(text):
        raise argparse.ArgumentTypeError(
            f"{text!r}: give the README's address without spaces, braces or a #fragment "
            "(each rule adds #<its alert name>)")
    return text


def object_name(text: str) -> str:
    """`--name`: the PrometheusRule's metadata.name (a DNS subdomain, as Kubernetes requires)."""
    if len(text) > 253 or not _SUBDOMAIN.fullmatch(text):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kubernetes object name: lower-case letters, digits, '-' and '.'")
    return text


def object_label(text: str) -> tuple[str, str]:
    """`--object-label KEY=VALUE`: a Kubernetes label for the PrometheusRule object."""
    key, sep, value = text.partition("=")
    prefix, slash, name = key.rpartition("/")
    ok = (sep and name and len(name) <= 63 and _LABEL_PART.fullmatch(name)
          and (not slash or (len(prefix) <= 253 and _SUBDOMAIN.fullmatch(prefix)))
          and len(value) <= 63 and _LABEL_PART.fullmatch(value))
    if not ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kubernetes label KEY=VALUE (e.g. release=kube-prometheus-stack)")
    return key, value


def run_rules(args: argparse.Namespace) -> RulesOutcome:
    """The rules for parsed `rules` arguments; flags that clash raise UsageError."""
    from bot.render.rules import DEFAULT_OBJECT_NAME, RulesOutcome
    from runbooks.alerts.rules import build_rules

    if args.namespace_label == args.deployment_label:
        raise UsageError("same_label", label=args.namespace_label)
    if args.output != "prometheusrule":
        for flag, given in (("--name", args.name), ("--object-label", args.object_label)):
            if given:
                raise UsageError("object_flags_need_prometheusrule", flag=flag)
    ruleset = build_rules(args.engine or ENGINES, args.namespace_label, args.deployment_label)
    return RulesOutcome(ruleset=ruleset, output=args.output, runbook_url=args.runbook_url,
                        name=args.name or DEFAULT_OBJECT_NAME, object_labels=dict(args.object_label or ()))
