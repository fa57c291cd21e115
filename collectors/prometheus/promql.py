"""The PromQL that gpumem sends: one query per reading, whatever the number of pods.

Pods are matched with one anchored regex (`pod=~"a|b|c"`, names escaped). Series reach
Prometheus with the workload's pod in either of two labels:
- `pod` / `namespace` when the target is the server itself, or the exporter is scraped with
  `honorLabels: true`;
- `exported_pod` / `exported_namespace` when a DCGM exporter or kube-state-metrics is scraped
  without it (then `pod` / `namespace` name the exporter's own pod).
Each selector is written for both, joined with `or`, and the second is relabelled to `pod` /
`namespace` where the query groups by pod. DCGM's `hostname` / `uuid` (newer exporters, or
`--use-old-namespace`) are copied into `Hostname` / `UUID` the same way.

>>> pod_regex(["vllm-0", "vllm.1"])
'vllm-0|vllm\\\\.1'
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from runbooks.alerts.engines import ENGINES, EXPORTERS, SERIES
from runbooks.alerts.promql import re2_escape
from runbooks.catalogs.engine_metrics import eviction_term, names


def _across(field: str) -> str:
    """One name regex of `field` of every engine that exports it (`runbooks.alerts.engines.SERIES`,
    the one place the engines' series are named)."""
    return "|".join(value for e in ENGINES if (value := getattr(SERIES[e], field)))


#: DCGM framebuffer series, MiB (the 1.x `-o` names too)
FB_NAMES = "|".join((EXPORTERS.fb_used, EXPORTERS.fb_free, EXPORTERS.fb_reserved))
RESTART_NAMES = "|".join((EXPORTERS.restarts, EXPORTERS.terminated_reason, EXPORTERS.terminated_at))
QUEUE_NAMES = _across("queue")
# vLLM V1 (0.9+), V0 and early V1, SGLang; all fractions 0..1
USAGE_NAMES = _across("kv_usage")
# TGI has no usage gauge: the current batch's token reservation against the KV token budget
TGI_USAGE_NAME = "tgi_kv_budget_ratio"
TGI_BATCH_TOKENS, TGI_BUDGET_TOKENS = SERIES["tgi"].kv_ratio or ("", "")
PREEMPTION_NAMES = _across("preemptions")
TTFT_NAMES = _across("ttft_buckets")
PROMPT_NAMES = _across("prompt_buckets")
GENERATION_NAMES = _across("generation_buckets")
#: labels that identify a GPU (or a MIG slice) in DCGM series, after relabelling
DEVICE_LABELS = ("Hostname", "UUID", "gpu", "GPU_I_PROFILE", "GPU_I_ID")


def pod_regex(pods: Sequence[str]) -> str:
    """One alternation matching exactly these pod names (sorted, deduplicated)."""
    return "|".join(re2_escape(p) for p in sorted(set(pods)))


def promql_string(text: str) -> str:
    """A double-quoted PromQL string literal.

    >>> promql_string('a\\\\.b"c')
    '"a\\\\\\\\.b\\\\"c"'
    """
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f'"{escaped}"'


class Selectors:
    """Builds the two-variant selectors for one namespace and one set of pods."""

    def __init__(self, namespace: str, pods: Sequence[str]):
        self._ns = promql_string(namespace)
        self._pods = promql_string(pod_regex(pods))

    def both(self, names: str, wrap: Callable[[str], str] = lambda s: s, *, extra: str = "",
             relabel: bool = False) -> str:
        """`wrap(selector)` for the `pod` and the `exported_pod` variant, joined with `or`.

        `names` is a regex of metric names; `extra` adds matchers ('reason=~"|OOMKilled"');
        `relabel` copies exported_pod/exported_namespace into pod/namespace.
        """
        more = f",{extra}" if extra else ""
        name = f"__name__=~{promql_string(names)}"
        direct = wrap(f"{{{name}{more},namespace={self._ns},pod=~{self._pods}}}")
        exported = wrap(f"{{{name}{more},exported_namespace={self._ns},exported_pod=~{self._pods}}}")
        if relabel:
            exported = _copy_label(_copy_label(exported, "exported_pod", "pod"), "exported_namespace", "namespace")
        return f"({direct} or {exported})"


def _copy_label(expr: str, src: str, dst: str) -> str:
    # the regex "(.+)" leaves series without `src` untouched
    return f'label_replace({expr}, "{dst}", "$1", "{src}", "(.+)")'


def _duration(seconds: float) -> str:
    return f"{max(1, round(seconds))}s"


def memory_query(sel: Selectors) -> str:
    """DCGM used / free / reserved MiB per device and pod; `__name__` kept to tell them apart."""
    fb = sel.both(FB_NAMES, relabel=True)
    fb = _copy_label(_copy_label(fb, "hostname", "Hostname"), "uuid", "UUID")
    # max, not sum: two scrapes of the same exporter (HA Prometheus pairs, two monitors)
    # give duplicate series that must count once
    return f"max by (__name__, {', '.join(DEVICE_LABELS)}, pod) ({fb})"


def restarts_query(sel: Selectors) -> str:
    """kube-state-metrics restart counters, OOMKilled last-termination flags, termination times."""
    series = sel.both(RESTART_NAMES, extra='reason=~"|OOMKilled"', relabel=True)
    return f"max by (__name__, pod, container, reason) ({series})"


def queue_query(sel: Selectors) -> str:
    return f"sum by (__name__) ({sel.both(QUEUE_NAMES)})"


def usage_query(sel: Selectors) -> str:
    engines = f"max by (__name__) ({sel.both(USAGE_NAMES)})"
    tgi = f"{sel.both(TGI_BATCH_TOKENS)} / {sel.both(TGI_BUDGET_TOKENS)}"
    tgi = f'label_replace(max({tgi}), "__name__", "{TGI_USAGE_NAME}", "", "")'
    return f"{engines} or {tgi}"


def preemption_query(sel: Selectors, rate_window_s: float) -> str:
    win = _duration(rate_window_s)
    return f"sum({sel.both(PREEMPTION_NAMES, lambda s: f'rate({s}[{win}])')})"


def ttft_p99_query(sel: Selectors, rate_window_s: float) -> str:
    win = _duration(rate_window_s)
    buckets = sel.both(TTFT_NAMES, lambda s: f"rate({s}[{win}])")
    return f"histogram_quantile(0.99, sum by (le) ({buckets}))"


def lengths_query(sel: Selectors, part_s: float) -> str:
    """Prompt and generation length histograms over the last `part_s`, tagged hist=prompt|generation."""
    win = _duration(part_s)

    def part(names: str, tag: str) -> str:
        inc = sel.both(names, lambda s: f"increase({s}[{win}])")
        return f'label_replace(sum by (le) ({inc}), "hist", "{tag}", "", "")'

    return f"{part(PROMPT_NAMES, 'prompt')} or {part(GENERATION_NAMES, 'generation')}"


# ----------------------------------------------------------------------------- per service (handover, watch)

#: the grouping of a per-service query: one series per (namespace, deployment)
BY_SERVICE = "by (namespace, deployment)"


def service_selector(targets: Sequence[str]) -> tuple[list[tuple[str, str]], Callable[..., str]]:
    """The (namespace, deployment) pairs of `targets` (NAMESPACE/NAME), and `sel(names_re,
    extra, wrap)`: a selector of those metrics on the services' pods (labelled directly or
    through a gateway's `exported_*` labels), each series given a `deployment` label.

    >>> pairs, sel = service_selector(["llm/vllm"])
    >>> pairs, sel("up").startswith('label_replace(({__name__=~"up",namespace=~"llm"')
    ([('llm', 'vllm')], True)
    """
    pairs = sorted({tuple(t.split("/", 1)) for t in targets})
    namespaces = sorted({ns for ns, _ in pairs})
    names = sorted({n for _, n in pairs}, key=lambda n: (-len(n), n))
    ns_re = promql_string("|".join(re2_escape(n) for n in namespaces))
    dep = "(" + "|".join(re2_escape(n) for n in names) + ")"
    # Deployment pods (NAME-HASH-SUFFIX) and StatefulSet pods (NAME-N)
    pod_re = promql_string(f"{dep}-(?:[a-z0-9]+-)?[a-z0-9]+")

    def sel(names_re: str, extra: str = "", wrap: Callable[[str], str] = lambda s: s) -> str:
        more = f",{extra}" if extra else ""
        name = f"__name__=~{promql_string(names_re)}"
        direct = wrap(f"{{{name}{more},namespace=~{ns_re},pod=~{pod_re}}}")
        exported = wrap(f"{{{name}{more},exported_namespace=~{ns_re},exported_pod=~{pod_re}}}")
        exported = (f'label_replace(label_replace({exported}, "pod", "$1", "exported_pod", "(.+)"), '
                    f'"namespace", "$1", "exported_namespace", "(.+)")')
        both = f"({direct} or {exported})"
        return f'label_replace({both}, "deployment", "$1", "pod", {pod_re})'

    return pairs, sel  # type: ignore[return-value]


def service_usage_query(sel: Callable[..., str]) -> str:
    """Each service's KV cache usage (the most used engine's)."""
    return f"max {BY_SERVICE} ({sel(USAGE_NAMES)})"


#: the labels a per-pod reading keeps before `sel` relabels it (series of several names would
#: otherwise collide once a function drops their name)
_POD_KEYS = "by (namespace, pod, exported_namespace, exported_pod)"
#: the label `eviction_query` adds: the engine's own word for evicting a running request
EVICTION_LABEL = "eviction"


def eviction_query(sel: Callable[..., str], window: str) -> str:
    """Each service's requests put back for lack of KV cache over `window`, one series per
    engine word (label `eviction`: vLLM's "preemption", SGLang's "retraction"; "none", at 0,
    for a service whose engine never does it, TGI), so a reading says whose counter it is.
    The names come from `runbooks.alerts.engines`: the counters, and SGLang 0.4.10-0.5.1's
    running-total gauge, which `increase` reads as a counter."""
    parts = []
    for engine in ENGINES:
        series = SERIES[engine]
        term = eviction_term(engine)
        if series.preemptions is None:
            inner = f"sum {BY_SERVICE} ({sel(series.presence, wrap=lambda s: f'0 * count {_POD_KEYS} ({s})')})"
        else:
            names_re = "|".join([series.preemptions, *names(engine, "retractions_total")[1:]])
            inner = f"sum {BY_SERVICE} ({sel(names_re, wrap=lambda s: f'sum {_POD_KEYS} (increase({s}[{window}]))')})"
        parts.append(f'label_replace({inner}, "{EVICTION_LABEL}", "{term}", "", "")')
    return " or ".join(parts)


def eviction_reading(series: Any) -> tuple[float, str | None] | None:
    """One service's `eviction_query` series as (count, engine word): the sum, and the word when
    every series carrying a count says the same one (None: engines of both words); None: no series."""
    found = [(s.points[-1][1], s.labels.get(EVICTION_LABEL)) for s in series if s.points]
    if not found:
        return None
    terms = {t for v, t in found if t != "none"} or {t for _, t in found}
    return sum(v for v, _ in found), (terms.pop() if len(terms) == 1 else None)


def service_state_queries(sel: Callable[..., str], window_s: float) -> dict[str, str]:
    """The services' state over a window of `window_s` (at least a minute) ending at the query
    time: KV usage and queue, peak and now; preemptions, OOM kills and restarts in the window."""
    window = f"{max(60, round(window_s))}s"
    usage = service_usage_query(sel)
    queue = f"sum {BY_SERVICE} ({sel(QUEUE_NAMES)})"
    restarts = sel(EXPORTERS.restarts, wrap=lambda s: f"increase({s}[{window}])")
    # the pods whose last termination was an OOM kill at any time in the window (a pod that
    # restarted since for another reason still counts its OOM restarts)
    oom_flag = sel(EXPORTERS.terminated_reason, extra='reason="OOMKilled"',
                   wrap=lambda s: f"max_over_time({s}[{window}])")
    return {
        "kv_usage_peak": f"max_over_time({usage}[{window}:15s])",
        "kv_usage_now": usage,
        "queue_peak": f"max_over_time({queue}[{window}:15s])",
        "queue_now": queue,
        "preemptions": eviction_query(sel, window),
        "oom_kills": (f"sum {BY_SERVICE} (max by (namespace, deployment, pod) ({restarts}) and on (namespace, pod) "
                      f"max by (namespace, pod) ({oom_flag}))"),
        "restarts": f"sum {BY_SERVICE} ({restarts})",
    }


def symptom_queries(sel: Callable[..., str], preemption_window_s: int) -> dict[str, str]:
    """What the watch after a write looks at: KV usage (max), queue (sum), and preemptions over
    the last `preemption_window_s`."""
    window = f"{preemption_window_s}s"
    return {
        "kv_usage": service_usage_query(sel),
        "queue": f"sum {BY_SERVICE} ({sel(QUEUE_NAMES)})",
        "preemptions": eviction_query(sel, window),
    }
