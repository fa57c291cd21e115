"""The writes of a pool split's phase 1: create `<name>-long` (Deployment, then Service), and
delete them again on rollback, with the same guards as a patch (`bot.actuator.apply`):

1. the original Deployment and Service are read again and must be the versions the plan was
   made against (same uid and resourceVersion; Conflict `changed_since_planned`);
2. the plan stores the clones with every credential masked, never their values
   (`runbooks.remediation.split.stored_ops`): the clones are rebuilt from the originals just
   read, the original's credentials included, and sent only when they mask to exactly what the
   plan stores (Conflict `split_clone_mismatch`, naming the paths, never their values);
3. neither object may exist yet (Conflict `split_exists`, nothing written): gpumem never
   adopts, overwrites or renames something someone else made;
4. a server-side dry run of both creates must pass before the first real one.

A rollback deletes only what this plan created (its `gpumem.io/plan` annotation) and only if
every value gpumem sent still reads the same and the Deployment's spec was not changed since
(generation 1); otherwise it refuses with the differences (Conflict `split_changed_after_apply`).
Both sides are compared masked, so a difference never quotes a credential.
Each DELETE carries the uid and resourceVersion just read as preconditions, so an object
replaced or changed in between is a 409 and a refusal, not a deletion.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from bot.actuator.apply import CAUSE_ANNOTATION, PLAN_ANNOTATION, Written, check_unchanged
from bot.actuator.launch_edit import edit_flags
from bot.actuator.writer import KubeWriter
from runbooks.model.errors import Conflict, TargetNotFound, UsageError
from runbooks.remediation import split
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


def build_clones(original: dict[str, Any], service: dict[str, Any], *, replicas: int, container: str | None,
                 flags: list[tuple[str, Any]]) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The long pool's Deployment and Service cloned from `original` and `service` (credentials
    and all, as they will be sent), with `flags` set on `container` in the Deployment's own
    launch form; and the container's name. The plan builds them this way, and apply again."""
    clone = split.clone_deployment(original, service, replicas=replicas)
    edit = edit_flags(clone, container, dict(flags))
    return edit.workload, split.clone_service(service, edit.workload), edit.container


def _rebuilt(writer: KubeWriter, plan: Plan, ops: list[dict[str, Any]],
             original: dict[str, Any]) -> list[dict[str, Any]]:
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
            raise Conflict("changed_since_planned", plan=plan.id, planned=want.get("resourceVersion"),
                           now=got["resourceVersion"], planned_generation=None, generation=None,
                           object=f"{want['kind']}/{want['name']}")
        sources[want["kind"]] = now
    if set(sources) != {"Deployment", "Service"}:
        raise Conflict("split_clone_mismatch", plan=plan.id, object="-", paths="the plan names no Deployment and "
                       "Service to clone")
    build = ops[0]["build"]
    deployment, service, _ = build_clones(sources["Deployment"], sources["Service"],
                                          replicas=int(build["replicas"]), container=build.get("container"),
                                          flags=[(str(k), v) for k, v in build["flags"]])
    bodies = {"Deployment": deployment, "Service": service}
    out = []
    for op in ops:
        body = bodies.get(op["kind"])
        shown = masked(body) if body is not None else None
        if shown != op["value"]:
            rows = leaf_differences(op["value"], shown) if isinstance(shown, dict) else [{"path": ""}]
            paths = ", ".join(r["path"] or "/" for r in rows[:8]) + (f" (+{len(rows) - 8})" if len(rows) > 8 else "")
            raise Conflict("split_clone_mismatch", plan=plan.id, object=f"{op['kind']}/{op['name']}",
                           paths=paths or "/")
        out.append(body)
    return out


def apply_creates(writer: KubeWriter, plan: Plan, cause: str,
                  on_dry_run: Callable[[], None] | None = None) -> Written:
    """Re-read the originals, rebuild the clones from them (refused unless they mask to what the
    plan stores), refuse what exists, dry run both creates, then create them. Returns the long
    Deployment as created."""
    ops = _creates(plan)
    t = plan.target
    original = writer.read(t.kind, t.namespace, t.name)
    check_unchanged(plan, original)
    values = _rebuilt(writer, plan, ops, original)
    taken = existing(writer, t.namespace, ops)
    if taken:
        raise Conflict("split_exists", plan=plan.id, namespace=t.namespace, objects=", ".join(taken))
    bodies = [(op["kind"], _annotated(value, plan, cause)) for op, value in zip(ops, values, strict=True)]
    for kind, body in bodies:
        writer.create(kind, t.namespace, body, dry_run=True)
    if on_dry_run is not None:
        on_dry_run()
    made: list[dict[str, Any]] = []
    for kind, body in bodies:
        try:
            made.append(writer.create(kind, t.namespace, body))
        except Conflict as e:  # created by someone else between the dry run and now
            raise Conflict("split_exists", plan=plan.id, namespace=t.namespace,
                           objects=f"{kind}/{body['metadata']['name']}", detail=e.params.get("detail", "")) from e
    deployment = next((m for m in made if m.get("kind") == "Deployment"), made[0])
    meta = deployment.get("metadata") or {}
    return Written(deployment, str(meta.get("resourceVersion") or ""), meta.get("generation"))


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
    """(op, object now) for each created object still there; Conflict split_changed_after_apply
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
        raise Conflict("split_changed_after_apply", plan=plan.id, differences=rows)
    return found


def delete_created(writer: KubeWriter, plan: Plan) -> list[str]:
    """Delete what phase 1 created, Service first, each only if unchanged since; the `Kind/name`
    of each object deleted (one already gone is skipped)."""
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
            except Conflict:
                if attempt == _DELETE_TRIES - 1:
                    raise Conflict("split_changed_after_apply", plan=plan.id, differences=[
                        {"object": f"{op['kind']}/{op['name']}", "path": "/metadata/resourceVersion",
                         "gpumem": "unchanged", "now": "still changing"}]) from None
                # the resourceVersion moved (a controller's status write, or a change): check again
                again = _read_unchanged(writer, plan, [op])
                if not again:
                    break
                now = again[0][1]
        deleted.append(f"{op['kind']}/{op['name']}")
    return deleted


def _preconditions(meta: dict[str, Any]) -> dict[str, str]:
    return {"uid": str(meta.get("uid") or ""), "resourceVersion": str(meta.get("resourceVersion") or "")}
