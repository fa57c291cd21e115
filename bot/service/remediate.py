"""The remediation use cases every surface calls: make a plan, apply it, roll it back.

A plan is made against the object as it is now (its resourceVersion and generation), from
explicit changes (`--set flag=value`, `--replicas N`) or from a recommended action's typed
changes. The CLI's operator applies with their own kubeconfig (their RBAC is the guard, so no
Slack approval): the plan still moves through the store's states, the rollback note is in the
audit before the write, and the actuator's guards (re-read, dry run, precondition) all run.
"""

from __future__ import annotations

import getpass
import os
import secrets
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.actuator.apply import apply_plan, inverse_ops, rollback_plan
from bot.actuator.launch_edit import edit_flags
from bot.actuator.writer import JSON_PATCH, KubeWriter
from bot.store.db import Store, StoredPlan
from runbooks.model.changes import Change
from runbooks.model.errors import Conflict, GpumemError, UsageError
from runbooks.remediation.plan import Plan, PlanTarget
from runbooks.remediation.policy import ApprovalPolicy, approvals_needed


@dataclass(frozen=True)
class PlanRequest:
    namespace: str
    name: str
    kind: str = "Deployment"
    cluster: str | None = None
    #: engine flag -> new value (None removes the flag)
    flags: tuple[tuple[str, Any], ...] = ()
    replicas: int | None = None
    container: str | None = None
    action_id: str = "manual"
    requested_by: str = ""
    origin: str = "cli"


def writer_for(kubeconfig: str | None, context: str | None) -> KubeWriter:
    """A writer for the cluster this kubeconfig and context name (the operator's own identity on
    the CLI; the config's `remediation.writer` for the bot)."""
    from collectors.kube.client import make_api_client

    return KubeWriter(make_api_client(kubeconfig, context))


def operator() -> str:
    """Who is at the terminal, for the audit."""
    try:
        return f"cli:{getpass.getuser()}"
    except Exception:  # no user name (a container without /etc/passwd entry)
        return f"cli:uid{os.getuid()}"


def new_plan_id() -> str:
    return "p-" + secrets.token_hex(4)


def build_plan(obj: dict[str, Any], request: PlanRequest, policy: ApprovalPolicy, now: datetime) -> Plan:
    """The plan for `request` against `obj` (the object as read now). Raises UsageError when it
    asks for nothing or for what cannot be edited safely (`bot.actuator.launch_edit`)."""
    meta = obj.get("metadata") or {}
    changes: list[Change] = []
    ops: list[dict[str, Any]] = []
    if request.flags:
        edit = edit_flags(obj, request.container, dict(request.flags))
        ops += list(edit.json_patch)
        container = request.container or _server_container(obj)
        changes += [Change.set_arg(container, flag, edit.old.get(flag), value) for flag, value in request.flags]
    if request.replicas is not None:
        old = (obj.get("spec") or {}).get("replicas")
        if old == request.replicas:
            raise UsageError("nothing_to_change", what=f"replicas {old}")
        ops += [{"op": "test", "path": "/spec/replicas", "value": old},
                {"op": "replace", "path": "/spec/replicas", "value": request.replicas}]
        changes.append(Change.scale(old, request.replicas))
    if not changes:
        raise UsageError("nothing_to_change", what="no --set or --replicas")
    return Plan(new_plan_id(), PlanTarget(request.cluster, request.namespace, request.kind, request.name),
                request.action_id, tuple(changes), str(meta.get("resourceVersion") or ""), meta.get("generation"),
                tuple(ops), JSON_PATCH, request.requested_by or operator(), now,
                now + timedelta(seconds=policy.ttl_s), approvals_needed(policy, tuple(changes)), request.origin)


def _server_container(obj: dict[str, Any]) -> str | None:
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return containers[0].get("name") if len(containers) == 1 else None


#: `make_plan`'s default reader: the writer's own connection reads the preview's nodes and pods
WRITER_READS = object()


def make_plan(store: Store, writer: KubeWriter, request: PlanRequest, policy: ApprovalPolicy,
              now: datetime | None = None, channel: str | None = None, thread_ts: str | None = None,
              reader: Any = WRITER_READS) -> StoredPlan:
    """Read the object, build the plan with its preview (`bot.service.plan_preview`: nodes and
    pods read through `reader`, a KubeRest; by default the writer's own connection, as on the
    CLI where the operator's kubeconfig does both; None: not read), store it as proposed (with
    the Slack channel and the incident thread it belongs to, when it came from Slack)."""
    from bot.service.plan_preview import preview

    now = now or datetime.now(UTC)
    obj = writer.read(request.kind, request.namespace, request.name)
    plan = build_plan(obj, request, policy, now)
    rest = writer.rest if reader is WRITER_READS else reader
    plan = replace(plan, preview=preview(obj, plan, rest, writer.timeout_s))
    return store.add_plan(plan, channel=channel, thread_ts=thread_ts, now=now)


