"""`gpumem`: the terminal surface. Parses, calls one runbook entry point, renders, maps errors.

Each verb lives in its own `bot/cli/<verb>.py` with `register(subparsers)` and
`run(args, lang) -> int`; `COMMANDS` below is the explicit registry. Heavy imports happen
inside `run`, so `gpumem --help` stays fast.

Exit codes: 0 healthy / ok, 1 a cause was found, 2 bad usage or unreadable input,
3 nothing could be read (or too little to decide).

A verb that cannot go on raises a `runbooks.model.errors.GpumemError`; `main` maps it in one
place (`fail`): one line on stderr worded by the catalogs, and the exit code its class calls
for. A verb names the catalog section of its own codes in `ERROR_KEYS` ("budget_cli.error").
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from runbooks.model.errors import EvidenceUnavailable, GpumemError, TemporaryError

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
    verb = importlib.import_module(COMMANDS[args.verb])
    try:
        return verb.run(args, lang)
    except GpumemError as e:
        return fail(e, lang, getattr(verb, "ERROR_KEYS", None))


def exit_code(error: GpumemError) -> int:
    """The exit code an error calls for: 3 when nothing could be read (EvidenceUnavailable) or
    the server could not answer now (TemporaryError), since running it again may help; else 2
    (UsageError, PlanError, TargetNotFound, NotPermitted, Conflict: something must change first).
    """
    if isinstance(error, (EvidenceUnavailable, TemporaryError)):
        return EXIT_NO_EVIDENCE
    return EXIT_USAGE


def fail(error: GpumemError, lang: str, keys: str | None = None) -> int:
    """Tell `error` as one line on stderr and return its exit code: the CLI's only error mapping.

    The line is `<keys>.<code>` from the catalog when the verb words that code itself;
    otherwise the wording every surface shares (`bot.service.live_errors.error_line`), so a
    workload that does not exist reads the same here and in Slack.
    """
    from bot.render.i18n import Catalog
    from bot.service.live_errors import error_line

    cat = Catalog.load(lang)
    key = f"{keys}.{error.code}" if keys else None
    print(cat.t(key, error.params) if key and cat.has(key) else error_line(cat, error), file=sys.stderr)
    return exit_code(error)


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
