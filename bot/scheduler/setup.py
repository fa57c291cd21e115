"""The scheduler `gpumem serve` runs: built from the settings, with its own store connection and
its leader election, the posting injected by the layer above (`bot.main` gives the Slack side's
`post_handover`, `post_review` and the plan expiry sweep).

- `election: lease` (or `auto` in a pod, or with `lease_namespace` / $POD_NAMESPACE): the
  coordination.k8s.io/v1 Lease `lease_name` in that namespace, through the pod's service account
  in a pod, else the default cluster of the config (its kubeconfig and context);
- `election: file` (or `auto` elsewhere): an exclusive lock on `lock_path`, by default the store's
  file name plus `.lock` (the instances that share a store share the lock).

Nothing starts without `store.path`: each slot and reminder is claimed in the store. With
remediation enabled (and a store), the scheduler runs for the expiry sweep alone when there are
no schedules.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bot.config.settings import Settings, SettingsError
from bot.scheduler.leader import FileLockElector, LeaderElector
from bot.scheduler.runner import HandoverScheduler, Job, Remind, Sweep, default_identity
from bot.store.db import Store

log = logging.getLogger(__name__)

#: where a pod's service account says which namespace it runs in
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def wanted(settings: Settings) -> bool:
    """Whether this config asks for the scheduler: schedules, or a channel for review reminders."""
    return bool(settings.schedules or settings.scheduler.review_channel)


def sweeps_expiry(settings: Settings) -> bool:
    """Whether this config has plans to expire: remediation enabled, with the bot's store."""
    return bool(settings.remediation.enabled and settings.store.path)


def review_channel(settings: Settings) -> str | None:
    """Where reminders of plans made outside Slack go."""
    if settings.scheduler.review_channel:
        return settings.scheduler.review_channel
    return settings.schedules[0].channel if settings.schedules else None


def lease_namespace(settings: Settings) -> str:
    s = settings.scheduler
    if s.lease_namespace:
        return s.lease_namespace
    try:
        found = SERVICE_ACCOUNT_NAMESPACE.read_text().strip() if s.in_cluster else ""
    except OSError:
        found = ""
    if not found:
        raise SettingsError("scheduler.lease_namespace: the Lease needs a namespace: set it, or $POD_NAMESPACE")
    return found


def make_elector(settings: Settings, identity: str) -> LeaderElector | FileLockElector:
    """The Lease or the file lock, as the settings say (see the module docstring)."""
    s = settings.scheduler
    if not s.uses_lease():
        if not (s.lock_path or settings.store.path):
            raise SettingsError("scheduler.lock_path: the file lock needs a path (or store.path, beside which it goes)")
        return FileLockElector(s.lock_path or f"{settings.store.path}.lock", identity)
    # lazy: the lease client pulls in the Kubernetes client (~650 ms, -X importtime), paid only where the lease elects the leader
    from bot.service.lease import lease_client

    namespace = lease_namespace(settings)
    cluster = settings.cluster(None)
    api = lease_client(namespace, None if s.in_cluster else (cluster.kubeconfig if cluster else None),
                       None if s.in_cluster or cluster is None else cluster.context, in_cluster=s.in_cluster)
    return LeaderElector(api, s.lease_name, identity, s.lease_duration_s)


def scheduler_from_settings(settings: Settings, job: Job, remind: Remind | None = None, *,
                            sweep: Sweep | None = None, identity: str | None = None,
                            clock: Callable[[], datetime] = lambda: datetime.now(UTC),
                            settle: Sweep | None = None, settle_every_s: float = 60.0) -> HandoverScheduler | None:
    """The scheduler of this deployment, not started (None when the config asks for none).
    `sweep` is run every `remediation.expiry_sweep_s` and `settle` (the reconcile pass of plans
    left applying) every `settle_every_s` where `sweeps_expiry` (else both dropped). Raises
    SettingsError naming the field when it cannot be built."""
    sweep = sweep if sweeps_expiry(settings) else None
    settle = settle if sweeps_expiry(settings) else None
    posts = wanted(settings)
    if not posts and sweep is None:
        return None
    if not settings.store.path:
        raise SettingsError("store.path: schedules need the bot's store (each slot is claimed there before it is "
                            "posted)")
    identity = identity or default_identity()
    elector = make_elector(settings, identity)
    store = Store.open(settings.store.path)
    reviews = None
    if remind is not None and posts:
        # lazy: the review reader and its store queries (~1 s with the service layer, -X importtime) are paid by the first sweep
        from bot.service.reviews import due_reviews

        channel = review_channel(settings)
        after = settings.scheduler.review_after_s

        def reviews(now: datetime) -> list[Any]:
            return due_reviews(store, now, review_after_s=after, default_channel=channel)

    every = settings.remediation.expiry_sweep_s
    log.info("scheduler: %d schedule(s)%s%s, leader election by %s as %s", len(settings.schedules),
             f", the plan expiry sweep every {every:g} s" if sweep is not None else "",
             f", the reconcile pass every {settle_every_s:g} s" if settle is not None else "",
             "Lease" if isinstance(elector, LeaderElector) else f"file lock {elector.path}", identity)
    return HandoverScheduler(store, settings.schedules, job, elector=elector, interval_s=settings.scheduler.interval_s,
                             clock=clock, reviews=reviews, remind=remind, on_shutdown=store.close, sweep=sweep,
                             sweep_every_s=every, settle=settle, settle_every_s=settle_every_s)
