"""Apply a plan and roll it back, with every guard the write needs, in this order:

1. read the object again: a resourceVersion or generation other than the plan's means it
   changed since it was planned (ChangedSincePlanned, never an overwrite);
2. a server-side dry run of the exact request must pass;
3. the write itself carries the precondition (`metadata.resourceVersion` in the patch), so a
   change that lands between the read and the write is a 409 and a refusal, not a lost update.

The request is the plan's patch (RFC 6902 operations, `test` on each old value before it is
replaced) plus annotations naming the plan and `kubernetes.io/change-cause`. A rollback is the
inverse of the plan's operations, `test`ing the values gpumem wrote: if someone changed them
since, it refuses and returns the three values (before gpumem, what gpumem wrote, now).

A plan of patch type `create` (an HPA gpumem adds) is one object: applying it checks the object
is still absent, dry-runs the POST, then creates it; its rollback deletes it with the uid and
resourceVersion as preconditions, and only while its spec is still what gpumem created.

A write whose answer does not settle it (OutcomeUnknown: a 5xx once sent, no answer in time, a
dropped connection) is settled by reading the object again: the plan's annotation and the values
it writes there -> applied (`Written.unclear` says why it was read again); provably not there ->
TemporaryError `not_applied` (nothing was written: the re-read shows it, so a retry may help);
the object cannot be read -> OutcomeUnknown with `reread` saying why, and the caller leaves the
plan for a later pass (`bot.service.reconcile`). Rollbacks and deletes are settled the same way
(`rollback_not_applied`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bot.actuator.watch import Baseline, baseline
from bot.actuator.writer import CREATE, JSON_PATCH, KubeWriter
from runbooks.model.errors import (
    IN_FLIGHT_S,
    ChangedAfterApply,
    ChangedSincePlanned,
    GpumemError,
    InvalidChange,
    OutcomeUnknown,
    StaleObject,
    TargetNotFound,
    TemporaryError,
    UsageError,
)
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.patches import FIELDS, element_shown
from runbooks.remediation.plan import Plan

PLAN_ANNOTATION = "gpumem.io/plan"
CAUSE_ANNOTATION = "kubernetes.io/change-cause"


@dataclass(frozen=True)
class Written:
    """The object after a write, and the version that write made."""

    obj: dict[str, Any]
    resource_version: str
    generation: int | None
    #: the pods right before the write (a Deployment's, for the watch); None for other kinds
    baseline: Baseline | None = None
    #: why no baseline was taken (the pods could not be listed); None when taken or not needed
    baseline_error: str | None = None
    #: the write's answer did not settle it (e.g. "HTTP 503", or a `Phrase`: the answer was not
    #: JSON): the object was read again and carries the change; None when the answer itself said so
    unclear: Phrase | str | None = None


def _version(obj: dict[str, Any]) -> tuple[str, int | None]:
    meta = obj.get("metadata") or {}
    return str(meta.get("resourceVersion") or ""), meta.get("generation")


def check_unchanged(plan: Plan, current: dict[str, Any]) -> None:
    """Raise ChangedSincePlanned unless `current` is the version the plan was made against."""
    rv, generation = _version(current)
    if rv != plan.resource_version or (plan.generation is not None and generation != plan.generation):
        raise ChangedSincePlanned(plan=plan.id, planned=plan.resource_version, now=rv,
                       planned_generation=plan.generation, generation=generation)


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def request_body(plan: Plan, current: dict[str, Any], cause: str) -> list[dict[str, Any]]:
    """The JSON patch sent: the plan's operations, the annotations, and the resourceVersion
    precondition (the API server refuses the write with 409 when the object moved on)."""
    ops: list[dict[str, Any]] = [{"op": "replace", "path": "/metadata/resourceVersion", "value": plan.resource_version}]
    ops += [dict(op) for op in plan.patch]
    if (current.get("metadata") or {}).get("annotations") is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
    for key, value in ((PLAN_ANNOTATION, plan.id), (CAUSE_ANNOTATION, cause[:256])):
        ops.append({"op": "add", "path": f"/metadata/annotations/{_escape(key)}", "value": value})
    return ops


def apply_plan(writer: KubeWriter, plan: Plan, cause: str,
               on_dry_run: Callable[[], None] | None = None) -> Written:
    """Read again, dry run, write; each guard refusing raises before anything is written.
    `on_dry_run` is called once the dry run passed, right before the write (a surface shows
    the step)."""
    if plan.patch_type == CREATE:
        return _create(writer, plan, cause, on_dry_run)
    if plan.patch_type != JSON_PATCH:
        raise UsageError("patch_type_unsupported", patch_type=plan.patch_type)
    t = plan.target
    current = writer.read(t.kind, t.namespace, t.name)
    check_unchanged(plan, current)
    body = request_body(plan, current, cause)
    writer.patch(t.kind, t.namespace, t.name, body, JSON_PATCH, dry_run=True)
    if on_dry_run is not None:
        on_dry_run()
    before, unread = _baseline(writer, plan, current)
    try:
        after, unclear = _write_after_dry_run(writer, plan, body), None
    except OutcomeUnknown as e:
        after, unclear = _settle(writer, plan, e, landed, "not_applied"), lost_reason(e)
    rv, generation = _version(after)
    return Written(after, rv, generation, before, unread, unclear)


def _settle(writer: KubeWriter, plan: Plan, unknown: OutcomeUnknown,
            check: Callable[[Plan, dict[str, Any]], Phrase | None], refused: str,
            gone_is_done: bool = False) -> dict[str, Any]:
    """The object read again after a write whose answer did not settle it: returned when
    `check(plan, obj)` finds the write on it ({} when it is gone and `gone_is_done`: a delete);
    TemporaryError `refused` (nothing was written, the re-read shows it) when not;
    OutcomeUnknown with `reread` when it cannot be read."""
    t = plan.target
    reason = lost_reason(unknown)
    try:
        current = writer.read(t.kind, t.namespace, t.name)
    except TargetNotFound:
        current = None
    except Exception as e:  # typed or not (an answer that is not JSON): nothing is known
        raise OutcomeUnknown(unknown.delay_s, plan=plan.id, reason=reason, source=unknown.params.get("source", ""),
                             reread=read_failure(e)) from unknown
    if current is None and gone_is_done:
        return {}
    why = (Phrase("reason.not_there", {"kind": t.kind, "namespace": t.namespace, "name": t.name})
           if current is None else check(plan, current))
    if why is None:
        assert current is not None
        return current
    if unknown.params.get("in_flight") == "yes":  # not there yet, and it may still land
        raise still_in_flight(plan, unknown, why)
    raise TemporaryError(unknown.delay_s, code=refused, plan=plan.id, reason=reason, proof=why) from unknown


def lost_reason(unknown: GpumemError) -> Phrase | str:
    """Why a write's answer was lost, as the error says it: a `Phrase` (the answer was not
    JSON), or the transport's own words ("HTTP 503", "no answer within 10.0 s"); "" for none."""
    reason = unknown.params.get("reason")
    return reason if isinstance(reason, Phrase) else str(reason or "")


