"""Keep credentials out of logs: a logging filter that masks Slack tokens and known secrets.

Installed on every handler of the root logger by `gpumem serve`, so records from any library
(slack_sdk logs request headers at DEBUG) pass through it.

>>> redact("token xoxb-1234-5678-abcdEFGH rejected")
'token xoxb-*** rejected'
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

#: bot, user, app-level, refresh and configuration tokens, and webhook paths
_TOKEN = re.compile(r"\b(xox[abposer]|xapp|xoxe\.xox[bp])-[A-Za-z0-9-]+")
_WEBHOOK = re.compile(r"(hooks\.slack\.com/(?:services|workflows|triggers)/)[A-Za-z0-9/_-]+")
_BEARER = re.compile(r"(?i)(authorization['\"]?\s*[:=]\s*['\"]?bearer\s+)[^\s'\",}]+")


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    text = _TOKEN.sub(lambda m: f"{m.group(1)}-***", text)
    text = _WEBHOOK.sub(r"\1***", text)
    text = _BEARER.sub(r"\1***", text)
    for secret in secrets:
        if secret and len(secret) >= 6:
            text = text.replace(secret, "***")
    return text


class RedactingFilter(logging.Filter):
    """Rewrites each record's message (and its traceback) with tokens and secrets masked."""

    def __init__(self, secrets: Iterable[str] = ()):
        super().__init__()
        self.secrets = tuple(s for s in secrets if s)

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string must not hide the record
            message = str(record.msg)
        record.msg = redact(message, self.secrets)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact(record.exc_text, self.secrets)
        if record.stack_info:
            record.stack_info = redact(record.stack_info, self.secrets)
        return True


def install(secrets: Iterable[str] = (), logger: logging.Logger | None = None) -> RedactingFilter:
    """Add the filter to every handler of `logger` (the root logger by default)."""
    target = logger or logging.getLogger()
    filt = RedactingFilter(secrets)
    for handler in target.handlers:
        handler.addFilter(filt)
    return filt
