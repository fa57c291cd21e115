"""What a plan may write into an engine flag: the range of each value, and no credential ever.

Each engine flag's range is in the engine tables (`runbooks.catalogs.engine_flags` and
`engine_flags_read`, `FlagEntry.range`, with the engine source each flag was read from);
`RANGES` is read from them, and this module names no engine flag by hand
(tests/test_engine_flags.py holds that). `check_value` holds a value to its flag's range
before any plan exists, and `check_plannable` refuses a flag that carries a credential (by the
names and value shapes `runbooks.model.secrets` masks), naming the flag and never the value.
Both raise `UsageError` (exit 2 on the terminal, an ephemeral reply in Slack). The options
that are not engine flags (replicas, HPA bounds, a probe's seconds, memory sizes) are here.

The bounds are sanity bounds, not tuning advice: a count is a positive integer no larger than
any deployment runs (a request or sequence count of at most 65536; a token length of at most
16777216, and no longer than the model's `max_position_embeddings` when the catalog knows the
model); a memory fraction is in (0, 1]; a switch is true or false; a replica count is 1 to 1000
(scaling to zero is an outage: done by hand, not planned).

>>> check_value("vllm", "max-num-seqs", 64), check_value("vllm", "gpu-memory-utilization", "0.9")
(64, 0.9)
>>> check_value("vllm", "gpu-memory-utilization", 1.5)
Traceback (most recent call last):
...
runbooks.model.errors.UsageError: flag_value_out_of_range: {'flag': '--gpu-memory-utilization', 'value': '1.5', 'range': '(0, 1]'}
"""

from __future__ import annotations

import math
import re
from typing import Any

from runbooks.catalogs.engine_defaults import (
    LATEST,
    TGI_LIMIT_FIELDS,
    VLLM_LIMIT_FIELDS,
    parse_version,
    tgi_limit_conflicts,
    tgi_limits,
    version_text,
    vllm_limit_conflicts,
)
from runbooks.catalogs.engine_flags import ENGINE_NAMES, FLAGS, SWITCH, Range
from runbooks.catalogs.engine_flags_read import all_entries
from runbooks.catalogs.gpus import GpuSpec
from runbooks.catalogs.models import find_model
from runbooks.model.errors import GpumemError, UsageError
from runbooks.model.evidence import ModelSpec, ServerConfig
from runbooks.model.phrases import Phrase
from runbooks.model.secrets import redact_text, secret_name, secret_value
from runbooks.sizing.budget import tgi_config_chunks

#: replica counts planned (`--replicas`, an HPA's minReplicas)
REPLICAS = (1, 1000)

#: engine -> flag (every spelling) -> what gpumem may plan for it, read from the engine tables
RANGES: dict[str, dict[str, Range]] = {
    engine: {s.flag: e.range for e in all_entries(engine) if e.range is not None for s in e.spellings}
    for engine in ENGINE_NAMES
}

_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_TRUE, _FALSE = frozenset({"true"}), frozenset({"false"})


def shown(value: Any) -> str:
    """A value as a refusal quotes it: cut to 32 characters, with its length when cut.

    >>> shown(10 ** 40)
    '10000000000000000000000000000000... (41 characters)'
    """
    text = value if isinstance(value, str) else repr(value)
    return text if len(text) <= 32 else f"{text[:32]}... ({len(text)} characters)"


def check_plannable(flag: str, value: Any) -> None:
    """Refuse a flag that carries a credential (`--api-key`, `--hf-token`, anything secret by
    name) and a value shaped like one, naming the flag and never the value.

    >>> check_plannable("max-num-seqs", 64)
    >>> check_plannable("api-key", "abc")
    Traceback (most recent call last):
    ...
    runbooks.model.errors.UsageError: secret_flag_not_plannable: {'flag': '--api-key'}
    """
    name = flag.strip().lstrip("-")
    if secret_name(name):
        raise UsageError("secret_flag_not_plannable", flag=f"--{name}")
    if isinstance(value, str) and (secret_value(value) or redact_text(f"{value}") != value):
        raise UsageError("secret_value_not_plannable", flag=f"--{name}")


def model_bound(current: int | None, max_positions: int | None) -> int | None:
    """The most a token length may be set to for the model: its max_position_embeddings, or the
    length the server runs with now when that is larger (rope scaling extends it); None: unknown."""
    if max_positions is None:
        return None
    return max(max_positions, current or 0)


def check_value(engine: str, flag: str, value: Any, *, max_length: int | None = None) -> Any:
    """`value` for `flag` of `engine` as it may be planned (an int, a float, a bool), or
    UsageError flag_value_out_of_range naming the flag, the value and the range. A flag the
    table does not list is returned as given (the edit still checks its kind). `max_length`: the
    model's bound on token lengths (`model_bound`), when known. None (remove the flag) passes."""
    rng = RANGES.get(engine, {}).get(flag)
    if value is None or rng is None:
        return value
    if rng.kind == "bool":
        return _bool(flag, value, rng)
    number = number_of(value, rng.kind == "int")
    if rng.kind == "fraction":
        if number is None or not 0 < number <= 1:
            raise _out(flag, value, rng.words())
        return float(number)
    high = rng.high
    if rng.length and max_length is not None:
        high = min(high, max_length)
    ok = number is not None and (number in rng.special or rng.low <= number <= high)
    if not ok:
        raise _out(flag, value, rng.words(high) + (" (max_position_embeddings)"
                                                   if rng.length and high != rng.high else ""))
    return int(number)  # type: ignore[arg-type]


