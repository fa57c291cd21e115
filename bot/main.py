"""`gpumem`: parse one command line and hand it to the surface that runs the verb.

The grammar is `bot.grammar.commands` (shared with Slack); the command line becomes the verb's
typed request (`bot.grammar.requests`). The verb registry (`bot.verbs.VERBS`) names, for each
verb, the module whose `run(request, lang, deps) -> int` runs it: terminal verbs in `bot.cli`,
`serve` in `bot.serve` (the Slack app, the HTTP face and the scheduler composed), `agent` in
`bot.agent`. `deps` (`bot.service.deps`) carries the process environment, read once here
(`bot.config.environ`), and the settings, read when asked. The module is imported only for the
verb that runs, so `gpumem --help` stays fast.

A verb that cannot go on raises a `runbooks.model.errors.GpumemError`; `main` maps it in one
place (`fail`): one line on stderr worded by the catalogs, and the exit code its class calls
for (`bot.service.exits`). A verb's entry names the catalog section of its own codes
(`error_keys`, "budget_cli.error").
"""

from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Iterator, Sequence

from bot.grammar.commands import parse_argv
from bot.service.exits import exit_code
from runbooks.model.errors import GpumemError


def main(argv: Sequence[str] | None = None) -> int:
    request = parse_argv(argv)
    # lazy: what runs a verb is imported once argparse has one (the registry names every verb's
    # request type, whose dataclasses cost ~15-25 ms with -X importtime; the environment and the
    # deps ~2 ms more), so `gpumem --help` and a usage error pay none of it
    from bot.config.environ import read_environment
    from bot.service.deps import Deps
    from bot.verbs import VERBS

    env = read_environment()  # the one read of the process environment, handed down from here
    lang = request.lang or env.lang
    entry = VERBS[request.verb]
    deps = Deps.of(request, env)
    verb = importlib.import_module(entry.cli)
    with _inert_terminal(entry.terminal):
        try:
            return verb.run(request, lang, deps)
        except GpumemError as e:
            return fail(e, lang, entry.error_keys)


@contextlib.contextmanager
def _inert_terminal(active: bool) -> Iterator[None]:
    """Terminal verbs print evidence: its control characters are shown, never obeyed
    (`bot.render.terminal`). Servers (serve, agent) log instead and are left alone."""
    if not active:
        yield
        return
    # lazy: ~1 ms (-X importtime) that `gpumem --help` would pay for nothing
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
    otherwise the wording every surface shares (`bot.render.errors.error_line`), so a
    workload that does not exist reads the same here and in Slack.
    """
    # lazy: the catalogs and their YAML loader (~20 ms with -X importtime) are paid only by a
    # verb that fails, never by `gpumem --help`
    from bot.render.errors import verb_error_line
    from bot.render.i18n import Catalog

    print(verb_error_line(Catalog.load(lang), error, keys), file=sys.stderr)
    return exit_code(error)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
