"""Regenerate the long, repetitive files of the example bundles (access logs, server logs).

The short files (nvidia-smi.txt, deployment.yaml, ...) are written by hand. Output is
deterministic (fixed seeds), so `python examples/generate.py` leaves git clean.
"""

from __future__ import annotations

import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).parent

#: (input range, output range) per bucket, inside the runbook's limits
_SHAPES = {
    "S": ((40, 512), (8, 128)),
    "M": ((513, 2048), (30, 256)),
    "L": ((2049, 8000), (60, 512)),
    "XL": ((8193, 30000), (100, 1500)),
}


def _request(rng: random.Random, shares: dict[str, float], cap_in: int | None = None) -> tuple[int, int]:
    bucket = rng.choices(list(shares), weights=list(shares.values()))[0]
    (lo_in, hi_in), (lo_out, hi_out) = _SHAPES[bucket]
    if bucket == "L" and cap_in:
        lo_in = max(lo_in, cap_in - 1500)
        hi_in = min(hi_in, cap_in - 200)
    return rng.randint(lo_in, hi_in), rng.randint(lo_out, hi_out)


def runbook_incident() -> None:
    """Qwen2.5-7B on one A100: a campaign moves the long share from 8% to 37% in two hours."""
    rng = random.Random(20260309)
    out = HERE / "runbook-incident"
    start = datetime(2026, 3, 9, 18, 20, tzinfo=UTC)
    lines = []
    for i in range(2400):
        at = start + timedelta(seconds=i * 3)
        progress = i / 2400
        long_share = 0.08 + 0.29 * min(1.0, max(0.0, (progress - 0.25) / 0.5))
        shares = {"S": 0.55 * (1 - long_share), "M": 0.45 * (1 - long_share), "L": long_share, "XL": 0.0}
        tin, tout = _request(rng, shares, cap_in=8100)
        lines.append(f"time={at:%Y-%m-%dT%H%MZ} input_tokens={tin} output_tokens={tout} model=qwen2.5-7b")
    (out / "access.log").write_text("\n".join(lines) + "\n")

    log = [
        "INFO 03-09 08:02:51 api_server.py:585] vLLM API server version 0.6.6",
        "INFO 03-09 08:02:51 api_server.py:586] args: Namespace(model='Qwen/Qwen2.5-7B-Instruct', "
        "served_model_name=['qwen2.5-7b'], max_model_len=8192, max_num_seqs=128, gpu_memory_utilization=0.95)",
        "INFO 03-09 08:03:40 model_runner.py:1099] Loading model weights took 14.2487 GB",
        "INFO 03-09 08:03:44 worker.py:241] Memory profiling takes 3.62 seconds",
        "INFO 03-09 08:03:44 worker.py:241] the current vLLM instance can use total_gpu_memory (79.15GiB) "
        "x gpu_memory_utilization (0.95) = 75.19GiB",
        "INFO 03-09 08:03:44 worker.py:241] model weights take 14.25GiB; non_torch_memory takes 0.30GiB; "
        "PyTorch activation peak memory takes 1.42GiB; the rest of the memory reserved for KV Cache is 59.22GiB.",
        "INFO 03-09 08:03:44 gpu_executor.py:76] # GPU blocks: 69305, # CPU blocks: 4681",
        "INFO 03-09 08:03:44 gpu_executor.py:80] Maximum concurrency for 8192 tokens per request: 135.36x",
        "INFO 03-09 08:04:21 model_runner.py:1535] Graph capturing finished in 37 secs, took 0.61 GiB",
    ]
    t = datetime(2026, 3, 9, 18, 20, 5)
    preempted = 0
    for i in range(0, 2400, 20):
        progress = i / 2400
        usage = min(99.2, 41.0 + 60 * max(0.0, progress - 0.2))
        pending = 0 if progress < 0.55 else int(2 + 16 * (progress - 0.55) / 0.45)
        running = min(128, int(60 + 70 * progress))
        log.append(
            f"INFO {t:%m-%d %H:%M:%S} metrics.py:349] Avg prompt throughput: {4200 + 30 * i % 900:.1f} tokens/s, "
            f"Avg generation throughput: {610 - i % 120:.1f} tokens/s, Running: {running} reqs, Swapped: 0 reqs, "
            f"Pending: {pending} reqs, GPU KV cache usage: {usage:.1f}%, CPU KV cache usage: 0.0%."
        )
        if usage > 97 and i % 60 == 0:
            preempted = 1 if preempted == 0 else preempted + 50
            log.append(
                f"WARNING {t:%m-%d %H:%M:%S} scheduler.py:1481] Sequence group chatcmpl-{i:x}a1 is preempted by "
                "PreemptionMode.RECOMPUTE mode because there is not enough KV cache space. This can affect the "
                "end-to-end performance. Increase gpu_memory_utilization or tensor_parallel_size to provide more "
                f"KV cache memory. total_num_cumulative_preemption={preempted}"
            )
        t += timedelta(seconds=60)
    for minute in (14, 15, 17, 17, 18, 19):
        log.append(f'time=2026-03-09T20{minute:02d}Z level=warn msg="request rejected due to insufficient KV cache blocks"')
    log.append('time=2026-03-09T2019Z level=warn msg="prefill rejected: KV cache full, request queued"')
    (out / "logs.txt").write_text("\n".join(log) + "\n")


def mixed_pool() -> None:
    """Llama 3.1 8B on one H100: RAG (long) and chat (short) share a pool; TTFT suffers."""
    rng = random.Random(42)
    out = HERE / "mixed-pool-vllm-v1"
    start = 1773072000  # 2026-03-09T16:00:00Z
    lines = []
    for i in range(3000):
        shares = {"S": 0.58, "M": 0.15, "L": 0.2, "XL": 0.07}
        tin, tout = _request(rng, shares)
        doc = {"id": f"chatcmpl-{i:06x}", "object": "chat.completion", "created": start + i * 2,
               "model": "llama-3.1-8b", "usage": {"prompt_tokens": tin, "completion_tokens": tout,
                                                  "total_tokens": tin + tout}}
        lines.append(json.dumps(doc, separators=(",", ":")))
    (out / "access.log").write_text("\n".join(lines) + "\n")


def healthy() -> None:
    rng = random.Random(7)
    out = HERE / "healthy-vllm-v1"
    start = datetime(2026, 5, 2, 9, 0, tzinfo=UTC)
    lines = []
    for i in range(1800):
        tin, tout = _request(rng, {"S": 0.7, "M": 0.27, "L": 0.03, "XL": 0.0})
        lines.append(f"ts={(start + timedelta(seconds=2 * i)).isoformat()} model=qwen3-8b "
                     f"prompt_tokens={tin} completion_tokens={tout} status=200")
    (out / "access.log").write_text("\n".join(lines) + "\n")


def params_edge_sglang() -> None:
    rng = random.Random(11)
    out = HERE / "params-edge-sglang"
    start = datetime(2026, 4, 14, 1, 0, tzinfo=UTC)
    lines = []
    for i in range(1200):
        tin, tout = _request(rng, {"S": 0.45, "M": 0.45, "L": 0.1, "XL": 0.0})
        lines.append(f"time={(start + timedelta(seconds=3 * i)):%Y-%m-%dT%H:%M:%SZ} input_tokens={tin} "
                     f"output_tokens={tout} model=qwen2.5-7b")
    (out / "access.log").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    runbook_incident()
    mixed_pool()
    healthy()
    params_edge_sglang()
