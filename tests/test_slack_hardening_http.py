"""Hostile HTTP input to `gpumem serve --http`: oversized bodies are refused before they are read.

The server is the one `gpumem serve --http` runs (waitress in front of the WSGI app), with a
small body limit so the attacks stay cheap; raw sockets send what `requests` would not (a
Content-Length with no body behind it, a chunked body that never ends).
"""

from __future__ import annotations

import io
import json
import logging
import socket
import time
from types import SimpleNamespace

import pytest
import requests

from bot.config.settings import SettingsError
from bot.http.app import EVENTS_PATH, bound_body, wsgi_app
from bot.serve import serve_http
from bot.slack.app import build_bot
from bot.slack.events import events_app
from bot.slack.limits import ServeLimits
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.slack_kit import SECRET, ExampleRunner, make_settings

LIMIT = 4096


@pytest.fixture
def served(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=False),
                        limits=ServeLimits(max_body_bytes=LIMIT))
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            yield SimpleNamespace(fake=fake, bot=bot, server=server)
        finally:
            server.close()
            bot.close(timeout_s=10)


def _raw(server, head: str, body: bytes = b"", read_timeout: float = 5.0) -> tuple[int, bytes, float]:
    """Send `head` (and `body`), read the answer; returns (status, raw answer, seconds to answer)."""
    with socket.create_connection((server.host if server.host != "0.0.0.0" else "127.0.0.1", server.port)) as s:
        s.settimeout(read_timeout)
        started = time.monotonic()
        s.sendall(head.encode() + body)
        answer = b""
        while b"\r\n\r\n" not in answer:
            chunk = s.recv(65536)
            if not chunk:
                break
            answer += chunk
        took = time.monotonic() - started
    status = int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/") else 0
    return status, answer, took


def _refusal_lines(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("refused ")]


@pytest.mark.parametrize("path", ["/slack/events", "/health", "/metrics", "/alertmanager"])
def test_a_declared_100_mb_body_gets_413_before_a_byte_of_it_is_read(served, caplog, path):
    head = (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            f"Content-Length: {100 * 1024 * 1024}\r\n\r\n")
    status, answer, took = _raw(served.server, head)  # no body sent at all: the answer cannot wait for it
    assert status == 413, answer
    assert took < 2.0
    time.sleep(0.1)
    assert [c.method for c in served.fake.calls if c.method != "auth.test"] == []
    lines = _refusal_lines(caplog)
    assert len(lines) == 1
    assert "body_too_large" in lines[0] and "104857600" in lines[0] and f"limit {LIMIT}" in lines[0]
    assert served.bot.metrics.registry.get_sample_value("gpumem_http_refused_total",
                                                        {"reason": "body_too_large"}) == 1


def test_a_chunked_body_is_cut_off_at_the_limit(served, caplog):
    head = ("POST /slack/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n"
            "Transfer-Encoding: chunked\r\n\r\n")
    marker = b"payload=SECRET-BODY-MARKER"
    chunk = marker + b"x" * (1024 - len(marker))
    body = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(LIMIT // 1024 + 2))  # no final 0 chunk
    status, answer, _ = _raw(served.server, head, body)
    assert status == 413, answer
    assert [c.method for c in served.fake.calls if c.method != "auth.test"] == []
    (line,) = _refusal_lines(caplog)
    assert "body_too_large" in line and f"over {LIMIT}" in line
    log = "\n".join(r.getMessage() for r in caplog.records)
    assert "SECRET-BODY-MARKER" not in log


def test_a_body_at_the_limit_is_served_and_one_byte_more_is_not(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpumem.http")
    with FakeSlack() as fake:
        body = slash_body("help", fake.response_url(1))
        for limit, expected in ((len(body), 200), (len(body) - 1, 413)):
            bot = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=False),
                            limits=ServeLimits(max_body_bytes=limit))
            server = serve_http(bot, "127.0.0.1", 0)
            try:
                resp = requests.post(server.url + "/slack/events", data=body.encode(),
                                     headers=signed_headers(SECRET, body), timeout=10)
            finally:
                server.close()
                bot.close(timeout_s=5)
            assert resp.status_code == expected, (limit, resp.text)
    assert "help" not in "".join(_refusal_lines(caplog))


