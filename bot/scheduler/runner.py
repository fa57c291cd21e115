"""Run the handover schedules: one `tick(now)` checks the Lease and posts each channel's due slot.

Exactly once per slot:
- only the Lease holder runs ticks (`bot.scheduler.leader`), so two replicas do not race;
- each slot is claimed in the store (`claim("handover:<channel>:<slot iso>")`) for the whole
  grace window before the job runs, so a retry, a restart or a second leader after a takeover
  finds it taken;
- what became of it is recorded (`schedule_slots`: posted or failed); a posted slot is never
  run again, a failed one is not retried by the scheduler (the injected job does its own
  retries), so a half-delivered post is never doubled.
A bot down at the slot posts it late when it comes back within the grace (`late=True`), once.

Post-change review reminders (`bot.service.reviews`) go the same way: each round the leader
asks `reviews(now)` for the stop-gaps whose review time has come, claims each one's key
(`review:<plan>:<what>`) and gives it to `remind`; its outcome is recorded beside the slots.

The expiry sweep (`bot.service.expiry`, with the Slack side's edits injected as `sweep(now)`)
runs on the leader too: at its first round, then every `sweep_every_s`. Each plan it expires
moves in one store transition, so a second leader after a takeover edits nothing twice. The
reconcile pass (`settle(now)`: plans left `applying` read again, `bot.service.reconcile`) runs
the same way every `settle_every_s`, its moves as single transitions too.

`start()` runs `tick` on an APScheduler 3.x BackgroundScheduler every `interval_s` (or every
third of the Lease's duration, or the sweep's period, when that is shorter, so the holder renews
in time);
`shutdown()` stops it, releases the Lease (or the file lock) so a standby takes over at once,
and runs `on_shutdown` (closing the scheduler's own store connection).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.scheduler.leader import FileLockElector, LeaderElector
from bot.scheduler.slots import Schedule, due_slot, is_late, slot_key
from bot.store.db import Store
from bot.store.notes import Journal

log = logging.getLogger(__name__)

#: the injected job: (channel, slot, late) -> the recorded handover's id (or None)
Job = Callable[[str, datetime, bool], "int | None"]
#: the stop-gaps due for review at `now` (`bot.service.reviews.due_reviews`, bound to a store)
Reviews = Callable[[datetime], Sequence[Any]]
#: posts one review reminder (a `bot.service.reviews.ReviewReminder`)
Remind = Callable[[Any], Any]
#: expires the plans past their time at `now` and edits their messages (`bot.slack.plan_notices`)
Sweep = Callable[[datetime], Any]


@dataclass(frozen=True)
class SlotOutcome:
    channel: str
    slot: datetime
    key: str
    #: "posted", "failed", "taken" (claimed by someone else or done already)
    state: str
    late: bool = False
    handover_id: int | None = None
    error: str | None = None
    #: "handover" (a scheduled slot) or "review" (a post-change review reminder)
    kind: str = "handover"


def default_identity() -> str:
    """This instance's name in the Lease: the pod name (HOSTNAME in Kubernetes) and the process
    id, so two processes on one host are two candidates."""
    return f"{socket.gethostname()}_{os.getpid()}"


class HandoverScheduler:
    def __init__(self, store: Store, schedules: Sequence[Schedule], job: Job, *,
                 elector: LeaderElector | FileLockElector | None = None, holder: str | None = None,
                 interval_s: float = 30.0, clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                 reviews: Reviews | None = None, remind: Remind | None = None,
                 on_shutdown: Callable[[], None] | None = None, sweep: Sweep | None = None,
                 sweep_every_s: float = 60.0, settle: Sweep | None = None, settle_every_s: float = 60.0):
        self.store = store
        self.journal = Journal(store)
        self.schedules = tuple(schedules)
        self.job = job
        self.elector = elector
        self.holder = holder or (elector.identity if elector else default_identity())
        self.interval_s = interval_s
        self.clock = clock
        self.reviews = reviews
        self.remind = remind
        self.on_shutdown = on_shutdown
        self.sweep = sweep
        self.sweep_every_s = sweep_every_s
        #: when the leader last ran the expiry sweep (None: not yet; the first round runs it)
        self.last_sweep: datetime | None = None
        self.settle = settle
        self.settle_every_s = settle_every_s
        #: when the leader last ran the reconcile pass (None: not yet)
        self.last_settle: datetime | None = None
        self._scheduler: Any = None

    @property
    def leader(self) -> bool:
        return self.elector is None or self.elector.leader

    def tick(self, now: datetime | None = None) -> list[SlotOutcome]:
        """One round: renew or take the Lease; when leading, post each channel's due slot."""
        now = now or self.clock()
        if self.elector is not None:
            was, leads = self.elector.leader, self.elector.step(now)
            if leads != was:
                log.info("scheduler: %s %s", self.holder, "leads: it runs the schedules" if leads else "follows")
            if not leads:
                return []
        outcomes = [o for s in self.schedules if (o := self._run(s, now)) is not None]
        if self.reviews is not None and self.remind is not None:
            outcomes += [self._review(r, now) for r in self.reviews(now)]
        if self.sweep is not None and self._sweep_due(now):
            self._run_sweep(now)
        if self.settle is not None and _due(self.last_settle, self.settle_every_s, now):
            self._run_settle(now)
        return outcomes

    def _sweep_due(self, now: datetime) -> bool:
        return _due(self.last_sweep, self.sweep_every_s, now)

    def _run_settle(self, now: datetime) -> None:
        self.last_settle = now
        try:
            self.settle(now)  # type: ignore[misc]
        except Exception:  # logged; the next period reads again
            log.exception("the reconcile pass failed")

    def _run_sweep(self, now: datetime) -> None:
        self.last_sweep = now
        try:
            expired = self.sweep(now)  # type: ignore[misc]
        except Exception:  # logged; the next period tries again, the slots go on
            log.exception("the expiry sweep failed")
            return
        if expired:
            log.info("scheduler: expired %d plan(s) past their time: %s", len(expired), ", ".join(map(str, expired)))

    def _review(self, reminder: Any, now: datetime) -> SlotOutcome:
        """One review reminder, posted once: done already or claimed elsewhere is "taken"."""
        key, channel, at = reminder.key, reminder.channel, reminder.review_at
        if self.journal.slot_done(key) is not None:
            return SlotOutcome(channel, at, key, "taken", kind="review")
        # held for a day: a post in progress elsewhere (or a crash mid-post) is never doubled
        if not self.store.claim(key, self.holder, ttl_s=86400.0, now=now):
            return SlotOutcome(channel, at, key, "taken", kind="review")
        try:
            self.remind(reminder)  # type: ignore[misc]
        except Exception as e:  # recorded; not retried into a double
            log.exception("review reminder %s failed", key)
            self.journal.finish_slot(key, channel, at, state="failed", holder=self.holder, late=False,
                                     error=str(e)[:500], now=now)
            return SlotOutcome(channel, at, key, "failed", error=str(e), kind="review")
        self.journal.finish_slot(key, channel, at, state="posted", holder=self.holder, late=False, now=now)
        log.info("scheduler: posted the review reminder %s in %s", key, channel)
        return SlotOutcome(channel, at, key, "posted", kind="review")

    def _run(self, schedule: Schedule, now: datetime) -> SlotOutcome | None:
        slot = due_slot(schedule, now)
        if slot is None:
            return None
        key = slot_key(schedule.channel, slot)
        if self.journal.slot_done(key) is not None:
            return SlotOutcome(schedule.channel, slot, key, "taken")
        # held for the whole grace window: nobody else runs this slot, even after a crash mid-post
        if not self.store.claim(key, self.holder, ttl_s=schedule.grace_s + self.interval_s, now=now):
            return SlotOutcome(schedule.channel, slot, key, "taken")
        late = is_late(schedule, slot, now)
        try:
            handover_id = self.job(schedule.channel, slot, late)
        except Exception as e:  # the job's failure is recorded; the scheduler goes on
            log.exception("handover for %s at %s failed", schedule.channel, slot.isoformat())
            self.journal.finish_slot(key, schedule.channel, slot, state="failed", holder=self.holder, late=late,
                                     error=str(e)[:500], now=now)
            return SlotOutcome(schedule.channel, slot, key, "failed", late, error=str(e))
        self.journal.finish_slot(key, schedule.channel, slot, state="posted", holder=self.holder, late=late,
                                 handover_id=handover_id, now=now)
        log.info("scheduler: posted the handover of %s for %s%s", schedule.channel, slot.isoformat(),
                 " (late)" if late else "")
        return SlotOutcome(schedule.channel, slot, key, "posted", late, handover_id)

    # ------------------------------------------------------------------ the real clock

    def start(self) -> None:
        """Tick now and then every `interval_s` on a background APScheduler."""
        # lazy: APScheduler's background scheduler costs ~210 ms (-X importtime), paid only by the real clock, never by the tests' ticks or the CLI
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        every = self.interval_s
        renew = getattr(self.elector, "renew_s", None)
        if renew:
            every = min(every, renew)
        if self.sweep is not None:
            every = min(every, self.sweep_every_s)
        if self.settle is not None:
            every = min(every, self.settle_every_s)
        # one line per round would bury the bot's own log: APScheduler says only what went wrong
        logging.getLogger("apscheduler.executors.default").setLevel(logging.WARNING)
        logging.getLogger("apscheduler.scheduler").setLevel(logging.WARNING)
        scheduler = BackgroundScheduler(timezone=UTC)
        scheduler.add_job(self._safe_tick, IntervalTrigger(seconds=every), id="handover-tick",
                          max_instances=1, coalesce=True, next_run_time=datetime.now(UTC))
        scheduler.start()
        self._scheduler = scheduler

    def _safe_tick(self) -> None:
        try:
            self.tick()
        except Exception:  # a tick that fails is logged; the next one runs
            log.exception("scheduler tick failed")

    def shutdown(self) -> None:
        """Stop ticking (a post in progress ends first), release the Lease, run `on_shutdown`."""
        try:
            if self._scheduler is not None:
                self._scheduler.shutdown(wait=True)
                self._scheduler = None
            if self.elector is not None and self.elector.release(self.clock()):
                log.info("scheduler: released the leadership of %s", self.holder)
        finally:
            if self.on_shutdown is not None:
                on_shutdown, self.on_shutdown = self.on_shutdown, None
                on_shutdown()


def _due(last: datetime | None, every_s: float, now: datetime) -> bool:
    """Whether a periodic job last run at `last` (None: never) is due at `now`."""
    if last is None:
        return True
    # a round that comes a little early (the timer's jitter) does not wait a whole period more
    slack = min(1.0, every_s / 4)
    return (now - last).total_seconds() + slack >= every_s


def handover_job(store: Store, post: Callable[[Any], Any], *, read_state: Any = None,
                 read_object: Any = None, actor: str = "gpumem") -> Job:
    """The job that builds a channel's handover, gives it to `post` and records it."""
    # lazy: the handover use case and its readers cost ~1.4 s (-X importtime, under load), paid by the first post, not by setting the scheduler up
    from bot.service.handover import post_handover

    def job(channel: str, slot: datetime, late: bool) -> int | None:
        record = post_handover(store, post, channel=channel, actor=actor, slot=slot, late=late,
                               read_state=read_state, read_object=read_object)
        return record.id

    return job
