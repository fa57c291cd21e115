"""Benchmark: `gpumem triage NAMESPACE/DEPLOYMENT` end to end, as a person runs it.

A fresh `gpumem` process per run (imports included) against the stand-in API server
(tests/support/fake_kube.py) answering at once, with the incident scenario cloned to 8 pods.
Prints the median wall time, and the modules that cost most to import in one run
(`python -X importtime`).

    python -m benchmarks.bench_live_cli [--pods 8] [--repeat 5] [--top 6]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.support.kube_fixtures import add_replicas, running_scenario

ROOT = Path(__file__).resolve().parent.parent


def _cmd(kubeconfig: Path) -> list[str]:
    return ["-m", "bot", "triage", "llm/vllm-server", "--kubeconfig", str(kubeconfig), "--json", "--lang", "en"]


def _imports(stderr: str, top: int) -> list[tuple[str, float]]:
    """(module, cumulative seconds) of the `-X importtime` lines, the most costly first."""
    rows = []
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            value = cumulative.strip()
            if value.isdigit():
                rows.append((name.strip(), int(value) / 1e6))
    rows.sort(key=lambda r: -r[1])
    return [r for r in rows if not r[0].startswith(" ")][:top] or rows[:top]


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--top", type=int, default=6)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp, running_scenario("vllm-incident", Path(tmp)) as sc:
        engine = next(iter(sc.engines.values()))
        add_replicas(sc.kube, "llm", "vllm-server-7d9c8b6f4-2xkqp", args.pods - 2, engine.url)
        times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, *_cmd(sc.kubeconfig)], cwd=ROOT, capture_output=True, text=True)
            times.append(time.perf_counter() - started)
            assert done.returncode == 1, done.stderr[-2000:]
        profile = subprocess.run([sys.executable, "-X", "importtime", *_cmd(sc.kubeconfig)], cwd=ROOT,
                                 capture_output=True, text=True)
    median = statistics.median(times)
    print(f"gpumem triage, {args.pods} pods, stand-in API server answering at once (median of {args.repeat})")
    print(f"  wall {median:.2f} s (min {min(times):.2f}, max {max(times):.2f})")
    print("  costliest imports (cumulative):")
    for name, seconds in _imports(profile.stderr, args.top):
        print(f"    {seconds:6.3f} s  {name.strip()}")
    return {"wall_s": round(median, 3)}


if __name__ == "__main__":
    main()
