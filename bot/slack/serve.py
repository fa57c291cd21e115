"""The Slack side of `gpumem serve` (composed in `bot.serve`): the bot a deployment runs, with
its triage worker processes started and warmed, and the runner its config names.

Each triage worker process imports this module to unpickle `ConfiguredRunner`: it stays light
(Bolt and the runners are imported where they are used).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from bot.render.triage_charts import CHARTS, warm_charts
from bot.service.runners import BundleRunner, ProcessRunner, live_runner
from bot.slack.app import build_bot, secrets_of
from bot.slack.limits import ServeLimits
from bot.slack.work import warm_up
from bot.verbs.worker import WorkerVerbRunner
from runbooks.model.errors import TargetNotFound

log = logging.getLogger("gpumem.serve")


def build_from_settings(settings: Any, environ: Mapping[str, str], limits: Any = None) -> Any:
    """The bot with the runners this deployment has: live triage, bundles from the config, verbs in a worker.

    Triage runs in `workers.pool_size` worker processes, started and warmed here (matplotlib,
    fonts, the parsers, the Kubernetes client, one triage of the first configured bundle), so
    neither the first command pays for that nor do triages compete with the acks for the GIL.
    This returns once they are warm: the HTTP face is started after it.
    """

    runner = ProcessRunner(choose_runner(settings), settings.workers.pool_size, secrets=secrets_of(settings))
    try:
        pids = runner.start()
        warm_up(_langs(settings))
        bot = build_bot(settings, runner, WorkerVerbRunner(settings.deadlines.verb_s),
                        limits=limits or ServeLimits.from_environ(environ))
    except BaseException:
        runner.close()
        raise
    log.info("triage workers ready: %s", ", ".join(map(str, pids)))
    return bot


def _langs(settings: Any) -> set[str]:
    langs = {settings.slack.default_lang}
    langs.update(getattr(policy, "lang", None) or settings.slack.default_lang
                 for policy in settings.slack.channels.values())
    return langs


def choose_runner(settings: Any) -> ConfiguredRunner:
    """Targets named under `bundles:` read their bundle; every other target goes live (if built in)."""
    return ConfiguredRunner(settings)


class ConfiguredRunner:
    """The TriageRunner of a deployment, picklable (it is sent to each triage worker process):
    targets named under `bundles:` read their bundle, every other target goes live (if built in).
    Its runners are built where it runs, on first use or by `warm()`."""

    def __init__(self, settings: Any):
        self.settings = settings
        self._runners: tuple[Any, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {"settings": self.settings, "_runners": None}

    def _built(self) -> tuple[Any, Any]:
        if self._runners is None:
            settings = self.settings
            live = live_runner(settings, CHARTS)
            bundles = (BundleRunner(settings.bundles, CHARTS, lang=settings.slack.default_lang)
                       if settings.bundles else None)
            if live is None and bundles is None:
                log.warning("no live triage in this build and no bundles in the config: every target is unknown")
            self._runners = (live, bundles)
        return self._runners

    def warm(self) -> None:
        """Build the runners (the live one imports the Kubernetes client) and warm the bundle one."""
        _, bundles = self._built()
        if bundles is not None:
            bundles.warm()
        else:
            warm_charts(self.settings.slack.default_lang)

    def __call__(self, target: str, context: str | None, on_step: Any) -> Any:
        live, bundles = self._built()
        if bundles is not None and target in bundles.bundles:
            return bundles(target, context, on_step)
        if live is None:
            raise TargetNotFound.no_source(target)
        return live(target, context, on_step)
