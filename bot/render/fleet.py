"""Rendering of `gpumem fleet`: the services closest to trouble first, as a table or JSON.

Each cell is a reading against the runbook's line (`runbooks.alerts.fleet.LINES`): `!` marks a
reading at or past its line, `unread` (`未读`) a column whose query gave no answer (named above the table),
`-` a column the service's engine does not export or that had no series. Each row ends with
the `gpumem triage` command to run next. Wording is the catalogs' `fleet_cli.*`.
"""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from bot.render.terminal import cells
from bot.render.wording import reason_json
from bot.service.outcomes import FleetOutcome
from runbooks.alerts.fleet import COLUMNS, LINES, UNITS, Ranked, Reading

SCHEMA_VERSION = 1
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "tgi": "TGI"}


def value_text(column: str, value: float) -> str:
    """A reading as the table shows it.

    >>> value_text("kv_now", 0.964), value_text("queue", 20.0), value_text("ttft_p99", 2.455), value_text("long_jump", 0.29)
    ('96%', '20', '2.46s', '+29pt')
    """
    unit = UNITS[column]
    if column == "long_jump":
        return f"{round(value * 100):+d}pt"
    if unit == "ratio":
        return f"{round(value * 100)}%"
    if unit == "seconds":
        return f"{value:.2f}s"
    return f"{round(value)}"


def _cell(cat: Catalog, row: Ranked, column: str, not_read: tuple[str, ...]) -> str:
    if column in not_read:
        return cat.t("fleet_cli.cell_not_read")
    r = row.reading(column)
    if r is None:
        return "-"
    return value_text(column, r.value) + ("!" if r.at_line else "")


def _engines(row: Ranked) -> str:
    return "+".join(ENGINE_NAMES.get(e, e) for e in row.engines) or "-"


def _why(cat: Catalog, r: Reading | None) -> str:
    if r is None:
        return cat.t("fleet_cli.nothing_read_for_row")
    return cat.t("fleet_cli.why", column=cat.t(f"fleet_cli.column.{r.column}"), value=value_text(r.column, r.value),
                 line=value_text(r.column, r.line), pct=round(r.closeness * 100))


def fleet_text(outcome: FleetOutcome, lang: str) -> str:
    """The terminal view: a header, what was not read, the table, one line per service."""
    cat = Catalog.load(lang)
    at = outcome.at.strftime("%Y-%m-%d %H:%M:%SZ")
    lines = [cat.t("fleet_cli.header", shown=len(outcome.rows), total=outcome.total, at=at,
                   minutes=outcome.window_s // 60)]
    lines.append(cat.t("fleet_cli.lines", lines=cat.join(
        f"{cat.t(f'fleet_cli.column.{c}')} {value_text(c, LINES[c])}" for c in COLUMNS if c != "kv_max")))
    lines.append(cat.t("fleet_cli.rule"))
    lines.append(read_from_text(outcome, cat))
    for m in outcome.missing:
        cols = cat.join(cat.t(f"fleet_cli.column.{c}") for c in m.columns)
        lines.append(cat.t("fleet_cli.not_read", columns=cols, query=m.query, kind=kind_word(cat, m.kind),
                           message=m.message))
    if not outcome.rows:
        lines.append(cat.t("fleet_cli.nothing_read" if outcome.nothing_read else "fleet_cli.no_services"))
        return "\n".join(lines) + "\n"
    not_read = outcome.not_read
    head = ["#", cat.t("fleet_cli.service"), cat.t("fleet_cli.engine"), cat.t("fleet_cli.score"),
            *(cat.t(f"fleet_cli.short.{c}") for c in COLUMNS), cat.t("fleet_cli.next")]
    table = [head]
    for row in outcome.rows:
        table.append([str(row.rank), row.target, _engines(row), f"{round(row.score * 100)}%",
                      *(_cell(cat, row, c, not_read) for c in COLUMNS), row.command])
    widths = [max(cells(r[i]) for r in table) for i in range(len(head))]
    lines.append("")
    for r in table:
        lines.append("  ".join(cell + " " * (w - cells(cell)) for cell, w in zip(r, widths, strict=True)).rstrip())
    lines.append("")
    for row in outcome.rows:
        lines.append(cat.t("fleet_cli.row", rank=row.rank, target=row.target,
                           why=_why(cat, row.reading(row.top) if row.top else None), command=row.command))
    lines.append(cat.t("fleet_cli.legend"))
    return "\n".join(lines) + "\n"


def read_from_text(outcome: FleetOutcome, cat: Catalog) -> str:
    """Where the readings came from: the recording rules, or the raw series and why."""
    reason = outcome.read_from_reason if outcome.read_from == "raw" else "loaded"
    kind, message = outcome.rules_issue or ("", "")
    return cat.t(f"fleet_cli.read_from.{reason}", count=outcome.missing_records, minutes=outcome.window_s // 60,
                 kind=kind_word(cat, kind) if kind else "", message=message)


def kind_word(cat: Catalog, kind: str) -> str:
    """What became of a query (`collectors.prometheus.client.ERROR_KINDS`) in words: "timed out", "超时"."""
    return cat.t_or(f"issue.{kind}", kind)


def fleet_json(outcome: FleetOutcome, lang: str) -> dict[str, Any]:
    """`gpumem fleet --json`: stable keys, see README ("Fleet view")."""
    not_read = outcome.not_read
    return {
        "schema_version": SCHEMA_VERSION,
        "lang": lang,
        "at": outcome.at.isoformat().replace("+00:00", "Z"),
        "window_s": outcome.window_s,
        "namespaces": list(outcome.namespaces),
        "engines": list(outcome.engines),
        "services_total": outcome.total,
        "lines": {c: LINES[c] for c in COLUMNS},
        "not_read": [{"query": m.query, "columns": list(m.columns), "kind": m.kind, **reason_json(m.message)}
                     for m in outcome.missing],
        "queries": dict(outcome.queries),
        "read_from": outcome.read_from,
        "read_from_reason": outcome.read_from_reason,
        "services": [{
            "rank": row.rank,
            "namespace": row.namespace,
            "deployment": row.deployment,
            "engines": list(row.engines),
            "score": row.score,
            "at_line": row.at_line,
            "top": row.top,
            "command": row.command,
            "readings": {r.column: {"value": r.value, "line": r.line, "closeness": r.closeness}
                         for r in row.readings},
            "not_exported": list(row.not_exported),
            "not_read": list(not_read),
        } for row in outcome.rows],
    }
