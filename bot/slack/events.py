"""Slack's events in: POST /slack/events as a WSGI app (`events_app`), or Socket Mode (`socket_mode`).

`events_app` is Bolt's WSGI adapter with the answers Bolt leaves to its host; the HTTP face
(`bot.http.app`) mounts it at its events path. A body Bolt cannot parse (it parses a `payload`
field as JSON before it checks the signature) is the sender's error: 400, counted as
`bad_body`. Anything else that fails is a 500 with an error id, the traceback in the log.
`answering` (`bot.slack.jobs.Answering`) counts the Slack requests in flight.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.socket_mode import SocketModeHandler
from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.telemetry.errorid import new_error_id
from bot.telemetry.metrics import BotMetrics

log = logging.getLogger("gpumem.http")

_JSON = [("Content-Type", "application/json")]


def events_app(bolt_app: App, metrics: BotMetrics, path: str, answering: Any = None,
               lane: Any = None) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The WSGI app that hands a POST to `path` to `bolt_app`; slash commands that `lane`
    (`bot.slack.slash.SlashLane`) takes are answered without Bolt's dispatch."""
    slack = SlackRequestHandler(bolt_app, path=path)

    def answer(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        fast = lane.answer(environ) if lane is not None else None
        if fast is None:
            return list(slack(environ, start_response))
        start_response(fast.status, fast.get_headers())
        return list(fast.get_body())

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        try:
            if answering is None:
                return answer(environ, start_response)
            with answering:  # work after acks waits while Slack requests are answered
                return answer(environ, start_response)
        except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
            log.warning("unparseable Slack request body (%s, %s bytes)", type(e).__name__,
                        environ.get("CONTENT_LENGTH") or 0)
            metrics.http_refused.labels(reason="bad_body").inc()
            start_response("400 Bad Request", _JSON, sys.exc_info())
            return [b'{"error": "invalid request body"}']
        except Exception:
            error_id = new_error_id()
            log.exception("Slack request failed [error %s]", error_id)
            start_response("500 Internal Server Error", _JSON, sys.exc_info())
            return [json.dumps({"error": "internal error", "error_id": error_id}).encode()]

    return app


def socket_mode(bot: Any) -> SocketModeHandler:
    """Slack's events over Socket Mode (no public endpoint): connected; `.close()` stops taking envelopes."""
    assert bot.settings.slack.app_token is not None
    handler = SocketModeHandler(bot.app, bot.settings.slack.app_token.reveal())
    handler.connect()
    return handler
