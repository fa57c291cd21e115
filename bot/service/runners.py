"""Where a triage gets its evidence, injected so surfaces, tests and deployments choose.

`TriageRunner`: `(target, context, on_step) -> TriageOutcome`. Live triage
(`bot.service.triage.run_live_triage`) fits it through `live_runner(settings)`; `BundleRunner`
reads evidence bundles from disk (staging, drills, tests).
"""

from __future__ import annotations

import importlib
import io
import os
import shutil
import tarfile
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from bot.service.triage import TriageOutcome
from runbooks.model import errors
from runbooks.model.secrets import redact_evidence
from runbooks.model.units import MIB

Progress = Callable[[int, int, str], None]

#: an evidence bundle larger than this is not uploaded (the thread says so)
MAX_BUNDLE_UPLOAD_BYTES = 200 * MIB


class TriageRunner(Protocol):
    def __call__(self, target: str, context: str | None, on_step: Progress) -> Any:
        """Gather evidence for `target` ("namespace/name") and triage it; returns a TriageOutcome."""


class TargetNotFound(errors.TargetNotFound):
    """No evidence source of this bot knows the target: no bundle is configured for it and no
    live triage can ask a cluster.

    The one `runbooks.model.errors.TargetNotFound`, so the Slack work path that catches it
    also catches the cluster's own "does not exist" (`collectors.kube.client.TargetNotFound`).
    Its code is `NO_SOURCE`, not "not_found": it says nothing about whether the workload
    exists, and Slack words it so. `str()` is the target.
    """

    NO_SOURCE = "no_source"

    def __init__(self, target: str):
        namespace, _, name = target.rpartition("/")
        super().__init__("workload", namespace, name, code=self.NO_SOURCE)
        self.target = target

    def __str__(self) -> str:
        return self.target


class BundleRunner:
    """Triage from evidence bundles on disk: "namespace/name" -> bundle folder.

    >>> run = BundleRunner({"llm/vllm-server": "examples/runbook-incident"}, charts=False)
    >>> out = run("llm/vllm-server", None, print)
    1 7 evidence
    2 7 static
    3 7 kv_cache
    4 7 concurrency
    5 7 parallelism
    6 7 platform
    7 7 verdict
    >>> out.report.verdict.primary, out.bundle_dir
    ('kv_cache_pressure', 'examples/runbook-incident')
    >>> run("llm/unknown", None, print)
    Traceback (most recent call last):
    ...
    bot.service.runners.TargetNotFound: llm/unknown
    """

    def __init__(self, bundles: Mapping[str, str | os.PathLike[str]], charts: bool = True,
                 now: Callable[[], datetime] | None = None, lang: str = "en"):
        self.bundles = {k: Path(v) for k, v in bundles.items()}
        self.charts = charts
        self.now = now or (lambda: datetime.now(UTC))
        self.lang = lang

    def __call__(self, target: str, context: str | None, on_step: Progress) -> TriageOutcome:
        from collectors.parsers.bundle import load_bundle
        from runbooks.triage.runbook import triage

        folder = self.bundles.get(target)
        if folder is None:
            raise TargetNotFound(target)
        evidence = redact_evidence(load_bundle(folder))  # as triage_bundle: a bundle may carry credentials
        report = triage(evidence, now=self.now(), on_step=on_step)
        memory_png = profile_png = None
        if self.charts:
            from bot.render.triage_charts import memory_chart, profile_chart

            memory_png = memory_chart(report, evidence, self.lang)
            profile_png = profile_chart(report, self.lang)
        return TriageOutcome(report, evidence, str(folder), memory_png, profile_png)


def live_runner(settings: Any) -> TriageRunner | None:
    """`bot.service.triage.run_live_triage` as a TriageRunner, or None when this build has no live triage.

    Each run writes its bundle to a fresh temporary folder, uploaded to the thread and then
    removed, so a long-running bot does not fill its disk.
    """
    try:
        live = importlib.import_module("bot.service.triage")
    except ModuleNotFoundError as e:
        if e.name != "bot.service.triage":
            raise
        return None

    def runner(target: str, context: str | None, on_step: Progress) -> TriageOutcome:
        options = live.options_from_settings(settings, context)
        folder = tempfile.mkdtemp(prefix="gpumem-slack-")
        try:
            result = live.run_live_triage(target, options, lang=settings.slack.default_lang, on_step=on_step,
                                          bundle_dir=folder, default_namespace=settings.default_namespace)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return replace(result, discard_bundle=True)

    return runner


def bundle_archive(bundle_dir: str | os.PathLike[str], name: str) -> bytes | None:
    """The bundle folder as a .tar.gz in memory; None when it is missing or too large to upload."""
    root = Path(bundle_dir)
    if not root.is_dir():
        return None
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    if sum(p.stat().st_size for p in files) > MAX_BUNDLE_UPLOAD_BYTES * 8:
        return None  # compresses to more than the cap even at 8:1
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in files:
            tar.add(path, arcname=f"{name}/{path.relative_to(root)}", recursive=False)
    data = buf.getvalue()
    return data if len(data) <= MAX_BUNDLE_UPLOAD_BYTES else None
