"""Alertmanager webhook notifications as Alertmanager 0.27 sends them (`webhook_config`, version 4),
a bot serving /alertmanager over HTTP on 127.0.0.1, and helpers to read what it posted."""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from bot.config.settings import load_settings
from bot.serve import serve_http
from bot.slack.app import Bot, build_bot
from tests.support.fake_slack import FakeSlack
from tests.support.slack_kit import CHANNEL, ZH_CHANNEL, ExampleRunner, env_for

TOKEN = "wh-test-token-5f0c1d2e3a4b"
STARTS = "2026-03-09T20:50:12.345678901Z"
ZERO = "0001-01-01T00:00:00Z"

CONFIG = """\
default_namespace: llm
allowed_namespaces: ["*"]
default_context: prod
clusters:
  - name: prod
    context: prod{kubeconfig}
slack:
  default_lang: en
  channels:
    {channel}: {{lang: en}}
    {zh}: {{lang: zh, namespaces: [llm, search]}}
store: {{path: {store}}}
workers: {{pool_size: {pool}, queue_length: {queue}, listener_threads: 8, http_threads: 64}}
deadlines: {{triage_s: 60, progress_interval_s: 0.0001, source_s: 5}}
alerts:
  routes:
    - {{namespace: search, channel: {zh}}}
    - {{severity: [page], channel: {zh}}}
  default_channel: {channel}
  triage_interval_s: {interval}
  max_triages: {max_triages}
{extra}"""


def write_config(folder: Path, *, kubeconfig: str | None = None, pool: int = 2, queue: int = 8,
                 interval: float = 600, max_triages: int = 2, extra: str = "") -> Path:
    path = folder / "gpumem.yaml"
    path.write_text(CONFIG.format(kubeconfig=f"\n    kubeconfig: {kubeconfig}" if kubeconfig else "",
                                  channel=CHANNEL, zh=ZH_CHANNEL, store=folder / "gpumem.db", pool=pool, queue=queue,
                                  interval=interval, max_triages=max_triages, extra=extra))
    return path


def fingerprint(labels: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]


def alert(status: str = "firing", name: str = "GpumemKVCacheHigh", namespace: str | None = "llm",
          deployment: str | None = "vllm-server", pod: str | None = None, severity: str = "warning",
          starts: str = STARTS, summary: str | None = None, extra: dict[str, str] | None = None,
          fp: str | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """One alert as in Alertmanager's notification (labels of a `gpumem rules` alert)."""
    if labels is None:
        labels = {"alertname": name, "gpumem": "triage", "severity": severity, "engine": "vllm",
                  "prometheus": "monitoring/kube-prometheus-stack-prometheus"}
        for key, value in (("namespace", namespace), ("deployment", deployment), ("pod", pod)):
            if value is not None:
                labels[key] = value
        labels.update(extra or {})
    target = f"{namespace}/{deployment or pod}"
    return {
        "status": status,
        "labels": labels,
        "annotations": {
            "summary": summary or f"KV cache of {target} above 90% for 10 minutes",
            "description": f"The fullest pod is at 97%. Run: gpumem triage {target}",
            "runbook_url": "https://example.test/gpumem/README.md#GpumemKVCacheHigh",
        },
        "startsAt": starts,
        "endsAt": ZERO if status == "firing" else "2026-03-09T21:20:00Z",
        "generatorURL": "http://prometheus.monitoring:9090/graph?g0.expr=max+by+%28namespace%29&g0.tab=1",
        "fingerprint": fp or fingerprint(labels),
    }


def notification(alerts: list[dict[str, Any]], group: str = "GpumemKVCacheHigh") -> dict[str, Any]:
    """A notification of one aggregation group, as `webhook_config` posts it."""
    status = "firing" if any(a["status"] == "firing" for a in alerts) else "resolved"
    common = dict(alerts[0]["labels"]) if alerts else {}
    for a in alerts[1:]:
        common = {k: v for k, v in common.items() if a["labels"].get(k) == v}
    return {
        "receiver": "gpumem",
        "status": status,
        "alerts": alerts,
        "groupLabels": {"alertname": group},
        "commonLabels": common,
        "commonAnnotations": {},
        "externalURL": "http://alertmanager.monitoring:9093",
        "version": "4",
        "groupKey": f'{{}}/{{gpumem="triage"}}:{{alertname="{group}"}}',
        "truncatedAlerts": 0,
    }


@dataclass
class Served:
    fake: FakeSlack
    bot: Bot
    url: str
    runner: ExampleRunner

    def post(self, doc: Any, token: str | None = TOKEN, raw: bytes | None = None,
             headers: dict[str, str] | None = None) -> requests.Response:
        h = {"Content-Type": "application/json"}
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        h.update(headers or {})
        data = raw if raw is not None else json.dumps(doc).encode()
        return requests.post(self.url + "/alertmanager", data=data, headers=h, timeout=10)

    def settle(self) -> None:
        """Wait until every accepted notification has been worked through."""
        assert self.bot.alerts.wait_idle(30)

    @contextmanager
    def desk_held(self) -> Iterator[threading.Event]:
        """Hold the desk's work on every notification until the block ends: a POST answered
        inside it was answered without waiting for any of that work."""
        hold = threading.Event()
        desk = self.bot.alerts
        real = desk.handle

        def held(notification: Any) -> None:
            hold.wait(60)
            real(notification)

        desk.handle = held
        try:
            yield hold
        finally:
            hold.set()
            desk.handle = real

    def parents(self, channel: str | None = None) -> list[Any]:
        """chat.postMessage calls that started a thread (triage parents and notes), in order."""
        return [c for c in self.fake.calls_to("chat.postMessage", ok_only=True)
                if not c.args.get("thread_ts") and (channel is None or c.args.get("channel") == channel)]

    def records(self) -> list[Any]:
        from bot.store.alerts import AlertLog

        with self.bot.store.use() as store:
            return AlertLog(store).alerts()


@contextmanager
def serving(folder: Path, *, runner: ExampleRunner | None = None, token: str | None = TOKEN, events: bool = True,
            env: dict[str, str] | None = None, **config: Any) -> Iterator[Served]:
    with FakeSlack() as fake:
        environ = {**env_for(fake), **({"GPUMEM_WEBHOOK_TOKEN": token} if token else {}), **(env or {})}
        settings = load_settings(write_config(folder, **config), environ)
        runner = runner or ExampleRunner(charts=False)
        bot = build_bot(settings, runner)
        server = serve_http(bot, "127.0.0.1", 0, events=events)
        try:
            yield Served(fake, bot, server.url, runner)
        finally:
            server.close()
            bot.close(timeout_s=20)
