"""Plans on top of the capacity budget: how many requests of each bucket fit at once, and the
safest flags that still serve a measured request profile (the runbook's safe template,
computed instead of fixed).

Per-bucket capacity: a request of T tokens holds ceil(T / block) blocks of the KV pool, so
`kv_cache_tokens // (ceil(T / block) x block)` of them fit at once; max-num-seqs caps that.
The representative T of a bucket is the profile's exact p95 of input + output tokens in that
bucket when there is a profile, else the bucket's limits (S 512+128, M 2048+256, L 8192+512,
XL max-model-len); never more than max-model-len.

Long-share limit: a full batch of N = max-num-seqs requests, mixed as the traffic is, needs
N x ((1 - x) x short + x x long) tokens, where `short` and `long` are the share-weighted
representative lengths of S+M and of L+XL and x the L+XL share. The pool absorbs every x up
to x* = (kv_tokens / N - short) / (long - short); above it the engine preempts (vLLM) or
retracts (SGLang). Requests arrive in the measured mix, but long ones also stay longer,
so x* is an upper bound.

>>> from runbooks.sizing.types import Budget
>>> b = Budget(engine="vllm", weights_gib=14.2, activation_gib=1.0, non_torch_gib=0.1, cudagraph_gib=0.1,
...            kv_cache_gib=10.0, kv_bytes_per_token=57344, kv_cache_tokens=187232, max_concurrency=22.9,
...            max_model_len=8192, budget_gib=25.0, static_gib=15.4, gpu_total_gib=79.15, headroom_gib=50.0,
...            fits=True, block_size=16, max_num_seqs=64)
>>> cap = bucket_capacity(b)
>>> [(r.bucket, r.tokens, r.fit_in_kv, r.concurrent) for r in cap.rows]
[('S', 640, 292, 64), ('M', 2304, 81, 64), ('L', 8192, 22, 22), ('XL', 8192, 22, 22)]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from runbooks.catalogs.engine_defaults import LATEST, parse_version, sglang_mem_fraction_static
from runbooks.model.evidence import BUCKETS, ModelSpec, RequestProfile
from runbooks.profile.detail import ProfileDetail
from runbooks.profile.requests import BUCKET_LIMITS
from runbooks.sizing.budget import compute_budget
from runbooks.sizing.types import Budget, BudgetInputs
from runbooks.sizing.whatif import PlanError

#: representative length of a bucket without a profile: its input + output limits
BUCKET_LIMIT_TOKENS = {name: inp + out for name, inp, out in BUCKET_LIMITS}
#: the memory fraction the safe template steps back to, per engine (never raised)
SAFE_FRACTION = {"vllm": 0.88, "sglang": 0.85, "tgi": 0.95}
#: each engine's flags for context length, concurrency and memory fraction
ENGINE_FLAGS = {
    "vllm": ("max-model-len", "max-num-seqs", "gpu-memory-utilization"),
    "sglang": ("context-length", "max-running-requests", "mem-fraction-static"),
    "tgi": ("max-total-tokens", "max-batch-size", "cuda-memory-fraction"),
}
_ITERATIONS = 8


@dataclass(frozen=True)
class BucketRow:
    bucket: str
    #: representative request length (input + output tokens) and where it came from:
    #: "profile_p95", "bucket_limit" or "max_model_len"
    tokens: int
    basis: str
    #: requests of this length the KV pool holds at once, and with max-num-seqs applied
    fit_in_kv: int
    concurrent: int
    #: the bucket's share of measured requests (None without a profile)
    share: float | None = None
    #: the representative length was cut to max-model-len
    capped: bool = False


@dataclass(frozen=True)
class BucketCapacity:
    rows: tuple[BucketRow, ...]
    kv_cache_tokens: int
    block_size: int
    max_num_seqs: int | None
    #: measured L+XL share; the largest L+XL share a full batch fits (None: cannot say)
    long_share_now: float | None = None
    long_share_limit: float | None = None
    #: KV tokens a full batch at the measured mix needs, and that against the pool
    demand_tokens: int | None = None
    demand_ratio: float | None = None
    #: absorbs_all_long | within | over | preempts_without_long | no_profile | no_seq_limit
    status: str = "no_profile"

    def row(self, bucket: str) -> BucketRow:
        return next(r for r in self.rows if r.bucket == bucket)


def _blocks_tokens(tokens: int, block: int) -> int:
    block = max(1, block)
    return max(block, math.ceil(tokens / block) * block)


def bucket_capacity(budget: Budget, profile: RequestProfile | None = None,
                    detail: ProfileDetail | None = None) -> BucketCapacity:
    """Concurrent requests per bucket and the L+XL share the pool absorbs (see the module doc)."""
    max_len = budget.max_model_len
    block = budget.block_size or 1
    seqs = budget.max_num_seqs
    rows = []
    for name in BUCKETS:
        p95 = detail.p95_tokens(name) if detail is not None else None
        if p95 is not None:
            tokens, basis = int(p95), "profile_p95"
        elif name in BUCKET_LIMIT_TOKENS:
            tokens, basis = BUCKET_LIMIT_TOKENS[name], "bucket_limit"
        else:
            tokens, basis = max_len, "max_model_len"
        capped = tokens > max_len
        tokens = max(1, min(tokens, max_len))
        fit = budget.kv_cache_tokens // _blocks_tokens(tokens, block) if budget.kv_cache_tokens > 0 else 0
        rows.append(BucketRow(name, tokens, basis, fit, min(fit, seqs) if seqs else fit,
                              profile.share(name) if profile is not None and profile.total else None, capped))
    cap = BucketCapacity(tuple(rows), budget.kv_cache_tokens, block, seqs)
    if profile is None or not profile.total:
        return cap
    long_now = profile.share("L", "XL")
    cap = replace(cap, long_share_now=long_now)
    if not seqs:
        return replace(cap, status="no_seq_limit")
    weights = {r.bucket: (r.share or 0.0) for r in rows}
    lengths = {r.bucket: _blocks_tokens(r.tokens, block) for r in rows}
    short = _mean(("S", "M"), weights, lengths)
    long = _mean(("L", "XL"), weights, lengths)
    demand = int(round(seqs * sum(weights[b] * lengths[b] for b in BUCKETS)))
    per_slot = budget.kv_cache_tokens / seqs
    if per_slot >= long:
        limit, status = 1.0, "absorbs_all_long"
    elif per_slot < short:
        limit, status = 0.0, "preempts_without_long"
    else:
        limit = (per_slot - short) / (long - short) if long > short else 1.0
        status = "within" if long_now <= limit else "over"
    return replace(cap, long_share_limit=limit, demand_tokens=demand,
                   demand_ratio=demand / budget.kv_cache_tokens if budget.kv_cache_tokens else None, status=status)


def _mean(names: tuple[str, ...], weights: dict[str, float], lengths: dict[str, int]) -> float:
    total = sum(weights[n] for n in names)
    if total <= 0:
        return float(lengths[names[0]])  # no traffic there: its smallest bucket stands for it
    return sum(weights[n] * lengths[n] for n in names) / total


# ------------------------------------------------------------------------ solver


@dataclass(frozen=True)
class Reason:
    """Why a flag got its value: a stable id and the numbers behind it."""

    flag: str
    id: str
    params: dict


@dataclass(frozen=True)
class SafePlan:
    engine: str
    max_model_len: int
    max_num_seqs: int
    memory_fraction: float
    #: TGI only: --max-input-tokens (below --max-total-tokens)
    max_input_tokens: int | None
    target_headroom: float
    #: the budget the flags predict, and the lengths the plan served
    budget: Budget
    p99_tokens: int
    p95_tokens: int
    #: "exact" (p95/p99 of input + output per request) or "sum" (input p95 + output p95)
    length_basis: str
    reasons: tuple[Reason, ...]
    feasible: bool
    #: why it is not feasible: a Budget failure id, "p95_exceeds_pool", or None
    problem: str | None = None

    @property
    def flags(self) -> tuple[str, str, str]:
        return ENGINE_FLAGS[self.engine]

    def args(self) -> tuple[str, ...]:
        """The flags as command-line arguments, ready to paste."""
        length, seqs, fraction = self.flags
        out = [f"--{length}={self.max_model_len}", f"--{seqs}={self.max_num_seqs}",
               f"--{fraction}={self.memory_fraction:g}"]
        if self.max_input_tokens is not None:
            out.insert(0, f"--max-input-tokens={self.max_input_tokens}")
        return tuple(out)


def round_context(tokens: float) -> int:
    """A context length people set: up to a multiple of 1024 (of 4096 above 32K).

    >>> round_context(700), round_context(5000), round_context(40000)
    (1024, 5120, 40960)
    """
    step = 4096 if tokens > 32768 else 1024
    return max(1024, int(math.ceil(tokens / step)) * step)


def current_fraction(inputs: BudgetInputs) -> float:
    """The engine's memory fraction as launched: the flag, else the engine default."""
    engine = inputs.engine
    if engine == "sglang":
        if inputs.mem_fraction_static is not None:
            return inputs.mem_fraction_static
        version = parse_version(inputs.engine_version) or LATEST["sglang"]
        return sglang_mem_fraction_static(version, inputs.gpu_total_gib, max(1, inputs.tp), max(1, inputs.pp))[0]
    if engine == "tgi":
        return inputs.cuda_memory_fraction if inputs.cuda_memory_fraction is not None else 1.0
    return inputs.gpu_memory_utilization if inputs.gpu_memory_utilization is not None else 0.9


