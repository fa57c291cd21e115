"""The scheduler's job is the Slack handover: against the stand-in Slack, each slot of a short
schedule is posted exactly once (retries and a second tick find it taken), a late one marked so.

This composes the two in process with a driven clock, as `bot.serve.serve_background` does for
`gpumem serve` (tests/test_scheduler_serve.py runs that path as a process)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from bot.config.schedules import Schedule
from bot.scheduler.runner import HandoverScheduler
from bot.store.db import Store
from bot.store.notes import Journal
from tests.support.slack_kit import CHANNEL, drain, running_bot


def test_each_slot_of_a_short_schedule_is_posted_once_and_a_late_one_says_so(tmp_path):
    db = tmp_path / "gpumem.db"
    with running_bot(tmp_path, extra=f"store:\n  path: {db}\n") as (fake, bot):
        store = Store.open(db)  # the scheduler's own connection (WAL), as a second replica would have
        try:
            schedule = Schedule(CHANNEL, "* * * * *", "UTC", grace_s=600, on_time_s=30)

            def job(channel: str, slot: datetime, late: bool) -> int:
                return bot.work.post_handover(channel, bot.settings.lang_for(channel), actor="gpumem", slot=slot,
                                              late=late).id

            scheduler = HandoverScheduler(store, [schedule], job, holder="test", interval_s=1)
            minute = datetime.now(UTC).replace(second=0, microsecond=0) - timedelta(minutes=3)
            on_time = [scheduler.tick(minute + timedelta(seconds=s)) for s in (1, 2, 5)]
            late = scheduler.tick(minute + timedelta(minutes=1, seconds=schedule.on_time_s + 5))
            again = scheduler.tick(minute + timedelta(minutes=1, seconds=schedule.on_time_s + 6))
            slots = Journal(store).slots(CHANNEL)
            handovers = store.db.execute("SELECT COUNT(*) FROM handovers").fetchone()[0]
        finally:
            store.close()
        drain(bot)
    assert [[o.state for o in r] for r in on_time] == [["posted"], ["taken"], ["taken"]]
    assert [(o.state, o.late) for o in late] == [("posted", True)] and [o.state for o in again] == ["taken"]
    assert [(s.state, s.late) for s in slots] == [("posted", False), ("posted", True)]
    assert handovers == 2
    parents = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]
    assert len(parents) == 2, "exactly one post per slot"
    blocks = [json.dumps(c.args["blocks"]) for c in parents]
    assert "late: the bot was down" not in blocks[0] and "late: the bot was down" in blocks[1]


class _Background:
    def __init__(self, events: list[str]):
        self.events = events

    def start(self) -> None:
        self.events.append("start")

    def shutdown(self) -> None:
        self.events.append("shutdown")


def test_what_runs_beside_the_bot_starts_and_is_shut_down_first_in_the_drain(tmp_path):
    events: list[str] = []
    with running_bot(tmp_path, extra=f"store:\n  path: {tmp_path / 'gpumem.db'}\n") as (_fake, bot):
        bot.background.append(_Background(events))
        bot.start_background()
        assert events == ["start"]
        drain(bot)
        assert events == ["start", "shutdown"] and bot.background == []
