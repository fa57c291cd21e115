"""Slack Block Kit for the shift's notes and its handover (`/gpumem note`, `notes`, `handover`).

>>> note_list_message("en", [])["text"]
'No notes for what was asked.'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.render import slack_blocks as B
from bot.render.i18n import Catalog
from bot.store.notes import Note

Message = dict[str, Any]

#: a listing in one ephemeral reply shows at most this many notes (the newest)
MAX_LISTED_NOTES = 40


def _hm(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at is not None else "?"


def note_line(n: Note) -> str:
    who = f"<@{n.author}>" if n.author and n.author[:1] in "UW" and n.author.isalnum() else B.esc(n.author)
    target = f" `{B.esc(n.target)}`" if n.target else ""
    return f"{_hm(n.at)} {who}{target}: {B.esc(n.text)}"


def note_saved_message(lang: str, note: Note) -> Message:
    """The ephemeral answer to `/gpumem note`: what was recorded."""
    cat = Catalog.load(lang)
    title = cat.t("handover.note_saved", id=note.id, at=_hm(note.at))
    quoted = "\n".join("> " + line for line in B.esc(note.text).splitlines() or [""])
    target = f"`{B.esc(note.target)}`\n" if note.target else ""
    blocks = [B.section(B.clip(f":memo: {B.esc(title)}\n{target}{quoted}", B.SECTION_CHARS))]
    return B.message(B.clip(f"{title} {note.text}", B.FALLBACK_CHARS), blocks)


def note_list_message(lang: str, notes: Sequence[Note]) -> Message:
    """The ephemeral answer to `/gpumem notes`: the channel's notes, oldest first (the newest
    `MAX_LISTED_NOTES` when there are more), within Block Kit's limits."""
    cat = Catalog.load(lang)
    if not notes:
        text = cat.t("handover.notes_empty")
        return B.message(text, [B.section(B.esc(text))])
    title = cat.t("handover.notes_title", count=len(notes))
    lines: list[str] = []
    budget = B.MESSAGE_CHARS - 1000
    for n in reversed(list(notes)[-MAX_LISTED_NOTES:]):  # the newest that fit
        line = B.clip(note_line(n), B.SECTION_CHARS - 20)
        if lines and budget - len(line) < 0:
            break
        budget -= len(line) + 1
        lines.append(line)
    lines.reverse()
    blocks = B.text_sections(title, lines)
    if len(lines) < len(notes):
        blocks.append(B.context(B.esc(cat.t("slack.handover.notes_more", shown=len(lines), total=len(notes)))))
    return B.message(B.clip(title, B.FALLBACK_CHARS), blocks)
