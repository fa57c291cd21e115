"""What-if: the same launch with some flags changed, as BudgetInputs.

Keys are the engines' own flag names (any engine's spelling; `_` and `-` alike, so TGI's
env forms such as MAX_BATCH_TOTAL_TOKENS and vLLM's VLLM_USE_V1 work too), values as typed on
a command line: `max-num-seqs=32,max-model-len=4096`.

>>> from runbooks.model.budget import BudgetInputs
>>> base = BudgetInputs(engine="vllm", gpu_total_gib=79.15, max_num_seqs=256)
>>> after, changed = apply_what_if(base, parse_what_if("max-num-seqs=32, gpu_memory_utilization=0.85"))
>>> after.max_num_seqs, after.gpu_memory_utilization, list(changed)
(32, 0.85, ['max-num-seqs', 'gpu-memory-utilization'])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from runbooks.model.budget import BudgetInputs
from runbooks.model.errors import UsageError

#: what-if key -> (BudgetInputs field, value kind); kinds: int (>= 1), fraction (0 < x <= 1),
#: gib (> 0), gib0 (>= 0), bool, text
WHAT_IF_KEYS: dict[str, tuple[str, str]] = {
    "tensor-parallel-size": ("tp", "int"),
    "pipeline-parallel-size": ("pp", "int"),
    "dtype": ("dtype", "text"),
    "quantization": ("quantization", "text"),
    "kv-cache-dtype": ("kv_cache_dtype", "text"),
    "max-model-len": ("max_model_len", "int"),
    "max-num-seqs": ("max_num_seqs", "int"),
    "max-num-batched-tokens": ("max_num_batched_tokens", "int"),
    "gpu-memory-utilization": ("gpu_memory_utilization", "fraction"),
    "mem-fraction-static": ("mem_fraction_static", "fraction"),
    "cuda-memory-fraction": ("cuda_memory_fraction", "fraction"),
    "engine-version": ("engine_version", "text"),
    "block-size": ("block_size", "int"),
    "enforce-eager": ("enforce_eager", "bool"),
    "gpu-mem-gib": ("gpu_total_gib", "gib"),
    "other-process-gib": ("other_process_gib", "gib0"),
    "max-input-tokens": ("max_input_tokens", "int"),
    "max-batch-prefill-tokens": ("max_batch_prefill_tokens", "int"),
    "max-batch-total-tokens": ("max_batch_total_tokens", "int"),
    "vllm-use-v1": ("use_v1", "bool"),
    "enable-lora": ("enable_lora", "bool"),
    "max-lora-rank": ("max_lora_rank", "int"),
    "max-loras": ("max_loras", "int"),
    "max-cpu-loras": ("max_cpu_loras", "int"),
}

#: other spellings (short forms, SGLang and TGI names) of the keys above
WHAT_IF_ALIASES: dict[str, str] = {
    "tp": "tensor-parallel-size", "tp-size": "tensor-parallel-size", "num-shard": "tensor-parallel-size",
    "pp": "pipeline-parallel-size", "pp-size": "pipeline-parallel-size",
    "quantize": "quantization",
    "context-length": "max-model-len", "max-total-tokens": "max-model-len",
    "max-running-requests": "max-num-seqs", "max-batch-size": "max-num-seqs",
    "chunked-prefill-size": "max-num-batched-tokens",
    "max-input-length": "max-input-tokens",
}

_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


class PlanError(UsageError, ValueError):
    """An input to a what-if or a plan that cannot be used: `code` is a stable id (worded by
    the renderers), `params` its values.

    A UsageError, because the person can correct the flags or the profile they gave; still a
    ValueError, as it always was, for callers that catch that.

    >>> e = PlanError("what_if_syntax", item="tp")
    >>> (e.code, e.params, str(e))
    ('what_if_syntax', {'item': 'tp'}, "what_if_syntax: {'item': 'tp'}")
    """

    def __init__(self, code: str, /, **params: Any):  # no default code: each says which input
        super().__init__(code, **params)


def valid_what_if_keys() -> tuple[str, ...]:
    """Every key a what-if accepts, canonical names first."""
    return (*WHAT_IF_KEYS, *WHAT_IF_ALIASES)


def canonical_key(key: str) -> str | None:
    """The canonical name of a what-if key, or None when unknown."""
    name = key.strip().lstrip("-").lower().replace("_", "-")
    name = WHAT_IF_ALIASES.get(name, name)
    return name if name in WHAT_IF_KEYS else None


def parse_what_if(spec: str) -> dict[str, str]:
    """`key=value` pairs separated by commas, keyed by canonical name, in the order given.

    Raises PlanError: what_if_empty, what_if_syntax (item), what_if_unknown_key (key, valid),
    what_if_duplicate (key).
    """
    out: dict[str, str] = {}
    items = [item.strip() for item in (spec or "").split(",") if item.strip()]
    if not items:
        raise PlanError("what_if_empty")
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or not value.strip():
            raise PlanError("what_if_syntax", item=item)
        name = canonical_key(key)
        if name is None:
            raise PlanError("what_if_unknown_key", key=key.strip(), valid=", ".join(WHAT_IF_KEYS))
        if name in out:
            raise PlanError("what_if_duplicate", key=name)
        out[name] = value.strip()
    return out


def _value(key: str, kind: str, text: str) -> Any:
    low = text.lower()
    if kind == "text":
        return None if low in ("auto", "none", "default") and key != "kv-cache-dtype" else text
    if kind == "bool":
        if low in _TRUE or low in _FALSE:
            return low in _TRUE
        raise PlanError("what_if_bad_value", key=key, value=text, expected="bool")
    try:
        number = float(text) if kind != "int" else int(text)
    except ValueError:
        raise PlanError("what_if_bad_value", key=key, value=text, expected=kind) from None
    ok = {"int": number >= 1, "fraction": 0 < number <= 1, "gib": number > 0, "gib0": number >= 0}[kind]
    if not ok:
        raise PlanError("what_if_bad_value", key=key, value=text, expected=kind)
    return number


def apply_what_if(inputs: BudgetInputs, changes: Mapping[str, str]) -> tuple[BudgetInputs, dict[str, Any]]:
    """(the inputs with `changes` applied, {key: new value}). TGI's context is max-total-tokens.

    Raises PlanError what_if_bad_value (key, value, expected: the value kind) or
    what_if_unknown_key.
    """
    fields: dict[str, Any] = {}
    applied: dict[str, Any] = {}
    for raw_key, text in changes.items():
        key = canonical_key(raw_key)
        if key is None:
            raise PlanError("what_if_unknown_key", key=raw_key, valid=", ".join(WHAT_IF_KEYS))
        field, kind = WHAT_IF_KEYS[key]
        value = _value(key, kind, text)
        if field == "max_model_len" and inputs.engine == "tgi":
            field = "max_total_tokens"
        fields[field] = value
        applied[key] = value
    return replace(inputs, **fields), applied


def before_value(inputs: BudgetInputs, key: str) -> Any:
    """What a what-if key was before the change, as given (None: the engine default)."""
    field = WHAT_IF_KEYS[key][0]
    if field == "max_model_len" and inputs.engine == "tgi":
        field = "max_total_tokens"
    return getattr(inputs, field)
