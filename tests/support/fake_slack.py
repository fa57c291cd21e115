"""FakeSlack: a stand-in for Slack's Web API on a loopback port, for tests and benchmarks.

It records every call (method, arguments, headers), answers the way Slack does for the
methods gpumem uses, and refuses what Slack refuses:

- `auth.test`, `chat.postMessage`, `chat.update`, `chat.postEphemeral`,
  `files.getUploadURLExternal` + the upload POST + `files.completeUploadExternal`;
- response URLs `/respond/<n>`: each works 5 times, the 6th use gets 404 `used_url`;
- blocks that break Block Kit's limits get `invalid_blocks` (checked with
  `slack_sdk.models.blocks.Block.parse` plus the message-level counts the models skip);
- `apps.connections.open` (Socket Mode) with the app-level token;
- `conversations.history` and `conversations.replies` (GET or POST; `oldest`, `latest`,
  `inclusive`, `limit`, `cursor`), with each message's `metadata` only when
  `include_all_metadata` is set, as Slack does; they need `channels:history` in `scopes`
  (else `missing_scope`, with `needed` and `provided`);
- message metadata on `chat.postMessage`/`chat.update` (`{"event_type", "event_payload"}`,
  else `invalid_metadata_format`); a completed upload appears in its thread as a message with
  `files`. Completing an already completed file again answers ok and shares nothing more;
- `users.info` (GET or POST, scope `users:read`, else `missing_scope` with `needed` and
  `provided`): every `U...` id is an active full member unless `users[id]` overrides fields
  (`deleted`, `is_restricted`, `is_ultra_restricted`, `is_bot`, `is_app_user`); ids in
  `unknown_users` get `user_not_found`;
- a wrong token gets `invalid_auth`; `fail_next()` injects 429 (with Retry-After) or 5xx before
  the call is processed; `fail_after()` processes the call, then answers 5xx (a late failure:
  Slack posted the message, the client saw an error). Both also work for "upload" (the POST
  to an upload URL).

Message timestamps follow the wall clock (strictly increasing), as Slack's do.

    with FakeSlack() as fake:
        client = WebClient(token=fake.token, base_url=fake.api_url)
        ...
        fake.wait_for("chat.postMessage", 1)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode

from slack_sdk.errors import SlackObjectFormationError
from slack_sdk.models.blocks import Block
from slack_sdk.signature import SignatureVerifier

MAX_BLOCKS = 50
LIMITS = {"section_text": 3000, "fields": 10, "field_text": 2000, "header": 150, "button_text": 75,
          "id": 255, "value": 2000, "context": 10, "actions": 25, "blocks_chars": 12000}
RESPONSE_URL_USES = 5


@dataclass
class Call:
    method: str
    args: dict[str, Any]
    headers: dict[str, str]
    body: bytes = b""
    status: int = 200
    response: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status == 200 and bool(self.response.get("ok", True))


def block_errors(blocks: Any) -> list[str]:
    """Why Slack would refuse these blocks (empty when it would take them)."""
    if not isinstance(blocks, list):
        return ["blocks must be a list"]
    errors = []
    if len(blocks) > MAX_BLOCKS:
        errors.append(f"no more than {MAX_BLOCKS} items allowed [json-pointer:/blocks]")
    chars = 0
    for i, raw in enumerate(blocks):
        where = f"[json-pointer:/blocks/{i}]"
        if not isinstance(raw, dict) or "type" not in raw:
            errors.append(f"missing type {where}")
            continue
        try:
            parsed = Block.parse(raw)
            if parsed is None:
                raise SlackObjectFormationError(f"unknown block type {raw.get('type')!r}")
            parsed.to_dict()
        except (SlackObjectFormationError, KeyError, TypeError, ValueError) as e:
            errors.append(f"{e} {where}")
        errors += [f"{m} {where}" for m in _own_checks(raw)]
        chars += _text_chars(raw)
    if chars > LIMITS["blocks_chars"]:
        errors.append(f"blocks hold {chars} characters of text, over {LIMITS['blocks_chars']}")
    return errors


def _own_checks(b: dict[str, Any]) -> list[str]:
    """Limits the block models do not check, or check only on some paths."""
    out = []
    kind = b.get("type")
    if len(str(b.get("block_id", ""))) > LIMITS["id"]:
        out.append("block_id too long")
    if kind == "section":
        text = (b.get("text") or {}).get("text", "")
        if len(text) > LIMITS["section_text"]:
            out.append(f"section text {len(text)} > {LIMITS['section_text']}")
        fields = b.get("fields") or []
        if len(fields) > LIMITS["fields"]:
            out.append(f"{len(fields)} fields > {LIMITS['fields']}")
        out += [f"field {len(f.get('text', ''))} > {LIMITS['field_text']}" for f in fields
                if len(f.get("text", "")) > LIMITS["field_text"]]
        if not text and not fields:
            out.append("section needs text or fields")
    elif kind == "header" and len((b.get("text") or {}).get("text", "")) > LIMITS["header"]:
        out.append("header text too long")
    elif kind == "context" and len(b.get("elements") or []) > LIMITS["context"]:
        out.append("too many context elements")
    elif kind == "actions":
        elements = b.get("elements") or []
        if len(elements) > LIMITS["actions"]:
            out.append("too many actions elements")
        for el in elements:
            if len((el.get("text") or {}).get("text", "")) > LIMITS["button_text"]:
                out.append("button text too long")
            if len(str(el.get("action_id", ""))) > LIMITS["id"]:
                out.append("action_id too long")
            if len(str(el.get("value", ""))) > LIMITS["value"]:
                out.append("button value too long")
    return out


def _text_chars(node: Any) -> int:
    if isinstance(node, dict):
        return sum(len(v) if k == "text" and isinstance(v, str) else _text_chars(v) for k, v in node.items())
    if isinstance(node, list):
        return sum(_text_chars(x) for x in node)
    return 0


class FakeSlack:
    def __init__(self, token: str = "xoxb-test-token", host: str = "127.0.0.1",
                 app_token: str = "xapp-1-A0GPUMEM-test"):
        self.token = token
        self.app_token = app_token
        self.calls: list[Call] = []
        self.messages: dict[tuple[str, str], dict[str, Any]] = {}
        self.uploads: dict[str, dict[str, Any]] = {}
        self.not_in_channel: set[str] = set()
        #: the bot token's scopes; conversations.* need channels:history
        self.scopes: set[str] = {"commands", "chat:write", "files:write", "channels:history", "groups:history",
                                 "usergroups:read", "users:read"}
        #: user id -> fields of its users.info record that differ from an active full member's
        self.users: dict[str, dict[str, Any]] = {}
        #: user ids users.info does not know (user_not_found)
        self.unknown_users: set[str] = set()
        #: user-group id -> its members' user ids (usergroups.users.list)
        self.groups: dict[str, list[str]] = {}
        self._failures: dict[str, list[tuple[int, dict[str, str], dict[str, Any] | None]]] = {}
        self._late_failures: dict[str, list[int]] = {}
        self._last_ts = 0.0
        self._respond_uses: dict[str, int] = {}
        self._cond = threading.Condition()
        self._ts = itertools.count(1)
        self._file_ids = itertools.count(1)
        self._server = ThreadingHTTPServer((host, 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ lifecycle

    @property
    def base(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    @property
    def api_url(self) -> str:
        """The Web API base URL for WebClient(base_url=...); the trailing slash matters."""
        return self.base + "/api/"

    def response_url(self, n: int | str) -> str:
        return f"{self.base}/respond/{n}"

    def start(self) -> FakeSlack:
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-slack", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> FakeSlack:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def forget(self) -> None:
        """Forget every call, message, upload, response URL use and pending failure, as a fresh
        FakeSlack would have none (the same URLs and tokens; ts and file ids keep counting up)."""
        with self._cond:
            self.calls.clear()
            self.messages.clear()
            self.uploads.clear()
            self._failures.clear()
            self._late_failures.clear()
            self._respond_uses.clear()

    # ------------------------------------------------------------------ injection

    def fail_next(self, method: str, status: int = 429, count: int = 1, retry_after: int = 0,
                  error: str | None = None) -> None:
        """The next `count` calls of `method` get HTTP `status` (429 with Retry-After), or, with
        `error`, HTTP 200 and `{"ok": false, "error": error}`."""
        headers = {"Retry-After": str(retry_after)} if status == 429 else {}
        body = {"ok": False, "error": error} if error else None
        with self._cond:
            self._failures.setdefault(method, []).extend([(status, headers, body)] * count)

    def fail_after(self, method: str, status: int = 500, count: int = 1) -> None:
        """The next `count` calls of `method` are processed (the message is posted, the file
        stored), then answered with HTTP `status`: the client cannot tell that it worked."""
        with self._cond:
            self._late_failures.setdefault(method, []).extend([status] * count)

    def _take_late_failure(self, method: str) -> int | None:
        with self._cond:
            queue = self._late_failures.get(method)
            return queue.pop(0) if queue else None

    # ------------------------------------------------------------------ inspection

    def calls_to(self, method: str, ok_only: bool = False) -> list[Call]:
        with self._cond:
            return [c for c in self.calls if c.method == method and (c.ok or not ok_only)]

    def wait_for(self, method: str, n: int = 1, timeout: float = 10.0, ok_only: bool = True,
                 where: Any = None) -> list[Call]:
        """Block until `n` calls of `method` (successful ones by default, matching `where`) arrived."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [c for c in self.calls if c.method == method and (c.ok or not ok_only)
                         and (where is None or where(c))]
                if len(found) >= n:
                    return found
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = [(c.method, c.status, c.response.get("error")) for c in self.calls]
                    raise AssertionError(f"waited {timeout} s for {n} x {method}, got {len(found)}; calls: {seen}")
                self._cond.wait(left)

    def thread(self, channel: str, ts: str) -> list[Call]:
        """Successful replies posted in the thread of (channel, ts)."""
        return [c for c in self.calls_to("chat.postMessage", ok_only=True)
                if c.args.get("channel") == channel and c.args.get("thread_ts") == ts]

    # ------------------------------------------------------------------ answering

    def _record(self, call: Call) -> None:
        with self._cond:
            self.calls.append(call)
            self._cond.notify_all()

    def _take_failure(self, method: str) -> tuple[int, dict[str, str], dict[str, Any] | None] | None:
        with self._cond:
            queue = self._failures.get(method)
            return queue.pop(0) if queue else None

    def _next_ts(self) -> str:
        with self._cond:
            self._last_ts = max(time.time(), self._last_ts + 0.000001)
            return f"{self._last_ts:.6f}"

    def parents(self, channel: str | None = None) -> list[dict[str, Any]]:
        """Messages in the channel (not thread replies), oldest first, as they stand now."""
        with self._cond:
            found = [m for (ch, _), m in self.messages.items()
                     if (channel is None or ch == channel) and not m.get("thread_ts")]
        return sorted(found, key=lambda m: float(m["ts"]))

    def answer(self, method: str, args: dict[str, Any], headers: dict[str, str]) -> tuple[int, dict[str, str], dict]:
        auth = headers.get("authorization", "")
        token = self.app_token if method == "apps.connections.open" else self.token
        if auth != f"Bearer {token}" and args.get("token") != token:
            return 200, {}, {"ok": False, "error": "invalid_auth" if auth or args.get("token") else "not_authed"}
        failure = self._take_failure(method)
        if failure is not None:
            status, extra, body = failure
            return status, extra, body or {"ok": False, "error": "ratelimited" if status == 429 else "fatal_error"}
        fn = getattr(self, "_m_" + method.replace(".", "_"), None)
        if fn is None:
            return 200, {}, {"ok": False, "error": "unknown_method"}
        doc = fn(args)
        late = self._take_late_failure(method)
        if late is not None:
            return late, {}, {"ok": False, "error": "internal_error"}
        return 200, {}, doc

    def _m_auth_test(self, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "url": "https://fake.slack.test/", "team": "Fake", "user": "gpumem",
                "team_id": "T0FAKE", "user_id": "U0GPUMEM", "bot_id": "B0GPUMEM", "is_enterprise_install": False}

    def _m_apps_connections_open(self, args: dict[str, Any]) -> dict[str, Any]:
        # Socket Mode asks for a WebSocket URL with the app-level token; nothing listens there
        return {"ok": True, "url": "ws://127.0.0.1:9/link/?ticket=fake"}

    def _message_checks(self, args: dict[str, Any]) -> dict[str, Any] | None:
        channel = args.get("channel")
        if not channel:
            return {"ok": False, "error": "channel_not_found"}
        if channel in self.not_in_channel:
            return {"ok": False, "error": "not_in_channel"}
        if not args.get("text") and not args.get("blocks"):
            return {"ok": False, "error": "no_text"}
        if len(str(args.get("text") or "")) > 40_000:
            return {"ok": False, "error": "msg_too_long"}
        if "blocks" in args and args["blocks"] is not None:
            errors = block_errors(args["blocks"])
            if errors:
                return {"ok": False, "error": "invalid_blocks", "errors": errors,
                        "response_metadata": {"messages": [f"[ERROR] {e}" for e in errors]}}
        meta = args.get("metadata")
        if meta is not None and not (isinstance(meta, dict) and isinstance(meta.get("event_type"), str)
                                     and isinstance(meta.get("event_payload"), dict)):
            return {"ok": False, "error": "invalid_metadata_format"}
        return None

    def _m_chat_postMessage(self, args: dict[str, Any]) -> dict[str, Any]:
        refusal = self._message_checks(args)
        if refusal:
            return refusal
        ts = self._next_ts()
        message = {"type": "message", "ts": ts, "text": args.get("text"), "blocks": args.get("blocks"),
                   "thread_ts": args.get("thread_ts"), "bot_id": "B0GPUMEM", "edits": 0}
        if args.get("metadata") is not None:
            message["metadata"] = args["metadata"]
        with self._cond:
            self.messages[(args["channel"], ts)] = message
        return {"ok": True, "channel": args["channel"], "ts": ts,
                "message": {k: v for k, v in message.items() if k != "metadata"}}

    def _m_chat_update(self, args: dict[str, Any]) -> dict[str, Any]:
        refusal = self._message_checks(args)
        if refusal:
            return refusal
        key = (args["channel"], str(args.get("ts")))
        with self._cond:
            message = self.messages.get(key)
            if message is None:
                return {"ok": False, "error": "message_not_found"}
            message.update(text=args.get("text"), blocks=args.get("blocks"), edits=message["edits"] + 1)
            if args.get("metadata") is not None:
                message["metadata"] = args["metadata"]
        return {"ok": True, "channel": key[0], "ts": key[1], "text": args.get("text")}

    def _history_refusal(self, args: dict[str, Any]) -> dict[str, Any] | None:
        if "channels:history" not in self.scopes:
            return {"ok": False, "error": "missing_scope", "needed": "channels:history",
                    "provided": ",".join(sorted(self.scopes))}
        if not args.get("channel"):
            return {"ok": False, "error": "channel_not_found"}
        return None

    def _page(self, found: list[dict[str, Any]], args: dict[str, Any], newest_first: bool) -> dict[str, Any]:
        inclusive = str(args.get("inclusive", "")).lower() in ("1", "true")
        oldest, latest = float(args.get("oldest") or 0), float(args.get("latest") or 9e12)
        found = [m for m in found if (oldest <= float(m["ts"]) if inclusive else oldest < float(m["ts"]))
                 and (float(m["ts"]) <= latest if inclusive else float(m["ts"]) < latest)]
        found.sort(key=lambda m: float(m["ts"]), reverse=newest_first)
        start = int(args.get("cursor") or 0)
        limit = max(1, min(int(args.get("limit") or 100), 999))
        page = found[start:start + limit]
        with_meta = str(args.get("include_all_metadata", "")).lower() in ("1", "true")
        shown = [{k: v for k, v in m.items() if k not in ("edits",) and (with_meta or k != "metadata")}
                 for m in page]
        more = start + limit < len(found)
        return {"ok": True, "messages": shown, "has_more": more,
                "response_metadata": {"next_cursor": str(start + limit) if more else ""}}

    def _m_conversations_history(self, args: dict[str, Any]) -> dict[str, Any]:
        refusal = self._history_refusal(args)
        if refusal:
            return refusal
        with self._cond:
            found = [dict(m) for (ch, _), m in self.messages.items()
                     if ch == args["channel"] and (not m.get("thread_ts") or m.get("thread_ts") == m["ts"])]
        return self._page(found, args, newest_first=True)

    def _m_conversations_replies(self, args: dict[str, Any]) -> dict[str, Any]:
        refusal = self._history_refusal(args)
        if refusal:
            return refusal
        ts = str(args.get("ts") or "")
        with self._cond:
            if (args["channel"], ts) not in self.messages:
                return {"ok": False, "error": "thread_not_found"}
            found = [dict(m) for (ch, mts), m in self.messages.items()
                     if ch == args["channel"] and (mts == ts or m.get("thread_ts") == ts)]
        return self._page(found, args, newest_first=False)

    def _m_usergroups_users_list(self, args: dict[str, Any]) -> dict[str, Any]:
        if "usergroups:read" not in self.scopes:
            return {"ok": False, "error": "missing_scope", "needed": "usergroups:read",
                    "provided": ",".join(sorted(self.scopes))}
        group = args.get("usergroup")
        if group not in self.groups:
            return {"ok": False, "error": "no_such_subteam"}
        return {"ok": True, "users": list(self.groups[group])}

    def _m_users_info(self, args: dict[str, Any]) -> dict[str, Any]:
        if "users:read" not in self.scopes:
            return {"ok": False, "error": "missing_scope", "needed": "users:read",
                    "provided": ",".join(sorted(self.scopes))}
        user = str(args.get("user") or "")
        if not user or user in self.unknown_users:
            return {"ok": False, "error": "user_not_found"}
        record = {"id": user, "team_id": "T0FAKE", "name": user.lower(), "real_name": user, "deleted": False,
                  "is_admin": False, "is_owner": False, "is_primary_owner": False, "is_restricted": False,
                  "is_ultra_restricted": False, "is_bot": False, "is_app_user": False, "updated": 1700000000,
                  "profile": {"real_name": user, "display_name": user.lower()}}
        record.update(self.users.get(user, {}))
        return {"ok": True, "user": record}

    def _m_chat_postEphemeral(self, args: dict[str, Any]) -> dict[str, Any]:
        refusal = self._message_checks(args)
        if refusal:
            return refusal
        if not args.get("user"):
            return {"ok": False, "error": "user_not_in_channel"}
        return {"ok": True, "message_ts": self._next_ts()}

    def _m_files_getUploadURLExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        if not args.get("filename") or not str(args.get("length", "")).isdigit():
            return {"ok": False, "error": "invalid_arguments"}
        file_id = f"F{next(self._file_ids):06d}"
        with self._cond:
            self.uploads[file_id] = {"filename": args["filename"], "length": int(args["length"]), "data": None}
        return {"ok": True, "upload_url": f"{self.base}/upload/{file_id}", "file_id": file_id}

    def _m_files_completeUploadExternal(self, args: dict[str, Any]) -> dict[str, Any]:
        files = args.get("files")
        if not isinstance(files, list) or not files:
            return {"ok": False, "error": "invalid_arguments"}
        out = []
        with self._cond:
            for f in files:
                up = self.uploads.get(f.get("id"))
                if up is None or up["data"] is None:
                    return {"ok": False, "error": "file_not_found"}
                out.append({"id": f["id"], "name": up["filename"], "title": f.get("title")})
                if up.get("completed"):
                    continue  # completed before: shared once, not again
                up.update(title=f.get("title"), channel=args.get("channel_id"), thread_ts=args.get("thread_ts"),
                          comment=args.get("initial_comment"), completed=True)
                if args.get("channel_id"):
                    self._last_ts = max(time.time(), self._last_ts + 0.000001)
                    ts = f"{self._last_ts:.6f}"
                    self.messages[(args["channel_id"], ts)] = {
                        "type": "message", "ts": ts, "text": args.get("initial_comment") or "",
                        "thread_ts": args.get("thread_ts"), "bot_id": "B0GPUMEM", "edits": 0,
                        "files": [{"id": f["id"], "name": up["filename"], "title": f.get("title")}]}
        return {"ok": True, "files": out}

    def take_upload(self, file_id: str, data: bytes) -> tuple[int, bytes]:
        failure = self._take_failure("upload")
        if failure is not None:
            return failure[0], b"upload failed"
        with self._cond:
            up = self.uploads.get(file_id)
            if up is None:
                return 404, b"no such upload"
            up["data"] = data
        late = self._take_late_failure("upload")
        if late is not None:
            return late, b"upload failed"
        return 200, f"OK - {len(data)}".encode()

    def take_response(self, key: str, payload: dict[str, Any]) -> tuple[int, bytes]:
        with self._cond:
            uses = self._respond_uses.get(key, 0) + 1
            self._respond_uses[key] = uses
        if uses > RESPONSE_URL_USES:
            return 404, b"used_url"
        blocks = payload.get("blocks")
        if blocks is not None and block_errors(blocks):
            return 400, b"invalid_blocks"
        return 200, b"ok"


