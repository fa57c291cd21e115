"""Who is clicking, as Slack knows them: each approver's account is read with `users.info`
(scope `users:read`) before an approval, a rejection, a rollback or a routing confirmation
counts, and a deactivated account, a guest or a bot is refused whatever the config lists.

Answers are kept `ttl_s` seconds (60) per user id, so a burst of clicks costs one call; a
failure is not kept, so the next click asks again. Without `users:read` (Slack's
`missing_scope`) and on any other failure the check fails closed: nothing counts until Slack
has said who the clicker is.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from bot.service.approvals import account_refusal

#: how long one users.info answer is trusted
ACCOUNT_TTL_S = 60.0
#: the scope users.info needs
USERS_READ = "users:read"


class AccountCheck:
    """`refusal(user)`: None when Slack says `user` is a full, active member; else the refusal
    key (`account_deleted`, `account_guest`, `account_bot`, `account_scope_missing`,
    `account_unchecked`) and its parameters."""

    def __init__(self, user_info: Callable[[str], tuple[dict[str, Any] | None, str | None]],
                 ttl_s: float = ACCOUNT_TTL_S, clock: Callable[[], float] = time.monotonic):
        self.user_info = user_info
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._known: dict[str, tuple[float, str | None]] = {}

    def refusal(self, user: str) -> tuple[str, dict[str, Any]] | None:
        now = self.clock()
        with self._lock:
            kept = self._known.get(user)
        if kept is not None and kept[0] > now:
            return (kept[1], {}) if kept[1] else None
        found, error = self.user_info(user)
        if error == "missing_scope":
            return "account_scope_missing", {"scope": USERS_READ}
        if found is None or str(found.get("id") or user) != user:
            return "account_unchecked", {"error": error or "another user's record"}
        reason = account_refusal(found)
        with self._lock:
            self._known[user] = (now + self.ttl_s, reason)
        return (reason, {}) if reason else None
