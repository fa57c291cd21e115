"""The Slack app, assembled: settings in, a Bolt App with its listeners, pool and client out.

Listeners are an explicit registry (`listeners()`), wired by plain calls (`register()`), so a
test builds exactly the app it means to. Bolt's request verification is replaced by
`bot.slack.gate.RequestGate` in the same place: over HTTP a request whose signature is missing,
wrong or older than five minutes gets 401, a malformed timestamp too, and a replay runs once.

>>> bot = build_bot(settings, runner)          # doctest: +SKIP
>>> bot.app.dispatch(signed_request)           # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import logging
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from bot.render.slack_triage import RERUN_ACTION
from bot.service.runners import TriageRunner
from bot.service.settings import Settings
from bot.service.verbs import VerbRunner
from bot.slack.api import SlackPoster, make_client
from bot.slack.gate import RequestGate
from bot.slack.gate import install as install_gate
from bot.slack.handlers import Handlers
from bot.slack.jobs import JobPool
from bot.slack.limits import ServeLimits
from bot.slack.metrics import BotMetrics
from bot.slack.work import Work

log = logging.getLogger("gpumem.slack")


@dataclass(frozen=True)
class Listener:
    """One listener: Bolt's registration method (`command`, `action`), its matcher, its function."""

    kind: str
    matcher: str | re.Pattern[str]
    fn: Callable[..., Any]


def listeners(handlers: Handlers, command: str = "/gpumem") -> tuple[Listener, ...]:
    return (
        Listener("command", command, handlers.on_command),
        Listener("action", RERUN_ACTION, handlers.on_rerun),
    )


def register(app: App, registry: tuple[Listener, ...]) -> None:
    for item in registry:
        getattr(app, item.kind)(item.matcher)(item.fn)


def create_app(settings: Settings, client: WebClient, handlers: Handlers) -> App:
    """The Bolt App. Its listener pool is large enough that every command in a burst is acked."""
    signing = settings.slack.signing_secret
    app = App(
        client=client,
        signing_secret=signing.reveal() if signing else None,
        token_verification_enabled=settings.slack.verify_token_at_start,
        request_verification_enabled=True,
        process_before_response=False,
        listener_executor=ThreadPoolExecutor(max_workers=settings.workers.listener_threads,
                                             thread_name_prefix="gpumem-listener"),
        logger=logging.getLogger("gpumem.bolt"),
    )
    install_gate(app, RequestGate(signing.reveal() if signing else None, handlers.metrics))
    register(app, listeners(handlers, settings.slack.command))
    app.error(handlers.on_error)
    return app


@dataclass
class Bot:
    settings: Settings
    metrics: BotMetrics
    client: WebClient
    poster: SlackPoster
    pool: JobPool
    work: Work
    handlers: Handlers
    app: App
    limits: ServeLimits = field(default_factory=ServeLimits)

    def health(self) -> dict[str, Any]:
        return {"ok": not self.pool.closed, "jobs_running": self.pool.running, "jobs_queued": self.pool.queued,
                "workers": self.pool.workers}

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop taking jobs, cancel the waiting ones (their parents say so), let running ones end."""
        self.pool.shutdown(timeout_s)


def secrets_of(settings: Settings) -> tuple[str, ...]:
    """Every secret value the settings hold (the log filter masks them)."""
    found = [settings.slack.bot_token, settings.slack.signing_secret, settings.slack.app_token]
    for prom in [settings.prometheus, *(c.prometheus for c in settings.clusters)]:
        if prom is not None:
            found += [prom.bearer_token, prom.password]
    return tuple(s.reveal() for s in found if s is not None)


def build_bot(settings: Settings, runner: TriageRunner, verb_runner: VerbRunner | None = None,
              metrics: BotMetrics | None = None,
              parser_factory: Callable[[], argparse.ArgumentParser] | None = None,
              limits: ServeLimits | None = None) -> Bot:
    """Everything the Slack surface needs, from settings and the two injected runners."""
    settings.require("bot_token")
    metrics = metrics or BotMetrics()
    token = settings.slack.bot_token.reveal() if settings.slack.bot_token else ""
    client = make_client(token, settings.slack.api_url, metrics, settings.deadlines.slack_call_s)
    poster = SlackPoster(client, metrics)
    pool = JobPool(settings.workers.pool_size, settings.workers.queue_length)
    metrics.watch_pool(lambda: pool.running, lambda: pool.queued)
    d = settings.deadlines
    work = Work(poster, runner, verb_runner, metrics, d.triage_s, d.verb_s, d.progress_interval_s,
                secrets=secrets_of(settings))
    handlers = Handlers(settings, work, pool, poster, metrics, parser_factory=parser_factory)
    app = create_app(settings, client, handlers)
    return Bot(settings, metrics, client, poster, pool, work, handlers, app, limits or ServeLimits())

