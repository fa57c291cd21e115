"""`gpumem triage --bundle DIR`: diagnose GPU memory trouble from an evidence bundle."""

from __future__ import annotations

import argparse
import os
import sys

from bot.cli import EXIT_NO_EVIDENCE, EXIT_USAGE, add_common, emit_report, verdict_exit_code


def register(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="diagnose a service: verdict, evidence, next actions",
                       description="Diagnose GPU memory trouble: the verdict first, then the evidence, "
                                   "then the next actions.")
    p.add_argument("target", nargs="?", help="NAMESPACE/DEPLOYMENT (live triage)")
    p.add_argument("--bundle", metavar="DIR", help="an evidence bundle folder (offline triage)")
    add_common(p)


def run(args: argparse.Namespace, lang: str) -> int:
    from bot.i18n import Catalog
    from collectors.bundle import BundleError, has_evidence, load_bundle
    from runbooks.triage import triage

    cat = Catalog.load(lang)
    if not args.bundle:
        print("gpumem triage: live triage needs a cluster; pass --bundle DIR for an evidence bundle",
              file=sys.stderr)
        return EXIT_USAGE
    if not os.path.isdir(args.bundle):
        print(cat.t("cli.bundle_not_found", path=args.bundle), file=sys.stderr)
        return EXIT_USAGE
    try:
        evidence = load_bundle(args.bundle)
    except BundleError as e:
        print(f"gpumem: {e}", file=sys.stderr)
        return EXIT_USAGE
    report = triage(evidence)
    emit_report(report, args.json, lang)
    if not has_evidence(evidence):
        print(cat.t("cli.nothing_read", path=args.bundle), file=sys.stderr)
        return EXIT_NO_EVIDENCE
    return verdict_exit_code(report.verdict.primary)
