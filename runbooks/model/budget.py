"""Inputs and result of the capacity budget (see `runbooks.sizing.budget`).

All memory figures are GiB (2^30 bytes) per GPU, as the engines print them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: stable ids of start-up failures the budget predicts (renderers word them)
FAILURE_IDS = (
    "kv_below_one_sequence",  # vLLM: one max-length request does not fit the KV cache
    "no_cache_blocks",  # vLLM: nothing left for KV after weights, activations, non-torch
    "free_below_target",  # vLLM V1 >= 0.9: free memory at start below util x total
    "weights_exceed_gpu",  # CUDA OOM while loading weights
    "sglang_not_enough_memory",  # SGLang: KV pool size <= 0
    "heads_not_divisible_by_tp",  # vLLM/SGLang config check
    "max_model_len_exceeds_model",  # vLLM config check
    "kv_allocation_oom",  # V0 >= 0.6.5 budget larger than what other processes left
    "tgi_prefill_oom",  # TGI warm-up of the largest prefill batch ran out of memory
    "tgi_total_tokens_oom",  # TGI < 0.9.4: --max-batch-total-tokens allocated up front does not fit
    "tgi_max_total_tokens_oom",  # TGI router: one request of --max-total-tokens exceeds the inferred KV
)


@dataclass(frozen=True)
class Assumed:
    """A setting a budget took as its engine would (none was given): the value, and why as a
    reason id (the renderers word it, catalog `budget_why.<why>`) with the values it names.

    >>> Assumed(0.9, "engine_default", (("engine", "vLLM"),)).param("engine")
    'vLLM'
    """

    value: Any
    why: str
    params: tuple[tuple[str, Any], ...] = ()

    def param(self, name: str) -> Any:
        return dict(self.params).get(name)


@dataclass(frozen=True)
class BudgetInputs:
    """How one engine instance is launched on one kind of GPU.

    `gpu_total_gib` is the card's memory as CUDA reports it to a process (e.g. 79.15 for an
    A100 80GB). None for a setting means the engine default for `engine_version`
    (None: the newest version this module knows); every default used is listed in
    `Budget.assumptions`.

    >>> from runbooks.catalogs.models import find_model
    >>> from runbooks.sizing.budget import compute_budget
    >>> inputs = BudgetInputs(engine="vllm", gpu_total_gib=79.15, engine_version="0.10.1",
    ...                       max_model_len=8192, gpu_memory_utilization=0.95)
    >>> inputs.max_num_seqs is None
    True
    >>> budget = compute_budget(find_model("Qwen/Qwen2.5-7B-Instruct"), inputs)
    >>> budget.max_num_seqs, budget.assumption("max_num_seqs")
    (1024, Assumed(value=1024, why='vllm_v1_70_gib', params=()))
    """

    engine: str
    gpu_total_gib: float
    engine_version: str | None = None
    tp: int = 1
    pp: int = 1
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    cuda_memory_fraction: float | None = None
    enforce_eager: bool | None = None
    block_size: int | None = None
    other_process_gib: float = 0.0
    gpu_name: str | None = None
    max_batch_prefill_tokens: int | None = None
    #: free memory when the engine starts, when known (SGLang logs it as "avail mem")
    free_gib: float | None = None
    #: vLLM 0.8-0.10 ran V1 by default; False selects the V0 engine (VLLM_USE_V1=0)
    use_v1: bool | None = None
    #: vLLM --kv-cache-memory (bytes given in GiB here): skips the utilization budget
    kv_cache_memory_gib: float | None = None
    #: vLLM --cpu-offload-gb: weights kept in host memory
    cpu_offload_gib: float = 0.0
    enable_chunked_prefill: bool | None = None
    #: TGI --max-input-tokens / --max-total-tokens (sizes of the warm-up batch)
    max_input_tokens: int | None = None
    max_total_tokens: int | None = None
    #: TGI_WIGGLE_ROOM as the container sets it (TGI >= 2.3.0 reads it; None: the version's default)
    tgi_wiggle_room: float | None = None
    #: TGI 3: whether prefill log-probabilities are allowed (--enable-prefill-logprobs, or
    #: REQUEST_LOGPROBS in the container); None: not set, TGI's default (off)
    tgi_prefill_logprobs: bool | None = None
    #: TGI 3: what in the container turns prefill chunking off ("PREFILL_CHUNKING=0",
    #: "ATTENTION=paged"); None: the model, the card and --speculate decide
    tgi_chunking_off: str | None = None
    #: TGI --speculate N (1.3.0+): each request's blocks hold N more tokens, and TGI 3 does not
    #: chunk prefills under it
    tgi_speculate: int = 0
    #: vLLM --enable-lora slots: --max-lora-rank (None: LoRA off unless enable_lora, then 16)
    #: and --max-loras; --max-cpu-loras adapters wait in host memory
    max_lora_rank: int | None = None
    max_loras: int = 1
    enable_lora: bool = False
    max_cpu_loras: int | None = None
    #: TGI --max-batch-total-tokens: allocated up front before 0.9.4, ignored (inferred) after
    max_batch_total_tokens: int | None = None


@dataclass(frozen=True)
class Budget:
    """Where one GPU's memory goes under an engine's own arithmetic.

    `budget_gib` is the memory the engine allows itself (vLLM util x total, SGLang
    mem_fraction_static x free, TGI fraction x total); `static_gib` is weights + activation
    + non-torch + CUDA graphs; `headroom_gib` is what stays free on the card once the engine
    holds everything, graphs included (negative: it cannot hold it).
    """

    engine: str
    weights_gib: float
    activation_gib: float
    non_torch_gib: float
    cudagraph_gib: float
    kv_cache_gib: float
    kv_bytes_per_token: int
    kv_cache_tokens: int
    max_concurrency: float
    max_model_len: int
    budget_gib: float
    static_gib: float
    gpu_total_gib: float
    headroom_gib: float
    fits: bool
    failure: str | None = None
    failure_id: str | None = None
    #: each setting assumed, by its name ("max_num_seqs"), in the order made
    assumptions: tuple[tuple[str, Assumed], ...] = ()
    warnings: tuple[str, ...] = ()
    #: the arithmetic regime used, e.g. "vllm-v0", "vllm-v1", "sglang-0.4", "tgi-2"
    regime: str = ""
    gpu_blocks: int | None = None
    block_size: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    #: free memory the engine sees at start (total - context - other processes)
    free_gib: float | None = None
    #: vLLM LoRA slots reserved on the GPU (already part of weights_gib, as vLLM counts them)
    lora_gib: float = 0.0
    #: TGI: the batch token budget the router runs with (inferred at warm-up, or as given)
    max_batch_total_tokens: int | None = None

    @property
    def kv_requests(self) -> int:
        """Requests of `max_model_len` the KV cache holds at once, in whole requests (the floor
        of `max_concurrency`, the engine's own "Maximum concurrency ... 136.84x")."""
        return whole_requests(self.max_concurrency)

    @property
    def concurrency(self) -> int:
        """Requests the engine runs at once: min(its cap (vLLM --max-num-seqs, SGLang
        --max-running-requests, TGI --max-batch-size), what the KV cache holds at full length).

        >>> b = Budget("vllm", 14.0, 1.0, 0.5, 0.4, 59.2, 57344, 1108880, 136.84, 8192, 75.0, 16.0, 79.15, 2.0, True,
        ...            max_num_seqs=128)
        >>> b.kv_requests, b.concurrency, b.concurrency_limit
        (136, 128, 'max_num_seqs')
        """
        return concurrency_of(self.max_concurrency, self.max_num_seqs)

    @property
    def concurrency_limit(self) -> str:
        """What caps `concurrency`: "max_num_seqs" (the engine's flag) or "kv_cache"."""
        return concurrency_limit_of(self.max_concurrency, self.max_num_seqs)

    @classmethod
    def from_stored(cls, data: dict[str, Any]) -> Budget:
        """A budget from its JSON: the report's (`assumptions` as `[name, "value (why)"]` pairs in
        English, `assumption_reasons` as {name: {value, why, params}}) or `to_jsonable`'s
        (`assumptions` as `[name, {value, why, params}]`). A pair with no reason (an older
        report's) is kept as its text, reason `recorded`."""
        from runbooks.model.serde import fields_from_jsonable

        reasons = data.get("assumption_reasons") or {}
        assumed = []
        for name, value in data.get("assumptions") or ():
            stored = reasons.get(name, value)
            if isinstance(stored, dict):
                params = stored.get("params") or {}
                pairs = params.items() if isinstance(params, dict) else (tuple(p) for p in params)
                assumed.append((name, Assumed(stored.get("value"), str(stored.get("why")), tuple(sorted(pairs)))))
            else:
                assumed.append((name, Assumed(str(stored).split(" (", 1)[0], "recorded", (("text", str(stored)),))))
        return cls(**fields_from_jsonable(cls, data, skip=("assumptions",)), assumptions=tuple(assumed))

    def assumption(self, name: str) -> Assumed | None:
        """The value assumed for `name`, or None when it was given."""
        for key, value in self.assumptions:
            if key == name:
                return value
        return None


def whole_requests(kv_concurrency: float) -> int:
    """Whole full-length requests in a fractional KV concurrency (never rounded up).

    >>> whole_requests(136.84), whole_requests(0.29), whole_requests(-1.0)
    (136, 0, 0)
    """
    return max(0, math.floor(kv_concurrency + 1e-9))


def concurrency_of(kv_concurrency: float, max_num_seqs: int | None) -> int:
    """min(the engine's concurrency cap, the whole requests the KV cache holds); the cache alone
    when no cap is known.

    >>> concurrency_of(136.84, 128), concurrency_of(273.68, 64), concurrency_of(22.9, None)
    (128, 64, 22)
    """
    kv = whole_requests(kv_concurrency)
    return min(kv, max_num_seqs) if max_num_seqs else kv


def concurrency_limit_of(kv_concurrency: float, max_num_seqs: int | None) -> str:
    """"max_num_seqs" when the engine's cap binds (at or below the cache), else "kv_cache".

    >>> concurrency_limit_of(136.84, 128), concurrency_limit_of(136.84, 256)
    ('max_num_seqs', 'kv_cache')
    """
    return "max_num_seqs" if max_num_seqs and max_num_seqs <= whole_requests(kv_concurrency) else "kv_cache"
