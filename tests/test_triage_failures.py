"""Triage of engines that failed: start-up refusals are sizing first, OOMs are read by phase,
refused layouts and platform failures name their cause, and each named cause has a sized fix.

The logs are real pastes (tests/data/real) or lines from them.
"""

from __future__ import annotations

from pathlib import Path

from collectors.bundle import load_bundle
from collectors.parsers.logs import parse_server_log
from runbooks.model.evidence import Evidence, GpuDevice, GpuSnapshot
from runbooks.triage.runbook import triage

REAL = Path(__file__).parent / "data" / "real"
GIB = 2**30


def _real(case: str):
    return triage(load_bundle(REAL / case))


def _log(text: str, **more) -> Evidence:
    """Evidence from one log, with the launch it shows as the server config (as a bundle does)."""
    logs = parse_server_log(text, year=2025)
    return Evidence(logs=logs, server_config=logs.server_config, **more)


def _action(report, action_id):
    return next(a for a in report.actions if a.id == action_id)


def _findings(report) -> set[str]:
    return {f.id for f in report.findings}


def test_a_capacity_refusal_is_a_sizing_problem_and_fits_the_context_to_the_printed_capacity():
    report = _real("vllm-10517-llama31-8b-3090-29k")
    assert report.verdict.primary == "params_near_edge"
    assert [c.id for c in report.verdict.causes] == ["params_near_edge"]
    fit = _action(report, "fit_max_model_len")
    assert (fit.params["current"], fit.params["capacity"], fit.params["target"]) == (29000, 23648, 23552)
    assert fit.changes[0].flag == "max-model-len" and fit.changes[0].new == 23552
    # the fraction (0.90, printed) is already vLLM's default: the refusal does not lower or raise it
    assert {a.id for a in report.actions} == {"fit_max_model_len"}


def test_without_the_cards_size_weights_too_large_is_not_named():
    report = triage(_log("ValueError: The model's max seq len (4096) is larger than the maximum number of tokens "
                         "that can be stored in KV cache (3664). Try increasing gpu_memory_utilization or decreasing "
                         "max_model_len when initializing the engine."))
    assert report.verdict.primary == "params_near_edge"
    assert "weights_too_large" not in {c.id for c in report.verdict.causes}


def test_weights_that_fill_the_card_are_too_large_even_with_a_refusal():
    text = ("INFO 01-12 08:36:24 model_runner.py:1025] Loading model weights took 21.9 GB\n"
            "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine.")
    gpus = GpuSnapshot("nvidia-smi.txt", (GpuDevice("0", "NVIDIA L4", total_bytes=int(22.05 * GIB)),))
    report = triage(_log(text, gpus=gpus))
    assert report.verdict.primary == "weights_too_large"
    assert {a.id for a in report.actions} == {"quantize_weights_unnamed", "bigger_gpu_or_tp"}


def test_a_fraction_below_the_weights_share_is_raised_where_the_card_has_room():
    report = _real("sglang-inferencex-2128-dsv4-h200")
    assert report.verdict.primary == "params_near_edge"
    raise_ = _action(report, "raise_memory_fraction")
    assert (raise_.params["flag"], raise_.params["current"], raise_.params["target"]) == (
        "mem-fraction-static", 0.88, 0.94)


def test_tgis_total_tokens_refusal_gives_back_the_budget_to_tgi():
    report = _real("tgi-710-total-tokens-70b-8xa10g")
    assert report.verdict.primary == "params_near_edge"
    assert _action(report, "unset_batch_total_tokens").params["current"] == 16000


def test_memory_another_process_held_at_startup_is_placement_not_flags():
    report = _real("vllm-10533-two-instances-a100")
    assert report.verdict.primary == "platform_amplifier"
    assert "memory_held_elsewhere" in _findings(report)
    free = _action(report, "free_gpu_memory")
    assert (free.params["held_gib"], free.params["total_gib"]) == (52.2, 79.2)  # 68.01 in use - its 0.20 x 79.15


