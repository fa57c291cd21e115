"""Benchmark: the verbs an on-call runs, each as a fresh `gpumem` process (imports included),
against its goal.

- `triage --bundle examples/runbook-incident --json`: offline, the bundled incident;
- `triage llm/vllm-server`: live, against the stand-in API server (tests/support/fake_kube.py)
  with the incident scenario cloned to 8 pods, answering at once and with 100 ms added to every
  API call;
- `plan llm/vllm-server --set max-num-seqs=64` against the same server (a plan is stored);
- `plans`, `audit`, `note`, `handover --offline` on that store (the plan made above, 20 notes).

The project's bytecode is compiled first (`compileall`), as an install leaves it: without it,
under PYTHONDONTWRITEBYTECODE=1, every run compiles each module it imports anew. Each verb
runs `--repeat` times after one warm-up run; printed: the median, min and max wall
seconds, the median CPU seconds of the process (user + system: what it needs of a core, which a
shared machine's load does not change much), the goal, and how many modules the process
imported (`-X importtime`, one more run). A note's store write is in every `note` run.

    python -m benchmarks.bench_verbs [--repeat 5] [--only triage-offline,plans]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.kube_fixtures import add_replicas, running_scenario

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Verb:
    name: str
    #: the arguments after `gpumem`, given the kubeconfig and the store
    argv: Callable[[Path, Path], list[str]]
    goal_s: float
    #: exit codes that mean it ran as asked (1: a cause found, 3: insufficient evidence)
    ok: tuple[int, ...] = (0, 1)
    #: seconds added to every API call of the stand-in while it runs
    latency_s: float = 0.0


VERBS = (
    Verb("triage-offline", lambda k, s: ["triage", "--bundle", "examples/runbook-incident", "--json"], 0.8),
    Verb("triage-live", lambda k, s: ["triage", "llm/vllm-server", "--kubeconfig", str(k), "--json"], 1.5),
    Verb("triage-live+100ms", lambda k, s: ["triage", "llm/vllm-server", "--kubeconfig", str(k), "--json"], 2.1,
         latency_s=0.1),
    Verb("plan", lambda k, s: ["plan", "llm/vllm-server", "--set", "max-num-seqs=64", "--kubeconfig", str(k),
                               "--store", str(s), "--json"], 1.5),
    Verb("plans", lambda k, s: ["plans", "--store", str(s)], 1.0),
    Verb("audit", lambda k, s: ["audit", "--store", str(s)], 1.0),
    Verb("note", lambda k, s: ["note", "llm/vllm-server", "KV at 97% since 02:10", "--store", str(s)], 1.0),
    Verb("handover", lambda k, s: ["handover", "--offline", "--store", str(s)], 1.0),
)


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float, subprocess.CompletedProcess]:
    """(wall seconds, CPU seconds of the process, user + system, the result)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bot", *argv], cwd=ROOT, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done


def _modules(argv: list[str], env: dict[str, str]) -> int:
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "bot", *argv], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    return sum(1 for line in done.stderr.splitlines() if line.startswith("import time:") and "self [us]" not in line)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--pods", type=int, default=8)
    ap.add_argument("--only", default="", help="comma-separated verb names (default: all)")
    args = ap.parse_args(argv)
    chosen = [v for v in VERBS if not args.only or v.name in args.only.split(",")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", "bot", "collectors", "runbooks"], cwd=ROOT, check=True)
    out: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp, running_scenario("vllm-incident", Path(tmp)) as sc:
        engine = next(iter(sc.engines.values()))
        add_replicas(sc.kube, "llm", "vllm-server-7d9c8b6f4-2xkqp", args.pods - 2, engine.url)
        store = Path(tmp) / "gpumem.db"
        env = {k: v for k, v in os.environ.items() if k != "GPUMEM_CONFIG"}
        env["XDG_STATE_HOME"] = str(Path(tmp) / "state")
        for i in range(20):  # a shift's worth of notes and one plan, for the store verbs
            _run(["note", "llm/vllm-server", f"note {i}", "--store", str(store)], env)
        _run(VERBS[3].argv(sc.kubeconfig, store), env)
        print(f"gpumem verbs, a fresh process each (median of {args.repeat} after a warm-up); "
              f"stand-in API server, {args.pods} pods")
        print(f"  {'verb':18s} {'median':>7s} {'min':>6s} {'max':>6s} {'cpu':>6s} {'goal':>5s}  {'modules':>7s}")
        for verb in chosen:
            sc.kube.latency_s = verb.latency_s
            cmd = verb.argv(sc.kubeconfig, store)
            _run(cmd, env)
            times, cpus = [], []
            for _ in range(args.repeat):
                took, cpu, done = _run(cmd, env)
                if done.returncode not in verb.ok:
                    raise SystemExit(f"gpumem {' '.join(cmd)} exited {done.returncode}: {done.stderr[-2000:]}")
                times.append(took)
                cpus.append(cpu)
            median = statistics.median(times)
            modules = _modules(cmd, env)
            sc.kube.latency_s = 0.0
            mark = "" if median <= verb.goal_s else "  over"
            print(f"  {verb.name:18s} {median:6.2f}s {min(times):5.2f}s {max(times):5.2f}s {statistics.median(cpus):5.2f}s "
                  f"{verb.goal_s:4.1f}s  {modules:7d}{mark}")
            out[verb.name] = round(median, 3)
    return out


if __name__ == "__main__":
    main()
