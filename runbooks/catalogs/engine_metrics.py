"""Metric names by engine version, as the engines' own sources define them.

One entry per series gpumem reads where the name or its meaning changed across versions, with
the first and last version that export it and where it is defined (file:line@version; TGI
release tags, vLLM and SGLang PyPI releases; the versions read are those of
`runbooks.catalogs.engine_flags`, plus SGLang 0.5.2-0.5.10, 0.5.15, 0.5.19, 0.5.21 and vLLM
0.12-0.16 for the boundaries below). The metrics parser reads SGLang's retraction and pool
names from here, the alert rules SGLang's and TGI's (`names`, newest first); vLLM's entry
records why a failed-request count is unknown before 0.13.
"""

from __future__ import annotations

from dataclasses import dataclass

Version = tuple[int, int, int]


@dataclass(frozen=True)
class MetricEntry:
    """`name` as exported (Prometheus family name; a counter's samples add `_total`), what it
    stands for (`fact`), its `kind`, the versions that export it and where it is defined."""

    engine: str
    fact: str
    name: str
    kind: str
    since: Version
    until: Version | None
    source: str
    note: str = ""

    def exported_by(self, version: Version) -> bool:
        return self.since <= version and (self.until is None or version <= self.until)


METRICS: tuple[MetricEntry, ...] = (
    # SGLang: retracted requests
    MetricEntry("sglang", "retractions_total", "sglang:num_retracted_requests", "counter", (0, 5, 7), None,
                "sglang/srt/metrics/collector.py:385@0.5.7; observability/metrics_collector.py:559@0.5.23"),
    MetricEntry("sglang", "retractions_total", "sglang:total_retracted_reqs", "gauge", (0, 4, 10), (0, 5, 2),
                "sglang/srt/metrics/collector.py:224@0.4.10, :305@0.5.2",
                "a gauge holding the running total since start (scheduler.py:1705@0.5.1 adds each retraction)"),
    MetricEntry("sglang", "retractions_last_interval", "sglang:num_retracted_reqs", "gauge", (0, 5, 2), None,
                "sglang/srt/metrics/collector.py:311@0.5.2; observability/metrics_collector.py:553@0.5.23",
                "the retractions of the last logging interval only (scheduler_metrics_mixin.py:176@0.5.5 resets it)"),
    # SGLang: the KV pool's size in tokens
    MetricEntry("sglang", "kv_capacity_tokens", "sglang:max_total_num_tokens", "gauge", (0, 5, 6), None,
                "sglang/srt/metrics/collector.py:300@0.5.6; observability/metrics_collector.py:1290@0.5.23",
                "before 0.5.6 only the start-up log says it (max_total_num_tokens=N)"),
    # TGI: the KV token budget and the current batch's reservation
    MetricEntry("tgi", "kv_capacity_tokens", "tgi_batch_max_total_tokens", "gauge", (2, 3, 1), None,
                "backends/v3/src/lib.rs:103@v2.3.1, :138@v3.3.7",
                "set by the v3 backend only; before 2.3.1 (and on the v2 backend) only the router's log line "
                "'Setting max batch total tokens to N' says it"),
    MetricEntry("tgi", "kv_batch_tokens", "tgi_batch_current_max_tokens", "gauge", (0, 9, 4), None,
                "router/src/infer.rs:281@v0.9.4; backends/v3/src/backend.rs:171@v3.3.7"),
    # vLLM: requests that ended in an engine error
    MetricEntry("vllm", "finished_error", 'vllm:request_success{finished_reason="error"}', "counter", (0, 13, 0), None,
                "vllm/v1/engine/__init__.py:22@0.13.0 (FINISH_REASON_STRINGS gains \"error\"); :37@0.33.0",
                "V1 before 0.13 (\"stop\", \"length\", \"abort\", :21@0.11.0) and V0 have no error finish: "
                "failed requests are not known from this counter there"),
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
