"""`/gpumem fleet` in Slack: the ranked services with the reason for each, and Triage buttons.

The message: a title with the scope, a context line (time, window, who asked), what was not
read, one line per service (its rank, target, engines, the reading that places it there
against its line, and the other readings at or past their line), and an actions block with a
"Triage" button for each of the first TRIAGE_BUTTONS services. A button's value is the one the
diagnosis' "Run again" button carries (`{"target": ..., "context": null}`), so one listener
starts either triage. The headroom chart (`bot.render.chart_fleet`) goes into the thread.
"""

from __future__ import annotations

import json
import re
from typing import Any

from bot.render import slack_blocks as B
from bot.render.fleet import ENGINE_NAMES, kind_word, value_text
from bot.render.i18n import Catalog
from bot.render.slack_blocks import esc
from bot.service.outcomes import FleetOutcome
from runbooks.alerts.fleet import Ranked

#: services listed in the message (the rest: `gpumem fleet` in a terminal)
SHOWN_ROWS = 10
#: services that get a Triage button
TRIAGE_BUTTONS = 5
#: the buttons' action ids: TRIAGE_ACTION_PREFIX + rank (unique within a message, as Slack requires)
TRIAGE_ACTION_PREFIX = "gpumem_fleet_triage_"
TRIAGE_ACTION = re.compile(rf"^{TRIAGE_ACTION_PREFIX}[0-9]+$")
Message = dict[str, Any]


def scope_text(cat: Catalog, namespaces: tuple[str, ...]) -> str:
    return cat.join(namespaces) if namespaces else cat.t("slack.fleet.scope_all")


def _why(cat: Catalog, row: Ranked) -> str:
    top = row.reading(row.top) if row.top else None
    if top is None:
        return cat.t("fleet_cli.nothing_read_for_row")
    text = cat.t("fleet_cli.why", column=cat.t(f"fleet_cli.column.{top.column}"), value=value_text(top.column, top.value),
                 line=value_text(top.column, top.line), pct=round(top.closeness * 100))
    others = [f"{cat.t(f'fleet_cli.column.{r.column}')} {value_text(r.column, r.value)}"
              for r in row.readings if r.at_line and r.column != top.column]
    if others:
        text += " · " + cat.t("slack.fleet.also_at_line", readings=", ".join(others))
    return text


def _row_line(cat: Catalog, row: Ranked) -> str:
    mark = ":red_circle:" if row.at_line else (":large_orange_circle:" if row.score >= 0.8 else ":white_circle:")
    engines = "+".join(ENGINE_NAMES.get(e, e) for e in row.engines) or cat.t("slack.fleet.no_engine")
    return f"{mark} *{row.rank}. {esc(row.target)}* ({esc(engines)}) · {esc(_why(cat, row))}"


def triage_value(row: Ranked) -> str:
    return json.dumps({"target": row.target, "context": None}, separators=(",", ":"))


def fleet_message(outcome: FleetOutcome, lang: str, user: str | None = None) -> Message:
    """The channel message for a fleet view (at most ~8 blocks, whatever the fleet's size)."""
    cat = Catalog.load(lang)
    scope = scope_text(cat, outcome.namespaces)
    shown = outcome.rows[:SHOWN_ROWS]
    title = cat.t("slack.fleet.title", scope=scope, shown=len(shown), total=outcome.total)
    at_line = sum(1 for r in outcome.rows if r.at_line)
    blocks: list[dict[str, Any]] = [B.section(f":bar_chart: *{esc(title)}*")]
    bits = [cat.t("slack.fleet.context", at=outcome.at.strftime("%Y-%m-%d %H:%M UTC"),
                  minutes=outcome.window_s // 60, at_line=at_line)]
    if user:
        bits.append(cat.t("slack.progress.asked_by", user=f"<@{user}>"))
    blocks.append(B.context(" · ".join(bits)))
    for m in outcome.missing:
        columns = cat.join(cat.t(f"fleet_cli.column.{c}") for c in m.columns)
        blocks.append(B.context(":warning: " + esc(cat.t("slack.fleet.not_read", columns=columns,
                                                          kind=kind_word(cat, m.kind)))))
    if not shown:
        key = "fleet_cli.nothing_read" if outcome.nothing_read else "slack.fleet.none"
        blocks.append(B.section(esc(cat.t(key, scope=scope))))
        return B.message(title, blocks)
    blocks += B.text_sections(None, [_row_line(cat, r) for r in shown])
    buttons = [B.button(cat.t("slack.fleet.triage", rank=r.rank, target=r.target), f"{TRIAGE_ACTION_PREFIX}{r.rank}",
                        triage_value(r), style="primary" if r.at_line else None)
               for r in shown[:TRIAGE_BUTTONS]]
    blocks.append(B.actions("gpumem_fleet", *buttons))
    notes = [cat.t("slack.fleet.rule")]
    if outcome.total > len(shown):
        notes.append(cat.t("slack.fleet.more", count=outcome.total - len(shown)))
    notes.append(":thread: " + cat.t("slack.fleet.chart_note"))
    blocks.append(B.context(*(esc(n) if not n.startswith(":thread:") else n for n in notes)))
    top = shown[0]
    fallback = f"{title} · 1. {top.target}: {_why(cat, top)}"
    return B.message(B.clip(fallback, B.FALLBACK_CHARS), blocks)


def chart_title(outcome: FleetOutcome, lang: str) -> str:
    cat = Catalog.load(lang)
    return cat.t("slack.chart.fleet_title", scope=scope_text(cat, outcome.namespaces),
                 at=outcome.at.strftime("%Y-%m-%d %H:%M UTC"))