def still_in_flight(plan: Plan, unknown: OutcomeUnknown, why: Phrase) -> OutcomeUnknown:
    """The write no answer came for is not on the object as read at once: that is no proof, the
    API server may still be at work on it. The outcome stays unknown until `IN_FLIGHT_S` has
    passed (the reconcile pass reads it again then)."""
    return OutcomeUnknown(unknown.delay_s, plan=plan.id, reason=lost_reason(unknown),
                          source=unknown.params.get("source", ""), in_flight="yes",
                          reread=Phrase("reason.in_flight", {"why": why, "seconds": f"{IN_FLIGHT_S:.0f}"}))


def read_failure(error: Exception) -> Phrase | str:
    """Why a re-read failed, in a few words: "HTTP 503: etcdserver: leader changed", "no answer
    within 10.0 s", "forbidden: get deployments.apps in namespace llm"."""
    if not isinstance(error, GpumemError):
        return f"{type(error).__name__}: {error}"[:300]
    p = error.params
    if isinstance(p.get("reason"), Phrase):
        return p["reason"]
    if p.get("reason"):
        return str(p["reason"])[:300]
    if p.get("status"):
        return f"HTTP {p['status']}" + (f": {p['detail']}" if p.get("detail") else "")[:300]
    return str(error)[:300]


def _baseline(writer: KubeWriter, plan: Plan, current: dict[str, Any]) -> tuple[Baseline | None, str | None]:
    """The pods as they are right before the write (the watch judges only what the change
    produced), and why there is none. Best effort: an identity that may patch but not list pods
    still writes; its watch then counts every pod of the current revision."""
    t = plan.workload or plan.target  # an HPA plan: the pods of the Deployment it scales
    if t.kind not in ("Deployment", "StatefulSet"):  # a LeaderWorkerSet's: its leader StatefulSet's
        return None, None
    try:
        obj = current if plan.workload is None else writer.read(t.kind, t.namespace, t.name)
        return baseline(writer, t.namespace, obj), None
    except GpumemError as e:
        return None, str(e)[:300]


