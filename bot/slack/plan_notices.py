"""Plan messages the bot edits by itself, with nobody clicking:

- the expiry sweep (`PlanNotices.sweep`): plans nobody approved in time move to `expired`
  (`bot.service.expiry`, one store transition each, by `gpumem-expiry`) and each one's plan
  message, where it was posted, turns to the expired stage with **Plan again**. `gpumem serve`
  runs it on its scheduler's leader (`bot.serve.serve_background`), at its first round and then
  every `remediation.expiry_sweep_s`;
- after reconciliation (`PlanNotices.announce_reconciled`): each plan settled from `applying`
  (or from a rollback whose outcome was unknown) gets its plan message edited to the outcome and
  a thread reply saying what happened. `StartupNotices` runs it once the bot is up (it is one of
  `Bot.background`, started after the HTTP face), for what start-up settled;
- the reconcile pass (`PlanNotices.settle`): while the bot runs, plans left `applying` (a
  kill -9 of another replica, a write whose answer was lost) are read again and announced the
  same way. `gpumem serve` runs it on its scheduler's leader every minute
  (`bot.scheduler.setup.scheduler_from_settings`'s `settle_every_s`).

Where the plan message is comes from its `slack_message` audit row. Only the caller that moved
a plan edits its message, so two sweeps or two replicas edit it once. Slack failures are logged
and skipped: these are best effort, the store and the audit have the truth.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from bot.render import slack_plan_notices as N
from bot.service import approvals, expiry
from bot.slack.api import SlackPoster
from bot.slack.work import SharedStore

log = logging.getLogger("gpumem.slack.plan_notices")

#: how long the drain waits for the start-up notices still being sent
NOTICES_STOP_S = 2.0


class PlanNotices:
    def __init__(self, settings: Any, poster: SlackPoster, store: SharedStore,
                 now: Callable[[], datetime] | None = None, reader_for: Callable[[str | None], Any] | None = None):
        self.settings = settings
        self.poster = poster
        self.shared = store
        #: the wall clock plans expire by
        self.now = now or (lambda: datetime.now(UTC))
        #: cluster name -> what the reconcile pass reads objects with (the reader identity)
        self.reader_for = reader_for or (lambda cluster: approvals.bot_reader(settings, cluster))

    def settle(self, now: datetime | None = None) -> list[Any]:
        """The reconcile pass: plans left `applying` (and rollbacks whose outcome was unknown)
        read again (`bot.service.reconcile`; nothing is written) and each settled one's message
        edited; what it found (`Reconciled`, the unknown ones included)."""
        # lazy: reconcile pulls in the remediation use case and the Kubernetes client (~1.5 s, -X importtime, under load), paid by the first settle pass
        from bot.service.reconcile import reconcile_applying

        done = reconcile_applying(self.shared.each_call(), self.reader_for, now=now or self.now())
        for r in done:
            log.log(logging.INFO if r.outcome == "unknown" else logging.WARNING, "plan %s (%s): %s%s", r.plan_id,
                    r.target, r.outcome, f" ({r.reason})" if r.reason else "")
        self.announce_reconciled(done)
        return done

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

    def announce_reconciled(self, done: Sequence[Any]) -> int:
        """For each plan a reconcile pass settled (`bot.service.reconcile.Reconciled`, applied,
        failed, rolled back or rollback not applied): its plan message edited to the outcome and a
        thread reply. How many were announced."""
        store = self.shared.each_call()
        told = 0
        for r in done:
            if r.outcome not in N.RECONCILED_STAGES:
                continue  # unknown: still applying, nothing settled to say
            try:
                stored = store.get(r.plan_id)
                where = self._edit(store, r.plan_id, lambda lang, s=stored, r=r: N.reconciled_message(
                    s, r.outcome, r.reason, lang))
                if where is None:
                    continue
                channel, ts, thread = where
                reply = N.reconciled_reply(stored, r.outcome, r.reason, self.settings.lang_for(channel))
                if self.poster.post(channel, reply, thread_ts=thread or ts) is not None:
                    told += 1
            except Exception:  # one plan's notice must not keep the others from theirs
                log.exception("telling Slack about plan %s settled by reconciliation failed", r.plan_id)
        return told

    def _edit(self, store: Any, plan_id: str, render: Callable[[str], Any]) -> tuple[str, str, str | None] | None:
        """Edit the plan's message with `render(lang)`; where it is, None when it has none."""
        where = approvals.slack_message(store, plan_id)
        if where is None:
            return None
        channel, ts, _ = where
        if not self.poster.update(channel, ts, render(self.settings.lang_for(channel))):
            log.warning("the plan message of %s (%s %s) could not be edited", plan_id, channel, ts)
        return where


class StartupNotices:
    """One of `Bot.background`: at `start()` (after the HTTP face is up) a thread tells Slack
    about the plans reconciliation settled while the bot was built; `shutdown()` waits for it
    briefly."""

    def __init__(self, notices: PlanNotices, done: Sequence[Any]):
        self.notices = notices
        self.done = tuple(done)
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="gpumem-startup-notices", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            told = self.notices.announce_reconciled(self.done)
            log.info("start-up: told Slack about %d plan(s) settled from applying", told)
        except Exception:
            log.exception("start-up notices failed")

    def join(self, timeout_s: float | None = None) -> bool:
        """Wait for the notices; whether they are done."""
        if self._thread is None:
            return False
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def shutdown(self) -> None:
        self.join(NOTICES_STOP_S)
