"""Benchmark: `gpumem fleet` against a real Prometheus holding 1,000 deployments, as a person runs it.

The fleet: 1,000 Deployments (every tenth a StatefulSet) in 40 namespaces, 1 to 3 pods each,
running vLLM (V1 and V0 metric names), SGLang (two TP ranks per pod), TGI, or no engine (a GPU
server of its own), with kube-state-metrics and DCGM scraped with and without honorLabels; the
values are drawn from a fixed seed, a few services in trouble. Two hours of history at a 30 s
scrape interval (kube-prometheus-stack's default), written as OpenMetrics by the test fleet's
own generator (tests/support/prom_fleet.py) and loaded with `promtool tsdb create-blocks-from
openmetrics`; the blocks are kept under benchmarks/out/fleet/ and reused by the next run.

Two ways (`--mode`): `raw`, the view's queries over the raw series; `recorded`, with gpumem's
recording rules (what `gpumem rules` writes, group `gpumem-fleet`) loaded, their last 65 minutes
evaluated once by `promtool tsdb create-blocks-from rules` into the same blocks (kept too; in two
rounds, the rules that read other rules after the blocks of those are in).

Prometheus serves them on 127.0.0.1 with its query log on; each run is a fresh `gpumem fleet
--json --at END` process (imports included). Printed: the wall time of each run, and per query
Prometheus' own execution time (`execTotalTime` in the query log) and its PromQL length. The
first run after Prometheus starts reads the blocks from disk (cold); the rest find them in the
page cache.

    python -m benchmarks.bench_fleet [--deployments 1000] [--history-h 2] [--step 30] [--repeat 5] [--mode both]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from collectors.prometheus.fleet import queries
from runbooks.alerts.fleet_queries import recorded_queries
from tests.support.prom_fleet import (
    Dep,
    FamilyFiles,
    Fleet,
    backfill_recording_rules,
    write_fleet,
    write_recording_rules,
)
from tests.support.prom_harness import build_blocks, start_prometheus, stop_prometheus

ROOT = Path(__file__).resolve().parent.parent
WORKDIR = ROOT / "benchmarks" / "out" / "fleet"
#: a fixed end, so that the blocks written once serve every later run
END = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
#: what a user waits for at most: 1,000 deployments in 1 s, 10,000 in 2 s
BUDGET_S = {1000: 1.0, 10000: 2.0}
#: the recording rules' history written for the benchmark: their hour, and a margin
RECORDED_S = 3900
_ENGINES = ("vllm", "vllm", "vllm-v0", "sglang", "sglang", "tgi", "tgi")


def big_fleet(n: int, seed: int = 11) -> Fleet:
    """`n` deployments of mixed engines; about 1 in 20 preempting, 1 in 30 restarting."""
    rng = random.Random(seed)
    deps = []
    for i in range(n):
        engine = "none" if i % 25 == 24 else rng.choice(_ENGINES)
        restarts = rng.choice((1, 2)) if rng.random() < 0.03 else 0
        late = rng.random() < 0.05
        deps.append(Dep(
            namespace=f"team-{i % 40:02d}", name=f"svc-{i:04d}", engine=engine, pods=rng.choice((1, 1, 1, 2, 2, 3)),
            statefulset=i % 10 == 9, kv=round(rng.uniform(0.2, 0.97), 2),
            queue=rng.choice((0, 0, 0, 0, 0, 0, 1, 2, 3, 5, 8, 15)),
            preempt_per_step=1 if rng.random() < 0.05 else 0, restarts=restarts, oom=restarts > 0 and rng.random() < 0.5,
            ttft="slow" if rng.random() < 0.05 else "fast", long_early=0.1, long_late=0.4 if late else 0.1,
            gpu_used=round(rng.uniform(0.5, 0.98), 2), exported=rng.random() < 0.3))
    return Fleet(tuple(deps))


def load(n: int, history_s: int, step_s: int) -> tuple[Path, dict[str, float]]:
    """The TSDB blocks for the fleet (built once, then reused) and what building them took."""
    folder = WORKDIR / f"d{n}-h{history_s}-s{step_s}-e{int(END.timestamp())}"
    data, done = folder / "data", folder / "loaded"
    if done.exists():
        return folder, {}
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(data, ignore_errors=True)  # a load that did not finish
    started = time.perf_counter()
    writer = FamilyFiles(folder)
    write_fleet(writer, big_fleet(n), int(END.timestamp()), history_s=history_s, step_s=step_s)
    source = folder / "fleet.om.txt"
    size = writer.finish(source)
    written = time.perf_counter() - started
    lines = sum(chunk.count(b"\n") for chunk in _chunks(source)) - 1
    started = time.perf_counter()
    try:
        build_blocks(source, data, "the fleet")
    except RuntimeError as e:
        raise SystemExit(str(e)) from None
    blocks = time.perf_counter() - started
    source.unlink()
    done.write_text(json.dumps({"samples": lines, "openmetrics_bytes": size}))
    return folder, {"write_s": written, "promtool_s": blocks, "samples": lines, "openmetrics_mib": size / 2**20}


def _chunks(path: Path):
    with path.open("rb") as f:
        while chunk := f.read(1 << 24):
            yield chunk


def record(folder: Path) -> tuple[Path, float | None]:
    """The recording-rule file, and the rules' last RECORDED_S evaluated into the blocks (once;
    the seconds that took, None when they were there already)."""
    rules = write_recording_rules(folder / "gpumem-fleet.rules.yml")
    digest = hashlib.sha256(rules.read_bytes()).hexdigest()
    done = folder / "recorded"
    before = json.loads(done.read_text()) if done.exists() else {}
    if before.get("rules_sha256") == digest:
        return rules, None
    if done.exists():  # rules since changed: their series are compacted in with the raw ones
        raise SystemExit(f"the recording rules changed since {folder} was written: delete it and run again")
    started = time.perf_counter()
    data = folder / "data"
    raw_blocks = len(_blocks(data))
    end = int(END.timestamp())
    backfill_recording_rules(rules, data, folder, end - RECORDED_S, end + 60, ready_s=120)
    # promtool writes a block per rule and per two hours (some 50 here, in two rounds: the KV peak
    # is a rule over another rule); a Prometheus holding the rules would have them in its head and
    # its compacted blocks, so let its compactor merge them first (it does, about a minute after
    # start) rather than time queries across 50 small blocks
    proc, _url = start_prometheus(data, folder, ready_s=120)
    try:
        deadline = time.monotonic() + 900
        while len(_blocks(data)) > raw_blocks + 2 and time.monotonic() < deadline:
            time.sleep(5)
    finally:
        stop_prometheus(proc)
    took = time.perf_counter() - started
    done.write_text(json.dumps({"backfill_s": took, "rules_sha256": digest}))
    return rules, took


def _blocks(data: Path) -> list[Path]:
    return [p for p in data.iterdir() if (p / "meta.json").exists()]


def serve(folder: Path, rules: Path | None = None) -> tuple[subprocess.Popen, str, Path]:
    query_log = folder / "query.log"
    query_log.unlink(missing_ok=True)
    proc, url = start_prometheus(folder / "data", folder, query_log=query_log, ready_s=120,
                                 rule_files=(rules,) if rules else ())
    return proc, url, query_log


def _logged(query_log: Path, offset: int) -> tuple[list[dict], int]:
    """Query-log entries written since `offset` (Prometheus writes one JSON object a line)."""
    if not query_log.exists():
        return [], offset
    with query_log.open("rb") as f:
        f.seek(offset)
        text = f.read()
    return [json.loads(line) for line in text.splitlines() if line.strip()], offset + len(text)


def run(folder: Path, mode: str, deployments: int, repeat: int, timeout_s: float = 60.0) -> dict[str, float]:
    """`repeat` fresh `gpumem fleet` processes against the blocks, `mode` raw or recorded."""
    rules = None
    if mode == "recorded":
        rules, took = record(folder)
        if took is not None:
            print(f"recording rules backfilled over {RECORDED_S // 60} min in {took:.1f} s")
    sent = recorded_queries() if mode == "recorded" else queries()
    ids = {promql: query_id for query_id, promql in sent.items()}
    proc, url, query_log = serve(folder, rules)
    walls: list[float] = []
    per_query: dict[str, list[float]] = {q: [] for q in ids.values()}
    offset = 0
    try:
        for _ in range(repeat):
            started = time.perf_counter()
            done = subprocess.run([sys.executable, "-m", "bot", "fleet", "--prometheus", url, "--at", END.isoformat(),
                                   "--json", "--top", "10", "--timeout", str(timeout_s)], cwd=ROOT,
                                  capture_output=True, text=True)
            walls.append(time.perf_counter() - started)
            if done.returncode not in (0, 1):
                raise SystemExit(f"gpumem fleet exited {done.returncode}: {done.stderr[-2000:]}")
            doc = json.loads(done.stdout)
            if doc["not_read"] or doc["services_total"] != deployments:
                raise SystemExit(f"gpumem fleet read {doc['services_total']} services, not read: {doc['not_read']}")
            if doc["read_from"] != mode:
                raise SystemExit(f"gpumem fleet read from {doc['read_from']} ({doc['read_from_reason']}), not {mode}")
            time.sleep(0.2)  # the query log is written once a query has finished
            entries, offset = _logged(query_log, offset)
            got = [e for e in entries if e.get("params", {}).get("query") in ids]
            if len(got) != len(ids):
                raise SystemExit(f"Prometheus logged {len(got)} queries of the view, not {len(ids)}")
            for e in got:
                per_query[ids[e["params"]["query"]]].append(e["stats"]["timings"]["execTotalTime"])
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    median = statistics.median(walls[1:] or walls)
    budget = BUDGET_S.get(deployments)
    print(f"gpumem fleet ({mode}), {deployments} deployments, {len(ids)} queries a run, {repeat} runs "
          f"(a fresh process each)")
    print(f"  wall: first (cold) {walls[0]:.2f} s; the rest median {median:.2f} s, max {max(walls[1:] or walls):.2f} s"
          + (f" (budget {budget:g} s)" if budget else ""))
    print("  per query, Prometheus' execTotalTime: first run / median of the rest, PromQL characters")
    for query_id, times in sorted(per_query.items(), key=lambda kv: -statistics.median(kv[1])):
        rest = times[1:] or times
        print(f"    {query_id:12s} {times[0] * 1000:7.0f} ms / {statistics.median(rest) * 1000:6.0f} ms"
              f"   {len(sent[query_id]):6,d}")
    return {f"{mode}_wall_first_s": round(walls[0], 3), f"{mode}_wall_median_s": round(median, 3)}


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--deployments", type=int, default=1000)
    ap.add_argument("--history-h", type=float, default=2.0)
    ap.add_argument("--step", type=int, default=30, help="seconds between samples (the scrape interval)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--mode", choices=("raw", "recorded", "both"), default="both")
    ap.add_argument("--timeout", type=float, default=60.0,
                    help="gpumem fleet's --timeout (the raw queries on 10,000 deployments take longer than its 10 s)")
    args = ap.parse_args(argv)
    folder, built = load(args.deployments, int(args.history_h * 3600), args.step)
    if built:
        print(f"loaded {built['samples']:,} samples ({built['openmetrics_mib']:.0f} MiB of OpenMetrics): "
              f"written in {built['write_s']:.1f} s, promtool {built['promtool_s']:.1f} s")
    out: dict[str, float] = {}
    for mode in (("raw", "recorded") if args.mode == "both" else (args.mode,)):
        out.update(run(folder, mode, args.deployments, args.repeat, args.timeout))
    return out


if __name__ == "__main__":
    main()
