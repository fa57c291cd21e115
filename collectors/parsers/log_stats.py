"""The engines' periodic stats lines as StatsSample, and the running peak over a log.

vLLM prints a percentage ("GPU KV cache usage: 87.5%"), SGLang a ratio ("token usage: 0.87");
both become `kv_cache_usage_ratio` (0..1). V0 says "Pending", V1 "Waiting", SGLang "#queue-req".

>>> parse_stats("Running: 12 reqs, Swapped: 0 reqs, Pending: 3 reqs, GPU KV cache usage: 87.5%, CPU ...")
StatsSample(at=None, running=12.0, waiting=3.0, kv_cache_usage_ratio=0.875, preemptions=None)
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import datetime

from runbooks.model.evidence import StatsSample

_NUM = r"(\d{1,12}(?:\.\d{1,12})?)"

_VLLM_RUNNING = re.compile(r"Running: " + _NUM + r" reqs", re.ASCII)
_VLLM_WAITING = re.compile(r"(?:Pending|Waiting): " + _NUM + r" reqs", re.ASCII)
_VLLM_USAGE = re.compile(r"GPU KV cache usage: " + _NUM + r"\s*%", re.ASCII)
_VLLM_PREEMPT = re.compile(r"Preemptions: " + _NUM, re.ASCII)

_SGL_RUNNING = re.compile(r"#running-req: " + _NUM, re.ASCII)
_SGL_QUEUE = re.compile(r"#queue-req: " + _NUM, re.ASCII)
# hybrid models print "full token usage" first, then "swa token usage": the first is the full pool
_SGL_USAGE = re.compile(r"token usage: " + _NUM, re.ASCII)


def _num(pattern: re.Pattern[str], text: str) -> float | None:
    m = pattern.search(text)
    return float(m.group(1)) if m else None


def parse_stats(text: str, at: datetime | None = None) -> StatsSample | None:
    """The stats sample a log message carries, or None when it is no stats line."""
    if "GPU KV cache usage:" in text:
        usage = _num(_VLLM_USAGE, text)
        return StatsSample(
            at=at,
            running=_num(_VLLM_RUNNING, text),
            waiting=_num(_VLLM_WAITING, text),
            kv_cache_usage_ratio=usage / 100.0 if usage is not None else None,
            preemptions=_num(_VLLM_PREEMPT, text),
        )
    if "#running-req:" in text and ("batch" in text or "token usage" in text):
        return StatsSample(
            at=at,
            running=_num(_SGL_RUNNING, text),
            waiting=_num(_SGL_QUEUE, text),
            kv_cache_usage_ratio=_num(_SGL_USAGE, text),
        )
    return None


def _max(a: float | None, b: float | None) -> float | None:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def merge_peak(peak: StatsSample | None, sample: StatsSample) -> StatsSample:
    """Each field its own maximum; `at` is when the highest KV usage (else queue) was seen."""
    if peak is None:
        return sample
    higher_usage = sample.kv_cache_usage_ratio is not None and (
        peak.kv_cache_usage_ratio is None or sample.kv_cache_usage_ratio > peak.kv_cache_usage_ratio
    )
    longer_queue = (
        peak.kv_cache_usage_ratio is None
        and sample.waiting is not None
        and (peak.waiting is None or sample.waiting > peak.waiting)
    )
    at = sample.at if higher_usage or longer_queue else peak.at
    return replace(
        peak,
        at=at,
        running=_max(peak.running, sample.running),
        waiting=_max(peak.waiting, sample.waiting),
        kv_cache_usage_ratio=_max(peak.kv_cache_usage_ratio, sample.kv_cache_usage_ratio),
        preemptions=_max(peak.preemptions, sample.preemptions),
    )
