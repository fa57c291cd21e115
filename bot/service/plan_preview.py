"""A plan's preview: what it predicts before anyone approves it.

- **The budget before and after**, per pod: the live object's server flags and the flags as the
  plan's exact patch leaves them, each budgeted the way `gpumem budget --from-deployment` does it
  (`bot.service.budget.resolve_workload`, then `compute_budget`): the same model, the same
  numbers. A replica change leaves the per-pod figures alone and scales the service's total
  concurrency. When the model, the GPU or the engine is not known, the preview says which
  (`BudgetPreview.missing`) instead of guessing; a GPU the Deployment does not pin is taken from
  the nodes its pods run on when they all carry the same `nvidia.com/gpu.product`.
- **The blast radius** (`runbooks.remediation.preview.blast_radius`): the pods that restart,
  the pods the rollout runs beyond today's at once and the GPUs they ask for, against the spare
  GPUs on the nodes the pod template lets them run on, read with the reader identity
  (`collectors.kube.gpu_room`: list nodes and pods cluster-wide, which deploy/base/rbac-reader.yaml
  grants). A rollout that would be stuck says so, with the fix.

An InferenceService or a LeaderWorkerSet plan is previewed from the object it writes: the
budget from the flags its spec declares, read as triage and `gpumem budget` read them
(`collectors.parsers.kube_objects.workload_from_object`, the same sites), its replicas an
InferenceService's `spec.predictor.minReplicas` or a LeaderWorkerSet's groups; the blast radius
over the pods its controller runs (KServe's `serving.kserve.io/inferenceservice` label, the
LeaderWorkerSet's `leaderworkerset.sigs.k8s.io/name`). An InferenceService's pods roll as a
Deployment (its `spec.predictor.deploymentStrategy`, else 25% / 25%). A LeaderWorkerSet group is
one leader and `size - 1` workers, each pod on a node of its own (tensor or pipeline parallel
across nodes): the rollout replaces groups (`spec.rolloutStrategy.rollingUpdateConfiguration`,
maxUnavailable 1 and maxSurge 0 by default), so its surge and its pods are counted in pods,
`size` per group, each pod asking for the GPUs its template asks for.

Nothing here fails a plan: what could not be read or worked out is a note in the preview.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from typing import Any

from bot.grammar.requests import BudgetRequest
from bot.service.connections import endpoint, kube_api
from collectors.errors import ParseError, field
from collectors.kube.client import KubeConfigError
from collectors.kube.gpu_room import GpuRoom, read_gpu_room
from collectors.kube.rest import KubeRest
from collectors.parsers.kube_objects import workload_from_object
from collectors.parsers.kube_placement import (
    placement_from_pod_spec,
    rollout_from_object,
    selector_from_object,
    shares_gpu_memory,
    template_gpus,
)
from runbooks.model.changes import Scale, SetArg
from runbooks.model.errors import GpumemError, UsageError
from runbooks.model.phrases import Phrase
from runbooks.model.templates import SPEC_OWNER_KINDS, TemplateShapeError, deployment_view, pod_sites
from runbooks.remediation.plan import Plan
from runbooks.remediation.preview import (
    BudgetFigures,
    BudgetPreview,
    Note,
    PlanPreview,
    Rollout,
    blast_radius,
    resolve_step,
    selector_matches,
)
from runbooks.sizing.budget import compute_budget
from runbooks.sizing.capacity import MeasuredPool
from runbooks.sizing.whatif import canonical_key

#: the kinds a preview reads as a workload
WORKLOAD_KINDS = ("Deployment", "StatefulSet")
#: budget resolution errors -> what is missing, in the preview's words
_MISSING = {"no_engine": "engine", "no_model": "model", "unknown_model": "model", "config_unreadable": "model",
            "no_gpu": "gpu", "unknown_gpu": "gpu", "mig_ambiguous": "gpu", "not_positive": "gpu"}
_PRODUCT_LABEL = "nvidia.com/gpu.product"
#: the label an owner's controller puts on every pod it makes, its value the owner's name
OWNER_POD_LABEL = {"InferenceService": "serving.kserve.io/inferenceservice",
                   "LeaderWorkerSet": "leaderworkerset.sigs.k8s.io/name"}
#: where an owner declares its pods: a patch under it changes them
_OWNER_TEMPLATE = {"InferenceService": "/spec/predictor", "LeaderWorkerSet": "/spec/leaderWorkerTemplate"}


def reader_for(settings: Any, cluster: str | None) -> KubeRest | None:
    """The reader identity's connection to the plan's cluster (the bot's ServiceAccount, or the
    configured kubeconfig and context): the nodes and pods of a blast radius are read with it,
    never with the writer, whose Role grants neither. None when no config loads (the preview
    then says nodes and pods were not read)."""
    try:
        api = kube_api(endpoint(settings, cluster))
    except KubeConfigError:
        return None
    return KubeRest(api)


# ----------------------------------------------------------------------------- the patched object


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


def patched(obj: dict[str, Any], ops: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """`obj` as the plan's RFC 6902 operations leave it (add, remove, replace; the `test`s were
    made from this very object). Raises ValueError for an operation it does not apply.

    >>> patched({"spec": {"replicas": 2, "a": [1, 2]}}, ({"op": "test", "path": "/spec/replicas", "value": 2},
    ...         {"op": "replace", "path": "/spec/replicas", "value": 3}, {"op": "add", "path": "/spec/a/-", "value": 9}))
    {'spec': {'replicas': 3, 'a': [1, 2, 9]}}
    """
    doc = copy.deepcopy(obj)
    for op in ops:
        kind = op.get("op")
        if kind == "test":
            continue
        if kind not in ("add", "remove", "replace"):
            raise ValueError(f"patch operation {kind!r} is not previewed")
        tokens = [_unescape(t) for t in str(op.get("path", "")).split("/")[1:]]
        if not tokens:
            raise ValueError("a patch of the whole object is not previewed")
        parent: Any = doc
        for token in tokens[:-1]:
            parent = parent[int(token)] if isinstance(parent, list) else parent[token]
        last = tokens[-1]
        if isinstance(parent, list):
            index = len(parent) if last == "-" else int(last)
            if kind == "add":
                parent.insert(index, copy.deepcopy(op.get("value")))
            elif kind == "remove":
                del parent[index]
            else:
                parent[index] = copy.deepcopy(op.get("value"))
        elif kind == "remove":
            del parent[last]
        else:
            parent[last] = copy.deepcopy(op.get("value"))
    return doc


def _touches_template(ops: tuple[dict[str, Any], ...], prefix: str = "/spec/template") -> bool:
    return any(op.get("op") != "test" and (str(op.get("path", "")) + "/").startswith(prefix + "/") for op in ops)


def _replicas(obj: dict[str, Any]) -> int:
    """The engine's replicas: a workload's pods, an InferenceService's minReplicas, a
    LeaderWorkerSet's groups (each one engine across its pods)."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if obj.get("kind") == "InferenceService":
        spec = spec.get("predictor") if isinstance(spec.get("predictor"), dict) else {}
        value = spec.get("minReplicas")
    else:
        value = spec.get("replicas")
    return value if isinstance(value, int) and not isinstance(value, bool) else 1  # the API server's default


