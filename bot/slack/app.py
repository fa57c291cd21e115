"""The Slack app, assembled: settings in, a Bolt App with its listeners, pool and client out.

Listeners are an explicit registry (`listeners()`), wired by plain calls (`register()`), so a
test builds exactly the app it means to. Bolt's request verification is replaced by
`bot.slack.gate.RequestGate` in the same place: over HTTP a request whose signature is missing,
wrong or older than five minutes gets 401, a malformed timestamp too, and a replay runs once.

>>> bot = build_bot(settings, runner)          # doctest: +SKIP
>>> bot.app.dispatch(signed_request)           # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
import re
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from slack_bolt import App
from slack_sdk import WebClient

from bot.config.settings import Settings
from bot.grammar.slack import ParserFactory, slack_parser
from bot.render import slack_remediation as P
from bot.render.slack_fleet import TRIAGE_ACTION
from bot.render.slack_triage import RERUN_ACTION
from bot.service.alerts import PodResolver
from bot.service.approvals import bot_reader, plannable_actions
from bot.service.fleet import fleet_reader
from bot.service.handover import live_object_reader, prometheus_reader, prometheus_series_reader
from bot.service.reconcile import reconcile_applying
from bot.service.runners import TriageRunner
from bot.slack.alerts import AlertDesk
from bot.slack.api import SlackPoster, make_client
from bot.slack.drain import Stopping, run_bounded
from bot.slack.gate import RequestGate
from bot.slack.gate import install as install_gate
from bot.slack.handlers import Handlers
from bot.slack.jobs import JobPool
from bot.slack.limits import ServeLimits
from bot.slack.plan_notices import PlanNotices, StartupNotices
from bot.slack.work import SharedStore, Work
from bot.store.db import Store
from bot.telemetry.metrics import BotMetrics
from bot.verbs.worker import VerbRunner

log = logging.getLogger("gpumem.slack")


@dataclass(frozen=True)
class Listener:
    """One listener: Bolt's registration method (`command`, `action`), its matcher, its function."""

    kind: str
    matcher: str | re.Pattern[str]
    fn: Callable[..., Any]


def listeners(handlers: Handlers, command: str = "/gpumem") -> tuple[Listener, ...]:
    desk = handlers.remediation
    return (
        Listener("command", command, handlers.on_command),
        Listener("action", RERUN_ACTION, handlers.on_rerun),
        # the fleet view's Triage buttons carry the same value: one triage each, claimed per button
        Listener("action", TRIAGE_ACTION, handlers.on_rerun),
        # remediation: the diagnosis' "Plan" buttons (`gpumem_plan:<n>`), then the plan message's buttons
        Listener("action", re.compile(rf"^{P.PLAN_ACTION}:\d+$"), desk.on_plan),
        Listener("action", P.APPROVE_ACTION, desk.on_approve),
        Listener("action", P.REJECT_ACTION, desk.on_reject),
        Listener("action", P.ROLLBACK_ACTION, desk.on_rollback),
        Listener("action", P.REPLAN_ACTION, desk.on_replan),
        Listener("action", P.ROUTING_ACTION, desk.on_routing),
    )


def register(app: App, registry: tuple[Listener, ...]) -> None:
    for item in registry:
        getattr(app, item.kind)(item.matcher)(item.fn)


