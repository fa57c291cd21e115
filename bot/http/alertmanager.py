"""POST /alertmanager: Alertmanager's webhook checked, parsed and handed to the handler given.

The request thread only checks and hands over: the Authorization header (`Bearer TOKEN`, or
Basic with TOKEN as the password; constant-time compare; anything else 401), the body
(Alertmanager's payload version 4; a malformed one 400 naming the field), a handler that takes
it (else 503, and Alertmanager retries). Then it answers 200, whatever the number of alerts in
the body. What becomes of the alerts is the handler's (the Slack side's `AlertDesk`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from bot.http.app import ALERTMANAGER_PATH, Endpoint
from bot.service.alert_payload import Notification, PayloadError, parse_notification
from bot.service.alerts import webhook_token_matches
from bot.telemetry.metrics import BotMetrics

log = logging.getLogger("gpumem.alerts")

_JSON = [("Content-Type", "application/json")]


class AlertHandler(Protocol):
    """What takes an accepted notification: `offer` queues it (False when full or stopped)."""

    @property
    def closed(self) -> bool: ...

    def offer(self, notification: Notification) -> bool: ...


def alert_endpoint(handler: AlertHandler | None, token: str | None, metrics: BotMetrics,
                   draining: Callable[[], bool] | None = None) -> Endpoint:
    """The handler of POST /alertmanager for `bot.http.app.wsgi_app`: (status, headers, body).
    Without a token or a handler it refuses every notification (403, fail closed); while
    `draining()` it answers 503. The body has already been bounded by `bot.http.app.bound_body`.
    Nothing of the Authorization header is logged."""

    def refuse(status: str, reason: str, doc: dict[str, Any], size: int,
               headers: tuple[tuple[str, str], ...] = ()) -> tuple[str, list[tuple[str, str]], bytes]:
        metrics.http_refused.labels(reason=reason).inc()
        log.warning("refused POST %s: %s (body %d bytes)", ALERTMANAGER_PATH, reason, size)
        return status, [*_JSON, *headers], json.dumps(doc).encode()

    def handle(environ: dict[str, Any]) -> tuple[str, list[tuple[str, str]], bytes]:
        stream = environ.get("wsgi.input")
        body = stream.read() if stream is not None else b""
        if token is None or handler is None:
            return refuse("403 Forbidden", "webhook_disabled",
                          {"error": "the Alertmanager webhook is off: GPUMEM_WEBHOOK_TOKEN (or _FILE) is not set"},
                          len(body))
        if not webhook_token_matches(environ.get("HTTP_AUTHORIZATION"), token):
            return refuse("401 Unauthorized", "webhook_unauthorized", {"error": "unauthorized"}, len(body),
                          (("WWW-Authenticate", 'Bearer realm="gpumem"'),))
        try:
            notification = parse_notification(body)
        except PayloadError as e:
            return refuse("400 Bad Request", "webhook_bad_body",
                          {"error": "not an Alertmanager webhook notification (payload version 4)",
                           "field": e.field, "problem": e.problem}, len(body))
        if (draining is not None and draining()) or handler.closed:
            return refuse("503 Service Unavailable", "webhook_stopping", {"error": "gpumem is restarting"},
                          len(body), (("Retry-After", "10"),))
        if not handler.offer(notification):
            return refuse("503 Service Unavailable", "webhook_queue_full",
                          {"error": "too many alert notifications waiting; Alertmanager will retry"}, len(body),
                          (("Retry-After", "5"),))
        doc = {"status": "accepted", "alerts": len(notification.alerts)}
        return "200 OK", list(_JSON), json.dumps(doc).encode()

    return handle
