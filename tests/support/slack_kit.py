"""Shared pieces of the Slack tests: settings on disk, bundle-backed runners, a running bot.

Nothing here talks to anything outside 127.0.0.1: the bot's Web API base URL is FakeSlack's.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from functools import cache
from pathlib import Path
from typing import Any

from slack_bolt.request import BoltRequest

from bot.config.settings import Settings, load_settings
from bot.grammar.commands import add_common, build_parser
from bot.render.triage_charts import CHARTS
from bot.service.runners import BundleRunner
from bot.service.triage import TriageOutcome
from bot.slack.app import Bot, build_bot
from bot.verbs.worker import VerbOutput
from tests.support.fake_slack import FakeSlack, action_body, signed_headers, slash_body

ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLES = ROOT / "examples"
SECRET = "test-signing-secret-0123456789"
NOW = datetime(2026, 3, 9, 21, 0, tzinfo=UTC)
CHANNEL, ZH_CHANNEL, OTHER_CHANNEL = "C0INCIDENT", "C0ZHONCALL", "C0RANDOM"
USER = "U0ONCALL"


@cache
def example_targets() -> dict[str, Path]:
    """Every example bundle under the target its deployment names ("llm/vllm-server", ...)."""
    from collectors.bundle import load_bundle

    out = {}
    for folder in sorted(p for p in EXAMPLES.iterdir() if (p / "expected.json").is_file()):
        target = load_bundle(folder).target or f"examples/{folder.name}"
        if "/" not in target:
            target = f"examples/{target}"
        out[target] = folder
    return out


CONFIG = """\
default_namespace: llm
allowed_namespaces: ["*"]
default_context: prod-a
clusters:
  - context: prod-a
  - context: prod-b
    namespaces: [llm]
slack:
  default_lang: en
  channels:
    {channel}: {{lang: en{channel_extra}}}
    {zh}: {{lang: zh, namespaces: [llm, search]}}
workers:
  pool_size: {pool}
  queue_length: {queue}
  listener_threads: 64
  http_threads: 64
deadlines:
  triage_s: {deadline}
  progress_interval_s: {interval}
  verb_s: 60
