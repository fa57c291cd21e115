"""TGI's batch flags (--max-batch-total-tokens, --max-batch-prefill-tokens, --max-input-tokens and
their env forms) in the budget, the what-if and the start-up failures, per version: the fixed
budget before 0.9.3, the inferred one of 1.x, 2.x and 3.x."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.main import main
from collectors.parsers.kube_objects import parse_deployment
from runbooks.catalogs.engine_defaults import tgi_limits, tgi_regime, tgi_wiggle_room
from runbooks.catalogs.models import find_model
from runbooks.model.budget import Assumed
from runbooks.model.units import GIB
from runbooks.sizing.budget import BudgetInputs, compute_budget, inputs_from_config
from runbooks.sizing.conflicts import find_conflicts
from runbooks.sizing.tgi import warmup_requests
from runbooks.sizing.whatif import apply_what_if, parse_what_if

LLAMA2 = find_model("meta-llama/Llama-2-7b-hf")  # 0.5 MiB of KV per token
LLAMA31 = find_model("meta-llama/Llama-3.1-8B-Instruct")
A10G = 22.20  # what torch reports on the A10G of tgi#653
MIB = 2**20


def tgi(version, model=LLAMA2, **kw):
    kw.setdefault("gpu_total_gib", A10G)
    kw.setdefault("gpu_name", "A10G")
    return compute_budget(model, BudgetInputs(engine="tgi", engine_version=version, **kw))


@pytest.mark.parametrize(("version", "regime", "wiggle"), [
    # from the release tags' flash_causal_lm.py / models/globals.py (engine_defaults.TGI_WIGGLE_ROOM_BY_VERSION)
    ((0, 9, 1), "tgi-0", 1.0), ((0, 9, 3), "tgi-0", 1.0), ((0, 9, 4), "tgi-1", 1.0), ((1, 4, 0), "tgi-1", 1.0),
    ((1, 4, 1), "tgi-1", 0.95), ((1, 4, 5), "tgi-1", 0.95), ((2, 0, 4), "tgi-2", 0.95), ((2, 2, 0), "tgi-2", 0.95),
    ((2, 3, 1), "tgi-2", 0.95), ((2, 4, 0), "tgi-2", 0.90), ((2, 4, 1), "tgi-2", 0.90), ((3, 0, 2), "tgi-3", 0.95),
    ((3, 1, 0), "tgi-3", 0.93), ((3, 2, 3), "tgi-3", 0.93), ((3, 3, 0), "tgi-3", 0.90), ((3, 3, 7), "tgi-3", 0.90)])
def test_regimes_and_wiggle_room_by_version(version, regime, wiggle):
    assert tgi_regime(version) == regime
    assert tgi_wiggle_room(version) == wiggle


def test_warmup_batch_is_max_input_requests_until_the_prefill_budget():
    assert warmup_requests(3072, 4096) == [3072, 1024]
    assert warmup_requests(1024, 4096) == [1024] * 4
    assert warmup_requests(4095, 4145) == [4095, 50]


def test_1x_defaults_are_1024_input_2048_total_4096_prefill():
    assert tgi_limits((1, 4, 0), 4096, None, None, None)[:3] == (1024, 2048, 4096)
    assert tgi_limits((2, 2, 0), 4096, None, None, None)[:3] == (4095, 4096, 4145)
    assert tgi_limits((3, 1, 0), 131072, None, None, None)[:3] == (131071, None, 4096)


def test_before_0_9_3_the_batch_total_tokens_are_allocated_up_front():
    b = tgi("0.9.1")
    assert b.regime == "tgi-0"
    assert b.assumption("max_batch_total_tokens") == Assumed(16000, "tgi_legacy_batch_total")
    # ceil(16000 / 16) + 10 blocks of 16 tokens x 0.5 MiB
    assert b.gpu_blocks == 1010
    assert b.kv_cache_gib == pytest.approx(1010 * 16 * 0.5 / 1024)
    assert (b.kv_cache_tokens, b.max_batch_total_tokens) == (16000, 16000)
    assert b.fits


def test_a_batch_budget_that_does_not_fit_fails_warm_up_with_tgi_wording():
    b = tgi("0.9.1", max_batch_total_tokens=20000)
    assert b.failure_id == "tgi_total_tokens_oom"
    assert b.failure == ("Not enough memory to handle 20000 total tokens with 4096 prefill tokens. You need to "
                         "decrease `--max-batch-total-tokens` or `--max-batch-prefill-tokens`")
    # 12.55 GiB of weights + 9.84 GiB of cache already exceed the card
    assert b.weights_gib + b.kv_cache_gib > A10G


def test_a_smaller_prefill_batch_does_not_rescue_a_budget_the_card_cannot_hold():
    assert tgi("0.9.1", max_batch_total_tokens=20000, max_batch_prefill_tokens=1024).failure_id == \
        "tgi_total_tokens_oom"
    assert tgi("0.9.1", max_batch_total_tokens=16000, max_batch_prefill_tokens=4096).fits


def test_1x_infers_the_batch_budget_and_ignores_a_given_one():
    given_ = tgi("1.1.0", max_batch_total_tokens=20000)
    inferred = tgi("1.1.0")
    assert given_.kv_cache_tokens == inferred.kv_cache_tokens == 17120
    assert given_.max_batch_total_tokens == 17120
    assert "tgi_batch_total_tokens_ignored" in given_.warnings
    # warm-up before 1.2: 4 requests of 1024 prompt tokens + 2 new tokens, 65 blocks each, and
    # no wiggle room (all the free memory)
    warm_blocks = 4 * 65
    free = given_.free_gib - given_.weights_gib - warm_blocks * 16 * 0.5 / 1024 - given_.activation_gib
    assert given_.gpu_blocks == int(free * GIB // (16 * 0.5 * MIB)) + warm_blocks


def test_from_1_2_warmup_requests_hold_blocks_for_max_total_tokens():
    # client.rs:130@v1.2.0 asks for max_total_tokens - truncate new tokens: each of the 4
    # requests holds ceil(2047 / 16) = 128 blocks; 1.4.0 keeps no wiggle room, 1.4.1 keeps 5%
    first, later = tgi("1.4.0"), tgi("1.4.1")
    warm_blocks = 4 * 128
    free = first.free_gib - first.weights_gib - warm_blocks * 16 * 0.5 / 1024 - first.activation_gib
    assert first.gpu_blocks == int(free * GIB // (16 * 0.5 * MIB)) + warm_blocks == 1070
    assert later.gpu_blocks == int(free * 0.95 * GIB // (16 * 0.5 * MIB)) + warm_blocks == 1042
    # the warm-up blocks come back into the cache: with no wiggle room, 1.4.0's larger warm-up
    # leaves the same total as 1.1.0's 65 blocks per request
    assert first.gpu_blocks == tgi("1.1.0").gpu_blocks


def test_router_refuses_a_max_total_tokens_the_inferred_cache_cannot_hold():
    b = tgi("1.1.0", max_total_tokens=20000, max_input_tokens=1024)
    assert b.failure_id == "tgi_max_total_tokens_oom"
    assert b.failure == "Not enough memory to handle max_total_tokens=20000"
    assert tgi("1.1.0", max_total_tokens=16000, max_input_tokens=1024).fits


def test_from_1_2_a_max_total_tokens_too_large_fails_the_warm_up_itself():
    # four warm-up requests of 16000 tokens each need 31 GiB of KV blocks on a 22 GiB card: the
    # allocation inside warmup()'s try raises "Not enough memory to handle 4096 prefill tokens"
    b = tgi("1.4.0", max_total_tokens=16000, max_input_tokens=1024)
    assert b.failure_id == "tgi_prefill_oom"
    assert b.failure.startswith("Not enough memory to handle 4096 prefill tokens")
    assert tgi("1.4.0", max_total_tokens=4096, max_input_tokens=1024).fits


def test_tgi3_sets_max_total_tokens_from_the_cache_and_fails_only_when_given():
    default = tgi("3.1.0", model=LLAMA31, gpu_total_gib=22.07)
    assert default.failure is None
    # the launcher's prefill default on an A10G: 125 TFLOP/s over 15.03 GFLOP a token, one warm-up
    # request of 8,315 tokens whose LM head reads its last row (no --enable-prefill-logprobs)
    assert default.assumption("max_batch_prefill_tokens").value == 8315
    assert default.max_model_len == default.kv_cache_tokens == 32560
    assert default.assumption("max_input_tokens") == Assumed(32559, "tgi3_total_minus_one")
    # given, each warm-up request holds blocks for max_total_tokens - 1 (the router asks for
    # max_total - prompt new tokens): 131,071 tokens of 128 KiB, 16 GiB, fail the warm-up itself
    given_ = tgi("3.1.0", model=LLAMA31, gpu_total_gib=22.07, max_total_tokens=131072)
    assert given_.failure == ("Not enough memory to handle 8315 prefill tokens. "
                              "You need to decrease `--max-batch-prefill-tokens`")
    # a max_total_tokens the warm-up fits but the cache after it does not is the router's refusal
    refused = tgi("3.1.0", model=LLAMA31, gpu_total_gib=22.07, max_total_tokens=40000)
    assert refused.failure == "Not enough memory to handle max_total_tokens=40000"


def test_cuda_memory_fraction_caps_the_fixed_budget_too():
    assert tgi("0.9.1").fits
    assert tgi("0.9.1", cuda_memory_fraction=0.8).failure_id == "tgi_total_tokens_oom"


def test_launcher_argument_checks_are_fatal_conflicts():
    def ids(**kw):
        return [c.id for c in find_conflicts(LLAMA2, BudgetInputs(engine="tgi", gpu_total_gib=A10G, **kw), None)]

    assert ids(engine_version="2.2.0", max_input_tokens=4096, max_total_tokens=4096) == ["tgi_input_not_below_total"]
    assert ids(engine_version="2.2.0", max_input_tokens=4000, max_batch_prefill_tokens=2048,
               max_total_tokens=4096) == ["tgi_prefill_below_input"]
    assert ids(engine_version="3.1.0", max_input_tokens=4000, max_batch_prefill_tokens=2048,
               max_total_tokens=4096) == []  # TGI 3 chunks long prompts
    assert ids(engine_version="0.9.1", max_total_tokens=4096, max_batch_total_tokens=2048,
               max_batch_prefill_tokens=1024, max_input_tokens=1000) == ["tgi_batch_total_below"]


def test_env_forms_reach_the_budget_from_a_deployment():
    text = """