#: the plan options that are not engine flags -> the whole numbers gpumem plans for them: an
#: HPA's maxReplicas and the long pool's replicas as any replica count, the waiting requests per
#: pod an HPA scales on, a startupProbe's load-time budget in seconds, a pool split's threshold
#: in prompt tokens, and a rollout's maxSurge as a number of pods (a percentage is 0%..100%)
OPTIONS: dict[str, Range] = {
    "--hpa-max": Range("int", *REPLICAS), "--long-replicas": Range("int", *REPLICAS),
    "--queue-target": Range("int", 1, 10_000), "--startup-probe": Range("int", 10, 7200),
    "--threshold": Range("int", 1, 10_000_000), "--max-surge": Range("int", 0, REPLICAS[1]),
}
#: the memory quantities gpumem plans (`--shm-size`, `--memory-limit`), in bytes: 1Mi..64Ti
MEMORY_BYTES = (2**20, 64 * 2**40)


def check_option(option: str, value: Any) -> int:
    """`value` of plan option `option` (`OPTIONS`) as planned, a whole number; UsageError
    flag_value_out_of_range naming the option, the value and the range otherwise.

    >>> check_option("--hpa-max", "8")
    8
    >>> check_option("--queue-target", 0)
    Traceback (most recent call last):
    ...
    runbooks.model.errors.UsageError: flag_value_out_of_range: {'flag': '--queue-target', 'value': '0', 'range': '1..10000'}
    """
    rng = OPTIONS[option]
    number = number_of(value, True)
    if number is None or not rng.low <= number <= rng.high:
        raise _out(option, value, rng.words())
    return int(number)


def check_memory(option: str, text: Any, size: int) -> int:
    """A memory quantity `text` (of `size` bytes) as planned for `option`: 1Mi..64Ti.

    >>> check_memory("--shm-size", "16Gi", 16 * 2**30) == 16 * 2**30
    True
    """
    if not MEMORY_BYTES[0] <= size <= MEMORY_BYTES[1]:
        raise _out(option, text, "1Mi..64Ti")
    return size


def check_switch(flag: str, value: Any) -> bool | None:
    """A switch's value as planned: True, False (or their text, any case), None to remove it.

    >>> check_switch("enforce-eager", "true"), check_switch("enforce-eager", False)
    (True, False)
    """
    return None if value is None else _bool(flag, value, SWITCH)


def check_replicas(value: Any, what: str = "--replicas") -> int:
    """A replica count gpumem plans: an integer 1..1000.

    >>> check_replicas(3)
    3
    """
    number = number_of(value, True)
    if number is None or not REPLICAS[0] <= number <= REPLICAS[1]:
        raise _out(what, value, f"{REPLICAS[0]}..{REPLICAS[1]}")
    return int(number)


def _bool(flag: str, value: Any, rng: Range) -> bool:
    if isinstance(value, bool):
        return value
    text = value.strip().lower() if isinstance(value, str) else None
    if text in _TRUE or text in _FALSE:
        return text in _TRUE
    raise _out(flag, value, rng.words())


def number_of(value: Any, integer: bool) -> float | int | None:
    """The number `value` holds (an int, a float, or their text), None when it is not one; for
    an integer flag, None unless it is whole."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str):
        text = value.strip()
        if _INT_TEXT.fullmatch(text) and len(text) <= 24:
            value = int(text)
        elif _FLOAT_TEXT.fullmatch(text) and len(text) <= 40:
            value = float(text)
        else:
            return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        if integer:
            return int(value) if value.is_integer() and abs(value) < 2**63 else None
        return value
    return None


def _out(flag: str, value: Any, words: str) -> UsageError:
    name = flag if flag.startswith("-") else f"--{flag}"
    return UsageError("flag_value_out_of_range", flag=name, value=shown(value), range=words)


#: the ServerConfig fields TGI's limit rules read, in `tgi_limit_conflicts`' order
_TGI_LIMIT_FIELDS = ("max_input_tokens", "max_model_len", "max_batch_prefill_tokens", "max_batch_total_tokens")
#: each TGI spelling of those limits -> its ServerConfig field
TGI_LIMIT_FIELD_OF: dict[str, str] = {
    s.flag: e.field for e in FLAGS["tgi"].values() if e.field in _TGI_LIMIT_FIELDS for s in e.spellings}
_VLLM_LIMIT_FIELDS = ("max_model_len", "max_num_seqs", "max_num_batched_tokens")


def spelled_flag(engine: str, config: ServerConfig, field: str) -> str:
    """The flag that fills `field`, as the launch spells it, else the engine's newest spelling."""
    entry = next(e for e in all_entries(engine) if e.field == field)
    return next((s.flag for s in entry.spellings if s.flag in config.flags), entry.spellings[-1].flag)


