"""The gate every Slack request passes before a listener sees it: signature, shape, replays.

`RequestGate` takes the place of Bolt's `RequestVerification` middleware (same position, same
401 answer) and adds what that one lacks:

- the `X-Slack-Request-Timestamp` must be a plain ASCII integer (`abc`, `1e9`, 5,000 digits or
  `١٢٣` are refused with 401, where Bolt's `int()` raised and the request ended in a 500);
- a refused request is logged as one line with the reason and the body's size, never the body
  (Bolt logs the whole body of every request with a bad signature);
- a signed interaction payload that Bolt cannot route (`"actions": []`, an action that is not
  an object) gets 400 instead of an IndexError;
- a replay runs once. A request whose signature, `trigger_id` or `event_id` was seen within
  the window in which Slack's signature stays valid is answered 200 with an empty body and
  not run again; that covers an attacker replaying a captured request and Slack's own retries
  (`X-Slack-Retry-Num`, `X-Slack-Retry-Reason`), which repeat the `event_id` or `trigger_id`.

The seen set is in this process's memory, bounded and expiring (`SeenRequests`). With several
replicas a replay may reach another one: a shared store (Redis `SET NX EX` on the same keys)
would have to take its place.
"""

from __future__ import annotations

import hmac
import logging
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from slack_bolt.middleware.middleware import Middleware
from slack_bolt.request import BoltRequest
from slack_bolt.response import BoltResponse
from slack_sdk.signature import SignatureVerifier

from bot.slack.limits import SIGNATURE_WINDOW_S
from bot.telemetry.metrics import BotMetrics

log = logging.getLogger("gpumem.slack.gate")

#: a Unix time in seconds, as Slack sends it: ASCII digits only (`[0-9]`, not `\d`)
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v0=[0-9a-f]{64}")
_ID = re.compile(r"[\x21-\x7e]{1,255}")
#: interaction types whose routing takes `actions[0]`
_ACTION_TYPES = ("block_actions", "interactive_message")


class SeenRequests:
    """Keys seen in the last `window_s` seconds, at most `max_keys` of them (oldest dropped first).

    A signature stays valid for 5 minutes either side of its timestamp, so a replay can come up
    to 10 minutes after the first sight: the window is that, plus a minute.

    >>> seen = SeenRequests(window_s=60, clock=lambda: 0.0)
    >>> seen.first_sight([("sig", "a"), ("trigger", "t1")]), seen.first_sight([("trigger", "t1")])
    (True, False)
    """

    def __init__(self, window_s: float = 2 * SIGNATURE_WINDOW_S + 60, max_keys: int = 50_000,
                 clock: Callable[[], float] = time.monotonic):
        self.window_s = window_s
        self.max_keys = max_keys
        self.clock = clock
        self._lock = threading.Lock()
        self._until: OrderedDict[Hashable, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._until)

    def first_sight(self, keys: Iterable[Hashable]) -> bool:
        """True (and remember them all) when none of `keys` was seen in the window; else False."""
        keys = list(keys)
        now = self.clock()
        with self._lock:
            # entries expire in insertion order (each lives window_s from its arrival)
            while self._until and next(iter(self._until.values())) <= now:
                self._until.popitem(last=False)
            if any(key in self._until for key in keys):
                return False
            for key in keys:
                self._until[key] = now + self.window_s
            while len(self._until) > self.max_keys:
                self._until.popitem(last=False)
            return True


def payload_problem(body: Any) -> str | None:
    """Why a signed body cannot be routed safely (None when it can).

    >>> payload_problem({"type": "block_actions", "actions": []})
    'actions is empty'
    >>> payload_problem({"command": "/gpumem", "text": "help"}) is None
    True
    """
    if not isinstance(body, dict):
        return "not an object"
    for name in ("user", "container", "channel", "team"):
        if name in body and not isinstance(body[name], dict | str):
            return f"{name} is not an object"
    if body.get("type") in _ACTION_TYPES:
        actions = body.get("actions")
        if not isinstance(actions, list):
            return "actions is not a list"
        if not actions:
            return "actions is empty"
        if not all(isinstance(a, dict) for a in actions):
            return "an action is not an object"
        if body["type"] == "block_actions" and not all(isinstance(a.get("action_id"), str) for a in actions):
            return "an action has no action_id"
        if body["type"] == "interactive_message" and not isinstance(body.get("callback_id"), str):
            return "callback_id is not a string"
    for name in ("response_url", "trigger_id"):
        if name in body and not isinstance(body[name], str):
            return f"{name} is not a string"
    return None