"""


def write_config(folder: Path, pool: int = 4, queue: int = 64, deadline: float = 60, interval: float = 0.0001,
                 extra: str = "", channel_extra: str = "") -> Path:
    """The test bot's config; `channel_extra` goes into CHANNEL's policy (`, watch: [llm/a]`)."""
    path = folder / "gpumem.yaml"
    path.write_text(CONFIG.format(channel=CHANNEL, zh=ZH_CHANNEL, pool=pool, queue=queue, deadline=deadline,
                                  interval=interval, channel_extra=channel_extra) + extra)
    return path


def env_for(fake: FakeSlack) -> dict[str, str]:
    return {"SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": SECRET, "GPUMEM_SLACK_API_URL": fake.api_url}


def make_settings(folder: Path, fake: FakeSlack, **kw: Any) -> Settings:
    return load_settings(write_config(folder, **kw), env_for(fake))


class DrawnOnce:
    """The real charts (`CHARTS`), each drawn once per target and language and the same PNG
    bytes handed to every later triage of it: for tests that run one example bundle many
    times and read what is uploaded, not how it is drawn (a chart costs ~0.5 s of a core)."""

    def __init__(self) -> None:
        self._drawn: dict[tuple[str, str | None, str], tuple[bytes | None, bytes | None]] = {}
        self._lock = threading.Lock()

    def _once(self, key: tuple[str, str | None, str], draw: Callable[[], Any]) -> tuple[bytes | None, bytes | None]:
        with self._lock:
            if key not in self._drawn:
                self._drawn[key] = draw()
            return self._drawn[key]

    def of_evidence(self, evidence: Any, lang: str) -> tuple[bytes | None, bytes | None]:
        return self._once(("evidence", evidence.target, lang), lambda: CHARTS.of_evidence(evidence, lang))

    def of_report(self, report: Any, evidence: Any, lang: str) -> tuple[bytes | None, bytes | None]:
        return self._once(("report", report.target, lang), lambda: CHARTS.of_report(report, evidence, lang))

    def warm(self, lang: str) -> None:
        CHARTS.warm(lang)


class ExampleRunner(BundleRunner):
    """The example bundles by target, with a fixed clock; `gate` holds runs until set. `charts`:
    True draws them (`CHARTS`), False draws none, or a drawer of its own (`DrawnOnce`)."""

    def __init__(self, charts: Any = True, gate: threading.Event | None = None, delay_s: float = 0.0):
        drawer = CHARTS if charts is True else charts or None
        super().__init__(example_targets(), charts=drawer, now=lambda: NOW)
        self.gate = gate
        self.delay_s = delay_s
        self.started = threading.Semaphore(0)

    def __call__(self, target: str, context: str | None, on_step: Callable[[int, int, str], None]) -> TriageOutcome:
        self.started.release()
        if self.gate is not None:
            self.gate.wait(30)
        if self.delay_s:
            time.sleep(self.delay_s)
        return super().__call__(target, context, on_step)


class FakeVerbs:
    """A CLI verb runner that answers from a table: argv[0] -> VerbOutput."""

    def __init__(self, answers: dict[str, VerbOutput]):
        self.answers = answers
        self.calls: list[tuple[list[str], str]] = []

    def __call__(self, argv: list[str], lang: str) -> VerbOutput:
        self.calls.append((argv, lang))
        return self.answers[argv[0]]


@contextmanager
def running_bot(folder: Path, runner: Any = None, verbs: Any = None, parser_factory: Any = None,
                **config: Any) -> Iterator[tuple[FakeSlack, Bot]]:
    with FakeSlack() as fake:
        settings = make_settings(folder, fake, **config)
        bot = build_bot(settings, runner or ExampleRunner(charts=False), verbs, parser_factory=parser_factory)
        try:
            yield fake, bot
        finally:
            bot.close(timeout_s=10)


def dispatch_command(bot: Bot, fake: FakeSlack, text: str, channel: str = CHANNEL, n: int = 1,
                     timestamp: float | None = None, secret: str = SECRET) -> Any:
    body = slash_body(text, fake.response_url(n), channel=channel)
    return bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(secret, body, timestamp)))


def dispatch_action(bot: Bot, fake: FakeSlack, action_id: str, value: str, message_ts: str,
                    channel: str = CHANNEL, n: int = 90) -> Any:
    body = action_body(action_id, value, fake.response_url(n), channel=channel, message_ts=message_ts)
    return bot.app.dispatch(BoltRequest(body=body, headers=signed_headers(SECRET, body)))


def is_diagnosis(call: Any) -> bool:
    """A chat.update that carries the final diagnosis (it has the "Run again" button)."""
    return any(b.get("type") == "actions" for b in call.args.get("blocks") or [])


def parser_with_budget() -> argparse.ArgumentParser:
    """The CLI parser with a stand-in budget verb whose flags the tests control."""
    p = build_parser()
    sub = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    sub.choices.pop("budget", None)
    b = sub.add_parser("budget")
    b.add_argument("--engine", choices=("vllm", "tgi", "sglang"), required=True)
    b.add_argument("--model", required=True)
    b.add_argument("--gpu", default="A100-80GB")
    b.add_argument("--max-model-len", type=int)
    b.add_argument("--config-json", metavar="FILE")
    add_common(b)
    return p


def drain(bot: Bot) -> None:
    """Wait until every listener and job has finished: what was posted is then all there is."""
    if bot.handlers.after_ack is not None:  # what the acks handed on (parent posts, queueing)
        bot.handlers.after_ack.shutdown(wait=True)
    bot.close(timeout_s=30)


def live_config(tmp_path, kubeconfig, prometheus_url: str | None = None) -> str:
    """A gpumem config with one cluster (context prod) read through `kubeconfig`, and Prometheus when given."""
    prom = f"\n    prometheus: {{url: {prometheus_url}}}" if prometheus_url else ""
    text = f"""\
