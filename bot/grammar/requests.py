"""Every verb's arguments as a frozen, typed request: what a use case is asked, whichever surface
asked it.

`gpumem VERB ...` and `/gpumem VERB ...` parse with the one argparse tree
(`bot.grammar.commands`), and `request_of` turns the parsed namespace into the verb's request:
the same request for the same words, so a use case never sees argparse. A field is named
after the option's destination (`--max-num-seqs` is `max_num_seqs`); a repeatable option is a
tuple. Fields only Slack fills (a `profile` or `snapshot` of a service, `fleet NAMESPACE`,
`fleet --all`) say so.

>>> from bot.grammar.commands import parse_argv
>>> request = parse_argv(["budget", "--engine", "vllm", "--max-num-seqs", "64"])
>>> type(request).__name__, request.engine, request.max_num_seqs, request.tp
('BudgetRequest', 'vllm', 64, None)
>>> parse_argv(["plan", "llm/vllm", "--set", "max-num-seqs=64", "--set", "enforce-eager="]).set
('max-num-seqs=64', 'enforce-eager=')
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar

#: `--since` and `--at`: a duration back from now, or a point in time (`bot.grammar.argtypes.since`)
When = timedelta | datetime


@dataclass(frozen=True)
class TriageRequest:
    """`triage NAMESPACE/DEPLOYMENT` (live) or `triage --bundle DIR` (offline)."""

    verb: ClassVar[str] = "triage"
    target: str | None = None
    bundle: str | None = None
    save_bundle: str | None = None
    context: str | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    in_cluster: bool = False
    config: str | None = None
    prometheus: str | None = None
    direct_metrics: bool = False
    source_deadline: float | None = None
    deadline: float | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class BudgetRequest:
    """`budget`: one launch's memory, its flags given or read from a Deployment (None: not given)."""

    verb: ClassVar[str] = "budget"
    engine: str | None = None
    model: str | None = None
    gpu: str | None = None
    gpu_mem_gib: float | None = None
    from_deployment: str | None = None
    tp: int | None = None
    pp: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    gpu_memory_utilization: float | None = None
    mem_fraction_static: float | None = None
    cuda_memory_fraction: float | None = None
    engine_version: str | None = None
    enforce_eager: bool | None = None
    other_process_gib: float | None = None
    vllm_engine: str | None = None
    enable_lora: bool | None = None
    max_lora_rank: int | None = None
    max_loras: int | None = None
    max_cpu_loras: int | None = None
    max_input_tokens: int | None = None
    max_batch_prefill_tokens: int | None = None
    max_batch_total_tokens: int | None = None
    what_if: str | None = None
    profile: str | None = None
    target_headroom: float | None = None
    reported_kv_tokens: int | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class ProfileRequest:
    """`profile --access-log|--server-log|--metrics FILE`; in Slack, `profile NAMESPACE/DEPLOYMENT`."""

    verb: ClassVar[str] = "profile"
    access_log: str | None = None
    server_log: str | None = None
    metrics: str | None = None
    baseline: str | None = None
    chart: str | None = None
    workers: int | None = None
    #: Slack only: the service whose requests are profiled, and its cluster
    target: str | None = None
    context: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class CollectRequest:
    """`collect NAMESPACE/DEPLOYMENT --out DIR`."""

    verb: ClassVar[str] = "collect"
    target: str = ""
    out: str = ""
    context: str | None = None
    namespace: str | None = None
    kubeconfig: str | None = None
    in_cluster: bool = False
    config: str | None = None
    prometheus: str | None = None
    direct_metrics: bool = False
    source_deadline: float | None = None
    deadline: float | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class SnapshotRequest:
    """`snapshot`: this machine's GPUs; in Slack, `snapshot NAMESPACE/DEPLOYMENT`."""

    verb: ClassVar[str] = "snapshot"
    count: int = 1
    interval: float = 2.0
    format: str | None = None
    #: Slack only: the service whose GPUs are read, and its cluster
    target: str | None = None
    context: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class AgentRequest:
    """`agent`: serve this node's GPU readings over HTTP."""

    verb: ClassVar[str] = "agent"
    port: int = 9500
    host: str = "0.0.0.0"
    interval: float = 5.0
    node: str | None = None
    require_gpu: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class PlanRequest:
    """`plan NAMESPACE/NAME ...`: one change to a workload, or a pool split (`split_pools`)."""

    verb: ClassVar[str] = "plan"
    target: str = ""
    kind: str = "Deployment"
    set: tuple[str, ...] = ()
    replicas: int | None = None
    #: SECONDS as typed, or 300 when the option is given bare
    startup_probe: str | int | None = None
    queue_target: str | None = None
    queue_metric: str | None = None
    hpa_max: str | None = None
    max_surge: str | None = None
    shm_size: str | None = None
    memory_limit: str | None = None
    action: str | None = None
    container: str | None = None
    split_pools: bool = False
    phase: int | None = None
    threshold: str | None = None
    routing_confirmed: bool = False
    profile: str | None = None
    long_replicas: str | None = None
    service: str | None = None
    gpu: str | None = None
    #: `--out FILE`: the change for the source of truth (`bot.render.source_of_truth`)
    out: str | None = None
    context: str | None = None
    kubeconfig: str | None = None
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class ApplyRequest:
    """`apply PLAN --yes`, then the watch (`--watch S`, `--no-watch`)."""

    verb: ClassVar[str] = "apply"
    plan: str = ""
    yes: bool = False
    watch: float | None = None
    no_watch: bool = False
    context: str | None = None
    kubeconfig: str | None = None
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class RollbackRequest:
    """`rollback PLAN --yes`."""

    verb: ClassVar[str] = "rollback"
    plan: str = ""
    yes: bool = False
    context: str | None = None
    kubeconfig: str | None = None
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class PlansRequest:
    """`plans [--target NAMESPACE/NAME] [--all]`."""

    verb: ClassVar[str] = "plans"
    target: str | None = None
    all: bool = False
    context: str | None = None
    kubeconfig: str | None = None
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class AuditRequest:
    """`audit [--since WHEN] [--target NAMESPACE/NAME]`, or `audit --verify`."""

    verb: ClassVar[str] = "audit"
    since: When | None = None
    target: str | None = None
    verify: bool = False
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class NoteRequest:
    """`note [NAMESPACE/NAME] TEXT...`: the words as typed (`bot.service.notes.split_note_args`)."""

    verb: ClassVar[str] = "note"
    text: tuple[str, ...] = ()
    channel: str | None = None
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class NotesRequest:
    """`notes [--since WHEN] [--target NAMESPACE/NAME] [--channel C]`."""

    verb: ClassVar[str] = "notes"
    since: When | None = None
    target: str | None = None
    channel: str | None = None
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class HandoverRequest:
    """`handover [--since WHEN] [--channel C] [--context CTX] [--offline]`."""

    verb: ClassVar[str] = "handover"
    since: When | None = None
    channel: str | None = None
    context: str | None = None
    offline: bool = False
    config: str | None = None
    store: str | None = None
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class RulesRequest:
    """`rules`: the runbook's alerts as Prometheus rules."""

    verb: ClassVar[str] = "rules"
    engine: tuple[str, ...] | None = None
    output: str = "prometheusrule"
    namespace_label: str = "namespace"
    deployment_label: str = "deployment"
    runbook_url: str = "README.md"
    name: str | None = None
    object_label: tuple[tuple[str, str], ...] | None = None
    recording_rules: bool = True
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class FleetRequest:
    """`fleet [-n NS]... [--engine E]... [--top N] [--at WHEN]`; in Slack also `fleet NAMESPACE|--all`."""

    verb: ClassVar[str] = "fleet"
    namespace: tuple[str, ...] | None = None
    engine: tuple[str, ...] | None = None
    top: int | None = None
    at: When | None = None
    config: str | None = None
    prometheus: str | None = None
    timeout: float | None = None
    #: Slack only: `fleet NAMESPACE` and `fleet --all`
    scope: str | None = None
    all: bool = False
    json: bool = False
    lang: str | None = None


