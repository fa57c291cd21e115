"""The writes of a pool split's phase 1: create `<name>-long` (Deployment, then Service), and
delete them again on rollback, with the same guards as a patch (`bot.actuator.apply`):

1. the original Deployment and Service are read again and must be the versions the plan was
   made against (same uid and resourceVersion; ChangedSincePlanned);
2. the plan stores the clones with every credential masked, never their values
   (`runbooks.remediation.split.stored_ops`): the clones are rebuilt from the originals just
   read, the original's credentials included, and sent only when they mask to exactly what the
   plan stores (StaleObject `split_clone_mismatch`, naming the paths, never their values);
3. neither object may exist yet (StaleObject `split_exists`, nothing written): gpumem never
   adopts, overwrites or renames something someone else made;
4. a server-side dry run of both creates must pass before the first real one.

A rollback deletes only what this plan created (its `gpumem.io/plan` annotation) and only if
every value gpumem sent still reads the same and the Deployment's spec was not changed since
(generation 1); otherwise it refuses with the differences (SplitChangedAfterApply).
Both sides are compared masked, so a difference never quotes a credential.
Each DELETE carries the uid and resourceVersion just read as preconditions, so an object
replaced or changed in between is a 409 and a refusal, not a deletion.

A create or delete whose answer does not settle it (OutcomeUnknown) is settled by reading each
object again (`read_created`: by name, carrying this plan's `gpumem.io/plan` annotation, values
compared masked): the one just sent there -> the next create goes on, and all there is
applied (`Written.unclear` says why they were read); none -> TemporaryError `not_applied`
(nothing was written, the re-read shows it); some ->
PartlyApplied (`split_partly_applied`) naming which (the plan fails, and its rollback deletes what
exists); an object that cannot be read -> OutcomeUnknown with `reread`, for a later pass
(`bot.service.reconcile`, which settles with the same function). A delete likewise: gone ->
deleted, the next one goes on; still there -> TemporaryError `rollback_not_applied` (or
`split_partly_rolled_back` when the Service was deleted before it: Roll back deletes the rest).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bot.actuator.apply import (
    CAUSE_ANNOTATION,
    PLAN_ANNOTATION,
    Written,
    check_unchanged,
    lost_reason,
    read_failure,
    still_in_flight,
)
from bot.actuator.writer import KubeWriter
from runbooks.model.errors import (
    ChangedSincePlanned,
    OutcomeUnknown,
    PartlyApplied,
    SplitChangedAfterApply,
    StaleObject,
    TargetNotFound,
    TemporaryError,
    UsageError,
)
from runbooks.model.phrases import Phrase
from runbooks.remediation import split
from runbooks.remediation.edits.reader import ContainerReader
from runbooks.remediation.edits.split_clones import build_clones
from runbooks.remediation.plan import Plan
from runbooks.remediation.split import CREATE_OBJECTS, leaf_differences, masked

#: how many times a delete refused for a resourceVersion that moved (a controller's status
#: update) is checked again and retried
_DELETE_TRIES = 3


def _creates(plan: Plan) -> list[dict[str, Any]]:
    if plan.patch_type != CREATE_OBJECTS:
        raise UsageError("patch_type_unsupported", patch_type=plan.patch_type)
    return [op for op in plan.patch if op.get("op") == "create"]


def existing(writer: KubeWriter, namespace: str, ops: list[dict[str, Any]]) -> list[str]:
    """`Kind/name` of each object to create that exists already."""
    found = []
    for op in ops:
        try:
            writer.read(op["kind"], namespace, op["name"])
        except TargetNotFound:
            continue
        found.append(f"{op['kind']}/{op['name']}")
    return found


def _annotated(body: dict[str, Any], plan: Plan, cause: str) -> dict[str, Any]:
    out = copy.deepcopy(body)
    annotations = out.setdefault("metadata", {}).setdefault("annotations", {})
    annotations[PLAN_ANNOTATION] = plan.id
    annotations[CAUSE_ANNOTATION] = cause[:256]
    return out


def _rebuilt(writer: KubeWriter, plan: Plan, ops: list[dict[str, Any]], original: dict[str, Any],
             reader: ContainerReader) -> list[dict[str, Any]]:
    """The objects to create, rebuilt from the sources read now (credentials included), each
    checked to mask to exactly what the plan stores. A plan stored before plans kept masked
    clones carries its objects whole, and they are sent as stored."""
    if not all("source" in op and "build" in op for op in ops):
        return [op["value"] for op in ops]
    t = plan.target
    sources = {}
    for op in ops:
        want = op["source"]
        now = original if (want["kind"], want["name"]) == (t.kind, t.name) else writer.read(
            want["kind"], t.namespace, want["name"])
        got = split.source_of(now, want["kind"])
        if (got["uid"], got["resourceVersion"]) != (want.get("uid"), want.get("resourceVersion")):
            raise ChangedSincePlanned(plan=plan.id, planned=want.get("resourceVersion"),
                           now=got["resourceVersion"], planned_generation=None, generation=None,
                           object=f"{want['kind']}/{want['name']}")
        sources[want["kind"]] = now
    if set(sources) != {"Deployment", "Service"}:
        raise StaleObject("split_clone_mismatch", plan=plan.id, object="-", paths=Phrase("reason.no_clone_sources"))
    build = ops[0]["build"]
    deployment, service, _ = build_clones(sources["Deployment"], sources["Service"],
                                          replicas=int(build["replicas"]), container=build.get("container"),
                                          flags=[(str(k), v) for k, v in build["flags"]], reader=reader)
    bodies = {"Deployment": deployment, "Service": service}
    out = []
    for op in ops:
        body = bodies.get(op["kind"])
        shown = masked(body) if body is not None else None
        if shown != op["value"]:
            rows = leaf_differences(op["value"], shown) if isinstance(shown, dict) else [{"path": ""}]
            paths = ", ".join(r["path"] or "/" for r in rows[:8]) + (f" (+{len(rows) - 8})" if len(rows) > 8 else "")
            raise StaleObject("split_clone_mismatch", plan=plan.id, object=f"{op['kind']}/{op['name']}",
                           paths=paths or "/")
        out.append(body)
    return out


def apply_creates(writer: KubeWriter, plan: Plan, cause: str,
                  on_dry_run: Callable[[], None] | None = None, *, reader: ContainerReader) -> Written:
    """Re-read the originals, rebuild the clones from them (their containers read by `reader`,
    the one the plan was built with; refused unless they mask to what the plan stores), refuse
    what exists, dry run both creates, then create them. Returns the long Deployment as created."""
    ops = _creates(plan)
    t = plan.target
    original = writer.read(t.kind, t.namespace, t.name)
    check_unchanged(plan, original)
    values = _rebuilt(writer, plan, ops, original, reader)
    taken = existing(writer, t.namespace, ops)
    if taken:
        raise StaleObject("split_exists", plan=plan.id, namespace=t.namespace, objects=", ".join(taken))
    bodies = [(op["kind"], _annotated(value, plan, cause)) for op, value in zip(ops, values, strict=True)]
    for kind, body in bodies:
        writer.create(kind, t.namespace, body, dry_run=True)
    if on_dry_run is not None:
        on_dry_run()
    made: list[dict[str, Any]] = []
    unclear = None
    for kind, body in bodies:
        try:
            made.append(writer.create(kind, t.namespace, body))
        except StaleObject as e:  # created by someone else between the dry run and now
            raise StaleObject("split_exists", plan=plan.id, namespace=t.namespace,
                           objects=f"{kind}/{body['metadata']['name']}", detail=e.params.get("detail", "")) from e
        except OutcomeUnknown as e:  # the answer was lost: read them all again; created -> the next one goes on
            found = settle_creates(writer, plan, e)
            if f"{kind}/{body['metadata']['name']}" not in found.there:
                raise_unsettled(plan, found, e)
            made.append(found.objects[kind])
            unclear = lost_reason(e)
    deployment = next((m for m in made if m.get("kind") == "Deployment"), made[0])
    meta = deployment.get("metadata") or {}
    return Written(deployment, str(meta.get("resourceVersion") or ""), meta.get("generation"), unclear=unclear)


@dataclass(frozen=True)
class SplitRead:
    """What reading a phase-1 plan's objects again found: `there` (`Kind/name` of each object
    carrying this plan's annotation), `absent` (each one that is not there, or is someone
    else's: why, a `Phrase`), `changed` (masked difference paths of an object that is there
    but reads differently from what gpumem sent), `objects` (kind -> the object read)."""

    there: tuple[str, ...]
    absent: tuple[Phrase, ...]
    changed: tuple[Phrase, ...] = ()
    objects: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def outcome(self) -> str:
        """`applied` (every object there), `not_applied` (none) or `partly_applied`."""
        if not self.absent:
            return "applied"
        return "partly_applied" if self.there else "not_applied"

    def proof(self) -> Phrase:
        """What was read: what is there and what is not."""
        parts = [Phrase("reason.split_there", {"what": what, "annotation": PLAN_ANNOTATION}) for what in self.there]
        return Phrase("reason.list", {"items": [*parts, *self.absent, *self.changed]})

    def missing(self) -> Phrase:
        """What is not there, or is someone else's."""
        return Phrase("reason.list", {"items": list(self.absent)})


