"""Benchmark: offline triage of a bundle whose access log is 10 MB and 100 MB.

Each run is a fresh `gpumem triage --bundle` process pinned to one core (taskset, when the
machine has it). Reports wall time and the child's peak RSS; memory must stay flat as the
log grows, because logs are streamed, never loaded whole.

    python -m benchmarks.bench_triage [--sizes 10,100]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUNDLE = ROOT / "examples" / "runbook-incident"


def write_access_log(path: Path, size_mb: int, seed: int = 1) -> int:
    """A key=value access log of about `size_mb` MB, with the incident's drift. Returns lines."""
    rng = random.Random(seed)
    target = size_mb * 1024 * 1024
    start = datetime(2026, 3, 9, 8, 0, tzinfo=UTC)
    written = lines = 0
    with open(path, "w") as fh:
        chunk: list[str] = []
        while written < target:
            at = start + timedelta(seconds=lines // 20)
            long = rng.random() < 0.08 + 0.29 * min(1.0, written / target)
            tin = rng.randint(2049, 8000) if long else rng.randint(20, 2048)
            tout = rng.randint(10, 512)
            line = f"time={at:%Y-%m-%dT%H%MZ} input_tokens={tin} output_tokens={tout} model=qwen2.5-7b\n"
            chunk.append(line)
            written += len(line)
            lines += 1
            if len(chunk) >= 10000:
                fh.write("".join(chunk))
                chunk.clear()
        fh.write("".join(chunk))
    return lines


def _gpumem() -> list[str]:
    exe = Path(sys.executable).with_name("gpumem")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "bot"]
    if shutil.which("taskset"):
        cmd = ["taskset", "-c", "0", *cmd]
    return cmd


def run_once(bundle: Path) -> tuple[float, float, int]:
    """(seconds, peak RSS MiB of the child, exit code) for one triage run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    proc = subprocess.run([*_gpumem(), "triage", "--bundle", str(bundle), "--json", "--lang", "en"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT)
    elapsed = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    # ru_maxrss of children is the max over all waited-for children, so run the largest last
    return elapsed, max(after, before) / 1024.0, proc.returncode


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--sizes", default="10,100", help="access log sizes in MB, ascending")
    args = ap.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for size in sorted(int(s) for s in args.sizes.split(",")):
            bundle = Path(tmp) / f"bundle-{size}"
            shutil.copytree(BUNDLE, bundle)
            lines = write_access_log(bundle / "access.log", size)
            real_mb = os.path.getsize(bundle / "access.log") / 1e6
            secs, rss, rc = run_once(bundle)
            rows.append({"access_log_mb": round(real_mb, 1), "lines": lines, "seconds": round(secs, 2),
                         "peak_rss_mib": round(rss, 1), "exit_code": rc})
    print("triage --bundle (one core)")
    print(f"{'access.log MB':>14} {'lines':>10} {'seconds':>8} {'peak RSS MiB':>13} {'exit':>5}")
    for r in rows:
        print(f"{r['access_log_mb']:>14} {r['lines']:>10} {r['seconds']:>8} {r['peak_rss_mib']:>13} {r['exit_code']:>5}")
    return rows


if __name__ == "__main__":
    main()