def request_keys(signature: str, body: dict[str, Any]) -> list[tuple[str, str]]:
    """What identifies one request from Slack: its signature, and Slack's own ids when present."""
    keys = [("signature", signature)]
    for name in ("trigger_id", "event_id"):
        value = body.get(name)
        if isinstance(value, str) and _ID.fullmatch(value):
            keys.append((name, value))
    return keys


class RequestGate(Middleware):
    """Bolt middleware: verify, check the shape, refuse replays; in place of RequestVerification."""

    def __init__(self, signing_secret: str | None, metrics: BotMetrics, seen: SeenRequests | None = None,
                 clock: Callable[[], float] = time.time):
        # without a signing secret (Socket Mode) every request over HTTP is refused
        self.verifier = SignatureVerifier(signing_secret=signing_secret) if signing_secret else None
        self.metrics = metrics
        self.seen = seen or SeenRequests()
        self.clock = clock

    @property
    def name(self) -> str:
        return "RequestGate"

    def process(self, *, req: BoltRequest, resp: BoltResponse, next: Callable[[], BoltResponse]) -> BoltResponse:
        if req.mode == "socket_mode":  # Slack's own connection: nothing signed
            return next()
        size = len(req.raw_body.encode("utf-8", "replace")) if req.raw_body else 0
        timestamp = _header(req, "x-slack-request-timestamp")
        signature = _header(req, "x-slack-signature")
        if not _TIMESTAMP.fullmatch(timestamp):
            return self._refuse("bad_timestamp", size, 401)
        if abs(self.clock() - int(timestamp)) > SIGNATURE_WINDOW_S:
            return self._refuse("stale_timestamp", size, 401)
        if self.verifier is None:
            return self._refuse("no_signing_secret", size, 401)
        expected = self.verifier.generate_signature(timestamp=timestamp, body=req.raw_body)
        if not _SIGNATURE.fullmatch(signature) or not hmac.compare_digest(str(expected), signature):
            return self._refuse("bad_signature", size, 401)
        problem = payload_problem(req.body)
        if problem is not None:
            return self._refuse("bad_payload", size, 400, problem)
        retry = _header(req, "x-slack-retry-num")
        if not self.seen.first_sight(request_keys(signature, req.body)):
            self.metrics.http_refused.labels(reason="replay").inc()
            if retry:
                log.info("Slack retry %s (%s) of a request already taken: acked, not run again", retry[:8],
                         _header(req, "x-slack-retry-reason")[:40] or "no reason given")
            else:
                log.warning("replayed Slack request (same signature or id within %d s): acked, not run again",
                            self.seen.window_s)
            return BoltResponse(status=200, body="", headers={"x-slack-no-retry": "1"})
        return next()

    def _refuse(self, reason: str, size: int, status: int, detail: str = "") -> BoltResponse:
        self.metrics.http_refused.labels(reason=reason).inc()
        log.warning("refused Slack request: %s%s (body %d bytes)", reason, f", {detail}" if detail else "", size)
        if status == 401:
            return BoltResponse(status=401, body={"error": "invalid request"})
        return BoltResponse(status=status, body={"error": "invalid request body"})


def _header(req: BoltRequest, name: str) -> str:
    values = req.headers.get(name) or [""]
    value = values[0] if isinstance(values, list | tuple) else values
    return value if isinstance(value, str) else ""


def install(app: Any, gate: RequestGate) -> None:
    """Put `gate` where Bolt's RequestVerification is in the app's middleware chain (first, before
    authorization, which would otherwise call auth.test for an unsigned request)."""
    # lazy: Bolt's middleware module costs ~180 ms (-X importtime); the gate's own checks and their tests never need it
    from slack_bolt.middleware.request_verification import RequestVerification

    chain = app._middleware_list  # Bolt has no public way to replace a built-in middleware
    for i, middleware in enumerate(chain):
        if isinstance(middleware, RequestVerification):
            chain[i] = gate
            return
    raise RuntimeError("Bolt's RequestVerification middleware is not in the chain; the gate has no place")
