"""The HTTP server's accept: every waiting connection taken in one loop turn, within the limits."""

from __future__ import annotations

import socket

import pytest

from bot.http import server as server_module
from bot.http.server import HttpServer


def _app(environ, start_response):
    body = environ["PATH_INFO"].encode()
    start_response("200 OK", [("Content-Type", "text/plain"), ("Content-Length", str(len(body)))])
    return [body]


@pytest.fixture
def http():
    server = HttpServer(_app, "127.0.0.1", 0, threads=2, max_body_bytes=1024)
    clients: list[socket.socket] = []
    yield server, clients
    for client in clients:
        client.close()
    server.close()
    if server._thread is None:  # never started: its sockets are closed here
        from waitress import wasyncore
        server._server.task_dispatcher.shutdown(timeout=1)
        wasyncore.close_all(server._server._map)


def _connect(server: HttpServer, clients: list[socket.socket], n: int) -> None:
    for _ in range(n):
        clients.append(socket.create_connection((server.host, server.port), timeout=5))


def _channels(server: HttpServer) -> int:
    return len(server._server._map)


def test_one_turn_accepts_every_waiting_connection(http):
    server, clients = http
    before = _channels(server)
    _connect(server, clients, 20)
    server._server.handle_accept()
    assert _channels(server) == before + 20
    server._server.handle_accept()  # nothing waiting: no channel and no error
    assert _channels(server) == before + 20


def test_one_turn_stops_at_the_connection_limit_and_at_the_batch(http, monkeypatch):
    server, clients = http
    before = _channels(server)
    _connect(server, clients, 12)
    server._server.adj.connection_limit = before + 5
    server._server.handle_accept()
    assert _channels(server) == before + 5
    server._server.adj.connection_limit = 1000
    monkeypatch.setattr(server_module, "ACCEPT_BATCH", 3)
    server._server.handle_accept()
    assert _channels(server) == before + 8
    server._server.handle_accept()
    server._server.handle_accept()
    assert _channels(server) == before + 12


def test_connections_accepted_together_are_each_answered(http):
    server, clients = http
    _connect(server, clients, 30)
    server.start()
    for i, client in enumerate(clients):
        client.sendall(f"GET /n{i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
    for i, client in enumerate(clients):
        data = b""
        while chunk := client.recv(4096):
            data += chunk
        assert data.startswith(b"HTTP/1.1 200 OK")
        assert data.endswith(f"/n{i}".encode())
