"""The HTTP face on its own (`bot.http`): no Slack app behind it, and an alert handler that only
keeps what it is handed, as the Slack side's AlertDesk is handed it in `gpumem serve`."""

from __future__ import annotations

import io
import json
import logging
from typing import Any

import pytest

from bot.http.alertmanager import alert_endpoint
from bot.http.app import wsgi_app
from bot.service.alert_payload import Notification
from bot.telemetry.metrics import BotMetrics
from tests.support.alertmanager import TOKEN, alert, notification


class Handler:
    """An AlertHandler: takes notifications while it has room and is open."""

    def __init__(self, room: int = 10, closed: bool = False, fails: bool = False):
        self.room, self.closed, self.fails = room, closed, fails
        self.offered: list[Notification] = []

    def offer(self, n: Notification) -> bool:
        if self.fails:
            raise RuntimeError("the desk broke")
        if len(self.offered) >= self.room:
            return False
        self.offered.append(n)
        return True


def face(handler: Handler | None, token: str | None = TOKEN, draining: bool = False) -> tuple[Any, BotMetrics]:
    metrics = BotMetrics()
    endpoint = alert_endpoint(handler, token, metrics, lambda: draining)
    return wsgi_app(metrics, lambda: {"ok": True, "jobs_running": 0}, max_body_bytes=64 * 1024,
                    alertmanager=endpoint), metrics


def call(app: Any, method: str, path: str, body: bytes = b"",
         headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    environ = {"REQUEST_METHOD": method, "PATH_INFO": path, "wsgi.input": io.BytesIO(body),
               "CONTENT_LENGTH": str(len(body))}
    for k, v in (headers or {}).items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    seen: list[tuple[str, dict[str, str]]] = []
    out = b"".join(app(environ, lambda status, h, exc=None: seen.append((status, dict(h)))))
    return int(seen[0][0].split()[0]), seen[0][1], out


def post_alerts(app: Any, doc: dict[str, Any], token: str = TOKEN) -> tuple[int, dict[str, str], bytes]:
    return call(app, "POST", "/alertmanager", json.dumps(doc).encode(), {"Authorization": f"Bearer {token}"})


def refused(metrics: BotMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("gpumem_http_refused_total", {"reason": reason}) or 0.0


TWO = notification([alert(deployment="vllm-server"), alert(status="resolved", deployment="tgi")])


def test_an_accepted_notification_is_handed_to_the_handler_parsed():
    handler = Handler()
    app, _ = face(handler)
    status, headers, body = post_alerts(app, TWO)
    assert (status, headers["Content-Type"]) == (200, "application/json")
    assert json.loads(body) == {"status": "accepted", "alerts": 2}
    (n,) = handler.offered
    assert n.group_key == TWO["groupKey"] and n.status == "firing"
    assert [(a.name, a.status, a.labels["deployment"]) for a in n.alerts] == [
        ("GpumemKVCacheHigh", "firing", "vllm-server"), ("GpumemKVCacheHigh", "resolved", "tgi")]


@pytest.mark.parametrize("handler,draining,retry,reason", [
    (Handler(room=0), False, "5", "webhook_queue_full"),
    (Handler(closed=True), False, "10", "webhook_stopping"),
    (Handler(), True, "10", "webhook_stopping"),
])
def test_a_handler_that_cannot_take_it_gets_503_with_retry_after(handler, draining, retry, reason):
    app, metrics = face(handler, draining=draining)
    status, headers, _ = post_alerts(app, TWO)
    assert (status, headers["Retry-After"]) == (503, retry)
    assert handler.offered == [] and refused(metrics, reason) == 1


def test_a_wrong_token_is_401_and_no_handler_or_token_is_403(caplog):
    caplog.set_level(logging.WARNING, logger="gpumem.alerts")
    handler = Handler()
    app, metrics = face(handler)
    status, headers, _ = post_alerts(app, TWO, token="not-" + TOKEN)
    assert (status, headers["WWW-Authenticate"]) == (401, 'Bearer realm="gpumem"')
    assert handler.offered == [] and refused(metrics, "webhook_unauthorized") == 1
    assert TOKEN not in caplog.text
    for app, metrics in (face(None), face(handler, token=None)):
        assert post_alerts(app, TWO)[0] == 403 and refused(metrics, "webhook_disabled") == 1
    assert handler.offered == []


def test_a_bad_body_names_its_field_and_a_get_is_405():
    handler = Handler()
    app, _ = face(handler)
    status, _, body = post_alerts(app, {**TWO, "version": "3"})
    assert status == 400 and json.loads(body)["field"] == "version"
    status, headers, _ = call(app, "GET", "/alertmanager")
    assert (status, headers["Allow"]) == (405, "POST")
    assert handler.offered == []


def test_a_handler_that_raises_is_a_500_with_an_error_id_in_the_log(caplog):
    app, _ = face(Handler(fails=True))
    status, _, body = post_alerts(app, TWO)
    doc = json.loads(body)
    assert status == 500 and doc["error"] == "internal error" and len(doc["error_id"]) == 8
    assert f"Alertmanager notification failed [error {doc['error_id']}]" in caplog.text


def test_without_a_slack_app_events_are_404_and_health_and_metrics_still_answer():
    app, _ = face(Handler())
    assert call(app, "POST", "/slack/events", b"command=%2Fgpumem")[0] == 404
    status, _, body = call(app, "GET", "/health")
    assert status == 200 and json.loads(body) == {"ok": True, "jobs_running": 0}
    status, headers, body = call(app, "GET", "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    assert b'gpumem_http_request_duration_seconds_count{path="/slack/events"} 1.0' in body
    assert b'gpumem_http_request_duration_seconds_count{path="/health"} 1.0' in body
