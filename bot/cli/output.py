"""What every terminal verb prints a triage Report as: JSON or terminal text, on stdout."""

from __future__ import annotations

import sys

from runbooks.model.report import Report


def emit_report(report: Report, as_json: bool, lang: str) -> None:
    """Print a triage Report as JSON or as terminal text."""
    if as_json:
        import json

        from bot.render.report_json import report_json

        json.dump(report_json(report, lang), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        from bot.render.text import render_text

        sys.stdout.write(render_text(report, lang))