def created_body(plan: Plan, cause: str) -> dict[str, Any]:
    """The object a `create` plan POSTs, with the annotations naming the plan."""
    body = copy.deepcopy(plan.patch[0])
    annotations = body.setdefault("metadata", {}).setdefault("annotations", {})
    annotations.update({PLAN_ANNOTATION: plan.id, CAUSE_ANNOTATION: cause[:256]})
    return body


def _create(writer: KubeWriter, plan: Plan, cause: str, on_dry_run: Callable[[], None] | None) -> Written:
    t = plan.target
    try:
        current = writer.read(t.kind, t.namespace, t.name)
    except TargetNotFound:
        current = None
    if current is not None:  # planned as absent: someone made one since
        raise ChangedSincePlanned(plan=plan.id, planned="(absent)", now=_version(current)[0],
                       planned_generation=None, generation=None)
    body = created_body(plan, cause)
    writer.create(t.kind, t.namespace, body, dry_run=True)
    if on_dry_run is not None:
        on_dry_run()
    unclear = None
    try:
        after = writer.create(t.kind, t.namespace, body)
    except StaleObject as e:  # AlreadyExists between the dry run and the write
        raise ChangedSincePlanned(plan=plan.id, detail=e.params.get("detail", "")) from e
    except OutcomeUnknown as e:  # there with this plan's annotation: created; absent: not
        after, unclear = _settle(writer, plan, e, created_by, "not_applied"), lost_reason(e)
    rv, generation = _version(after)
    return Written(after, rv, generation, unclear=unclear)


def created_by(plan: Plan, current: dict[str, Any]) -> Phrase | None:
    """None when `current` is the object `plan` created (its annotation names the plan)."""
    named = ((current.get("metadata") or {}).get("annotations") or {}).get(PLAN_ANNOTATION)
    return None if named == plan.id else annotation_not(plan, named)


def annotation_not(plan: Plan, named: Any) -> Phrase:
    """Why an object is not `plan`'s: its plan annotation names another plan, or none."""
    if not named:
        return Phrase("reason.annotation_absent", {"annotation": PLAN_ANNOTATION, "plan": plan.id})
    return Phrase("reason.annotation_other", {"annotation": PLAN_ANNOTATION, "named": str(named), "plan": plan.id})


def rollback_ops(plan: Plan) -> list[dict[str, Any]]:
    """What a rollback does, for the rollback note: the inverse operations, or for a created
    object its deletion."""
    if plan.patch_type == CREATE:
        t = plan.target
        return [{"op": "delete", "kind": t.kind, "namespace": t.namespace, "name": t.name,
                 "preconditions": "uid and resourceVersion of the object as re-read, its spec as created"}]
    return inverse_ops(plan.patch)


def _write_after_dry_run(writer: KubeWriter, plan: Plan, body: list[dict[str, Any]]) -> dict[str, Any]:
    """The real write. The same body passed the dry run a moment ago, so a refusal now means the
    object moved between the two: a `test` on an old value failed (422) or the resourceVersion
    precondition did (409). Either way: changed since planned, nothing overwritten."""
    t = plan.target
    try:
        return writer.patch(t.kind, t.namespace, t.name, body, JSON_PATCH)
    except InvalidChange as e:
        raise ChangedSincePlanned(plan=plan.id, detail=e.params.get("detail", "")) from e
    except StaleObject as e:
        raise ChangedSincePlanned(plan=plan.id, detail=e.params.get("detail", "")) from e


def _paired(ops: Sequence[dict[str, Any]]) -> list[tuple[dict[str, Any], Any, bool]]:
    """Each operation but a `test`, with the value the `test` right before it (same path) found
    there: (op, old value, tested). An element patch names one index many times (`remove` at
    /args/5 twice), so a test belongs to the operation it precedes, not to its path."""
    out = []
    for i, op in enumerate(ops):
        if op["op"] == "test":
            continue
        prev = ops[i - 1] if i > 0 else None
        tested = prev is not None and prev["op"] == "test" and prev["path"] == op["path"]
        out.append((op, copy.deepcopy(prev["value"]) if tested and prev is not None else None, tested))
    return out


