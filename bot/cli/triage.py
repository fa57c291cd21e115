"""`gpumem triage`: diagnose GPU memory trouble, live (NAMESPACE/DEPLOYMENT) or from a bundle."""

from __future__ import annotations

import argparse
import os
import sys

from bot.cli.output import emit_report
from bot.service.exits import EXIT_NO_EVIDENCE, verdict_exit_code
from runbooks.model.errors import UsageError

#: bad usage raises UsageError, worded by `bot.main` from `cli.<code>`; a workload that does
#: not exist (TargetNotFound) passes through the live guard to the same mapping
ERROR_KEYS = "cli"


def live_options(args: argparse.Namespace):
    """LiveOptions from the config file and environment, then the command-line flags."""
    from dataclasses import replace

    from bot.service.settings import load_settings
    from bot.service.triage import options_from_settings
    from collectors.live import PrometheusOptions

    settings = load_settings(args.config, os.environ)
    opts = options_from_settings(settings, args.context)
    changes: dict = {}
    if args.context:
        changes["context"] = args.context
    if args.kubeconfig:
        changes["kubeconfig"] = args.kubeconfig
    if args.in_cluster:
        changes["in_cluster"] = True
    if args.direct_metrics:
        changes["direct_metrics"] = True
    if args.source_deadline is not None:
        changes["source_deadline_s"] = args.source_deadline
    if args.deadline is not None:
        changes["total_deadline_s"] = args.deadline
    if args.prometheus:
        token = os.environ.get("GPUMEM_PROMETHEUS_TOKEN")
        changes["prometheus"] = PrometheusOptions(url=args.prometheus, bearer_token=token)
    return replace(opts, **changes), settings


def run(args: argparse.Namespace, lang: str) -> int:
    if bool(args.bundle) == bool(args.target):
        raise UsageError("target_and_bundle" if args.bundle else "no_target")
    if args.bundle:
        return _offline(args, lang)
    return _live(args, lang)


def _offline(args: argparse.Namespace, lang: str) -> int:
    from bot.render.i18n import Catalog
    from collectors.parsers.bundle import BundleError, has_evidence, load_bundle
    from runbooks.triage.runbook import triage

    cat = Catalog.load(lang)
    if not os.path.isdir(args.bundle):
        raise UsageError("bundle_not_found", path=args.bundle)
    try:
        evidence = load_bundle(args.bundle)
    except BundleError as e:
        raise UsageError("bundle_unusable", detail=str(e)) from None
    report = triage(evidence)
    emit_report(report, args.json, lang)
    if not has_evidence(evidence):
        print(cat.t("cli.nothing_read", path=args.bundle), file=sys.stderr)
        return EXIT_NO_EVIDENCE
    return verdict_exit_code(report.verdict.primary)


def _live(args: argparse.Namespace, lang: str) -> int:
    from bot.service.live_errors import live_guard
    from bot.service.triage import run_live_triage

    with live_guard(lang) as guard:
        opts, settings = live_options(args)
        result = run_live_triage(args.target, opts, lang, bundle_dir=args.save_bundle,
                                 default_namespace=args.namespace or settings.default_namespace)
        emit_report(result.report, args.json, lang)
        if args.save_bundle:
            print(guard.cat.t("live.bundle_saved", path=str(result.bundle_dir)), file=sys.stderr)
        return verdict_exit_code(result.report.verdict.primary)
    return guard.exit_code
