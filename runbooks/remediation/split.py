"""split_pools: the runbook's long/short pool split as two plans, so that no request is refused.

Phase 1 creates `<name>-long`, a Deployment and a Service cloned from the original, and leaves
the original untouched:

- the clone's pods carry `gpumem.io/pool: long`, and every label the original Deployment's
  selector or the original Service's selector matches on gets `-long` appended to its value, so
  neither the original Service nor the original Deployment selects the long pool's pods (and the
  long Service selects only them);
- `replicas` 1 unless asked, no status, no server-owned metadata, no `last-applied` annotation;
- its context length is the profile's p99 (input + output) rounded up as people set it, never
  below what the single pool serves today (a request served before the split is served after
  it) and never above the model's maximum; its concurrency is what fits the card at that
  length: every admitted sequence at its full length inside the KV cache the budget what-if
  predicts, keeping `headroom` of it free, never above the single pool's value ("few
  sequences").

The gateway then sends requests whose prompt is longer than the threshold (default: the
runbook's long-request boundary, the M bucket's input limit) to `<name>-long`. Phase 2, only once
someone confirmed that routing, tightens the original to the short pool: its context length
covers the threshold plus the output a short request asks for, and its concurrency is sized
by the same what-if.

Everything here is pure: the objects are dicts as the API server returns them; the flag edit
itself (in whatever launch form the Deployment uses) is `runbooks.remediation.edits.launch_edit`'s.

>>> relabel({"app": "vllm", "track": "stable"}, {"app"})
{'app': 'vllm-long', 'track': 'stable', 'gpumem.io/pool': 'long'}
>>> short_pool_length(2048, None)
3072
"""

from __future__ import annotations

import copy
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from runbooks.model.budget import Budget, BudgetInputs
from runbooks.model.errors import UsageError
from runbooks.model.evidence import ModelSpec
from runbooks.model.lengths import RequestProfile
from runbooks.model.secrets import REDACTED, redact_argv, redact_text, secret_name
from runbooks.profile.requests import BUCKET_LIMITS
from runbooks.remediation.plan import Plan
from runbooks.remediation.solver import ENGINE_FLAGS, round_context
from runbooks.sizing.budget import compute_budget
from runbooks.sizing.capacity import MeasuredPool, blocks_tokens

ACTION = "split_pools"
#: the patch type of a phase-1 plan: its "patch" is the objects to create, not a PATCH body
CREATE_OBJECTS = "application/vnd.gpumem.create-objects+json"
#: the audit event that keeps a split plan's template values beside it
TEMPLATE_EVENT = "split_pools"
POOL_LABEL = "gpumem.io/pool"
SPLIT_FROM = "gpumem.io/split-from"
LONG_SUFFIX = "-long"
DEFAULT_LONG_REPLICAS = 1
#: the share of the KV cache left free when the pools' concurrency is sized
DEFAULT_HEADROOM = 0.1
#: the engines whose context and concurrency flags a split sizes
ENGINES = ("vllm", "sglang")
#: metadata the API server owns, or that belongs to the original only
_SERVER_META = ("uid", "resourceVersion", "generation", "creationTimestamp", "managedFields", "selfLink",
                "ownerReferences", "finalizers", "deletionTimestamp", "deletionGracePeriodSeconds")
_ORIGINAL_ONLY = ("deployment.kubernetes.io/revision", "kubectl.kubernetes.io/last-applied-configuration",
                  "kubernetes.io/change-cause", "gpumem.io/plan")
#: a DNS-1035 label: what a Service name must be
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def is_split(plan: Plan) -> bool:
    """Whether `plan` is one of a pool split's two phases."""
    return plan.action_id == ACTION


def is_phase1(plan: Plan) -> bool:
    """Whether `plan` creates the long pool's objects (phase 1)."""
    return plan.patch_type == CREATE_OBJECTS


def default_threshold() -> int:
    """The runbook's long-request boundary in prompt tokens: above the M bucket's input limit
    a request is L or XL (`runbooks.profile.requests.BUCKET_LIMITS`).

    >>> default_threshold()
    2048
    """
    return next(limit for name, limit, _ in BUCKET_LIMITS if name == "M")


def short_output_allowance(profile: RequestProfile | None) -> int:
    """The output a short request may ask for: the M bucket's output limit, or the profile's p99
    output when that is larger."""
    base = next(out for name, _, out in BUCKET_LIMITS if name == "M")
    p99 = profile.p99_output_tokens if profile is not None else None
    return max(base, int(math.ceil(p99))) if p99 else base


def short_pool_length(threshold: int, profile: RequestProfile | None) -> int:
    """The short pool's context length: a prompt at the threshold plus the output allowance,
    rounded up as people set it (a short request is never refused for its length)."""
    return round_context(threshold + short_output_allowance(profile))