#: the change kinds a plan can be built from today (`build_plan`)
APPLY_KINDS = ("set_arg", "scale")


def request_from_changes(namespace: str, name: str, cluster: str | None, action_id: str,
                         changes: tuple[Change, ...], *, requested_by: str, origin: str,
                         kind: str = "Deployment") -> PlanRequest:
    """The plan request for a recommended action's typed changes (a triage's "Plan" button, a
    re-plan): flags at their new values, replicas at the new count. Raises UsageError
    not_applicable when a change is of a kind gpumem cannot apply."""
    if not changes:
        raise UsageError("nothing_to_change", what=action_id)
    other = sorted({c.kind for c in changes if c.kind not in APPLY_KINDS})
    if other:
        raise UsageError("not_applicable", action=action_id, kinds=", ".join(other))
    flags = tuple((c.flag, c.new) for c in changes if c.kind == "set_arg" and c.flag)
    containers = {c.container for c in changes if c.kind == "set_arg" and c.container}
    replicas = next((int(c.new) for c in changes if c.kind == "scale"), None)
    return PlanRequest(namespace, name, kind, cluster, flags, replicas,
                       containers.pop() if len(containers) == 1 else None, action_id, requested_by, origin)


def _cause(plan: Plan, verb: str) -> str:
    changes = "; ".join(c.describe() for c in plan.changes)
    return f"gpumem {verb} {plan.id} ({plan.action_id}): {changes}"


def apply_now(store: Store, writer: KubeWriter, plan_id: str, actor: str, now: datetime | None = None,
              channel: str | None = None) -> StoredPlan:
    """Apply a plan the operator approves by running this (the CLI): proposed -> approved ->
    applying -> applied, the rollback note in the audit before the write, every actuator guard.
    A refusal records the plan as failed (nothing written) or leaves it for a re-plan."""
    stored = store.get(plan_id)
    plan = stored.plan
    if plan.expired(now or datetime.now(UTC)) and stored.state == "proposed":
        store.move(plan_id, "expired", actor="gpumem", expect="proposed", now=now)
        raise Conflict("plan_expired", plan=plan_id)
    if stored.state == "proposed":
        store.approve(plan_id, actor, plan.content_hash, channel=channel, now=now)
        stored = store.get(plan_id)
        if stored.state == "proposed":  # a plan that needs two approvals: the CLI gives one
            raise UsageError("needs_more_approvals", plan=plan_id, needed=plan.approvals_needed)
    return apply_approved(store, writer, plan_id, actor, now=now, channel=channel)


def rollback_note(plan: Plan) -> dict[str, Any]:
    """What is recorded (and posted in Slack) before the write: the inverse change, the prior
    values of what changes, the triage it came from."""
    return {"plan": plan.id, "target": str(plan.target), "inverse": inverse_ops(plan.patch),
            "prior": [c.describe() for c in plan.changes], "origin": plan.origin}


def apply_approved(store: Store, writer: KubeWriter, plan_id: str, actor: str, now: datetime | None = None,
                   channel: str | None = None, before_write: Any = None, on_dry_run: Any = None) -> StoredPlan:
    """Apply an approved plan: approved -> applying (one transaction: a second caller gets
    Conflict plan_moved and writes nothing), the rollback note committed to the audit and handed
    to `before_write(note)` (Slack posts it in the thread), then re-read, dry run (`on_dry_run()`
    once it passed) and the write with its precondition -> applied; a refusal -> failed."""
    plan = store.get(plan_id).plan
    store.move(plan_id, "applying", actor=actor, expect="approved", channel=channel, now=now)
    note = rollback_note(plan)
    store.record("rollback_note", actor=actor, channel=channel, now=now, detail=note)
    try:
        if before_write is not None:
            before_write(note)
        written = apply_plan(writer, plan, _cause(plan, "plan"), on_dry_run=on_dry_run)
    except GpumemError as e:
        store.move(plan_id, "failed", actor="gpumem", expect="applying", channel=channel, now=now,
                   detail={"error": e.code, **{k: str(v)[:300] for k, v in e.params.items()}})
        raise
    return store.move(plan_id, "applied", actor="gpumem", expect="applying", channel=channel, now=now,
                      detail={"resource_version": written.resource_version, "generation": written.generation})


