"""Error ids: what a person sees in Slack when gpumem itself failed, and what the log holds.

Slack gets a short apology and an id; the log gets one record with the same id, the exception
and its traceback. No exception text, path or traceback is ever posted: an operator greps the
log for the id.

>>> len(new_error_id()), new_error_id() != new_error_id()
(8, True)
"""

from __future__ import annotations

import logging
import secrets


def new_error_id() -> str:
    """8 hex digits: enough to find one log record among a day's."""
    return secrets.token_hex(4)


def log_crash(logger: logging.Logger, what: str, error: BaseException | None = None, *args: object) -> str:
    """Log `what` (a %-format with `args`) with the error's traceback and a new id; return the id."""
    error_id = new_error_id()
    logger.error(f"{what} [error {error_id}]", *args, exc_info=error if error is not None else False)
    return error_id
