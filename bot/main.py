"""`gpumem`: parse one command line and hand it to the surface that runs the verb.

The grammar is `bot.service.commands` (shared with Slack). Terminal verbs run in `bot.cli`,
`serve` in `bot.serve` (the Slack app, the HTTP face and the scheduler composed), `agent` in
`bot.agent`; each module has `run(args, lang) -> int`.
`COMMANDS` is the explicit registry. Heavy imports happen inside `run`, so `gpumem --help`
stays fast.

A verb that cannot go on raises a `runbooks.model.errors.GpumemError`; `main` maps it in one
place (`fail`): one line on stderr worded by the catalogs, and the exit code its class calls
for (`bot.service.exits`). A verb names the catalog section of its own codes in
`ERROR_KEYS` ("budget_cli.error").
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
from collections.abc import Iterator, Sequence

from bot.service.commands import build_parser
from bot.service.exits import exit_code
from runbooks.model.errors import GpumemError

#: verb -> the module that runs it; the grammar's order (`bot.service.commands.VERBS`)
COMMANDS: dict[str, str] = {
    "triage": "bot.cli.triage",
    "budget": "bot.cli.budget",
    "profile": "bot.cli.profile",
    "collect": "bot.cli.collect",
    "snapshot": "bot.cli.snapshot",
    "plan": "bot.cli.remediate",
    "apply": "bot.cli.remediate",
    "rollback": "bot.cli.remediate",
    "plans": "bot.cli.records",
    "audit": "bot.cli.records",
    "note": "bot.cli.handover",
    "notes": "bot.cli.handover",
    "handover": "bot.cli.handover",
    "rules": "bot.cli.rules",
    "fleet": "bot.cli.fleet",
    "agent": "bot.agent.command",
    "serve": "bot.serve",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from bot.service.settings import default_lang

    lang = args.lang or default_lang(os.environ)
    verb = importlib.import_module(COMMANDS[args.verb])
    with _inert_terminal(COMMANDS[args.verb].startswith("bot.cli.")):
        try:
            return verb.run(args, lang)
        except GpumemError as e:
            return fail(e, lang, getattr(verb, "ERROR_KEYS", None))


@contextlib.contextmanager
def _inert_terminal(active: bool) -> Iterator[None]:
    """Terminal verbs print evidence: its control characters are shown, never obeyed
    (`bot.render.terminal`). Servers (serve, agent) log instead and are left alone."""
    if not active:
        yield
        return
    from bot.render.terminal import InertStream

    out, err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = InertStream(out), InertStream(err)
    try:
        yield
    finally:
        sys.stdout, sys.stderr = out, err


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


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