def test_an_oom_is_read_by_its_phase():
    graphs = _real("runpod-40-cudagraph-capture-44g")
    assert "startup_cuda_oom" in _findings(graphs) and graphs.verdict.primary == "params_near_edge"
    assert _action(graphs, "limit_cuda_graphs").params["flag"] == "enforce-eager"
    sampler = _real("llm-d-787-sampler-warmup-qwen3-32b")
    lower = _action(sampler, "lower_max_num_seqs")
    assert (lower.params["current"], lower.params["target"]) == (1024, 256)
    serving = _real("vllm-13100-mistral-large-compose-099")
    assert "runtime_cuda_oom" in _findings(serving)
    assert _action(serving, "lower_memory_fraction").params["current"] == 0.99


def test_an_oom_without_a_phase_is_not_called_run_time():
    report = _real("vllm-26863-qwen3vl-3090-util-095")
    assert "cuda_oom" in _findings(report) and "runtime_cuda_oom" not in _findings(report)


def test_an_oom_on_a_card_the_weights_overfill_is_weights_too_large():
    report = _real("vllm-2363-mixtral-a100-40g")
    assert report.verdict.primary == "weights_too_large"
    assert report.gpu is None and _action(report, "bigger_card_or_tp").params["total_gib"] == 39.4


def test_fragmentation_in_the_oom_numbers_is_an_action():
    report = _real("tgi-1374-a100-40g-oom-after-warmup")
    assert _action(report, "set_expandable_segments").params["reserved_gib"] == 1.57


def test_a_layout_the_engine_refuses_is_parallelism_with_a_tp_that_divides_the_heads():
    report = _real("adaptthink-1-28-heads-tp8")
    assert report.verdict.primary == "parallelism_misconfig"
    fit = _action(report, "fit_tp_to_heads")
    assert (fit.params["current"], fit.params["target"], fit.params["heads"]) == (8, 4, 28)


def test_more_gpus_than_available_asks_for_them_sized_by_the_tp_read_from_the_command():
    report = _real("vllm-7107-tp8-gpus-exceed-cluster")
    assert report.verdict.primary == "parallelism_misconfig"
    assert _action(report, "check_visible_gpus").params["size"] == 8


def test_an_engine_that_cannot_start_for_nccl_is_platform_with_a_sized_shm():
    report = _real("minimax-42-nccl-dev-shm")
    assert report.verdict.primary == "platform_amplifier"
    assert _action(report, "add_shm").params["size_gib"] == 2


def test_an_engine_that_did_not_start_is_never_healthy():
    text = ("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192\n"
            "ERROR 02-11 03:31:07 [core.py:396] EngineCore failed to start.")
    report = triage(_log(text))
    assert report.verdict.evidence_coverage >= 0.4
    assert report.verdict.primary == "insufficient_evidence"


def test_preallocation_shown_only_by_a_launch_is_not_called_healthy():
    # the threads found nothing wrong, but a command (and one process row) shows no serving
    # engine: no health without evidence of it, and the report says what to capture
    for case in ("vllm-15204-3b-awq-16g-preallocated", "tgi-1599-l40s-saturates-preallocated"):
        report = _real(case)
        assert report.verdict.primary == "insufficient_evidence", case
        keys = [f.key for f in report.verdict.capture_next]
        assert "capture_metrics" in keys and "capture_nvidia_smi" in keys, (case, keys)
        commands = " ".join(f.params["command"] for f in report.verdict.capture_next)
        assert "kubectl" not in commands, "no Kubernetes evidence: no kubectl command"


def test_a_crash_looping_pod_is_platform_with_a_look_at_its_previous_log():
    report = _real("production-stack-800-router-crashloop")
    assert report.verdict.primary == "platform_amplifier"
    read = _action(report, "read_previous_log")
    assert (read.params["pod"], read.params["restarts"]) == ("vllm-deployment-router-7bdd445bbd-7hvhm", 5)


def test_kv_pressure_seen_only_in_a_log_caps_concurrency_at_what_the_cache_held():
    report = _real("sglang-26248-full-token-usage-1")
    assert report.verdict.primary == "kv_cache_pressure"
    cap = _action(report, "set_max_running")
    assert (cap.params["flag"], cap.params["target"], cap.params["running"]) == ("max-running-requests", 3, 4)


def test_not_checked_lists_each_missing_kind_once():
    report = _real("sglang-inferencex-2128-dsv4-h200")
    keys = [(f.key, f.source) for f in report.not_checked]
    assert len(keys) == len(set(keys))


