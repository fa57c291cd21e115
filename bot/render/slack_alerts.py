"""Slack rendering of Alertmanager alerts: the head a triage's parent carries above its progress
and diagnosis, the thread reply for later alerts on the same target, and the note for alerts
that found no free triage.

>>> from datetime import UTC, datetime
>>> head = AlertHead("GpumemKVCacheHigh", "critical", "KV cache above 90% for 10m", "llm/vllm",
...                  datetime(2026, 3, 9, 21, 0, tzinfo=UTC))
>>> frame(head, "en", {"text": "gpumem triage · llm/vllm: starting", "blocks": []})["text"]
'Alert GpumemKVCacheHigh (critical) firing since 2026-03-09 21:00Z · gpumem triage · llm/vllm: starting'
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from bot.render import slack_blocks as B
from bot.render.i18n import Catalog
from bot.render.slack_blocks import Message

#: alerts named one by one in a thread reply; the rest are counted
LISTED_ALERTS = 10
_SEVERITY = {"critical": ":rotating_light:", "page": ":rotating_light:", "warning": ":warning:"}


@dataclass(frozen=True)
class AlertHead:
    """What the parent says of the alerts behind a triage."""

    alertname: str
    severity: str
    summary: str
    target: str
    starts_at: datetime
    count: int = 1
    cluster: str | None = None
    generator_url: str = ""
    #: set when every alert behind the triage has resolved
    resolved_at: datetime | None = None


def _z(at: datetime) -> str:
    return at.strftime("%Y-%m-%d %H:%M") + "Z"


def head_line(head: AlertHead, lang: str) -> str:
    cat = Catalog.load(lang)
    if head.resolved_at is not None:
        if head.count > 1:
            return cat.t("slack.alert.resolved_many", at=_z(head.resolved_at), count=head.count, target=head.target)
        return cat.t("slack.alert.resolved", at=_z(head.resolved_at), alertname=head.alertname or "?")
    params = {"alertname": head.alertname or "?", "severity": head.severity or "?", "since": _z(head.starts_at)}
    if head.count > 1:
        return cat.t("slack.alert.firing_many", count=head.count, target=head.target, **params)
    return cat.t("slack.alert.firing", **params)


def head_blocks(head: AlertHead, lang: str) -> list[dict[str, Any]]:
    """The blocks above the triage: the alert's line and summary, where it came from."""
    cat = Catalog.load(lang)
    emoji = ":white_check_mark:" if head.resolved_at else _SEVERITY.get(head.severity, ":bell:")
    summary = "\n".join("> " + line for line in B.esc(head.summary).splitlines()[:6] or [""])
    text = f"{emoji} *{B.esc(head_line(head, lang))}*\n{summary}"
    cluster = f" · {head.cluster}" if head.cluster else ""
    where = B.esc(cat.t("slack.alert.from", target=head.target, cluster=cluster))
    if head.generator_url.startswith(("http://", "https://")):
        where += f" · <{B.clip(head.generator_url, 1500).replace('>', '%3E').replace('|', '%7C')}|source>"
    return [B.section(B.clip(text, B.SECTION_CHARS)), B.context(B.clip(where, 2000))]


def frame(head: AlertHead, lang: str, msg: Message) -> Message:
    """`msg` (a triage's parent: starting, progress, diagnosis, failure) under the alert's head."""
    top = head_blocks(head, lang)
    blocks = list(msg.get("blocks") or [])
    room = B.MAX_BLOCKS - len(top)
    if len(blocks) > room:  # keep the last block (the diagnosis's buttons) when cutting
        blocks = blocks[: room - 1] + blocks[-1:]
    text = B.clip(f"{head_line(head, lang)} · {msg.get('text') or ''}", B.FALLBACK_CHARS)
    out = dict(msg)
    out.update(text=text, blocks=top + blocks)
    return out


def joined_message(lang: str, target: str, triaged_at: datetime, next_at: datetime,
                   alerts: Sequence[tuple[str, str, str]]) -> Message:
    """The thread reply for alerts on a target triaged within the interval: (status, name, summary) each."""
    cat = Catalog.load(lang)
    title = cat.t("slack.alert.joined", count=len(alerts), target=target, at=_z(triaged_at), next=_z(next_at))
    lines = [f"{':white_check_mark:' if status == 'resolved' else ':small_red_triangle:'} *{B.esc(name or '?')}*"
             f" {B.esc(B.clip(summary, 300))}" for status, name, summary in alerts[:LISTED_ALERTS]]
    if len(alerts) > LISTED_ALERTS:
        lines.append(B.esc(cat.t("slack.alert.more", count=len(alerts) - LISTED_ALERTS)))
    blocks = B.text_sections(f":bell: {B.esc(title)}", lines)[: B.MAX_BLOCKS]
    return B.message(B.clip(title, B.FALLBACK_CHARS), blocks)


def resolved_reply(lang: str, at: datetime, alertname: str, target: str) -> Message:
    """A thread reply saying an alert resolved (when its parent cannot be edited)."""
    text = Catalog.load(lang).t("slack.alert.joined_resolved", at=_z(at), alertname=alertname or "?", target=target)
    return B.message(B.clip(text, B.FALLBACK_CHARS), [B.section(":white_check_mark: " + B.esc(text))])


def busy_message(lang: str, count: int, limit: int, targets: Sequence[str]) -> Message:
    """One note per channel and notification for the alerts that found no free triage."""
    cat = Catalog.load(lang)
    shown = cat.join(targets[:LISTED_ALERTS]) + (f" (+{len(targets) - LISTED_ALERTS})"
                                                  if len(targets) > LISTED_ALERTS else "")
    text = cat.t("slack.alert.busy", count=count, limit=limit, targets=shown or "-")
    return B.message(B.clip(text, B.FALLBACK_CHARS), [B.section(":hourglass: " + B.esc(B.clip(text, 2900)))])
