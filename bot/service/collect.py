"""The collect use case (`gpumem collect`): gather a running Deployment's evidence and write it as
a bundle that `gpumem triage --bundle DIR` reads back to the same verdict."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from bot.grammar.requests import CollectRequest
from bot.grammar.slack import split_workload
from bot.service.bundle_dir import check_bundle_dir
from bot.service.deps import Deps
from bot.service.triage import MEMORY_CHART, Charts, live_options, write_bundle
from collectors.bundle import has_evidence
from collectors.live import collect_live
from runbooks.model.evidence import Evidence


@dataclass(frozen=True)
class CollectOutcome:
    bundle_dir: Path
    #: the files written, by name
    files: tuple[str, ...]
    evidence: Evidence
    #: anything at all could be read (False: exit 3)
    evidence_found: bool


def collect_bundle(request: CollectRequest, deps: Deps, lang: str, charts: Charts | None = None) -> CollectOutcome:
    """Collect `request.target` live with the settings and flags of `request`, write the bundle to
    `request.out` with the memory chart (drawn by `charts`, in `lang`). Raises what live
    collection raises (TargetNotFound, ...)."""
    opts, settings = live_options(request, deps)
    namespace, kind, name = split_workload(request.target, request.namespace or settings.default_namespace)
    if kind != "Deployment":  # NAMESPACE/KIND/NAME, as `gpumem triage` takes it
        opts = replace(opts, kind=kind)
    check_bundle_dir(request.out)  # before the collection, not after
    collection = collect_live(namespace, name, opts, deps.now())
    memory_png, _ = charts.of_evidence(collection.evidence, lang) if charts else (None, None)
    out = write_bundle(request.out, collection, {MEMORY_CHART: memory_png} if memory_png else None)
    files = tuple(sorted(p.name for p in out.iterdir()))
    return CollectOutcome(out, files, collection.evidence, has_evidence(collection.evidence))
