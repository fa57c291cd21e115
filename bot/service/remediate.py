"""The remediation use cases every surface calls: make a plan, apply it, roll it back.

A plan is made against the object as it is now (its resourceVersion and generation), from
explicit changes (`--set flag=value`, `--replicas N`, `--startup-probe`, `--queue-target`,
`--max-surge`, `--shm-size`, `--memory-limit`) or from a recommended action's typed changes.
A plan writes one object: the workload, or the HPA that scales it (a replica change the HPA
would undo goes to its minReplicas; an HPA on the queue metric is created or re-pointed); a
request that would touch both is refused, to be planned as two. The CLI's operator applies with their own kubeconfig (their RBAC is the guard, so no
Slack approval): the plan still moves through the store's states, the rollback note is in the
audit before the write, and the actuator's guards (re-read, dry run, precondition) all run.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from bot.actuator.apply import apply_plan, rollback_ops, rollback_plan, three_way
from bot.actuator.split_apply import apply_creates, delete_created
from bot.actuator.watch import Baseline, WrittenObject, watch
from bot.actuator.writer import CREATE, JSON_PATCH, KubeWriter
from bot.service.connections import Endpoint, kube_api
from bot.service.container_reader import CONTAINER_READER
from bot.service.operators import operator as operator  # who is at the terminal, for the audit
from bot.service.plan_preview import preview
from bot.store.db import Store, StoredPlan
from bot.store.notes import Journal
from collectors.errors import ParseError
from collectors.kube.managers import ARGOCD_NAMESPACE, Manager, blocks_writes, managers_of, with_sync_policy
from collectors.kube.rest import path
from collectors.parsers.kube_pod_spec import node_selector
from runbooks.catalogs.gpus import GpuSpec, weakest_gpu_of_labels
from runbooks.catalogs.models import find_model
from runbooks.launch.argv import canonical_flag
from runbooks.launch.flag_tables import BOOLEAN_FLAGS
from runbooks.model.changes import (
    KINDS,
    AddShm,
    AddStartupProbe,
    Change,
    HpaOnQueueDepth,
    LowerMaxSurge,
    RaiseMemoryLimit,
    Scale,
    SetArg,
    change_of,
)
from runbooks.model.errors import (
    GpumemError,
    ManagedElsewhere,
    NotPermitted,
    OutcomeUnknown,
    PlanExpired,
    PlanMoved,
    StaleObject,
    TargetNotFound,
    UsageError,
)
from runbooks.model.phrases import Phrase, clipped, phrase_json
from runbooks.model.secrets import redact_text, secret_name
from runbooks.model.templates import SPEC_OWNER_KINDS, deployment_view
from runbooks.remediation.edits import hpa as hpa_edits
from runbooks.remediation.edits.common import invalid
from runbooks.remediation.edits.launch_edit import edit_flags, server_container
from runbooks.remediation.edits.max_surge import surge_value
from runbooks.remediation.edits.owner_flags import edit_owner_flags, serving_sites, sites_of
from runbooks.remediation.edits.quantities import canonical_quantity
from runbooks.remediation.edits.registry import edit_workload
from runbooks.remediation.plan import WRITTEN, Plan, PlanTarget
from runbooks.remediation.policy import ApprovalPolicy, approvals_needed
from runbooks.remediation.preview import Note
from runbooks.remediation.split import ACTION as SPLIT_KIND
from runbooks.remediation.split import (
    CREATE_OBJECTS,
    TEMPLATE_EVENT,
    inverse_of_creates,
    is_phase1,
    is_split,
    watched_name,
)
from runbooks.remediation.value_ranges import (
    check_option,
    check_plannable,
    check_replicas,
    check_switch,
    check_tgi_plan,
    check_value,
    check_vllm_plan,
    model_bound,
)
from runbooks.sizing.capacity import MeasuredPool
from runbooks.triage.actions import ESCALATE_ONLY


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
    #: changes of the other kinds at their new values (`AddShm(None, None, "16Gi")`)
    changes: tuple[Change, ...] = ()
    #: maxReplicas of an HPA gpumem creates (default: twice the current replicas)
    hpa_max: int | None = None
    #: the engine version a triage read (the log's version line), for flags whose spelling
    #: depends on it when the image tag does not say (`runbooks.remediation.edits.launch_edit.edit_flags`)
    engine_version: str | None = None


def writer_for(kubeconfig: str | None, context: str | None, observer: Any = None) -> KubeWriter:
    """A writer for the cluster this kubeconfig and context name (the operator's own identity on
    the CLI; the config's `remediation.writer` for the bot, with the reader's client as
    `observer` for the watch's reads of pods and logs)."""
    return KubeWriter(kube_api(Endpoint(kubeconfig, context)), observer_api=observer)


def new_plan_id() -> str:
    return "p-" + secrets.token_hex(4)


def build_plan(obj: dict[str, Any], request: PlanRequest, policy: ApprovalPolicy, now: datetime,
               hpas: list[dict[str, Any]] | None = None,
               workload: PlanTarget | None = None) -> tuple[Plan, tuple[Phrase, ...]]:
    """The plan for `request` against `obj` (the object as read now) and the namespace's HPAs
    (`hpas`, read when the request scales or asks for a queue HPA). An InferenceService or a
    LeaderWorkerSet takes server flags only (`_owner_plan`; `workload`: the Deployment its
    controller writes, whose rollout the watch follows). Raises UsageError when it asks for
    nothing or for what cannot be edited safely (`runbooks.remediation.edits`). Beside the plan:
    what the flag edits say about the deployed version's spellings (`EditResult.spelling_notes`)."""
    target = PlanTarget(request.cluster, request.namespace, request.kind, request.name)
    if request.kind in SPEC_OWNER_KINDS:
        return _owner_plan(obj, request, policy, now, workload)
    hpa = hpa_edits.hpa_for(hpas or [], request.kind, request.name)
    queue = [c for c in request.changes if isinstance(c, HpaOnQueueDepth)]
    if queue or (request.replicas is not None and hpa is not None):
        return _hpa_plan(obj, hpa, hpas or [], request, policy, now, queue), ()
    meta = obj.get("metadata") or {}
    changes: list[Change] = []
    ops: list[dict[str, Any]] = []
    spelling: tuple[Phrase, ...] = ()
    if request.flags:
        request = replace(request, flags=checked_flags(obj, request.container, request.flags,
                                                       request.engine_version))
        edit = edit_flags(obj, request.container, dict(request.flags), engine_version=request.engine_version,
                          reader=CONTAINER_READER)
        ops += list(edit.json_patch)
        spelling = edit.spelling_notes()
        container = request.container or _server_container(obj)
        # the flag as written: the spelling the object or the deployed version uses
        changes += [SetArg(container, edit.spelled.get(flag, flag), edit.old.get(edit.spelled.get(flag, flag)), value)
                    for flag, value in request.flags]
    if request.replicas is not None:
        check_replicas(request.replicas)
        old = (obj.get("spec") or {}).get("replicas")
        if old == request.replicas:
            raise UsageError("nothing_to_change", what=Phrase("reason.replicas_already", {"replicas": old}))
        ops += [{"op": "test", "path": "/spec/replicas", "value": old},
                {"op": "replace", "path": "/spec/replicas", "value": request.replicas}]
        changes.append(Scale(old, request.replicas))
    for change in request.changes:
        edit = edit_workload(obj, change, request.container, reader=CONTAINER_READER)
        ops += edit.ops
        changes += edit.changes
    if not changes:
        raise UsageError("nothing_to_change", what=Phrase("reason.no_set_or_replicas"))
    _one_op_per_path(ops)
    return _plan(target, None, request, tuple(changes), meta, tuple(ops), JSON_PATCH, policy, now), spelling


def _owner_plan(obj: dict[str, Any], request: PlanRequest, policy: ApprovalPolicy, now: datetime,
                workload: PlanTarget | None) -> tuple[Plan, tuple[Phrase, ...]]:
    """A plan of server flags on the object that declares the pods (`edits.owner_flags`): an
    InferenceService's model args or predictor containers, a LeaderWorkerSet's leader and
    worker templates in one patch. Other changes are refused (`kind_takes_flags_only`)."""
    if request.replicas is not None or request.changes:
        kinds = sorted({c.kind for c in request.changes} | ({"scale"} if request.replicas is not None else set()))
        raise UsageError("kind_takes_flags_only", kind=request.kind, target=f"{request.namespace}/{request.name}",
                         kinds=", ".join(kinds))
    if not request.flags:
        raise UsageError("nothing_to_change", what=Phrase("reason.no_set"))
    if request.container and request.action_id != "manual":
        # a triage's action names the container of the pods (KServe's `kserve-container` is the
        # Deployment's; an owner may name it otherwise): the owner's server container is used
        names = {c.get("name") for s in sites_of(obj) for c in s.pod_spec.get("containers") or []}
        if request.container not in names:
            request = replace(request, container=None)
    site = serving_sites(obj, request.container, reader=CONTAINER_READER)[0]
    request = replace(request, flags=checked_flags(deployment_view(obj, site), request.container, request.flags,
                                                   request.engine_version))
    edit = edit_owner_flags(obj, request.container, dict(request.flags), engine_version=request.engine_version,
                            reader=CONTAINER_READER)
    # one change per flag: every edited template read the same old value (`templates_differ`
    # otherwise), and the patch carries it to each of them
    _site, result = edit.sites[0]
    changes: list[Change] = [SetArg(result.container, result.spelled.get(flag, flag),
                                    result.old.get(result.spelled.get(flag, flag)), value)
                             for flag, value in request.flags]
    ops = list(edit.ops)
    _one_op_per_path(ops)
    target = PlanTarget(request.cluster, request.namespace, request.kind, request.name)
    return _plan(target, workload, request, tuple(changes), obj.get("metadata") or {}, tuple(ops), JSON_PATCH,
                 policy, now), result.spelling_notes()


def spec_owner_of(obj: dict[str, Any]) -> tuple[str, str] | None:
    """(kind, name) of the InferenceService or LeaderWorkerSet that is `obj`'s controller owner:
    the object gpumem writes a server flag to instead of the Deployment or StatefulSet it makes."""
    for ref in (obj.get("metadata") or {}).get("ownerReferences") or []:
        if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") in SPEC_OWNER_KINDS \
                and isinstance(ref.get("name"), str) and ref["name"]:
            return ref["kind"], ref["name"]
    return None


def owned_deployment(writer: KubeWriter, request: PlanRequest) -> PlanTarget | None:
    """The workload an InferenceService's or LeaderWorkerSet's controller writes, whose rollout
    the watch follows: an InferenceService's Deployment (KServe's raw deployment mode), a
    LeaderWorkerSet's leader StatefulSet (named as it), found by owner reference in a list read
    with the writer's observer (the reader's identity in the bot: the writer's Role lists no
    Deployments or StatefulSets). None when none is found or the list cannot be read (the plan
    is made; the CLI and Slack then say its rollout is not watched, and why)."""
    made = {"InferenceService": ("deployments", "Deployment"), "LeaderWorkerSet": ("statefulsets", "StatefulSet")}
    if request.kind not in made:
        return None
    resource, kind = made[request.kind]
    where = path("apis", "apps", "v1", "namespaces", request.namespace, resource)
    try:
        items = writer.observer.get_json(where, timeout_s=writer.timeout_s).get("items") or []
    except Exception:  # forbidden, unreachable, not JSON: no rollout to follow, said so by the CLI
        return None
    found = []
    for item in items:
        if not isinstance(item, dict):
            continue
        for ref in (item.get("metadata") or {}).get("ownerReferences") or []:
            if isinstance(ref, dict) and ref.get("controller") is True and ref.get("kind") == request.kind \
                    and ref.get("name") == request.name:
                found.append(str(item["metadata"]["name"]))
    if request.kind == "LeaderWorkerSet":  # the leader StatefulSet; the workers' are the leader pods'
        found = [n for n in found if n == request.name]
    return PlanTarget(request.cluster, request.namespace, kind, found[0]) if found else None


def _pinned_gpu(obj: dict[str, Any]) -> GpuSpec | None:
    """The card the workload's node selector pins (the weakest where it allows several), None
    where it pins none the catalog knows or the pod spec cannot be read."""
    pod_spec = ((obj.get("spec") or {}).get("template") or {}).get("spec") or {}
    try:
        return weakest_gpu_of_labels(node_selector(pod_spec, "spec.template.spec", "workload"))
    except (GpumemError, ParseError):  # a pod spec the reader refuses pins no card
        return None


def checked_flags(obj: dict[str, Any], container: str | None,
                  flags: tuple[tuple[str, Any], ...], engine_version: str | None = None) -> tuple[tuple[str, Any], ...]:
    """`flags` held to `runbooks.remediation.value_ranges` for the engine `obj`'s server
    container runs (a credential flag refused by name, each value in its flag's range, token
    lengths within the model's max_position_embeddings when the catalog knows the model, and
    TGI's limits to the checks TGI runs between them at start, for the version of the image
    tag, else `engine_version`), as the values to plan. Raises UsageError before any plan
    exists."""
    for flag, value in flags:
        refuse_credential(flag, value)
    _index, _spec, config = server_container(obj, container, reader=CONTAINER_READER)
    max_positions = None
    if config.model:
        try:
            max_positions = find_model(config.model).max_position_embeddings
        except (GpumemError, ValueError):  # a model the catalog does not know: no bound from it
            max_positions = None
    bound = model_bound(config.max_model_len, max_positions)
    out = []
    for flag, value in flags:
        engine = config.engine or ""
        name = canonical_flag(engine, str(flag).lstrip("-")) if engine else str(flag).lstrip("-")
        check_plannable(name, value)  # the engine's own spelling, abbreviations resolved
        if name in BOOLEAN_FLAGS.get(engine, frozenset()):
            out.append((flag, check_switch(name, value)))
        else:
            out.append((flag, check_value(engine, name, value, max_length=bound)))
    if config.engine == "tgi":
        check_tgi_plan(config, tuple((canonical_flag("tgi", str(f).lstrip("-")), v) for f, v in out),
                       config.engine_version or engine_version, _pinned_gpu(obj))
    elif config.engine == "vllm":
        check_vllm_plan(config, tuple((canonical_flag("vllm", str(f).lstrip("-")), v) for f, v in out))
    return tuple(out)


def _plan(target: PlanTarget, workload: PlanTarget | None, request: PlanRequest, changes: tuple[Change, ...],
          meta: dict[str, Any], patch: tuple[dict[str, Any], ...], patch_type: str, policy: ApprovalPolicy,
          now: datetime) -> Plan:
    return Plan(new_plan_id(), target, request.action_id, changes, str(meta.get("resourceVersion") or ""),
                meta.get("generation"), patch, patch_type, request.requested_by or operator(), now,
                now + timedelta(seconds=policy.ttl_s), approvals_needed(policy, changes), request.origin,
                workload)


def _one_op_per_path(ops: list[dict[str, Any]]) -> None:
    written = [op["path"] for op in ops if op["op"] != "test"]
    twice = sorted({p for p in written if written.count(p) > 1})
    if twice:
        raise UsageError("separate_plans", object=", ".join(twice))


def _hpa_plan(obj: dict[str, Any], hpa: dict[str, Any] | None, hpas: list[dict[str, Any]], request: PlanRequest,
              policy: ApprovalPolicy, now: datetime, queue: list[HpaOnQueueDepth]) -> Plan:
    """A plan that writes the workload's HPA (created when there is none and the queue HPA is asked for)."""
    name = (hpa.get("metadata") or {}).get("name") if hpa else request.name
    if request.flags or len(queue) > 1 or (queue and request.replicas is not None) or any(
            not isinstance(c, HpaOnQueueDepth) for c in request.changes):
        raise UsageError("separate_plans", object=f"{hpa_edits.HPA_KIND} {name}")
    if queue:
        change = queue[0]
        metric = change.metric or hpa_edits.queue_metric(obj, request.container, reader=CONTAINER_READER)
        if hpa is None and any((h.get("metadata") or {}).get("name") == name for h in hpas):
            raise invalid(hpa_edits.HPA_KIND, name, "an HPA of that name scales another workload")
        edit = hpa_edits.hpa_queue(obj, hpa, metric, 4 if change.new is None else change.new, request.hpa_max)
    else:
        assert hpa is not None and request.replicas is not None
        edit = hpa_edits.hpa_scale(hpa, request.replicas)  # its own words for what an HPA cannot take
        check_replicas(request.replicas)
    workload = PlanTarget(request.cluster, request.namespace, request.kind, request.name)
    target = PlanTarget(request.cluster, request.namespace, hpa_edits.HPA_KIND, str(name))
    if edit.create is not None:
        return _plan(target, workload, request, edit.changes, {}, (edit.create,), CREATE, policy, now)
    return _plan(target, workload, request, edit.changes, (hpa or {}).get("metadata") or {}, edit.ops, JSON_PATCH,
                 policy, now)


def _server_container(obj: dict[str, Any]) -> str | None:
    containers = (((obj.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
    return containers[0].get("name") if len(containers) == 1 else None


#: `make_plan`'s default reader: the writer's own connection reads the preview's nodes and pods
WRITER_READS = object()


def make_plan(store: Store, writer: KubeWriter, request: PlanRequest, policy: ApprovalPolicy,
              now: datetime | None = None, channel: str | None = None, thread_ts: str | None = None,
              reader: Any = WRITER_READS, argocd_namespace: str = ARGOCD_NAMESPACE) -> StoredPlan:
    """Read the object, build the plan with its preview (`bot.service.plan_preview`: nodes and
    pods read through `reader`, a KubeRest; by default the writer's own connection, as on the
    CLI where the operator's kubeconfig does both; None: not read), store it as proposed (with
    the Slack channel and the incident thread it belongs to, when it came from Slack). A pool
    split's phases are planned by `bot.service.split_pools.make_plan`, which builds on this."""
    now = now or datetime.now(UTC)
    obj = writer.read(request.kind, request.namespace, request.name)
    # the engine's own KV pool, as the last triage of this workload read it, for the preview
    reported = triage_kv_pool(store, request.namespace, request.name)
    owner = spec_owner_of(obj) if request.kind in ("Deployment", "StatefulSet") else None
    if owner is not None and request.flags and request.replicas is None and not request.changes:
        # the controller rewrites this object from its owner's spec: the flag is written there
        made = PlanTarget(request.cluster, request.namespace, request.kind, request.name)
        try:
            owner_obj = writer.read(owner[0], request.namespace, owner[1])
        except (TargetNotFound, NotPermitted):  # the owner cannot be read: the plan is made on the object
            owner = None  # itself, and `managed_guard` refuses to apply it
        else:
            request = replace(request, kind=owner[0], name=owner[1],
                              origin=f"{request.origin}; {made.kind} {made.namespace}/{made.name} is written by "
                                     f"{owner[0]} {owner[1]}, so the plan writes {owner[0]} {owner[1]}")
            obj = owner_obj
    workload = None
    if request.kind in SPEC_OWNER_KINDS:
        workload = (made if owner is not None and (made.kind == "Deployment" or made.name == request.name)
                    else owned_deployment(writer, request))
    hpas = None
    if request.replicas is not None or any(isinstance(c, HpaOnQueueDepth) for c in request.changes):
        hpas = writer.list(hpa_edits.HPA_KIND, request.namespace)  # an HPA would undo a replica change
    plan, spelling = build_plan(obj, request, policy, now, hpas, workload)
    rest = writer.rest if reader is WRITER_READS else reader
    made = preview(obj, plan, rest, writer.timeout_s, reported)
    # what the flag edits say about the deployed version's spellings, first among the notes
    spelled = tuple(Note("flag_spelling", {"note": n}) for n in spelling)
    plan = replace(plan, preview=replace(made, notes=(*spelled, *made.notes)),
                   managers=plan_managers(obj, plan, hpas or [], writer.observer if reader is WRITER_READS else reader,
                                          argocd_namespace, writer.timeout_s))
    return store.add_plan(plan, channel=channel, thread_ts=thread_ts, now=now)


def plan_managers(obj: dict[str, Any], plan: Plan, hpas: list[dict[str, Any]], rest: Any,
                  argocd_namespace: str = ARGOCD_NAMESPACE, timeout_s: float = 10.0) -> tuple[Manager, ...]:
    """Who manages the object `plan` writes (the workload `obj`, or the HPA it patches; a plan
    that creates objects: the workload's), Argo CD's sync policy read through `rest` (None: not
    read, said as unknown)."""
    written = obj
    if plan.workload is not None and plan.patch_type == JSON_PATCH and plan.target.kind == hpa_edits.HPA_KIND:
        written = next((h for h in hpas if (h.get("metadata") or {}).get("name") == plan.target.name), {})
    managers = managers_of(written)
    return with_sync_policy(managers, rest, argocd_namespace, timeout_s) if managers else ()


#: the change kinds a plan can be built from (`build_plan`)
APPLY_KINDS = ("set_arg", "scale", "add_startup_probe", "hpa_on_queue_depth", "lower_max_surge", "add_shm",
               "raise_memory_limit")


def _drives(change: Change) -> bool:
    """Whether `change` carries the request; the others follow from it: an HPA's maxReplicas
    from its minReplicas, maxUnavailable from maxSurge, the memory request from the limit."""
    if isinstance(change, Scale):
        return change.hpa_field in (None, "minReplicas")
    if isinstance(change, LowerMaxSurge):
        return change.rollout_field in (None, "maxSurge")
    if isinstance(change, RaiseMemoryLimit):
        return change.memory_field in (None, "limits.memory")
    return True


def request_from_changes(namespace: str, name: str, cluster: str | None, action_id: str,
                         changes: tuple[Change, ...], *, requested_by: str, origin: str,
                         kind: str = "Deployment", engine_version: str | None = None) -> PlanRequest:
    """The plan request for a recommended action's typed changes (a triage's "Plan" button, a
    re-plan): flags at their new values, replicas at the new count, the other kinds at theirs.
    Raises UsageError escalate_only for an escalate-tier action, not_applicable when a change
    is of a kind gpumem cannot apply."""
    if action_id in ESCALATE_ONLY:
        raise UsageError("escalate_only", action=action_id)
    if not changes:
        raise UsageError("nothing_to_change", what=Phrase("reason.action_without_changes", {"action": action_id}))
    other = sorted({c.kind for c in changes if c.kind not in APPLY_KINDS})
    if other == [SPLIT_KIND]:  # two phases of their own: `bot.service.split_pools`
        raise UsageError("split_use_option", target=f"{namespace}/{name}")
    if other:
        raise UsageError("not_applicable", action=action_id, kinds=", ".join(other))
    driving = [c for c in changes if _drives(c)]
    flags = tuple((c.flag, c.new) for c in driving if isinstance(c, SetArg) and c.flag)
    for flag, value in flags:
        refuse_credential(flag, value)
    containers = {c.container for c in driving if isinstance(c, SetArg) and c.container}
    replicas = next((int(c.new) for c in driving if isinstance(c, Scale)), None)
    rest = tuple(c for c in driving if not isinstance(c, (SetArg, Scale)))
    return PlanRequest(namespace, name, kind, cluster, flags, replicas,
                       containers.pop() if len(containers) == 1 else None, action_id, requested_by, origin, rest,
                       engine_version=engine_version)


def _cause(plan: Plan, verb: str) -> str:
    changes = "; ".join(c.describe() for c in plan.changes)
    return f"gpumem {verb} {plan.id} ({plan.action_id}): {changes}"


def apply_now(store: Store, writer: KubeWriter, plan_id: str, actor: str, now: datetime | None = None,
              channel: str | None = None, stopgap_on_gitops: tuple[str, ...] = (),
              argocd_namespace: str = ARGOCD_NAMESPACE) -> StoredPlan:
    """Apply a plan the operator approves by running this (the CLI): proposed -> approved ->
    applying -> applied, the rollback note in the audit before the write, every actuator guard.
    A refusal records the plan as failed (nothing written) or leaves it for a re-plan."""
    stored = store.get(plan_id)
    plan = stored.plan
    if plan.expired(now or datetime.now(UTC)) and stored.state == "proposed":
        store.move(plan_id, "expired", actor="gpumem", expect="proposed", now=now)
        raise PlanExpired(plan=plan_id)
    if stored.state == "proposed":
        store.approve(plan_id, actor, plan.content_hash, channel=channel, now=now)
        stored = store.get(plan_id)
        if stored.state == "proposed":  # a plan that needs two approvals: the CLI gives one
            raise UsageError("needs_more_approvals", plan=plan_id, needed=plan.approvals_needed)
    return apply_approved(store, writer, plan_id, actor, now=now, channel=channel,
                          stopgap_on_gitops=stopgap_on_gitops, argocd_namespace=argocd_namespace)


def rollback_note(plan: Plan) -> dict[str, Any]:
    """What is recorded (and posted in Slack) before the write: the inverse change, the prior
    values of what changes, the triage it came from."""
    inverse = inverse_of_creates(plan.patch) if plan.patch_type == CREATE_OBJECTS else rollback_ops(plan)
    return {"plan": plan.id, "target": str(plan.target), "inverse": inverse,
            "prior": [c.describe() for c in plan.changes], "origin": plan.origin}


#: the audit event of a plan whose write was sent and whose outcome nobody could read
OUTCOME_UNKNOWN = "outcome_unknown"
#: the audit event of a stop-gap written to a GitOps-managed object (`remediation.stopgap_on_gitops`)
STOPGAP_EVENT = "stopgap_on_gitops"


def target_managers(writer: KubeWriter, kind: str, namespace: str, name: str,
                    argocd_namespace: str = ARGOCD_NAMESPACE) -> tuple[Manager, ...]:
    """Who manages the object as it is now (`collectors.kube.managers`), Argo CD's sync policy
    read with the writer's observer (the reader's identity in the bot, whose ClusterRole grants
    get on argoproj.io applications; the operator's on the CLI): unknown, and said so, where not."""
    obj = writer.read(kind, namespace, name)
    return with_sync_policy(managers_of(obj), writer.observer, argocd_namespace, writer.timeout_s)


def stopgap_allowed(namespace: str, stopgap_on_gitops: tuple[str, ...]) -> bool:
    return namespace in stopgap_on_gitops or "*" in stopgap_on_gitops


def managed_guard(writer: KubeWriter, plan: Plan, stopgap_on_gitops: tuple[str, ...] = (),
                  argocd_namespace: str = ARGOCD_NAMESPACE) -> tuple[Manager, ...]:
    """Refuse (ManagedElsewhere) a plan whose object something else manages: a controller owner
    always (`managed_controller`: it puts the spec back at once), Argo CD, Flux or Helm unless
    the namespace is in `stopgap_on_gitops` (`managed_gitops`). Returns the GitOps managers of
    an allowed stop-gap (empty: nothing manages it). A plan that creates its object reads the
    workload it is for."""
    if plan.patch_type == JSON_PATCH:
        where = plan.target
    elif plan.workload is not None:
        where = plan.workload
    else:
        return ()
    managers = target_managers(writer, where.kind, where.namespace, where.name, argocd_namespace)
    blocking = tuple(m for m in managers if blocks_writes(m))
    if not blocking:
        return ()
    params = {"target": f"{where.namespace}/{where.kind}/{where.name}", "plan": plan.id,
              "managers": [m.to_json() for m in managers]}
    if any(m.kind == "controller" for m in blocking):
        raise ManagedElsewhere("managed_controller", **params)
    if not stopgap_allowed(where.namespace, stopgap_on_gitops):
        raise ManagedElsewhere("managed_gitops", **params)
    return blocking



def apply_approved(store: Store, writer: KubeWriter, plan_id: str, actor: str, now: datetime | None = None,
                   channel: str | None = None, before_write: Any = None, on_dry_run: Any = None,
                   stopgap_on_gitops: tuple[str, ...] = (), argocd_namespace: str = ARGOCD_NAMESPACE) -> StoredPlan:
    """Apply an approved plan: approved -> applying (one transaction: a second caller gets
    PlanMoved and writes nothing), the rollback note committed to the audit and handed
    to `before_write(note)` (Slack posts it in the thread), then re-read, dry run (`on_dry_run()`
    once it passed) and the write with its precondition -> applied; a refusal -> failed.

    A write whose answer did not settle it was read again by the actuator: on the object ->
    applied (the audit's `unclear` says why it was read again); provably not -> failed
    (TemporaryError `not_applied`, re-raised); the object unreadable -> OutcomeUnknown is
    re-raised and the plan stays `applying`, with an `outcome_unknown` audit row that lets the
    reconcile pass (`bot.service.reconcile`) settle it at once.

    Before anything is recorded as sent, `managed_guard` reads who manages the object: a
    controller owner, Argo CD, Flux or Helm -> ManagedElsewhere, the plan failed, nothing
    written; a GitOps-managed one in a namespace of `stopgap_on_gitops` is written, with a
    `stopgap_on_gitops` audit row the handover lists as drift."""
    plan = store.get(plan_id).plan
    store.move(plan_id, "applying", actor=actor, expect="approved", channel=channel, now=now)
    try:
        stopgap = managed_guard(writer, plan, stopgap_on_gitops, argocd_namespace)
    except GpumemError as e:  # managed elsewhere (or unreadable): refused before any write
        store.move(plan_id, "failed", actor="gpumem", expect="applying", channel=channel, now=now,
                   detail={"error": e.code, **{k: clipped(v) for k, v in e.params.items()}})
        raise
    if stopgap:  # allowed by remediation.stopgap_on_gitops: drift to fold back into the source
        store.record(STOPGAP_EVENT, actor=actor, channel=channel, now=now,
                     detail={"plan": plan_id, "target": str(plan.target), "managers": [m.to_json() for m in stopgap],
                             "changes": [c.describe() for c in plan.changes]})
    note = rollback_note(plan)
    store.record("rollback_note", actor=actor, channel=channel, now=now, detail=note)
    made_generation = None
    if plan.target.kind in SPEC_OWNER_KINDS and plan.workload is not None:
        try:  # the controller's rewrite of the Deployment must move past this generation
            made_generation = (writer.read(plan.workload.kind, plan.workload.namespace, plan.workload.name)
                               .get("metadata") or {}).get("generation")
        except GpumemError:
            made_generation = None
    try:
        if before_write is not None:
            before_write(note)
        write = (partial(apply_creates, reader=CONTAINER_READER) if plan.patch_type == CREATE_OBJECTS  # split_pools phase 1 creates
                 else apply_plan)
        written = write(writer, plan, _cause(plan, "plan"), on_dry_run=on_dry_run)
    except OutcomeUnknown as e:  # sent, and neither the answer nor a re-read says what became of it
        params = {**{k: clipped(v) for k, v in e.params.items() if k != "delay_s"}, "plan": plan_id}
        store.record(OUTCOME_UNKNOWN, actor="gpumem", channel=channel, now=now, detail=params)
        raise OutcomeUnknown(e.delay_s, **params) from e
    except GpumemError as e:
        store.move(plan_id, "failed", actor="gpumem", expect="applying", channel=channel, now=now,
                   detail={"error": e.code, **{k: clipped(v) for k, v in e.params.items()}})
        raise
    detail: dict[str, Any] = {"resource_version": written.resource_version, "generation": written.generation}
    if made_generation is not None:
        detail["workload_generation"] = made_generation
    if written.unclear:  # the answer was lost: the re-read found the change
        detail["unclear"] = written.unclear
    if written.baseline is not None:  # the pods right before the write, for the watch
        detail["baseline"] = written.baseline.to_json()
    elif written.baseline_error:
        detail["baseline_error"] = written.baseline_error
    return store.move(plan_id, "applied", actor="gpumem", expect="applying", channel=channel, now=now, detail=detail)


#: the kinds whose rollout the watch follows (`bot.actuator.watch.ROLLOUTS`)
WATCHED_KINDS = ("Deployment", "StatefulSet")


def watchable(plan: Plan) -> bool:
    """Whether the watch can follow what `plan` changes: a Deployment's or StatefulSet's rollout
    (the plan's target, the workload an HPA scales), an InferenceService's through the Deployment
    its controller writes, a LeaderWorkerSet's through its status and its leader StatefulSet. Not
    when that workload was not found when the plan was made (its status cannot be read)."""
    if plan.patch_type == CREATE_OBJECTS:
        return True
    if plan.target.kind in SPEC_OWNER_KINDS:
        return plan.workload is not None and plan.workload.kind in WATCHED_KINDS
    return (plan.workload or plan.target).kind in WATCHED_KINDS


def watch_after(store: Store, writer: KubeWriter, plan_id: str, window_s: float, *, auto_rollback: bool = False,
                poll_s: float = 10.0, clock: Any = None, sleep: Any = None, on_look: Any = None,
                symptoms: Any = None) -> tuple[StoredPlan, Any]:
    """Watch an applied plan's rollout for `window_s`: held or symptoms remain -> watched, failed
    -> failed (rolled back at once when `auto_rollback`, and the audit says so), a field the plan
    changed put back by another writer -> reverted (never rolled back: the change is gone; the
    audit row names the fields, the manager and the time). The watch judges only what the
    change produced, against the pods recorded right before the write; with `symptoms`
    (`bot.service.watch_metrics.symptoms_reader`) each look reads Prometheus too."""
    stored = store.get(plan_id)
    plan = stored.plan
    applied = next((e.detail for e in reversed(store.plan_audit(plan_id)) if e.to_state == "applied"), {})
    kind = (plan.workload or plan.target).kind if plan.patch_type != CREATE_OBJECTS else "Deployment"
    if plan.target.kind in SPEC_OWNER_KINDS and plan.workload is not None:
        # the owner was written: its controller's rewrite of the Deployment (a LeaderWorkerSet's:
        # of its leader StatefulSet) is what moves, and it must bump the generation that
        # workload had right before the write
        before = applied.get("workload_generation")
        generation = before + 1 if isinstance(before, int) else None
        watched = plan.workload.name
        if plan.target.kind == "LeaderWorkerSet":  # its own status and its leader StatefulSet's
            kind, watched = "LeaderWorkerSet", plan.target.name
    elif plan.workload is not None:  # the HPA was written: the workload's rollout is what moves
        workload = plan.workload
        generation = (writer.read(workload.kind, workload.namespace, workload.name).get("metadata") or {}).get(
            "generation")
        watched = workload.name
    else:
        generation = applied.get("generation")
        watched = watched_name(plan)
    written = (WrittenObject(plan.target.kind, plan.target.name, partial(three_way, plan), plan.patch)
               if plan.patch_type == JSON_PATCH else None)  # a created object has no field to put back
    seen = watch(writer, plan.target.namespace, watched, generation, window_s, poll_s=poll_s,
                 clock=clock or time.monotonic, sleep=sleep or time.sleep, on_look=on_look,
                 baseline=Baseline.from_json(applied.get("baseline")), symptoms=symptoms, written=written, kind=kind)
    detail: dict[str, Any] = {"outcome": seen.outcome, "notes": phrase_json(seen.notes), "restarts": seen.restarts,
                              "oom_lines": seen.oom_lines}
    if seen.reverted:
        detail["reverted"] = [r.to_json() for r in seen.reverted]
    if seen.symptoms is not None:
        detail["prometheus"] = {"kv_usage": seen.symptoms.kv_usage, "queue": seen.symptoms.queue,
                                "preemptions": seen.symptoms.preemptions, "error": phrase_json(seen.symptoms.error)}
    if seen.outcome in ("held", "symptoms_remain"):
        return store.move(plan_id, "watched", actor="gpumem", expect="applied", detail=detail), seen
    if seen.outcome == "reverted":  # nothing of gpumem's to roll back: fold it into the source of truth
        return store.move(plan_id, "reverted", actor="gpumem", expect="applied", detail=detail), seen
    stored = store.move(plan_id, "failed", actor="gpumem", expect="applied", detail=detail)
    if auto_rollback:
        _undo(store, writer, stored, "auto-rollback")
        stored = store.move(plan_id, "rolled_back", actor="gpumem", detail={"auto": True})
    return stored, seen


def rollback_now(store: Store, writer: KubeWriter, plan_id: str, actor: str, now: datetime | None = None,
                 channel: str | None = None) -> StoredPlan:
    """Restore what the plan changed, refusing (ChangedAfterApply, with the three
    values per field) when someone changed it after gpumem did."""
    stored = store.get(plan_id)
    if stored.state not in ("applied", "watched", "failed"):
        raise PlanMoved(plan=plan_id, state=stored.state, wanted="rolled_back")
    unclear = _undo(store, writer, stored, "rollback", actor=actor, channel=channel, now=now)
    return store.move(plan_id, "rolled_back", actor=actor, channel=channel, now=now,
                      detail={"unclear": unclear} if unclear else None)


#: the audit event of a rollback that was sent and whose outcome nobody could read
ROLLBACK_OUTCOME_UNKNOWN = "rollback_outcome_unknown"


def _undo(store: Store, writer: KubeWriter, stored: StoredPlan, verb: str, *, actor: str = "gpumem",
          channel: str | None = None, now: datetime | None = None) -> Phrase | str | None:
    """Undo what a plan wrote: the inverse patch, or for a split's phase 1 the deletes. Returns
    why the outcome was read again (the answer did not settle it; the re-read shows it undone),
    None when the answer did. A rollback whose outcome cannot be read raises OutcomeUnknown,
    after an audit row the reconcile pass settles it from (the plan keeps its state)."""
    try:
        if stored.plan.patch_type == CREATE_OBJECTS:  # a pool split's phase 1: the deletes
            unclear: list[Phrase | str] = []
            rollback_created(store, writer, stored, unclear)
            if len(unclear) < 2:
                return unclear[0] if unclear else None
            return Phrase("reason.list", {"items": unclear})
        return rollback_plan(writer, stored.plan, _cause(stored.plan, verb)).unclear
    except OutcomeUnknown as e:
        params = {k: clipped(v) for k, v in e.params.items() if k != "delay_s"}
        store.record(ROLLBACK_OUTCOME_UNKNOWN, actor=actor, channel=channel, now=now,
                     detail={**params, "plan": stored.plan.id})
        raise OutcomeUnknown(e.delay_s, code=ROLLBACK_OUTCOME_UNKNOWN, **{**params, "plan": stored.plan.id}) from e


def rollback_created(store: Store, writer: KubeWriter, stored: StoredPlan,
                     unclear: list[Phrase | str] | None = None) -> list[str]:
    """Delete what a plan of patch type `create_objects` (a pool split's phase 1) created,
    refused (StaleObject split_phase2_active) while a phase-2 plan made after it is on the
    cluster: the tightened short pool would then refuse long requests. `unclear` gets why a
    delete was read again (its answer was lost; the re-read shows it gone)."""
    plan = stored.plan
    for other in store.plans(namespace=plan.target.namespace, limit=200):
        p = other.plan
        if (p.target.name == plan.target.name and is_split(p) and not is_phase1(p) and other.state in WRITTEN
                and (template_of(store, p.id) or {}).get("phase1") == plan.id):
            raise StaleObject("split_phase2_active", plan=plan.id, phase2=p.id, state=other.state)
    return delete_created(writer, plan, unclear)


def template_of(store: Store, plan_id: str) -> dict[str, Any] | None:
    """The template values recorded with a split plan (None for another plan): the audit row
    `bot.service.split_pools.make_plan` writes beside it."""
    rows = [r for r in store.plan_audit(plan_id) if r.event == TEMPLATE_EVENT]
    return rows[-1].detail.get("template") if rows else None


def action_changes(store: Store, namespace: str, name: str, action_id: str) -> tuple[Change, ...]:
    """The typed changes of `action_id` as the newest recorded triage of NAMESPACE/NAME gave them
    (`gpumem plan --action ID`, `/gpumem plan ... --action ID`). Raises UsageError no_action
    when no triage was recorded or it did not recommend that action with changes, not_applicable
    when a recorded change is of a kind this gpumem does not know."""
    record = Journal(store).last_triage(namespace, name)
    raw = ((record.summary.get("action_changes") or {}) if record else {}).get(action_id)
    if not raw:
        raise UsageError("no_action", target=f"{namespace}/{name}", action=action_id)
    unknown = sorted({str(item[0]) for item in raw if item and item[0] not in KINDS})
    if unknown:
        raise UsageError("not_applicable", action=action_id, kinds=", ".join(unknown))
    return tuple(change_of(*item) for item in raw)


def triage_engine_version(store: Store, namespace: str, name: str) -> str | None:
    """The engine version the last recorded triage of the workload read (None: none said)."""
    record = Journal(store).last_triage(namespace, name)
    version = record.summary.get("engine_version") if record else None
    return version if isinstance(version, str) else None


def triage_kv_pool(store: Store, namespace: str, name: str) -> MeasuredPool | None:
    """The KV pool the engine reported in the last recorded triage of the workload, beside the
    budget's figure for the flags it ran with (None: that triage read no pool from the engine)."""
    record = Journal(store).last_triage(namespace, name)
    pool = record.summary.get("kv_pool") if record else None
    if not isinstance(pool, dict):
        return None
    tokens, computed = pool.get("tokens"), pool.get("computed")
    if not isinstance(tokens, int) or not isinstance(computed, int) or tokens <= 0 or computed <= 0:
        return None
    # read in that triage: its time is where it came from
    return MeasuredPool(tokens, record.at.strftime("%Y-%m-%d %H:%M UTC"), computed=computed)


def plan_request(store: Store, namespace: str, name: str, *, kind: str, cluster: str | None, sets: list[str],
                 replicas: int | None, container: str | None, action: str | None, requested_by: str,
                 origin: str, other: tuple[Change, ...] = (), hpa_max: int | None = None) -> PlanRequest:
    """The request `gpumem plan` / `/gpumem plan` makes: `--action ID` (the recorded triage's
    changes) or explicit changes (`--set`, `--replicas`, and `other`: `explicit_changes`), not
    both. An escalate-tier action (quantize, a bigger GPU, TP) is refused: it has no apply path."""
    if action:
        if sets or replicas is not None or other:
            raise UsageError("action_and_changes")
        if action in ESCALATE_ONLY:
            raise UsageError("escalate_only", action=action)
        changes = action_changes(store, namespace, name, action)
        return request_from_changes(namespace, name, cluster, action, changes, requested_by=requested_by,
                                    origin=f"{origin}, action {action} of the last triage", kind=kind,
                                    engine_version=triage_engine_version(store, namespace, name))
    return PlanRequest(namespace, name, kind, cluster, parse_set(sets), replicas, container,
                       requested_by=requested_by, origin=origin, changes=other,
                       hpa_max=None if hpa_max is None else check_option("--hpa-max", hpa_max))


def explicit_changes(args: Any) -> tuple[Change, ...]:
    """The other kinds' changes a `plan` command line asks for (`--startup-probe [S]`,
    `--queue-target N` with `--queue-metric`, `--max-surge V`, `--shm-size Q`, `--memory-limit Q`)."""
    out = []
    container = getattr(args, "container", None)
    probe = getattr(args, "startup_probe", None)
    if probe is not None:
        out.append(AddStartupProbe(container, None, None, check_option("--startup-probe", probe)))
    target = getattr(args, "queue_target", None)
    target = None if target is None else check_option("--queue-target", target)
    metric = getattr(args, "queue_metric", None)
    if target is not None or metric is not None:
        out.append(HpaOnQueueDepth(metric, None, 4 if target is None else target))
    surge = getattr(args, "max_surge", None)
    if surge is not None:
        out.append(LowerMaxSurge("maxSurge", None, surge_value(surge)))
    shm = getattr(args, "shm_size", None)
    if shm is not None:
        out.append(AddShm(container, None, canonical_quantity(shm, "--shm-size")))
    limit = getattr(args, "memory_limit", None)
    if limit is not None:
        out.append(RaiseMemoryLimit(container, "limits.memory", None, canonical_quantity(limit, "--memory-limit")))
    return tuple(out)


def parse_set(values: list[str]) -> tuple[tuple[str, Any], ...]:
    """`--set max-num-seqs=64 --set enforce-eager=` -> (("max-num-seqs", 64), ("enforce-eager", None))."""
    out = []
    for raw in values:
        flag, sep, value = raw.partition("=")
        flag = flag.strip().lstrip("-")
        if not sep or not flag:
            raise UsageError("bad_set", value=redact_text(raw))
        parsed = _value(value.strip())
        refuse_credential(flag, parsed)  # before the cluster is read: a credential is never planned
        out.append((flag, parsed))
    return tuple(out)


def refuse_credential(flag: str, value: Any) -> None:
    """UsageError secret_flag_not_plannable (or secret_value_not_plannable) for a flag that
    carries a credential, before any cluster is read: by its name as given and as each engine
    spells it (an abbreviation argparse takes, `--max-num-batched-token`, is the engine's
    `--max-num-batched-tokens`, not a token)."""
    name = str(flag).strip().lstrip("-")
    spellings = {name, *(canonical_flag(engine, name) for engine in ("vllm", "sglang", "tgi"))}
    if all(secret_name(s) for s in spellings):
        check_plannable(name, value)
    check_plannable(next((s for s in sorted(spellings) if not secret_name(s)), name), value)


def _value(text: str) -> Any:
    if text == "":
        return None
    if len(text) > 24 and text.lstrip("+-").isdigit():  # no count has that many digits: kept as typed, refused by range
        return text
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            continue
    return text
