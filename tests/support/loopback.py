"""The shared shell of the stand-in servers: a threaded HTTP server on 127.0.0.1, port 0."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class LoopbackHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    #: many clients connect at once (one connection per parallel call); the default backlog
    #: of 5 would make the kernel drop SYNs and the client retry a second later
    request_queue_size = 256


class LoopbackServer:
    """Start/stop/url for a stand-in. Subclasses set `handler` and `handler_attr` (the name
    under which the handler class finds the stand-in)."""

    handler: type[BaseHTTPRequestHandler]
    handler_attr: str = "server_state"
    thread_name: str = "stand-in"
    _server: LoopbackHTTPServer | None = None

    def start(self) -> Any:
        bound = type("_Bound", (self.handler,), {self.handler_attr: self})
        self._server = LoopbackHTTPServer(("127.0.0.1", 0), bound)
        threading.Thread(target=self._server.serve_forever, args=(0.05,), name=self.thread_name,
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