_JSON_FIELDS = ("blocks", "attachments", "files", "view", "metadata")


def _decode(headers: dict[str, str], body: bytes) -> dict[str, Any]:
    kind = headers.get("content-type", "")
    if "json" in kind:
        try:
            doc = json.loads(body or b"{}")
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}
    args: dict[str, Any] = {k: v[-1] for k, v in parse_qs(body.decode("utf-8", "replace")).items()}
    for name in _JSON_FIELDS:
        if isinstance(args.get(name), str):
            with contextlib.suppress(ValueError):  # Slack would refuse it; the test sees the raw text
                args[name] = json.loads(args[name])
    return args


def _handler_for(fake: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:  # quiet
            pass

        def _reply(self, status: int, body: bytes, ctype: str, extra: dict[str, str] | None = None) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            for k, v in (extra or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            path = self.path.split("?")[0]
            if path.startswith("/api/"):
                method = path[len("/api/"):]
                args = _decode(headers, body)
                status, extra, doc = fake.answer(method, args, headers)
                fake._record(Call(method, args, headers, body, status, doc))
                self._reply(status, json.dumps(doc).encode(), "application/json; charset=utf-8", extra)
            elif m := re.fullmatch(r"/upload/(F\d+)", path):
                status, text = fake.take_upload(m.group(1), body)
                fake._record(Call("upload", {"file_id": m.group(1)}, headers, body, status, {"ok": status == 200}))
                self._reply(status, text, "text/plain")
            elif m := re.fullmatch(r"/respond/([\w-]+)", path):
                payload = _decode(headers, body)
                status, text = fake.take_response(m.group(1), payload)
                fake._record(Call("respond", {**payload, "_url": m.group(1)}, headers, body, status,
                                  {"ok": status == 200}))
                self._reply(status, text, "text/plain")
            else:
                self._reply(404, b"not found", "text/plain")

        do_PUT = do_POST

        def do_GET(self) -> None:
            headers = {k.lower(): v for k, v in self.headers.items()}
            path, _, query = self.path.partition("?")
            if not path.startswith("/api/"):
                self._reply(404, b"not found", "text/plain")
                return
            method = path[len("/api/"):]
            args: dict[str, Any] = {k: v[-1] for k, v in parse_qs(query).items()}
            status, extra, doc = fake.answer(method, args, headers)
            fake._record(Call(method, args, headers, b"", status, doc))
            self._reply(status, json.dumps(doc).encode(), "application/json; charset=utf-8", extra)

    return Handler


# ----------------------------------------------------------------------------- signing


def signed_headers(secret: str, body: str, timestamp: float | None = None) -> dict[str, str]:
    """Headers Slack sends with a request: a v0 signature over the exact body bytes."""
    ts = str(int(timestamp if timestamp is not None else time.time()))
    return {"Content-Type": "application/x-www-form-urlencoded", "X-Slack-Request-Timestamp": ts,
            "X-Slack-Signature": SignatureVerifier(secret).generate_signature(timestamp=ts, body=body)}


_TRIGGERS = itertools.count(1)


def new_trigger_id() -> str:
    """A trigger_id as Slack makes one for every command and click: never the same twice."""
    return f"{next(_TRIGGERS)}.1700000000.{time.monotonic_ns():x}"


def slash_body(text: str, response_url: str, channel: str = "C0INCIDENT", user: str = "U0ONCALL",
               command: str = "/gpumem", trigger_id: str | None = None) -> str:
    return urlencode({"token": "legacy-verification", "team_id": "T0FAKE", "channel_id": channel,
                      "channel_name": "incident", "user_id": user, "user_name": "oncall", "command": command,
                      "text": text, "response_url": response_url, "trigger_id": trigger_id or new_trigger_id(),
                      "api_app_id": "A0GPUMEM"})


def action_body(action_id: str, value: str, response_url: str, channel: str = "C0INCIDENT",
                message_ts: str = "1700000000.000001", user: str = "U0ONCALL", trigger_id: str | None = None,
                thread_ts: str | None = None) -> str:
    """A block_actions body; `thread_ts` when the clicked message is a reply in a thread."""
    container = {"type": "message", "channel_id": channel, "message_ts": message_ts,
                 **({"thread_ts": thread_ts} if thread_ts else {})}
    payload = {"type": "block_actions", "user": {"id": user}, "api_app_id": "A0GPUMEM", "team": {"id": "T0FAKE"},
               "container": container,
               "channel": {"id": channel}, "response_url": response_url, "trigger_id": trigger_id or new_trigger_id(),
               "actions": [{"type": "button", "action_id": action_id, "block_id": "gpumem_diagnosis",
                            "value": value, "action_ts": "1700000001.0"}]}
    return urlencode({"payload": json.dumps(payload)})