default_namespace: llm
allowed_namespaces: [llm]
default_context: prod
clusters:
  - name: prod
    context: prod
    kubeconfig: {kubeconfig}{prom}
slack:
  default_lang: en
  channels:
    {CHANNEL}: {{lang: en}}
workers: {{pool_size: 2, queue_length: 8}}
deadlines: {{triage_s: 60, progress_interval_s: 0.0001, source_s: 5, collect_s: 20}}
"""
    path = tmp_path / "gpumem.yaml"
    path.write_text(text)
    return str(path)


def wsgi_post(app: Any, body: str, headers: dict[str, str]) -> tuple[int, bytes]:
    """One POST /slack/events through a WSGI app (the one `gpumem serve --http` runs), without
    a socket: (status code, body)."""
    import io
    from wsgiref.util import setup_testing_defaults

    raw = body.encode()
    environ = {"REQUEST_METHOD": "POST", "PATH_INFO": "/slack/events", "CONTENT_LENGTH": str(len(raw)),
               "CONTENT_TYPE": "application/x-www-form-urlencoded", "wsgi.input": io.BytesIO(raw)}
    for k, v in headers.items():
        environ["HTTP_" + k.upper().replace("-", "_")] = v
    setup_testing_defaults(environ)
    status: list[str] = []
    out = b"".join(app(environ, lambda s, h, exc=None: status.append(s)))
    return int(status[0].split()[0]), out


class ServeProcess:
    """`python -m bot serve --http` as a child process against `fake`, its stderr collected on a
    thread. `env` adds to (or, with `drop`, removes from) this process's environment."""

    def __init__(self, config: Path, fake: FakeSlack, drop: tuple[str, ...] = (), start_s: float = 60.0,
                 **env: str):
        import os
        import re
        import subprocess
        import sys

        full = {k: v for k, v in os.environ.items() if k not in drop}
        full.update(env_for(fake), PYTHONPATH=str(ROOT), **env)
        self.proc = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--http", "--host", "127.0.0.1",
                                      "--port", "0", "--config", str(config), "--lang", "en"],
                                     cwd=ROOT, env=full, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self.url = ""
        deadline = time.monotonic() + start_s
        while not self.url and time.monotonic() < deadline and self.proc.poll() is None:
            line = self.proc.stderr.readline()
            self.lines.append(line)
            m = re.search(r"listening on (http://\S+)", line)
            self.url = m.group(1) if m else ""
        assert self.url, "".join(self.lines)
        threading.Thread(target=lambda: self.lines.extend(self.proc.stderr), daemon=True).start()

    def command(self, fake: FakeSlack, text: str, n: int = 1) -> Any:
        import requests

        body = slash_body(text, fake.response_url(n))
        return requests.post(self.url + "/slack/events", data=body, headers=signed_headers(SECRET, body), timeout=10)

    def log(self) -> str:
        return "".join(self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


#: the Slack messages' golden files; GPUMEM_UPDATE_GOLDEN=1 rewrites them after an intended change
GOLDEN = ROOT / "tests" / "golden" / "slack"


def check_golden(name: str, doc: dict[str, Any]) -> None:
    """`doc` equals tests/golden/slack/NAME.json (written, and the test failed, when missing)."""
    import json
    import os

    import pytest

    update = os.environ.get("GPUMEM_UPDATE_GOLDEN") == "1"
    path = GOLDEN / f"{name}.json"
    text = json.dumps(doc, ensure_ascii=False, indent=1, sort_keys=True) + "\n"
    if update or not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        if not update:
            pytest.fail(f"{path} was missing and has been written; check it in and run again")
    assert json.loads(path.read_text(encoding="utf-8")) == json.loads(text), (
        f"{path.name} changed; if intended, rerun with GPUMEM_UPDATE_GOLDEN=1")
