"""Slack rendering of a triage: the parent message (progress, then the diagnosis) and its thread.

The parent reads on a phone at 3 a.m.: verdict and confidence first, the key numbers, the flags
at the edge, the next actions; short lines and one status emoji. The detail (why, every
action's risk and rollback, the numbers, the findings, what was not checked and why, what
could not be read) goes to the thread, split into as many messages as Slack's limits need,
and past `MAX_THREAD_MESSAGES` into a text file. Wording comes from the catalogs through the
same view the terminal renderer uses (`bot.render.view.view`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from bot.render import slack_blocks as B
from bot.render.i18n import Catalog
from bot.render.slack_blocks import Block, Message, esc
from bot.render.view import ReportView, view
from bot.render.wording import cause_title, engine_catalog, pct
from runbooks.model.report import Report

RERUN_ACTION = "gpumem_rerun"
#: thread messages before the rest goes to a file
MAX_THREAD_MESSAGES = 6
#: next actions shown in the parent; the thread has them all
PARENT_ACTIONS = 4
_SEVERITY = {"critical": ":red_circle:", "warning": ":large_orange_circle:", "info": ":white_circle:"}
_BAR_CELLS = 8


def t(cat: Catalog, key: str, raw: dict[str, str] | None = None, **params: Any) -> str:
    """Catalog wording escaped for mrkdwn; `raw` values (mentions, code) go in unescaped."""
    marks = {name: f"\x00{name}\x00" for name in (raw or {})}
    text = esc(cat.t(key, params, **marks))
    for name, value in (raw or {}).items():
        text = text.replace(f"\x00{name}\x00", value)
    return text


def status_emoji(primary: str, priority: str) -> str:
    if primary == "healthy":
        return ":white_check_mark:"
    if primary == "insufficient_evidence":
        return ":grey_question:"
    return ":red_circle:" if priority in ("highest", "high") else ":large_orange_circle:"


def step_name(cat: Catalog, step: str) -> str:
    return cat.t_or(f"slack.step.{step}", step.replace("_", " "))


def _asked_by(cat: Catalog, user: str | None) -> str:
    return t(cat, "slack.progress.asked_by", raw={"user": f"<@{user}>"}) if user else ""


# ----------------------------------------------------------------------------- parent: progress


def work_title(cat: Catalog, verb: str, target: str | None) -> str:
    return t(cat, f"slack.title.{verb}", target=target or "")


def _status(cat: Catalog, verb: str, target: str | None, emoji: str, line: str, user: str | None) -> Message:
    title = work_title(cat, verb, target)
    blocks = [B.section(f"{emoji} *{title}*\n{line}")]
    if user:
        blocks.append(B.context(_asked_by(cat, user)))
    return B.message(cat.t("slack.title_line", title=title, line=line), blocks)


def progress_message(lang: str, verb: str, target: str | None, step_no: int, total: int, step: str,
                     user: str | None = None) -> Message:
    """The parent while the work runs: `▰▰▰▱▱▱▱▱ 3/7 · KV cache`."""
    cat = Catalog.load(lang)
    filled = round(_BAR_CELLS * step_no / total) if total else 0
    bar = "▰" * filled + "▱" * (_BAR_CELLS - filled)
    line = t(cat, "slack.progress.running", step_no=step_no, total=total, step=step_name(cat, step))
    return _status(cat, verb, target, ":hourglass_flowing_sand:", f"{bar} {line}", user)


def starting_message(lang: str, verb: str, target: str | None, user: str | None = None) -> Message:
    cat = Catalog.load(lang)
    return _status(cat, verb, target, ":hourglass_flowing_sand:", esc(step_name(cat, "starting")), user)


def queued_message(lang: str, verb: str, target: str | None, ahead: int, user: str | None = None) -> Message:
    """The parent while the job waits for a worker: "queued, 3 ahead"."""
    cat = Catalog.load(lang)
    line = t(cat, "slack.progress.queued", ahead=ahead) if ahead else t(cat, "slack.progress.queued_next")
    return _status(cat, verb, target, ":inbox_tray:", line, user)


def failed_message(lang: str, verb: str, target: str | None, key: str, user: str | None = None,
                   **params: Any) -> Message:
    """The parent when the work did not finish: `key` is `slack.status.<key>`."""
    cat = Catalog.load(lang)
    line = t(cat, f"slack.status.{key}", target=target or "", **params)
    return _status(cat, verb, target, ":x:", line, user)


# ----------------------------------------------------------------------------- parent: diagnosis


def key_numbers(cat: Catalog, report: Report) -> list[tuple[str, str]]:
    """(label, value) pairs: static vs dynamic GiB, memory in use, KV usage, L+XL share and shift."""
    out: list[tuple[str, str]] = []
    mem = report.memory
    if mem is not None:
        if mem.static_gib is not None:
            out.append((cat.t("slack.num.static_label"),
                        t(cat, "slack.num.static", static_gib=mem.static_gib, weights_gib=mem.weights_gib)))
            out.append((cat.t("slack.num.dynamic_label"), t(cat, "slack.num.dynamic", dynamic_gib=mem.dynamic_gib)))
        if mem.gpu_used_gib is not None:
            share = pct(mem.gpu_used_gib / mem.gpu_total_gib) if mem.gpu_total_gib else None
            out.append((cat.t("slack.num.used_label"),
                        t(cat, "slack.num.used", used_gib=round(mem.gpu_used_gib, 1),
                          total_gib=round(mem.gpu_total_gib, 1) if mem.gpu_total_gib else None, pct=share)))
        if mem.kv_cache_usage_ratio is not None:
            out.append((cat.t("slack.num.kv_label"), t(cat, "slack.num.kv", pct=pct(mem.kv_cache_usage_ratio))))
    p = report.profile
    if p is not None and p.total:
        share = pct(p.share("L", "XL"))
        if p.shift is not None:
            value = t(cat, "slack.num.long_shift", share=share, before=pct(p.shift.long_share_before),
                      after=pct(p.shift.long_share_after))
        else:
            value = t(cat, "slack.num.long", share=share)
        out.append((cat.t("slack.num.long_label"), value))
    return out


def _confidence_line(cat: Catalog, v: ReportView) -> str:
    parts = []
    top = v.primary_cause
    if top is not None:
        parts.append(t(cat, "slack.diag.confidence", label=top.label, value=f"{top.confidence:.2f}"))
    parts.append(t(cat, "slack.diag.priority", priority=v.priority))
    return " · ".join(parts)


def _service_line(cat: Catalog, v: ReportView, user: str | None, elapsed_s: float | None) -> str:
    bits = [esc(x) for x in (v.target, v.service, *v.managed) if x] + [t(cat, "slack.diag.coverage", pct=v.coverage)]
    if user:
        bits.append(_asked_by(cat, user))
    if elapsed_s is not None:
        bits.append(t(cat, "slack.diag.elapsed", seconds=round(elapsed_s, 1)))
    return " · ".join(bits)


def diagnosis_message(report: Report, lang: str, target: str | None = None, context: str | None = None,
                      user: str | None = None, elapsed_s: float | None = None,
                      plan_blocks: Sequence[Block] = ()) -> Message:
    """The parent once the verdict is in. At most ~10 blocks whatever the report holds (and the
    "Plan" buttons, `bot.render.slack_remediation.plan_buttons`, above "Run again")."""
    cat = engine_catalog(lang, report.engine)
    v = view(report, lang)
    target = target or v.target
    emoji = status_emoji(report.verdict.primary, report.verdict.priority)
    headline = f"{emoji} *{esc(v.primary_title)}*\n{_confidence_line(cat, v)}"
    blocks: list[Block] = [B.section(headline), B.context(_service_line(cat, v, user, elapsed_s))]
    # the decision first: what to do (or capture), then the numbers it rests on
    if v.capture:
        # not enough evidence: what to capture is the action (its command as code, to copy)
        lines = [t(cat, f"fact.{f.key}", raw={"command": B.code(str(f.params.get("command", "")))},
                   **{k: val for k, val in f.params.items() if k != "command"})
                 for f in report.verdict.capture_next]
        blocks += B.text_sections(cat.t("section.capture_next"), [f"{i}. {x}" for i, x in enumerate(lines, 1)])
    if v.actions:
        shown = v.actions[:PARENT_ACTIONS]
        lines = [f"{i}. {esc(a.title)} _({esc(a.tier)})_" for i, a in enumerate(shown, 1)]
        if len(v.actions) > PARENT_ACTIONS:
            lines.append(t(cat, "slack.diag.more_actions", count=len(v.actions) - PARENT_ACTIONS))
        blocks += B.text_sections(cat.t("section.actions"), lines)
    numbers = key_numbers(cat, report)
    if numbers:
        blocks.append(B.fields(numbers))
    if report.flags_at_edge:
        lines = [t(cat, "slack.num.flag", raw={"flag": B.code(f"--{e.flag}={e.value}"),
                                                "safe": B.code(e.safe_value or "?")})
                 for e in report.flags_at_edge]
        blocks += B.text_sections(cat.t("section.flags"), B.bullets(lines))
    others = [t(cat, "slack.diag.cause", cause=cause_title(cat, c.id, report.verdict.kubernetes, "slack.cause_short"), label=c.label,
                value=f"{c.confidence:.2f}") for c in v.other_causes[:4]]
    notes = [t(cat, "slack.diag.also", causes=" · ".join(others))] if others else []
    notes.append(":thread: " + t(cat, "slack.diag.thread_note"))
    blocks.append(B.context(*notes))
    blocks += plan_blocks
    value = json.dumps({"target": target, "context": context}, separators=(",", ":"))
    blocks.append(B.actions("gpumem_diagnosis", B.button(cat.t("slack.diag.rerun"), RERUN_ACTION, value)))
    fallback = f"{emoji} {v.primary_title} · {target}"
    return B.message(fallback, blocks)


# ----------------------------------------------------------------------------- thread


@dataclass(frozen=True)
class ThreadDetail:
    """The thread replies, and whether some detail only fits in the full report file."""

    messages: tuple[Message, ...]
    overflow: bool


def _why_blocks(cat: Catalog, v: ReportView) -> list[Block]:
    top = v.primary_cause
    blocks: list[Block] = []
    if v.health:
        blocks += B.text_sections(cat.t("section.healthy_because"), B.bullets(map(esc, v.health)))
    if top is not None:
        blocks += B.text_sections(f"{cat.t('section.why')} · {top.title}", B.bullets(map(esc, top.evidence)))
        if top.against:
            blocks += B.text_sections(cat.t("section.against"), B.bullets(map(esc, top.against)))
        if top.rule_out:
            blocks += B.text_sections(cat.t("section.rule_out"), B.bullets(map(esc, top.rule_out)))
    for c in v.other_causes:
        title = cat.t("slack.other_cause_title", section=cat.t("section.other_causes"), title=c.title,
                      confidence=cat.t("confidence_words", label=c.label))
        blocks += B.text_sections(title, B.bullets(map(esc, c.evidence[:4])))
    if v.misjudgements:
        blocks += B.text_sections(cat.t("section.misjudgements"), B.bullets(map(esc, v.misjudgements)))
    return blocks


def _action_blocks(cat: Catalog, v: ReportView) -> list[Block]:
    lines = []
    for i, a in enumerate(v.actions, 1):
        lines.append(f"*{i}. {esc(a.title)}* _({esc(a.tier)})_\n"
                     f"      {esc(cat.t('section.risk'))}: {esc(a.risk)}\n"
                     f"      {esc(cat.t('section.rollback'))}: {esc(a.rollback)}")
    return B.text_sections(cat.t("section.actions"), lines) if lines else []


def _number_blocks(cat: Catalog, v: ReportView) -> list[Block]:
    blocks: list[Block] = []
    for key, name in (("memory", "section.memory"), ("budget", "section.budget"), ("profile", "section.profile"),
                      ("flags", "section.flags")):
        if getattr(v, key):
            blocks += B.text_sections(cat.t(name), B.bullets(map(esc, getattr(v, key))))
    return blocks


def _finding_blocks(cat: Catalog, v: ReportView) -> list[Block]:
    lines = []
    for c in v.checks:
        lines.append(f"*{esc(c.title)}*")
        for f in c.findings:
            see = f" _{esc(cat.t('section.see_why').strip())}_" if f.in_why and not f.facts else ""
            lines.append(f"{_SEVERITY.get(f.severity, '•')} {esc(f.title)}{see}")
            lines += [f"      {esc(x)}" for x in f.facts]
        if not c.findings:
            lines.append("      " + esc(cat.t("section.nothing_found" if c.checked else "section.not_run")))
    return B.text_sections(cat.t("section.findings"), lines)


def _gaps_blocks(cat: Catalog, v: ReportView) -> list[Block]:
    not_checked = B.bullets(map(esc, v.not_checked)) or [esc(cat.t("section.none"))]
    blocks = B.text_sections(cat.t("section.not_checked"), not_checked)
    if v.could_not_read:
        blocks += B.text_sections(cat.t("section.could_not_read"), B.bullets(map(esc, v.could_not_read)))
    if v.sources:
        blocks.append(B.context(esc(cat.t("section.sources", sources=v.sources))))
    return blocks


def thread_detail(report: Report, lang: str) -> ThreadDetail:
    """The thread replies under the diagnosis: actions (each with its risk and rollback), why,
    numbers, findings (less what "Why" shows), gaps."""
    cat = engine_catalog(lang, report.engine)
    v = view(report, lang)
    groups = [_action_blocks(cat, v), _why_blocks(cat, v), _number_blocks(cat, v), _finding_blocks(cat, v),
              _gaps_blocks(cat, v)]
    blocks: list[Block] = []
    for group in groups:
        if group:
            if blocks:
                blocks.append(B.divider())
            blocks += group
    pages = B.paginate(blocks)
    overflow = len(pages) > MAX_THREAD_MESSAGES
    if overflow:
        pages = pages[: MAX_THREAD_MESSAGES - 1]
        pages.append([B.section(t(cat, "slack.thread.overflow"))])
    title = cat.t("section.title", target=v.target)
    messages = tuple(B.message(cat.t("slack.page_title", title=title, page=i, pages=len(pages)), page) for i, page in enumerate(pages, 1))
    return ThreadDetail(messages, overflow)