def read_created(reader: Any, plan: Plan) -> SplitRead:
    """Read each object a phase-1 plan creates, by name: there (its `gpumem.io/plan` annotation
    names the plan; any value that reads differently from what gpumem sent, compared masked, is
    named in `changed`), absent, or someone else's. Reads only. Raises whatever the read raises
    but a 404 (the caller says the outcome is unknown)."""
    there, absent, changed, objects = [], [], [], {}
    for op in _creates(plan):
        what = f"{op['kind']}/{op['name']}"
        try:
            now = reader.read(op["kind"], plan.target.namespace, op["name"])
        except TargetNotFound:
            absent.append(Phrase("reason.split_absent", {"what": what}))
            continue
        owner = ((now.get("metadata") or {}).get("annotations") or {}).get(PLAN_ANNOTATION)
        if owner != plan.id:
            absent.append(Phrase("reason.split_not_ours", {"what": what, "annotation": PLAN_ANNOTATION, "named": str(owner),
                                                           "plan": plan.id}) if owner else
                          Phrase("reason.split_unannotated", {"what": what, "annotation": PLAN_ANNOTATION, "plan": plan.id}))
            continue
        there.append(what)
        objects[op["kind"]] = now
        rows = [r for r in differences(plan, op, now) if r["path"] != "/metadata/generation"]
        if rows:
            changed.append(Phrase("reason.split_changed", {"what": what,
                                                           "paths": ", ".join(r["path"] or "/" for r in rows[:4])}))
    return SplitRead(tuple(there), tuple(absent), tuple(changed), objects)


