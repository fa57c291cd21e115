"""The split_pools use case (`gpumem plan NS/DEPLOY --split-pools`): two plans, so that no request
is ever refused by the change (`runbooks.remediation.split` says how each pool is sized).

Phase 1 plans the creation of `<name>-long` (Deployment and Service cloned from the original,
long-context flags edited in the Deployment's own launch form) and leaves the original alone.
Phase 2 is refused until a phase-1 plan of the same Deployment is applied and someone confirms
(`--routing-confirmed`, recorded in the audit with who) that the gateway sends prompts longer
than the threshold to `<name>-long`; it then tightens the original to the short pool's flags,
an ordinary flag patch whose rollback restores the single pool's flags.

Both plans live in the store like any other (states, approvals, audit); what the runbook's
pool-split and routing-rollback templates need is recorded beside each as an audit row
(`split_pools`), and `template_of` reads it back for the surfaces.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.actuator.split_apply import existing
from bot.actuator.writer import KubeWriter
from bot.service import remediate
from bot.service.budget import read_profile, setup_for
from bot.service.container_reader import CONTAINER_READER
from bot.service.remediate import (
    WRITER_READS,
    PlanRequest,
    action_changes,
    build_plan,
    new_plan_id,
    operator,
    template_of,
)
from bot.store.db import Store, StoredPlan
from bot.store.notes import Journal
from collectors.errors import ParseError
from collectors.parsers.kube_objects import workload_from_object
from runbooks.model.changes import Change, SplitPools
from runbooks.model.errors import StaleObject, TargetNotFound, UsageError
from runbooks.model.lengths import BucketShare, RequestProfile
from runbooks.model.phrases import Phrase
from runbooks.remediation import split
from runbooks.remediation.edits.split_clones import build_clones
from runbooks.remediation.plan import Plan, PlanTarget
from runbooks.remediation.policy import ApprovalPolicy, approvals_needed
from runbooks.remediation.solver import request_lengths
from runbooks.remediation.split import TEMPLATE_EVENT, is_phase1, is_split
from runbooks.remediation.value_ranges import check_option
from runbooks.sizing.capacity import MeasuredPool

#: the audit event that records who confirmed the routing before phase 2
ROUTING_EVENT = "routing_confirmed"
#: states in which a phase-1 plan's objects are on the cluster and serving
PHASE1_LIVE = ("applied", "watched")


@dataclass(frozen=True)
class SplitRequest:
    namespace: str
    name: str
    cluster: str | None = None
    phase: int = 1
    #: prompt tokens above which a request goes to the long pool (None: the runbook's boundary)
    threshold: int | None = None
    #: an access log to take the request profile from (p99 lengths)
    profile_path: str | None = None
    long_replicas: int = split.DEFAULT_LONG_REPLICAS
    #: the original Service (None: the one named like the Deployment)
    service: str | None = None
    container: str | None = None
    #: the GPU model when the Deployment pins none
    gpu: str | None = None
    routing_confirmed: bool = False
    requested_by: str = ""
    origin: str = "cli"
    #: the watch window the routing-rollback template names
    watch_s: float = 600.0
    #: a request profile known already (Slack: the last recorded triage's), used when there is
    #: no `profile_path`
    profile: RequestProfile | None = None


#: the plan options that only a pool split takes, as (attribute, option)
_SPLIT_OPTIONS = (("phase", "--phase"), ("threshold", "--threshold"), ("routing_confirmed", "--routing-confirmed"),
                  ("profile", "--profile"), ("long_replicas", "--long-replicas"), ("service", "--service"),
                  ("gpu", "--gpu"))
#: of those, the ones that size phase 1 only
_PHASE1_OPTIONS = ("profile", "long_replicas", "service")


def request_from_args(args: Any, namespace: str, name: str, *, cluster: str | None, requested_by: str,
                      origin: str, watch_s: float) -> SplitRequest | None:
    """The SplitRequest `gpumem plan ... --split-pools` asks for; None without --split-pools.
    Raises UsageError naming the option that does not belong."""
    given = [(attr, option) for attr, option in _SPLIT_OPTIONS if getattr(args, attr, None) not in (None, False)]
    if not getattr(args, "split_pools", False):
        if given:
            raise UsageError("split_options_need_split", option=given[0][1])
        return None
    if getattr(args, "set", None) or getattr(args, "replicas", None) is not None or getattr(args, "action", None):
        raise UsageError("split_and_changes")
    kind = getattr(args, "kind", "Deployment") or "Deployment"
    if kind != "Deployment":
        raise UsageError("split_deployment_only", kind=kind)
    phase = getattr(args, "phase", None) or 1
    if phase == 2:
        extra = [option for attr, option in given if attr in _PHASE1_OPTIONS]
        if extra:
            raise UsageError("split_phase1_option", option=extra[0])
    elif getattr(args, "routing_confirmed", False):
        raise UsageError("split_routing_phase2")
    threshold, long_replicas = getattr(args, "threshold", None), getattr(args, "long_replicas", None)
    return SplitRequest(namespace, name, cluster, phase,
                        None if threshold is None else check_option("--threshold", threshold),
                        getattr(args, "profile", None),
                        split.DEFAULT_LONG_REPLICAS if long_replicas is None else check_option("--long-replicas",
                                                                                               long_replicas),
                        getattr(args, "service", None), getattr(args, "container", None), getattr(args, "gpu", None),
                        bool(getattr(args, "routing_confirmed", False)), requested_by, origin, watch_s)


def recorded_profile(store: Store, namespace: str, name: str) -> RequestProfile | None:
    """The request profile of the last triage of NAMESPACE/NAME recorded in the store (what Slack
    sizes the long pool from, since it cannot read an access log on the bot's host); None when no
    triage was recorded or it had no profile with lengths."""
    record = Journal(store).last_triage(namespace, name)
    raw = (record.summary.get("profile") if record is not None else None) or {}
    if raw.get("p99_total_tokens") is None and raw.get("p99_input_tokens") is None:
        return None

    def number(key: str) -> float | None:
        value = raw.get(key)
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    buckets = tuple(BucketShare(str(k), int(v[0]), float(v[1])) for k, v in (raw.get("buckets") or {}).items()
                    if isinstance(v, list) and len(v) == 2)
    source = f"triage {namespace}/{name} {record.at.strftime('%Y-%m-%d %H:%M UTC')}"
    return RequestProfile(source, int(raw.get("requests") or 0), buckets,
                          p50_input_tokens=number("p50_input_tokens"), p95_input_tokens=number("p95_input_tokens"),
                          p99_input_tokens=number("p99_input_tokens"), p95_output_tokens=number("p95_output_tokens"),
                          p99_output_tokens=number("p99_output_tokens"), estimated=bool(raw.get("estimated")),
                          p95_total_tokens=number("p95_total_tokens"), p99_total_tokens=number("p99_total_tokens"))


def slack_request(store: Store, args: Any, namespace: str, name: str, *, cluster: str | None, requested_by: str,
                  origin: str, watch_s: float) -> SplitRequest | None:
    """`/gpumem plan NS/NAME --split-pools ...` (or `--action split_pools`): the CLI's request,
    phase 1 sized from the last recorded triage's request profile when it has one (Slack cannot
    read an access log: the grammar refuses --profile). None when the command is not a split."""
    if getattr(args, "action", None) == split.ACTION and not getattr(args, "split_pools", False):
        if getattr(args, "set", None) or getattr(args, "replicas", None) is not None:
            raise UsageError("action_and_changes")
        changes = _recorded_split(store, namespace, name)
        return request_from_action(store, namespace, name, cluster, changes, requested_by=requested_by,
                                   origin=f"{origin}, action {split.ACTION} of the last triage", watch_s=watch_s)
    request = request_from_args(args, namespace, name, cluster=cluster, requested_by=requested_by, origin=origin,
                                watch_s=watch_s)
    if request is None or request.phase != 1 or request.profile_path:
        return request
    return replace(request, profile=recorded_profile(store, namespace, name))


def _recorded_split(store: Store, namespace: str, name: str) -> tuple[Change, ...]:
    return action_changes(store, namespace, name, split.ACTION)


def request_from_action(store: Store, namespace: str, name: str, cluster: str | None, changes: tuple[Change, ...],
                        *, requested_by: str, origin: str, watch_s: float) -> SplitRequest:
    """Phase 1 of the triage's split_pools action (its typed change carries the threshold and the
    server container), sized from the last recorded triage's request profile."""
    change = next((c for c in changes if c.kind == split.ACTION), None)
    if change is None or any(c.kind != split.ACTION for c in changes):
        raise UsageError("not_applicable", action=split.ACTION,
                         kinds=", ".join(sorted({c.kind for c in changes})) or "-")
    threshold = change.new if isinstance(change.new, int) and not isinstance(change.new, bool) else None
    if threshold is not None and not 1 <= threshold <= 10_000_000:
        raise UsageError("split_bad_threshold", threshold=threshold)
    return SplitRequest(namespace, name, cluster, 1, threshold, container=change.container,
                        requested_by=requested_by, origin=origin, watch_s=watch_s,
                        profile=recorded_profile(store, namespace, name))


