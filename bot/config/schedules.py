"""The config's `schedules:` and `scheduler:` sections: when each channel gets its handover.

    schedules:
      - channel: C0123ABCD                 # the Slack channel id
        cron: "0 9,21 * * *"               # five-field crontab, in `timezone`
        timezone: Asia/Shanghai            # IANA name (default UTC)
        grace_s: 3600                      # a bot down at the slot posts it late within this
    scheduler:
      election: auto                       # lease | file | auto (lease when a namespace is known)
      lease_name: gpumem-scheduler         # the coordination.k8s.io/v1 Lease only the leader holds
      lease_namespace: gpumem              # default: $POD_NAMESPACE
      lease_duration_s: 30                 # a standby takes over this long after the last renewal
      lock_path: /var/lib/gpumem/scheduler.lock   # election: file; default: store.path + ".lock"
      interval_s: 30                       # how often the leader checks the schedules
      review_after_s: 43200                # a stop-gap's review reminder fires this long after it was applied
      review_channel: C0123ABCD            # where reminders of plans made outside Slack go (default:
                                           # the first schedule's channel)

`election: auto` takes the Lease when the bot runs in a pod (KUBERNETES_SERVICE_HOST) or a
namespace for it is known (`lease_namespace`, $POD_NAMESPACE); otherwise, on a laptop, a file
lock next to the store.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from bot.config.yaml_io import YamlDoc


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
        # lazy: APScheduler's cron trigger costs ~170 ms (-X importtime); only a scheduler that runs pays it, not every settings load
        from apscheduler.triggers.cron import CronTrigger

        return CronTrigger.from_crontab(self.cron, timezone=ZoneInfo(self.timezone))


#: how the one instance that runs jobs is chosen
ELECTIONS = ("auto", "lease", "file")


@dataclass(frozen=True)
class SchedulerSettings:
    lease_name: str = "gpumem-scheduler"
    lease_namespace: str | None = None
    lease_duration_s: int = 30
    interval_s: float = 30.0
    #: "auto", "lease" or "file" (see the module docstring)
    election: str = "auto"
    #: the file lock's path for `election: file` (None: next to the store)
    lock_path: str | None = None
    #: a stop-gap's review is due this long after it was applied
    review_after_s: float = 43200.0
    #: where reminders go for plans that name no channel (None: the first schedule's channel)
    review_channel: str | None = None
    #: the bot runs in a pod (KUBERNETES_SERVICE_HOST is set): the Lease uses its service account
    in_cluster: bool = False

    def uses_lease(self) -> bool:
        """Whether the Lease elects the leader (else the file lock)."""
        if self.election != "auto":
            return self.election == "lease"
        return self.in_cluster or self.lease_namespace is not None


def schedules_settings(doc: YamlDoc) -> tuple[Schedule, ...]:
    """Each `schedules:` entry, checked: a channel id, a valid crontab, a known time zone."""
    # lazy: APScheduler's cron trigger costs ~170 ms (-X importtime), paid only where a schedule is checked
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


def scheduler_settings(doc: YamlDoc, environ: Mapping[str, str], base: Path | None = None) -> SchedulerSettings:
    at = ("scheduler",)
    doc.only_keys(at, ("election", "lease_name", "lease_namespace", "lease_duration_s", "lock_path", "interval_s",
                       "review_after_s", "review_channel"))
    ints = doc.ints(at, SchedulerSettings(), only=("lease_duration_s",))
    floats = doc.floats(at, SchedulerSettings(), only=("interval_s", "review_after_s"))
    election = doc.opt_str((*at, "election")) or "auto"
    doc.check_choice((*at, "election"), election, ELECTIONS)
    namespace = doc.opt_str((*at, "lease_namespace")) or environ.get("POD_NAMESPACE") or None
    in_cluster = bool(environ.get("KUBERNETES_SERVICE_HOST"))
    if election == "lease" and namespace is None and not in_cluster:
        doc.fail((*at, "election"), "the Lease needs a namespace: set scheduler.lease_namespace or $POD_NAMESPACE")
    lock = doc.opt_str((*at, "lock_path"))
    review_channel = doc.opt_str((*at, "review_channel"))
    if review_channel is not None and review_channel[:1] not in ("C", "G"):
        doc.fail((*at, "review_channel"), f"{review_channel!r} is not a Slack channel id (C...)")
    return SchedulerSettings(lease_name=doc.opt_str((*at, "lease_name")) or "gpumem-scheduler",
                             lease_namespace=namespace,
                             lease_duration_s=ints.get("lease_duration_s", 30),
                             interval_s=floats.get("interval_s", 30.0),
                             election=election,
                             lock_path=str((base or Path.cwd()) / os.path.expanduser(lock)) if lock else None,
                             review_after_s=floats.get("review_after_s", 43200.0),
                             review_channel=review_channel,
                             in_cluster=in_cluster)