def test_an_oom_that_loading_alone_filled_the_card_with_is_weights_too_large(tmp_path):
    log = (Path(__file__).parent.parent / "examples" / "weights-too-large-l4" / "logs.txt").read_text()
    report = triage(_log(log.replace("Qwen/Qwen2.5-14B-Instruct", "an-unknown/model")))
    assert report.verdict.primary == "weights_too_large"
    assert _action(report, "quantize_weights_unnamed").params == {"weights_gib": 21.9, "total_gib": 22.1}


def test_tp_without_a_shm_volume_explains_an_engine_that_did_not_start(tmp_path):
    (tmp_path / "deployment.yaml").write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: vllm, namespace: llm}\nspec:\n  template:\n"
        "    spec:\n      containers:\n        - name: vllm\n          image: vllm/vllm-openai:v0.10.1\n"
        "          args: [\"--model\", \"m\", \"--tensor-parallel-size\", \"2\"]\n"
        "          resources: {limits: {nvidia.com/gpu: \"2\"}}\n")
    (tmp_path / "logs.txt").write_text((REAL / "llm-d-352-dp16-dev-shm-crashloop" / "logs.txt").read_text())
    report = triage(load_bundle(tmp_path))
    assert report.verdict.primary == "platform_amplifier"
    assert _action(report, "add_shm").params["size_gib"] == 4


def test_with_the_engine_unknown_the_margin_is_worded_for_every_engine():
    report = _real("vllm-15598-oom-44g-cudagraph")
    assert report.engine is None
    assert _action(report, "add_memory_margin_any").params == {"margin_gib": 5.3, "total_gib": 44.5}


def test_a_fraction_set_low_on_purpose_is_stepped_up_not_taken_to_the_default():
    report = _real("vllm-14376-two-tinyllama-l40s-v1")
    raise_ = _action(report, "raise_memory_fraction")
    assert (raise_.params["current"], raise_.params["target"]) == (0.2, 0.4)


def test_an_oom_while_serving_is_the_margin_beside_the_preallocated_cache_not_kv_pressure():
    # 0.9 of the card, below the edge: the KV cache was preallocated, the long prompt's
    # activations ran out in what was left beside it
    report = _real("vllm-13067-dsr1-awq-a800-long-prompt-oom")
    oom = next(f for c in report.checks for f in c.findings if f.id == "runtime_cuda_oom")
    assert oom.supports == ("params_near_edge",)
    assert [c.id for c in report.verdict.causes] == ["params_near_edge"]


def test_a_flag_set_to_its_value_or_its_unset_default_is_no_change():
    from runbooks.model.changes import SetArg
    from runbooks.triage.actions import is_no_op, tier_of
    from runbooks.triage.context import build_context

    ctx = build_context(Evidence(logs=parse_server_log("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192")))
    assert is_no_op(ctx, SetArg("vllm", "max-model-len", 8192, 8192))
    assert is_no_op(ctx, SetArg("vllm", "gpu-memory-utilization", None, 0.9))  # vLLM's default
    assert not is_no_op(ctx, SetArg("vllm", "gpu-memory-utilization", None, 0.88))
    assert not is_no_op(ctx, SetArg("vllm", "max-batch-total-tokens", 16000, None))  # an unset is a change
    assert (tier_of("quantize_weights"), tier_of("split_pools"), tier_of("lower_max_num_seqs")) == (
        "escalate", "now", "now")


def test_a_probe_answered_not_found_is_a_wrong_path_not_a_slow_start():
    report = _real("llm-d-inference-sim-45-liveness-404-restarts")
    assert report.verdict.primary == "platform_amplifier"
    assert "probe_path_not_found" in _findings(report)
    ids = [a.id for a in report.actions]
    assert "fix_probe_path" in ids and "add_startup_probe" not in ids
    assert _action(report, "fix_probe_path").params["answer"] == "statuscode: 404"


# ----------------------------------------------------------------------------- TGI's prefill refusal

_TGI_REFUSAL = "RuntimeError: Not enough memory to handle {n} prefill tokens. You need to decrease `--max-batch-prefill-tokens`"


