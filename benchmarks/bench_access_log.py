"""Benchmark: `read_access_log` speed on one core, and flat memory as the file grows.

Writes a deterministic key=value access log (the runbook's shape) of a small and a large size
in a temporary folder, then profiles each in a fresh child process (pinned to one core with
taskset, when the machine has it). Reports wall time, throughput, the growth of the child's
peak RSS while reading, and the peak of Python allocations (tracemalloc, a second read).

    python -m benchmarks.bench_access_log [--size-mb 100] [--small-mb 10] [--stamps minute|second]
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

from runbooks.model.units import MIB


def write_access_log(path: Path, size_mb: float, stamps: str = "minute", seed: int = 7) -> int:
    """About `size_mb` MB of `time=... input_tokens=N output_tokens=M model=...` lines. Returns lines."""
    rng = random.Random(seed)
    target = int(size_mb * MIB)
    start = datetime(2026, 3, 9, 8, 0, tzinfo=UTC)
    stamp = "%Y-%m-%dT%H%MZ" if stamps == "minute" else "%Y-%m-%dT%H:%M:%SZ"
    written = lines = 0
    with open(path, "w", encoding="ascii") as fh:
        batch: list[str] = []
        while written < target:
            at = start + timedelta(seconds=lines // 50)
            tin = int(rng.lognormvariate(7.0, 1.1))
            tout = int(rng.lognormvariate(5.0, 0.9))
            line = f"time={at.strftime(stamp)} input_tokens={tin} output_tokens={tout} model=qwen2.5-7b\n"
            batch.append(line)
            written += len(line)
            lines += 1
            if len(batch) >= 10_000:
                fh.write("".join(batch))
                batch.clear()
        fh.write("".join(batch))
    return lines


def _child(path: str) -> None:
    """Measure one file in this (fresh) process; print one JSON line."""
    from collectors.access_logs.reference import read_access_log

    rss_before_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    profile = read_access_log(path)
    seconds = time.perf_counter() - t0
    rss_growth_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before_kib
    tracemalloc.start()
    read_access_log(path)
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({
        "seconds": seconds,
        "requests": profile.total,
        "rss_growth_mib": rss_growth_kib / 1024,
        "traced_peak_mib": traced_peak / MIB,
        "long_share": profile.share("L", "XL"),
    }))


def _measure(path: Path) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.bench_access_log", "--child", str(path)]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run(cmd, cwd=root, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=100.0, help="the large file (default 100)")
    parser.add_argument("--small-mb", type=float, default=10.0, help="the small file (default 10)")
    parser.add_argument("--stamps", choices=("minute", "second"), default="minute",
                        help="minute: the runbook's compact 2026-03-09T2011Z; second: ISO with seconds")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size_mb in (args.small_mb, args.size_mb):
            path = Path(tmp) / f"access-{size_mb:g}mb.log"
            lines = write_access_log(path, size_mb, args.stamps, args.seed)
            result = _measure(path)
            rows.append((path.stat().st_size / MIB, lines, result))
            path.unlink()
    print(f"read_access_log, one core, {args.stamps} stamps")
    print(f"{'file MiB':>9} {'lines':>10} {'seconds':>8} {'MiB/s':>7} {'RSS +MiB':>9} {'traced MiB':>11}")
    for size, lines, r in rows:
        print(f"{size:9.1f} {lines:10d} {r['seconds']:8.2f} {size / r['seconds']:7.1f} "
              f"{r['rss_growth_mib']:9.1f} {r['traced_peak_mib']:11.1f}")


if __name__ == "__main__":
    main()
