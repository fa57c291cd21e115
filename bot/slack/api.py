"""The bot's Slack Web API client: retries, and posts that are never silently dropped or doubled.

Retries: HTTP 429 after its Retry-After (Slack did not take the call), and, for calls that can
be repeated without effect (chat.update, the reads), 5xx and connection errors with exponential
backoff (slack_sdk's retry handlers, counted in metrics). A call that still fails is logged with
its method, error and channel, counted in `gpumem_slack_api_errors_total`, and reported to the
caller as None/False so it can tell the user another way.

Posting is not repeatable: a 5xx or a timeout can come after Slack has posted the message, and
posting again makes a second parent while the first stays at "starting". So every message
carries its job's id in Slack message metadata (`event_type` `gpumem_job`, `event_payload`
`{"job_id", "part"}`), and before a post is tried again the bot looks for what the first try
left: `conversations.history` (or `.replies` in a thread) with `include_all_metadata`, from a
minute before the first try. Found: that message is the post. An upload is completed the same
way: after an unclear `files.completeUploadExternal` the thread is searched for the file first.
Reading history needs the `channels:history` scope (`groups:history` in private channels);
without it the lookup is skipped (one warning) and a post is tried again as before, which may
double it. Once the bot is stopping, retries that would outlast the drain are not made.
"""

from __future__ import annotations

import logging
import re
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
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
from bot.telemetry.metrics import BotMetrics

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


#: calls that change something each time they are made: SlackPoster retries them itself, after
#: looking for what an unclear first try did
NOT_REPEATABLE = frozenset({"chat.postMessage", "files.completeUploadExternal"})
SERVER_ERRORS = (500, 502, 503, 504)


class _ServerErrors(ServerErrorRetryHandler):
    """500 and 503 as slack_sdk has it, plus 502 and 504 from proxies in front of Slack."""

    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return (response is not None and response.status_code in SERVER_ERRORS
                and _method(request) not in NOT_REPEATABLE)


class _ConnectionErrors(ConnectionErrorRetryHandler):
    def _can_retry(self, *, state, request, response=None, error=None) -> bool:
        return _method(request) not in NOT_REPEATABLE and super()._can_retry(
            state=state, request=request, response=response, error=error)


RateLimitRetries = _counting(RateLimitErrorRetryHandler, "ratelimited")
ServerErrorRetries = _counting(_ServerErrors, "server_error")
ConnectionRetries = _counting(_ConnectionErrors, "connection")


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
    if isinstance(e, urllib.error.HTTPError):
        return f"http_{e.code}"
    if isinstance(e, TimeoutError | socket.timeout):
        return "timeout"
    if isinstance(e, OSError):
        return "timeout" if isinstance(getattr(e, "reason", None), TimeoutError) else "connection_error"
    return "request_error"


JOB_EVENT = "gpumem_job"
#: tries of a post or an upload completion whose outcome was unclear (5xx, timeout, no answer)
POST_TRIES = 4
#: how far before the first try the lookup reads (clock skew between the bot and Slack)
LOOKBACK_S = 60.0


def new_job_id() -> str:
    """12 hex digits, unique enough to find one job's messages in a channel's history."""
    return secrets.token_hex(6)


def job_metadata(job_id: str, part: str) -> dict[str, Any]:
    """The message metadata that names the job (and which of its messages) a message belongs to."""
    return {"event_type": JOB_EVENT, "event_payload": {"job_id": job_id, "part": part}}


def _refused(e: Exception) -> bool:
    """The connection was refused: Slack never saw the call, trying again is safe."""
    return isinstance(e, ConnectionRefusedError) or isinstance(getattr(e, "reason", None), ConnectionRefusedError)


def _unclear(e: Exception) -> bool:
    """Did the call fail in a way that leaves open whether Slack acted on it?"""
    if isinstance(e, SlackApiError):
        return getattr(e.response, "status_code", 200) in SERVER_ERRORS
    return isinstance(e, OSError | SlackClientError) and not _refused(e)