def _tgi(image: str, args: str, refused: int):
    return triage(_log(f"docker run --gpus all ghcr.io/huggingface/text-generation-inference:{image} {args}\n"
                       + _TGI_REFUSAL.format(n=refused)))


def _changes(action) -> dict[str, tuple]:
    return {c.flag: (c.old, c.new) for c in action.changes}


def test_tgi_2_with_the_launchers_default_prefill_lowers_the_input_limit_the_default_follows():
    """#2301: the prefill batch is the launcher's default (input + 50), so there is no flag to
    halve; 2.x refuses a batch below the input limit, so the limit comes down and the default
    batch follows it."""
    report = _real("tgi-2301-llama31-70b-131k-prefill-4xh100")
    act = _action(report, "lower_input_with_prefill")
    assert (act.params["current"], act.params["target"], act.params["prefill"], act.params["prefill_target"]) == (
        131072, 65536, 131122, 65586)
    assert _changes(act) == {"max-input-length": (131072, 65536)}  # the spelling the command uses
    assert "lower_batch_prefill_tokens" not in {a.id for a in report.actions}


def test_an_unchunked_tgi_3_lowers_the_input_limit_with_the_halved_batch():
    """#3130: halving 31,000 under a 30,000-token input limit is refused by TGI 3.2's router for a
    model it does not chunk (Gemma 3 on 3.2), so both come down."""
    act = _action(_real("tgi-3130-gemma3-27b-31k-prefill-4xa100"), "lower_input_with_prefill")
    assert _changes(act) == {"max-input-length": (30000, 15360), "max-batch-prefill-tokens": (31000, 15500)}
    assert act.changes[1].new >= act.changes[0].new


def test_a_chunking_tgi_3_halves_only_the_batch():
    report = _tgi("3.3.4", "--model-id meta-llama/Llama-3.1-8B-Instruct --max-input-tokens 30000 "
                           "--max-total-tokens 32000 --max-batch-prefill-tokens 16000", 16000)
    assert {a.id for a in report.actions} >= {"lower_batch_prefill_tokens"}
    assert "lower_input_with_prefill" not in {a.id for a in report.actions}
    assert _changes(_action(report, "lower_batch_prefill_tokens")) == {"max-batch-prefill-tokens": (16000, 8000)}


def test_a_halved_batch_still_above_the_input_limit_is_the_batch_alone():
    report = _tgi("2.2.0", "--model-id meta-llama/Llama-3.1-8B-Instruct --max-input-tokens 4095 "
                           "--max-total-tokens 4096 --max-batch-prefill-tokens 32768", 32768)
    assert _changes(_action(report, "lower_batch_prefill_tokens")) == {"max-batch-prefill-tokens": (32768, 16384)}
    assert "lower_input_with_prefill" not in {a.id for a in report.actions}


def test_an_unknown_version_does_not_assume_chunking():
    report = triage(_log("text-generation-launcher --model-id meta-llama/Llama-3.1-8B-Instruct --max-input-tokens "
                         "8000 --max-total-tokens 8192 --max-batch-prefill-tokens 8192\n" + _TGI_REFUSAL.format(n=8192)))
    act = _action(report, "lower_input_with_prefill")
    assert _changes(act) == {"max-input-tokens": (8000, 4096), "max-batch-prefill-tokens": (8192, 4096)}


def _tgi_refused_total(flags: str):
    """The fit of TGI 3.0.0's total to the 20,000 blocks it printed, launched with `flags`."""
    report = triage(_log("docker run --gpus all ghcr.io/huggingface/text-generation-inference:3.0.0 --model-id "
                         f"meta-llama/Llama-3.1-8B-Instruct {flags}\n"
                         "2024-12-11T10:04:03.592966Z  INFO text_generation_launcher: KV-cache blocks: 20000, size: 1\n"
                         "Error: Backend(NotEnoughMemory(32000))"))
    return _action(report, "fit_max_model_len")