def inverse_ops(ops: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operations that undo `ops` (built as `test` old then `replace`/`add`/`remove`), in
    reverse order (an element added at /args/9 goes before the ones after it come back), each
    testing first that the value is still the one `ops` wrote; a `test` of its own (the
    neighbour of a removed element) is kept at its place. Element operations give element
    operations: the inverse names only what the plan changed.

    >>> inverse_ops([{"op": "test", "path": "/spec/replicas", "value": 2},
    ...              {"op": "replace", "path": "/spec/replicas", "value": 3}])
    [{'op': 'test', 'path': '/spec/replicas', 'value': 3}, {'op': 'replace', 'path': '/spec/replicas', 'value': 2}]
    >>> inverse_ops([{"op": "add", "path": "/a/args/3", "value": "--x"}, {"op": "test", "path": "/a/args/1", "value": "8"},
    ...              {"op": "remove", "path": "/a/args/1"}])
    [{'op': 'add', 'path': '/a/args/1', 'value': '8'}, {'op': 'test', 'path': '/a/args/3', 'value': '--x'}, \
{'op': 'remove', 'path': '/a/args/3'}]
    """
    out: list[list[dict[str, Any]]] = []
    for i, op in enumerate(ops):  # a `test` of its own (a removal's neighbour) holds in the inverse too
        following = ops[i + 1] if i + 1 < len(ops) else None
        if op["op"] == "test" and (following is None or following["op"] == "test" or following["path"] != op["path"]):
            out.append([dict(op)])
            continue
        if op["op"] == "test":
            continue
        prev = ops[i - 1] if i > 0 else None
        tested = prev is not None and prev["op"] == "test" and prev["path"] == op["path"]
        old = copy.deepcopy(prev["value"]) if tested and prev is not None else None
        p = op["path"]
        if op["op"] == "replace":
            if not tested:
                raise UsageError("not_invertible", path=p)
            out.append([{"op": "test", "path": p, "value": op["value"]}, {"op": "replace", "path": p, "value": old}])
        elif op["op"] == "add":
            if tested:  # an add over a tested value replaced it
                out.append([{"op": "test", "path": p, "value": op["value"]}, {"op": "replace", "path": p, "value": old}])
            elif p.endswith("/-"):
                raise UsageError("not_invertible", path=p)
            else:
                out.append([{"op": "test", "path": p, "value": op["value"]}, {"op": "remove", "path": p}])
        elif op["op"] == "remove":
            if not tested:
                raise UsageError("not_invertible", path=p)
            out.append([{"op": "add", "path": p, "value": old}])
        else:
            raise UsageError("not_invertible", path=p)
    return [o for step in reversed(out) for o in step]


def _pointer(obj: Any, pointer: str) -> Any:
    for raw in pointer.lstrip("/").split("/") if pointer else []:
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(obj, list):
            obj = obj[int(key)] if key.isdigit() and int(key) < len(obj) else None
        elif isinstance(obj, dict):
            obj = obj.get(key)
        else:
            return None
    return obj


def _shown(path: str, value: Any, current: dict[str, Any] | None = None) -> Any:
    """`value` (at `path`) as a refusal, the audit or Slack may quote it: an element of a
    container's command, args or env (or the whole list, in a plan stored before plans named
    elements) with what carries a credential there masked. With `current`, the element is read
    in the context of the list it is in now."""
    parent, _, last = path.rpartition("/")
    field = parent.rsplit("/", 1)[-1]
    if field in FIELDS and last.isdigit() and current is not None:
        items = _pointer(current, parent)
        if isinstance(items, list) and int(last) < len(items):
            return element_shown(field, items, int(last))
    if path.rsplit("/", 1)[-1] in FIELDS and isinstance(value, list):
        return [element_shown(path.rsplit("/", 1)[-1], value, i) for i in range(len(value))]
    return value


def _compared(plan: Plan, current: dict[str, Any]) -> list[tuple[dict[str, Any], bool]]:
    """Per changed path, the row `three_way` shows and whether the value now is the one gpumem
    wrote (compared unmasked)."""
    out = []
    for op, old, _tested in _paired(plan.patch):
        if op["op"] in ("replace", "add"):
            p = op["path"]
            now = _pointer(current, p)
            row = {"path": p, "before": _shown(p, old), "gpumem": _shown(p, op["value"]),
                   "now": _shown(p, now, current)}
            out.append((row, now == op["value"]))
    return out


def three_way(plan: Plan, current: dict[str, Any]) -> list[dict[str, Any]]:
    """Per changed path: the value before gpumem, the value gpumem wrote, the value now (an
    element operation's path is where its element sits once the whole patch is applied), with
    a credential in a container's launch masked."""
    return [row for row, _same in _compared(plan, current)]


def rollback_plan(writer: KubeWriter, plan: Plan, cause: str) -> Written:
    """Restore the values the plan replaced, on the object as it is now, only if the values gpumem
    wrote are still there. Raises ChangedAfterApply with the three-way difference."""
    if plan.patch_type == CREATE:
        return _delete_created(writer, plan)
    t = plan.target
    current = writer.read(t.kind, t.namespace, t.name)
    differences = [row for row, same in _compared(plan, current) if not same]
    if differences:
        raise ChangedAfterApply(plan=plan.id, differences=differences)
    rv, _ = _version(current)
    body = [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv}, *inverse_ops(plan.patch),
            {"op": "add", "path": f"/metadata/annotations/{_escape(CAUSE_ANNOTATION)}", "value": cause[:256]}]
    writer.patch(t.kind, t.namespace, t.name, body, JSON_PATCH, dry_run=True)
    unclear = None
    try:
        after = _write_after_dry_run(writer, plan, body)
    except OutcomeUnknown as e:
        after, unclear = _settle(writer, plan, e, restored_on, "rollback_not_applied"), lost_reason(e)
    rv, generation = _version(after)
    return Written(after, rv, generation, unclear=unclear)


