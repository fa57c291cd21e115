"""Properties every budget keeps, whatever the model, engine, version and flags."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from runbooks.catalogs.models import find_model, model_names
from runbooks.sizing.budget import BudgetInputs, compute_budget

_VERSIONS = {"vllm": [None, "0.6.4", "0.6.6", "0.7.3", "0.8.5", "0.10.1", "0.11.0", "0.21.0"],
             "sglang": [None, "0.4.3", "0.4.6", "0.5.2"], "tgi": [None, "2.2.0", "3.1.0"]}
_FRACTION = {"vllm": "gpu_memory_utilization", "sglang": "mem_fraction_static", "tgi": "cuda_memory_fraction"}
_LAUNCH = st.builds(
    dict, engine=st.sampled_from(sorted(_VERSIONS)), model=st.sampled_from(model_names()),
    gpu=st.sampled_from([("A100 80GB", 79.15), ("H100", 79.19), ("L4", 22.06), ("H200", 139.8), (None, 47.5)]),
    tp=st.sampled_from([1, 2, 4, 8]), max_model_len=st.sampled_from([None, 2048, 8192, 32768]),
    kv_dtype=st.sampled_from([None, "fp8"]), version_pick=st.integers(0, 10))


def _inputs(launch: dict, fraction: float | None = None, **extra) -> BudgetInputs:
    engine = launch["engine"]
    versions = _VERSIONS[engine]
    kw = {"engine": engine, "gpu_total_gib": launch["gpu"][1], "gpu_name": launch["gpu"][0], "tp": launch["tp"],
          "engine_version": versions[launch["version_pick"] % len(versions)],
          "max_model_len": launch["max_model_len"], "kv_cache_dtype": launch["kv_dtype"], **extra}
    if fraction is not None:
        kw[_FRACTION[engine]] = fraction
    return BudgetInputs(**kw)


@settings(max_examples=200, deadline=None)
@given(_LAUNCH)
def test_figures_are_finite_and_failures_come_with_ids(launch):
    b = compute_budget(find_model(launch["model"]), _inputs(launch))
    for value in (b.weights_gib, b.activation_gib, b.kv_cache_gib, b.headroom_gib, b.max_concurrency, b.budget_gib):
        assert math.isfinite(value)
    assert b.kv_cache_tokens >= 0 and b.kv_cache_gib >= 0
    assert (b.failure is None) == (b.failure_id is None)
    assert b.fits == (b.failure is None and b.headroom_gib >= 0)


@settings(max_examples=200, deadline=None)
@given(_LAUNCH, st.floats(0.5, 0.85))
def test_a_larger_memory_fraction_never_shrinks_the_kv_cache(launch, fraction):
    model = find_model(launch["model"])
    low = compute_budget(model, _inputs(launch, fraction))
    high = compute_budget(model, _inputs(launch, fraction + 0.1))
    # a start-up that fails has no capacity to compare: TGI 3's launcher, whose default prefill
    # is capped by the memory its weight estimate leaves, stops capping when the estimate exceeds
    # the memory, so with too little memory the warm-up (and the blocks it holds) grows again
    if low.failure is None:
        assert high.kv_cache_tokens >= low.kv_cache_tokens


@settings(max_examples=200, deadline=None)
@given(_LAUNCH)
def test_fp8_kv_cache_never_holds_fewer_tokens(launch):
    model = find_model(launch["model"])
    auto = compute_budget(model, _inputs({**launch, "kv_dtype": None}))
    fp8 = compute_budget(model, _inputs({**launch, "kv_dtype": "fp8"}))
    assert fp8.kv_cache_tokens >= auto.kv_cache_tokens
    assert fp8.kv_bytes_per_token * 2 == auto.kv_bytes_per_token or fp8.kv_bytes_per_token * 2 == \
        auto.kv_bytes_per_token + 1


@settings(max_examples=200, deadline=None)
@given(_LAUNCH, st.floats(0.5, 20))
def test_other_processes_never_add_headroom(launch, other):
    model = find_model(launch["model"])
    alone = compute_budget(model, _inputs(launch))
    crowded = compute_budget(model, _inputs(launch, other_process_gib=other))
    # TGI 3 gives the KV cache all but a fixed reserve, so memory another process takes comes
    # off the cache nearly byte for byte: the whole blocks it rounds to may differ by one
    one_block = (alone.kv_bytes_per_token * (alone.block_size or 1)) / 2**30 if alone.engine == "tgi" else 0.0
    assert crowded.headroom_gib <= alone.headroom_gib + one_block + 1e-9