def settle_creates(reader: Any, plan: Plan, unknown: OutcomeUnknown) -> SplitRead:
    """After a create whose answer was lost: `read_created`, or OutcomeUnknown with `reread`
    when an object cannot be read (nothing is known)."""
    try:
        return read_created(reader, plan)
    except Exception as e:  # typed or not: nothing is known
        raise OutcomeUnknown(unknown.delay_s, plan=plan.id, reason=lost_reason(unknown),
                             source=unknown.params.get("source", ""), reread=read_failure(e)) from unknown


def raise_unsettled(plan: Plan, found: SplitRead, unknown: OutcomeUnknown) -> None:
    """The create whose answer was lost did not land: none of the objects there -> TemporaryError
    not_applied (nothing was written, the re-read shows it); some -> PartlyApplied
    naming which (the plan fails; its rollback deletes what exists)."""
    reason = lost_reason(unknown)
    if unknown.params.get("in_flight") == "yes":  # what is missing may still land
        raise still_in_flight(plan, unknown, found.proof()) from unknown
    if not found.there:
        raise TemporaryError(unknown.delay_s, code="not_applied", plan=plan.id, reason=reason,
                             proof=found.proof()) from unknown
    raise PartlyApplied(plan=plan.id, reason=reason, created=", ".join(found.there),
                   missing=found.missing(), proof=found.proof()) from unknown


def differences(plan: Plan, op: dict[str, Any], now: dict[str, Any]) -> list[dict[str, Any]]:
    """How the object `op` created reads differently now: values gpumem sent, the plan
    annotation, and for a Deployment its generation (any spec change since the create). Both
    sides are compared masked (the plan keeps no credential): a row never quotes one."""
    what = f"{op['kind']}/{op['name']}"
    meta = now.get("metadata") or {}
    rows = [{"object": what, **row} for row in leaf_differences(masked(op["value"]), masked(now))]
    owner = (meta.get("annotations") or {}).get(PLAN_ANNOTATION)
    if owner != plan.id:
        rows.append({"object": what, "path": "/metadata/annotations/gpumem.io~1plan", "gpumem": plan.id, "now": owner})
    if op["kind"] == "Deployment" and meta.get("generation") not in (None, 1):
        rows.append({"object": what, "path": "/metadata/generation", "gpumem": 1, "now": meta.get("generation")})
    return rows


