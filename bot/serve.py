"""`gpumem serve`: the Slack bot, over Socket Mode (default) or HTTP (`--http`), composed here.

    SLACK_BOT_TOKEN=xoxb-... SLACK_APP_TOKEN=xapp-... gpumem serve --config gpumem.yaml
    SLACK_BOT_TOKEN=xoxb-... SLACK_SIGNING_SECRET=... gpumem serve --http --port 3000

Three parts that do not know each other meet here: the Slack app (`bot.slack`), the HTTP face
(`bot.http`: /slack/events with `--http`, /health, /metrics and /alertmanager, whose handler is
the Slack side's `AlertDesk`) and the scheduler (`bot.scheduler`, posting through the Slack
bot). Socket Mode needs no public endpoint for Slack; /health, /metrics and /alertmanager are
still served on --port.

SIGTERM (or Ctrl-C) starts a drain that ends the process within GPUMEM_DRAIN_S +
GPUMEM_EXIT_GRACE_S seconds (20 + 5 by default, under Kubernetes' 30 s grace period), whether
or not Slack and the cluster still answer: see `bot.slack.drain` and `Bot.drain`.
"""

from __future__ import annotations

import gc
import logging
import signal
import sys
import threading
from datetime import datetime
from typing import Any

from bot.config.settings import SettingsError, load_settings
from bot.grammar.requests import ServeRequest
from bot.http.alertmanager import alert_endpoint
from bot.http.app import EVENTS_PATH, WsgiApp, wsgi_app
from bot.http.server import HttpServer
from bot.render.i18n import Catalog
from bot.scheduler.setup import scheduler_from_settings, sweeps_expiry, wanted
from bot.service.deps import Deps
from bot.service.exits import EXIT_OK, EXIT_USAGE
from bot.service.redact import install
from bot.slack.app import Bot, secrets_of
from bot.slack.drain import Watchdog
from bot.slack.events import events_app, socket_mode
from bot.slack.limits import ServeLimits
from bot.slack.serve import build_from_settings
from bot.slack.slash import SlashLane

log = logging.getLogger("gpumem.serve")

#: how long a thread of the serving process holds the interpreter before another may take it
SWITCH_INTERVAL_S = 0.001


def run(args: ServeRequest, lang: str, deps: Deps) -> int:
    """`gpumem serve`. What runs beside the listeners (`serve_background`: the scheduler) is
    started once the HTTP face is up, and shut down first in the drain. `deps.env` is the process
    environment as `bot.config.environ` read it."""
    cat = Catalog.load(lang)
    try:
        settings = load_settings(args.config, deps.env)
        settings.require("bot_token", "signing_secret" if args.http else "app_token")
        limits = ServeLimits.from_environ(deps.env)
    except SettingsError as e:
        print(cat.t("slack.serve.config_error", error=str(e)), file=sys.stderr)
        return EXIT_USAGE
    configure_logging(args.log_level, settings)
    # An ack waits for the interpreter behind whatever thread holds it (a parent message being
    # posted, a chart being sent): switching every 1 ms instead of Python's 5 ms cut the p99 ack
    # of a 50-command burst from 80-96 ms to 56-71 ms (benchmarks/bench_slack_ack.py). Triage
    # runs in worker processes, so no long computation here pays for the extra switches.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    bot = build_from_settings(settings, deps.env, limits)
    try:
        bot.background += serve_background(bot)
    except SettingsError as e:
        bot.close(timeout_s=1.0)
        print(cat.t("slack.serve.config_error", error=str(e)), file=sys.stderr)
        return EXIT_USAGE
    except BaseException:
        bot.close(timeout_s=1.0)
        raise
    host = args.host or settings.http.host
    port = settings.http.port if args.port is None else args.port
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    handler = None
    if args.http:
        server = serve_http(bot, host, port)
        print(cat.t("slack.serve.listening_http", url=server.url), file=sys.stderr, flush=True)
    else:
        server = serve_http(bot, host, port, events=False)
        print(cat.t("slack.serve.listening_socket", url=server.url), file=sys.stderr, flush=True)
        handler = socket_mode(bot)
    bot.start_background()
    # everything built so far (the catalogs, Bolt, the clients, the warmed workers' handles)
    # lives as long as the process: out of the collector's sight, a burst of acks no longer
    # pays for full collections that walk it (gc.freeze)
    gc.freeze()
    _wait(stop)
    return stop_within(bot, server, handler, limits, cat)


