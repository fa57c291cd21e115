"""`gpumem`: parse one command line and hand it to the surface that runs the verb.

The grammar is `bot.grammar.commands` (shared with Slack); the command line becomes the verb's
typed request (`bot.grammar.requests`). The verb registry (`bot.verbs.VERBS`) names, for each
verb, the module whose `run(request, lang, deps) -> int` runs it: terminal verbs in `bot.cli`,
`serve` in `bot.slack` (with the handover scheduler of `bot.scheduler` beside it, composed
here: `serve_background`), `agent` in `bot.agent`. `deps` (`bot.service.deps`) carries the
process environment, read once here (`bot.config.environ`), and the settings, read when asked. The module is imported only for the verb that runs, so
`gpumem --help` stays fast.

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
from datetime import datetime
from typing import Any

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
            if request.verb == "serve":
                return verb.run(request, lang, deps, background=serve_background)
            return verb.run(request, lang, deps)
        except GpumemError as e:
            return fail(e, lang, entry.error_keys)


def serve_background(bot: Any) -> list[Any]:
    """What `gpumem serve` runs beside the Slack listeners: the scheduler (with its leader
    election) when the config has schedules, review reminders or remediation with a store. The
    two surfaces meet here, above both: the scheduler's jobs post through the Slack bot's
    `post_handover` and `post_review`, and its leader runs the bot's plan expiry sweep and, every
    minute, the reconcile pass of plans left applying (`bot.slack.plan_notices`). Raises SettingsError (naming the field) when it cannot be built."""
    # lazy: the scheduler brings APScheduler and the store (~240 ms with -X importtime), which
    # only `gpumem serve` runs
    from bot.scheduler.setup import scheduler_from_settings, sweeps_expiry, wanted

    settings = bot.settings
    notices = getattr(bot, "notices", None)
    sweep = notices.sweep if notices is not None and sweeps_expiry(settings) else None
    settle = notices.settle if sweep is not None else None  # plans left applying, read again every minute
    if not wanted(settings) and sweep is None:
        return []
    work = bot.work

    def job(channel: str, slot: datetime, late: bool) -> int | None:
        return work.post_handover(channel, settings.lang_for(channel), actor="gpumem", slot=slot, late=late).id

    def remind(reminder: Any) -> None:
        work.post_review(reminder.channel, settings.lang_for(reminder.channel), reminder)

    scheduler = scheduler_from_settings(settings, job, remind, sweep=sweep, settle=settle)
    return [scheduler] if scheduler is not None else []


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
    otherwise the wording every surface shares (`bot.service.live_errors.error_line`), so a
    workload that does not exist reads the same here and in Slack.
    """
    # lazy: the catalogs and their YAML loader (~20 ms with -X importtime) are paid only by a
    # verb that fails, never by `gpumem --help`
    from bot.render.i18n import Catalog
    from bot.service.live_errors import error_line

    cat = Catalog.load(lang)
    key = f"{keys}.{error.code}" if keys else None
    print(cat.t(key, error.params) if key and cat.has(key) else error_line(cat, error), file=sys.stderr)
    return exit_code(error)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
