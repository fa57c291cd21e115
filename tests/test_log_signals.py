"""Server logs: signal counts, start-up memory, stats lines, timestamps and engine, per engine version.

The start-up figures in tests/data/logs are those printed in the calibration cases
(calibration/startup_cases.json): each file names its case in EXPECTED below.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.parsers.logs import parse_server_log, read_server_log
from runbooks.catalogs.signals import RUNBOOK_SIGNALS, SIGNAL_KEYS, match_line
from runbooks.model.evidence import LogSignals, StartupMemory
from runbooks.model.serde import from_jsonable, to_jsonable

DATA = Path(__file__).parent / "data" / "logs"


def _read(name: str, year: int | None = 2025) -> LogSignals:
    return read_server_log(DATA / name, source=name, year=year)


# file -> (engine, version, startup fields that must be read, signal counts)
EXPECTED: dict[str, tuple[str | None, str | None, dict[str, object], dict[str, int]]] = {
    # vllm-10517-llama31-8b-rtx3090-20k: the 0.6.4 "Memory profiling results" line
    "vllm_v064_profiling.log": (
        "vllm", "0.6.4.post1",
        {"total_gpu_gib": 23.58, "gpu_memory_utilization": 0.9, "weights_gib": 14.9888, "non_torch_gib": 0.35,
         "kv_cache_gib": 3.81, "gpu_blocks": 1952, "max_concurrency": 1.56, "max_model_len": 20000,
         "cudagraph_gib": 0.43},
        {"vllm_preemption": 51, "context_length_exceeded": 1},
    ),
    # file-qwen25-7b-rtx3090-v066: 0.6.6, the three-line profiling message (21.21 = 14.25+1.09+0.10+5.77)
    "vllm_v066_profiling.log": (
        "vllm", "0.6.6",
        {"total_gpu_gib": 23.57, "gpu_memory_utilization": 0.9, "weights_gib": 14.2487, "non_torch_gib": 0.1,
         "activation_gib": 1.09, "kv_cache_gib": 5.77, "gpu_blocks": 6749, "max_concurrency": 13.18,
         "max_model_len": 8192},
        {},
    ),
    # file-qwen3-235b-2507-fp8-4xl40s-v1: V1 0.10 with process tags, separate size and concurrency lines
    "vllm_v1_010.log": (
        "vllm", "0.10.2",
        {"weights_gib": 27.7208, "kv_cache_gib": 10.65, "kv_cache_tokens": 238208, "max_concurrency": 7.27,
         "max_model_len": 32768, "cudagraph_gib": 3.45},
        {},
    ),
    # file-qwen25-7b-awq-16gb-v1: the newer "Free memory on device ... Actual usage" summary
    "vllm_v1_summary.log": (
        "vllm", None,
        {"total_gpu_gib": 15.99, "gpu_memory_utilization": 0.9, "weights_gib": 5.2903, "activation_gib": 1.04,
         "non_torch_gib": 0.06, "cudagraph_gib": 0.48, "kv_cache_gib": 8.0, "kv_cache_tokens": 149712,
         "max_concurrency": 4.57, "max_model_len": 32768},
        {},
    ),
    # file-llama31-8b-24gb-131k-fail: V0 refuses 131072 with 37696 tokens of KV cache
    "vllm_v0_kv_too_small.log": (
        "vllm", None,
        {"total_gpu_gib": 22.07, "gpu_memory_utilization": 0.9, "weights_gib": 14.9888, "non_torch_gib": 0.05,
         "activation_gib": 0.22, "kv_cache_gib": 4.6, "gpu_blocks": 2356, "max_concurrency": 0.29,
         "max_model_len": 131072, "kv_cache_tokens": 37696},
        {"kv_startup_too_small": 1},
    ),
    "vllm_v1_kv_too_small.log": (
        "vllm", None,
        {"kv_cache_gib": 13.15, "max_model_len": 131072},
        {"kv_startup_too_small": 1, "engine_init_failed": 1, "engine_start_failed": 1},
    ),
    "vllm_runtime_errors.log": (
        "vllm", None,
        {"total_gpu_gib": 22.04, "gpu_memory_utilization": 0.88},
        {"cuda_oom": 2, "sampler_warmup_oom": 1, "free_below_utilization": 1, "no_cache_blocks": 1,
         "vllm_port_uri": 1, "probe_killed": 1, "oom_killed": 1},
    ),
    # sglang-llama31-8b-24gb
    "sglang_startup.log": (
        "sglang", None,
        {"weights_gib": 15.02, "kv_cache_tokens": 38141, "kv_cache_gib": 4.66, "cudagraph_gib": 0.11,
         "max_model_len": 131072},
        {"sglang_retraction": 4},
    ),
    # sglang-qwq-32b-4xl4: no #tokens on the allocation line; max_total_num_tokens gives them
    "sglang_old_oom.log": (
        "sglang", None,
        {"weights_gib": 15.54, "kv_cache_gib": 2.84, "kv_cache_tokens": 46611, "max_model_len": 131072},
        {"sglang_retraction": 2, "sglang_not_enough_memory": 1, "context_length_exceeded": 1},
    ),
    # tgi-llama3-8b-class-a10g: 1191 blocks x 16 = 19056
    "tgi_text.log": (
        "tgi", None,
        {"gpu_blocks": 1191, "kv_cache_tokens": 19056},
        {"tgi_prefill_reduced": 1, "model_overloaded": 1, "context_length_exceeded": 1},
    ),
    "tgi_json.log": (
        "tgi", None,
        {"kv_cache_tokens": 52160},
        {"tgi_prefill_oom": 1, "tgi_max_total_tokens_oom": 1},
    ),
    # lines from the real-evidence corpus (tests/data/real) and the threads it cites: the
    # engine cannot start (NCCL, /dev/shm, NVML), a layout it refuses, TGI's batch budget;
    # no line names vLLM or SGLang, so the one engine-specific signal (TGI's) names the engine
    "engine_start_failures.log": (
        "tgi", None,
        {"error": "Not enough memory to handle 16000 total tokens with 2 prefill tokens. You need to decrease "
                  "`--max-batch-total-tokens` or `--max-batch-prefill-tokens"},
        {"nccl_error": 1, "engine_start_failed": 2, "shm_exhausted": 1, "cuda_driver_error": 1, "tp_indivisible": 1,
         "gpus_insufficient": 1, "tgi_total_tokens_oom": 1},
    ),
    "runbook_keywords.log": (
        None, None,
        {},
        {"cuda_oom": 1, "alloc_failed": 1, "prefill_rejected": 1, "queue_full": 1, "kv_insufficient": 2},
    ),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_log_gives_its_engine_startup_figures_and_signals(name):
    engine, version, startup, counts = EXPECTED[name]
    logs = _read(name)
    assert logs.source == name
    assert (logs.engine, logs.engine_version) == (engine, version)
    for key, value in counts.items():
        assert logs.count(key) == value, key
    assert {s.key for s in logs.signals} == set(counts)
    if startup:
        assert logs.startup is not None
        for field, value in startup.items():
            got = getattr(logs.startup, field)
            assert got == pytest.approx(value), field
    else:
        assert logs.startup is None


def test_every_signal_key_is_found_in_the_recorded_logs():
    """...or in the lines rendered from the engines' own format strings (tests/data/engine_lines),
    for lines no recorded log holds yet."""
    import yaml

    seen = set()
    for name in EXPECTED:
        seen |= {s.key for s in _read(name).signals}
    corpus = yaml.safe_load((DATA.parent / "engine_lines" / "lines.yaml").read_text(encoding="utf-8"))
    for entry in corpus:
        line = entry["prefix"] + entry["format"].format(**entry["values"])
        seen |= {s.key for s in parse_server_log(line, year=2026).signals}
    assert seen == set(SIGNAL_KEYS)
    assert set(RUNBOOK_SIGNALS) <= seen


def test_startup_capacity_error_is_kept_clipped():
    startup = _read("vllm_v1_kv_too_small.log").startup
    assert startup is not None and startup.error is not None
    assert startup.error.startswith("ValueError: To serve at least one request with the models's max seq len (131072)")
    assert len(startup.error) == 300


def test_preemption_count_is_the_cumulative_total_not_the_number_of_warnings():
    # V0 warns on the 1st and every 50th preemption: two warnings, 51 preemptions
    logs = _read("vllm_v064_profiling.log")
    sig = next(s for s in logs.signals if s.key == "vllm_preemption")
    assert sig.count == 51
    assert sig.first_line == 11
    assert sig.first_at == datetime(2025, 11, 20, 9, 20, 14, tzinfo=UTC)
    assert sig.last_at == datetime(2025, 11, 20, 9, 23, 40, tzinfo=UTC)
    assert sig.example is not None and "PreemptionMode.RECOMPUTE" in sig.example


def test_a_preemption_is_read_by_its_reason_clause_however_its_start_is_worded():
    # as pasted in vllm#8219 (retyped in bold: "preempted in", "can impact")
    line = ("**Sequence group cmpl-71c6-0 is preempted in PreemptionMode.RECOMPUTE mode because there is not enough"
            " KV cache space. This can impact end-to-end performance. total_num_cumulative_preemption=1**")
    assert parse_server_log([line]).count("vllm_preemption") == 1
    assert parse_server_log(["a request was preempted by the operator"]).count("vllm_preemption") == 0


def test_preemption_warnings_without_a_total_count_one_each():
    line = "WARNING 05-10 12:00:05 scheduler.py:1057] Sequence group 7 is preempted by PreemptionMode.SWAP mode"
    assert parse_server_log([line, line, line]).count("vllm_preemption") == 3


def test_sglang_retractions_sum_the_retracted_requests():
    assert _read("sglang_startup.log").count("sglang_retraction") == 1 + 3


def test_signal_example_is_clipped_to_300_characters():
    logs = parse_server_log(["CUDA out of memory " + "x" * 1000])
    assert len(logs.signals[0].example or "") == 300


def test_a_sampler_warmup_oom_is_also_a_cuda_oom():
    hits = {h.key for h in match_line("RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests.")}
    assert hits == {"cuda_oom", "sampler_warmup_oom"}


def test_startup_summary_line_is_not_mistaken_for_the_free_memory_error():
    logs = _read("vllm_v1_summary.log")
    assert logs.count("free_below_utilization") == 0
    assert logs.startup is not None and logs.startup.error is None


# ------------------------------------------------------------------- stats lines


def test_vllm_v0_stats_give_last_and_peak_with_percent_as_ratio():
    logs = _read("vllm_v064_profiling.log")
    assert logs.stats_last is not None and logs.stats_peak is not None
    assert (logs.stats_last.running, logs.stats_last.waiting) == (10.0, 6.0)
    assert logs.stats_last.kv_cache_usage_ratio == pytest.approx(0.93)
    assert logs.stats_peak.waiting == 11.0
    assert logs.stats_peak.running == 12.0
    assert logs.stats_peak.kv_cache_usage_ratio == pytest.approx(0.991)
    assert logs.stats_peak.at == datetime(2025, 11, 20, 9, 20, 16, tzinfo=UTC)


def test_vllm_v1_stats_read_waiting_and_preemptions():
    logs = _read("vllm_v1_010.log")
    assert logs.stats_peak is not None and logs.stats_last is not None
    assert logs.stats_peak.waiting == 18.0
    assert logs.stats_peak.preemptions == 4.0
    assert logs.stats_peak.kv_cache_usage_ratio == pytest.approx(0.996)
    assert logs.stats_last.waiting == 7.0
    assert logs.stats_last.preemptions is None


def test_sglang_stats_read_both_dot_and_comma_variants():
    logs = _read("sglang_startup.log")
    assert logs.stats_peak is not None and logs.stats_last is not None
    assert logs.stats_peak.kv_cache_usage_ratio == pytest.approx(0.95)
    assert logs.stats_peak.waiting == 21.0
    assert logs.stats_peak.running == 38.0
    assert logs.stats_last.waiting == 12.0
    assert logs.stats_last.kv_cache_usage_ratio == pytest.approx(0.79)


# -------------------------------------------------------------------- timestamps


def test_vllm_month_day_stamps_need_a_year():
    line = "INFO 05-10 12:00:05 metrics.py:341] Running: 1 reqs, Swapped: 0 reqs, Pending: 0 reqs, GPU KV cache usage: 5.0%"
    assert parse_server_log([line]).first_at is None
    assert parse_server_log([line], year=2025).first_at == datetime(2025, 5, 10, 12, 0, 5, tzinfo=UTC)


def test_vllm_stamps_roll_over_into_the_next_year():
    lines = ["INFO 12-31 23:59:58 a.py:1] CUDA out of memory", "INFO 01-01 00:00:03 a.py:1] CUDA out of memory"]
    sig = parse_server_log(lines, year=2025).signals[0]
    assert sig.first_at == datetime(2025, 12, 31, 23, 59, 58, tzinfo=UTC)
    assert sig.last_at == datetime(2026, 1, 1, 0, 0, 3, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "at"),
    [
        ("(APIServer pid=1) INFO 10-17 07:35:01 [api_server.py:1839] CUDA out of memory",
         datetime(2025, 10, 17, 7, 35, 1, tzinfo=UTC)),
        ("\x1b[1;36m(EngineCore_DP0 pid=57)\x1b[0;0m ERROR 10-17 07:35:02 [core.py:7] CUDA out of memory",
         datetime(2025, 10, 17, 7, 35, 2, tzinfo=UTC)),
        ("2024-06-01T12:00:00.123456Z ERROR text_generation_launcher: CUDA out of memory",
         datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("2024-06-01T12:00:00.123456789Z INFO 06-01 12:00:00 a.py:1] CUDA out of memory",
         datetime(2024, 6, 1, 12, 0, 0, 123456, tzinfo=UTC)),
        ("[2025-03-01 12:00:00 DP0 TP0] CUDA out of memory", datetime(2025, 3, 1, 12, 0, tzinfo=UTC)),
        ("time=2026-03-09T2017Z level=error msg=\"CUDA out of memory\"", datetime(2026, 3, 9, 20, 17, tzinfo=UTC)),
        ('ts="2026-03-09 20:17:30+08:00" msg="CUDA out of memory"', datetime(2026, 3, 9, 12, 17, 30, tzinfo=UTC)),
        ("2025-01-02 03:04:05,678 - vllm - ERROR - CUDA out of memory",
         datetime(2025, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)),
        ('{"timestamp":"2024-09-10T08:00:40Z","level":"ERROR","fields":{"message":"CUDA out of memory"}}',
         datetime(2024, 9, 10, 8, 0, 40, tzinfo=UTC)),
    ],
)
def test_every_timestamp_shape_is_read(line, at):
    logs = parse_server_log([line], year=2025)
    assert logs.count("cuda_oom") == 1
    assert logs.signals[0].first_at == at
    assert logs.first_at == at


def test_out_of_order_lines_give_the_earliest_and_latest_time():
    lines = ["[2025-03-01 12:05:00 TP0] CUDA out of memory", "[2025-03-01 12:00:00 TP0] CUDA out of memory"]
    logs = parse_server_log(lines)
    assert logs.first_at == datetime(2025, 3, 1, 12, 0, tzinfo=UTC)
    assert logs.last_at == datetime(2025, 3, 1, 12, 5, tzinfo=UTC)
    assert logs.signals[0].first_line == 1


# --------------------------------------------------------------- reading files


def test_undecodable_and_overlong_lines_are_skipped_and_line_numbers_stay_right(tmp_path):
    path = tmp_path / "logs.txt"
    path.write_bytes(b"\xff\xfe garbage \x80\n" + b"y" * (200 * 1024) + b" CUDA out of memory\n"
                     + b"INFO 05-10 12:00:05 a.py:1] CUDA out of memory\n")
    logs = read_server_log(path, source="logs.txt", year=2025)
    assert logs.lines == 3
    assert logs.count("cuda_oom") == 1
    assert logs.signals[0].first_line == 3


def test_an_open_text_file_is_read_line_by_line():
    with open(DATA / "sglang_startup.log", encoding="utf-8") as fh:
        logs = parse_server_log(fh, source="sglang_startup.log")
    assert logs == _read("sglang_startup.log", year=None)
    assert logs.lines == 14


def test_a_whole_text_is_split_into_lines():
    text = (DATA / "tgi_text.log").read_text()
    assert parse_server_log(text, source="tgi_text.log") == _read("tgi_text.log")


def test_empty_log_gives_no_signals():
    logs = parse_server_log([], source="logs.txt")
    assert logs == LogSignals(source="logs.txt")


def test_log_signals_round_trip_through_json():
    for name in EXPECTED:
        logs = _read(name)
        assert from_jsonable(LogSignals, to_jsonable(logs)) == logs


def test_a_restart_with_other_figures_replaces_the_first_ones():
    lines = ["INFO 05-10 12:00:05 a.py:1] # GPU blocks: 1000, # CPU blocks: 2048",
             "INFO 05-10 12:10:05 a.py:1] # GPU blocks: 800, # CPU blocks: 2048"]
    assert parse_server_log(lines).startup == StartupMemory(gpu_blocks=800)


def test_torch_oom_message_gives_the_card_size_when_no_startup_line_did():
    new = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total capacity of 22.05 GiB of which 119.12 MiB is free."
    old = "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 39.59 GiB total capacity; 37.0 GiB already allocated)"
    assert parse_server_log([new]).startup == StartupMemory(total_gpu_gib=22.05)
    assert parse_server_log([old]).startup == StartupMemory(total_gpu_gib=39.59)
    profiled = "INFO 05-10 12:00:05 worker.py:1] Memory profiling results: total_gpu_memory=23.58GiB kv_cache_size=3.81GiB"
    startup = parse_server_log([profiled, new]).startup
    assert startup is not None and startup.total_gpu_gib == 23.58