def serve_background(bot: Bot) -> list[Any]:
    """What `gpumem serve` runs beside the Slack listeners: the scheduler (with its leader
    election) when the config has schedules, review reminders or remediation with a store. Its
    jobs post through the Slack bot's `post_handover` and `post_review`, and its leader runs the
    bot's plan expiry sweep and, every minute, the reconcile pass of plans left applying
    (`bot.slack.plan_notices`). Raises SettingsError (naming the field) when it cannot be built."""
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


def http_app(bot: Bot, events: bool = True) -> WsgiApp:
    """The HTTP face's WSGI app for `bot`: Slack's events (when `events`), the bot's health and
    metrics, and its alert desk behind /alertmanager (every notification refused without a token)."""
    token = bot.settings.alerts.token
    alerts = alert_endpoint(bot.alerts, token.reveal() if token is not None else None, bot.metrics,
                            lambda: bot.stopping.is_set)
    lane = SlashLane(bot.app, bot.settings.slack.command, bot.handlers.on_command) if events else None
    slack = events_app(bot.app, bot.metrics, EVENTS_PATH, answering=bot.handlers.answering, lane=lane) \
        if events else None
    return wsgi_app(bot.metrics, bot.health, max_body_bytes=bot.limits.max_body_bytes, events=slack,
                    alertmanager=alerts)


def serve_http(bot: Bot, host: str, port: int, events: bool = True) -> HttpServer:
    """Start the threaded HTTP server for `bot` on a background thread; returns it (`.url`, `.close()`)."""
    server = HttpServer(http_app(bot, events), host, port, bot.settings.workers.http_threads,
                        max_body_bytes=bot.limits.max_body_bytes, metrics=bot.metrics).start()
    if bot.settings.alerts.token is None:
        log.warning("Alertmanager webhook refused (fail closed): neither GPUMEM_WEBHOOK_TOKEN nor "
                    "GPUMEM_WEBHOOK_TOKEN_FILE is set, so POST %s/alertmanager answers 403", server.url)
    else:
        log.info("Alertmanager webhook: POST %s/alertmanager (bearer token or basic auth from %s)", server.url,
                 bot.settings.alerts.token.source)
    return server


def stop_within(bot: Bot, server: HttpServer, handler: Any, limits: ServeLimits, cat: Catalog) -> int:
    """The shutdown after SIGTERM, over in `limits.stop_s` at most (drain, then grace).

    The HTTP server keeps answering during the drain (/health with 503, new commands with
    "restarting"); Socket Mode stops taking envelopes at once. A watchdog ends the process at
    the hard deadline if a thread blocked on the network would hold the interpreter's exit.
    """

    def report() -> str:
        running = bot.work.running()
        return f"({len(running)} job(s) still running: {', '.join(j.target or j.command.verb for j in running[:5])})"

    Watchdog(limits.stop_s, EXIT_OK, on_fire=report).start()
    print(cat.t("slack.serve.stopping"), file=sys.stderr, flush=True)
    if handler is not None:
        handler.close()
    bot.drain()
    server.close()
    log.info("stopped")
    return EXIT_OK


def _wait(stop: threading.Event) -> None:
    while not stop.wait(1.0):
        pass


def configure_logging(level: str, settings: Any) -> None:
    """Plain logs on stderr, every record passed through the token filter."""
    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install(secrets_of(settings))