def watch_after(store: Store, writer: KubeWriter, plan_id: str, window_s: float, *, auto_rollback: bool = False,
                poll_s: float = 10.0, clock: Any = None, sleep: Any = None, on_look: Any = None) -> tuple[StoredPlan, Any]:
    """Watch an applied plan's rollout for `window_s`: held or symptoms remain -> watched, failed
    -> failed (rolled back at once when `auto_rollback`, and the audit says so)."""
    import time

    from bot.actuator.watch import watch

    stored = store.get(plan_id)
    plan = stored.plan
    generation = next((e.detail.get("generation") for e in reversed(store.audit(name=plan.target.name))
                       if e.plan_id == plan_id and e.to_state == "applied"), None)
    seen = watch(writer, plan.target.namespace, plan.target.name, generation, window_s, poll_s=poll_s,
                 clock=clock or time.monotonic, sleep=sleep or time.sleep, on_look=on_look)
    detail = {"outcome": seen.outcome, "notes": list(seen.notes), "restarts": seen.restarts, "oom_lines": seen.oom_lines}
    if seen.outcome in ("held", "symptoms_remain"):
        return store.move(plan_id, "watched", actor="gpumem", expect="applied", detail=detail), seen
    stored = store.move(plan_id, "failed", actor="gpumem", expect="applied", detail=detail)
    if auto_rollback:
        rollback_plan(writer, plan, _cause(plan, "auto-rollback"))
        stored = store.move(plan_id, "rolled_back", actor="gpumem", detail={"auto": True})
    return stored, seen


def rollback_now(store: Store, writer: KubeWriter, plan_id: str, actor: str, now: datetime | None = None,
                 channel: str | None = None) -> StoredPlan:
    """Restore what the plan changed, refusing (Conflict changed_after_apply, with the three
    values per field) when someone changed it after gpumem did."""
    stored = store.get(plan_id)
    if stored.state not in ("applied", "watched", "failed"):
        raise Conflict("plan_moved", plan=plan_id, state=stored.state, wanted="rolled_back")
    rollback_plan(writer, stored.plan, _cause(stored.plan, "rollback"))
    return store.move(plan_id, "rolled_back", actor=actor, channel=channel, now=now)


def action_changes(store: Store, namespace: str, name: str, action_id: str) -> tuple[Change, ...]:
    """The typed changes of `action_id` as the newest recorded triage of NAMESPACE/NAME gave them
    (`gpumem plan --action ID`, `/gpumem plan ... --action ID`). Raises UsageError no_action
    when no triage was recorded or it did not recommend that action with changes."""
    from bot.store.notes import Journal

    record = Journal(store).last_triage(namespace, name)
    raw = ((record.summary.get("action_changes") or {}) if record else {}).get(action_id)
    if not raw:
        raise UsageError("no_action", target=f"{namespace}/{name}", action=action_id)
    return tuple(Change(*item) for item in raw)


def plan_request(store: Store, namespace: str, name: str, *, kind: str, cluster: str | None, sets: list[str],
                 replicas: int | None, container: str | None, action: str | None, requested_by: str,
                 origin: str) -> PlanRequest:
    """The request `gpumem plan` / `/gpumem plan` makes: `--action ID` (the recorded triage's
    changes) or `--set` / `--replicas`, not both."""
    if action:
        if sets or replicas is not None:
            raise UsageError("action_and_changes")
        changes = action_changes(store, namespace, name, action)
        return request_from_changes(namespace, name, cluster, action, changes, requested_by=requested_by,
                                    origin=f"{origin}, action {action} of the last triage", kind=kind)
    return PlanRequest(namespace, name, kind, cluster, parse_set(sets), replicas, container,
                       requested_by=requested_by, origin=origin)


def parse_set(values: list[str]) -> tuple[tuple[str, Any], ...]:
    """`--set max-num-seqs=64 --set enforce-eager=` -> (("max-num-seqs", 64), ("enforce-eager", None))."""
    out = []
    for raw in values:
        flag, sep, value = raw.partition("=")
        flag = flag.strip().lstrip("-")
        if not sep or not flag:
            raise UsageError("bad_set", value=raw)
        out.append((flag, _value(value.strip())))
    return tuple(out)


def _value(text: str) -> Any:
    if text == "":
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text
