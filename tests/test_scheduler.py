"""The handover scheduler: slots from cron in the channel's time zone, one post per slot across
retries, restarts and replicas, late within the grace, and leadership on a real Lease (the
Kubernetes stand-in) moved by a fake clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.config.schedules import Schedule
from bot.scheduler.leader import LeaderElector
from bot.scheduler.runner import HandoverScheduler
from bot.scheduler.slots import due_slot, slot_key
from bot.service.lease import LeaseClient
from bot.store.db import Store
from bot.store.notes import Journal
from runbooks.model.errors import StaleObject
from tests.support.kube_fixtures import running_scenario

SHANGHAI = Schedule("C123", "0 9,21 * * *", "Asia/Shanghai", grace_s=3600)
# 09:00 in Shanghai is 01:00 UTC
SLOT = datetime(2026, 12, 1, 1, 0, tzinfo=UTC)


class Recorder:
    def __init__(self, fail: int = 0):
        self.calls: list[tuple[str, datetime, bool]] = []
        self.fail = fail

    def __call__(self, channel, slot, late):
        self.calls.append((channel, slot, late))
        if self.fail:
            self.fail -= 1
            raise RuntimeError("slack said no")
        return len(self.calls)


def test_the_slot_is_the_cron_time_in_the_channels_time_zone():
    assert due_slot(SHANGHAI, SLOT + timedelta(minutes=5)) == SLOT
    assert due_slot(SHANGHAI, SLOT - timedelta(seconds=1)) is None          # 08:59:59: not yet (21:00 is past grace)
    assert due_slot(SHANGHAI, SLOT + timedelta(hours=12, minutes=1)) == SLOT + timedelta(hours=12)  # 21:00
    assert slot_key("C123", SLOT) == "handover:C123:2026-12-01T01:00:00+00:00"


def test_one_post_per_slot_on_time_then_nothing_until_the_next_slot():
    store, job = Store.memory(), Recorder()
    sched = HandoverScheduler(store, [SHANGHAI], job, holder="pod-a")
    first = sched.tick(SLOT + timedelta(seconds=20))
    assert [(o.state, o.late, o.handover_id) for o in first] == [("posted", False, 1)]
    for minutes in (1, 5, 30, 59):
        assert [o.state for o in sched.tick(SLOT + timedelta(minutes=minutes))] == ["taken"]
    assert job.calls == [("C123", SLOT, False)]
    assert sched.tick(SLOT + timedelta(hours=2)) == []  # past the grace, before 21:00
    sched.tick(SLOT + timedelta(hours=12, seconds=5))
    assert [c[1] for c in job.calls] == [SLOT, SLOT + timedelta(hours=12)]
    rec = Journal(store).slot_done(slot_key("C123", SLOT))
    assert (rec.state, rec.holder, rec.late, rec.handover_id) == ("posted", "pod-a", False, 1)


def test_a_restart_does_not_post_again_and_a_bot_down_at_the_slot_posts_late_once(tmp_path):
    path = tmp_path / "gpumem.db"
    job = Recorder()
    HandoverScheduler(Store.open(path), [SHANGHAI], job, holder="pod-a").tick(SLOT + timedelta(seconds=1))
    # restarted (a new process on the same file): the slot is done
    assert [o.state for o in HandoverScheduler(Store.open(path), [SHANGHAI], job, holder="pod-b")
            .tick(SLOT + timedelta(minutes=3))] == ["taken"]
    assert len(job.calls) == 1
    # down across 21:00, back at 21:40: one late post; across 09:00 the next day past the grace: none
    late = HandoverScheduler(Store.open(path), [SHANGHAI], job, holder="pod-a").tick(
        SLOT + timedelta(hours=12, minutes=40))
    assert [(o.state, o.late) for o in late] == [("posted", True)]
    assert HandoverScheduler(Store.open(path), [SHANGHAI], job).tick(SLOT + timedelta(hours=25, minutes=30)) == []
    assert [c[2] for c in job.calls] == [False, True]
    assert Journal(Store.open(path)).slot_done(slot_key("C123", SLOT + timedelta(hours=12))).late is True


def test_two_replicas_without_a_lease_still_post_once_and_a_failure_is_not_retried_into_a_double():
    store = Store.memory()
    a_job, b_job = Recorder(fail=1), Recorder()
    a = HandoverScheduler(store, [SHANGHAI], a_job, holder="pod-a")
    b = HandoverScheduler(store, [SHANGHAI], b_job, holder="pod-b")
    out = a.tick(SLOT + timedelta(seconds=2))
    assert [(o.state, o.error) for o in out] == [("failed", "slack said no")]
    assert [o.state for o in b.tick(SLOT + timedelta(seconds=3))] == ["taken"]
    assert [o.state for o in a.tick(SLOT + timedelta(minutes=10))] == ["taken"]
    assert len(a_job.calls) == 1 and b_job.calls == []
    assert Journal(store).slot_done(slot_key("C123", SLOT)).state == "failed"


@pytest.fixture
def lease_api(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc, LeaseClient(sc.api(), "gpumem")


def test_only_the_lease_holder_runs_jobs_and_a_standby_takes_over_after_the_duration(lease_api):
    sc, api = lease_api
    store = Store.memory()
    a_job, b_job = Recorder(), Recorder()
    a = HandoverScheduler(store, [SHANGHAI], a_job, elector=LeaderElector(api, "gpumem-scheduler", "pod-a", 30))
    b = HandoverScheduler(store, [SHANGHAI], b_job, elector=LeaderElector(api, "gpumem-scheduler", "pod-b", 30))
    t = SLOT - timedelta(minutes=1)
    assert a.tick(t) == [] and a.leader  # leads; nothing due yet
    assert b.tick(t + timedelta(seconds=5)) == [] and not b.leader
    lease = api.get("gpumem-scheduler")["spec"]
    assert lease["holderIdentity"] == "pod-a" and lease["leaseDurationSeconds"] == 30
    # a renews at the slot and posts; b follows
    assert [o.state for o in a.tick(SLOT + timedelta(seconds=10))] == ["posted"]
    assert b.tick(SLOT + timedelta(seconds=20)) == [] and not b.leader
    # a dies (stops renewing); 29 s later b still follows, after 30 s b takes over
    assert b.tick(SLOT + timedelta(seconds=39)) == [] and not b.leader
    b.tick(SLOT + timedelta(seconds=41))
    assert b.leader
    spec = api.get("gpumem-scheduler")["spec"]
    assert spec["holderIdentity"] == "pod-b" and spec["leaseTransitions"] == 1
    # the new leader does not post the slot a posted already
    assert [o.state for o in b.tick(SLOT + timedelta(minutes=2))] == ["taken"]
    assert len(a_job.calls) == 1 and b_job.calls == []
    # a comes back: it follows (its write would be stale, and b renews)
    assert a.tick(SLOT + timedelta(minutes=2, seconds=5)) == [] and not a.leader
    assert sc.kube.get("Lease", "gpumem", "gpumem-scheduler")["spec"]["holderIdentity"] == "pod-b"


def test_release_on_shutdown_lets_the_standby_take_over_at_once(lease_api):
    _sc, api = lease_api
    a = LeaderElector(api, "gpumem-scheduler", "pod-a", 30)
    b = LeaderElector(api, "gpumem-scheduler", "pod-b", 30)
    assert a.step(SLOT) and not b.step(SLOT + timedelta(seconds=1))
    sched = HandoverScheduler(Store.memory(), [], Recorder(), elector=a, clock=lambda: SLOT + timedelta(seconds=2))
    sched.shutdown()
    assert api.get("gpumem-scheduler")["spec"].get("holderIdentity") is None and not a.leader
    assert b.step(SLOT + timedelta(seconds=3))
    assert not a.release(SLOT + timedelta(seconds=4))  # not a's to release any more


def test_a_stale_lease_write_is_a_conflict_and_loses(lease_api):
    _sc, api = lease_api
    LeaderElector(api, "gpumem-scheduler", "pod-a", 30).step(SLOT)
    stale = api.get("gpumem-scheduler")
    api.update("gpumem-scheduler", {**stale, "spec": {**stale["spec"], "renewTime": "2026-12-01T01:00:05.000000Z"}})
    with pytest.raises(StaleObject):
        api.update("gpumem-scheduler", stale)


def test_the_scheduler_runs_on_apscheduler_and_stops_cleanly():
    job = Recorder()
    now = datetime.now(UTC)
    every_minute = Schedule("C1", "* * * * *", "UTC", grace_s=120)
    sched = HandoverScheduler(Store.memory(), [every_minute], job, holder="pod-a", interval_s=3600)
    sched.start()
    try:
        import time

        for _ in range(50):
            if job.calls:
                break
            time.sleep(0.05)
    finally:
        sched.shutdown()
    assert len(job.calls) == 1 and job.calls[0][0] == "C1"
    assert now - timedelta(minutes=1) < job.calls[0][1] <= datetime.now(UTC)  # this minute's slot, on time
    assert job.calls[0][2] is False


@pytest.mark.parametrize(("entry", "message"), [
    ('{cron: "0 9 * * *"}', "schedules.0: each schedule needs a channel"),
    ("{channel: C1}", "schedules.0: each schedule needs a cron"),
    ('{channel: C1, cron: "0 25 * * *"}', "schedules.0.cron: '0 25 * * *' is not a five-field crontab"),
    ('{channel: C1, cron: "0 9 * * *", timezone: Mars/Olympus}', "schedules.0.timezone: 'Mars/Olympus' is not"),
    ('{channel: C1, cron: "0 9 * * *", every: 1}', "every"),
])
def test_a_bad_schedule_is_named_by_file_line_and_field(tmp_path, entry, message):
    from bot.config.settings import SettingsError, load_settings

    config = tmp_path / "gpumem.yaml"
    config.write_text(f"schedules:\n  - {entry}\n")
    with pytest.raises(SettingsError) as e:
        load_settings(config, {})
    assert str(config) in str(e.value) and message in str(e.value)


def test_schedules_default_to_utc_and_an_hour_of_grace(tmp_path):
    from bot.config.settings import load_settings

    config = tmp_path / "gpumem.yaml"
    config.write_text('schedules:\n  - {channel: C1, cron: "30 8 * * 1-5"}\nscheduler: {lease_duration_s: 15}\n')
    settings = load_settings(config, {})
    assert settings.schedules == (Schedule("C1", "30 8 * * 1-5", "UTC", 3600.0),)
    assert settings.scheduler.lease_duration_s == 15 and settings.scheduler.lease_namespace is None
