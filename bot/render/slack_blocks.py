"""Block Kit building blocks that always fit Slack's limits, and the packing of long output.

Built with slack_sdk's block models: `to_dict()` checks each element's own limits (section text
3000, header 150, button text 75, ids 255, ...). The limits of a whole message (50 blocks,
about 12,000 characters of text) are kept by `paginate`, which splits blocks into several
messages; what still does not fit goes to a file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    ButtonElement,
    ConfirmObject,
    ContextBlock,
    DividerBlock,
    HeaderBlock,
    MarkdownTextObject,
    PlainTextObject,
    SectionBlock,
)

MAX_BLOCKS = 50
SECTION_CHARS = 3000
FIELD_CHARS = 2000
MAX_FIELDS = 10
HEADER_CHARS = 150
BUTTON_CHARS = 75
ID_CHARS = 255
VALUE_CHARS = 2000
CONTEXT_ELEMENTS = 10
#: text in one message's blocks, with headroom under Slack's ~12-13k `msg_blocks_too_long`
MESSAGE_CHARS = 10_000
#: the top-level `text` (notifications, screen readers): Slack cuts at 40k, keep it short
FALLBACK_CHARS = 2_900
ELLIPSIS = "…"

Block = dict[str, Any]
Message = dict[str, Any]


def clip(text: str, limit: int, more: str = ELLIPSIS) -> str:
    """`text` cut to `limit` characters, ending in `more` when cut.

    >>> clip("abcdef", 4)
    'abc…'
    """
    if len(text) <= limit:
        return text
    return text[: max(0, limit - len(more))].rstrip() + more


def esc(text: object) -> str:
    """Escape what Slack treats as markup in mrkdwn: & < >."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def code(text: object) -> str:
    """Inline code, with backticks inside replaced so they cannot close it."""
    return "`" + esc(text).replace("`", "ˋ") + "`"


def section(text: str) -> Block:
    """A mrkdwn section: the dict slack_sdk's `SectionBlock(...).to_dict()` gives, built here
    (the models' validation was a fifth of an ack's own CPU); an empty text still goes through
    slack_sdk, whose checks refuse it.

    >>> section("a *b*") == SectionBlock(text=MarkdownTextObject(text="a *b*")).to_dict()
    True
    """
    clipped = clip(text, SECTION_CHARS)
    if not clipped:
        return SectionBlock(text=MarkdownTextObject(text=clipped)).to_dict()
    return {"text": {"text": clipped, "type": "mrkdwn"}, "type": "section"}


def fields(pairs: Sequence[tuple[str, str]]) -> Block:
    """A two-column section: `*label*` over value, at most 10 fields."""
    items = [MarkdownTextObject(text=clip(f"*{esc(label)}*\n{value}", FIELD_CHARS)) for label, value in pairs]
    return SectionBlock(fields=items[:MAX_FIELDS]).to_dict()


def header(text: str) -> Block:
    return HeaderBlock(text=PlainTextObject(text=clip(text, HEADER_CHARS), emoji=True)).to_dict()


def context(*texts: str) -> Block:
    elements = [MarkdownTextObject(text=clip(t, SECTION_CHARS)) for t in texts if t][:CONTEXT_ELEMENTS]
    return ContextBlock(elements=elements).to_dict()


def divider() -> Block:
    return DividerBlock().to_dict()


#: a confirm dialog's title, text and button limits
CONFIRM_TITLE_CHARS = 100
CONFIRM_TEXT_CHARS = 300
CONFIRM_BUTTON_CHARS = 30


def confirm(title: str, text: str, yes: str, no: str, style: str | None = None) -> ConfirmObject:
    """A confirm dialog for a button (plain text; each part cut to Slack's limit)."""
    return ConfirmObject(title=clip(title, CONFIRM_TITLE_CHARS), text=PlainTextObject(text=clip(text, CONFIRM_TEXT_CHARS)),
                         confirm=clip(yes, CONFIRM_BUTTON_CHARS), deny=clip(no, CONFIRM_BUTTON_CHARS), style=style)


def button(text: str, action_id: str, value: str, style: str | None = None,
           confirm: ConfirmObject | None = None) -> ButtonElement:
    return ButtonElement(text=PlainTextObject(text=clip(text, BUTTON_CHARS), emoji=True),
                         action_id=clip(action_id, ID_CHARS, ""), value=clip(value, VALUE_CHARS, ""), style=style,
                         confirm=confirm)


def actions(block_id: str, *buttons: ButtonElement) -> Block:
    return ActionsBlock(block_id=clip(block_id, ID_CHARS, ""), elements=list(buttons)).to_dict()


def bullets(lines: Iterable[str], mark: str = "•") -> list[str]:
    return [f"{mark} {line}" for line in lines]


def text_sections(title: str | None, lines: Sequence[str], limit: int = SECTION_CHARS) -> list[Block]:
    """Lines packed into as few sections as fit; `title` (bold) on the first; a line too long is cut."""
    chunks: list[str] = []
    current = f"*{esc(title)}*" if title else ""
    for line in lines:
        line = clip(line, limit - 10)
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > limit:
            chunks.append(current)
            current = line
        else:
            current = candidate
    if current:
        chunks.append(current)
    return [section(c) for c in chunks]


def block_chars(block: Block) -> int:
    """Characters of text a block carries (what counts towards `msg_blocks_too_long`)."""
    total = 0
    stack: list[Any] = [block]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, value in item.items():
                if key == "text" and isinstance(value, str):
                    total += len(value)
                else:
                    stack.append(value)
        elif isinstance(item, list):
            stack.extend(item)
    return total


def paginate(blocks: Sequence[Block], max_blocks: int = MAX_BLOCKS,
             max_chars: int = MESSAGE_CHARS) -> list[list[Block]]:
    """Split blocks into messages of at most `max_blocks` blocks and `max_chars` characters."""
    pages: list[list[Block]] = []
    page: list[Block] = []
    chars = 0
    for block in blocks:
        size = block_chars(block)
        if page and (len(page) >= max_blocks or chars + size > max_chars):
            pages.append(page)
            page, chars = [], 0
        page.append(block)
        chars += size
    if page:
        pages.append(page)
    return pages


#: bold and code marks, and emoji codes (":x:", not the "12:30:45" of a time)
_MARKUP = re.compile(r"[*`]|(?<![\w:]):[a-z][a-z0-9_+-]*:(?![\w:])")


def plain(text: str) -> str:
    """mrkdwn without its emphasis marks and emoji codes, for the top-level `text`."""
    return _MARKUP.sub("", text).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").strip()


def message(text: str, blocks: Sequence[Block]) -> Message:
    """A message: `text` for notifications alongside the blocks (Slack wants both)."""
    return {"text": clip(plain(text), FALLBACK_CHARS), "blocks": list(blocks)}


def violations(blocks: Sequence[Block]) -> list[str]:
    """Message-level limits the block models do not check (used to assert in tests and logs)."""
    out = []
    if len(blocks) > MAX_BLOCKS:
        out.append(f"{len(blocks)} blocks > {MAX_BLOCKS}")
    chars = sum(block_chars(b) for b in blocks)
    if chars > MESSAGE_CHARS:
        out.append(f"{chars} characters > {MESSAGE_CHARS}")
    for b in blocks:
        for f in b.get("fields") or ():
            if len(f.get("text", "")) > FIELD_CHARS:
                out.append(f"field of {len(f['text'])} characters > {FIELD_CHARS}")
    return out