apiVersion: apps/v1
kind: Deployment
metadata: {name: tgi}
spec:
  template:
    spec:
      containers:
      - name: tgi
        image: ghcr.io/huggingface/text-generation-inference:0.9.1
        env:
        - {name: MODEL_ID, value: meta-llama/Llama-2-7b-hf}
        - {name: MAX_INPUT_LENGTH, value: "1024"}
        - {name: MAX_TOTAL_TOKENS, value: "2048"}
        - {name: MAX_BATCH_PREFILL_TOKENS, value: "4096"}
        - {name: MAX_BATCH_TOTAL_TOKENS, value: "20000"}
"""
    _, config = parse_deployment(text, "deployment.yaml")
    inputs = inputs_from_config(config, A10G, "A10G")
    assert (inputs.max_input_tokens, inputs.max_total_tokens, inputs.max_batch_prefill_tokens,
            inputs.max_batch_total_tokens) == (1024, 2048, 4096, 20000)
    assert compute_budget(LLAMA2, inputs).failure_id == "tgi_total_tokens_oom"


def test_what_if_takes_tgi_flags_and_env_spellings():
    base = BudgetInputs(engine="tgi", gpu_total_gib=A10G, engine_version="0.9.1", gpu_name="A10G")
    after, applied = apply_what_if(base, parse_what_if("MAX_BATCH_TOTAL_TOKENS=20000,max-input-length=512"))
    assert applied == {"max-batch-total-tokens": 20000, "max-input-tokens": 512}
    assert compute_budget(LLAMA2, base).fits
    assert compute_budget(LLAMA2, after).failure_id == "tgi_total_tokens_oom"


def test_cli_tgi_flags(capsys):
    rc = main(["budget", "--engine", "tgi", "--model", "meta-llama/Llama-2-7b-hf", "--gpu-mem-gib", "22.2",
               "--engine-version", "0.9.1", "--max-input-tokens", "1024", "--max-batch-prefill-tokens", "4096",
               "--max-batch-total-tokens", "20000", "--json", "--lang", "en"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert (doc["failure_id"], doc["max_batch_total_tokens"], doc["max_num_batched_tokens"]) == (
        "tgi_total_tokens_oom", 20000, 4096)


@settings(max_examples=60, deadline=None)
@given(version=st.sampled_from(["0.9.1", "1.0.0", "1.4.5", "2.0.4", "2.2.0", "3.1.0"]),
       fraction=st.floats(0.5, 1.0), lower=st.floats(0.05, 0.3),
       prefill=st.sampled_from([None, 1024, 2048, 4096]))
def test_less_memory_never_gives_more_cache_or_fewer_failures(version, fraction, lower, prefill):
    base = BudgetInputs(engine="tgi", gpu_total_gib=A10G, engine_version=version, cuda_memory_fraction=fraction,
                        max_batch_prefill_tokens=prefill, max_input_tokens=1000 if prefill else None)
    more = compute_budget(LLAMA2, base)
    less = compute_budget(LLAMA2, replace(base, cuda_memory_fraction=max(0.01, fraction - lower)))
    if version == "0.9.1":  # a fixed budget: the same tokens, or a failure
        assert less.kv_cache_tokens == more.kv_cache_tokens
    elif less.failure is None:
        # TGI 3's launcher caps its default prefill by the memory its weight estimate leaves, and
        # stops capping when the estimate exceeds the memory: with too little memory the warm-up
        # grows again. That start-up fails, and its cache figure is no capacity.
        assert less.kv_cache_tokens <= more.kv_cache_tokens
    assert more.failure is None or less.failure is not None


@pytest.mark.parametrize(("args", "env", "allowed"), [
    ("[]", "[]", False),
    ('["--enable-prefill-logprobs"]', "[]", True),
    ("[]", '[{name: ENABLE_PREFILL_LOGPROBS, value: "true"}]', True),
    ("[]", '[{name: REQUEST_LOGPROBS, value: "1"}]', True),
    ("[]", '[{name: REQUEST_LOGPROBS, value: "0"}]', False),
])
def test_tgi3_prefill_logprobs_come_from_the_flag_its_env_or_the_shards_env(args, env, allowed):
    """--enable-prefill-logprobs (or its env var) makes the launcher set REQUEST_LOGPROBS for the
    shards (launcher/src/main.rs:1101@v3.3.4); set directly, the shards read it too. Allowed, the
    warm-up's LM head reads the whole prefill and the cache is smaller."""
    text = f"""
apiVersion: apps/v1
kind: Deployment
metadata: {{name: tgi}}
spec:
  template:
    spec:
      containers:
      - name: tgi
        image: ghcr.io/huggingface/text-generation-inference:3.3.4
        args: {args}
        env: {env}
"""
    _, config = parse_deployment(text, "deployment.yaml")
    inputs = inputs_from_config(config, A10G, "A10G")
    assert inputs.tgi_prefill_logprobs is allowed
    plain = compute_budget(LLAMA31, replace(inputs, tgi_prefill_logprobs=False))
    assert (compute_budget(LLAMA31, inputs).kv_cache_tokens < plain.kv_cache_tokens) is allowed
