"""PromQL pieces the alert rules are built from: durations, selectors, the workload labels.

Alerts route back to gpumem per workload, so every rule ends `by (<namespace>, <deployment>)`
with the label names the webhook reads. Series carry the pod, not its Deployment, so the
Deployment's name is taken from the pod's name, the way Kubernetes builds it:
`<deployment>-<pod-template-hash>-<5 random>` (the hash is a uint32 in decimal, each digit
mapped into `4-9bcdf`; the suffix is drawn from Kubernetes' 27 "safe" characters), or
`<statefulset>-<ordinal>`; any other pod keeps its own name.

>>> duration(600), duration(90), duration(7200)
('10m', '90s', '2h')
>>> le_at_most(2048)
'(0|[1-9][0-9]{0,2}|1[0-9]{3}|20[0-3][0-9]|204[0-7])([.][0-9]+)?|2048([.]0+)?'
"""

from __future__ import annotations

import re
from collections.abc import Callable

#: characters of a pod-template-hash (decimal digits 0-9 mapped by SafeEncodeString)
HASH_CHARS = "4-9bcdf"
#: Kubernetes' generateName suffix alphabet "bcdfghjklmnpqrstvwxz2456789" (util/rand), as ranges
SUFFIX_CHARS = "b-df-hj-np-tv-xz24-9"
#: the pod name's Deployment, else its StatefulSet, else the pod itself: RE2 (like Go's regexp)
#: takes the first alternative that matches, and exactly one group captures
WORKLOAD_RE = f"(.+)-[{HASH_CHARS}]{{1,10}}-[{SUFFIX_CHARS}]{{5}}|(.+)-[0-9]+|(.+)"

_LABEL_RE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def is_label_name(text: str) -> bool:
    """A Prometheus label name that a rule may set (`__` names are reserved to Prometheus).

    >>> is_label_name("namespace"), is_label_name("app.kubernetes.io/name"), is_label_name("__name__")
    (True, False, False)
    """
    return bool(_LABEL_RE.fullmatch(text)) and not text.startswith("__")


def duration(seconds: int) -> str:
    """A Prometheus duration: the largest whole unit (h, m, s)."""
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds and seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def string(text: str) -> str:
    """A double-quoted PromQL string literal.

    >>> string('a"b')
    '"a\\\\"b"'
    """
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def le_at_most(limit: int) -> str:
    """An RE2 pattern for `le` values (decimal, as engines and Prometheus write them) <= `limit`.

    Cumulative bucket counts grow with `le`, so the largest count among these buckets is the
    count at the largest bound at or below `limit`, whatever bounds the engine chose.
    """
    digits = str(limit)
    below = ["0"]
    if len(digits) > 1:
        below.append(f"[1-9][0-9]{{0,{len(digits) - 2}}}" if len(digits) > 2 else "[1-9]")
    for i, d in enumerate(digits):
        low = 1 if i == 0 else 0
        if int(d) <= low:
            continue
        rest = len(digits) - i - 1
        top = int(d) - 1
        cls = str(low) if top == low else f"[{low}-{top}]"
        tail = f"[0-9]{{{rest}}}" if rest > 1 else ("[0-9]" if rest == 1 else "")
        below.append(f"{digits[:i]}{cls}{tail}")
    return f"({'|'.join(below)})([.][0-9]+)?|{digits}([.]0+)?"


_RE2_SPECIAL = set("\\.+*?()|[]{}^$")


def re2_escape(text: str) -> str:
    """Escape RE2 metacharacters (Prometheus regexes are RE2, fully anchored).

    >>> re2_escape("team.a")
    'team\\\\.a'
    """
    return "".join("\\" + ch if ch in _RE2_SPECIAL else ch for ch in text)


def selector(names: str, *matchers: str) -> str:
    """`{__name__=~"names", matchers...}`: one or more metric names (a regex) and more matchers."""
    return "{" + ",".join((f"__name__=~{string(names)}", *matchers)) + "}"


def copy_label(expr: str, src: str, dst: str, regex: str = "(.+)") -> str:
    """`label_replace` of `src` into `dst`; series whose `src` does not match keep `dst` as it was."""
    return f"label_replace({expr}, {string(dst)}, \"$1\", {string(src)}, {string(regex)})"


#: the two ways a workload's pod reaches Prometheus through an exporter (DCGM, kube-state-metrics):
#: as `namespace`/`pod` (scraped with honorLabels), or as `exported_namespace`/`exported_pod`
#: (without it, when `namespace`/`pod`/`container` name the exporter's own pod)
DIRECT = ('namespace!=""', 'pod!=""', 'exported_pod=""')
EXPORTED = ('exported_namespace!=""', 'exported_pod!=""')


def both(build: Callable[[tuple[str, ...]], str]) -> str:
    """`build(matchers)` for the direct and for the exported variant, joined with `or`; the
    exported variant's `exported_pod`/`_namespace`/`_container` copied into `pod`/`namespace`/`container`."""
    exported = build(EXPORTED)
    for label in ("pod", "namespace", "container"):
        exported = copy_label(exported, f"exported_{label}", label)
    return f"({build(DIRECT)} or {exported})"


def workload(expr: str, namespace_label: str, deployment_label: str) -> str:
    """`expr` (series with `namespace` and `pod`) with the alert's namespace and deployment labels.

    >>> import re
    >>> [''.join(g or '' for g in re.fullmatch(WORKLOAD_RE, pod).groups())
    ...  for pod in ("qwen-7b-6d4f9c8b7d-x2k9p", "web-7d9c8b5f4-24567", "llama-0", "train-v2-x7k2p")]
    ['qwen-7b', 'web', 'llama', 'train-v2-x7k2p']
    """
    out = expr
    if namespace_label != "namespace":
        out = copy_label(out, "namespace", namespace_label, "(.*)")
    return f'label_replace({out}, {string(deployment_label)}, "$1$2$3", "pod", {string(WORKLOAD_RE)})'
