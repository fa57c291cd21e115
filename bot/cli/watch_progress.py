"""What `gpumem apply --yes` shows on stderr while it watches the rollout (the result goes to
stdout once the watch ends, its summary first).

On a terminal: one line, redrawn in place (carriage return, clear-line) at each look and once a
second between looks, so the elapsed time moves; cut to the terminal's width so it never wraps.
On a pipe or a file, or a terminal that says it cannot redraw (TERM=dumb): one line stamped with
the UTC time each time what the look says changes (the judgement, the replicas, the notes);
looks that say the same print nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, TextIO

from bot.render.remediation_outcome import change_line, live_line, progress_body
from bot.render.terminal import fit, rewrite_line

#: the width of a terminal that does not say (and of a pty nobody sized)
DEFAULT_COLUMNS = 80
#: on a terminal, how often the line is redrawn between looks (seconds)
TICK_S = 1.0


def is_live(stream: TextIO, environ: Mapping[str, str]) -> bool:
    """Whether `stream` is a terminal that redraws a line in place."""
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError):  # a closed or odd stream: treat it as a pipe
        tty = False
    return tty and environ.get("TERM", "") != "dumb"


class WatchProgress:
    """The watch's progress on `stream`: `look` is the watch's `on_look`, `sleep` its sleep,
    `clock` its clock; `close` ends the display before the summary is printed.

    `live` chooses the terminal's redrawn line; otherwise a stamped line per change, stamped
    with `now()` (UTC).
    """

    def __init__(self, stream: TextIO, lang: str, window_s: float, *, live: bool,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 now: Callable[[], datetime] | None = None, columns: int | None = None):
        self.stream, self.lang, self.window_s, self.live = stream, lang, window_s, live
        self.clock, self._sleep = clock, sleep
        self._now = now or (lambda: datetime.now(UTC))
        self._columns = columns
        self.start = clock()
        self._last: Any = None
        self._said: str | None = None
        self._drawn: str | None = None

    def elapsed(self) -> float:
        return self.clock() - self.start

    def look(self, look: Any) -> None:
        self._last = look
        if self.live:
            self._draw()
            return
        body = progress_body(look, self.lang)
        if body != self._said:
            self._said = body
            self.stream.write(change_line(look, self._now(), self.elapsed(), self.lang))
            self.stream.flush()

    def sleep(self, seconds: float) -> None:
        """The watch's wait between looks; on a terminal, the line's clock moves each second."""
        if not self.live or self._last is None:
            self._sleep(seconds)
            return
        left = seconds
        while left > 0:
            step = min(TICK_S, left)
            self._sleep(step)
            left -= step
            self._draw()

    def close(self, *, keep: bool = False) -> None:
        """End the display: the terminal's line is cleared (the summary follows in its place),
        or with `keep` (the watch was interrupted) left as it is, ended with a newline."""
        if not self.live or self._drawn is None:
            return
        raw = self.stream
        if keep:
            raw.write("\n")
        else:
            rewrite_line(raw, "")
        raw.flush()
        self._drawn = None

    def _draw(self) -> None:
        text = fit(live_line(self._last, self.elapsed(), self.window_s, self.lang), self.columns() - 1)
        if text != self._drawn:
            rewrite_line(self.stream, text)
            self._drawn = text

    def columns(self) -> int:
        if self._columns:
            return self._columns
        try:
            columns = os.get_terminal_size(self.stream.fileno()).columns
        except (AttributeError, OSError, ValueError):
            columns = 0
        return columns or DEFAULT_COLUMNS

