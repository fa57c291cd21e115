"""Plan messages the bot edits by itself, with nobody clicking:

- the expiry sweep (`PlanNotices.sweep`): plans nobody approved in time move to `expired`
  (`bot.service.expiry`, one store transition each, by `gpumem-expiry`) and each one's plan
  message, where it was posted, turns to the expired stage with **Plan again**. `gpumem serve`
  runs it on its scheduler's leader (`bot.main.serve_background`), at its first round and then
  every `remediation.expiry_sweep_s`.

Where the plan message is comes from its `slack_message` audit row. Only the caller that moved
a plan edits its message, so two sweeps or two replicas edit it once. Slack failures are logged
and skipped: these are best effort, the store and the audit have the truth.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from bot.render import slack_plan_notices as N
from bot.service import approvals, expiry
from bot.slack.api import SlackPoster
from bot.slack.work import SharedStore

log = logging.getLogger("gpumem.slack.plan_notices")

class PlanNotices:
    def __init__(self, settings: Any, poster: SlackPoster, store: SharedStore,
                 now: Callable[[], datetime] | None = None):
        self.settings = settings
        self.poster = poster
        self.shared = store
        #: the wall clock plans expire by
        self.now = now or (lambda: datetime.now(UTC))

    def sweep(self, now: datetime | None = None) -> list[str]:
        """Expire the plans past their time and edit their plan messages; the ids expired by
        this call (edited or not: a plan made on the CLI has no message)."""
        store = self.shared.each_call()
        moved = expiry.expire_due(store, now or self.now())
        for stored in moved:
            log.info("plan %s (%s) expired unapproved", stored.plan.id, stored.plan.target)
            try:
                self._edit(store, stored.plan.id, lambda lang, s=stored: N.expired_message(s, lang))
            except Exception:  # one message must not keep the others from their edit
                log.exception("editing the plan message of expired plan %s failed", stored.plan.id)
        return [s.plan.id for s in moved]

    def _edit(self, store: Any, plan_id: str, render: Callable[[str], Any]) -> tuple[str, str, str | None] | None:
        """Edit the plan's message with `render(lang)`; where it is, None when it has none."""
        where = approvals.slack_message(store, plan_id)
        if where is None:
            return None
        channel, ts, _ = where
        if not self.poster.update(channel, ts, render(self.settings.lang_for(channel))):
            log.warning("the plan message of %s (%s %s) could not be edited", plan_id, channel, ts)
        return where

