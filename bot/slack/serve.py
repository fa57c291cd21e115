"""`gpumem serve`: the Slack bot, over Socket Mode (default) or HTTP (`--http`).

    SLACK_BOT_TOKEN=xoxb-... SLACK_APP_TOKEN=xapp-... gpumem serve --config gpumem.yaml
    SLACK_BOT_TOKEN=xoxb-... SLACK_SIGNING_SECRET=... gpumem serve --http --port 3000

HTTP serves /slack/events, /health, /metrics and /alertmanager (Alertmanager's webhook, see
`bot.slack.alerts`) on a threaded WSGI server (waitress). Socket Mode needs no public endpoint
for Slack; /health, /metrics and /alertmanager are still served on --port.

SIGTERM (or Ctrl-C) starts a drain that ends the process within GPUMEM_DRAIN_S +
GPUMEM_EXIT_GRACE_S seconds (20 + 5 by default, under Kubernetes' 30 s grace period), whether
or not Slack and the cluster still answer: see `bot.slack.drain` and `Bot.drain`.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable, Mapping
from typing import Any

from bot.grammar.requests import ServeRequest
from bot.service.deps import Deps
from bot.service.exits import EXIT_OK, EXIT_USAGE

log = logging.getLogger("gpumem.serve")

#: how long a thread of the serving process holds the interpreter before another may take it
SWITCH_INTERVAL_S = 0.001


def run(args: ServeRequest, lang: str, deps: Deps,
        background: Callable[[Any], list[Any]] | None = None) -> int:
    """`gpumem serve`. `background(bot)` gives what runs beside the listeners (the handover
    scheduler, from the layer above both surfaces): started once the HTTP face is up, shut down
    first in the drain. `deps.env` is the process environment as `bot.config.environ` read it."""
    from bot.config.settings import SettingsError, load_settings
    from bot.render.i18n import Catalog
    from bot.slack.limits import ServeLimits

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
    if background is not None:
        try:
            bot.background += background(bot)
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
        from slack_bolt.adapter.socket_mode import SocketModeHandler

        server = serve_http(bot, host, port, events=False)
        print(cat.t("slack.serve.listening_socket", url=server.url), file=sys.stderr, flush=True)
        assert settings.slack.app_token is not None
        handler = SocketModeHandler(bot.app, settings.slack.app_token.reveal())
        handler.connect()
    bot.start_background()
    _wait(stop)
    return stop_within(bot, server, handler, limits, cat)


def stop_within(bot: Any, server: Any, handler: Any, limits: Any, cat: Any) -> int:
    """The shutdown after SIGTERM, over in `limits.stop_s` at most (drain, then grace).

    The HTTP server keeps answering during the drain (/health with 503, new commands with
    "restarting"); Socket Mode stops taking envelopes at once. A watchdog ends the process at
    the hard deadline if a thread blocked on the network would hold the interpreter's exit.
    """
    from bot.slack.drain import Watchdog

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
    from bot.service.redact import install
    from bot.slack.app import secrets_of

    logging.basicConfig(level=getattr(logging, level), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install(secrets_of(settings))


def build_from_settings(settings: Any, environ: Mapping[str, str], limits: Any = None) -> Any:
    """The bot with the runners this deployment has: live triage, bundles from the config, verbs in a worker.

    Triage runs in `workers.pool_size` worker processes, started and warmed here (matplotlib,
    fonts, the parsers, the Kubernetes client, one triage of the first configured bundle), so
    neither the first command pays for that nor do triages compete with the acks for the GIL.
    This returns once they are warm: the HTTP face is started after it.
    """
    from bot.service.runners import ProcessRunner
    from bot.slack.app import build_bot, secrets_of
    from bot.slack.limits import ServeLimits
    from bot.slack.work import warm_up
    from bot.verbs.worker import WorkerVerbRunner

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
            from bot.service.runners import BundleRunner, live_runner

            settings = self.settings
            live = live_runner(settings)
            bundles = BundleRunner(settings.bundles, lang=settings.slack.default_lang) if settings.bundles else None
            if live is None and bundles is None:
                log.warning("no live triage in this build and no bundles in the config: every target is unknown")
            self._runners = (live, bundles)
        return self._runners

    def warm(self) -> None:
        """Build the runners (the live one imports the Kubernetes client) and warm the bundle one."""
        from bot.service.runners import warm_charts

        _, bundles = self._built()
        if bundles is not None:
            bundles.warm()
        else:
            warm_charts(self.settings.slack.default_lang)

    def __call__(self, target: str, context: str | None, on_step: Any) -> Any:
        from bot.service.runners import TargetNotFound

        live, bundles = self._built()
        if bundles is not None and target in bundles.bundles:
            return bundles(target, context, on_step)
        if live is None:
            raise TargetNotFound(target)
        return live(target, context, on_step)


def serve_http(bot: Any, host: str, port: int, events: bool = True) -> Any:
    """Start the threaded HTTP server for `bot` on a background thread; returns it (`.url`, `.close()`)."""
    from bot.slack.http import HttpServer, wsgi_app

    limit = bot.limits.max_body_bytes
    app = wsgi_app(bot.app, bot.metrics, bot.health, events=events, max_body_bytes=limit,
                   alertmanager=bot.alert_endpoint(), answering=bot.handlers.answering)
    server = HttpServer(app, host, port, bot.settings.workers.http_threads, max_body_bytes=limit,
                        metrics=bot.metrics).start()
    if bot.settings.alerts.token is None:
        log.warning("Alertmanager webhook refused (fail closed): neither GPUMEM_WEBHOOK_TOKEN nor "
                    "GPUMEM_WEBHOOK_TOKEN_FILE is set, so POST %s/alertmanager answers 403", server.url)
    else:
        log.info("Alertmanager webhook: POST %s/alertmanager (bearer token or basic auth from %s)", server.url,
                 bot.settings.alerts.token.source)
    return server
