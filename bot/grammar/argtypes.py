"""argparse value types of the verbs: numbers with bounds, names and labels, and messages that say which.

Every numeric flag uses one of these, so `inf`, `nan`, `1e308` or a negative value is a usage
error naming the flag (exit 2; in Slack an ephemeral reply), never a traceback or a
"nan GiB" budget in a channel.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runbooks.alerts.promql import is_label_name


def whole_number(low: int, high: int | None = None, what: str = "a whole number") -> Callable[[str], int]:
    """A type for `add_argument(type=...)`: an int within [low, high].

    >>> whole_number(1)("3")
    3
    """

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        if value < low or (high is not None and value > high):
            bound = f"between {low} and {high}" if high is not None else f"at least {low}"
            raise argparse.ArgumentTypeError(f"must be {bound}")
        return value

    return parse


def seconds(high: float) -> Callable[[str], float]:
    """A type for a duration in seconds within [0, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if not math.isfinite(value) or not 0 <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between 0 and {high:g} seconds")
        return value

    return parse


def number(low: float, high: float, what: str = "a number", *, above_low: bool = False) -> Callable[[str], float]:
    """A type for a finite float within [low, high] (or (low, high] with `above_low`).

    >>> fraction("0.9")
    0.9
    >>> fraction("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be above 0 and at most 1
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
        below = value <= low if above_low else value < low
        if not math.isfinite(value) or below or value > high:
            bound = f"above {low:g}" if above_low else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound} and at most {high:g}")
        return value

    return parse


port = whole_number(0, 65535, "a port number")
#: a share of memory: vLLM --gpu-memory-utilization, SGLang --mem-fraction-static, TGI --cuda-memory-fraction
fraction = number(0, 1, "a fraction", above_low=True)
#: GiB of one GPU (the largest cards hold under 300 GiB; 4 TiB leaves room without allowing nonsense)
gib = number(0, 4096, "a number of GiB", above_low=True)
#: tokens of context or per step (10M covers the longest contexts models support today)
tokens = whole_number(1, 100_000_000, "a whole number of tokens")


def since(text: str):
    """A point in the past: a duration back from now (`90m`, `12h`, `7d`) or an ISO 8601 time.
    Returns a timedelta or an aware datetime.

    >>> since("12h")
    datetime.timedelta(seconds=43200)
    >>> since("2026-12-01T02:14:00+08:00").isoformat()
    '2026-12-01T02:14:00+08:00'
    """
    found = re.fullmatch(r"(\d{1,6})([smhd])", text.strip())
    if found:
        unit = {"s": 1, "m": 60, "h": 3600, "d": 86400}[found.group(2)]
        return timedelta(seconds=int(found.group(1)) * unit)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a duration (90m, 12h, 7d) or an ISO 8601 time: {text!r}") from None
    return at if at.tzinfo else at.replace(tzinfo=UTC)


# ----------------------------------------------------------------------------- gpumem rules

OUTPUTS = ("prometheusrule", "rules")
#: each rule links `<this>#<its alert name, lower case>`: the README's section on it
DEFAULT_RUNBOOK_URL = "README.md"

_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = re.compile(rf"{_DNS_LABEL}(\.{_DNS_LABEL})*")
_LABEL_PART = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?")
_URL_REFUSED = re.compile(r"[\s{}#\x00-\x1f\x7f]")


def engine_list(text: str) -> tuple[str, ...]:
    """`--engine vllm,sglang`: known engines, in the catalog's order, each once.

    >>> engine_list("tgi, vllm,vllm")
    ('vllm', 'tgi')
    """
    # lazy: the alert engines' table brings the metric catalog (about 10 ms with -X importtime),
    # which only `rules --engine` needs, not every command line's parse
    from runbooks.alerts.engines import ENGINES

    names = [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in ENGINES]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown engine {unknown[0]!r}; give one or more of {', '.join(ENGINES)}, comma-separated")
    return tuple(e for e in ENGINES if e in names)


def label_name(text: str) -> str:
    """`--namespace-label` / `--deployment-label`: a label name an alert can carry for the webhook."""
    # lazy: runbooks.alerts.rules brings the evidence model (33 ms measured with -X importtime),
    # which `gpumem --help` and every other verb's parse would pay otherwise
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
    """`--object-label KEY=VALUE`: a Kubernetes label for the PrometheusRule object.

    >>> object_label("release=kube-prometheus-stack")
    ('release', 'kube-prometheus-stack')
    """
    key, sep, value = text.partition("=")
    prefix, slash, name = key.rpartition("/")
    ok = (sep and name and len(name) <= 63 and _LABEL_PART.fullmatch(name)
          and (not slash or (len(prefix) <= 253 and _SUBDOMAIN.fullmatch(prefix)))
          and len(value) <= 63 and _LABEL_PART.fullmatch(value))
    if not ok:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a Kubernetes label KEY=VALUE (e.g. release=kube-prometheus-stack)")
    return key, value


# ----------------------------------------------------------------------------- gpumem fleet

def top_count(text: str) -> int:
    """`--top N`: a whole number of services, at least 1.

    >>> top_count("5")
    5
    """
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number of services, at least 1")
    return n


def namespace_name(text: str) -> str:
    """`--namespace NS`: a Kubernetes namespace name (a DNS label)."""
    if len(text) > 63 or not re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a namespace name: lower-case letters, digits and '-'")
    return text


def bundle_folder(text: str) -> str:
    """An evidence bundle's folder; a file (one of the bundle's own, most often) is refused with
    the folder to pass instead. A path that does not exist is left to the use case to word.

    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp()); (d / "logs.txt").write_text("x")
    1
    >>> bundle_folder(str(d)) == str(d)
    True
    >>> try:
    ...     bundle_folder(str(d / "logs.txt"))
    ... except argparse.ArgumentTypeError as e:
    ...     print(str(e).replace(str(d), "D"))
    D/logs.txt is a file; --bundle wants the folder holding the bundle's files (nvidia-smi.txt, metrics.txt, deployment.yaml, logs.txt, ...): --bundle D
    """

    path = Path(text)
    if path.is_file():
        raise argparse.ArgumentTypeError(
            f"{text} is a file; --bundle wants the folder holding the bundle's files (nvidia-smi.txt, metrics.txt, "
            f"deployment.yaml, logs.txt, ...): --bundle {path.parent}")
    return text
