"""`gpumem collect NAMESPACE/DEPLOYMENT --out DIR`: save a live evidence bundle (`bot.service.collect`)."""

from __future__ import annotations

import json
import sys

from bot.cli.guard import live_guard
from bot.grammar.requests import CollectRequest
from bot.render.triage_charts import CHARTS
from bot.render.wording import issue_text, issues_json
from bot.service.collect import collect_bundle
from bot.service.deps import Deps
from bot.service.exits import EXIT_NO_EVIDENCE, EXIT_OK


def run(request: CollectRequest, lang: str, deps: Deps) -> int:
    with live_guard(lang) as guard:
        outcome = collect_bundle(request, deps, lang, CHARTS)
        if request.json:
            json.dump({"bundle": str(outcome.bundle_dir), "files": list(outcome.files),
                       "issues": issues_json(outcome.evidence.issues)}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(guard.cat.t("live.collected", path=str(outcome.bundle_dir), files=", ".join(outcome.files)))
            for issue in outcome.evidence.issues:
                print("  - " + issue_text(guard.cat, issue))
        return EXIT_OK if outcome.evidence_found else EXIT_NO_EVIDENCE
    return guard.exit_code