# ----------------------------------------------------------------------------- the budget


def _setup(obj: dict[str, Any], gpu: str | None):
    # lazy: the budget resolution (model and GPU catalogs, the solver; ~150 ms with -X importtime
    # after this module) is paid by a plan's preview, not by every importer of bot.service.remediate
    from bot.service.budget import resolve_workload

    workload, config = workload_from_object(obj, "kube:deployments")
    if config is None:
        raise UsageError("no_server_container")
    # `gpumem budget` asked nothing beyond what the object says, and the GPU when it names none
    return workload, resolve_workload(BudgetRequest(gpu=gpu), workload, config)


def _gpu_of_nodes(obj: dict[str, Any], room: GpuRoom, pods: tuple[str, ...] | None) -> str | None:
    """The GPU product every node the workload's pods run on carries (with the pods' MIG
    profile), or None when they are not known or not all the same."""
    if not pods or room.nodes is None or room.pods is None:
        return None
    ns = (obj.get("metadata") or {}).get("namespace")
    on = {p.node for p in room.pods if p.namespace == ns and p.name in pods and p.node}
    products = {(n.labels.get(_PRODUCT_LABEL) or "") for n in room.nodes if n.name in on}
    if len(products) != 1 or not next(iter(products)) or len(on) != len({n.name for n in room.nodes} & on):
        return None
    product = products.pop()
    workload, _ = workload_from_object(obj, "kube:deployments")
    profile = workload.gpu.mig_profile if workload.gpu is not None else None
    return f"{product} MIG {profile}" if profile else product


def _on_pool(f: BudgetFigures, tokens: int) -> BudgetFigures:
    """One side's figures on another KV pool: the tokens, and the requests they hold at full length."""
    length = f.max_model_len or 0
    return replace(f, kv_cache_tokens=tokens, max_concurrency=round(tokens / length, 4) if length else 0.0)


