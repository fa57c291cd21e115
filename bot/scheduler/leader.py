"""Leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection does it.

`LeaderElector.step(now)` is one round: take the Lease when there is none, when it is ours
(renew), or when its holder stopped renewing for `leaseDurationSeconds` (take over, one more
`leaseTransitions`); otherwise follow. A write that loses a race (409) means someone else won.
`release()` on shutdown empties the holder so a standby takes over at once instead of after
the duration. The clock is passed in, so tests move time by hand.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from runbooks.model.errors import Conflict, GpumemError

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

    def step(self, now: datetime | None = None) -> bool:
        """One election round; whether this instance leads now."""
        now = now or datetime.now(UTC)
        try:
            self.leader = self._step(now)
        except Conflict:
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