def _read_unchanged(writer: KubeWriter, plan: Plan, ops: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(op, object now) for each created object still there; SplitChangedAfterApply
    with every difference when one was changed since."""
    t = plan.target
    found, rows = [], []
    for op in ops:
        try:
            now = writer.read(op["kind"], t.namespace, op["name"])
        except TargetNotFound:
            continue
        rows += differences(plan, op, now)
        found.append((op, now))
    if rows:
        raise SplitChangedAfterApply(plan=plan.id, differences=rows)
    return found


def delete_created(writer: KubeWriter, plan: Plan, unclear: list[Phrase | str] | None = None) -> list[str]:
    """Delete what phase 1 created, Service first, each only if unchanged since; the `Kind/name`
    of each object deleted (one already gone is skipped). A delete whose answer was lost is
    settled by reading the object again (`_settle_delete`); `unclear` gets why it was read."""
    ops = list(reversed(_creates(plan)))
    t = plan.target
    found = _read_unchanged(writer, plan, ops)
    for op, now in found:
        meta = now.get("metadata") or {}
        writer.delete(op["kind"], t.namespace, op["name"], _preconditions(meta), dry_run=True)
    deleted = []
    for op, now in found:
        for attempt in range(_DELETE_TRIES):
            try:
                writer.delete(op["kind"], t.namespace, op["name"], _preconditions(now.get("metadata") or {}))
                break
            except TargetNotFound:
                break
            except OutcomeUnknown as e:  # gone: deleted, the next goes on; still there: not; unreadable: unknown
                _settle_delete(writer, plan, op, now, e, deleted)
                if unclear is not None:
                    unclear.append(lost_reason(e))
                break
            except StaleObject:
                if attempt == _DELETE_TRIES - 1:
                    raise SplitChangedAfterApply(plan=plan.id, differences=[
                        {"object": f"{op['kind']}/{op['name']}", "path": "/metadata/resourceVersion",
                         "gpumem": "unchanged", "now": "still changing"}]) from None
                # the resourceVersion moved (a controller's status write, or a change): check again
                again = _read_unchanged(writer, plan, [op])
                if not again:
                    break
                now = again[0][1]
        deleted.append(f"{op['kind']}/{op['name']}")
    return deleted


def _settle_delete(writer: KubeWriter, plan: Plan, op: dict[str, Any], was: dict[str, Any],
                   unknown: OutcomeUnknown, deleted: list[str]) -> None:
    """A delete whose answer was lost: returns when the object is gone (or is no longer the one
    gpumem created: another uid); TemporaryError rollback_not_applied when it is still there
    (naming what was deleted before it); OutcomeUnknown with `reread` when it cannot be read."""
    what = f"{op['kind']}/{op['name']}"
    reason = lost_reason(unknown)
    try:
        now = writer.read(op["kind"], plan.target.namespace, op["name"])
    except TargetNotFound:
        return
    except Exception as e:
        raise OutcomeUnknown(unknown.delay_s, plan=plan.id, reason=reason, source=unknown.params.get("source", ""),
                             reread=Phrase("reason.of_object", {"what": what, "why": read_failure(e)}),
                             deleted=", ".join(deleted) or "-") from unknown
    uid = str((now.get("metadata") or {}).get("uid") or "")
    if uid != str((was.get("metadata") or {}).get("uid") or ""):
        return  # deleted, and something else made since under the name: not gpumem's to delete
    if unknown.params.get("in_flight") == "yes":  # still there, and the delete may still land
        raise still_in_flight(plan, unknown, Phrase("reason.still_there", {"what": what, "uid": uid})) from unknown
    if deleted:  # the Service is gone, the Deployment not: Roll back again deletes the rest
        raise TemporaryError(unknown.delay_s, code="split_partly_rolled_back", plan=plan.id, reason=reason,
                             deleted=", ".join(deleted), remaining=f"{what} (uid {uid})") from unknown
    raise TemporaryError(unknown.delay_s, code="rollback_not_applied", plan=plan.id, reason=reason,
                         proof=Phrase("reason.still_there", {"what": what, "uid": uid})) from unknown


def _preconditions(meta: dict[str, Any]) -> dict[str, str]:
    return {"uid": str(meta.get("uid") or ""), "resourceVersion": str(meta.get("resourceVersion") or "")}
