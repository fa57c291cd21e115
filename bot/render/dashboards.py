"""Rendering of `gpumem dashboards`: a text listing of each dashboard's rows and panels (what
each panel reads, the runbook's line on it, why a panel is empty for an engine), or Grafana's
dashboard JSON (`runbooks.alerts.dashboards.grafana`), in the chosen language.

The JSON's titles, descriptions and legends follow `--lang`; the uid, the variables' names and
every query stay the same in both languages, so a Chinese copy imported over an English one
replaces it rather than standing beside it. The ConfigMaps in deploy/components/dashboards are
the English JSON (`configmap_files`).
"""

from __future__ import annotations

import json
from typing import Any

from bot.render.i18n import Catalog
from bot.service.outcomes import DashboardsOutcome
from runbooks.alerts.dashboards import Dashboard, Panel, grafana

#: the ConfigMap label Grafana's dashboard sidecar looks for (kube-prometheus-stack's default)
SIDECAR_LABEL = ("grafana_dashboard", "1")


def _words(cat: Catalog):
    def words(key: str, **params: Any) -> str:
        return cat.t(key, params)

    return words


def dashboard_json(dashboard: Dashboard, lang: str) -> dict[str, Any]:
    """One dashboard as Grafana imports it."""
    return grafana(dashboard, _words(Catalog.load(lang)))


def dashboards_json(outcome: DashboardsOutcome, lang: str) -> dict[str, Any] | list[dict[str, Any]]:
    """`--json`: the dashboard itself when one engine was asked for (Grafana imports it as it
    is), else a list of them in the engines' order."""
    found = [dashboard_json(d, lang) for d in outcome.dashboards]
    return found[0] if len(found) == 1 else found


def json_text(document: Any) -> str:
    """JSON as written to stdout and to the deploy files: indented, UTF-8, one final newline."""
    return json.dumps(document, ensure_ascii=False, indent=2) + "\n"


def _line(panel: Panel, cat: Catalog) -> str:
    value = panel.line
    if panel.unit == "percentunit":
        return cat.t("dashboards.text.unit_percent", value=round(value * 100))
    if panel.unit == "s":
        return cat.t("dashboards.text.unit_seconds", value=value)
    return f"{value:g}"


def dashboards_text(outcome: DashboardsOutcome, lang: str) -> str:
    """The listing: per dashboard its title and uid, variables, then each row with its panels."""
    cat = Catalog.load(lang)
    words = _words(cat)
    blocks = []
    for d in outcome.dashboards:
        engine = cat.t(f"dashboards.engine.{d.engine}")
        lines = [cat.t("dashboards.text.header", title=words("dashboards.title", engine=engine), uid=d.uid),
                 cat.t("dashboards.text.variables",
                       names=cat.t("dashboards.text.sep").join(
                           cat.t(f"dashboards.variable.{v.label_key}") for v in d.variables))]
        for row in d.rows:
            lines.append(cat.t("dashboards.text.row", row=cat.t(f"dashboards.row.{row.id}")))
            for p in row.panels:
                title = cat.t(f"dashboards.panel.{p.id}.title")
                if p.missing:
                    lines.append(cat.t("dashboards.text.missing", title=title,
                                       reason=cat.t(f"rules_cli.missing.{p.missing}")))
                    continue
                metrics = cat.join(p.metrics())
                key = "dashboards.text.line" if p.line is not None else "dashboards.text.panel"
                lines.append(cat.t(key, title=title, metrics=metrics,
                                   line=_line(p, cat) if p.line is not None else None))
        lines.append(cat.t("dashboards.text.json_hint", engine=d.engine))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) + "\n"


def configmap_files(outcome: DashboardsOutcome) -> dict[str, str]:
    """File name -> content of deploy/components/dashboards' JSON files (English), one per
    engine, named as the ConfigMap's key Grafana's sidecar writes to disk."""
    return {f"{d.uid}.json": json_text(dashboard_json(d, "en")) for d in outcome.dashboards}
