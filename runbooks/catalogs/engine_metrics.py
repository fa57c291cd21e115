"""Every engine series gpumem reads, by engine version, as the engines' own sources define them.

One entry per series and fact: the name as exported, its kind, the first and last version that
export it and where it is defined (file:line at the first and the newest version read). The
metrics parser (`collectors.parsers.metrics`), the alert rules and dashboards and gpumem's own
live queries (`runbooks.alerts.engines`, `collectors.prometheus.promql`) and the autoscaler edit
read their names from here; `tests/test_engine_metrics.py` holds that no other module names an
engine series by hand.

Versions read (the `name=` of each prometheus_client metric; TGI's `metrics::*!` macros):

- vLLM: 0.2.7, 0.3.3, 0.4.1, 0.4.3, 0.5.0, 0.5.2, 0.5.4, 0.5.5, 0.6.3, 0.7.3, 0.8.5, 0.9.0-0.9.2,
  0.10.2, 0.11.0, 0.12.0, 0.13.0, 0.16.0, 0.20.0, 0.28.0, 0.33.0 (PyPI source distributions;
  `vllm/engine/metrics.py` for V0, `vllm/v1/metrics/loggers.py` for V1).
- SGLang: 0.3.0, 0.3.6, 0.4.0, 0.4.1, 0.4.5-0.4.10, 0.5.1-0.5.7, 0.5.10, 0.5.15, 0.5.19, 0.5.22,
  0.5.23 (`sglang/srt/metrics/collector.py`; `sglang/srt/observability/metrics_collector.py`
  after 0.5.7, by 0.5.10). 0.3.0 exports no metrics; they start between 0.3.0 and 0.3.6.
- TGI: every release tag from v0.9.0 to v3.3.7 (`router/src/*.rs`; `backends/v3/src/*.rs` from
  2.3.1).

As in `runbooks.catalogs.engine_flags`, a "since" of the oldest version read means "at least
since then", and a first version between two read releases is the newer of the two; an "until"
is the last version read that exports it.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbooks.catalogs.versions import Version, within

#: how each engine's exporter names a counter's samples: prometheus_client (vLLM, SGLang) adds
#: `_total` to the family name; TGI's metrics-exporter-prometheus (0.15.3 in Cargo.lock@v3.3.7)
#: prints the name it was given
COUNTER_SUFFIX: dict[str, str] = {"vllm": "_total", "sglang": "_total", "tgi": ""}


@dataclass(frozen=True)
class MetricEntry:
    """`name` as exported (the family name; a counter's samples take `COUNTER_SUFFIX`, a
    histogram's `_bucket`, `_count`, `_sum`), what it stands for (`fact`), its `kind`, the versions
    that export it and where it is defined."""

    engine: str
    fact: str
    name: str
    kind: str
    since: Version
    until: Version | None
    source: str
    note: str = ""

    def exported_by(self, version: Version) -> bool:
        return within(version, self.since, self.until)

    @property
    def family(self) -> str:
        """The name without a label matcher (`vllm:request_success{finished_reason="error"}`)."""
        return self.name.partition("{")[0]

    @property
    def sample(self) -> str:
        """The name a Prometheus server stores the samples under (histograms: the buckets)."""
        if self.kind == "counter":
            suffix = COUNTER_SUFFIX[self.engine]
            return self.family if self.family.endswith(suffix) else self.family + suffix
        if self.kind == "histogram":
            return self.family + "_bucket"
        return self.family


def _m(engine: str, fact: str, name: str, kind: str, since: Version, until: Version | None, source: str,
       note: str = "") -> MetricEntry:
    return MetricEntry(engine, fact, name, kind, since, until, source, note)


_V0 = "vllm/engine/metrics.py"
_V1 = "vllm/v1/metrics/loggers.py"
_SG = "sglang/srt/metrics/collector.py"
_SG23 = "sglang/srt/observability/metrics_collector.py"

METRICS: tuple[MetricEntry, ...] = (
    # ---------------------------------------------------------------------------- vLLM
    _m("vllm", "queue_waiting", "vllm:num_requests_waiting", "gauge", (0, 2, 7), None,
       f"{_V0}:18@0.2.7; {_V1}:538@0.33.0"),
    _m("vllm", "running", "vllm:num_requests_running", "gauge", (0, 2, 7), None,
       f"{_V0}:14@0.2.7; {_V1}:528@0.33.0"),
    _m("vllm", "kv_usage", "vllm:kv_cache_usage_perc", "gauge", (0, 9, 2), None,
       f"{_V1}:217@0.9.2, :620@0.33.0", "a fraction 0..1 despite the name"),
    _m("vllm", "kv_usage", "vllm:gpu_cache_usage_perc", "gauge", (0, 2, 7), (0, 11, 0),
       f"{_V0}:22@0.2.7; {_V1}:215@0.11.0",
       "V0's name, kept by V1 beside kv_cache_usage_perc through 0.11 with the same value"),
    _m("vllm", "v0_cpu_kv_usage", "vllm:cpu_cache_usage_perc", "gauge", (0, 2, 7), (0, 9, 0),
       f"{_V0}:25@0.2.7, :105@0.9.0", "V0 only: its swap space; V1 never exports it"),
    _m("vllm", "v0_swapped", "vllm:num_requests_swapped", "gauge", (0, 2, 7), (0, 9, 0),
       f"{_V0}:16@0.2.7, :87@0.9.0", "V0 only"),
    _m("vllm", "preemptions_total", "vllm:num_preemptions", "counter", (0, 4, 3), None,
       f"{_V0}:65@0.4.3 (named num_preemptions_total; the same samples); {_V1}:739@0.33.0"),
    _m("vllm", "requests_finished", "vllm:request_success", "counter", (0, 4, 3), None,
       f"{_V0}:126@0.4.3; {_V1}:809@0.33.0", "one series per finished_reason"),
    # requests that ended in an engine error
    _m("vllm", "finished_error", 'vllm:request_success{finished_reason="error"}', "counter", (0, 13, 0), None,
       "vllm/v1/engine/__init__.py:22@0.13.0 (FINISH_REASON_STRINGS gains \"error\"); :37@0.33.0",
       "V1 before 0.13 (\"stop\", \"length\", \"abort\", :21@0.11.0) and V0 have no error finish: "
       "failed requests are not known from this counter there"),
    _m("vllm", "ttft", "vllm:time_to_first_token_seconds", "histogram", (0, 3, 3), None,
       f"{_V0}:62@0.3.3; {_V1}:931@0.33.0"),
    _m("vllm", "prompt_tokens", "vllm:request_prompt_tokens", "histogram", (0, 4, 3), None,
       f"{_V0}:102@0.4.3; {_V1}:865@0.33.0"),
    _m("vllm", "generation_tokens", "vllm:request_generation_tokens", "histogram", (0, 4, 3), None,
       f"{_V0}:108@0.4.3; {_V1}:875@0.33.0"),
    _m("vllm", "cache_config", "vllm:cache_config_info", "gauge", (0, 3, 3), None,
       f"{_V0}:27@0.3.3 (an Info named vllm:cache_config: the same samples); {_V1}:1120@0.33.0",
       "labels: block_size, num_gpu_blocks, gpu_memory_utilization; kv_cache_size_tokens in newer builds"),
    # -------------------------------------------------------------------------- SGLang
    _m("sglang", "queue_waiting", "sglang:num_queue_reqs", "gauge", (0, 3, 6), None,
       f"{_SG}:69@0.3.6; {_SG23}:371@0.5.23", "one per dp_rank"),
    _m("sglang", "running", "sglang:num_running_reqs", "gauge", (0, 3, 6), None,
       f"{_SG}:41@0.3.6; {_SG23}:365@0.5.23"),
    _m("sglang", "kv_usage", "sglang:token_usage", "gauge", (0, 3, 6), None,
       f"{_SG}:55@0.3.6; {_SG23}:405@0.5.23", "a fraction 0..1"),
    _m("sglang", "kv_used_tokens", "sglang:num_used_tokens", "gauge", (0, 3, 6), None,
       f"{_SG}:48@0.3.6; {_SG23}:433@0.5.23"),
    # the KV pool's size in tokens
    _m("sglang", "kv_capacity_tokens", "sglang:max_total_num_tokens", "gauge", (0, 5, 6), None,
       f"{_SG}:300@0.5.6; {_SG23}:1290@0.5.23",
       "before 0.5.6 only the start-up log says it (max_total_num_tokens=N)"),
    # retracted requests
    _m("sglang", "retractions_total", "sglang:num_retracted_requests", "counter", (0, 5, 7), None,
       f"{_SG}:385@0.5.7; {_SG23}:559@0.5.23"),
    _m("sglang", "retractions_total", "sglang:total_retracted_reqs", "gauge", (0, 4, 10), (0, 5, 2),
       f"{_SG}:224@0.4.10, :305@0.5.2",
       "a gauge holding the running total since start (scheduler.py:1705@0.5.1 adds each retraction); "
       "0.5.3-0.5.6 keep no total at all, only the per-interval gauge"),
    _m("sglang", "retractions_last_interval", "sglang:num_retracted_reqs", "gauge", (0, 5, 2), None,
       f"{_SG}:311@0.5.2; {_SG23}:553@0.5.23",
       "the retractions of the last logging interval only (scheduler_metrics_mixin.py:176@0.5.5 resets it)"),
    _m("sglang", "requests_finished", "sglang:num_requests", "counter", (0, 4, 5), None,
       f"{_SG}:131@0.4.5; {_SG23}:1941@0.5.23"),
    _m("sglang", "aborted", "sglang:num_aborted_requests", "counter", (0, 4, 7), None,
       f"{_SG}:406@0.4.7; {_SG23}:1960@0.5.23"),
    _m("sglang", "disagg_bootstrap_failed", "sglang:num_bootstrap_failed_reqs", "counter", (0, 4, 7), None,
       f"{_SG}:252@0.4.7; {_SG23}:668@0.5.23", "prefill-decode disaggregation only"),
    _m("sglang", "disagg_transfer_failed", "sglang:num_transfer_failed_reqs", "counter", (0, 4, 7), None,
       f"{_SG}:258@0.4.7; {_SG23}:673@0.5.23", "prefill-decode disaggregation only"),
    _m("sglang", "ttft", "sglang:time_to_first_token_seconds", "histogram", (0, 3, 6), None,
       f"{_SG}:115@0.3.6; {_SG23}:2041@0.5.23"),
    _m("sglang", "prompt_tokens", "sglang:prompt_tokens_histogram", "histogram", (0, 4, 7), None,
       f"{_SG}:354@0.4.7; {_SG23}:1909@0.5.23", "only with --collect-tokens-histogram"),
    _m("sglang", "generation_tokens", "sglang:generation_tokens_histogram", "histogram", (0, 4, 7), None,
       f"{_SG}:381@0.4.7; {_SG23}:1925@0.5.23", "only with --collect-tokens-histogram"),
    # ---------------------------------------------------------------------------- TGI
    _m("tgi", "queue_waiting", "tgi_queue_size", "gauge", (0, 9, 0), None,
       "router/src/queue.rs:91@v0.9.0; backends/v3/src/queue.rs:143@v3.3.7"),
    _m("tgi", "running", "tgi_batch_current_size", "gauge", (0, 9, 0), None,
       "router/src/infer.rs:280@v0.9.0; backends/v3/src/backend.rs:170@v3.3.7"),
    # the KV token budget and the current batch's reservation
    _m("tgi", "kv_capacity_tokens", "tgi_batch_max_total_tokens", "gauge", (2, 3, 1), None,
       "backends/v3/src/lib.rs:103@v2.3.1, :138@v3.3.7",
       "set by the v3 backend only; before 2.3.1 (and on the v2 backend) only the router's log line "
       "'Setting max batch total tokens to N' says it"),
    _m("tgi", "kv_batch_tokens", "tgi_batch_current_max_tokens", "gauge", (0, 9, 0), None,
       "router/src/infer.rs:281@v0.9.0; backends/v3/src/backend.rs:171@v3.3.7"),
    _m("tgi", "requests_finished", "tgi_request_count", "counter", (0, 9, 0), None,
       "router/src/server.rs:153@v0.9.0, :203@v3.3.7", "every request, counted on arrival"),
    _m("tgi", "request_failure", "tgi_request_failure", "counter", (0, 9, 0), None,
       "router/src/infer.rs:102@v0.9.0; backends/v3/src/backend.rs:439@v3.3.7",
       "label err: overloaded (the queue refused it), validation, generation, incomplete, dropped"),
    _m("tgi", "prompt_tokens", "tgi_request_input_length", "histogram", (0, 9, 0), None,
       "router/src/validation.rs:107@v0.9.0, :192@v3.3.7"),
    _m("tgi", "generation_tokens", "tgi_request_generated_tokens", "histogram", (0, 9, 0), None,
       "router/src/server.rs:441@v0.9.0, :422@v3.3.7"),
)


def entries(engine: str, fact: str) -> tuple[MetricEntry, ...]:
    """The entries that carry `fact` for `engine`, newest first."""
    found = [m for m in METRICS if m.engine == engine and m.fact == fact]
    return tuple(sorted(found, key=lambda m: m.since, reverse=True))


def names(engine: str, fact: str) -> tuple[str, ...]:
    """The exported names of `fact`, newest first (a rename chain).

    >>> names("sglang", "retractions_total")
    ('sglang:num_retracted_requests', 'sglang:total_retracted_reqs')
    """
    return tuple(m.name for m in entries(engine, fact))


def name(engine: str, fact: str) -> str:
    """The newest exported name of `fact` (KeyError: the table has none, a mistake in the caller).

    >>> name("tgi", "queue_waiting")
    'tgi_queue_size'
    """
    found = names(engine, fact)
    if not found:
        raise KeyError(f"no {engine} metric for {fact!r} in runbooks.catalogs.engine_metrics")
    return found[0]


def samples(engine: str, *facts: str) -> str:
    """A name regex of the samples of `facts`, as a Prometheus server stores them: each fact's
    names newest first, counters with their suffix, histograms' buckets.

    >>> samples("vllm", "kv_usage")
    'vllm:kv_cache_usage_perc|vllm:gpu_cache_usage_perc'
    >>> samples("sglang", "aborted"), samples("tgi", "request_failure", "prompt_tokens")
    ('sglang:num_aborted_requests_total', 'tgi_request_failure|tgi_request_input_length_bucket')
    """
    out: list[str] = []
    for fact in facts:
        found = entries(engine, fact)
        if not found:
            raise KeyError(f"no {engine} metric for {fact!r} in runbooks.catalogs.engine_metrics")
        out += [m.sample for m in found if m.sample not in out]
    return "|".join(out)


def prefix(engine: str) -> str:
    """What every series name of `engine` starts with ("vllm:", "tgi_").

    >>> prefix("sglang"), prefix("tgi")
    ('sglang:', 'tgi_')
    """
    return PREFIX[engine]


#: the namespace each engine's series share
PREFIX: dict[str, str] = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_"}


def first_version(engine: str, fact: str) -> Version | None:
    """The oldest version that exports `fact` under any name (None: no entry)."""
    found = entries(engine, fact)
    return min(m.since for m in found) if found else None


#: what each engine calls putting a running request back for lack of KV cache, in its own
#: metrics and log lines (None: the engine never does; a request waits in its queue instead)
EVICTION: dict[str, str | None] = {
    # vllm:num_preemptions (vllm/v1/metrics/loggers.py), V0's "is preempted by PreemptionMode"
    "vllm": "preemption",
    # sglang:num_retracted_requests, "KV cache pool is full. Retract requests." (scheduler.py)
    "sglang": "retraction",
    # TGI admits a request only when its whole token budget fits (backends/v3/src/queue.rs):
    # it has no preemption; pressure shows in tgi_queue_size
    "tgi": None,
}


def eviction_term(engine: str | None) -> str:
    """The word `engine` uses for it, "none" where it never does; vLLM's where the engine is
    not known.

    >>> eviction_term("sglang"), eviction_term("tgi"), eviction_term(None)
    ('retraction', 'none', 'preemption')
    """
    name = (engine or "vllm").lower()
    return EVICTION.get(name, EVICTION["vllm"]) or "none"