def phase2_request(stored: StoredPlan, user: str, *, origin: str, watch_s: float) -> SplitRequest:
    """Phase 2 after `user` confirmed the routing of the phase-1 plan `stored` (its Deployment, its
    cluster, its threshold)."""
    plan = stored.plan
    if not (is_split(plan) and is_phase1(plan)):
        raise UsageError("split_not_phase1", plan=plan.id)
    t = plan.target
    return SplitRequest(t.namespace, t.name, t.cluster, 2, routing_confirmed=True, requested_by=user, origin=origin,
                        watch_s=watch_s)


def replan_request(store: Store, stored: StoredPlan, user: str, *, watch_s: float) -> SplitRequest:
    """A fresh phase-1 plan like `stored` (same threshold, long-pool replicas and Service) against
    the objects as they are now. Phase 2 is not re-planned this way: it needs the routing
    confirmed again (UsageError split_replan_phase2)."""
    plan = stored.plan
    if not is_phase1(plan):
        raise UsageError("split_replan_phase2", plan=plan.id, target=f"{plan.target.namespace}/{plan.target.name}")
    t = template_of(store, plan.id) or {}
    long, short = t.get("long") or {}, t.get("short") or {}
    container = next((c.container for c in plan.changes if c.container), None)
    return SplitRequest(plan.target.namespace, plan.target.name, plan.target.cluster, 1, t.get("threshold"),
                        long_replicas=int(long.get("replicas") or split.DEFAULT_LONG_REPLICAS),
                        service=short.get("service"), container=container, requested_by=user, origin=plan.origin,
                        watch_s=watch_s, profile=recorded_profile(store, plan.target.namespace, plan.target.name))


