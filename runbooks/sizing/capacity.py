"""Capacity on top of the budget: how many requests of each bucket fit at once, and the
long-request share a full batch absorbs. (The safe flags are `runbooks.remediation.solver`.)

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

>>> from runbooks.model.budget import Budget
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

from runbooks.model.budget import Budget
from runbooks.model.lengths import BUCKETS, RequestProfile
from runbooks.profile.detail import ProfileDetail
from runbooks.profile.requests import BUCKET_LIMITS

#: representative length of a bucket without a profile: its input + output limits
BUCKET_LIMIT_TOKENS = {name: inp + out for name, inp, out in BUCKET_LIMITS}


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


@dataclass(frozen=True)
class MeasuredPool:
    """The KV capacity the engine itself reported (its start-up line or capacity gauge) and where
    it was read; from a recorded triage, also the budget's own figure for the flags it ran with
    then (`computed`). Sizing holds its pools to it: the reported figure at the running flags,
    plus the change the budget computes for new ones.

    >>> live = MeasuredPool(19056, "logs.txt")
    >>> live.holds_for(33312), live.pool(33312, 30000)
    (True, 15744)
    >>> MeasuredPool(19056, "triage", computed=33312).holds_for(30000)
    False
    """

    tokens: int
    source: str
    computed: int | None = None

    def holds_for(self, computed_running: int) -> bool:
        """Whether it was read at the running flags: a live reading always is; a recorded one
        while the budget computes for today's flags what it computed then (the same launch)."""
        return self.tokens > 0 and (self.computed is None or self.computed == computed_running)

    def pool(self, computed_running: int, computed_new: int) -> int:
        """The pool under new flags. A budget that computes no cache at the running flags, where
        the engine reported one, has no change to add: the reported figure stands."""
        if computed_running <= 0:
            return self.tokens
        return max(0, self.tokens + computed_new - computed_running)


def blocks_tokens(tokens: int, block: int) -> int:
    """The KV tokens a request of `tokens` holds: whole blocks.

    >>> blocks_tokens(100, 16), blocks_tokens(0, 16)
    (112, 16)
    """
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
        fit = budget.kv_cache_tokens // blocks_tokens(tokens, block) if budget.kv_cache_tokens > 0 else 0
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
    lengths = {r.bucket: blocks_tokens(r.tokens, block) for r in rows}
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

