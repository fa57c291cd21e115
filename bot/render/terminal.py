"""Text bound for a terminal, made inert: control characters from evidence are shown, not obeyed.

A metrics file or a log line can carry ESC sequences that retitle, clear or repaint the
reader's terminal, C1 controls (U+0080-U+009F, CSI among them) that some terminals also obey,
and bidirectional overrides that make text read differently from what it is. Each becomes a
visible `\\uXXXX` escape, which is also a valid escape inside a JSON string, so the same filter
serves text and JSON output. Newlines and tabs stay.

>>> inert("ok\\x1b]0;pwned\\x07 \\u202eevil\\ttab\\n")
'ok\\\\u001b]0;pwned\\\\u0007 \\\\u202eevil\\ttab\\n'
"""

from __future__ import annotations

import re
import unicodedata
from typing import TextIO

_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def inert(text: str) -> str:
    """`text` with every control character but newline and tab replaced by its `\\uXXXX` escape."""
    return _CONTROLS.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


class InertStream:
    """A text stream that writes `inert(text)` to the stream it wraps."""

    def __init__(self, stream: TextIO):
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(inert(text))
        return len(text)

    def flush(self) -> None:
        self._stream.flush()

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


#: back to the start of the line and clear it: the only control sequence gpumem writes itself
#: (the watch's line that updates in place, on a terminal)
CLEAR_LINE = "\r\x1b[K"


def rewrite_line(stream: TextIO, text: str) -> None:
    """Replace the terminal's current line with `text`, made inert: through an InertStream the
    carriage return and clear-line go to the terminal as they are, and nothing else does."""
    raw = stream._stream if isinstance(stream, InertStream) else stream
    raw.write(CLEAR_LINE + inert(text))
    raw.flush()


def cells(text: str) -> int:
    """Terminal cells `text` takes: a wide character (CJK, full-width punctuation) two, any other one.

    >>> cells("KV 已回滚")
    9
    """
    return sum(2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1 for ch in text)


def ljust(text: str, columns: int) -> str:
    """`text` padded with spaces to `columns` terminal cells (never cut)."""
    return text + " " * max(0, columns - cells(text))


def fit(text: str, columns: int) -> str:
    """`text` cut to fit in `columns` terminal cells (a wide character, CJK among them, takes
    two), ending in "..." when cut: a redrawn line must never wrap.

    >>> fit("watch 0:10 of 10:00: rolling out", 16)
    'watch 0:10 of...'
    >>> fit("观察 0:10", 6)
    '观...'
    """
    if cells(text) <= columns:
        return text
    out, used = [], 0
    for ch in text:
        if used + cells(ch) > columns - 3:
            break
        out.append(ch)
        used += cells(ch)
    return "".join(out) + "..."
