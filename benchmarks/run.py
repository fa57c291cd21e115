"""Run every benchmark in turn: `make bench` (figures go into docs/benchmarks.md by hand)."""

from __future__ import annotations

import importlib

BENCHMARKS = ("benchmarks.bench_triage", "benchmarks.bench_access_log", "benchmarks.bench_live_latency",
              "benchmarks.bench_live_cli", "benchmarks.bench_verbs",
              "benchmarks.bench_slack_ack", "benchmarks.bench_slack_parse", "benchmarks.bench_profile_vs_mawk",
              "benchmarks.bench_fleet")


def main() -> None:
    for name in BENCHMARKS:
        print(f"\n## {name}")
        importlib.import_module(name).main([])


if __name__ == "__main__":
    main()