def test_an_unsigned_body_under_the_limit_is_never_written_to_the_log(served, caplog):
    body = "payload=" + "A" * 3000 + "LOGGED-BODY-MARKER"
    resp = requests.post(served.server.url + "/slack/events", data=body,
                         headers={"Content-Type": "application/x-www-form-urlencoded"}, timeout=10)
    assert resp.status_code in (400, 401)
    assert "LOGGED-BODY-MARKER" not in "\n".join(r.getMessage() for r in caplog.records)


class _Endless(io.RawIOBase):
    """A request stream that never ends; counts what was read from it."""

    def __init__(self) -> None:
        self.read_bytes = 0

    def read(self, n: int = -1) -> bytes:
        n = 65536 if n is None or n < 0 else n
        self.read_bytes += n
        return b"x" * n


def test_the_wsgi_app_reads_at_most_the_limit_when_the_length_is_missing_or_wrong():
    endless = _Endless()
    env = {"REQUEST_METHOD": "POST", "wsgi.input": endless, "HTTP_TRANSFER_ENCODING": "chunked"}
    assert bound_body(env, LIMIT) == ("413 Request Entity Too Large", "body_too_large", f"over {LIMIT}")
    assert endless.read_bytes == LIMIT + 1

    endless = _Endless()  # a server that ends the stream itself (wsgi.input_terminated), no length given
    assert bound_body({"wsgi.input": endless, "wsgi.input_terminated": True}, LIMIT)[1] == "body_too_large"
    assert endless.read_bytes == LIMIT + 1

    endless = _Endless()  # a Content-Length smaller than what follows: only the declared bytes are read
    env = {"wsgi.input": endless, "CONTENT_LENGTH": "10"}
    assert bound_body(env, LIMIT) is None
    assert endless.read_bytes == 10 and env["wsgi.input"].read() == b"x" * 10

    short = io.BytesIO(b"abc")  # a Content-Length larger than what came: the bytes that came
    env = {"wsgi.input": short, "CONTENT_LENGTH": "4000"}
    assert bound_body(env, LIMIT) is None
    assert env["CONTENT_LENGTH"] == "3"

    env = {"wsgi.input": _Endless(), "REQUEST_METHOD": "GET"}  # no length, not chunked: no body is read
    assert bound_body(env, LIMIT) is None and env["wsgi.input"].read() == b""

    for bad in ("-1", "1e9", "0x10", "١٢٣", "9" * 30):
        assert bound_body({"wsgi.input": _Endless(), "CONTENT_LENGTH": bad}, LIMIT)[1] == "bad_content_length"


def test_the_wsgi_app_answers_413_on_every_path_without_calling_the_handler(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="gpumem.http")
    with FakeSlack() as fake:
        bot = build_bot(make_settings(tmp_path, fake), ExampleRunner(charts=False))
        health_calls = []
        app = wsgi_app(bot.metrics, lambda: health_calls.append(1) or {"ok": True}, max_body_bytes=LIMIT,
                       events=events_app(bot.app, bot.metrics, EVENTS_PATH))
        for path in ("/slack/events", "/health", "/metrics", "/anything"):
            endless = _Endless()
            statuses: list[str] = []
            out = b"".join(app({"REQUEST_METHOD": "POST", "PATH_INFO": path, "wsgi.input": endless,
                                "CONTENT_LENGTH": str(LIMIT + 1)}, lambda s, h, e=None, seen=statuses: seen.append(s)))
            assert statuses == ["413 Request Entity Too Large"] and endless.read_bytes == 0
            assert json.loads(out) == {"error": "body_too_large", "max_body_bytes": LIMIT}
        bot.close(timeout_s=5)
    assert health_calls == [] and [c.method for c in fake.calls if c.method != "auth.test"] == []
    assert len(_refusal_lines(caplog)) == 4


@pytest.mark.parametrize("env,error", [
    ({"GPUMEM_HTTP_MAX_BODY_BYTES": "lots"}, "GPUMEM_HTTP_MAX_BODY_BYTES: expected a whole number"),
    ({"GPUMEM_HTTP_MAX_BODY_BYTES": "10"}, "at least 1024"),
    ({"GPUMEM_DRAIN_S": "-3"}, "GPUMEM_DRAIN_S: expected seconds"),
    ({"GPUMEM_EXIT_GRACE_S": "0"}, "at least 1 second"),
])
def test_limits_from_the_environment_are_checked(env, error):
    with pytest.raises(SettingsError, match=error):
        ServeLimits.from_environ(env)


def test_limit_defaults_stay_under_the_kubernetes_grace_period():
    limits = ServeLimits.from_environ({})
    assert limits.max_body_bytes == 1024 * 1024
    assert limits.stop_s < 30