def budget_preview(obj: dict[str, Any], after_obj: dict[str, Any] | None, plan: Plan, room: GpuRoom,
                   pods: tuple[str, ...] | None, reported: MeasuredPool | None = None) -> BudgetPreview:
    """The predicted budget of `obj` and `after_obj` (see the module docstring). With `reported`
    whose computed figure is the one the live object's flags give now (the same launch), the KV
    lines are the engine's own pool before and that pool plus the computed change after."""
    before_n, after_n = _replicas(obj), _replicas(after_obj) if after_obj is not None else None
    scale = next((c for c in plan.changes if isinstance(c, Scale) and isinstance(c.new, int)), None)
    if scale is not None:
        after_n = scale.new
    unmodelled = tuple(f"--{c.flag}" for c in plan.changes if isinstance(c, SetArg) and c.flag
                       and canonical_key(c.flag) is None)
    base = BudgetPreview(replicas_before=before_n, replicas_after=after_n, unmodelled=unmodelled)
    notes: list[Note] = []
    gpu = None
    try:
        try:
            _, before = _setup(obj, None)
        except UsageError as e:
            gpu = _gpu_of_nodes(obj, room, pods) if e.code == "no_gpu" else None
            if gpu is None:
                raise
            _, before = _setup(obj, gpu)
            notes.append(Note("gpu_from_nodes", {"gpu": gpu}))
    except UsageError as e:
        what = _MISSING.get(e.code, "server" if e.code == "no_server_container" else e.code)
        detail = {k: str(v) for k, v in e.params.items()}
        return replace(base, missing=(Note(what, {"code": e.code, **detail}),))
    notes += [Note(code, {k: str(v) for k, v in params.items()}) for code, params in before.notes]
    budget_before = compute_budget(before.model, before.inputs)
    figures_before = BudgetFigures.of(budget_before)
    # the engine's own pool, where the last triage read one for these very flags (the budget then
    # computed what it computes now); else, for a release whose start-ups print less, a warning
    running = int(budget_before.kv_cache_tokens or 0)
    anchor = reported if reported is not None and reported.holds_for(running) else None
    if anchor is not None:
        figures_before = _on_pool(figures_before, anchor.pool(running, running))
        notes.append(Note("kv_from_triage", {"tokens": f"{anchor.tokens:,}", "computed": f"{running:,}",
                                             "at": anchor.source}))
    elif "tgi_kv_optimistic" in budget_before.warnings:
        # the figures an approver reads are gpumem's, for a release whose start-ups print less
        notes.append(Note("tgi_kv_optimistic_preview", {"version": str(before.inputs.engine_version or "")}))
    common = dict(model=before.model.name, gpu=before.gpu_label, engine=before.inputs.engine, notes=tuple(notes))
    if after_obj is None:
        return replace(base, before=figures_before, **common, missing=(Note("after", {"code": "patch_not_previewed"}),))
    try:
        _, after = _setup(after_obj, gpu)
    except UsageError as e:
        return replace(base, before=figures_before, **common,
                       missing=(Note("after", {"code": e.code, **{k: str(v) for k, v in e.params.items()}}),))
    figures_after = BudgetFigures.of(compute_budget(after.model, after.inputs))
    if anchor is not None:
        figures_after = _on_pool(figures_after, anchor.pool(running, figures_after.kv_cache_tokens))
    return replace(base, before=figures_before, after=figures_after, **common)


# ----------------------------------------------------------------------------- the blast radius


def _workload_pods(obj: dict[str, Any], room: GpuRoom) -> tuple[str, ...] | None:
    if room.pods is None:
        return None
    ns = (obj.get("metadata") or {}).get("namespace")
    labels, expressions = selector_from_object(obj, "kube:deployments")
    return tuple(sorted(p.name for p in room.pods if p.namespace == ns and selector_matches(labels, expressions,
                                                                                            p.labels)))


def _owner_pods(obj: dict[str, Any], room: GpuRoom) -> tuple[str, ...] | None:
    """The pods an owner's controller runs for it, by the label it puts on them."""
    if room.pods is None:
        return None
    meta = obj.get("metadata") or {}
    label = OWNER_POD_LABEL[str(obj.get("kind"))]
    return tuple(sorted(p.name for p in room.pods if p.namespace == meta.get("namespace")
                        and p.labels.get(label) == meta.get("name")))


def _room_nodes(resource: str | None, room: GpuRoom, notes: list[Note]):
    """The nodes whose spare GPUs the blast radius counts: none for a vGPU share (said so)."""
    if shares_gpu_memory(resource):
        notes.append(Note("vgpu_not_checked", {"resource": str(resource)}))
        return None
    return room.nodes


