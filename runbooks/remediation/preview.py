"""A plan's preview: the predicted budget before and after, and the blast radius of the rollout.

The budget figures are `gpumem budget`'s own (`runbooks.sizing.budget.compute_budget` on the
Deployment's parsed flags, before and after the patch); this module only keeps the figures a
plan shows and says what was missing when they could not be computed.

The blast radius is arithmetic on what was read: which pods restart (a pod-template change
restarts every pod; a replica change restarts none and adds or removes pods), how many pods the
rollout runs beyond the current count at once (the Deployment's strategy: maxSurge and
maxUnavailable resolved the way the Deployment controller resolves them, Recreate, or a
StatefulSet's one-at-a-time), the GPUs those pods ask for, and the spare GPUs on the nodes the
pods may land on (allocatable minus the requests of the pods already there, on nodes that match
the pod's nodeSelector and required node affinity). A rollout that needs a spare GPU where there
is none, with maxUnavailable 0, never finishes: `outcome == "stuck"`.

>>> r = Rollout("RollingUpdate", "1", "0")
>>> nodes = (NodeGpus("n1", {"gpu": "a100"}, {"nvidia.com/gpu": 2}),)
>>> pods = (PodGpus("vllm-0", "llm", "n1", {}, "nvidia.com/gpu", 2),)
>>> b = blast_radius(template_changed=True, replicas_before=1, replicas_after=1, rollout=r,
...                  gpu_resource="nvidia.com/gpu", gpus_per_pod=2, placement=Placement({"gpu": "a100"}),
...                  nodes=nodes, pods=pods, workload_pods=("vllm-0",))
>>> b.outcome, b.extra_pods, b.gpus_needed, b.spare_gpus, b.restart_pods
('stuck', 1, 2, 0, ('vllm-0',))
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from runbooks.model.budget import Budget, concurrency_limit_of, concurrency_of

#: blast-radius outcomes, from good to bad (renderers word them)
OUTCOMES = ("no_gpu", "not_checked", "no_extra", "fits", "slower", "unavailable", "pending", "stuck")
#: outcomes a reviewer must read before approving
BLOCKING = frozenset({"pending", "stuck"})


@dataclass(frozen=True)
class Note:
    """One worded remark: a stable id (renderers word it) and its values."""

    id: str
    #: text, or a `runbooks.model.phrases.Phrase` (a read's reason) the renderers word
    params: dict[str, Any] = field(default_factory=dict)


# ----------------------------------------------------------------------------- the budget


@dataclass(frozen=True)
class BudgetFigures:
    """What a plan shows of one side of `gpumem budget`, per pod (figures as its JSON rounds them).

    `max_concurrency` is what the KV cache holds at full length (fractional, as vLLM logs it);
    `concurrency` what the pod runs at once: min(`max_num_seqs`, the whole requests the cache
    holds), so halving the engine's cap shows its cost.

    >>> f = BudgetFigures(1108880, 136.84, 2.0, 128, 8192, True)
    >>> f.kv_requests, f.concurrency, f.concurrency_limit
    (136, 128, 'max_num_seqs')
    """

    kv_cache_tokens: int
    max_concurrency: float
    headroom_gib: float
    max_num_seqs: int | None
    max_model_len: int
    fits: bool
    failure_id: str | None = None
    #: the engine's own words for why it would not start (as `gpumem budget` prints them)
    failure: str | None = None

    @property
    def kv_requests(self) -> int:
        return concurrency_of(self.max_concurrency, None)

    @property
    def concurrency(self) -> int:
        return concurrency_of(self.max_concurrency, self.max_num_seqs)

    @property
    def concurrency_limit(self) -> str:
        return concurrency_limit_of(self.max_concurrency, self.max_num_seqs)

    @classmethod
    def of(cls, budget: Budget) -> BudgetFigures:
        """The figures of one `compute_budget` result.

        >>> from runbooks.catalogs.models import find_model
        >>> from runbooks.model.budget import BudgetInputs
        >>> from runbooks.sizing.budget import compute_budget
        >>> b = compute_budget(find_model("Qwen/Qwen2.5-7B-Instruct"), BudgetInputs("vllm", 79.15, max_model_len=8192))
        >>> f = BudgetFigures.of(b); (f.kv_cache_tokens == b.kv_cache_tokens, f.max_model_len)
        (True, 8192)
        """
        return cls(budget.kv_cache_tokens, round(budget.max_concurrency, 4), round(budget.headroom_gib, 4),
                   budget.max_num_seqs, budget.max_model_len, budget.fits, budget.failure_id, budget.failure)


@dataclass(frozen=True)
class BudgetPreview:
    """The predicted budget before and after a plan, or what was missing to compute it.

    `before`/`after` are per pod; the service's totals are the per-pod figures times the
    replicas (`service_concurrency`). `missing` is empty when the figures were computed, else it
    says exactly which input was not known (the model, the GPU, the engine, the server container)."""

    before: BudgetFigures | None = None
    after: BudgetFigures | None = None
    model: str | None = None
    gpu: str | None = None
    engine: str | None = None
    replicas_before: int | None = None
    replicas_after: int | None = None
    #: changed flags the budget has no term for (their change does not move these figures)
    unmodelled: tuple[str, ...] = ()
    #: where a figure's input came from (the GPU from the nodes the pods run on, ...)
    notes: tuple[Note, ...] = ()
    missing: tuple[Note, ...] = ()

    @property
    def computed(self) -> bool:
        return self.before is not None and self.after is not None

    def service_concurrency(self) -> tuple[int | None, int | None]:
        """Requests the whole service runs at once (each pod's `concurrency` x replicas), before
        and after, in whole requests.

        >>> f = BudgetFigures(1000, 10.5, 2.0, 64, 100, True)
        >>> BudgetPreview(f, f, replicas_before=2, replicas_after=3).service_concurrency()
        (20, 30)
        """
        def total(figures: BudgetFigures | None, replicas: int | None) -> int | None:
            if figures is None or replicas is None:
                return None
            return figures.concurrency * replicas

        return total(self.before, self.replicas_before), total(self.after, self.replicas_after)


# ----------------------------------------------------------------------------- where pods may run


@dataclass(frozen=True)
class Requirement:
    """One label requirement of a nodeSelectorTerm or a label selector.

    >>> Requirement("gpu", "In", ("a100", "h100")).matches({"gpu": "h100"})
    True
    >>> Requirement("gpu", "DoesNotExist").matches({"gpu": "h100"})
    False
    >>> Requirement("gpus", "Gt", ("4",)).matches({"gpus": "8"})
    True
    >>> Requirement("gpu", "Near", ("x",)).matches({}) is None
    True
    """

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool | None:
        """Whether `labels` meet it; None for an operator this module does not evaluate."""
        value = labels.get(self.key)
        op = self.operator
        if op == "In":
            return value is not None and value in self.values
        if op == "NotIn":
            return value is None or value not in self.values
        if op == "Exists":
            return value is not None
        if op == "DoesNotExist":
            return value is None
        if op in ("Gt", "Lt"):
            try:
                have, bound = int(value or ""), int(self.values[0])
            except (ValueError, IndexError):
                return False
            return have > bound if op == "Gt" else have < bound
        return None


@dataclass(frozen=True)
class Toleration:
    """A pod's toleration, as the scheduler matches it against a node's taint."""

    key: str = ""
    operator: str = "Equal"
    value: str = ""
    effect: str = ""

    def accepts(self, key: str, value: str, effect: str) -> bool:
        """Kubernetes' rule: the effect matches when the toleration names none or the same one;
        `Exists` matches any value (and, with no key, every taint); `Equal` needs key and value.

        >>> Toleration("gpu", "Equal", "true", "NoSchedule").accepts("gpu", "true", "NoSchedule")
        True
        >>> Toleration("gpu", "Equal", "true").accepts("gpu", "false", "NoSchedule")
        False
        >>> Toleration(operator="Exists").accepts("anything", "", "NoExecute")
        True
        """
        if self.effect and self.effect != effect:
            return False
        if self.operator == "Exists":
            return not self.key or self.key == key
        return self.key == key and (self.value or "") == (value or "")


def _taint_parts(taint: str) -> tuple[str, str, str]:
    """("key", "value", "Effect") of a taint written "key=value:Effect" or "key:Effect"."""
    head, _, effect = taint.rpartition(":")
    key, _, value = head.partition("=")
    return key, value, effect


@dataclass(frozen=True)
class Placement:
    """Where the pod template lets a pod run: its nodeSelector and required node affinity (any
    term, all requirements of it; `metadata.name` requirements come from matchFields).

    `tolerations` decide which NoSchedule/NoExecute taints of a node the pod accepts
    (`tolerates`). `unchecked` names what else constrains placement that the blast radius does
    not evaluate: `pod_affinity`, `pod_anti_affinity`, `topology_spread`."""

    node_selector: dict[str, str] = field(default_factory=dict)
    affinity_terms: tuple[tuple[Requirement, ...], ...] = ()
    unchecked: tuple[str, ...] = ()
    tolerations: tuple[Toleration, ...] = ()

    def tolerates(self, taints: Sequence[str]) -> list[str]:
        """The taints ("key=value:Effect", NoSchedule or NoExecute) no toleration of the pod
        accepts: a node with any of them does not take the pod.

        >>> p = Placement(tolerations=(Toleration("nvidia.com/gpu", "Exists"),))
        >>> p.tolerates(["nvidia.com/gpu=present:NoSchedule", "pool=reserved:NoSchedule"])
        ['pool=reserved:NoSchedule']
        """
        return [t for t in taints if not any(tol.accepts(*_taint_parts(t)) for tol in self.tolerations)]

    def allows(self, name: str, labels: Mapping[str, str]) -> tuple[bool, bool]:
        """(the node fits, whether some requirement could not be evaluated and was taken as met).

        >>> p = Placement({"pool": "gpu"}, ((Requirement("zone", "In", ("a",)),), (Requirement("zone", "In", ("b",)),)))
        >>> p.allows("n1", {"pool": "gpu", "zone": "b"}), p.allows("n1", {"pool": "cpu", "zone": "b"})
        ((True, False), (False, False))
        """
        if any(labels.get(k) != v for k, v in self.node_selector.items()):
            return False, False
        if not self.affinity_terms:
            return True, False
        seen = {**labels, "metadata.name": name}
        guessed = False
        for term in self.affinity_terms:
            results = [r.matches(seen) for r in term]
            if any(r is False for r in results):
                continue
            guessed = guessed or any(r is None for r in results)
            return True, guessed
        return False, False


def selector_matches(match_labels: Mapping[str, str], expressions: Sequence[Requirement],
                     labels: Mapping[str, str]) -> bool:
    """A label selector (a Deployment's `spec.selector`) against a pod's labels.

    >>> selector_matches({"app": "vllm"}, (Requirement("track", "NotIn", ("canary",)),), {"app": "vllm", "track": "canary"})
    False
    """
    if not match_labels and not expressions:
        return False  # an empty selector selects nothing a Deployment owns (the API refuses it)
    return all(labels.get(k) == v for k, v in match_labels.items()) and all(
        r.matches(labels) is True for r in expressions)


# ----------------------------------------------------------------------------- what was read


@dataclass(frozen=True)
class NodeGpus:
    """A node as the blast radius sees it: labels, GPU resources it can give, whether it takes pods."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, int] = field(default_factory=dict)
    ready: bool | None = None
    unschedulable: bool = False
    #: NoSchedule and NoExecute taints, "key=value:Effect" (checked against the pod's tolerations)
    taints: tuple[str, ...] = ()


@dataclass(frozen=True)
class PodGpus:
    """A running or pending pod: where it is and the GPUs it holds (`resource` None: none)."""

    name: str
    namespace: str | None = None
    node: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    resource: str | None = None
    count: int = 0


@dataclass(frozen=True)
class Rollout:
    """How a workload replaces its pods: `RollingUpdate` with maxSurge / maxUnavailable as
    written (an int or a percentage), `Recreate`, or `OnDelete`."""

    strategy: str = "RollingUpdate"
    max_surge: str | None = "25%"
    max_unavailable: str | None = "25%"


def scaled(raw: str | None, replicas: int, round_up: bool) -> int:
    """An int-or-percent of `replicas` as the Deployment controller scales it (maxSurge rounds
    up, maxUnavailable down).

    >>> scaled("25%", 2, True), scaled("25%", 2, False), scaled("3", 2, True), scaled(None, 2, True)
    (1, 0, 3, 0)
    """
    if raw is None or raw == "":
        return 0
    text = str(raw).strip()
    if text.endswith("%"):
        share = replicas * float(text[:-1]) / 100
        return int(math.ceil(share) if round_up else math.floor(share))
    return int(text)


def resolve_step(rollout: Rollout, replicas: int) -> tuple[int, int]:
    """(maxSurge, maxUnavailable) in pods for `replicas`; both 0 means maxUnavailable 1, as the
    Deployment controller does.

    >>> resolve_step(Rollout("RollingUpdate", "0", "0"), 4), resolve_step(Rollout("Recreate", None, None), 4)
    ((0, 1), (0, 0))
    """
    if rollout.strategy != "RollingUpdate":
        return 0, 0
    surge = scaled(rollout.max_surge, replicas, True)
    unavailable = scaled(rollout.max_unavailable, replicas, False)
    if surge == 0 and unavailable == 0:
        unavailable = 1
    return surge, unavailable


# ----------------------------------------------------------------------------- the blast radius


@dataclass(frozen=True)
class NodeSpare:
    """A node the pods may land on: its GPUs of the pods' resource, and how many are taken."""

    name: str
    allocatable: int
    requested: int

    @property
    def spare(self) -> int:
        return max(0, self.allocatable - self.requested)


@dataclass(frozen=True)
class BlastRadius:
    """What the plan's rollout does to pods and GPUs (see the module docstring).

    `extra_pods` run beyond the current pod count at once (the surge of a template change plus
    any scale-up); `gpus_needed` is that times `gpus_per_pod`; `placeable_pods` how many such
    pods the spare GPUs on the fitting `nodes` hold (a pod's GPUs are on one node). `outcome` is
    one of `OUTCOMES`."""

    template_changed: bool
    restart_pods: tuple[str, ...]
    pods_now: int | None
    replicas_before: int | None
    replicas_after: int | None
    strategy: str
    max_surge: int | None
    max_unavailable: int | None
    gpu_resource: str | None
    gpus_per_pod: int
    extra_pods: int
    gpus_needed: int
    nodes: tuple[NodeSpare, ...]
    spare_gpus: int | None
    placeable_pods: int | None
    outcome: str
    #: nodes with the resource that the placement rules out (or that take no pods)
    nodes_ruled_out: int = 0
    notes: tuple[Note, ...] = ()

    @property
    def pods_added(self) -> int:
        return max(0, (self.replicas_after or 0) - (self.replicas_before or 0))

    @property
    def pods_removed(self) -> int:
        return max(0, (self.replicas_before or 0) - (self.replicas_after or 0))

    @property
    def blocking(self) -> bool:
        return self.outcome in BLOCKING


def _rooms(resource: str, placement: Placement | None, nodes: Sequence[NodeGpus],
           pods: Sequence[PodGpus]) -> tuple[list[NodeSpare], int, list[Note]]:
    taken: dict[str, int] = {}
    for pod in pods:
        if pod.node and pod.resource == resource:
            taken[pod.node] = taken.get(pod.node, 0) + pod.count
    fitting: list[NodeSpare] = []
    ruled_out = 0
    guessed: list[str] = []
    tainted: list[str] = []
    for node in sorted(nodes, key=lambda n: n.name):
        have = node.allocatable.get(resource, 0)
        if have <= 0:
            continue
        ok, guess = placement.allows(node.name, node.labels) if placement is not None else (True, False)
        if not ok or node.unschedulable or node.ready is False:
            ruled_out += 1
            continue
        untolerated = (placement or Placement()).tolerates(node.taints)
        if untolerated:  # the scheduler keeps the pod off this node
            ruled_out += 1
            tainted.append(f"{node.name} ({', '.join(untolerated)})")
            continue
        if guess:
            guessed.append(node.name)
        fitting.append(NodeSpare(node.name, have, taken.get(node.name, 0)))
    notes = []
    if tainted:
        notes.append(Note("taints_not_tolerated", {"nodes": "; ".join(tainted)}))
    if guessed:
        notes.append(Note("affinity_partly_checked", {"nodes": ", ".join(guessed)}))
    return fitting, ruled_out, notes


def blast_radius(*, template_changed: bool, replicas_before: int | None, replicas_after: int | None,
                 rollout: Rollout, gpu_resource: str | None, gpus_per_pod: int, placement: Placement | None,
                 nodes: Sequence[NodeGpus] | None, pods: Sequence[PodGpus] | None,
                 workload_pods: Sequence[str] | None) -> BlastRadius:
    """The blast radius of a change (see the module docstring). `nodes` or `pods` None: not
    read (the outcome is `not_checked` when GPUs are asked for); `workload_pods` None: the
    workload's pods could not be listed (the restart count then comes from the replicas)."""
    before = replicas_before if replicas_before is not None else 1
    after = replicas_after if replicas_after is not None else before
    surge, unavailable = resolve_step(rollout, after)
    scale_up = max(0, after - before)
    restart = tuple(sorted(workload_pods or ())) if template_changed else ()
    if template_changed and rollout.strategy == "RollingUpdate":
        extra = max(0, after + surge - before)
    else:
        extra = scale_up
    notes: list[Note] = []
    if template_changed and rollout.strategy == "Recreate":
        notes.append(Note("recreate_downtime", {"pods": str(before)}))
    if template_changed and rollout.strategy == "OnDelete":
        notes.append(Note("on_delete", {}))
        restart = ()
    if placement is not None and placement.unchecked:
        notes.append(Note("placement_unchecked", {"what": ", ".join(placement.unchecked)}))
    common = dict(template_changed=template_changed, restart_pods=restart,
                  pods_now=len(workload_pods) if workload_pods is not None else None,
                  replicas_before=replicas_before, replicas_after=replicas_after, strategy=rollout.strategy,
                  max_surge=surge if rollout.strategy == "RollingUpdate" else None,
                  max_unavailable=unavailable if rollout.strategy == "RollingUpdate" else None,
                  gpu_resource=gpu_resource, gpus_per_pod=gpus_per_pod if gpu_resource else 0, extra_pods=extra,
                  gpus_needed=extra * gpus_per_pod if gpu_resource else 0)
    if not gpu_resource or gpus_per_pod <= 0:
        return BlastRadius(**common, nodes=(), spare_gpus=None, placeable_pods=None, outcome="no_gpu",
                           notes=tuple(notes))
    if nodes is None or pods is None:
        return BlastRadius(**common, nodes=(), spare_gpus=None, placeable_pods=None, outcome="not_checked",
                           notes=tuple(notes))
    fitting, ruled_out, room_notes = _rooms(gpu_resource, placement, nodes, pods)
    notes += room_notes
    spare = sum(n.spare for n in fitting)
    placeable = sum(n.spare // gpus_per_pod for n in fitting)
    if extra == 0:
        outcome = "no_extra"
    elif placeable >= extra:
        outcome = "fits"
    elif placeable < scale_up:
        outcome = "pending"  # pods the scale-up adds find no node, even once the rollout is over
    elif placeable > scale_up:
        outcome = "slower"  # a template change surging fewer pods at a time than maxSurge allows
    else:
        # no further new pod can start: only stopping an old one first makes room, which
        # maxUnavailable 0 forbids
        outcome = "unavailable" if unavailable > 0 else "stuck"
    return BlastRadius(**common, nodes=tuple(fitting), spare_gpus=spare, placeable_pods=placeable, outcome=outcome,
                       nodes_ruled_out=ruled_out, notes=tuple(notes))


# ----------------------------------------------------------------------------- the preview


@dataclass(frozen=True)
class PlanPreview:
    """What a plan predicts: its budget before and after, and its blast radius (None: the
    plan's changes do not touch the pods, or it could not be worked out; `notes` say why)."""

    budget: BudgetPreview | None = None
    blast: BlastRadius | None = None
    notes: tuple[Note, ...] = ()
