"""Keep credentials out of logs, and one record on one line: the logging filter of `gpumem serve`.

Installed on every handler of the root logger by `gpumem serve`, so records from any library
(slack_sdk logs request headers at DEBUG) pass through it. It:

- masks Slack tokens (`xoxb-***`, the kind stays visible), Slack webhook paths, the secrets the
  settings hold, and every credential `runbooks.model.secrets` recognises (Authorization headers,
  Bearer tokens, URL passwords, sk-/hf_/ghp_/AKIA.../JWT shapes, `api_key=...`) as `<redacted>`;
- escapes control characters (`\\n`, `\\r`, `\\x1b`, ...) in the message and its arguments, and
  in the messages of a logged exception, so a value from a request (a Slack channel id, a
  command's text) can never start a line of its own and pass for another record.

>>> redact("token xoxb-1234-5678-abcdEFGH rejected")
'token xoxb-*** rejected'
>>> escape_controls("C0X\\nERROR forged")
'C0X\\\\nERROR forged'
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterable

from runbooks.model.secrets import redact_text

#: bot, user, app-level, refresh and configuration tokens, and webhook paths
_TOKEN = re.compile(r"\b(xox[abposer]|xapp|xoxe\.xox[bp])-[A-Za-z0-9-]+")
_WEBHOOK = re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+")

_NAMED = {0x0A: "\\n", 0x0D: "\\r"}
#: C0 controls but the tab, DEL, C1 controls (NEL among them), the Unicode line and paragraph separators
_CONTROLS = {c: _NAMED.get(c, f"\\x{c:02x}") for c in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if c != 0x09}
_CONTROLS.update({0x2028: "\\u2028", 0x2029: "\\u2029"})
#: in a traceback the lines are the traceback's own: only its messages are escaped whole
_CONTROLS_BUT_NEWLINE = {c: v for c, v in _CONTROLS.items() if c != 0x0A}


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with Slack tokens, webhook paths, the given secrets and every credential masked."""
    text = _TOKEN.sub(lambda m: f"{m.group(1)}-***", text)
    text = _WEBHOOK.sub(r"\1***", text)
    return redact_text(text, secrets)


def escape_controls(text: str) -> str:
    """`text` on one line: newlines, carriage returns and other control characters as escapes
    (a tab stays a tab)."""
    return text.translate(_CONTROLS)


def _exception_messages(error: BaseException | None) -> list[str]:
    """The messages (and notes) of an exception, its causes, contexts and group members."""
    found: list[str] = []
    seen: set[int] = set()
    stack = [error]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        with contextlib.suppress(Exception):  # a __str__ that raises prints as <exception str() failed>
            found.append(str(e))
        found += [n for n in getattr(e, "__notes__", None) or () if isinstance(n, str)]
        stack += [e.__cause__, e.__context__, *getattr(e, "exceptions", ())]
    return found


def escape_traceback(text: str, error: BaseException | None) -> str:
    """A formatted traceback whose exception messages are escaped as one line each: what a
    message quotes from a request cannot start a line of its own. The traceback's own lines
    stay lines."""
    for message in sorted(set(_exception_messages(error)), key=len, reverse=True):
        escaped = escape_controls(message)
        if escaped != message:
            text = text.replace(message, escaped)
    return text.translate(_CONTROLS_BUT_NEWLINE)


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and its traceback) with credentials masked and control
    characters escaped."""

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not hide the record
            message = str(record.msg)
        record.msg = escape_controls(redact(message, self.secrets))
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            error = record.exc_info[1] if record.exc_info else None
            record.exc_text = redact(escape_traceback(record.exc_text, error), self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info.translate(_CONTROLS_BUT_NEWLINE), self.secrets)
        return True


def install(secrets: Iterable[str] = (), logger: logging.Logger | None = None) -> RedactingFilter:
    """Add the filter to every handler of `logger` (the root logger by default)."""
    target = logger or logging.getLogger()
    filt = RedactingFilter(secrets)
    for handler in target.handlers:
        handler.addFilter(filt)
    return filt
