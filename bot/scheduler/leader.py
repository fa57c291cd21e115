"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it;
without Kubernetes, a file lock (`FileLockElector`).

`LeaderElector.step(now)` is one round: take the Lease when there is none, when it is ours
(renew), or when its holder stopped renewing for `leaseDurationSeconds` (take over, one more
`leaseTransitions`); otherwise follow. A write that loses a race (409) means someone else won.
`release()` on shutdown empties the holder so a standby takes over at once instead of after
the duration. The clock is passed in, so tests move time by hand.
"""

from __future__ import annotations

import fcntl
import logging
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

from runbooks.model.errors import GpumemError, StaleObject

log = logging.getLogger(__name__)


class LeaseApi(Protocol):
    def get(self, name: str) -> dict[str, Any] | None: ...
    def create(self, body: dict[str, Any]) -> dict[str, Any]: ...
    def update(self, name: str, body: dict[str, Any]) -> dict[str, Any]: ...


def micro_time(at: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 with microseconds, in UTC.

    >>> micro_time(datetime(2026, 12, 1, 9, 0, tzinfo=UTC))
    '2026-12-01T09:00:00.000000Z'
    """
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_time(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


class LeaderElector:
    """Holds (or follows) one Lease as `identity` (the pod name)."""

    def __init__(self, api: LeaseApi, name: str, identity: str, duration_s: int = 30):
        self.api = api
        self.name = name
        self.identity = identity
        self.duration_s = duration_s
        self.leader = False

    @property
    def renew_s(self) -> float:
        """How often the holder renews: a third of the duration, so one missed round is not a takeover."""
        return max(1.0, self.duration_s / 3)

    def step(self, now: datetime | None = None) -> bool:
        """One election round; whether this instance leads now."""
        now = now or datetime.now(UTC)
        try:
            self.leader = self._step(now)
        except StaleObject:
            self.leader = False  # another instance wrote first
        except (GpumemError, OSError, ValueError) as e:
            # the API server cannot be reached: a leader that cannot renew stops leading, as a
            # standby would take over after the duration anyway
            log.warning("lease %s: %s", self.name, e)
            self.leader = False
        return self.leader

    def _spec(self, now: datetime, current: dict[str, Any], taking: bool) -> dict[str, Any]:
        spec = dict(current)
        if taking:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(current.get("leaseTransitions") or 0) + (1 if current.get("holderIdentity")
                                                                                   else 0)
        spec.update(holderIdentity=self.identity, leaseDurationSeconds=self.duration_s, renewTime=micro_time(now))
        return spec

    def _step(self, now: datetime) -> bool:
        lease = self.api.get(self.name)
        if lease is None:
            self.api.create({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                             "metadata": {"name": self.name},
                             "spec": self._spec(now, {"leaseTransitions": 0}, taking=True)})
            return True
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity")
        if holder == self.identity:
            lease["spec"] = self._spec(now, spec, taking=False)
            self.api.update(self.name, lease)
            return True
        renewed = parse_time(spec.get("renewTime")) or parse_time(spec.get("acquireTime"))
        duration = timedelta(seconds=int(spec.get("leaseDurationSeconds") or self.duration_s))
        if holder and renewed is not None and now < renewed + duration:
            return False  # someone else holds it and keeps renewing
        lease["spec"] = self._spec(now, spec, taking=True)
        self.api.update(self.name, lease)
        return True

    def release(self, now: datetime | None = None) -> bool:
        """Give the Lease up (shutdown): empty holder, so a standby takes it on its next round.
        Whether it was ours to release."""
        now = now or datetime.now(UTC)
        try:
            lease = self.api.get(self.name)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            spec = dict(lease["spec"])
            spec.update(holderIdentity=None, renewTime=micro_time(now), leaseDurationSeconds=1)
            lease["spec"] = spec
            self.api.update(self.name, lease)
            return True
        except (GpumemError, OSError, ValueError) as e:
            log.warning("lease %s: release failed: %s", self.name, e)
            return False
        finally:
            self.leader = False


class FileLockElector:
    """The Lease's stand-in without Kubernetes (a laptop, one host): an exclusive `flock` on a
    file next to the store. The holder keeps the file open; the kernel lets go of the lock when
    the process ends, however it ends, so a standby takes over on its next round. Same
    interface as `LeaderElector` (`identity`, `leader`, `step`, `release`)."""

    #: a lock has no renewals to schedule
    renew_s: float | None = None

    def __init__(self, path: str | os.PathLike[str], identity: str):
        self.path = Path(path)
        self.identity = identity
        self.leader = False
        self._fd: int | None = None

    def step(self, now: datetime | None = None) -> bool:
        """One round: hold the lock when it is free (or already ours); whether this instance leads."""
        if self._fd is not None:
            self.leader = True
            return True
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as e:
            log.warning("scheduler lock %s: %s", self.path, e)
            self.leader = False
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held by another instance (BlockingIOError), or a file system without locks
            os.close(fd)
            self.leader = False
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{self.identity}\n".encode())
        self._fd = fd
        self.leader = True
        return True

    def holder(self) -> str | None:
        """Who wrote the lock file last (the holder while it is locked)."""
        try:
            return self.path.read_text().strip() or None
        except OSError:
            return None

    def release(self, now: datetime | None = None) -> bool:
        """Let go of the lock (shutdown); whether it was held."""
        fd, self._fd = self._fd, None
        self.leader = False
        if fd is None:
            return False
        try:
            os.ftruncate(fd, 0)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
        return True