def _with(inputs: BudgetInputs, length: int, seqs: int | None, fraction: float,
          max_input: int | None) -> BudgetInputs:
    fields: dict = {"max_num_seqs": seqs}
    if inputs.engine == "tgi":
        fields.update(max_total_tokens=length, max_model_len=None, max_input_tokens=max_input,
                      cuda_memory_fraction=fraction)
    elif inputs.engine == "sglang":
        fields.update(max_model_len=length, mem_fraction_static=fraction)
    else:
        fields.update(max_model_len=length, gpu_memory_utilization=fraction)
    return replace(inputs, **fields)


def _lengths(profile: RequestProfile, detail: ProfileDetail | None) -> tuple[float, float, str]:
    if detail is not None and detail.p99_total_tokens is not None and detail.p95_total_tokens is not None:
        return detail.p99_total_tokens, detail.p95_total_tokens, "exact"
    if profile.p99_input_tokens is None or profile.p95_input_tokens is None:
        raise PlanError("profile_without_lengths")
    return (profile.p99_input_tokens + (profile.p99_output_tokens or 0),
            profile.p95_input_tokens + (profile.p95_output_tokens or 0), "sum")


def solve_safe_flags(model: ModelSpec, inputs: BudgetInputs, profile: RequestProfile,
                     detail: ProfileDetail | None = None, target_headroom: float = 0.1) -> SafePlan:
    """The safest flags that still serve `profile` (see `SafePlan`; reasons say why each value).

    max-model-len: the p99 request (input + output) rounded up, never above the model's
    maximum; memory fraction: the engine's safe value (SAFE_FRACTION), never above the current
    one; max-num-seqs: requests of the p95 length that fit in the KV pool those two leave,
    keeping `target_headroom` of it free, never above the current (or default) value.
    Raises PlanError profile_without_lengths or bad_headroom.
    """
    if not 0 <= target_headroom < 1:
        raise PlanError("bad_headroom", value=target_headroom)
    engine = inputs.engine
    length_flag, seqs_flag, fraction_flag = ENGINE_FLAGS[engine]
    p99, p95, basis = _lengths(profile, detail)
    reasons: list[Reason] = []
    length = round_context(p99)
    model_max = model.max_position_embeddings
    if model_max and length > model_max:
        length = model_max
        reasons.append(Reason(length_flag, "capped_at_model_max", {"p99": int(p99), "model_max": model_max}))
    else:
        reasons.append(Reason(length_flag, f"from_p99_{basis}", {"p99": int(p99), "value": length}))
    current_len = inputs.max_total_tokens if engine == "tgi" else inputs.max_model_len
    if current_len and length > current_len:
        reasons.append(Reason(length_flag, "above_current", {"current": current_len, "value": length}))
    max_input = None
    if engine == "tgi":
        p99_in = profile.p99_input_tokens or p99
        max_input = max(1, min(round_context(p99_in), length - 1))

    now = current_fraction(inputs)
    safe = SAFE_FRACTION[engine]
    fraction = min(now, safe)
    reasons.append(Reason(fraction_flag, "stepped_back" if fraction < now else "kept_current",
                          {"current": now, "safe": safe, "value": fraction}))

    budget = compute_budget(model, _with(inputs, length, inputs.max_num_seqs, fraction, max_input))
    limit = inputs.max_num_seqs or budget.max_num_seqs
    p95_tokens = max(1, min(int(p95), length))
    seqs = budget.max_num_seqs or 1

    def fitting(b: Budget) -> int:
        return int((1 - target_headroom) * b.kv_cache_tokens // _blocks_tokens(p95_tokens, b.block_size or 1))

    # fewer sequences free activation and graph memory for the cache, so iterate to a fixed point
    for _ in range(_ITERATIONS):
        wanted = max(1, min(fitting(budget), limit) if limit else fitting(budget))
        if wanted == seqs:
            break
        seqs = wanted
        budget = compute_budget(model, _with(inputs, length, seqs, fraction, max_input))
    if seqs > max(1, fitting(budget)):
        seqs = max(1, fitting(budget))
        budget = compute_budget(model, _with(inputs, length, seqs, fraction, max_input))
    per_request = _blocks_tokens(p95_tokens, budget.block_size or 1)
    fits = fitting(budget)
    params = {"kv_tokens": budget.kv_cache_tokens, "headroom_pct": round(target_headroom * 100, 1),
              "p95": p95_tokens, "per_request": per_request, "fits": fits, "value": seqs}
    if limit and fits > limit:
        reasons.append(Reason(seqs_flag, "kept_current" if inputs.max_num_seqs else "kept_default",
                              {**params, "current": limit}))
    else:
        reasons.append(Reason(seqs_flag, "from_capacity", params))
    problem = budget.failure_id
    if problem is None and fits < 1:
        problem = "p95_exceeds_pool"
    elif problem is None and not budget.fits:
        problem = "headroom_negative"
    return SafePlan(engine=engine, max_model_len=length, max_num_seqs=seqs, memory_fraction=fraction,
                    max_input_tokens=max_input, target_headroom=target_headroom, budget=budget,
                    p99_tokens=int(p99), p95_tokens=p95_tokens, length_basis=basis, reasons=tuple(reasons),
                    feasible=problem is None, problem=problem)