def _dig(obj: Any, *keys: str) -> dict[str, Any]:
    """The mapping at `keys` of an object read from the cluster ({} where any step is not one)."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj if isinstance(obj, dict) else {}


def _group_size(obj: dict[str, Any]) -> int:
    size = _dig(obj, "spec", "leaderWorkerTemplate").get("size")
    return size if isinstance(size, int) and not isinstance(size, bool) and size >= 1 else 1


def _owner_blast(obj: dict[str, Any], new: dict[str, Any], plan: Plan, budget: BudgetPreview, room: GpuRoom,
                 pods: tuple[str, ...] | None, notes: list[Note]):
    """The blast radius of an InferenceService or LeaderWorkerSet plan (the module docstring)."""
    kind = str(obj.get("kind"))
    sites = pod_sites(new)
    changed = _touches_template(plan.patch, _OWNER_TEMPLATE[kind])
    before_n, after_n = _replicas(obj), budget.replicas_after if budget.replicas_after is not None else _replicas(new)
    if kind == "InferenceService":
        view = deployment_view(new, sites[0])
        view["spec"]["strategy"] = _dig(new, "spec", "predictor", "deploymentStrategy")
        resource, count = template_gpus(view, "kube:inferenceservices")
        return blast_radius(template_changed=changed, replicas_before=before_n, replicas_after=after_n,
                            rollout=rollout_from_object(view, "kube:inferenceservices"), gpu_resource=resource,
                            gpus_per_pod=count,
                            placement=placement_from_pod_spec(sites[0].pod_spec, source="kube:inferenceservices"),
                            nodes=_room_nodes(resource, room, notes), pods=room.pods, workload_pods=pods)
    # a LeaderWorkerSet: groups of `size` pods, each on its own node
    size = _group_size(new)
    per_site = [(site, template_gpus(deployment_view(new, site), "kube:leaderworkersets")) for site in sites]
    resources = {r for _s, (r, _c) in per_site if r}
    resource = resources.pop() if len(resources) == 1 else None
    counts = [c for _s, (r, c) in per_site if r]
    count = max(counts, default=0)
    if len(resources) > 1 or len(set(counts)) > 1:
        notes.append(Note("lws_gpus_differ", {"leader": str(per_site[0][1][1]), "worker": str(per_site[-1][1][1])}))
    rolling = _dig(new, "spec", "rolloutStrategy", "rollingUpdateConfiguration")
    surge_groups, unavailable_groups = resolve_step(
        Rollout("RollingUpdate", str(rolling.get("maxSurge", 0)), str(rolling.get("maxUnavailable", 1))), after_n)
    notes.append(Note("lws_groups", {"groups": str(after_n), "size": str(size), "workers": str(size - 1),
                                     "surge": str(surge_groups), "unavailable": str(unavailable_groups)}))
    worker = next((s for s in sites if s.role == "worker"), sites[-1])
    blast = blast_radius(template_changed=changed, replicas_before=before_n * size, replicas_after=after_n * size,
                        rollout=Rollout("RollingUpdate", str(surge_groups * size), str(unavailable_groups * size)),
                        gpu_resource=resource, gpus_per_pod=count,
                        placement=placement_from_pod_spec(worker.pod_spec, source="kube:leaderworkersets"),
                        nodes=_room_nodes(resource, room, notes), pods=room.pods, workload_pods=pods)
    if blast.outcome == "slower" and (blast.placeable_pods or 0) < size:
        # a group starts whole or not at all: room for fewer pods than one group is no room
        blast = replace(blast, outcome="unavailable" if blast.max_unavailable else "stuck")
    return blast


def _why(error: Exception) -> Phrase | str:
    """Why the preview stopped, as the renderers word it: a parser's or the template reader's
    reason as its phrase (its str() is the compact form kept for logs), any other error's text."""
    if isinstance(error, ParseError):
        return error.reason
    if isinstance(error, TemplateShapeError):
        return field(error.field, error.why)
    return str(error)[:300]


