"""The WSGI app of `gpumem serve`: /health, /metrics, POST /alertmanager and the mounted
/slack/events, behind one body limit.

The app routes by path; `bot.http.server` serves it with one thread per request in flight.
What answers /slack/events is handed in (`events`, a WSGI app: the Slack side's, see
`bot.slack.events`), and so is what answers /alertmanager (`alertmanager`, see
`bot.http.alertmanager`): this module knows neither Slack nor the alert desk.

Every path shares one body limit (`max_body_bytes`; Slack's payloads are a few KB). waitress
refuses a larger declared Content-Length with 413 before reading a byte of the body, and stops
a chunked body once it has passed the limit; the WSGI app checks again and reads at most the
limit itself (a server that streams the body, a Content-Length that is missing or wrong), so no
code behind it ever sees more. A refused request is logged as one line, with its size and the
reason, never with its body.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

from bot.telemetry.errorid import new_error_id
from bot.telemetry.metrics import CONTENT_TYPE, BotMetrics

log = logging.getLogger("gpumem.http")

#: a WSGI application: (environ, start_response) -> the body
WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
#: the handler of one POST: the bounded environ in, (status, headers, body) out
Endpoint = Callable[[dict[str, Any]], tuple[str, list[tuple[str, str]], bytes]]

EVENTS_PATH = "/slack/events"
ALERTMANAGER_PATH = "/alertmanager"
PATHS = (EVENTS_PATH, "/health", "/metrics", ALERTMANAGER_PATH)
_JSON = [("Content-Type", "application/json")]
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
_READ_CHUNK = 64 * 1024


def path_label(path: str) -> str:
    """A bounded, printable name for a request path: one we serve, or "other"."""
    return path if path in PATHS else "other"


def wsgi_app(metrics: BotMetrics, health: Callable[[], dict[str, Any]], *, max_body_bytes: int,
             events: WsgiApp | None = None, alertmanager: Endpoint | None = None) -> WsgiApp:
    """Route POST /slack/events to `events` (without one it is 404), /health to `health()` (200
    when its "ok" is true, else 503), /metrics to `metrics`, POST /alertmanager to `alertmanager`
    (`bot.http.alertmanager.alert_endpoint`; without one it is 404); every path refuses a body
    over `max_body_bytes` with 413."""

    def route(environ: dict[str, Any], start_response: Callable[..., Any], method: str,
              path: str) -> Iterable[bytes]:
        if path == EVENTS_PATH and events is not None and method == "POST":
            return events(environ, start_response)
        if path == "/health" and method in ("GET", "HEAD"):
            state = health()
            start_response("200 OK" if state.get("ok") else "503 Service Unavailable", _JSON)
            return [json.dumps(state).encode()]
        if path == ALERTMANAGER_PATH and alertmanager is not None:
            if method != "POST":
                start_response("405 Method Not Allowed", [*_JSON, ("Allow", "POST")])
                return [b'{"error": "POST an Alertmanager webhook notification here"}']
            try:
                status, headers, body = alertmanager(environ)
            except Exception:
                error_id = new_error_id()
                log.exception("Alertmanager notification failed [error %s]", error_id)
                start_response("500 Internal Server Error", _JSON, sys.exc_info())
                return [json.dumps({"error": "internal error", "error_id": error_id}).encode()]
            start_response(status, headers)
            return [body]
        if path == "/metrics" and method == "GET":
            start_response("200 OK", [("Content-Type", CONTENT_TYPE)])
            return [metrics.exposition()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        method = environ.get("REQUEST_METHOD", "GET")
        started = time.perf_counter()
        label = path_label(path)
        try:
            refusal = bound_body(environ, max_body_bytes)
            if refusal is not None:
                status, reason, size = refusal
                log_refusal(method, label, reason, size, max_body_bytes)
                metrics.http_refused.labels(reason=reason).inc()
                start_response(status, [*_JSON, ("Connection", "close")])
                return [json.dumps({"error": reason, "max_body_bytes": max_body_bytes}).encode()]
            return route(environ, start_response, method, path)
        finally:
            metrics.http_seconds.labels(path=label).observe(time.perf_counter() - started)

    return app


def log_refusal(method: str, label: str, reason: str, size: int | str | None, limit: int) -> None:
    """The one line a refused request leaves in the log: never its body."""
    shown = "unknown" if size is None else size
    log.warning("refused %s %s: %s (body %s bytes, limit %d)", method[:10], label, reason, shown, limit)


def bound_body(environ: dict[str, Any], limit: int) -> tuple[str, str, int | str | None] | None:
    """Read the request body, at most `limit` bytes, into `wsgi.input`; or say why not.

    Returns None when the body is in place (`wsgi.input` a BytesIO, `CONTENT_LENGTH` its
    length), else (HTTP status, reason, size). A declared Content-Length over the limit is
    refused unread; without one, a chunked or server-terminated body is read up to the limit
    and one byte more; a stream that ends early leaves the bytes that came. Nothing else is
    read: a GET without a length has no body.
    """
    stream = environ.get("wsgi.input")
    declared = (environ.get("CONTENT_LENGTH") or "").strip()
    chunked = "chunked" in (environ.get("HTTP_TRANSFER_ENCODING") or "").lower()
    if declared:
        if not _CONTENT_LENGTH.fullmatch(declared):
            return "400 Bad Request", "bad_content_length", None
        size = int(declared)
        if size > limit:
            return "413 Request Entity Too Large", "body_too_large", size
        body = _read_at_most(stream, size)
    elif chunked or environ.get("wsgi.input_terminated"):
        body = _read_at_most(stream, limit + 1)
        if len(body) > limit:
            return "413 Request Entity Too Large", "body_too_large", f"over {limit}"
    else:
        body = b""
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return None


def _read_at_most(stream: Any, n: int) -> bytes:
    if stream is None or n <= 0:
        return b""
    parts, left = [], n
    while left > 0:
        chunk = stream.read(min(_READ_CHUNK, left))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)
