"""Terminal rendering of a Report: the verdict first, then the numbers, then what to do."""

from __future__ import annotations

from bot.render.templating import environment
from bot.render.view import view
from runbooks.model.report import Report


def render_text(report: Report, lang: str = "en") -> str:
    return environment().get_template("triage.txt.j2").render(**view(report, lang).as_template_vars())