def test_a_lowered_tgi_total_brings_the_input_limit_under_it():
    """TGI starts only with --max-input-tokens below --max-total-tokens (launcher/src/main.rs
    :2160@v3.3.7): fitting the total to the printed cache lowers the input limit with it."""
    fit = _tgi_refused_total("--max-input-tokens 30000 --max-total-tokens 32000")
    assert _changes(fit) == {"max-total-tokens": (32000, 19456), "max-input-tokens": (30000, 19455)}
    assert fit.params["input_follows"] == {"flag": "max-input-tokens", "current": 30000, "target": 19455}
    from bot.render.i18n import Catalog
    from bot.render.wording import action_text
    text = action_text(Catalog.load("en"), fit)
    assert text["title"].endswith(", and --max-input-tokens from 30,000 to 19,455: TGI starts only with its input "
                                  "limit below the total")
    assert text["rollback"].endswith(", and --max-input-tokens back to 30,000")
    # an input limit already below the new total stays as it is
    fit = _tgi_refused_total("--max-input-tokens 4000 --max-total-tokens 32000")
    assert _changes(fit) == {"max-total-tokens": (32000, 19456)} and "input_follows" not in fit.params
    # an input limit left unset is TGI's default beside the new total (total - 1): it follows, nothing is added
    fit = _tgi_refused_total("--max-total-tokens 32000")
    assert _changes(fit) == {"max-total-tokens": (32000, 19456)} and "input_follows" not in fit.params


def test_a_tgi_action_whose_limits_tgi_would_still_refuse_is_not_offered():
    from runbooks.model.changes import SetArg
    from runbooks.triage.context import build_context
    from runbooks.triage.failure_actions import tgi_limits_held
    ev = _log("docker run ghcr.io/huggingface/text-generation-inference:2.2.0 --model-id m --max-input-tokens 4000 "
              "--max-total-tokens 8000 --max-batch-total-tokens 8000\n" + _TGI_REFUSAL.format(n=4050))
    ctx = build_context(ev)
    # the total over the given --max-batch-total-tokens: refused by 2.2.0's launcher (main.rs:1567-1572)
    assert tgi_limits_held(ctx, (SetArg(None, "max-total-tokens", 8000, 12000),), {}) is None
    held = tgi_limits_held(ctx, (SetArg(None, "max-total-tokens", 8000, 6000),), {})
    assert held == (SetArg(None, "max-total-tokens", 8000, 6000),)


def test_an_unset_input_limit_is_the_launchers_default_when_the_batch_is_halved():
    """TGI 2.2 with --max-total-tokens 8192 and no input limit takes 8191 (the total - 1 for a
    model this long, `engine_defaults.tgi_limits`): half the 8192-token batch is below it, so
    the input limit is set with the batch."""
    report = _tgi("2.2.0", "--model-id meta-llama/Llama-3.1-8B-Instruct --max-total-tokens 8192 "
                           "--max-batch-prefill-tokens 8192", 8192)
    act = _action(report, "lower_input_with_prefill")
    assert act.params["current"] == 8191
    assert _changes(act) == {"max-input-tokens": (None, 4096), "max-batch-prefill-tokens": (8192, 4096)}


def test_a_tgi_warm_up_oom_halves_the_prefill_batch_as_tgis_own_refusal_does():
    """A torch OOM the traceback places in TGI's warm-up (its largest prefill batch) gets the
    prefill action, not the stop-the-bleeding safe flags."""
    report = triage(_log(
        "docker run --gpus all ghcr.io/huggingface/text-generation-inference:3.2.0 --model-id google/gemma-3-27b-it "
        "--num-shard 4 --max-input-tokens 32000 --max-total-tokens 64000 --max-batch-prefill-tokens 32000\n"
        "INFO text_generation_router_v3: backends/v3/src/lib.rs:125: Warming up model\n"
        '  File "/usr/src/server/text_generation_server/models/flash_causal_lm.py", line 1583, in warmup\n'
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 30.52 GiB. GPU 0 has a total capacity of "
        "79.10 GiB of which 14.37 GiB is free. Process 3342032 has 64.72 GiB memory in use. 79.10 GiB allowed; Of "
        "the allocated memory 62.19 GiB is allocated by PyTorch, and 1.00 GiB is reserved by PyTorch but unallocated."))
    ids = {a.id for a in report.actions}
    assert "lower_input_with_prefill" in ids and "set_safe_flags" not in ids
    act = _action(report, "lower_input_with_prefill")
    assert _changes(act) == {"max-input-tokens": (32000, 15360), "max-batch-prefill-tokens": (32000, 16000)}
