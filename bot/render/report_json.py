"""JSON rendering of a Report. Keys are stable (documented in the README): add, never rename."""

from __future__ import annotations

from typing import Any

from bot.render.assumptions import assumed_line, assumption_reasons
from bot.render.i18n import Catalog
from bot.render.managers import managers_json
from bot.render.wording import cause_title, engine_catalog, issues_json
from runbooks.model.report import Report
from runbooks.model.serde import to_jsonable


def report_json(report: Report, lang: str = "en") -> dict[str, Any]:
    """The report as plain JSON data; `lang` only changes the human-readable `title` fields."""
    cat = engine_catalog(lang, report.engine)
    doc = to_jsonable(report)
    doc["lang"] = lang
    k8s = report.verdict.kubernetes
    doc["verdict"]["title"] = cause_title(cat, report.verdict.primary, k8s)
    for cause in doc["verdict"]["causes"]:
        cause["title"] = cause_title(cat, cause["id"], k8s)
    doc["findings"] = [
        {**to_jsonable(f), "check": c.check, "title": cat.t(f"finding.{f.id}")}
        for c in report.checks for f in c.findings
    ]
    doc["not_checked"] = to_jsonable(report.not_checked)
    doc["read_issues"] = issues_json(report.read_issues)  # each reason in English, and as its phrase
    if report.budget is not None:  # each default assumed as [name, "value (why)"] in English, and its reason id
        en = Catalog.load("en")
        doc["budget"]["assumptions"] = [[name, assumed_line(en, name, a, with_name=False)]
                                        for name, a in report.budget.assumptions]
        doc["budget"]["assumption_reasons"] = assumption_reasons(report.budget)
    if report.managers is not None:  # who manages the workload, each with its line and a patch's fate
        doc["managers"] = managers_json(cat, [m.to_json() for m in report.managers])
    return doc
