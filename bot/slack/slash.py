"""Slash commands answered in front of Bolt's dispatch: the ack of `/gpumem` in fewer steps.

A burst of commands is acked one after another under the GIL, so each ack's CPU adds to the
last one's wait. Bolt's dispatch of a slash command spends about a third of the ack before and
after the listener: a WebClient built for each request, every middleware and listener matcher
walked, the listener's arguments injected by signature. This lane takes the same steps that
matter for a signed slash command, with Bolt's own pieces, and skips the rest:

- the request is parsed by Bolt (`BoltRequest`, as its WSGI adapter builds it);
- the gate (`bot.slack.gate.RequestGate`: signature, shape, replays) runs as in the chain;
- the listener (`Handlers.on_command`) gets Bolt's `Ack` and `Respond`, and the answer is
  Bolt's `BoltResponse` written as Bolt's adapter writes it.

The middleware skipped do nothing for a slash command: SslCheck answers `ssl_check=1` bodies
(those go to Bolt), IgnoringSelfEvents and UrlVerification read Events API bodies, and
AttachingFunctionToken reads a workflow function's token. SingleTeamAuthorization calls
auth.test once and keeps the result: until it has one, every request goes to Bolt, which makes
that call (and refuses the request if it fails). A chain with any other middleware, another
command name, a body that is not a plain form-encoded slash command: Bolt answers, as before.
`tests/test_slash_lane.py` holds the lane's answers equal to Bolt's.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from slack_bolt import App
from slack_bolt.adapter.wsgi.http_request import WsgiHttpRequest
from slack_bolt.adapter.wsgi.http_response import WsgiHttpResponse
from slack_bolt.context.ack import Ack
from slack_bolt.context.respond import Respond
from slack_bolt.middleware import (
    AttachingFunctionToken,
    IgnoringSelfEvents,
    SingleTeamAuthorization,
    SslCheck,
    UrlVerification,
)
from slack_bolt.request import BoltRequest
from slack_bolt.request.payload_utils import is_slash_command
from slack_bolt.response import BoltResponse

from bot.slack.gate import RequestGate

log = logging.getLogger("gpumem.slack")

#: the middleware a slash command passes through unchanged (besides the gate and authorization)
INERT_FOR_COMMANDS: tuple[type, ...] = (SslCheck, IgnoringSelfEvents, UrlVerification, AttachingFunctionToken)
_FORM = "application/x-www-form-urlencoded"


class SlashLane:
    """Answers a signed `command` slash command the way Bolt would, without its dispatch; `answer`
    returns None for every request it leaves to Bolt."""

    def __init__(self, app: App, command: str, on_command: Callable[..., Any]):
        self.command = command
        self.on_command = on_command
        self.gate: RequestGate | None = None
        self.auth: SingleTeamAuthorization | None = None
        self._proxy, self._ssl = app.client.proxy, app.client.ssl
        self.reason = ""
        for middleware in app._middleware_list:  # Bolt has no public view of its chain
            if isinstance(middleware, RequestGate):
                self.gate = middleware
            elif isinstance(middleware, SingleTeamAuthorization):
                self.auth = middleware
            elif not isinstance(middleware, INERT_FOR_COMMANDS):
                self.reason = f"middleware {type(middleware).__name__} in the chain"
        if self.gate is None:
            self.reason = "no request gate in the chain"
        elif self.auth is None:
            self.reason = "no single-workspace authorization in the chain"
        if self.reason:
            log.info("slash commands go through Bolt's dispatch: %s", self.reason)

    @property
    def open(self) -> bool:
        return not self.reason

    def answer(self, environ: dict[str, Any]) -> WsgiHttpResponse | None:
        """Bolt's answer to this request when it is a slash command the lane takes, else None
        (and the body left for Bolt to read)."""
        if self.reason or self.auth is None or self.auth.auth_test_result is None:
            return None  # no auth.test result kept yet: Bolt makes the call
        if (environ.get("CONTENT_TYPE") or "").split(";")[0].strip().lower() != _FORM:
            return None
        stream = environ.get("wsgi.input")
        if stream is None or not hasattr(stream, "seek"):
            return None
        request = WsgiHttpRequest(environ)
        raw = request.get_body()
        stream.seek(0)
        if "command=" not in raw or "payload=" in raw or "ssl_check=" in raw:
            return None
        req = BoltRequest(body=raw, query=request.query_string, headers=request.get_headers())
        body = req.body
        if not is_slash_command(body) or body.get("command") != self.command or "ssl_check" in body:
            return None
        assert self.gate is not None
        passed: list[bool] = []
        refused = self.gate.process(req=req, resp=BoltResponse(status=200, body=""),
                                    next=lambda: passed.append(True))  # type: ignore[arg-type, func-returns-value]
        if not passed:
            return _wsgi(refused)
        ack = Ack()
        respond = Respond(response_url=body.get("response_url"), proxy=self._proxy, ssl=self._ssl)
        self.on_command(ack, body, respond)
        # the listener always acks (Handlers' _Once); Bolt answers an unacked command 404
        return _wsgi(ack.response or BoltResponse(status=404, body={"error": "unhandled request"}))


def _wsgi(response: BoltResponse) -> WsgiHttpResponse:
    return WsgiHttpResponse(status=response.status, headers=response.headers, body=response.body)
