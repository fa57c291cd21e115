"""`gpumem audit` and `gpumem plans`: what the store remembers, printed; `gpumem audit --verify`
checks the audit's hash chain (exit 1, like any check that found something, when it is broken)."""

from __future__ import annotations

import json
import sys

from bot.cli.guard import live_guard
from bot.grammar.requests import AuditRequest, PlansRequest
from bot.render import records as render
from bot.render.remediation import reconciled_text
from bot.service.deps import Deps
from bot.service.exits import EXIT_CAUSE, EXIT_OK
from bot.service.reconcile import reconcile_for_cli
from bot.service.records import audit_rows, open_store, plan_rows, verify_audit


def run(request: AuditRequest | PlansRequest, lang: str, deps: Deps) -> int:
    if request.verb == "audit" and getattr(request, "verify", False):
        report = verify_audit(request, deps)
        if request.json:
            json.dump(render.chain_json(report), sys.stdout, ensure_ascii=False, indent=2)
            sys.stdout.write("\n")
        else:
            sys.stdout.write(render.chain_text(report, lang))
        return EXIT_OK if report.intact else EXIT_CAUSE
    if request.verb == "audit":
        rows = audit_rows(request, deps)
        doc, text = (render.audit_json(rows), None) if request.json else (None, render.audit_text(rows, lang))
    else:
        store = open_store(request, deps)
        try:
            with live_guard(lang) as guard:  # a kubeconfig that cannot be loaded: one line, never a traceback
                sys.stderr.write(reconciled_text(reconcile_for_cli(request, store, deps), lang))
        finally:
            store.close()
        if guard.exit_code:
            return guard.exit_code
        plans = plan_rows(request, deps)
        doc, text = (render.plans_json(plans), None) if request.json else (None, render.plans_text(plans, lang))
    if doc is not None:
        json.dump(doc, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(text)
    return EXIT_OK
