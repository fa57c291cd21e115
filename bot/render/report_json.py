"""JSON rendering of a Report. Keys are stable (documented in the README): add, never rename."""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from runbooks.model.report import Report
from runbooks.model.serde import to_jsonable


def report_json(report: Report, lang: str = "en") -> dict[str, Any]:
    """The report as plain JSON data; `lang` only changes the human-readable `title` fields."""
    cat = Catalog.load(lang)
    doc = to_jsonable(report)
    doc["lang"] = lang
    doc["verdict"]["title"] = cat.t(f"verdict.{report.verdict.primary}")
    for cause in doc["verdict"]["causes"]:
        cause["title"] = cat.t(f"verdict.{cause['id']}")
    doc["findings"] = [
        {**to_jsonable(f), "check": c.check, "title": cat.t(f"finding.{f.id}")}
        for c in report.checks for f in c.findings
    ]
    doc["not_checked"] = to_jsonable(report.not_checked)
    return doc