def make_plan(store: Store, writer: KubeWriter, request: PlanRequest | SplitRequest, policy: ApprovalPolicy,
              now: datetime | None = None, channel: str | None = None, thread_ts: str | None = None,
              reader: Any = WRITER_READS, argocd_namespace: str = "argocd") -> StoredPlan:
    """The stored plan for any plan request: a pool split's phase (`make_split_plan`), or any other
    plan (`bot.service.remediate.make_plan`, with its preview read through `reader` and an Argo
    CD Application's sync policy from `argocd_namespace`)."""
    if isinstance(request, SplitRequest):
        return make_split_plan(store, writer, request, policy, now=now, channel=channel, thread_ts=thread_ts)
    return remediate.make_plan(store, writer, request, policy, now=now, channel=channel, thread_ts=thread_ts,
                               reader=reader, argocd_namespace=argocd_namespace)


def make_split_plan(store: Store, writer: KubeWriter, request: SplitRequest, policy: ApprovalPolicy,
                    now: datetime | None = None, channel: str | None = None,
                    thread_ts: str | None = None) -> StoredPlan:
    """Build and store the plan of `request.phase`, with its template row in the audit."""
    now = now or datetime.now(UTC)
    request = replace(request, requested_by=request.requested_by or operator())
    # the engine's own KV pool, as the last triage of the workload read it
    reported = remediate.triage_kv_pool(store, request.namespace, request.name)
    if request.phase == 1:
        plan, template = _phase1(writer, request, policy, now, reported)
    elif request.phase == 2:
        plan, template = _phase2(store, writer, request, policy, now, reported)
    else:
        raise UsageError("split_bad_phase", phase=request.phase)
    stored = store.add_plan(plan, channel=channel, thread_ts=thread_ts, now=now)
    if request.phase == 2:
        store.record(ROUTING_EVENT, actor=request.requested_by, channel=channel, now=now,
                     detail={"plan": plan.id, "phase1": template["phase1"], "threshold": template["threshold"],
                             "long_service": template["long"]["service"],
                             "short_service": template["short"]["service"]})
    store.record(TEMPLATE_EVENT, actor=request.requested_by, channel=channel, now=now,
                 detail={"plan": plan.id, "phase": request.phase, "template": template})
    return stored


