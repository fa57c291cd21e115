"""Schedule slots: which cron fire time a handover belongs to, on time or late.

A slot is the cron's fire time in the schedule's time zone. At `now`, the slot due is the
latest fire time at or before `now`; it is posted when `now` is within `grace_s` of it (late
when past `on_time_s`), never when older. So a bot that was down across several slots posts
one late handover (the latest), never a backlog.

>>> from datetime import UTC, datetime
>>> s = Schedule("C1", "0 9,21 * * *", "Asia/Shanghai", grace_s=3600)
>>> due_slot(s, datetime(2026, 12, 1, 1, 30, tzinfo=UTC)).isoformat()   # 09:30 in Shanghai
'2026-12-01T09:00:00+08:00'
>>> due_slot(s, datetime(2026, 12, 1, 3, 0, tzinfo=UTC)) is None        # 11:00: past the grace
True
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.config.schedules import Schedule


def previous_fire(schedule: Schedule, now: datetime) -> datetime | None:
    """The latest fire time at or before `now` within the last `grace_s` (None: none)."""
    trigger = schedule.trigger()
    start = now - timedelta(seconds=schedule.grace_s)
    fire = trigger.get_next_fire_time(None, start)
    last = None
    while fire is not None and fire <= now:
        last = fire
        fire = trigger.get_next_fire_time(fire, fire + timedelta(seconds=1))
    return last


def due_slot(schedule: Schedule, now: datetime) -> datetime | None:
    """The slot to post at `now` (see the module docstring), or None."""
    return previous_fire(schedule, now)


def slot_key(channel: str, slot: datetime) -> str:
    """The claim key of one slot: `handover:<channel>:<slot in ISO 8601, UTC>`.

    >>> from datetime import UTC, datetime
    >>> slot_key("C1", datetime(2026, 12, 1, 1, 0, tzinfo=UTC))
    'handover:C1:2026-12-01T01:00:00+00:00'
    """
    return f"handover:{channel}:{slot.astimezone(UTC).isoformat()}"


def is_late(schedule: Schedule, slot: datetime, now: datetime) -> bool:
    return (now - slot).total_seconds() > schedule.on_time_s
