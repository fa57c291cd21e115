"""Benchmark: `gpumem profile` against mawk running the same bucketing, side by side.

Writes a deterministic key=value access log of `--size-mb` MiB (the runbook's shape:
`time=2026-03-09T2011Z input_tokens=N output_tokens=M model=qwen2.5-7b`, lognormal lengths)
into a temporary folder, then times, alternating, `--runs` times each:

- mawk with the bucketing script (find input_tokens= and output_tokens=, apply the runbook's
  bucket rule, count the buckets): one process, as awk is;
- mawk with the same script plus what gpumem also reports (counts per token value for exact
  p50/p95/p99, L+XL per first and last quarter of the lines for the shift);
- `gpumem profile --access-log FILE --json` as a user runs it (a fresh Python process,
  imports included), which scans with numpy and splits the file across the CPUs it may use.

Prints wall seconds (median and best), the ratio, and gpumem's peak memory: the sum of the
resident memory of its processes, sampled every 10 ms, and the largest single process
(ru_maxrss). The file is deleted afterwards.

    python -m benchmarks.bench_profile_vs_mawk [--size-mb 1024] [--runs 3] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from runbooks.model.units import MIB

ROOT = Path(__file__).resolve().parent.parent

#: the runbook's bucket rule: the smallest bucket holding both input and output
AWK_BUCKETS = r"""
{
  if (!match($0, /input_tokens=[0-9]+/)) { skipped++; next }
  i = substr($0, RSTART + 13, RLENGTH - 13) + 0
  if (!match($0, /output_tokens=[0-9]+/)) { skipped++; next }
  o = substr($0, RSTART + 14, RLENGTH - 14) + 0
  ci = (i <= 512) ? 0 : (i <= 2048) ? 1 : (i <= 8192) ? 2 : 3
  co = (o <= 128) ? 0 : (o <= 256) ? 1 : (o <= 512) ? 2 : 3
  c = (ci > co) ? ci : co
  n[c]++
}
END { printf "%d %d %d %d %d\n", n[0], n[1], n[2], n[3], skipped }
"""

#: the same, plus counts per value (exact percentiles) and L+XL per quarter of the lines
AWK_FULL = r"""
{
  if (!match($0, /input_tokens=[0-9]+/)) { skipped++; next }
  i = substr($0, RSTART + 13, RLENGTH - 13) + 0
  if (!match($0, /output_tokens=[0-9]+/)) { skipped++; next }
  o = substr($0, RSTART + 14, RLENGTH - 14) + 0
  ci = (i <= 512) ? 0 : (i <= 2048) ? 1 : (i <= 8192) ? 2 : 3
  co = (o <= 128) ? 0 : (o <= 256) ? 1 : (o <= 512) ? 2 : 3
  c = (ci > co) ? ci : co
  n[c]++; total++
  cin[i]++; cout[o]++
  if (i > maxi) maxi = i
  if (o > maxo) maxo = o
  q = int(NR * 4 / LINES); if (q > 3) q = 3
  qn[q]++; if (c >= 2) ql[q]++
}
function pcts(arr, top,    v, seen, r50, r95, r99, out) {
  r50 = int((50 * total + 99) / 100); r95 = int((95 * total + 99) / 100); r99 = int((99 * total + 99) / 100)
  seen = 0; out = ""
  for (v = 0; v <= top; v++) if (v in arr) {
    before = seen; seen += arr[v]
    if (before < r50 && seen >= r50) out = out " " v
    if (before < r95 && seen >= r95) out = out " " v
    if (before < r99 && seen >= r99) out = out " " v
  }
  return out
}
END {
  printf "%d %d %d %d %d", n[0], n[1], n[2], n[3], skipped
  printf " p50/95/99 in%s out%s", pcts(cin, maxi), pcts(cout, maxo)
  printf " long %.4f -> %.4f\n", ql[0] / qn[0], ql[3] / qn[3]
}
"""


def write_access_log(path: Path, size_mb: float, seed: int = 7) -> int:
    """About `size_mb` MiB of runbook-shaped lines, the same bytes for the same seed. Returns lines."""
    rng = np.random.Generator(np.random.PCG64(seed))
    target = int(size_mb * MIB)
    written = lines = 0
    batch = 200_000
    with open(path, "w", encoding="ascii") as fh:
        while written < target:
            tin = np.floor(rng.lognormal(7.0, 1.1, batch)).astype(np.int64).tolist()
            tout = np.floor(rng.lognormal(5.0, 0.9, batch)).astype(np.int64).tolist()
            minutes = [(lines + k) // 3000 for k in range(batch)]  # 50 requests a second
            text = "".join(
                f"time=2026-03-{9 + m // 1440:02d}T{m // 60 % 24:02d}{m % 60:02d}Z input_tokens={a} "
                f"output_tokens={b} model=qwen2.5-7b\n"
                for m, a, b in zip(minutes, tin, tout, strict=True)
            )
            if written + len(text) > target:
                text = text[: text.rfind("\n", 0, target - written) + 1] or text[: text.find("\n") + 1]
            fh.write(text)
            written += len(text)
            lines += text.count("\n")
    return lines


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and its descendants (KiB), from /proc."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def timed(cmd: list[str], sample: bool = False) -> tuple[float, str, int]:
    """(wall seconds, stdout, peak RSS of the process and its children summed, KiB; 0 unless `sample`)."""
    peak = [0]
    done = threading.Event()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    if sample:
        watcher.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    done.set()
    if sample:
        watcher.join()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.strip()[:500]}")
    return seconds, out, peak[0]


def _gpumem_cmd(path: Path, workers: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "bot", "profile", "--access-log", str(path), "--json", "--lang", "en"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    return cmd


def _maxrss_child_kib(cmd: list[str]) -> int:
    """ru_maxrss of the largest process of one run (the main process or a worker)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, _, usage = os.wait4(proc.pid, 0)
    return usage.ru_maxrss


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024.0, help="access log size in MiB (default 1024)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each tool (default 3)")
    parser.add_argument("--workers", type=int, default=None, help="gpumem processes (default: the CPUs it may use)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    mawk = shutil.which("mawk")
    if mawk is None:
        raise SystemExit("mawk is not installed (Debian: apt-get install mawk)")
    from collectors.parsers.access_log_fast import MAX_WORKERS, available_cpus

    cpus = available_cpus()
    workers = args.workers or min(cpus, MAX_WORKERS)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "access.log"
        t0 = time.perf_counter()
        lines = write_access_log(path, args.size_mb, args.seed)
        print(f"wrote {path.stat().st_size / MIB:,.0f} MiB, {lines:,} lines in {time.perf_counter() - t0:.1f} s")
        (Path(tmp) / "buckets.awk").write_text(AWK_BUCKETS)
        (Path(tmp) / "full.awk").write_text(AWK_FULL)
        with open(path, "rb") as fh:  # into the page cache, so no tool pays the first read
            while fh.read(64 * MIB):
                pass
        awk_b = [mawk, "-f", str(Path(tmp) / "buckets.awk"), str(path)]
        awk_f = [mawk, "-v", f"LINES={lines}", "-f", str(Path(tmp) / "full.awk"), str(path)]
        gp = _gpumem_cmd(path, args.workers)
        times: dict[str, list[float]] = {"awk": [], "awk_full": [], "gpumem": []}
        peaks, out_awk, out_gp, out_full = [], "", "", ""
        for _ in range(max(1, args.runs)):
            s, out_awk, _ = timed(awk_b)
            times["awk"].append(s)
            s, out_gp, peak = timed(gp, sample=True)
            times["gpumem"].append(s)
            peaks.append(peak)
            s, out_full, _ = timed(awk_f)
            times["awk_full"].append(s)
        largest = _maxrss_child_kib(gp)
        path.unlink()
    doc = json.loads(out_gp)
    counts = [b["count"] for b in doc["buckets"]]
    awk_counts = [int(x) for x in out_awk.split()[:4]]
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    print(f"\n{args.size_mb:,.0f} MiB key=value access log, {lines:,} lines; {cpus} CPUs; medians of {args.runs} runs")
    print("| tool | computes | processes | seconds (median) | best | peak RSS |")
    print("|---|---|---|---|---|---|")
    print(f"| mawk, bucketing script | bucket counts | 1 | {med['awk']:.2f} | {best['awk']:.2f} | - |")
    print(f"| mawk, + exact percentiles and quarter shift | as gpumem | 1 | {med['awk_full']:.2f} | "
          f"{best['awk_full']:.2f} | - |")
    print(f"| gpumem profile --json | buckets, exact p50/p95/p99, shift, per-bucket p95 | {doc['workers']} | "
          f"{med['gpumem']:.2f} | {best['gpumem']:.2f} | {max(peaks) / 1024:.0f} MiB (all processes), "
          f"{largest / 1024:.0f} MiB largest |")
    print(f"\nmawk (bucketing) / gpumem: {med['awk'] / med['gpumem']:.2f}x (median), "
          f"{best['awk'] / best['gpumem']:.2f}x (best); mawk (full) / gpumem: {med['awk_full'] / med['gpumem']:.2f}x")
    print(f"bucket counts agree with mawk: {'yes' if counts == awk_counts else f'NO {counts} vs {awk_counts}'}")
    print(f"mawk (full) says: {out_full.strip()}")
    print(f"gpumem says: {counts} p50/95/99 in {doc['percentiles']['input']['p50']:.0f} "
          f"{doc['percentiles']['input']['p95']:.0f} {doc['percentiles']['input']['p99']:.0f}, shift "
          f"{(doc['shift'] or {}).get('long_share_before')} -> {(doc['shift'] or {}).get('long_share_after')}")
    print(f"gpumem used {doc['workers']} processes ({workers} asked); mawk runs in one.")


if __name__ == "__main__":
    main()
