"""A load client for the Slack benchmarks: fire N prepared HTTP POSTs at once, from one thread.

Slack's requests come from many machines; a client of 50 Python threads in the benchmark's own
process measured its own GIL as much as the server. This one runs in a process of its own,
opens every connection first, then writes every request back to back and reads the answers
with one selector, so the latency it records is the server's (time from the last byte sent
to the whole answer read).

    echo '{"url": "http://127.0.0.1:PORT/slack/events", "requests": [[BODY, {HEADER: VALUE}], ...]}' \
        | python -m benchmarks.load_client
"""

from __future__ import annotations

import json
import selectors
import socket
import sys
import time
from urllib.parse import urlsplit


def fire(url: str, requests: list[tuple[str, dict[str, str]]], timeout_s: float = 30.0) -> list[tuple[float, bytes]]:
    """POST each (body, headers) to `url` at once; (seconds to the whole answer, raw answer) each, in order."""
    u = urlsplit(url)
    prepared = []
    for body, headers in requests:
        sock = socket.create_connection((u.hostname, u.port), timeout=timeout_s)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        data = body.encode()
        head = (f"POST {u.path} HTTP/1.1\r\nHost: {u.netloc}\r\nContent-Length: {len(data)}\r\n"
                "Connection: close\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n")
        prepared.append((sock, head.encode() + data))
    selector = selectors.DefaultSelector()
    sent: list[float] = []
    for i, (sock, raw) in enumerate(prepared):
        sock.sendall(raw)
        sent.append(time.perf_counter())
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ, i)
    answers = [b""] * len(prepared)
    took: dict[int, float] = {}
    deadline = time.monotonic() + timeout_s
    while len(took) < len(prepared) and time.monotonic() < deadline:
        for key, _ in selector.select(1.0):
            i = key.data
            chunk = key.fileobj.recv(65536)
            answers[i] += chunk
            if not chunk or _complete(answers[i]):
                took[i] = time.perf_counter() - sent[i]
                selector.unregister(key.fileobj)
                key.fileobj.close()
    return [(took.get(i, float("inf")), answers[i]) for i in range(len(prepared))]


def _complete(raw: bytes) -> bool:
    head, sep, body = raw.partition(b"\r\n\r\n")
    if not sep:
        return False
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":", 1)[1])
    return False


def main() -> None:
    spec = json.load(sys.stdin)
    results = fire(spec["url"], [(body, headers) for body, headers in spec["requests"]])
    out = []
    for seconds, raw in results:
        head, _, body = raw.partition(b"\r\n\r\n")
        status = head.split(b" ", 2)[1].decode() if head.startswith(b"HTTP/") else ""
        try:
            text = json.loads(body or b"{}").get("text", "")
        except ValueError:
            text = ""
        out.append({"seconds": seconds, "status": int(status or 0), "text": text})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
