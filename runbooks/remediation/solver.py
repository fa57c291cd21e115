"""The one safe-flag solver: the runbook's stop-the-bleeding template, sized to the service.

Triage (`set_safe_flags` and the single-flag actions), `gpumem budget --profile` and, later,
plans that apply flags all ask this module, so the flags a report prints are the flags a plan
would apply.

The rules, in order:

- context length (max-model-len, context-length, max-total-tokens): the p99 request
  (input + output) rounded up to what people set (`round_context`), never above the model's
  maximum and never above what is running now: a stop-gap does not raise the context, it
  only takes back what the traffic does not use. Without a request profile, the runbook's
  template (4096).
- memory fraction: the engine's safe value (`SAFE_FRACTION`), never raised; TGI's is kept as
  it is, since it caps torch and the KV cache is sized inside the cap.
- concurrency (max-num-seqs, max-running-requests, max-batch-size): requests of the p95
  length (whole KV blocks each) that fit in the KV pool those two leave, keeping
  `target_headroom` of it free; never above the current (or default) value.

The KV pool comes from the capacity budget when the model is known (`solve_safe_flags`) and
from the capacity the engine itself reported otherwise (`solve_from_capacity`); both share
the rules above.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from runbooks.catalogs import thresholds as T
from runbooks.catalogs.engine_defaults import LATEST, parse_version, sglang_mem_fraction_static, version_text
from runbooks.catalogs.engine_flags import ROLES, Choice, choose_spelling, role_flag
from runbooks.model.budget import Budget, BudgetInputs
from runbooks.model.evidence import ModelSpec
from runbooks.model.lengths import RequestProfile
from runbooks.model.phrases import Phrase
from runbooks.profile.detail import ProfileDetail
from runbooks.sizing.budget import compute_budget
from runbooks.sizing.capacity import MeasuredPool, blocks_tokens
from runbooks.sizing.whatif import PlanError

#: the memory fraction the safe template steps back to, per engine (never raised). TGI has none:
#: its --cuda-memory-fraction is a cap on torch (`torch.cuda.set_per_process_memory_fraction`,
#: utils/dist.py:54@v0.9.4 to :56@v3.3.7) that the KV cache is sized inside, so a lower one
#: shrinks the cache and leaves activations no more room (docs/budget.md, "TGI's fraction")
SAFE_FRACTION = {"vllm": T.SAFE_VLLM_UTIL, "sglang": 0.85}
#: the roles of the three flags every safe plan sets (context length, concurrency, memory fraction)
SAFE_ROLES = ("context_length", "concurrency", "memory_fraction")
#: each engine's flags for those roles, from the flag table (`runbooks.catalogs.engine_flags`)
ENGINE_FLAGS: dict[str, tuple[str, str, str]] = {
    engine: (roles[SAFE_ROLES[0]], roles[SAFE_ROLES[1]], roles[SAFE_ROLES[2]]) for engine, roles in ROLES.items()
}
#: the headroom the safe flags keep free in the KV pool, unless told otherwise
DEFAULT_HEADROOM = round(1 - T.SAFE_KV_TARGET_RATIO, 4)
_ITERATIONS = 8
_DEFAULT_BLOCK = 16


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
    #: None when the engine's fraction is not known and is left alone
    memory_fraction: float | None
    #: TGI only: --max-input-tokens (below --max-total-tokens)
    max_input_tokens: int | None
    target_headroom: float
    #: the budget the flags predict (None when sized from the engine's reported capacity)
    budget: Budget | None
    p99_tokens: int
    p95_tokens: int
    #: "exact" (p95/p99 of input + output per request), "sum" (input p95 + output p95) or
    #: "template" (no request lengths: the runbook's template length)
    length_basis: str
    reasons: tuple[Reason, ...]
    feasible: bool
    #: why it is not feasible: a Budget failure id, "p95_exceeds_pool", or None
    problem: str | None = None
    #: the KV tokens the flags leave, from the budget or scaled from the engine's own figure
    kv_cache_tokens: int | None = None
    #: where that pool comes from: "budget" (computed), "engine_anchored" (the engine's own
    #: figure at the running flags plus the budget's change for the new ones), "engine" (the
    #: engine's figure, scaled for a lower fraction), None (not known)
    kv_pool_basis: str | None = None
    #: the engine version the flags are spelled for (None: not known) and the flags the
    #: running object already spells (`runbooks.catalogs.engine_flags.choose_spelling`)
    engine_version: str | None = None
    used_flags: tuple[str, ...] = ()

    @property
    def flags(self) -> tuple[str, str, str]:
        return ENGINE_FLAGS[self.engine]

    def values(self) -> dict[str, int | float]:
        """Flag name -> value, in the engine's own flag names.

        >>> plan = SafePlan("sglang", 8192, 40, 0.85, None, 0.1, None, 8000, 3000, "exact", (), True)
        >>> plan.values()
        {'context-length': 8192, 'max-running-requests': 40, 'mem-fraction-static': 0.85}
        """
        out: dict[str, int | float] = {}
        for flag, value in self._settings():
            choice = self.spelling(flag)
            if choice.flag is not None:
                out[choice.flag] = value
        return out

    def _settings(self) -> list[tuple[str, int | float]]:
        length, seqs, fraction = self.flags
        out: list[tuple[str, int | float]] = []
        input_flag = role_flag(self.engine, "input_length")
        if self.max_input_tokens is not None and input_flag is not None:
            out.append((input_flag, self.max_input_tokens))
        out += [(length, self.max_model_len), (seqs, self.max_num_seqs)]
        if self.memory_fraction is not None:
            out.append((fraction, self.memory_fraction))
        return out

    def spelling(self, flag: str) -> Choice:
        """How the deployed version spells `flag` (Choice.flag None: it has no such flag)."""
        return choose_spelling(self.engine, flag, parse_version(self.engine_version), self.used_flags)

    def withheld(self) -> dict[str, Phrase]:
        """The flags the plan leaves out because the deployed version rejects them: flag -> why.

        >>> SafePlan("tgi", 4096, 8, None, 2048, 0.1, None, 4000, 3000, "exact", (), True,
        ...          engine_version="1.4.0").withheld()["max-batch-size"].key
        'flag.absent'
        """
        refused = {flag: self.spelling(flag) for flag, _ in self._settings()}
        return {flag: c.reason for flag, c in refused.items() if c.flag is None and c.reason is not None}

    def args(self, only: set[str] | frozenset[str] | None = None) -> tuple[str, ...]:
        """The flags as command-line arguments, ready to paste; with `only`, just those flags
        (named as the engine table names them, before spelling).

        >>> SafePlan("sglang", 8192, 40, 0.85, None, 0.1, None, 8000, 3000, "exact", (), True).args({"context-length"})
        ('--context-length=8192',)
        """
        out = []
        for flag, value in self._settings():
            spelled = self.spelling(flag).flag
            if spelled is None or (only is not None and flag not in only):
                continue
            out.append(f"--{spelled}={value:g}" if isinstance(value, float) else f"--{spelled}={value}")
        return tuple(out)


@dataclass(frozen=True)
class Launched:
    """What is running now, in engine-independent names (None: not known)."""

    engine: str = "vllm"
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    memory_fraction: float | None = None


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


def _step_back(engine: str, flag: str, now: float) -> tuple[float, Reason]:
    """The fraction the safe plan runs with, and why: the engine's safe value where the current
    one is above it; TGI's is kept, being a cap on torch rather than a share for the cache.

    >>> _step_back("vllm", "gpu-memory-utilization", 0.95)[0], _step_back("tgi", "cuda-memory-fraction", 1.0)[0]
    (0.88, 1.0)
    """
    if engine not in SAFE_FRACTION:
        return now, Reason(flag, "kept_torch_cap", {"current": now, "value": now})
    safe = SAFE_FRACTION[engine]
    fraction = min(now, safe)
    return fraction, Reason(flag, "stepped_back" if fraction < now else "kept_current",
                            {"current": now, "safe": safe, "value": fraction})


def request_lengths(profile: RequestProfile | None, detail: ProfileDetail | None = None) -> tuple[float, float, str]:
    """(p99, p95, basis) of a request's input + output tokens.

    Exact percentiles of the total when the profile (or its detail) has them, else the sum of
    the input and output percentiles, else the runbook's template length for both.

    >>> request_lengths(None)
    (4096, 4096, 'template')
    """
    for source in (profile, detail):
        p99 = getattr(source, "p99_total_tokens", None)
        p95 = getattr(source, "p95_total_tokens", None)
        if p99 is not None and p95 is not None:
            return p99, p95, "exact"
    if profile is None or profile.p99_input_tokens is None or profile.p95_input_tokens is None:
        return T.SAFE_MAX_MODEL_LEN, T.SAFE_MAX_MODEL_LEN, "template"
    return (profile.p99_input_tokens + (profile.p99_output_tokens or 0),
            profile.p95_input_tokens + (profile.p95_output_tokens or 0), "sum")


def _length(p99: float, basis: str, current: int | None, model_max: int | None, flag: str,
            reasons: list[Reason]) -> int:
    length = round_context(p99) if basis != "template" else int(p99)
    if model_max and length > model_max:
        length = model_max
        reasons.append(Reason(flag, "capped_at_model_max", {"p99": int(p99), "model_max": model_max}))
    else:
        reasons.append(Reason(flag, f"from_p99_{basis}", {"p99": int(p99), "value": length}))
    if current and length > current:
        # a stop-gap never raises the context: longer requests are refused today either way
        reasons.append(Reason(flag, "kept_current", {"current": current, "value": current, "p99": int(p99)}))
        length = current
    return length


def _seqs_reason(flag: str, kv_tokens: int, headroom: float, p95: int, per_request: int, fits: int,
                 value: int, limit: int | None, limit_is_current: bool) -> Reason:
    params = {"kv_tokens": kv_tokens, "headroom_pct": round(headroom * 100, 1), "p95": p95,
              "per_request": per_request, "fits": fits, "value": value}
    if limit and fits > limit:
        return Reason(flag, "kept_current" if limit_is_current else "kept_default", {**params, "current": limit})
    return Reason(flag, "from_capacity", params)


def _check_headroom(target_headroom: float) -> None:
    if not 0 <= target_headroom < 1:
        raise PlanError("bad_headroom", value=target_headroom)


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


def solve_safe_flags(model: ModelSpec, inputs: BudgetInputs, profile: RequestProfile | None,
                     detail: ProfileDetail | None = None, target_headroom: float = DEFAULT_HEADROOM,
                     measured: MeasuredPool | None = None) -> SafePlan:
    """The safest flags that still serve `profile`, with the KV pool from the capacity budget.

    With `measured` (the capacity the engine reported at the flags in `inputs`), the pool is
    that figure plus the change the budget computes for the new flags (`MeasuredPool.pool`): what the
    engine measured wins over what gpumem computes, and only the difference is computed.

    `SafePlan.reasons` say why each value. Raises PlanError bad_headroom.
    """
    _check_headroom(target_headroom)
    at_running = int(compute_budget(model, inputs).kv_cache_tokens or 0) if measured is not None else 0
    anchor = measured if measured is not None and measured.holds_for(at_running) else None

    def pool(b: Budget) -> int:
        return anchor.pool(at_running, int(b.kv_cache_tokens or 0)) if anchor is not None else int(b.kv_cache_tokens)
    engine = inputs.engine
    length_flag, seqs_flag, fraction_flag = ENGINE_FLAGS[engine]
    p99, p95, basis = request_lengths(profile, detail)
    reasons: list[Reason] = []
    current_len = inputs.max_total_tokens if engine == "tgi" else inputs.max_model_len
    length = _length(p99, basis, current_len, model.max_position_embeddings, length_flag, reasons)
    max_input = None
    if engine == "tgi":
        p99_in = (profile.p99_input_tokens if profile is not None else None) or p99
        max_input = max(1, min(round_context(p99_in), length - 1))

    now = current_fraction(inputs)
    fraction, reason = _step_back(engine, fraction_flag, now)
    reasons.append(reason)

    budget = compute_budget(model, _with(inputs, length, inputs.max_num_seqs, fraction, max_input))
    limit = inputs.max_num_seqs or budget.max_num_seqs
    p95_tokens = max(1, min(int(p95), length))
    seqs = budget.max_num_seqs or 1

    def fitting(b: Budget) -> int:
        return int((1 - target_headroom) * pool(b) // blocks_tokens(p95_tokens, b.block_size or 1))

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
    per_request = blocks_tokens(p95_tokens, budget.block_size or 1)
    fits = fitting(budget)
    if anchor is not None:
        reasons.append(Reason(seqs_flag, "pool_from_engine", {
            "measured": anchor.tokens, "source": anchor.source,
            "computed_running": at_running, "computed_new": int(budget.kv_cache_tokens),
            "kv_tokens": pool(budget)}))
    reasons.append(_seqs_reason(seqs_flag, pool(budget), target_headroom, p95_tokens, per_request,
                                fits, seqs, limit, bool(inputs.max_num_seqs)))
    problem = budget.failure_id
    if problem is None and fits < 1:
        problem = "p95_exceeds_pool"
    elif problem is None and not budget.fits:
        problem = "headroom_negative"
    return SafePlan(engine=engine, max_model_len=length, max_num_seqs=seqs, memory_fraction=fraction,
                    max_input_tokens=max_input, target_headroom=target_headroom, budget=budget,
                    p99_tokens=int(p99), p95_tokens=p95_tokens, length_basis=basis, reasons=tuple(reasons),
                    feasible=problem is None, problem=problem, kv_cache_tokens=pool(budget),
                    kv_pool_basis="engine_anchored" if anchor is not None else "budget",
                    # spelled for the version the budget was sized for (the newest known when none given)
                    engine_version=inputs.engine_version or version_text(LATEST[engine]))


def solve_from_capacity(launched: Launched, kv_cache_tokens: int | None, profile: RequestProfile | None,
                        detail: ProfileDetail | None = None, *, block_size: int | None = None,
                        kv_cache_gib: float | None = None, gpu_total_gib: float | None = None,
                        model_max: int | None = None, target_headroom: float = DEFAULT_HEADROOM) -> SafePlan:
    """The same rules as `solve_safe_flags` when the model is unknown: the KV pool is the
    capacity the engine reported (`kv_cache_tokens`), shrunk by the share of the card a lower
    memory fraction gives back (needs `kv_cache_gib` and `gpu_total_gib`). Without any
    capacity, concurrency falls back to the runbook's template (32), never above the current.

    >>> plan = solve_from_capacity(Launched("vllm", 8192, 256, 0.95), 200_000, None,
    ...                            kv_cache_gib=20.0, gpu_total_gib=80.0)
    >>> plan.max_model_len, plan.memory_fraction, plan.kv_cache_tokens, plan.max_num_seqs
    (4096, 0.88, 144000, 31)

    (0.95 -> 0.88 of an 80 GiB card gives back 5.6 of the cache's 20 GiB; 90% of the 144,000
    tokens left holds 31 requests of the template's 4096.)
    """
    _check_headroom(target_headroom)
    engine = launched.engine if launched.engine in ENGINE_FLAGS else "vllm"
    length_flag, seqs_flag, fraction_flag = ENGINE_FLAGS[engine]
    p99, p95, basis = request_lengths(profile, detail)
    reasons: list[Reason] = []
    length = _length(p99, basis, launched.max_model_len, model_max, length_flag, reasons)
    fraction = None
    if launched.memory_fraction is not None:
        fraction, reason = _step_back(engine, fraction_flag, launched.memory_fraction)
        reasons.append(reason)
    cap = kv_cache_tokens
    if cap and fraction is not None and kv_cache_gib and gpu_total_gib:
        # stepping the fraction back shrinks the cache by exactly that share of the card
        shrink = (launched.memory_fraction - fraction) * gpu_total_gib
        cap = int(cap * max(0.0, kv_cache_gib - shrink) / kv_cache_gib)
    p95_tokens = max(1, min(int(p95), length))
    block = block_size or _DEFAULT_BLOCK
    limit = launched.max_num_seqs
    problem = None
    if cap:
        per_request = blocks_tokens(p95_tokens, block)
        fits = int((1 - target_headroom) * cap // per_request)
        seqs = max(1, min(fits, limit) if limit else fits)
        reasons.append(_seqs_reason(seqs_flag, cap, target_headroom, p95_tokens, per_request, fits, seqs,
                                    limit, bool(limit)))
        if fits < 1:
            problem = "p95_exceeds_pool"
    else:
        seqs = min(T.SAFE_MAX_NUM_SEQS, limit) if limit else T.SAFE_MAX_NUM_SEQS
        reasons.append(Reason(seqs_flag, "template", {"value": seqs}))
    return SafePlan(engine=engine, max_model_len=length, max_num_seqs=seqs, memory_fraction=fraction,
                    max_input_tokens=None, target_headroom=target_headroom, budget=None, p99_tokens=int(p99),
                    p95_tokens=p95_tokens, length_basis=basis, reasons=tuple(reasons), feasible=problem is None,
                    problem=problem, kv_cache_tokens=cap, kv_pool_basis="engine" if cap else None)
