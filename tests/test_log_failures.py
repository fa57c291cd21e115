"""CUDA OOMs read for their numbers and phase; layouts the engines refuse; one count per event.

The lines are real (tests/data/real and the threads it cites), as posted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.parsers.log_failures import FailureReader, oom_numbers, parallel_error
from collectors.parsers.logs import parse_server_log

REAL = Path(__file__).parent / "data" / "real"
GIB = 2**30
MIB = 2**20


def _gib(n: int | None) -> float | None:
    return None if n is None else round(n / GIB, 2)


def test_torch_21_wording_with_the_capacty_misspelling():
    got = oom_numbers("CUDA out of memory. Tried to allocate 112.00 MiB. GPU 0 has a total capacty of 44.35 GiB of "
                      "which 53.38 MiB is free. Process 3663367 has 44.28 GiB memory in use. Of the allocated memory "
                      "37.38 GiB is allocated by PyTorch, and 275.68 MiB is reserved by PyTorch but unallocated.")
    assert got["tried_bytes"] == 112 * MIB
    assert (_gib(got["total_bytes"]), _gib(got["in_use_bytes"]), _gib(got["allocated_bytes"])) == (44.35, 44.28, 37.38)
    assert round(got["reserved_unallocated_bytes"] / MIB, 2) == 275.68


def test_the_old_wording_gives_the_same_fields():
    got = oom_numbers("Server error: CUDA out of memory. Tried to allocate 2.00 MiB (GPU 0; 22.20 GiB total capacity; "
                      "20.75 GiB already allocated; 3.12 MiB free; 22.20 GiB allowed; 20.86 GiB reserved in total by "
                      "PyTorch)")
    assert (_gib(got["total_bytes"]), _gib(got["allocated_bytes"])) == (22.2, 20.75)
    assert round(got["free_bytes"] / MIB, 2) == 3.12
    assert _gib(got["reserved_unallocated_bytes"]) == 0.11  # 20.86 reserved - 20.75 allocated


def test_tgis_warmup_allocation_error_gives_the_device_limit():
    got = oom_numbers("thread 'main' panicked at 'Unable to warmup model: Generation(\"Allocation on device 0 would "
                      "exceed allowed memory. (out of memory)\\nCurrently allocated     : 16.08 GiB\\nRequested"
                      "               : 4.83 GiB\\nDevice limit            : 22.20 GiB\\nFree (according to CUDA): "
                      "11.12 MiB")
    assert (_gib(got["total_bytes"]), _gib(got["allocated_bytes"])) == (22.2, 16.08)


def test_an_oom_wrapped_onto_the_next_line_is_read_whole():
    logs = parse_server_log((REAL / "vllm-26863-qwen3vl-3090-util-095" / "logs.txt").read_text())
    oom = logs.oom
    assert (_gib(oom.total_bytes), _gib(oom.in_use_bytes), _gib(oom.allocated_bytes)) == (23.57, 23.4, 22.88)
    assert oom.phase is None  # nothing in the paste says when: not "at run time" by default


@pytest.mark.parametrize(("case", "phase"), [
    ("runpod-40-cudagraph-capture-44g", "cudagraph"),       # newest first: the marker follows the OOM
    ("vllm-13100-mistral-large-compose-099", "serving"),    # serving_chat.py frames before it
    ("tgi-653-llama2-7b-a10g-k8s-prefill-oom", "serving"),  # the prefill span on the OOM line itself
    ("llm-d-787-sampler-warmup-qwen3-32b", "sampler_warmup"),
    ("vllm-2363-mixtral-a100-40g", None),
])
def test_the_phase_comes_from_the_lines_around_the_oom(case, phase):
    assert parse_server_log((REAL / case / "logs.txt").read_text()).oom.phase == phase


def test_a_traceback_frame_names_the_phase():
    reader = FailureReader()
    for line in ('  File "/usr/local/lib/python3.12/dist-packages/vllm/model_executor/model_loader/loader.py", '
                 "line 406, in load_model",
                 "    model.load_weights(self._get_all_weights(model_config, model))",
                 "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 270.00 MiB. GPU 0 has a total "
                 "capacity of 22.05 GiB of which 119.12 MiB is free."):
        reader.feed(line)
    assert reader.oom().phase == "loading"


def test_an_oom_every_tp_rank_prints_counts_once():
    text = "\n".join(
        f"(VllmWorker rank={r} pid=1{r}) ERROR 03-19 07:27:53 [multiproc_executor.py:375] torch.OutOfMemoryError: "
        f"CUDA out of memory. Tried to allocate 1.74 GiB. GPU {r} has a total capacity of 23.57 GiB of which 605.88 "
        f"MiB is free. Process 1332{r} has 22.97 GiB memory in use."
        for r in (0, 1))
    logs = parse_server_log(text, year=2025)
    assert logs.count("cuda_oom") == 1 and logs.oom.count == 1


def test_a_retraction_every_tp_rank_prints_counts_once():
    line = "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_token_ratio: 0.3397 -> 0.3530"
    logs = parse_server_log(f"[2025-03-01 12:05:00 TP0] {line}\n[2025-03-01 12:05:00 TP1] {line}\n"
                            f"[2025-03-01 12:06:00 TP0] {line}")
    assert logs.count("sglang_retraction") == 6  # two events of 3, not four


@pytest.mark.parametrize(("line", "kind", "heads", "size", "gpus"), [
    ("ValueError: Total number of attention heads (28) must be divisible by tensor parallel size (8)",
     "heads_indivisible", 28, 8, None),
    ("ValueError: Total number of attention heads (12) must be divisible by tensor parallel size (8).",
     "heads_indivisible", 12, 8, None),
    ("Tensor parallel size (2) exceeds available GPUs (1)", "gpus_insufficient", None, 2, 1),
    ("ValueError: The number of required GPUs exceeds the total number of available GPUs in the cluster.",
     "gpus_insufficient", None, None, None),
    ("ValueError: The number of GPUs per node is not divisible by the number of tensor parallelism.",
     "gpus_insufficient", None, None, None),
])
def test_layouts_the_engines_refuse(line, kind, heads, size, gpus):
    err = parallel_error(line)
    assert (err.kind, err.heads, err.size, err.gpus) == (kind, heads, size, gpus)


def test_log_prefixes_of_compose_ranks_and_pipes_are_taken_off():
    logs = parse_server_log(
        "vllm-1  | ERROR 11-18 18:07:28 engine.py:366] ValueError: No available memory for the cache blocks. Try "
        "increasing `gpu_memory_utilization` when initializing the engine.\n"
        "[rank0]:   File \"/usr/local/lib/python3.10/dist-packages/vllm/scripts.py\", line 28, in serve\n"
        "2024-04-27 10:13:05 | ERROR | stderr | Traceback (most recent call last):", year=2024)
    assert logs.count("no_cache_blocks") == 1
    assert logs.startup.error.startswith("ValueError: No available memory")
    assert logs.first_at is not None and logs.first_at.year == 2024


def test_startup_figures_the_engines_print_about_the_card():
    refusal = parse_server_log((REAL / "vllm-25350-kv-fp8-221k" / "logs.txt").read_text()).startup
    assert (refusal.max_model_len, refusal.estimated_max_model_len) == (221000, 122080)
    held = parse_server_log((REAL / "vllm-10533-two-instances-a100" / "logs.txt").read_text()).startup
    assert (held.total_gpu_gib, held.initial_usage_gib) == (79.15, 68.01)
    sglang = parse_server_log((REAL / "sglang-inferencex-2128-dsv4-h200" / "logs.txt").read_text()).startup
    assert (sglang.weights_gib, sglang.available_after_load_gib) == (125.65, 12.25)
    warmup = parse_server_log("RuntimeError: CUDA out of memory occurred when warming up sampler with 1024 dummy "
                              "requests. Please try lowering `max_num_seqs` or `gpu_memory_utilization` when "
                              "initializing the engine.").startup
    assert warmup.max_num_seqs == 1024