def long_name(name: str) -> str:
    """`<name>-long`, refused (UsageError split_name_too_long) when a Service could not have it."""
    out = name + LONG_SUFFIX
    if len(out) > 63 or not _DNS_LABEL.match(out):
        raise UsageError("split_name_too_long", name=out)
    return out


def relabel(labels: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    """`labels` with `-long` appended to the values of `keys` and the pool label added."""
    keys = set(keys)
    out = {k: (f"{v}{LONG_SUFFIX}" if k in keys else v) for k, v in labels.items()}
    for k, v in out.items():
        if k in keys and len(v) > 63:
            raise UsageError("split_label_too_long", label=k, value=v)
    out[POOL_LABEL] = "long"
    return out


def selector_keys(deployment: Mapping[str, Any], service: Mapping[str, Any] | None) -> set[str]:
    """The label keys the original Deployment's matchLabels and the original Service's selector
    match on: the ones whose values the clone must not share."""
    spec = deployment.get("spec") or {}
    keys = set((spec.get("selector") or {}).get("matchLabels") or {})
    if service is not None:
        keys |= set((service.get("spec") or {}).get("selector") or {})
    return keys


def selects(selector: Mapping[str, str] | None, labels: Mapping[str, str]) -> bool:
    """Whether a Service's selector (a non-empty label map) matches `labels`."""
    return bool(selector) and all(labels.get(k) == v for k, v in (selector or {}).items())


def _clean_metadata(meta: Mapping[str, Any], name: str, keys: set[str], origin: str) -> dict[str, Any]:
    out = {k: copy.deepcopy(v) for k, v in meta.items() if k not in _SERVER_META}
    out["name"] = name
    out["labels"] = relabel(meta.get("labels") or {}, keys)
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k not in _ORIGINAL_ONLY}
    annotations[SPLIT_FROM] = origin
    out["annotations"] = annotations
    return out


def clone_deployment(original: Mapping[str, Any], service: Mapping[str, Any] | None, *,
                     replicas: int = DEFAULT_LONG_REPLICAS) -> dict[str, Any]:
    """The long pool's Deployment before its flags are edited: the original's spec with
    `replicas`, a selector and pod labels of its own, and clean metadata. Pure."""
    meta = original.get("metadata") or {}
    name = long_name(str(meta.get("name") or ""))
    keys = selector_keys(original, service)
    if not keys:
        raise UsageError("split_no_selector", name=meta.get("name"))
    spec = copy.deepcopy(original.get("spec") or {})
    spec["replicas"] = replicas
    selector = spec.setdefault("selector", {})
    selector["matchLabels"] = relabel(selector.get("matchLabels") or {}, keys)
    template = spec.setdefault("template", {})
    template_meta = template.setdefault("metadata", {})
    template_meta["labels"] = relabel(template_meta.get("labels") or {}, keys)
    origin = f"{meta.get('namespace')}/{meta.get('name')}"
    out: dict[str, Any] = {"apiVersion": original.get("apiVersion") or "apps/v1", "kind": "Deployment",
                           "metadata": _clean_metadata(meta, name, keys, origin), "spec": spec}
    return out


def clone_service(service: Mapping[str, Any], deployment: Mapping[str, Any]) -> dict[str, Any]:
    """The long pool's Service: the original's ports and type, selecting the long pool's pods
    (the clone Deployment's pod labels restricted to the original selector's keys, plus the pool
    label). The cluster IP and every allocated field are left to the API server."""
    meta = service.get("metadata") or {}
    spec = service.get("spec") or {}
    pod_labels = ((deployment.get("spec") or {}).get("template") or {}).get("metadata", {}).get("labels") or {}
    selector = {k: pod_labels[k] for k in (spec.get("selector") or {}) if k in pod_labels}
    selector[POOL_LABEL] = "long"
    ports = []
    for port in spec.get("ports") or []:
        ports.append({k: copy.deepcopy(v) for k, v in port.items() if k != "nodePort"})
    new_spec: dict[str, Any] = {"selector": selector, "ports": ports}
    for key in ("type", "sessionAffinity", "ipFamilyPolicy", "ipFamilies", "internalTrafficPolicy",
                "publishNotReadyAddresses"):
        if key in spec and not (key == "type" and spec[key] == "ExternalName"):
            new_spec[key] = copy.deepcopy(spec[key])
    keys = set(spec.get("selector") or {})
    origin = f"{meta.get('namespace')}/{meta.get('name')}"
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": _clean_metadata(meta, str((deployment.get("metadata") or {}).get("name") or ""), keys, origin),
            "spec": new_spec}


