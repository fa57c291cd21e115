"""The HTTP face of `gpumem serve`: /slack/events, /health and /metrics on a threaded server.

The WSGI app routes by path; waitress serves it with one thread per request in flight (Bolt
holds a request until the listener acks, so a burst of 50 commands needs 50 threads, not a
queue behind one). Bolt's own `app.start()` is a single-threaded development server.

Every path shares one body limit (`max_body_bytes`, 1 MiB by default; Slack's payloads are a
few KB). waitress refuses a larger declared Content-Length with 413 before reading a byte of
the body, and stops a chunked body once it has passed the limit; the WSGI app checks again
and reads at most the limit itself (a server that streams the body, a Content-Length that is
missing or wrong), so no code behind it ever sees more. A refused request is logged as one
line, with its size and the reason, never with its body.
"""

from __future__ import annotations

import io
import json
import logging
import re
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from slack_bolt.adapter.wsgi import SlackRequestHandler

from bot.slack.errorid import new_error_id
from bot.slack.limits import DEFAULT_MAX_BODY_BYTES
from bot.slack.metrics import CONTENT_TYPE, BotMetrics

log = logging.getLogger("gpumem.http")

EVENTS_PATH = "/slack/events"
ALERTMANAGER_PATH = "/alertmanager"
PATHS = (EVENTS_PATH, "/health", "/metrics", ALERTMANAGER_PATH)
_JSON = [("Content-Type", "application/json")]
_CONTENT_LENGTH = re.compile(r"[0-9]{1,19}")
_READ_CHUNK = 64 * 1024


def path_label(path: str) -> str:
    """A bounded, printable name for a request path: one we serve, or "other"."""
    return path if path in PATHS else "other"


def wsgi_app(bolt_app: Any, metrics: BotMetrics, health: Callable[[], dict[str, Any]],
             events: bool = True, max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
             alertmanager: Callable[[dict[str, Any]], tuple[str, list[tuple[str, str]], bytes]] | None = None,
             answering: Any = None) -> Callable[..., Iterable[bytes]]:
    """Route /slack/events to Bolt (when `events`), /health and /metrics to the bot, POST
    /alertmanager to `alertmanager` (`bot.slack.alerts.alert_endpoint`; without one it is 404);
    every path refuses a body over `max_body_bytes` with 413. `answering`
    (`bot.slack.jobs.Answering`) counts the Slack requests in flight."""
    slack = SlackRequestHandler(bolt_app, path=EVENTS_PATH) if events else None

    def route(environ: dict[str, Any], start_response: Callable[..., Any], method: str,
              path: str) -> Iterable[bytes]:
        if path == EVENTS_PATH and slack is not None and method == "POST":
            try:
                if answering is None:
                    return list(slack(environ, start_response))
                with answering:  # work after acks waits while Slack requests are answered
                    return list(slack(environ, start_response))
            except (ValueError, TypeError, AttributeError, KeyError, IndexError) as e:
                # Bolt parses the body (a `payload` field is JSON) before it checks the
                # signature; a body it cannot parse is the sender's error, not ours
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


class HttpServer:
    """waitress on `host:port` (port 0: any free port, see `.port`), run on a thread or in front."""

    def __init__(self, app: Callable[..., Any], host: str, port: int, threads: int,
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, metrics: BotMetrics | None = None):
        from waitress.server import create_server

        # waitress refuses Content-Length >= its limit: one more byte keeps "over the limit" the rule
        self._server = create_server(app, host=host, port=port, threads=threads, ident="gpumem",
                                     connection_limit=max(100, threads * 2), channel_timeout=30,
                                     clear_untrusted_proxy_headers=True,
                                     max_request_body_size=max_body_bytes + 1)
        self._server.channel_class = _channel_class(max_body_bytes, metrics)
        self.host = str(self._server.effective_host)
        self.port = int(self._server.effective_port)
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        return f"http://{host}:{self.port}"

    def serve_forever(self) -> None:
        """Serve until `close()`; the sockets are closed on this thread, never under a running select."""
        from waitress import wasyncore

        try:
            while not self._stop.is_set():
                wasyncore.loop(timeout=0.2, map=self._server._map, count=1)
        finally:
            self._server.task_dispatcher.shutdown(timeout=5)
            wasyncore.close_all(self._server._map)

    def start(self) -> HttpServer:
        self._thread = threading.Thread(target=self.serve_forever, name="gpumem-http", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def _channel_class(limit: int, metrics: BotMetrics | None) -> type:
    """waitress's channel, with its own error answers (413, 400, 431) logged as one line."""
    from waitress.channel import HTTPChannel
    from waitress.task import ErrorTask

    class LoggedErrorTask(ErrorTask):
        def execute(self) -> None:
            request = self.request
            error = request.error
            too_large = getattr(error, "code", 0) == 413
            reason = "body_too_large" if too_large else str(getattr(error, "reason", "bad_request")).lower().replace(" ", "_")
            size = request.content_length if request.content_length else None
            if too_large and request.chunked:
                size = f"over {limit}"
            log_refusal(str(request.command or "?"), path_label(str(request.path or "")), reason, size, limit)
            if metrics is not None:
                metrics.http_refused.labels(reason=reason).inc()
            super().execute()

    class Channel(HTTPChannel):
        error_task_class = LoggedErrorTask

    return Channel