class SlackPoster:
    """chat.postMessage / chat.update / chat.postEphemeral / file uploads, failures logged."""

    def __init__(self, client: WebClient, metrics: BotMetrics, stopping: Stopping | None = None,
                 sleep: Callable[[float], None] = time.sleep, wall: Callable[[], float] = time.time,
                 backoff_s: float = 0.5):
        self.client = client
        self.metrics = metrics
        self.stopping = stopping or Stopping()
        self.sleep = sleep
        self.wall = wall
        self.backoff_s = backoff_s
        #: False once Slack said the token may not read history (missing_scope): no more lookups
        self.history_readable: bool | None = None
        self._history_probe = threading.Lock()

    # ------------------------------------------------------------------ plumbing

    def _failed(self, method: str, where: str | None, e: Exception) -> str:
        error = error_of(e)
        self.metrics.api_errors.labels(method=method, error=error).inc()
        detail = ""
        if isinstance(e, SlackApiError) and hasattr(e.response, "get"):
            detail = str(e.response.get("errors") or e.response.get("response_metadata") or "")[:300]
        log.warning("slack %s failed in channel %s: %s %s", method, where, error, detail)
        return error

    def _call(self, method: str, where: str | None, fn: Any, **kw: Any) -> tuple[Any, str | None]:
        try:
            return fn(**kw), None
        except (SlackApiError, SlackClientError, OSError) as e:
            return None, self._failed(method, where, e)

    def _again(self, method: str, attempt: int, e: Exception) -> bool:
        """After a failure worth another try (unclear, or a refused connection): wait before try
        `attempt + 1`, if there is one and time for it."""
        wait = self.backoff_s * (2 ** attempt)
        if attempt + 1 >= POST_TRIES or not (_unclear(e) or _refused(e)) or not self.stopping.may_wait(wait):
            return False
        reason = "server_error" if isinstance(e, SlackApiError) else "connection"
        self.metrics.api_retries.labels(method=method, reason=reason).inc()
        log.info("slack %s: %s (%s); trying again", method, "unclear failure" if _unclear(e) else "not reached",
                 error_of(e))
        self.sleep(wait)
        return True

    # ------------------------------------------------------------------ messages

    def post_or_error(self, channel: str, msg: Message, thread_ts: str | None = None,
                      meta: dict[str, Any] | None = None) -> tuple[str | None, str | None]:
        """Post a message once: (ts, None), or (None, Slack's error code) when it failed (logged,
        counted). With `meta` (see `job_metadata`) an unclear failure is followed by a look for
        the message before it is posted again."""
        kw: dict[str, Any] = {"channel": channel, "thread_ts": thread_ts, "unfurl_links": False,
                              "unfurl_media": False, **msg}
        if meta is not None:
            kw["metadata"] = meta
        since = self.wall() - LOOKBACK_S
        attempt = 0
        while True:
            try:
                return self.client.chat_postMessage(**kw).get("ts"), None
            except (SlackApiError, SlackClientError, OSError) as e:
                if not self._again("chat.postMessage", attempt, e):
                    return None, self._failed("chat.postMessage", channel, e)
                look = _unclear(e)
            attempt += 1
            if meta is not None and look:
                found = self.find_message(channel, thread_ts, meta, since)
                if found is not None:
                    log.info("slack chat.postMessage: the earlier try was posted (%s); not posting again", found)
                    return found, None

    def post(self, channel: str, msg: Message, thread_ts: str | None = None,
             meta: dict[str, Any] | None = None) -> str | None:
        return self.post_or_error(channel, msg, thread_ts, meta)[0]

    def update(self, channel: str, ts: str, msg: Message, meta: dict[str, Any] | None = None) -> bool:
        kw: dict[str, Any] = {"channel": channel, "ts": ts, **msg}
        if meta is not None:
            kw["metadata"] = meta
        return self._call("chat.update", channel, self.client.chat_update, **kw)[1] is None

    def group_members(self, group: str) -> tuple[str, ...] | None:
        """The user ids in a Slack user group (usergroups.users.list, scope usergroups:read);
        None when Slack would not say (logged): the caller then treats nobody as a member."""
        answer, error = self._call("usergroups.users.list", None, self.client.usergroups_users_list, usergroup=group)
        if error is not None or answer is None:
            return None
        return tuple(str(u) for u in answer.get("users") or ())

    def user_info(self, user: str) -> tuple[dict[str, Any] | None, str | None]:
        """Slack's record of one user (users.info, scope users:read): (the `user` object, None),
        or (None, Slack's error code: `missing_scope`, `user_not_found`, ...), logged and counted."""
        answer, error = self._call("users.info", None, self.client.users_info, user=user)
        if error is not None or answer is None:
            return None, error or "no_answer"
        found = answer.get("user")
        return (found, None) if isinstance(found, dict) else (None, "no_user_in_answer")

    def ephemeral(self, channel: str, user: str, msg: Message) -> bool:
        return self._call("chat.postEphemeral", channel, self.client.chat_postEphemeral, channel=channel,
                          user=user, **msg)[1] is None

    def _history(self, channel: str, thread_ts: str | None, since: float) -> list[dict[str, Any]] | None:
        """Messages from `since` on (a thread's when `thread_ts`), with their metadata; None if unreadable.
        Until the first answer says whether the token may read history, lookups go one at a time,
        so a missing scope is asked about and told once, not once per thread that needed it."""
        if self.history_readable is False:
            return None
        if self.history_readable is None:
            with self._history_probe:
                return self._read_history(channel, thread_ts, since)
        return self._read_history(channel, thread_ts, since)

    def _read_history(self, channel: str, thread_ts: str | None, since: float) -> list[dict[str, Any]] | None:
        if self.history_readable is False:  # learnt while this one waited for the probe
            return None
        out: list[dict[str, Any]] = []
        cursor = None
        for _ in range(3):  # a few pages: the message looked for is seconds old
            kw: dict[str, Any] = {"channel": channel, "oldest": f"{since:.6f}", "include_all_metadata": True,
                                  "limit": 200, "cursor": cursor}
            try:
                if thread_ts is None:
                    resp = self.client.conversations_history(**kw)
                else:
                    resp = self.client.conversations_replies(ts=thread_ts, **kw)
            except (SlackApiError, SlackClientError, OSError) as e:
                if isinstance(e, SlackApiError) and error_of(e) in ("missing_scope", "not_allowed_token_type"):
                    self.history_readable = False
                    log.warning("slack: this token cannot read channel history (%s): a post whose first try "
                                "failed unclearly is posted again and may appear twice; grant channels:history "
                                "and groups:history", error_of(e))
                else:
                    self._failed("conversations.history", channel, e)
                return None
            self.history_readable = True
            out += resp.get("messages") or []
            cursor = (resp.get("response_metadata") or {}).get("next_cursor")
            if not resp.get("has_more") or not cursor:
                break
        return out

    def find_message(self, channel: str, thread_ts: str | None, meta: dict[str, Any],
                     since: float) -> str | None:
        """The ts of the message carrying `meta` posted since `since`, if Slack has one."""
        for m in self._history(channel, thread_ts, since) or []:
            found = m.get("metadata") or {}
            if found.get("event_type") == meta["event_type"] and found.get("event_payload") == meta["event_payload"]:
                return str(m.get("ts"))
        return None

    # ------------------------------------------------------------------ files

    def upload(self, channel: str, thread_ts: str | None, filename: str, data: bytes | str,
               title: str, comment: str | None = None) -> bool:
        """One file into the thread, once: getUploadURLExternal, the upload, completeUploadExternal.

        The three steps of slack_sdk's files_upload_v2, each retried on its own terms: a new
        upload URL after a failed upload, and after an unclear completion a look into the
        thread for the file before completing it again.
        """
        raw = data.encode("utf-8") if isinstance(data, str) else data
        since = self.wall() - LOOKBACK_S
        error: str | None = None
        for attempt in range(POST_TRIES):
            if attempt and not self.stopping.may_wait(self.backoff_s * (2 ** attempt)):
                break
            if attempt:
                self.sleep(self.backoff_s * (2 ** attempt))
            got, error = self._call("files.getUploadURLExternal", channel, self.client.files_getUploadURLExternal,
                                    filename=filename, length=len(raw))
            if got is None:
                return False
            file_id, url = str(got.get("file_id")), str(got.get("upload_url"))
            error = self._send_bytes(url, raw)
            if error is not None:
                continue
            done = self._complete(channel, thread_ts, file_id, title, comment, since)
            if done is not None:
                return done
            error = "file_not_completed"
        self.metrics.api_errors.labels(method="files.upload", error=error or "upload_failed").inc()
        log.warning("slack files.upload failed in channel %s: %s (%s)", channel, error, filename)
        return False

    def _send_bytes(self, url: str, raw: bytes) -> str | None:
        """POST the bytes to the upload URL: None when stored, else why not. One more try after
        an unclear failure (a repeated upload to the same URL replaces the bytes)."""
        error = "upload_failed"
        for attempt in range(2):
            try:
                req = urllib.request.Request(url, data=raw, method="POST")
                with urllib.request.urlopen(req, timeout=self.client.timeout, context=self.client.ssl) as resp:
                    resp.read()
                    return None if resp.status == 200 else f"http_{resp.status}"
            except OSError as e:
                error = error_of(e)
                if attempt or not (_unclear(e) or _refused(e)) or not self.stopping.may_wait(self.backoff_s):
                    return error
            log.info("slack upload: %s; trying again", error)
            self.sleep(self.backoff_s)
        return error

    def _complete(self, channel: str, thread_ts: str | None, file_id: str, title: str, comment: str | None,
                  since: float) -> bool | None:
        """True: shared; False: refused (do not try again); None: not shared, a new upload may work."""
        kw: dict[str, Any] = {"files": [{"id": file_id, "title": title}], "channel_id": channel,
                              "thread_ts": thread_ts, "initial_comment": comment}
        for attempt in range(2):
            try:
                self.client.files_completeUploadExternal(**kw)
                return True
            except (SlackApiError, SlackClientError, OSError) as e:
                if not _unclear(e):
                    if error_of(e) in ("file_not_found", "file_upload_not_complete"):  # the bytes did not land
                        log.info("slack files.completeUploadExternal: %s; uploading again", error_of(e))
                        return None
                    self._failed("files.completeUploadExternal", channel, e)
                    return False
                if attempt or not self._again("files.completeUploadExternal", 0, e):
                    self._failed("files.completeUploadExternal", channel, e)
                    return False
            if self._file_shared(channel, thread_ts, file_id, since):
                log.info("slack files.completeUploadExternal: the earlier try shared %s; not completing again", file_id)
                return True
        return False

    def _file_shared(self, channel: str, thread_ts: str | None, file_id: str, since: float) -> bool:
        for m in self._history(channel, thread_ts, since) or []:
            if any(isinstance(f, dict) and f.get("id") == file_id for f in m.get("files") or []):
                return True
        return False