# ------------------------------------------------------------------------------- sizing


@dataclass(frozen=True)
class PoolSize:
    """One pool's context length and concurrency, and the budget that predicts them."""

    max_model_len: int
    max_num_seqs: int
    budget: Budget
    #: why the length: "p99" (the profile's p99 rounded up), "kept_current" (never below what is
    #: served today), "no_profile", "capped_at_model_max", "short_pool"
    length_basis: str
    #: the sequences that fit at that length before the cap at the current value
    fits: int
    p99_tokens: int | None = None
    #: the concurrency it was capped at: the current value, else the engine's default
    limit: int | None = None
    #: the pool sized on when the engine's own figure anchored it (`MeasuredPool.pool`); None:
    #: the budget's
    pool_tokens: int | None = None

    @property
    def kv_cache_tokens(self) -> int:
        return self.pool_tokens if self.pool_tokens is not None else int(self.budget.kv_cache_tokens or 0)


def _inputs(inputs: BudgetInputs, length: int, seqs: int | None) -> BudgetInputs:
    return replace(inputs, max_model_len=length, max_num_seqs=seqs)


def size_pool(model: ModelSpec, inputs: BudgetInputs, length: int, *, limit: int | None,
              headroom: float = DEFAULT_HEADROOM, basis: str = "", p99: int | None = None,
              measured: MeasuredPool | None = None) -> PoolSize:
    """The concurrency that fits the card at context `length`: every sequence at its full length
    in the KV cache the budget predicts with those flags, `headroom` of it kept free, never above
    `limit`. Fewer sequences free activation and graph memory for the cache, so it iterates to a
    fixed point as the safe-flag solver does. `measured`: the engine's own pool at the flags in
    `inputs`, which then sizes every pool with the change the budget computes (what the engine
    measured wins), where it holds for them. Raises UsageError split_does_not_fit (with the
    engine's failure, or the KV tokens against the length) when not even one sequence fits."""
    if inputs.engine not in ENGINES:
        raise UsageError("split_engine_unsupported", engine=inputs.engine)
    at_running = int(compute_budget(model, inputs).kv_cache_tokens or 0) if measured is not None else 0
    anchor = measured if measured is not None and measured.holds_for(at_running) else None

    def pool(b: Budget) -> int:
        return anchor.pool(at_running, int(b.kv_cache_tokens or 0)) if anchor else int(b.kv_cache_tokens or 0)

    budget = compute_budget(model, _inputs(inputs, length, inputs.max_num_seqs))
    limit = limit or budget.max_num_seqs
    seqs = budget.max_num_seqs or inputs.max_num_seqs or 1

    def fitting(b: Budget) -> int:
        return int((1 - headroom) * pool(b) // blocks_tokens(length, b.block_size or 1))

    for _ in range(8):
        wanted = max(1, min(fitting(budget), limit) if limit else fitting(budget))
        if wanted == seqs:
            break
        seqs = wanted
        budget = compute_budget(model, _inputs(inputs, length, seqs))
    fits = fitting(budget)
    if budget.failure_id is not None or fits < 1:
        raise UsageError("split_does_not_fit", length=length, kv_tokens=pool(budget),
                         failure=budget.failure_id or "kv_cache_too_small")
    seqs = min(seqs, fits)
    return PoolSize(length, seqs, budget, basis, fits, p99, limit, pool(budget) if anchor else None)


def long_pool_length(p99: float | None, current: int | None, model_max: int | None) -> tuple[int, str]:
    """(the long pool's context length, why): p99 rounded up, never below `current` (the single
    pool's), never above the model's maximum.

    >>> long_pool_length(5000, 8192, 32768), long_pool_length(11000, 8192, 32768), long_pool_length(None, 8192, None)
    ((8192, 'kept_current'), (11264, 'p99'), (8192, 'no_profile'))
    """
    if p99 is None:
        if not current:
            raise UsageError("split_no_length")
        return current, "no_profile"
    length, basis = round_context(p99), "p99"
    if current and length < current:
        length, basis = current, "kept_current"
    if model_max and length > model_max:
        length, basis = model_max, "capped_at_model_max"
    return length, basis


def flags_for(engine: str) -> tuple[str, str]:
    """The engine's (context length, concurrency) flags."""
    if engine not in ENGINES:
        raise UsageError("split_engine_unsupported", engine=engine)
    length, seqs, _ = ENGINE_FLAGS[engine]
    return length, seqs


def create_ops(deployment: Mapping[str, Any], service: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """The two objects to create, in the order they are created, as they will be sent."""
    return ({"op": "create", "kind": "Deployment", "name": deployment["metadata"]["name"],
             "value": copy.deepcopy(dict(deployment))},
            {"op": "create", "kind": "Service", "name": service["metadata"]["name"],
             "value": copy.deepcopy(dict(service))})


def masked(value: Any) -> Any:
    """An object (or any part of one) with every credential masked: the values of secret flags
    in a command or args list (`--api-key <redacted>`, `--api-key=<redacted>`, inside a `sh -c`
    script), the value of an entry whose name says secret (`{"name": "HF_TOKEN", "value": ...}`),
    credential shapes in any other string. Deterministic and idempotent: equal objects mask
    equally, and a masked object masks to itself.

    >>> masked({"env": [{"name": "HF_TOKEN", "value": "hf_x"}], "args": ["--api-key", "k", "--n", "8"]})
    {'env': [{'name': 'HF_TOKEN', 'value': '<redacted>'}], 'args': ['--api-key', '<redacted>', '--n', '8']}
    """
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return redact_argv(value)
    if isinstance(value, list):
        return [masked(v) for v in value]
    if isinstance(value, dict):
        if isinstance(value.get("name"), str) and isinstance(value.get("value"), str) and secret_name(value["name"]):
            return {**{k: masked(v) for k, v in value.items()}, "value": REDACTED}
        return {k: masked(v) for k, v in value.items()}
    if isinstance(value, str):
        return redact_text(value)
    return value


def source_of(obj: Mapping[str, Any], kind: str) -> dict[str, str]:
    """The identity and version of the object a clone is made from: what apply re-reads and
    must find again before it rebuilds the clone."""
    meta = obj.get("metadata") or {}
    return {"kind": kind, "name": str(meta.get("name") or ""),
            "uid": str(meta.get("uid") or ""), "resourceVersion": str(meta.get("resourceVersion") or "")}


def stored_ops(ops: Iterable[Mapping[str, Any]], sources: Iterable[Mapping[str, Any]],
               build: Mapping[str, Any]) -> tuple[dict[str, Any], ...]:
    """A phase-1 plan's "patch", as the store keeps it: each object to create with every
    credential masked (`masked`), the object it is cloned from (`source_of`), and `build`, what
    rebuilds the clones from those sources at apply time (the long pool's replicas, the server
    container and the flags set on it, in order). No credential value is in it: apply re-reads
    the sources and rebuilds the objects, credentials included, and sends them only when they
    mask to exactly what is stored here.

    >>> op = {"op": "create", "kind": "Service", "name": "s-long", "value": {"metadata": {"name": "s-long"}}}
    >>> stored_ops([op], [{"kind": "Service", "name": "s"}], {"replicas": 1})[0]["source"]
    {'kind': 'Service', 'name': 's'}
    """
    out = []
    for op, source in zip(ops, sources, strict=True):
        out.append({**{k: copy.deepcopy(v) for k, v in op.items() if k != "value"}, "value": masked(op["value"]),
                    "source": dict(source), "build": copy.deepcopy(dict(build))})
    return tuple(out)


def inverse_of_creates(ops: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """What undoes a phase-1 plan: delete what it created, Service first (traffic stops before
    the pods go), each only if unchanged since."""
    return [{"op": "delete", "kind": op["kind"], "name": op["name"]} for op in reversed(list(ops))
            if op.get("op") == "create"]


def watched_name(plan: Any) -> str:
    """The Deployment whose rollout shows whether a plan held: the long pool a phase-1 plan
    creates, else the plan's target."""
    if plan.patch_type == CREATE_OBJECTS:
        return next((op["name"] for op in plan.patch if op.get("kind") == "Deployment"), plan.target.name)
    return plan.target.name


def leaf_differences(sent: Any, now: Any, path: str = "") -> list[dict[str, Any]]:
    """Every value gpumem sent that reads differently now: [{"path", "gpumem", "now"}]. Fields
    the API server added (defaults, status, its own annotations) are not differences.

    >>> leaf_differences({"spec": {"replicas": 1, "x": [1, 2]}}, {"spec": {"replicas": 3, "x": [1, 2], "y": 0}})
    [{'path': '/spec/replicas', 'gpumem': 1, 'now': 3}]
    """
    if isinstance(sent, dict) and isinstance(now, dict):
        out: list[dict[str, Any]] = []
        for key, value in sent.items():
            escaped = str(key).replace("~", "~0").replace("/", "~1")
            out += leaf_differences(value, now.get(key), f"{path}/{escaped}")
        return out
    if isinstance(sent, list) and isinstance(now, list) and len(sent) == len(now):
        out = []
        for i, (a, b) in enumerate(zip(sent, now, strict=True)):
            out += leaf_differences(a, b, f"{path}/{i}")
        return out
    return [] if sent == now else [{"path": path, "gpumem": sent, "now": now}]
