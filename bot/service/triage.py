"""Live triage for the CLI and Slack: collect, decide, write the bundle with its charts.

`run_live_triage` is the one entry point both surfaces call; the bundle it writes is the
evidence of record (attach it to the incident, replay it with `gpumem triage --bundle`). The
charts are drawn by the `Charts` a surface hands in (`bot.render.triage_charts.CHARTS`): this
layer draws and words nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from bot.grammar.requests import CollectRequest, TriageRequest
from bot.grammar.slack import split_workload
from bot.service.bundle_dir import check_bundle_dir, write_bundle_dir
from bot.service.bundle_out import write_bundle_json
from bot.service.deps import Deps
from collectors.bundle import BundleError, has_evidence, load_bundle
from runbooks.model.errors import UsageError
from runbooks.model.evidence import Evidence
from runbooks.model.report import Report
from runbooks.model.secrets import redact_evidence
from runbooks.triage.runbook import STEPS, triage

if TYPE_CHECKING:
    from collectors.live import LiveCollection, LiveOptions

#: a live triage reports one more step than the offline one: the collection itself
LIVE_STEPS = ("collect", *STEPS[1:])
MEMORY_CHART = "gpu-memory.png"
PROFILE_CHART = "request-buckets.png"


class Charts(Protocol):
    """What draws a triage's two charts as PNG bytes (GPU memory, request buckets), each None
    when there is nothing to draw or no matplotlib: `bot.render.triage_charts.TriageCharts`.
    A surface hands it to the use cases and runners that write or carry charts."""

    def of_evidence(self, evidence: Evidence, lang: str) -> tuple[bytes | None, bytes | None]:
        """From a live triage's evidence, for the bundle it writes."""

    def of_report(self, report: Report, evidence: Evidence, lang: str) -> tuple[bytes | None, bytes | None]:
        """From a triage's report and evidence, for its thread."""

    def warm(self, lang: str) -> None:
        """Pay the first chart's imports and font loading now."""


@dataclass(frozen=True)
class TriageOutcome:
    """What one triage produced, live or from a bundle, for every surface."""

    report: Report
    evidence: Evidence
    #: the evidence of record: the bundle read, or the one written for a live triage
    bundle_dir: str | None = None
    memory_chart_png: bytes | None = None
    profile_chart_png: bytes | None = None
    #: the bundle folder was made for this triage alone: remove it once it is uploaded
    discard_bundle: bool = False
    #: anything at all could be read (False: an empty or unreadable bundle, exit 3)
    evidence_found: bool = True


def options_from_settings(settings, context: str | None = None) -> LiveOptions:
    """LiveOptions for a context (a configured cluster's name or kube context), from Settings."""
    # lazy, here and in the other live entry points: the live collectors bring the Kubernetes
    # and HTTP clients (~330 ms with -X importtime), which an offline triage never uses
    from bot.service.connections import is_in_cluster
    from collectors.live import LiveOptions, PrometheusOptions

    cluster = settings.cluster(context)
    prom = (cluster.prometheus if cluster and cluster.prometheus else None) or settings.prometheus
    prom_opts = None
    if prom is not None:
        prom_opts = PrometheusOptions(
            url=prom.url,
            bearer_token=prom.bearer_token.reveal() if prom.bearer_token else None,
            username=prom.username,
            password=prom.password.reveal() if prom.password else None,
            verify=prom.ca_file or True,
        )
    return LiveOptions(
        kubeconfig=cluster.kubeconfig if cluster else None,
        context=(cluster.context if cluster else None) or context,
        in_cluster=is_in_cluster(cluster),
        prometheus=prom_opts,
        source_deadline_s=settings.deadlines.source_s,
        total_deadline_s=settings.deadlines.collect_s,
        argocd_namespace=settings.remediation.argocd_namespace,
    )


