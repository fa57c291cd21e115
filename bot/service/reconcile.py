"""Plans left `applying` by a process that stopped mid-apply (kill -9, a node gone), settled at
start-up of `gpumem serve`, `gpumem apply` and `gpumem plans` by reading the object: did the
write land? Reads only; nothing is written to the cluster.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.actuator.apply import landed
from bot.store.db import Store
from runbooks.model.errors import Conflict, TargetNotFound

#: the actor of the moves reconciliation makes
RECONCILE_ACTOR = "gpumem-reconcile"
#: a plan `applying` for less than this may be an apply running now in another process: left alone
RECONCILE_AFTER_S = 120.0


@dataclass(frozen=True)
class Reconciled:
    """What start-up made of one plan found `applying`: `applied` (the write is on the object),
    `failed` (it is not), or `unknown` (the object could not be read; the plan stays `applying`)."""

    plan_id: str
    target: str
    outcome: str
    reason: str = ""


def reconcile_applying(store: Store, reader_for: Any, now: datetime | None = None,
                       after_s: float = RECONCILE_AFTER_S) -> list[Reconciled]:
    """Every plan left `applying` (a process killed between the move and the end of its write)
    is settled by reading its object with `reader_for(cluster)` (reads only, nothing is
    written): the values the plan writes there and its plan annotation -> applied; else ->
    failed with the reason. Both moves are audited by `RECONCILE_ACTOR`; an object that cannot be
    read leaves the plan `applying` and records why. Plans that entered `applying` less than
    `after_s` ago are left to the apply that may be running."""
    now = now or datetime.now(UTC)
    out: list[Reconciled] = []
    for stored in store.plans(open_only=True, limit=10_000):
        if stored.state != "applying" or (now - stored.updated_at).total_seconds() < after_s:
            continue
        plan = stored.plan
        t = plan.target
        try:
            obj = reader_for(t.cluster).read(t.kind, t.namespace, t.name)
            reason = landed(plan, obj)
        except TargetNotFound as e:
            obj, reason = None, f"the object is not there: {e}"
        except Exception as e:  # a cluster that cannot answer now: nothing is known, nothing moves
            detail = f"{type(e).__name__}: {e}"[:300]
            store.record("reconcile", actor=RECONCILE_ACTOR, now=now,
                         detail={"plan": plan.id, "outcome": "unknown", "reason": detail})
            out.append(Reconciled(plan.id, str(t), "unknown", detail))
            continue
        meta = (obj or {}).get("metadata") or {}
        try:
            if reason is None:
                store.move(plan.id, "applied", actor=RECONCILE_ACTOR, expect="applying", now=now,
                           detail={"reconciled": True, "resource_version": meta.get("resourceVersion"),
                                   "generation": meta.get("generation")})
                out.append(Reconciled(plan.id, str(t), "applied"))
            else:
                store.move(plan.id, "failed", actor=RECONCILE_ACTOR, expect="applying", now=now,
                           detail={"reconciled": True, "error": "not_applied", "reason": reason[:300]})
                out.append(Reconciled(plan.id, str(t), "failed", reason))
        except Conflict:  # the apply it was waiting for moved it meanwhile
            continue
    return out


def cli_reader_for(args: argparse.Namespace, settings: Any) -> Callable[[str | None], Any]:
    """What the CLI reads a plan's object with: the cluster the config names for the plan (its
    kubeconfig and context), else the command's --kubeconfig / --context (the operator's own)."""
    from bot.service.remediate import writer_for

    made: dict[str | None, Any] = {}

    def reader(cluster: str | None) -> Any:
        if cluster not in made:
            configured = settings.cluster(cluster)
            kubeconfig = getattr(args, "kubeconfig", None) or (configured.kubeconfig if configured else None)
            if cluster is None:
                context = getattr(args, "context", None) or (configured.context if configured else None)
            else:
                context = configured.context if configured else cluster
            made[cluster] = writer_for(kubeconfig, context)
        return made[cluster]

    return reader


def reconcile_for_cli(args: argparse.Namespace, store: Store) -> list[Reconciled]:
    """`gpumem apply` and `gpumem plans` start with this: the plans left `applying`, settled."""
    import os

    from bot.service.settings import load_settings

    if not any(p.state == "applying" for p in store.plans(open_only=True, limit=10_000)):
        return []
    settings = load_settings(getattr(args, "config", None), os.environ)
    return reconcile_applying(store, cli_reader_for(args, settings))