def restored_on(plan: Plan, current: dict[str, Any]) -> Phrase | None:
    """None when a rollback of `plan` is on `current` (every value the plan changed is back to
    what it was before, an added one gone); else why not. Values that are neither gpumem's nor
    the old ones are ChangedAfterApply: someone else changed them."""
    rows = three_way(plan, current)
    if all(row["now"] == row["before"] for row in rows):
        return None
    if all(row["now"] == row["gpumem"] for row in rows):
        return Phrase("reason.still_written", {"paths": ", ".join(row["path"] for row in rows)})
    raise ChangedAfterApply(plan=plan.id, differences=[r for r in rows if r["now"] != r["before"]])


def landed(plan: Plan, current: dict[str, Any]) -> Phrase | None:
    """None when `plan`'s write is on the object `current` (the values it wrote are there and
    the object's `gpumem.io/plan` annotation names it); else why not, in a few words."""
    named = ((current.get("metadata") or {}).get("annotations") or {}).get(PLAN_ANNOTATION)
    if named != plan.id:
        return annotation_not(plan, named)
    differ = [row["path"] for row, same in _compared(plan, current) if not same]
    if differ:
        return Phrase("reason.not_written", {"paths": ", ".join(differ)})
    return None


def _delete_created(writer: KubeWriter, plan: Plan) -> Written:
    """Delete the object a `create` plan made, only while its spec is what gpumem created, with
    its uid and resourceVersion as preconditions (a change in between is a 409, not a loss)."""
    t = plan.target
    created = plan.patch[0].get("spec") or {}
    try:
        current = writer.read(t.kind, t.namespace, t.name)
    except TargetNotFound as e:
        raise ChangedAfterApply(plan=plan.id,
                       differences=[{"path": "", "before": None, "gpumem": "created", "now": None}]) from e
    spec = current.get("spec") or {}
    differences = [{"path": f"/spec/{key}", "before": None, "gpumem": value, "now": spec.get(key)}
                   for key, value in created.items() if spec.get(key) != value]
    if differences:
        raise ChangedAfterApply(plan=plan.id, differences=differences)
    meta = current.get("metadata") or {}
    preconditions = {"uid": str(meta.get("uid") or ""), "resourceVersion": str(meta.get("resourceVersion") or "")}
    writer.delete(t.kind, t.namespace, t.name, preconditions, dry_run=True)
    try:
        writer.delete(t.kind, t.namespace, t.name, preconditions)
    except OutcomeUnknown as e:  # gone: deleted; still there with its uid: not
        def deleted(_plan: Plan, now: dict[str, Any]) -> Phrase | None:
            uid = str((now.get("metadata") or {}).get("uid") or "")
            if uid == preconditions["uid"]:
                return Phrase("reason.still_there", {"what": f"{t.kind} {t.namespace}/{t.name}", "uid": uid})
            raise ChangedAfterApply(plan=plan.id, differences=[
                {"path": "/metadata/uid", "before": None, "gpumem": preconditions["uid"], "now": uid}])

        _settle(writer, plan, e, deleted, "rollback_not_applied", gone_is_done=True)
        return Written({}, "", None, unclear=lost_reason(e))
    except StaleObject as e:
        raise ChangedAfterApply(plan=plan.id, differences=[
            {"path": "/metadata/resourceVersion", "before": None, "gpumem": preconditions["resourceVersion"],
             "now": e.params.get("detail", "")}]) from e
    return Written({}, "", None)
