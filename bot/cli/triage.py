"""`gpumem triage`: diagnose GPU memory trouble, live (NAMESPACE/DEPLOYMENT) or from a bundle."""

from __future__ import annotations

import sys

from bot.cli.guard import live_guard
from bot.cli.output import emit_report
from bot.grammar.requests import TriageRequest
from bot.render.i18n import Catalog
from bot.service import triage as triage_service
from bot.service.deps import Deps
from bot.service.exits import EXIT_NO_EVIDENCE, verdict_exit_code
from runbooks.model.errors import UsageError

# bad usage raises UsageError, worded by `bot.main` from `cli.<code>`; a workload that does
# not exist (TargetNotFound) passes through the live guard to the same mapping
# (the catalog section is the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: TriageRequest, lang: str, deps: Deps) -> int:
    if bool(request.bundle) == bool(request.target):
        raise UsageError("target_and_bundle" if request.bundle else "no_target")
    if request.bundle:
        return _offline(request, lang)
    return _live(request, lang, deps)


def _offline(request: TriageRequest, lang: str) -> int:
    outcome = triage_service.triage_bundle(request.bundle)
    emit_report(outcome.report, request.json, lang)
    if not outcome.evidence_found:
        print(Catalog.load(lang).t("cli.nothing_read", path=request.bundle), file=sys.stderr)
        return EXIT_NO_EVIDENCE
    return verdict_exit_code(outcome.report.verdict.primary)


def _live(request: TriageRequest, lang: str, deps: Deps) -> int:
    # lazy: the store behind the record (sqlite_utils, ~180 ms with -X importtime) and the
    # charts of a saved bundle (~8 ms) are not paid by an offline triage
    from bot.render.triage_charts import CHARTS
    from bot.service.notes import record_cli_triage

    with live_guard(lang) as guard:
        opts, settings = triage_service.live_options(request, deps)
        result = triage_service.run_live_triage(request.target, opts, lang, bundle_dir=request.save_bundle,
                                                default_namespace=request.namespace or settings.default_namespace,
                                                charts=CHARTS)
        emit_report(result.report, request.json, lang)
        record_cli_triage(request, result.report, deps)  # the shift's incidents, for `gpumem handover`
        if request.save_bundle:
            print(guard.cat.t("live.bundle_saved", path=str(result.bundle_dir)), file=sys.stderr)
        return verdict_exit_code(result.report.verdict.primary)
    return guard.exit_code