def write_bundle(out: str | os.PathLike[str], collection: LiveCollection,
                 charts: dict[str, bytes] | None = None) -> Path:
    """Write the bundle files, the charts and bundle.json into `out`, a folder that must not
    exist yet or be empty, all at once (`bot.service.bundle_dir`)."""
    files: dict[str, str | bytes] = dict(collection.files)
    files.update(charts or {})
    return write_bundle_dir(out, files, lambda folder: write_bundle_json(folder, collection.evidence))


def run_live_triage(target: str, options: LiveOptions, lang: str = "en",
                    on_step: Callable[[int, int, str], None] | None = None,
                    bundle_dir: str | os.PathLike[str] | None = None,
                    default_namespace: str | None = None, now: datetime | None = None,
                    api=None, charts: Charts | None = None) -> TriageOutcome:
    """Collect and triage; with `bundle_dir`, also write the bundle there with the `charts` drawn
    in `lang` (the evidence of record Slack uploads and `--save-bundle` keeps). Without it
    nothing is written and no chart is drawn: a terminal triage leaves no files behind."""
    from collectors.live import collect_live  # lazy: see `options_from_settings`

    namespace, kind, name = split_workload(target, default_namespace)
    if kind != "Deployment":  # NAMESPACE/KIND/NAME: read that kind (a Deployment is looked up with a StatefulSet)
        options = replace(options, kind=kind)
    if bundle_dir:
        check_bundle_dir(bundle_dir)  # before minutes of collection, not after
    now = now or datetime.now(UTC)
    total = len(LIVE_STEPS)
    if on_step:
        on_step(1, total, "collect")
    collection = collect_live(namespace, name, options, now, api=api)
    report = triage(collection.evidence, now=now,
                    on_step=(lambda i, n, step: on_step(i, total, step)) if on_step else None)
    if not bundle_dir:
        return TriageOutcome(report, collection.evidence)
    memory_png, profile_png = charts.of_evidence(collection.evidence, lang) if charts else (None, None)
    charts = {n: png for n, png in ((MEMORY_CHART, memory_png), (PROFILE_CHART, profile_png)) if png}
    write_bundle(bundle_dir, collection, charts)
    return TriageOutcome(report, collection.evidence, str(bundle_dir), memory_png, profile_png)


def live_options(request: TriageRequest | CollectRequest, deps: Deps):
    """LiveOptions from the config file and environment, then the command-line flags."""
    from collectors.live import PrometheusOptions  # lazy: see `options_from_settings`

    settings = deps.settings
    opts = options_from_settings(settings, request.context)
    changes: dict = {}
    if request.context:
        changes["context"] = request.context
    if request.kubeconfig:
        changes["kubeconfig"] = request.kubeconfig
    if request.in_cluster:
        changes["in_cluster"] = True
    if request.direct_metrics:
        changes["direct_metrics"] = True
    if request.source_deadline is not None:
        changes["source_deadline_s"] = request.source_deadline
    if request.deadline is not None:
        changes["total_deadline_s"] = request.deadline
    if request.prometheus:
        changes["prometheus"] = PrometheusOptions(url=request.prometheus, bearer_token=deps.env.prometheus_token)
    return replace(opts, **changes), settings


def triage_bundle(path: str | os.PathLike[str], now: datetime | None = None) -> TriageOutcome:
    """Offline triage of an evidence bundle folder. Raises UsageError bundle_not_found or
    bundle_unusable (worded from `cli.<code>`)."""
    if not os.path.isdir(path):
        raise UsageError("bundle_not_found", path=str(path))
    try:
        evidence = load_bundle(path)
    except BundleError as e:
        raise UsageError("bundle_unusable", detail=str(e)) from None
    # a pasted bundle may carry credentials its collector never masked: mask them before any
    # report, channel or archive sees them, as live collection does
    evidence = redact_evidence(evidence)
    report = triage(evidence, now=now)
    return TriageOutcome(report, evidence, str(path), evidence_found=has_evidence(evidence))