# ------------------------------------------------------------------------------- phase 1


def _original_service(writer: KubeWriter, namespace: str, original: dict[str, Any], name: str | None,
                      deployment: str) -> dict[str, Any]:
    service_name = name or deployment
    try:
        service = writer.read("Service", namespace, service_name)
    except TargetNotFound:
        raise UsageError("split_no_service", namespace=namespace, service=service_name) from None
    selector = (service.get("spec") or {}).get("selector") or {}
    pod_labels = (((original.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    if not split.selects(selector, pod_labels):
        raise UsageError("split_service_mismatch", namespace=namespace, service=service_name, deployment=deployment,
                         selector=", ".join(f"{k}={v}" for k, v in sorted(selector.items())) or "none")
    return service


def _setup(original: dict[str, Any], gpu: str | None):
    name = (original.get("metadata") or {}).get("name")
    try:
        workload, config = workload_from_object(original, f"deployment {name}")
    except ParseError as e:
        raise UsageError("split_no_server", name=name, reason=e.reason) from None
    if config is None:
        raise UsageError("split_no_server", name=name, reason=Phrase("reason.no_server_container"))
    split.flags_for(config.engine or "")
    try:
        return workload, config, setup_for(workload, config, gpu)
    except UsageError as e:
        raise UsageError(f"split_{e.code}", **e.params) from None


def _profile(path: str | None):
    if not path:
        return None, None
    try:
        return read_profile(path)
    except UsageError as e:
        raise UsageError(f"split_{e.code}", **e.params) from None


def _gpus(workload) -> tuple[int, str]:
    gpu = workload.gpu
    return (gpu.count, gpu.resource) if gpu is not None else (0, "nvidia.com/gpu")


def _phase1(writer: KubeWriter, request: SplitRequest, policy: ApprovalPolicy, now: datetime,
            reported: MeasuredPool | None = None) -> tuple[Plan, dict]:
    ns, name = request.namespace, request.name
    original = writer.read("Deployment", ns, name)
    long = split.long_name(name)
    taken = existing(writer, ns, [{"kind": "Deployment", "name": long}, {"kind": "Service", "name": long}])
    if taken:
        raise StaleObject("split_exists", plan="-", namespace=ns, objects=", ".join(taken))
    service = _original_service(writer, ns, original, request.service, name)
    workload, config, setup = _setup(original, request.gpu)
    length_flag, seqs_flag = split.flags_for(config.engine or "")
    profile, detail = _profile(request.profile_path)
    if profile is None and request.profile is not None:
        profile = request.profile
    threshold = request.threshold or split.default_threshold()
    current_len = config.max_model_len or setup.model.max_position_embeddings
    current_seqs = config.max_num_seqs or setup.inputs.max_num_seqs
    p99 = request_lengths(profile, detail)[0] if profile is not None else None
    length, basis = split.long_pool_length(p99, current_len, setup.model.max_position_embeddings)
    long_size = split.size_pool(setup.model, setup.inputs, length, limit=current_seqs, basis=basis,
                                p99=int(p99) if p99 is not None else None, measured=reported)
    short_len = split.short_pool_length(threshold, profile)
    if not current_len or short_len >= current_len:
        raise UsageError("split_threshold_too_high", threshold=threshold, short=short_len, current=current_len)
    short_size = split.size_pool(setup.model, setup.inputs, short_len, limit=current_seqs, basis="short_pool",
                                 measured=reported)

    wanted = [(length_flag, long_size.max_model_len), (seqs_flag, long_size.max_num_seqs)]
    long_deployment, long_service, container = build_clones(original, service, replicas=request.long_replicas,
                                                            container=request.container, flags=wanted,
                                                            reader=CONTAINER_READER)
    # the store keeps the clones masked, and what rebuilds them from the originals at apply time
    ops = split.stored_ops(split.create_ops(long_deployment, long_service),
                           [split.source_of(original, "Deployment"), split.source_of(service, "Service")],
                           {"replicas": request.long_replicas, "container": container,
                            "flags": [list(f) for f in wanted]})
    changes = (SplitPools(container, "Deployment", None, f"create Deployment/{long}"),
               SplitPools(None, "Service", None, f"create Service/{long}"))
    meta = original.get("metadata") or {}
    plan = Plan(new_plan_id(), PlanTarget(request.cluster, ns, "Deployment", name), split.ACTION, changes,
                str(meta.get("resourceVersion") or ""), meta.get("generation"), ops, split.CREATE_OBJECTS,
                request.requested_by, now, now + timedelta(seconds=policy.ttl_s), approvals_needed(policy, changes),
                f"{request.origin}, split_pools phase 1")
    per_pod, resource = _gpus(workload)
    replicas = int((original.get("spec") or {}).get("replicas") or 1)
    ports = [p.get("port") for p in (service.get("spec") or {}).get("ports") or [] if p.get("port")]
    template = {
        "phase": 1, "plan": plan.id, "phase1": plan.id, "namespace": ns, "threshold": threshold,
        "engine": config.engine, "flags": [length_flag, seqs_flag], "gpu": setup.gpu_label,
        "port": ports[0] if ports else None, "gpu_resource": resource, "watch_s": request.watch_s,
        # "engine_anchored": the pools are the engine's own (the last triage's) plus the computed change
        "kv_pool_basis": "budget" if long_size.pool_tokens is None else "engine_anchored",
        "profile": _profile_summary(profile, p99),
        "long": {"deployment": long, "service": long, "replicas": request.long_replicas,
                 "max_model_len": long_size.max_model_len, "max_num_seqs": long_size.max_num_seqs,
                 "length_basis": long_size.length_basis, "kv_tokens": long_size.kv_cache_tokens,
                 "fits": long_size.fits, "gpus_per_pod": per_pod, "gpu_quota": per_pod * request.long_replicas,
                 "labels": dict(((long_deployment["spec"].get("template") or {}).get("metadata") or {})
                                .get("labels") or {}),
                 "selector": dict(long_service["spec"]["selector"])},
        "short": {"deployment": name, "service": service["metadata"]["name"], "replicas": replicas,
                  "max_model_len": short_len, "max_num_seqs": short_size.max_num_seqs,
                  "kv_tokens": short_size.kv_cache_tokens, "gpus_per_pod": per_pod, "gpu_quota": per_pod * replicas,
                  "output_allowance": split.short_output_allowance(profile)},
        "single": {"max_model_len": config.max_model_len, "max_num_seqs": config.max_num_seqs,
                   "memory_fraction": config.memory_fraction, "replicas": replicas},
    }
    return plan, template


def _profile_summary(profile, p99: float | None) -> dict[str, Any] | None:
    if profile is None:
        return None
    return {"source": profile.source, "requests": profile.total, "p99_total_tokens": int(p99) if p99 else None,
            "long_share": round(profile.share("L", "XL"), 4)}


# ------------------------------------------------------------------------------- phase 2


def phase1_of(store: Store, namespace: str, name: str) -> StoredPlan | None:
    """The newest phase-1 plan of NAMESPACE/NAME (any state)."""
    for stored in store.plans(namespace=namespace, limit=200):
        p = stored.plan
        if p.target.name == name and is_split(p) and is_phase1(p):
            return stored
    return None


def _phase2(store: Store, writer: KubeWriter, request: SplitRequest, policy: ApprovalPolicy,
            now: datetime, reported: MeasuredPool | None = None) -> tuple[Plan, dict]:
    ns, name = request.namespace, request.name
    first = phase1_of(store, ns, name)
    if first is None or first.state not in PHASE1_LIVE:
        raise UsageError("split_phase1_not_applied", target=f"{ns}/{name}",
                         state=first.state if first else Phrase("reason.no_phase1"), plan=first.plan.id if first else "-")
    template = dict(template_of(store, first.plan.id) or {})
    if not template:
        raise UsageError("split_phase1_not_applied", target=f"{ns}/{name}", state=Phrase("reason.no_template"),
                         plan=first.plan.id)
    threshold = template["threshold"]
    long = template["long"]
    if not request.routing_confirmed:
        raise UsageError("split_routing_unconfirmed", threshold=threshold, namespace=ns, long=long["service"],
                         short=template["short"]["service"], target=f"{ns}/{name}")
    if request.threshold is not None and request.threshold != threshold:
        raise UsageError("split_threshold_differs", threshold=request.threshold, confirmed=threshold,
                         plan=first.plan.id)
    try:
        writer.read("Deployment", ns, long["deployment"])
    except TargetNotFound:
        raise UsageError("split_long_missing", namespace=ns, long=long["deployment"], plan=first.plan.id) from None
    original = writer.read("Deployment", ns, name)
    _, config, setup = _setup(original, request.gpu)
    length_flag, seqs_flag = split.flags_for(config.engine or "")
    short_len = int(template["short"]["max_model_len"])
    current_len = config.max_model_len or setup.model.max_position_embeddings
    if current_len and short_len >= current_len:
        raise UsageError("nothing_to_change", what=Phrase("reason.flag_already", {"flag": f"--{length_flag}", "value": current_len}))
    current_seqs = config.max_num_seqs or setup.inputs.max_num_seqs
    size = split.size_pool(setup.model, setup.inputs, short_len, limit=current_seqs, basis="short_pool",
                           measured=reported)
    flags: list[tuple[str, Any]] = [(length_flag, short_len)]
    if size.limit and size.max_num_seqs < size.limit:
        flags.append((seqs_flag, size.max_num_seqs))
    who = request.requested_by
    # phase 2 is planned without a preview: its spelling notes are not shown either
    plan, _spelling = build_plan(original, PlanRequest(ns, name, "Deployment", request.cluster, tuple(flags), None,
                                            request.container, split.ACTION, who,
                                            f"{request.origin}, split_pools phase 2 after {first.plan.id}"),
                      policy, now)
    routing = SplitPools(None, "routing", None, f"confirmed by {who}: prompt tokens > {threshold} -> Service/{long['service']}")
    changes = (*plan.changes, routing)
    plan = replace(plan, changes=changes, approvals_needed=approvals_needed(policy, changes))
    template.update({
        "phase": 2, "plan": plan.id, "phase1": first.plan.id, "routing_confirmed_by": who,
        "kv_pool_basis": "budget" if size.pool_tokens is None else "engine_anchored",
        "short": {**template["short"], "max_model_len": short_len, "max_num_seqs": size.max_num_seqs,
                  "kv_tokens": size.kv_cache_tokens},
        "single": {**template["single"], "max_model_len": config.max_model_len, "max_num_seqs": config.max_num_seqs,
                   "memory_fraction": config.memory_fraction},
    })
    return plan, template