@dataclass(frozen=True)
class ServeRequest:
    """`serve [--http] [--host H] [--port P]`: the Slack bot."""

    verb: ClassVar[str] = "serve"
    http: bool = False
    host: str | None = None
    port: int | None = None
    config: str | None = None
    log_level: str = "INFO"
    lang: str | None = None


Request = (TriageRequest | BudgetRequest | ProfileRequest | CollectRequest | SnapshotRequest | AgentRequest
           | PlanRequest | ApplyRequest | RollbackRequest | PlansRequest | AuditRequest | NoteRequest
           | NotesRequest | HandoverRequest | RulesRequest | FleetRequest | ServeRequest)

#: the requests of the verbs that read or write the store (--store, else the config's store.path)
StoreRequest = (PlanRequest | ApplyRequest | RollbackRequest | PlansRequest | AuditRequest | NoteRequest
                | NotesRequest | HandoverRequest)

#: verb -> its request type
@dataclass(frozen=True)
class DashboardsRequest:
    """`dashboards [--engine E]`: the runbook's Grafana dashboards."""

    verb: ClassVar[str] = "dashboards"
    engine: str | None = None
    json: bool = False
    lang: str | None = None


REQUESTS: dict[str, type[Any]] = {cls.verb: cls for cls in (
    TriageRequest, BudgetRequest, ProfileRequest, CollectRequest, SnapshotRequest, AgentRequest, PlanRequest,
    ApplyRequest, RollbackRequest, PlansRequest, AuditRequest, NoteRequest, NotesRequest, HandoverRequest,
    RulesRequest, DashboardsRequest, FleetRequest, ServeRequest)}


def request_of(args: argparse.Namespace) -> Request:
    """The request of a parsed command line (`args.verb` names the verb): the one way from
    argparse to a use case, for argv and Slack text alike."""
    cls = REQUESTS[args.verb]
    given = vars(args)
    return cls(**{f.name: _frozen(given[f.name]) for f in dataclasses.fields(cls) if f.name in given})


def _frozen(value: Any) -> Any:
    """A repeatable option's list as a tuple (of tuples), so a request can be neither changed nor
    share a list with the parser's defaults."""
    if isinstance(value, list):
        return tuple(_frozen(v) for v in value)
    return value
