"""Post-change review reminders: a stop-gap (a lowered max-num-seqs or max-model-len, a raised
replica count, from an applied plan not rolled back; see `bot.service.handover`) is due for its
review `review_after_s` after it was applied: restore it or make it permanent.

`due_reviews` reads only the store (cheap enough for every scheduler round); the scheduler
claims each reminder's key (`review:<plan>:<what>`) in the store before it is posted, so it is
posted once across restarts, replicas and takeovers. `confirm` reads the live object just
before posting, so the reminder says whether the stop-gap is still running.

A stop-gap another manager put back during its watch (a plan `reverted`: a controller, Argo
CD's self-heal) is not running any more, and its reminder says so instead: reverted by MANAGER at
TIME (from the watch's audit row), fold the change into the source of truth; `confirm` leaves
it as recorded (nothing of gpumem's is left on the object to confirm).

A reminder goes to the channel the plan was made in; a plan made outside Slack goes to the
configured `scheduler.review_channel` (default: the first schedule's channel).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from bot.service.handover import (
    REVIEW_FOLD,
    ObjectReader,
    RevertItem,
    TemporaryMeasure,
    _applied_times,
    _temporary,
    revert_item,
    reverted_detail,
)
from bot.store.db import Store


@dataclass(frozen=True)
class ReviewReminder:
    #: the claim key: `review:<plan>:<what>`
    key: str
    channel: str
    measure: TemporaryMeasure
    #: when the review became due: applied + review_after_s
    review_at: datetime
    requested_by: str
    approvers: tuple[str, ...] = ()
    #: the stop-gap was put back by another manager during its watch (None: it was not)
    reverted: RevertItem | None = None


def review_key(plan: str, what: str) -> str:
    """The claim key of one stop-gap's reminder.

    >>> review_key("p-1a2b", "max-num-seqs")
    'review:p-1a2b:max-num-seqs'
    """
    return f"review:{plan}:{what}"


def due_reviews(store: Store, now: datetime, *, review_after_s: float,
                default_channel: str | None) -> list[ReviewReminder]:
    """The stop-gaps still in place whose review time has come, oldest first (store only: each
    measure's `live` is "unconfirmed" until `confirm`). A plan with no channel and no default
    channel has nowhere to be posted and is left out."""
    after = timedelta(seconds=review_after_s)
    applied_at = _applied_times(store)
    found = []
    for p in store.plans(limit=1000):
        if p.state not in ("applied", "watched", "reverted"):
            continue
        since = applied_at.get(p.plan.id, p.updated_at)
        if since + after > now:
            continue
        channel = p.channel or default_channel
        if channel is None:
            continue
        reverted = None
        if p.state == "reverted":
            detail = reverted_detail(store, p.plan.id)
            reverted = revert_item(p, detail[1], detail[0]) if detail is not None else None
        for m in _temporary(p, since, now, None):
            if reverted is not None:
                m = replace(m, live="reverted", review=REVIEW_FOLD)
            found.append(ReviewReminder(review_key(m.plan, m.what), channel, m, since + after, p.plan.requested_by,
                                        p.approvals, reverted))
    return sorted(found, key=lambda r: (r.review_at, r.key))


def confirm(store: Store, reminder: ReviewReminder, read_object: ObjectReader | None,
            now: datetime) -> ReviewReminder:
    """The reminder with its measure checked against the live object: "confirmed", "changed"
    (with the live value), or "unconfirmed" when there is no reader or the read failed; a
    reverted one as recorded (the watch read who put it back)."""
    if reminder.reverted is not None:
        return reminder
    stored = store.get(reminder.measure.plan)
    measures = _temporary(stored, reminder.measure.since, now, read_object)
    fresh = next((m for m in measures if m.what == reminder.measure.what), None)
    return replace(reminder, measure=fresh) if fresh is not None else reminder
