"""What every terminal verb prints a triage Report as: JSON or terminal text, on stdout."""

from __future__ import annotations

import json
import sys

from bot.render.report_json import report_json
from runbooks.model.report import Report


def emit_report(report: Report, as_json: bool, lang: str) -> None:
    """Print a triage Report as JSON or as terminal text."""
    if as_json:
        json.dump(report_json(report, lang), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        # lazy: the terminal text's templates (~15 ms with -X importtime) that a --json report,
        # the scripted and the measured path, does not pay
        from bot.render.text import render_text

        sys.stdout.write(render_text(report, lang))
