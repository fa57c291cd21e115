"""CPU cost of parsing hostile `/gpumem` text: the grammar's caps against argparse's quadratic step.

argparse finds the next option with a scan of every option position, once per option, so N
repeated flags cost O(N²). The grammar refuses text over `MAX_COMMAND_CHARS` before reading it
and more than `MAX_COMMAND_WORDS` words before argparse. This prints, in CPU seconds:

- argparse alone on N repeated flags (what `parse_command` did before the caps);
- `parse_command` on the same text (refused by the length cap);
- `parse_command` on the worst text under the caps (the most words, every one a flag).

    python -m benchmarks.bench_slack_parse [--flags 8000 16000 23000]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bot.grammar.slack import (  # noqa: E402
    MAX_COMMAND_CHARS,
    MAX_COMMAND_WORDS,
    CommandError,
    parse_command,
    slack_parser,
)


def _cpu(fn) -> float:
    started = time.process_time()
    with contextlib.suppress(CommandError):
        fn()
    return time.process_time() - started


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--flags", type=int, nargs="+", default=[4000, 8000, 16000, 23000])
    args = p.parse_args(argv)
    root = slack_parser()
    print(f"{'flags':>6} {'text KB':>8} {'argparse alone':>15} {'parse_command':>14}")
    for n in args.flags:
        words = ["triage", "llm/vllm-server"] + ["-n", "llm"] * n
        text = " ".join(words)
        raw = _cpu(lambda w=words: root.parse_known_args(w))
        capped = _cpu(lambda t=text: parse_command(t, "llm"))
        print(f"{n:>6} {len(text) / 1000:>8.1f} {raw:>13.3f} s {capped:>12.6f} s")
    worst = " ".join(["triage", "vllm-server"] + ["-n", "llm"] * ((MAX_COMMAND_WORDS - 2) // 2))
    runs = 200
    started = time.process_time()
    for _ in range(runs):
        parse_command(worst, None)
    each = (time.process_time() - started) / runs
    print(f"worst accepted text ({len(worst.split())} words, {len(worst)} of {MAX_COMMAND_CHARS} chars): "
          f"{each * 1000:.2f} ms CPU per parse")


if __name__ == "__main__":
    main()