def preview(obj: dict[str, Any], plan: Plan, rest: KubeRest | None, timeout_s: float = 10.0,
            reported: MeasuredPool | None = None) -> PlanPreview:
    """The preview of `plan`, made against `obj` (the object as read for it); `rest` the reader's
    connection (None: nodes and pods are not read, and the blast radius says so); `reported` the
    KV pool the last triage of the target read from the engine."""
    kind = obj.get("kind") or plan.target.kind
    if kind in SPEC_OWNER_KINDS:
        return _owner_preview(obj, plan, rest, timeout_s, reported)
    if kind not in WORKLOAD_KINDS:
        return PlanPreview(notes=(Note("not_a_workload", {"kind": str(kind)}),))
    notes: list[Note] = []
    try:
        # a plan that writes the HPA scaling the workload: the workload as the HPA will leave it
        after_obj: dict[str, Any] | None = (scaled_by_hpa(obj, plan) if plan.workload is not None
                                            else patched(obj, plan.patch))
    except (ValueError, KeyError, IndexError, TypeError) as e:
        after_obj = None
        notes.append(Note("patch_not_previewed", {"reason": str(e)[:200]}))
    room = read_gpu_room(rest, timeout_s) if rest is not None else GpuRoom(None, None, (Phrase("read.no_cluster_reader"),))
    notes += [Note("read_failed", {"issue": issue}) for issue in room.issues]
    try:
        pods = _workload_pods(obj, room)
        budget = budget_preview(obj, after_obj, plan, room, pods, reported)
        new = after_obj if after_obj is not None else obj
        resource, count = template_gpus(new, "kube:deployments")
        nodes = room.nodes
        if shares_gpu_memory(resource):
            notes.append(Note("vgpu_not_checked", {"resource": str(resource)}))
            nodes = None
        spec = ((new.get("spec") or {}).get("template") or {}).get("spec")
        blast = blast_radius(template_changed=_touches_template(plan.patch), replicas_before=_replicas(obj),
                             replicas_after=budget.replicas_after, rollout=rollout_from_object(new, "kube:deployments"),
                             gpu_resource=resource, gpus_per_pod=count,
                             placement=placement_from_pod_spec(spec, source="kube:deployments"),
                             nodes=nodes, pods=room.pods, workload_pods=pods)
    except (ParseError, GpumemError, ValueError) as e:  # an object the parsers or the sizing refuse
        return PlanPreview(notes=(*notes, Note("preview_failed", {"error": _why(e)})))
    return PlanPreview(budget, blast, tuple(notes))


def _owner_preview(obj: dict[str, Any], plan: Plan, rest: KubeRest | None, timeout_s: float,
                   reported: MeasuredPool | None = None) -> PlanPreview:
    """The preview of a plan on an InferenceService or a LeaderWorkerSet (the module docstring)."""
    notes: list[Note] = []
    try:
        after_obj: dict[str, Any] | None = patched(obj, plan.patch)
    except (ValueError, KeyError, IndexError, TypeError) as e:
        after_obj = None
        notes.append(Note("patch_not_previewed", {"reason": str(e)[:200]}))
    room = read_gpu_room(rest, timeout_s) if rest is not None else GpuRoom(None, None, (Phrase("read.no_cluster_reader"),))
    notes += [Note("read_failed", {"issue": issue}) for issue in room.issues]
    try:
        pods = _owner_pods(obj, room)
        budget = budget_preview(obj, after_obj, plan, room, pods, reported)
        blast = _owner_blast(obj, after_obj if after_obj is not None else obj, plan, budget, room, pods, notes)
    except (ParseError, GpumemError, TemplateShapeError, ValueError) as e:  # what the parsers or sizing refuse
        return PlanPreview(notes=(*notes, Note("preview_failed", {"error": _why(e)})))
    return PlanPreview(budget, blast, tuple(notes))


def scaled_by_hpa(obj: dict[str, Any], plan: Plan) -> dict[str, Any]:
    """The workload `obj` once the HPA a plan writes has acted: its replicas raised to the new
    minReplicas (or lowered to the new maxReplicas); nothing else changes.

    >>> from runbooks.model.changes import Scale
    >>> from runbooks.remediation.plan import Plan, PlanTarget
    >>> from datetime import UTC, datetime
    >>> t = datetime(2026, 12, 1, tzinfo=UTC)
    >>> p = Plan("p-1", PlanTarget(None, "llm", "HorizontalPodAutoscaler", "a"), "scale_out",
    ...          (Scale(2, 3, "minReplicas"),), "1", 1, (), "application/json-patch+json", "U1", t, t,
    ...          workload=PlanTarget(None, "llm", "Deployment", "a"))
    >>> scaled_by_hpa({"kind": "Deployment", "spec": {"replicas": 2}}, p)["spec"]["replicas"]
    3
    """
    after = copy.deepcopy(obj)
    spec = after.setdefault("spec", {})
    replicas = int(spec.get("replicas") or 1)
    for change in plan.changes:
        if isinstance(change, Scale) and change.hpa_field == "minReplicas" and change.new is not None:
            replicas = max(replicas, int(change.new))
        elif isinstance(change, Scale) and change.hpa_field == "maxReplicas" and change.new is not None:
            replicas = min(replicas, int(change.new))
    spec["replicas"] = replicas
    return after
