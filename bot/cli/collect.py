"""`gpumem collect NAMESPACE/DEPLOYMENT --out DIR`: save a live evidence bundle."""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime

from bot.cli.triage import live_options
from bot.service.exits import EXIT_NO_EVIDENCE, EXIT_OK


def run(args: argparse.Namespace, lang: str) -> int:
    from bot.service.live_errors import live_guard
    from bot.service.triage import MEMORY_CHART, draw_charts, split_target, write_bundle
    from collectors.live import collect_live
    from collectors.parsers.bundle import has_evidence

    with live_guard(lang) as guard:
        opts, settings = live_options(args)
        namespace, name = split_target(args.target, args.namespace or settings.default_namespace)
        collection = collect_live(namespace, name, opts, datetime.now(UTC))
        out = write_bundle(args.out, collection)
        memory_png, _ = draw_charts(collection.evidence, lang)
        if memory_png:
            (out / MEMORY_CHART).write_bytes(memory_png)
        ev = collection.evidence
        files = sorted(p.name for p in out.iterdir())
        if args.json:
            import json

            from runbooks.model.serde import to_jsonable

            json.dump({"bundle": str(out), "files": files, "issues": to_jsonable(ev.issues)}, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            print(guard.cat.t("live.collected", path=str(out), files=", ".join(files)))
            for issue in ev.issues:
                from bot.render.wording import issue_text

                print("  - " + issue_text(guard.cat, issue))
        return EXIT_OK if has_evidence(ev) else EXIT_NO_EVIDENCE
    return guard.exit_code