def create_app(settings: Settings, client: WebClient, handlers: Handlers) -> App:
    """The Bolt App. A listener runs in the thread of the request it answers and returns at the
    ack (see `bot.slack.handlers`); Bolt's own executor only runs lazy listeners (none)."""
    signing = settings.slack.signing_secret
    app = App(
        # a name given: without one, Bolt reads it from inspect.stack(), ~0.1 s of frame walking
        name="gpumem",
        client=client,
        signing_secret=signing.reveal() if signing else None,
        token_verification_enabled=settings.slack.verify_token_at_start,
        request_verification_enabled=True,
        process_before_response=True,
        listener_executor=ThreadPoolExecutor(max_workers=2, thread_name_prefix="gpumem-bolt"),
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
    stopping: Stopping = field(default_factory=Stopping)
    #: the config's `store.path`, opened once (notes, triage records, handovers); None without one
    store: SharedStore | None = None
    #: what runs beside the listeners (the handover scheduler, the start-up plan notices): each has
    #: start() and shutdown();
    #: started after the HTTP face, shut down first in the drain (before the store closes)
    background: list[Any] = field(default_factory=list)
    #: the Alertmanager webhook's desk (`bot.slack.alerts.AlertDesk`), the handler `bot.serve` gives
    #: POST /alertmanager; None: no webhook token set
    alerts: Any = None
    #: plan messages edited with nobody clicking: the expiry sweep, start-up reconciliation
    #: (`bot.slack.plan_notices.PlanNotices`); None without a store
    notices: Any = None

    def start_background(self) -> None:
        for item in self.background:
            item.start()

    def _stop_background(self) -> None:
        for item in self.background:
            try:
                item.shutdown()
            except Exception as e:  # one that cannot stop must not keep the drain from ending
                log.warning("stopping %s failed: %s", type(item).__name__, e)
        self.background = []

    def health(self) -> dict[str, Any]:
        """200 while serving; 503 from the moment a drain begins (a load balancer stops sending)."""
        draining = self.stopping.is_set or self.pool.closed
        return {"ok": not draining, "draining": draining, "jobs_running": self.pool.running,
                "jobs_queued": self.pool.queued, "workers": self.pool.workers}

    def drain(self, drain_s: float | None = None, grace_s: float | None = None) -> bool:
        """Stop in bounded time: the shutdown sequence of `gpumem serve` after SIGTERM.

        At once: /health answers 503, new commands are told gpumem is restarting, queued jobs
        are cancelled (their parents say so; best effort, in parallel, until the drain
        deadline), and Slack calls stop retrying past that deadline. Running jobs get until
        the drain deadline; those still running then are ended as interrupted (best effort,
        within the grace period). Returns True when every job ended on its own.
        """
        drain_s = self.limits.drain_s if drain_s is None else drain_s
        grace_s = self.limits.exit_grace_s if grace_s is None else grace_s
        started = time.monotonic()
        self.stopping.begin(drain_s, grace_s)
        self._stop_background()  # no new scheduled post starts; one in progress ends first
        if self.alerts is not None:  # no new alert triage; queued notifications are recorded only
            self.alerts.shutdown(timeout_s=max(0.5, min(5.0, drain_s / 4)))
        # one Slack call must not outlast the drain (the timeout is read at each call)
        self.client.timeout = max(1, min(int(self.client.timeout), int(drain_s / 2) or 1))
        if not self.handlers.settle(self.stopping.drain_left()):  # every accepted job queued first
            log.warning("stopping: work after an ack still running at the drain deadline")
        cancels = self.pool.close()
        if cancels:
            log.info("stopping: cancelling %d queued job(s)", len(cancels))
            run_bounded(cancels, self.stopping.drain_left(), what="cancel")
        idle = self.pool.wait_idle(self.stopping.drain_left())
        if not idle:
            interrupts = self.work.interruptions()
            log.warning("stopping: %d job(s) still running after %.1f s; ending them as interrupted",
                        len(interrupts), time.monotonic() - started)
            self.client.timeout = max(1, int(grace_s / 2) or 1)
            run_bounded(interrupts, max(0.0, self.stopping.hard_left() - 0.5), what="interrupt")
        self.handlers.remediation.shutdown()  # no apply starts now; a watch running ends with the process
        close_runner = getattr(self.work.runner, "close", None)
        if callable(close_runner):  # worker processes (bot.service.runners.ProcessRunner) end with the bot
            close_runner()
        if self.store is not None:  # after the jobs: the last triage records are written
            self.store.close()
        return idle

    def close(self, timeout_s: float = 30.0) -> None:
        """Stop taking jobs, cancel the waiting ones (their parents say so), let running ones
        end within `timeout_s`, then end the rest as interrupted."""
        if not self.stopping.is_set:
            self.drain(drain_s=timeout_s, grace_s=min(self.limits.exit_grace_s, 5.0))


def secrets_of(settings: Settings) -> tuple[str, ...]:
    """Every secret value the settings hold (the log filter masks them)."""
    found = [settings.slack.bot_token, settings.slack.signing_secret, settings.slack.app_token,
             settings.alerts.token]
    for prom in [settings.prometheus, *(c.prometheus for c in settings.clusters)]:
        if prom is not None:
            found += [prom.bearer_token, prom.password]
    return tuple(s.reveal() for s in found if s is not None)


def open_bot_store(settings: Settings) -> SharedStore | None:
    """The config's `store.path` as the bot's store; None when the config names none (a bot
    never creates the default file under $XDG_STATE_HOME on its own)."""
    if not settings.store.path:
        return None

    return SharedStore(Store.open(settings.store.path))


def reconcile_at_start(settings: Settings, store: SharedStore) -> list[Any]:
    """The plans a stopped bot or CLI left `applying`, settled by reading each object with the
    reader identity (`bot.service.reconcile`; nothing is written). Logged; never stops the start."""

    try:
        done = reconcile_applying(store.each_call(), lambda cluster: bot_reader(settings, cluster))
    except Exception as e:  # a store that cannot be read now: the plans stay as they are
        log.warning("reconciling plans left applying failed: %s: %s", type(e).__name__, e)
        return []
    for r in done:
        log.warning("plan %s (%s) was left applying: %s%s", r.plan_id, r.target, r.outcome,
                    f" ({r.reason})" if r.reason else "")
    return done


def check_audit_at_start(store: SharedStore, metrics: BotMetrics) -> Any:
    """The audit's hash chain checked once at start: logged (the row id and what is wrong, the
    head hash to compare with a copy kept elsewhere; never a row's content) and shown in
    /metrics as `gpumem_audit_chain_broken`. Never stops the start; None when it cannot be read."""
    try:
        with store.use() as s:
            report = s.verify_audit()
    except Exception as e:  # a store that cannot be read now: said, not guessed
        log.warning("the audit's hash chain could not be checked: %s", type(e).__name__)
        return None
    bad = report.first_bad
    metrics.audit_chain_broken.set(0 if bad is None else 1)
    if bad is None:
        log.info("the audit's hash chain holds: %d rows, head %s", report.rows, report.head)
    else:
        log.error("the audit's hash chain is broken at row %d (%s%s); run gpumem audit --verify", bad.id,
                  bad.problem, f", first missing id {bad.missing}" if bad.missing is not None else "")
    return report


def _plan_buttons(settings: Settings) -> Callable[..., list[Any]]:
    """The "Plan" buttons under a diagnosis: the actions gpumem can apply where remediation is on."""

    def buttons(report: Any, lang: str, target: str, context: str | None) -> list[Any]:
        return P.plan_buttons(report, lang, target, context, plannable_actions(report, settings, target, context))

    return buttons


def started(pool: ThreadPoolExecutor, threads: int, timeout_s: float = 10.0) -> ThreadPoolExecutor:
    """`pool` with its `threads` threads running now. A ThreadPoolExecutor starts a thread on a
    submit that finds none idle, and `Thread.start()` waits until the new thread runs: in a
    burst of slash commands the first acks each paid that wait, in the request thread."""
    gate = threading.Barrier(threads + 1, timeout=timeout_s)
    for _ in range(threads):
        pool.submit(gate.wait)
    with contextlib.suppress(threading.BrokenBarrierError):  # not all up in time: the rest start on demand
        gate.wait()
    return pool


def build_bot(settings: Settings, runner: TriageRunner, verb_runner: VerbRunner | None = None,
              metrics: BotMetrics | None = None,
              parser_factory: ParserFactory | None = None,
              limits: ServeLimits | None = None) -> Bot:
    """Everything the Slack surface needs, from settings and the two injected runners."""
    settings.require("bot_token")
    store = open_bot_store(settings)
    # a plan a stopped process left `applying`: did its write land? (Slack is told once the bot is up)
    reconciled = reconcile_at_start(settings, store) if store is not None else []
    metrics = metrics or BotMetrics()
    if store is not None:  # opening it recreated the append-only triggers; the chain says what happened meanwhile
        check_audit_at_start(store, metrics)
    token = settings.slack.bot_token.reveal() if settings.slack.bot_token else ""
    stopping = Stopping()
    client = make_client(token, settings.slack.api_url, metrics, settings.deadlines.slack_call_s, stopping)
    poster = SlackPoster(client, metrics, stopping)
    pool = JobPool(settings.workers.pool_size, settings.workers.queue_length)
    metrics.watch_pool(lambda: pool.running, lambda: pool.queued)
    d = settings.deadlines
    work = Work(poster, runner, verb_runner, metrics, d.triage_s, d.verb_s, d.progress_interval_s,
                secrets=secrets_of(settings), store=store)
    if store is not None:

        work.read_state = prometheus_reader(settings)
        work.read_series = prometheus_series_reader(settings)
        work.watched = settings.watched
        work.read_object = live_object_reader(settings)

    work.fleet_reader = fleet_reader(settings)
    if store is not None and settings.remediation.enabled:
        work.plan_buttons = _plan_buttons(settings)
    after_ack = started(ThreadPoolExecutor(max_workers=settings.workers.listener_threads,
                                           thread_name_prefix="gpumem-after-ack"), settings.workers.listener_threads)
    handlers = Handlers(settings, work, pool, poster, metrics, parser_factory=parser_factory, stopping=stopping,
                        store=store, after_ack=after_ack)
    app = create_app(settings, client, handlers)
    slack_parser(parser_factory)  # built now, not by the first command's ack
    bot = Bot(settings, metrics, client, poster, pool, work, handlers, app, limits or ServeLimits(), stopping,
              store)
    if store is not None:

        bot.notices = PlanNotices(settings, poster, store)
        if reconciled:  # their plan messages are edited after the HTTP face is up, with the background
            bot.background.append(StartupNotices(bot.notices, reconciled))
    if settings.alerts.token is not None:

        bot.alerts = AlertDesk(settings, work, pool, poster, metrics, store, stopping,
                               resolve_pod=PodResolver(settings)).start()
    return bot

