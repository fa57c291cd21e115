"""The config's `schedules:` and `scheduler:` sections: when each channel gets its handover.

    schedules:
      - channel: C0123ABCD                 # the Slack channel id
        cron: "0 9,21 * * *"               # five-field crontab, in `timezone`
        timezone: Asia/Shanghai            # IANA name (default UTC)
        grace_s: 3600                      # a bot down at the slot posts it late within this
    scheduler:
      lease_name: gpumem-scheduler         # the coordination.k8s.io/v1 Lease only the leader holds
      lease_namespace: gpumem              # default: $POD_NAMESPACE
      lease_duration_s: 30                 # a standby takes over this long after the last renewal
      interval_s: 30                       # how often the leader checks the schedules
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.service.settings_yaml import YamlDoc


@dataclass(frozen=True)
class Schedule:
    """One channel's handover schedule."""

    channel: str
    cron: str
    timezone: str = "UTC"
    #: a slot missed by up to this long is still posted, marked late
    grace_s: float = 3600.0
    #: within this long after the slot a post counts as on time
    on_time_s: float = 120.0

    def trigger(self):
        """The APScheduler 3.x CronTrigger of `cron` in `timezone`."""
        from apscheduler.triggers.cron import CronTrigger

        return CronTrigger.from_crontab(self.cron, timezone=ZoneInfo(self.timezone))


@dataclass(frozen=True)
class SchedulerSettings:
    lease_name: str = "gpumem-scheduler"
    lease_namespace: str | None = None
    lease_duration_s: int = 30
    interval_s: float = 30.0


def schedules_settings(doc: YamlDoc) -> tuple[Schedule, ...]:
    """Each `schedules:` entry, checked: a channel id, a valid crontab, a known time zone."""
    from apscheduler.triggers.cron import CronTrigger

    found = []
    for i in range(doc.list_len(("schedules",))):
        at = ("schedules", i)
        doc.only_keys(at, ("channel", "cron", "timezone", "grace_s"))
        channel = doc.opt_str((*at, "channel"))
        if not channel:
            doc.fail(at, "each schedule needs a channel (the Slack channel id, C...)")
        cron = doc.opt_str((*at, "cron"))
        if not cron:
            doc.fail(at, 'each schedule needs a cron, e.g. "0 9,21 * * *"')
        zone = doc.opt_str((*at, "timezone")) or "UTC"
        try:
            tz = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            doc.fail((*at, "timezone"), f"{zone!r} is not an IANA time zone (e.g. Asia/Shanghai, UTC)")
        try:
            CronTrigger.from_crontab(str(cron), timezone=tz)
        except ValueError as e:
            doc.fail((*at, "cron"), f"{cron!r} is not a five-field crontab: {e}")
        grace = doc.floats(at, Schedule("", ""), only=("grace_s",)).get("grace_s", 3600.0)
        if grace <= 0:
            doc.fail((*at, "grace_s"), "the grace must be positive")
        found.append(Schedule(str(channel), str(cron), zone, grace_s=grace))
    channels = [s.channel for s in found]
    for channel in {c for c in channels if channels.count(c) > 1}:
        doc.fail(("schedules",), f"{channel} is scheduled twice; give it one cron with several hours")
    return tuple(found)


def scheduler_settings(doc: YamlDoc, environ: Mapping[str, str]) -> SchedulerSettings:
    at = ("scheduler",)
    doc.only_keys(at, ("lease_name", "lease_namespace", "lease_duration_s", "interval_s"))
    ints = doc.ints(at, SchedulerSettings(), only=("lease_duration_s",))
    floats = doc.floats(at, SchedulerSettings(), only=("interval_s",))
    return SchedulerSettings(lease_name=doc.opt_str((*at, "lease_name")) or "gpumem-scheduler",
                             lease_namespace=doc.opt_str((*at, "lease_namespace")) or environ.get("POD_NAMESPACE"),
                             lease_duration_s=ints.get("lease_duration_s", 30),
                             interval_s=floats.get("interval_s", 30.0))
