"""What vLLM, SGLang and TGI print about memory at start-up, read line by line into StartupMemory.

Every engine version words it differently (reference/memory-model.md §1.4, 1b, 1c); each rule
below is one printed line. A value printed twice (a restart, or one line per TP rank) keeps
the last one read. "GB" in vLLM and SGLang logs is 2^30 bytes, as is GiB.

>>> r = StartupReader()
>>> r.feed("INFO 05-10 12:00:01 worker.py:241] # GPU blocks: 6749, # CPU blocks: 4681")
>>> r.result().gpu_blocks
6749
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from runbooks.model.evidence import StartupMemory

_F = r"(\d{1,7}(?:\.\d{1,12})?)"
_GIB = _F + r"\s*Gi?B"
_INT = r"(\d{1,3}(?:,\d{3})+|\d{1,15})"

ERROR_CHARS = 300


def _int(text: str) -> int:
    return int(text.replace(",", ""))


Setter = Callable[[re.Match[str], dict[str, Any]], None]


def _put(**fields: tuple[int, Callable[[str], Any]]) -> Setter:
    """A setter that stores group N of the match, converted, under each field name."""

    def setter(m: re.Match[str], state: dict[str, Any]) -> None:
        for name, (group, convert) in fields.items():
            value = m.group(group)
            if value is not None:
                _store(state, name, convert(value))

    return setter


def _store(state: dict[str, Any], name: str, value: Any) -> None:
    old = state.get(name)
    # the same figure printed again with fewer decimals ("took 14.9888 GB", later "take 14.99GiB")
    # keeps the finer one; a figure that really changed (a restart) replaces it
    if (
        isinstance(old, float)
        and isinstance(value, float)
        and abs(old - value) <= 0.005 + 1e-9
        and len(repr(old)) >= len(repr(value))
    ):
        return
    state[name] = value


def _first_of(name: str) -> Setter:
    """A setter that keeps the first non-empty group as a float, unless the field is already set."""

    def setter(m: re.Match[str], state: dict[str, Any]) -> None:
        value = next((g for g in m.groups() if g is not None), None)
        if value is not None and name not in state:
            state[name] = float(value)

    return setter


def _kv_sum(m: re.Match[str], state: dict[str, Any]) -> None:
    _store(state, "kv_cache_gib", round(float(m.group(1)) + float(m.group(2)), 6))


def _bytes_gib(name: str) -> Setter:
    """A setter that stores group 1, a byte count, as GiB under `name`."""

    def setter(m: re.Match[str], state: dict[str, Any]) -> None:
        _store(state, name, round(_int(m.group(1)) / 2**30, 6))

    return setter


def _graph_part(m: re.Match[str], state: dict[str, Any]) -> None:
    """SGLang >= 0.5.22 captures each phase's graphs apart ("Capture target decode CUDA graph
    end ... mem usage=X GB", then prefill): the graphs' memory is their sum; a phase printed
    again (a restart) replaces its own part."""
    parts = state.setdefault("_graph_parts", {})
    parts[(m.group(1), m.group(2))] = float(m.group(3))
    state["cudagraph_gib"] = round(sum(parts.values()), 6)


def _tgi_blocks(m: re.Match[str], state: dict[str, Any]) -> None:
    blocks, size = _int(m.group(1)), _int(m.group(2))
    state["gpu_blocks"] = blocks
    # the router's "max batch total tokens" line is the authority; this stands in without it
    state["_block_tokens"] = blocks * size


_PAIRS = re.compile(r"(\w+)=" + _F, re.ASCII)


def _profiling_results(m: re.Match[str], state: dict[str, Any]) -> None:
    names = {
        "total_gpu_memory": "total_gpu_gib",
        "non_torch_memory": "non_torch_gib",
        "kv_cache_size": "kv_cache_gib",
        "gpu_memory_utilization": "gpu_memory_utilization",
        "initial_memory_usage": "initial_usage_gib",
    }
    for key, value in _PAIRS.findall(m.string):
        if key in names:
            _store(state, names[key], float(value))


# (needle that must be in the line, pattern, setter); the needle keeps the cost of a line
# that is none of these (nearly all) to a few substring tests
_RULES: tuple[tuple[str, re.Pattern[str], Setter], ...] = tuple(
    (needle, re.compile(pattern, re.ASCII), setter)
    for needle, pattern, setter in (
        # vLLM 0.6.4
        ("Memory profiling results", r"Memory profiling results:", _profiling_results),
        # vLLM 0.6.5 - 0.10 (V0 path)
        (
            "total_gpu_memory (",
            r"total_gpu_memory \(" + _GIB + r"\) x gpu_memory_utilization \(" + _F + r"\)",
            _put(total_gpu_gib=(1, float), gpu_memory_utilization=(2, float)),
        ),
        ("model weights take", r"model weights take " + _GIB, _put(weights_gib=(1, float))),
        ("non_torch_memory takes", r"non_torch_memory takes " + _GIB, _put(non_torch_gib=(1, float))),
        ("activation peak memory takes", r"activation peak memory takes " + _GIB, _put(activation_gib=(1, float))),
        ("reserved for KV Cache is", r"reserved for KV Cache is " + _GIB, _put(kv_cache_gib=(1, float))),
        ("Loading model weights took", r"Loading model weights took " + _GIB, _put(weights_gib=(1, float))),
        ("Model loading took", r"Model loading took " + _GIB, _put(weights_gib=(1, float))),
        (" blocks: ", r"# (?:GPU|gpu|cuda|CUDA|rocm|ROCm|xpu|XPU|npu|NPU) blocks: " + _INT, _put(gpu_blocks=(1, _int))),
        # V1
        ("Available KV cache memory", r"Available KV cache memory: " + _GIB, _put(kv_cache_gib=(1, float))),
        ("KV cache size:", r"KV cache size: " + _INT + r" tokens", _put(kv_cache_tokens=(1, _int))),
        (
            "Maximum concurrency for",
            r"Maximum concurrency for " + _INT + r" tokens(?: per request)?: " + _F + r"\s*x",
            _put(max_model_len=(1, _int), max_concurrency=(2, float)),
        ),
        ("Graph capturing finished", r"Graph capturing finished .*?took " + _GIB, _put(cudagraph_gib=(1, float))),
        # newer V1 summary, and the pre-flight error that shares its opening words
        (
            "Free memory on device",
            r"Free memory on device (?:\S+ )?\(" + _F + r"\s*/\s*" + _GIB + r"\)",
            _put(free_at_start_gib=(1, float), total_gpu_gib=(2, float)),
        ),
        (
            "GPU memory utilization",
            r"(?:Desired|desired) GPU memory utilization (?:is )?\(" + _F + r", ",
            _put(gpu_memory_utilization=(1, float)),
        ),
        ("GiB for weight", _GIB + r" for weight", _put(weights_gib=(1, float))),
        ("for peak activation", _GIB + r" for peak activation", _put(activation_gib=(1, float))),
        ("for non-torch memory", _GIB + r" for non-torch memory", _put(non_torch_gib=(1, float))),
        ("for CUDAGraph memory", _GIB + r" for CUDAGraph memory", _put(cudagraph_gib=(1, float))),
        (
            "kv cache memory in use is",
            r"[Kk][Vv] cache memory in use is " + _GIB,
            _put(kv_cache_gib=(1, float)),
        ),
        # vLLM 0.10.2 printed the same summary in bytes (gpu_worker.py:388@0.10.2)
        ("kv cache memory in use is", r"[Kk][Vv] cache memory in use is " + _INT + r" bytes", _bytes_gib("kv_cache_gib")),
        # vLLM >= 0.33: weights and non-torch memory as one figure (gpu_worker.py:1052@0.33.0)
        ("GiB for consumed memory", _GIB + r" for consumed memory", _put(consumed_gib=(1, float))),
        # vLLM >= 0.18: the graphs' memory estimated before capture (gpu_model_runner.py:5687@0.18.0)
        ("Estimated CUDA graph memory", r"Estimated CUDA graph memory: " + _GIB + r" total", _put(cudagraph_gib=(1, float))),
        # vLLM 0.33's pre-flight refusal names the budget it wanted (v1/worker/utils.py:741@0.33.0)
        ("excluding external process", r"excluding external process's weights \(" + _F + r", ",
         _put(gpu_memory_utilization=(1, float))),
        # start-up capacity errors carry numbers too
        (
            "KV cache is needed",
            r"max seq len \(" + _INT + r"\),? \(?" + _GIB + r" KV cache is needed, which is larger than the "
            r"available KV cache memory \(" + _GIB,
            _put(max_model_len=(1, _int), kv_cache_gib=(3, float)),
        ),
        (
            "can be stored in KV cache",
            r"max seq len \(" + _INT + r"\) is larger than the maximum number of tokens that can be stored in "
            r"KV cache \(" + _INT + r"\)",
            _put(max_model_len=(1, _int), kv_cache_tokens=(2, _int)),
        ),
        ("warming up sampler", r"warming up sampler with " + _INT + r"\b", _put(max_num_seqs=(1, _int))),
        (
            "estimated maximum model length",
            r"estimated maximum model length is " + _INT,
            _put(estimated_max_model_len=(1, _int)),
        ),
        ("non-default args", r"'max_model_len': " + _INT, _put(max_model_len=(1, _int))),
        ("max_seq_len=", r"\bmax_seq_len=" + _INT, _put(max_model_len=(1, _int))),
        # SGLang
        ("Load weight end", r"Load weight end\..*?mem usage=" + _GIB, _put(weights_gib=(1, float))),
        ("Load weight end", r"Load weight end\..*?avail mem=" + _GIB, _put(available_after_load_gib=(1, float))),
        ("KV Cache is allocated", r"#tokens: " + _INT, _put(kv_cache_tokens=(1, _int))),
        ("KV Cache is allocated", r"K size: " + _GIB + r",\s*V size: " + _GIB, _kv_sum),
        ("KV Cache is allocated", r"\bKV size: " + _GIB, _put(kv_cache_gib=(1, float))),
        ("max_total_num_tokens=", r"max_total_num_tokens=" + _INT, _put(kv_cache_tokens=(1, _int))),
        ("max_total_num_tokens=", r"\bcontext_len=" + _INT, _put(max_model_len=(1, _int))),
        ("Capture cuda graph end", r"Capture cuda graph end\..*?mem usage=" + _GIB, _put(cudagraph_gib=(1, float))),
        # SGLang >= 0.5.22 (model_runner_components/cuda_graph_setup.py:696 and :788@0.5.23)
        ("CUDA graph end", r"Capture (\w+) (\w+) CUDA graph end\..*?mem usage=" + _F + r" GB", _graph_part),
        # SGLang 0.5.23: the pool is smaller than one full-length request (managers/tp_worker.py:560)
        ("fewer than --context-length", r"KV pool holds " + _INT + r" tokens, fewer than --context-length " + _INT,
         _put(kv_cache_tokens=(1, _int), max_model_len=(2, _int))),
        # torch's OOM message names the card's size; a figure from a start-up line wins over it
        ("total capacity", r"GPU \d+ has a total capacity of " + _GIB + r"|GPU \d+; " + _GIB + r" total capacity",
         _first_of("total_gpu_gib")),
        # TGI
        ("KV-cache blocks:", r"KV-cache blocks: " + _INT + r", size: " + _INT, _tgi_blocks),
        (
            "max batch total tokens",
            r"(?:Setting max batch total tokens to|Inferred max batch total tokens:) " + _INT,
            _put(kv_cache_tokens=(1, _int)),
        ),
    )
)

_NEEDLES = tuple(dict.fromkeys(needle for needle, _, _ in _RULES))


class StartupReader:
    """Feeds on log messages one at a time; `result()` is what they said about start-up memory."""

    def __init__(self) -> None:
        self._state: dict[str, Any] = {}

    def feed(self, text: str) -> None:
        """Read one log message (any prefix may stay on it)."""
        if not any(map(text.__contains__, _NEEDLES)):
            return
        for needle, pattern, setter in _RULES:
            if needle in text:
                m = pattern.search(text)
                if m is not None:
                    setter(m, self._state)

    def set_error(self, message: str) -> None:
        """Keep the engine's start-up capacity error (the last one seen), clipped."""
        self._state["error"] = message.strip()[:ERROR_CHARS]

    def result(self) -> StartupMemory | None:
        state = dict(self._state)
        block_tokens = state.pop("_block_tokens", None)
        state.pop("_graph_parts", None)
        if block_tokens is not None and "kv_cache_tokens" not in state:
            state["kv_cache_tokens"] = block_tokens
        return StartupMemory(**state) if state else None
