"""What vLLM, SGLang and TGI print about memory at start-up, read line by line into StartupMemory.

Every engine version words it differently (reference/memory-model.md §1.4, 1b, 1c): the lines,
their versions and where each is printed are the table `runbooks.catalogs.engine_logs`; this
module reads them. A value printed twice (a restart, or one line per TP rank) keeps
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

from runbooks.catalogs.engine_logs import STARTUP_LINES, F, LogLine
from runbooks.model.evidence import StartupMemory

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


def _graph_part(m: re.Match[str], state: dict[str, Any]) -> None:
    """SGLang >= 0.5.15 captures each phase's graphs apart ("Capture target decode CUDA graph
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


_PAIRS = re.compile(r"(\w+)=" + F, re.ASCII)


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


_CONVERT: dict[str, Callable[[str], Any]] = {
    "float": float,
    "int": _int,
    "bytes_gib": lambda text: round(_int(text) / 2**30, 6),
}

#: the readers of lines whose figures need more than one group per field
_READERS: dict[str, Setter] = {
    "profiling_results": _profiling_results,
    "kv_sum": _kv_sum,
    "graph_part": _graph_part,
    "tgi_blocks": _tgi_blocks,
    "first_of:total_gpu_gib": _first_of("total_gpu_gib"),
}


def _setter(line: LogLine) -> Setter:
    if line.reader:
        return _READERS[line.reader]
    return _put(**{spec[0]: (group, _CONVERT[spec[1]])
                   for group, spec in enumerate(line.fields, start=1) if spec is not None})


# (needle that must be in the line, pattern, setter), one per line of the table
# (`runbooks.catalogs.engine_logs`); the needle keeps the cost of a line that is none of these
# (nearly all) to a few substring tests
_RULES: tuple[tuple[str, re.Pattern[str], Setter], ...] = tuple(
    (line.needle, re.compile(line.pattern, re.ASCII), _setter(line)) for line in STARTUP_LINES
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
