"""The bot's Slack Web API client: retries, and posts that are never silently dropped.

Retries: HTTP 429 after its Retry-After, 5xx and connection errors with exponential backoff
(slack_sdk's retry handlers, counted in metrics). A call that still fails is logged with its
method, error and channel, counted in `gpumem_slack_api_errors_total`, and reported to the
caller as None/False so it can tell the user another way.
"""

from __future__ import annotations

import logging
import re
import socket
from typing import Any

from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError, SlackClientError
from slack_sdk.http_retry.builtin_handlers import (
    ConnectionErrorRetryHandler,
    RateLimitErrorRetryHandler,
    ServerErrorRetryHandler,
)
from slack_sdk.http_retry.builtin_interval_calculators import BackoffRetryIntervalCalculator

from bot.render.slack_blocks import Message
from bot.slack.drain import Stopping
from bot.slack.metrics import BotMetrics

log = logging.getLogger("gpumem.slack")
_CODE = re.compile(r"[a-z0-9_]{1,60}")


def _method(request: Any) -> str:
    url = getattr(request, "url", "") or ""
    return url.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or "?"


def _counting(base: type, reason: str) -> type:
    class Counting(base):  # type: ignore[misc, valid-type]
        def __init__(self, metrics: BotMetrics, stopping: Stopping | None = None, **kw: Any):
            super().__init__(**kw)
            self.metrics = metrics
            self.stopping = stopping

        def can_retry(self, *, state, request, response=None, error=None) -> bool:
            if not super().can_retry(state=state, request=request, response=response, error=error):
                return False
            if self.stopping is not None and not self.stopping.may_wait(self._next_wait(state, response)):
                log.info("slack %s: not retrying (%s): gpumem is stopping", _method(request), reason)
                return False
            return True

        def _next_wait(self, state: Any, response: Any) -> float:
            """About how long the retry would sleep first (Retry-After, else the backoff)."""
            for name, values in (getattr(response, "headers", None) or {}).items():
                if name.lower() == "retry-after":
                    value = values[0] if isinstance(values, list | tuple) else values
                    return float(value) if str(value).isdigit() else 1.0
            return float(self.interval_calculator.calculate_sleep_duration(state.current_attempt))

        def prepare_for_next_attempt(self, *, state, request, response=None, error=None) -> None:
            method = _method(request)
            self.metrics.api_retries.labels(method=method, reason=reason).inc()
            log.info("slack %s: retrying (%s)", method, reason)
            super().prepare_for_next_attempt(state=state, request=request, response=response, error=error)

    Counting.__name__ = f"Counting{base.__name__}"
    return Counting


class _ServerErrors(ServerErrorRetryHandler):
    """500 and 503 as slack_sdk has it, plus 502 and 504 from proxies in front of Slack."""

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return response is not None and response.status_code in (500, 502, 503, 504)


RateLimitRetries = _counting(RateLimitErrorRetryHandler, "ratelimited")
ServerErrorRetries = _counting(_ServerErrors, "server_error")
ConnectionRetries = _counting(ConnectionErrorRetryHandler, "connection")


def make_client(token: str, base_url: str, metrics: BotMetrics, timeout_s: float = 30.0,
                stopping: Stopping | None = None) -> WebClient:
    """A WebClient at `base_url` (keep its trailing slash) that retries what is worth retrying,
    and, once `stopping` is set, only what can end before the drain deadline."""
    backoff = BackoffRetryIntervalCalculator(backoff_factor=0.5)
    return WebClient(token=token, base_url=base_url, timeout=int(timeout_s), retry_handlers=[
        ConnectionRetries(metrics, stopping, max_retry_count=3, interval_calculator=backoff),
        RateLimitRetries(metrics, stopping, max_retry_count=5),
        ServerErrorRetries(metrics, stopping, max_retry_count=3, interval_calculator=backoff),
    ])


def error_of(e: Exception) -> str:
    """Slack's error code (`channel_not_found`, `ratelimited`, `http_503`), or one of ours for a
    call that got no answer: `timeout`, `connection_error`, `request_error`. Never exception
    text: the code may be shown to the one who asked.

    >>> error_of(TimeoutError("timed out")), error_of(ConnectionRefusedError(111, "refused"))
    ('timeout', 'connection_error')
    """
    if isinstance(e, SlackApiError):
        err = e.response.get("error") if hasattr(e.response, "get") else None
        return str(err or f"http_{e.response.status_code}") if _CODE.fullmatch(str(err or "x")) else "api_error"
    if isinstance(e, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(e, OSError):
        return "timeout" if isinstance(getattr(e, "reason", None), TimeoutError) else "connection_error"
    return "request_error"


class SlackPoster:
    """chat.postMessage / chat.update / chat.postEphemeral / files_upload_v2, failures logged."""

    def __init__(self, client: WebClient, metrics: BotMetrics):
        self.client = client
        self.metrics = metrics

    def _call(self, method: str, where: str | None, fn: Any, **kw: Any) -> tuple[Any, str | None]:
        try:
            return fn(**kw), None
        except (SlackApiError, SlackClientError, OSError) as e:
            error = error_of(e)
            self.metrics.api_errors.labels(method=method, error=error).inc()
            detail = ""
            if isinstance(e, SlackApiError) and hasattr(e.response, "get"):
                detail = str(e.response.get("errors") or e.response.get("response_metadata") or "")[:300]
            log.warning("slack %s failed in channel %s: %s %s", method, where, error, detail)
            return None, error

    def post_or_error(self, channel: str, msg: Message, thread_ts: str | None = None) -> tuple[str | None, str | None]:
        """Post a message: (ts, None), or (None, Slack's error code) when it failed (logged, counted)."""
        resp, error = self._call("chat.postMessage", channel, self.client.chat_postMessage, channel=channel,
                                 thread_ts=thread_ts, unfurl_links=False, unfurl_media=False, **msg)
        return (resp.get("ts") if resp is not None else None), error

    def post(self, channel: str, msg: Message, thread_ts: str | None = None) -> str | None:
        return self.post_or_error(channel, msg, thread_ts)[0]

    def update(self, channel: str, ts: str, msg: Message) -> bool:
        return self._call("chat.update", channel, self.client.chat_update, channel=channel, ts=ts, **msg)[1] is None

    def ephemeral(self, channel: str, user: str, msg: Message) -> bool:
        return self._call("chat.postEphemeral", channel, self.client.chat_postEphemeral, channel=channel,
                          user=user, **msg)[1] is None

    def upload(self, channel: str, thread_ts: str | None, filename: str, data: bytes | str,
               title: str, comment: str | None = None) -> bool:
        """files_upload_v2 into the thread: getUploadURLExternal, the upload, completeUploadExternal."""
        kw: dict[str, Any] = {"channel": channel, "thread_ts": thread_ts, "filename": filename, "title": title,
                              "initial_comment": comment, "request_file_info": False}
        kw["file" if isinstance(data, bytes) else "content"] = data
        return self._call("files.upload", channel, self.client.files_upload_v2, **kw)[1] is None