def tgi_default_input(version: tuple[int, int, int] | None, model: ModelSpec | None, max_total: int | None,
                      prefill: int | None) -> int:
    """The input limit TGI's launcher takes when the launch sets none, beside this total and
    prefill batch (`engine_defaults.tgi_limits`; a version not known: the newest's, the larger)."""
    return tgi_limits(version or LATEST["tgi"], model.max_position_embeddings if model else None,
                      None, max_total, prefill)[0]


def tgi_limits_broken(config: ServerConfig, planned: dict[str, int | None], version: tuple[int, int, int] | None,
                      model: ModelSpec | None, chunking: bool | None) -> tuple[tuple[str, ...], dict[str, int | None]]:
    """(the `engine_defaults.TGI_LIMIT_RULES` that the launch's limits with `planned` on top
    break, the limits they are then). An input limit left unset is the launcher's default beside
    the limits after the plan, which follows them; a rule the plan does not touch is the
    launch's own state and is left to it."""
    values = {f: planned.get(f, getattr(config, f)) for f in _TGI_LIMIT_FIELDS}
    if values["max_input_tokens"] is None:
        values["max_input_tokens"] = tgi_default_input(version, model, values["max_model_len"],
                                                       values["max_batch_prefill_tokens"])
    broken = tuple(rule for rule in tgi_limit_conflicts(version, *values.values(), chunking)
                   if TGI_LIMIT_FIELDS[rule] & planned.keys())
    return broken, values


def check_tgi_plan(config: ServerConfig, flags: tuple[tuple[str, Any], ...], version: str | None,
                   gpu: GpuSpec | None = None) -> None:
    """A plan's TGI limits (flags by TGI's own spellings, `--max-input-length` and
    `--max-input-tokens` alike) held to the checks TGI runs between them at start
    (`tgi_limits_broken`). Whether the shard prefills in chunks is read from the model the
    catalog knows, the container and `gpu`, the card the object's node selector pins
    (`runbooks.sizing.budget.tgi_config_chunks`; no card: taken as compute capability 8.0 or
    more); not known, it counts as off. Raises UsageError limits_refused_by_engine before any
    plan exists."""
    planned = {TGI_LIMIT_FIELD_OF[flag]: value for flag, value in flags
               if flag in TGI_LIMIT_FIELD_OF and isinstance(value, int) and not isinstance(value, bool)}
    if not planned:
        return
    parsed = parse_version(version)
    model = _catalog_model(config)
    broken, values = tgi_limits_broken(config, planned, parsed, model, tgi_config_chunks(config, parsed, model, gpu))
    if not broken:
        return
    raise UsageError("limits_refused_by_engine", reason=Phrase(f"tgi_limit.{broken[0]}" + ("" if parsed else "_any"), {
        "version": version_text(parsed) if parsed else "", "input": values["max_input_tokens"],
        "total": values["max_model_len"], "prefill": values["max_batch_prefill_tokens"],
        "batch_total": values["max_batch_total_tokens"],
        "input_flag": spelled_flag("tgi", config, "max_input_tokens"),
        "total_flag": spelled_flag("tgi", config, "max_model_len"),
        "prefill_flag": spelled_flag("tgi", config, "max_batch_prefill_tokens"),
        "batch_total_flag": spelled_flag("tgi", config, "max_batch_total_tokens")}))


def _catalog_model(config: ServerConfig) -> ModelSpec | None:
    try:
        return find_model(config.model) if config.model else None
    except (GpumemError, ValueError):  # a model the catalog does not know
        return None


def check_vllm_plan(config: ServerConfig, flags: tuple[tuple[str, Any], ...]) -> None:
    """A plan's vLLM limits (flags by vLLM's own spellings) held to the scheduler's checks
    between them (`engine_defaults.VLLM_LIMIT_FIELDS`), with the object's other limits as they
    are; a rule the plan does not touch is left to the object. Raises UsageError
    limits_refused_by_engine before any plan exists."""
    field_of = {s.flag: e.field for e in all_entries("vllm") if e.field in _VLLM_LIMIT_FIELDS for s in e.spellings}
    planned = {field_of[flag]: value for flag, value in flags
               if flag in field_of and isinstance(value, int) and not isinstance(value, bool)}
    values = {f: planned.get(f, getattr(config, f)) for f in _VLLM_LIMIT_FIELDS}
    broken = [rule for rule in vllm_limit_conflicts(*values.values(), config.enable_chunked_prefill)
              if VLLM_LIMIT_FIELDS[rule] & planned.keys()]
    if broken:
        raise UsageError("limits_refused_by_engine", reason=Phrase(f"vllm_limit.{broken[0]}", {
            "length": values["max_model_len"], "seqs": values["max_num_seqs"], "batched": values["max_num_batched_tokens"],
            "length_flag": spelled_flag("vllm", config, "max_model_len"),
            "seqs_flag": spelled_flag("vllm", config, "max_num_seqs"),
            "batched_flag": spelled_flag("vllm", config, "max_num_batched_tokens")}))
