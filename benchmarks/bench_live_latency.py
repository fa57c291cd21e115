"""Benchmark: live collection of an 8-pod Deployment when every API call is 100 ms slower.

The stand-in API server (tests/support/fake_kube.py) serves the incident scenario cloned to 8 pods,
each on its own node, each restarted once (so every pod has a previous log to read). The
collection runs twice: with no injected latency and with 100 ms on every API call. The
difference shows how many round trips deep the collection is (the contract: at most 0.6 s,
i.e. six round trips, whatever the number of pods).

    python -m benchmarks.bench_live_latency [--pods 8] [--latency-ms 100] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from collectors.live import LiveOptions, collect_live
from tests.support.kube_fixtures import add_replicas, running_scenario


def _one(sc, opts: LiveOptions) -> tuple[float, int]:
    t0 = time.perf_counter()
    result = collect_live("llm", "vllm-server", opts, datetime.now(UTC), api=sc.api("prod"))
    return time.perf_counter() - t0, len(result.evidence.pods)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--latency-ms", type=float, default=100.0)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    opts = LiveOptions(source_deadline_s=10.0, total_deadline_s=30.0)
    with tempfile.TemporaryDirectory() as tmp, running_scenario("vllm-incident", Path(tmp)) as sc:
        engine = next(iter(sc.engines.values()))
        existing = 2
        add_replicas(sc.kube, "llm", "vllm-server-7d9c8b6f4-2xkqp", args.pods - existing, engine.url)
        base = [_one(sc, opts) for _ in range(args.repeat)]
        sc.kube.latency_s = args.latency_ms / 1000.0
        slow = [_one(sc, opts) for _ in range(args.repeat)]
        calls = len(sc.kube.calls())
    base_s = statistics.median(t for t, _ in base)
    slow_s = statistics.median(t for t, _ in slow)
    added = slow_s - base_s
    depth = added / (args.latency_ms / 1000.0)
    row = {"pods": base[0][1], "no_latency_s": round(base_s, 3), "with_latency_s": round(slow_s, 3),
           "added_s": round(added, 3), "round_trips_deep": round(depth, 1), "api_calls_total": calls}
    print(f"live collection, {row['pods']} pods, +{args.latency_ms:g} ms per API call (median of {args.repeat})")
    print(f"{'no latency s':>13} {'with latency s':>15} {'added s':>8} {'round trips':>12}")
    print(f"{row['no_latency_s']:>13} {row['with_latency_s']:>15} {row['added_s']:>8} {row['round_trips_deep']:>12}")
    return row


if __name__ == "__main__":
    main()
