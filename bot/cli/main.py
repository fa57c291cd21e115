"""`gpumem`: the terminal surface. Parses, calls one runbook entry point, renders, maps errors.

Each verb lives in its own `bot/cli/<verb>.py` with `register(subparsers)` and
`run(args, lang) -> int`; `COMMANDS` below is the explicit registry. Heavy imports happen
inside `run`, so `gpumem --help` stays fast.

Exit codes: 0 healthy / ok, 1 a cause was found, 2 bad usage or unreadable input,
3 nothing could be read (or too little to decide).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

EXIT_OK, EXIT_CAUSE, EXIT_USAGE, EXIT_NO_EVIDENCE = 0, 1, 2, 3

#: verb -> module; the order is the order of `gpumem --help`
COMMANDS: dict[str, str] = {
    "triage": "bot.cli.triage",
    "budget": "bot.cli.budget",
    "profile": "bot.cli.profile",
    "collect": "bot.cli.collect",
    "snapshot": "bot.cli.snapshot",
    "agent": "bot.agent.command",
    "serve": "bot.slack.serve",
}


def add_common(p: argparse.ArgumentParser) -> None:
    """--json and --lang, shared by every verb."""
    p.add_argument("--json", action="store_true", help="print JSON (stable keys, see README)")
    p.add_argument("--lang", choices=("en", "zh"), default=None, help="language (default: from the locale)")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpumem", description="GPU memory triage for LLM serving on Kubernetes.")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, module in COMMANDS.items():
        importlib.import_module(module).register(sub, verb)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from bot.service.settings import default_lang

    lang = args.lang or default_lang(os.environ)
    return importlib.import_module(COMMANDS[args.verb]).run(args, lang)


def verdict_exit_code(primary: str) -> int:
    if primary == "healthy":
        return EXIT_OK
    if primary == "insufficient_evidence":
        return EXIT_NO_EVIDENCE
    return EXIT_CAUSE


def emit_report(report, as_json: bool, lang: str) -> None:
    """Print a triage Report as JSON or as terminal text."""
    if as_json:
        import json

        from bot.render.report_json import report_json

        json.dump(report_json(report, lang), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        from bot.render.text import render_text

        sys.stdout.write(render_text(report, lang))


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
