"""Plans left `applying` by a process that stopped mid-apply (kill -9, a node gone) or by a write
whose outcome nobody could read (OutcomeUnknown: the answer was lost and the object could not be
read again), settled by reading the object: did the write land? At start-up of `gpumem serve`,
`gpumem apply` and `gpumem plans`, and every minute on the running bot's scheduler leader
(`bot.slack.plan_notices.PlanNotices.settle`). A rollback whose outcome was unknown is settled
the same way (did the old values come back?). Reads only; nothing is written to the cluster.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.grammar.requests import ApplyRequest, PlansRequest
from bot.service.deps import Deps
from bot.store.db import Store, StoredPlan
from runbooks.model.errors import IN_FLIGHT_S, PlanMoved, StaleObject, TargetNotFound
from runbooks.model.phrases import Phrase, phrase_json
from runbooks.remediation.plan import Plan
from runbooks.remediation.split import CREATE_OBJECTS

#: a plan that creates its object (`bot.actuator.writer.CREATE`, the same string: the writer
#: module brings the Kubernetes client, which a reconcile pass with nothing to settle never needs)
CREATE = "create"

#: the actor of the moves reconciliation makes
RECONCILE_ACTOR = "gpumem-reconcile"
#: a plan `applying` for less than this may be an apply running now in another process: left alone
RECONCILE_AFTER_S = 120.0
#: the audit events after which no apply or rollback is running any more: the outcome is the
#: reconcile pass's to read, at once (`bot.service.remediate`)
APPLY_UNKNOWN = "outcome_unknown"
ROLLBACK_UNKNOWN = "rollback_outcome_unknown"
#: what closes a ROLLBACK_UNKNOWN row: the pass read it and the rollback had not landed
ROLLBACK_SETTLED = "rollback_settled"


@dataclass(frozen=True)
class Reconciled:
    """What a pass made of one plan found `applying`: `applied` (the write is on the object),
    `failed` (it is not), `partly_applied` (a pool split's phase 1 with some of its objects
    there: failed, and its rollback deletes them), or `unknown` (the object could not be read;
    the plan stays `applying`);
    of a rollback whose outcome was unknown: `rolled_back` (the old values are back),
    `rollback_not_applied` (gpumem's values are still there; the plan keeps its state), or
    `unknown`. `rollback` says which of the two it was."""

    plan_id: str
    target: str
    outcome: str
    #: why: a `Phrase` (what the re-read found), or the read's own error text
    reason: Phrase | str = ""
    rollback: bool = False


def landed_on(plan: Plan, current: dict[str, Any]) -> Phrase | None:
    """None when `plan`'s write is on `current`: the values it writes and its annotation (a
    JSON patch), or the object it created (a `create` plan: its annotation); else why not."""
    from bot.actuator.apply import created_by, landed  # only with a plan to settle: see CREATE

    return created_by(plan, current) if plan.patch_type == CREATE else landed(plan, current)


def _pending(store: Store, stored: StoredPlan) -> str | None:
    """The last unknown outcome recorded on the plan since its last move (APPLY_UNKNOWN,
    ROLLBACK_UNKNOWN), None when there is none."""
    for row in reversed(store.plan_audit(stored.plan.id)):
        if row.to_state is not None or row.event == ROLLBACK_SETTLED:
            return None
        if row.event in (APPLY_UNKNOWN, ROLLBACK_UNKNOWN):
            return row.event
    return None


def _may_still_land(store: Store, plan_id: str, now: datetime) -> bool:
    """True while the last unknown outcome recorded on the plan is of a write no answer came for
    (`in_flight`) and is younger than IN_FLIGHT_S: the API server may still be at work on it, so
    not finding the change is no proof yet (finding it is)."""
    for row in reversed(store.plan_audit(plan_id)):
        if row.to_state is not None or row.event == ROLLBACK_SETTLED:
            return False
        if row.event in (APPLY_UNKNOWN, ROLLBACK_UNKNOWN):
            return row.detail.get("in_flight") == "yes" and (now - row.at).total_seconds() < IN_FLIGHT_S
    return False


def _last_unknown(store: Store, plan_id: str) -> Any:
    """The reason of the last `reconcile` row, as stored (a phrase as its JSON), when it was an
    unknown outcome (not repeated)."""
    rows = store.plan_audit(plan_id)
    last = rows[-1] if rows else None
    if last is not None and last.event == "reconcile" and last.detail.get("outcome") == "unknown":
        return last.detail.get("reason") or ""
    return None


def reconcile_applying(store: Store, reader_for: Any, now: datetime | None = None,
                       after_s: float = RECONCILE_AFTER_S) -> list[Reconciled]:
    """Every plan left `applying` (a process killed between the move and the end of its write,
    or a write whose outcome was unknown) is settled by reading its object with
    `reader_for(cluster)` (reads only, nothing is written): the values the plan writes there and
    its plan annotation -> applied; else -> failed with the reason. Both moves are audited by
    `RECONCILE_ACTOR`; an object that cannot be read leaves the plan `applying` and records why
    (once per reason). Plans that entered `applying` less than `after_s` ago are left to the
    apply that may be running, unless that apply recorded its outcome as unknown (it is over).
    A rollback recorded as unknown is settled too (`_settle_rollback`)."""
    now = now or datetime.now(UTC)
    out: list[Reconciled] = []
    for stored in store.plans(open_only=True, limit=10_000):
        pending = _pending(store, stored)
        if pending == ROLLBACK_UNKNOWN and stored.state in ("applied", "watched", "failed"):
            done = _settle_rollback(store, reader_for, stored, now)
            if done is not None:
                out.append(done)
            continue
        # an apply that recorded its unknown outcome is over: no need to wait for it
        if stored.state != "applying" or (
                pending != APPLY_UNKNOWN and (now - stored.updated_at).total_seconds() < after_s):
            continue
        plan = stored.plan
        t = plan.target
        if plan.patch_type == CREATE_OBJECTS:  # a pool split's phase 1: each object it creates
            _settle_split(store, reader_for, plan, now, out)
            continue
        obj = _read(store, reader_for, plan, now, out)
        if obj is _UNREAD:
            continue
        reason = Phrase("reason.object_gone", {"target": str(t)}) if obj is None else landed_on(plan, obj)
        if reason is not None and _may_still_land(store, plan.id, now):
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
                           detail={"reconciled": True, "error": "not_applied", "reason": reason})
                out.append(Reconciled(plan.id, str(t), "failed", reason))
        except PlanMoved:  # the apply it was waiting for moved it meanwhile
            continue
    return out


def _settle_split(store: Store, reader_for: Any, plan: Plan, now: datetime, out: list[Reconciled]) -> None:
    """A pool split's phase 1 left `applying`, settled as its apply settles a lost answer
    (`bot.actuator.split_apply.read_created`): every object there -> applied; none -> failed;
    some -> failed with `partly_applied` (its Roll back deletes what exists); unreadable ->
    unknown, the plan stays `applying`."""
    from bot.actuator.apply import read_failure  # only with a plan to settle: see CREATE
    from bot.actuator.split_apply import read_created

    t = plan.target
    try:
        found = read_created(reader_for(t.cluster), plan)
    except Exception as e:  # a cluster that cannot answer now: nothing is known, nothing moves
        _unknown(store, plan, now, out, read_failure(e))
        return
    if found.outcome != "applied" and _may_still_land(store, plan.id, now):
        return
    try:
        if found.outcome == "applied":
            meta = (found.objects.get("Deployment") or {}).get("metadata") or {}
            store.move(plan.id, "applied", actor=RECONCILE_ACTOR, expect="applying", now=now,
                       detail={"reconciled": True, "resource_version": meta.get("resourceVersion"),
                               "generation": meta.get("generation")})
            out.append(Reconciled(plan.id, str(t), "applied"))
        elif found.outcome == "not_applied":
            store.move(plan.id, "failed", actor=RECONCILE_ACTOR, expect="applying", now=now,
                       detail={"reconciled": True, "error": "not_applied", "reason": found.proof()})
            out.append(Reconciled(plan.id, str(t), "failed", found.proof()))
        else:
            store.move(plan.id, "failed", actor=RECONCILE_ACTOR, expect="applying", now=now,
                       detail={"reconciled": True, "error": "split_partly_applied", "created": ", ".join(found.there),
                               "missing": found.missing(), "reason": found.proof()})
            out.append(Reconciled(plan.id, str(t), "partly_applied", found.proof()))
    except PlanMoved:  # the apply it was waiting for moved it meanwhile
        return


#: `_read`'s answer when the object could not be read
_UNREAD: Any = object()


def _read(store: Store, reader_for: Any, plan: Plan, now: datetime, out: list[Reconciled],
          rollback: bool = False) -> Any:
    """The plan's object (None: not there), or _UNREAD after recording why it could not be read
    (once per reason: a pass every minute does not repeat the same row)."""
    from bot.actuator.apply import read_failure  # only with a plan to settle: see CREATE

    t = plan.target
    try:
        return reader_for(t.cluster).read(t.kind, t.namespace, t.name)
    except TargetNotFound:
        return None
    except Exception as e:  # a cluster that cannot answer now: nothing is known, nothing moves
        _unknown(store, plan, now, out, read_failure(e), rollback)
        return _UNREAD


def _unknown(store: Store, plan: Plan, now: datetime, out: list[Reconciled], detail: Phrase | str,
             rollback: bool = False) -> None:
    """Nothing is known: a `reconcile` row saying why (unless the last one said the same)."""
    if _last_unknown(store, plan.id) != phrase_json(detail):
        store.record("reconcile", actor=RECONCILE_ACTOR, now=now,
                     detail={"plan": plan.id, "outcome": "unknown", "reason": detail, "rollback": rollback})
    out.append(Reconciled(plan.id, str(plan.target), "unknown", detail, rollback))


def _settle_rollback(store: Store, reader_for: Any, stored: StoredPlan, now: datetime) -> Reconciled | None:
    """A rollback whose outcome was unknown: the old values back -> rolled_back; gpumem's still
    there -> a ROLLBACK_SETTLED row (the plan keeps its state and its Roll back)."""
    from bot.actuator.apply import read_failure, restored_on  # only with a plan to settle: see CREATE
    from bot.actuator.split_apply import read_created

    plan = stored.plan
    t = plan.target
    out: list[Reconciled] = []
    if plan.patch_type == CREATE_OBJECTS:  # a pool split's phase 1: rolled back when none of its objects is left
        try:
            found = read_created(reader_for(t.cluster), plan)
        except Exception as e:
            _unknown(store, plan, now, out, read_failure(e), rollback=True)
            return out[0]
        why = None if not found.there else Phrase("reason.created_still_there", {"objects": ", ".join(found.there)})
    else:
        obj = _read(store, reader_for, plan, now, out, rollback=True)
        if obj is _UNREAD:
            return out[0]
        try:
            if plan.patch_type == CREATE:
                why = None if obj is None else Phrase("reason.created_object_still_there")
            else:
                why = Phrase("reason.object_gone", {"target": str(t)}) if obj is None else restored_on(plan, obj)
        except StaleObject as e:  # neither the old values nor gpumem's: someone else changed them
            rows = e.params.get("differences") or ()
            why = Phrase("reason.neither", {"paths": ", ".join(str(r.get("path")) for r in rows if isinstance(r, dict))[:300]})
    if why is not None and _may_still_land(store, plan.id, now):
        return None
    if why is None:
        try:
            store.move(plan.id, "rolled_back", actor=RECONCILE_ACTOR, expect=stored.state, now=now,
                       detail={"reconciled": True})
        except PlanMoved:
            return None
        return Reconciled(plan.id, str(t), "rolled_back", rollback=True)
    store.record(ROLLBACK_SETTLED, actor=RECONCILE_ACTOR, now=now,
                 detail={"plan": plan.id, "outcome": "rollback_not_applied", "reason": why})
    return Reconciled(plan.id, str(t), "rollback_not_applied", why, rollback=True)


def cli_reader_for(args: PlansRequest | ApplyRequest, settings: Any) -> Callable[[str | None], Any]:
    """What the CLI reads a plan's object with: the cluster the config names for the plan (its
    kubeconfig and context), else the command's --kubeconfig / --context (the operator's own)."""
    # lazy: the remediation desk (~120 ms with -X importtime after this module) is paid by the
    # verbs that read a plan's live object, not by every reconcile
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


def reconcile_for_cli(args: PlansRequest | ApplyRequest, store: Store, deps: Deps) -> list[Reconciled]:
    """`gpumem apply` and `gpumem plans` start with this: the plans left `applying` (and the
    rollbacks whose outcome was unknown), settled."""
    if not any(p.state == "applying" or _pending(store, p) == ROLLBACK_UNKNOWN
               for p in store.plans(open_only=True, limit=10_000)):
        return []
    return reconcile_applying(store, cli_reader_for(args, deps.settings))
