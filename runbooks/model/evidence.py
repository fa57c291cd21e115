"""Typed evidence: what gpumem knows about a service, whatever source it came from.

Every item is a frozen dataclass that round-trips through JSON (see `runbooks.model.serde`).
Every item is optional on `Evidence`; an item that could not be gathered leaves a
`ReadIssue` behind that says which source, which line, and why.

Units are in the names: `*_bytes`, `*_gib`, `*_ratio` (0..1), `*_pct` (0..100), `*_s`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from runbooks.model.lengths import Histogram, RequestProfile
from runbooks.model.managers import Manager
from runbooks.model.phrases import Phrase

ENGINES = ("vllm", "tgi", "sglang")

#: kinds of ReadIssue; renderers word each one.
ISSUE_KINDS = ("unreadable", "missing", "forbidden", "not_found", "timeout", "unreachable", "skipped")


@dataclass(frozen=True)
class ReadIssue:
    """A source that could not be read (whole or in part), with the reason.

    >>> ReadIssue(source="metrics.txt", line=12, message="bad sample value 'x'")
    ReadIssue(source='metrics.txt', message="bad sample value 'x'", line=12, kind='unreadable')
    >>> ReadIssue("prometheus", "no pods to look up", kind="skipped").kind in ISSUE_KINDS
    True
    """

    source: str
    #: why, as a phrase under `read.` (worded in the reader's language); text from before phrases
    message: str | Phrase
    line: int | None = None
    kind: str = "unreadable"


# --------------------------------------------------------------------------- GPUs


@dataclass(frozen=True)
class GpuProcess:
    pid: int | None = None
    name: str | None = None
    used_bytes: int | None = None


@dataclass(frozen=True)
class GpuDevice:
    """One GPU, or one MIG slice of a GPU (then `mig_profile` is set)."""

    index: str
    name: str | None = None
    uuid: str | None = None
    mig_profile: str | None = None
    used_bytes: int | None = None
    total_bytes: int | None = None
    reserved_bytes: int | None = None
    util_gpu_pct: float | None = None
    #: bandwidth busy time, NOT fullness (nvidia-smi utilization.memory, DCGM MEM_COPY_UTIL)
    util_mem_bandwidth_pct: float | None = None
    host: str | None = None
    pod: str | None = None
    namespace: str | None = None
    processes: tuple[GpuProcess, ...] = ()

    @property
    def used_ratio(self) -> float | None:
        if self.used_bytes is None or not self.total_bytes:
            return None
        return self.used_bytes / self.total_bytes


@dataclass(frozen=True)
class GpuSnapshot:
    """GPU memory readings at one instant. `source`: nvidia-smi.txt, nvml, dcgm, metrics.txt."""

    source: str
    devices: tuple[GpuDevice, ...] = ()
    taken_at: datetime | None = None
    driver_version: str | None = None
    cuda_version: str | None = None


@dataclass(frozen=True)
class MemoryPoint:
    at: datetime
    used_bytes: float
    total_bytes: float | None = None


@dataclass(frozen=True)
class MemorySeries:
    """GPU memory of one device (or pod) over time."""

    label: str
    points: tuple[MemoryPoint, ...] = ()


@dataclass(frozen=True)
class MemoryHistory:
    source: str
    series: tuple[MemorySeries, ...] = ()
    restarts_at: tuple[datetime, ...] = ()
    start: datetime | None = None
    end: datetime | None = None
    #: the restarts among `restarts_at` whose container was OOMKilled (host RAM, not GPU memory)
    oom_killed_at: tuple[datetime, ...] = ()


#: a reading over time: (instant, value) pairs, oldest first
TimeSeries = tuple[tuple[datetime, float], ...]


@dataclass(frozen=True)
class ServiceHistory:
    """An inference service's engine readings over a window, for all its pods together.

    `queue_depth` is summed over pods and engines; `kv_cache_usage_ratio` is the max over them
    (the fullest engine is the one that preempts); `preemptions_per_s` is a rate summed over
    pods; `ttft_p99_s` is the p99 of every pod's requests together. `requests` is the request
    profile of the last quarter of the window, estimated from the token histograms, with its
    `shift` against the first quarter.
    """

    source: str
    engine: str | None = None
    flavor: str | None = None
    queue_depth: TimeSeries = ()
    kv_cache_usage_ratio: TimeSeries = ()
    preemptions_per_s: TimeSeries = ()
    ttft_p99_s: TimeSeries = ()
    requests: RequestProfile | None = None
    start: datetime | None = None
    end: datetime | None = None
    step_s: float | None = None


# ------------------------------------------------------------- server metrics


@dataclass(frozen=True)
class ServerMetrics:
    """An inference server's /metrics, normalised across engines and versions.

    `engine`: vllm, tgi, sglang, or generic (the runbook's `llm_*` names only).
    `flavor`: finer identification, e.g. "vllm-v0", "vllm-v1".
    Gauges are summed over V1 `engine` labels (queue, running) or maxed (usage ratio).
    """

    source: str
    engine: str = "generic"
    flavor: str | None = None
    model_name: str | None = None
    engine_count: int = 1
    queue_depth: float | None = None
    running_requests: float | None = None
    kv_cache_usage_ratio: float | None = None
    kv_cache_capacity_tokens: int | None = None
    kv_cache_used_tokens: float | None = None
    preemptions_total: float | None = None
    rejected_total: float | None = None
    failed_requests_total: float | None = None
    requests_total: float | None = None
    ttft_seconds: Histogram | None = None
    prompt_tokens: Histogram | None = None
    generation_tokens: Histogram | None = None
    #: vLLM cache_config_info labels, as printed ("16", "0.9", "None")
    cache_config: dict[str, str] = field(default_factory=dict)
    gpu_memory_utilization: float | None = None
    block_size: int | None = None
    num_gpu_blocks: int | None = None
    #: from DCGM exporter series or the runbook's gpu_memory_used_bytes
    gpus: tuple[GpuDevice, ...] = ()
    #: what was left out of a file too large to read whole: lines over the length cap, and the
    #: line where reading stopped at the series cap (None: read to the end)
    long_lines_skipped: int = 0
    stopped_at_line: int | None = None


# -------------------------------------------------------------- server config


@dataclass(frozen=True)
class ServerConfig:
    """The server's memory-relevant flags, normalised across engines.

    Engine-independent names:
    - `max_model_len`: vLLM --max-model-len, SGLang --context-length, TGI --max-total-tokens
    - `max_num_seqs`: vLLM --max-num-seqs, SGLang --max-running-requests, TGI --max-batch-size
    - `memory_fraction` with `memory_fraction_kind`:
      "total" (vLLM --gpu-memory-utilization: share of the card's total memory),
      "free_static" (SGLang --mem-fraction-static: share of free memory for weights + KV),
      "process" (TGI --cuda-memory-fraction: torch per-process cap).
    `flags` keeps every flag seen, by canonical long name without dashes ("max-model-len").
    """

    source: str
    engine: str | None = None
    engine_version: str | None = None
    launch_form: str | None = None
    model: str | None = None
    served_model_name: str | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    memory_fraction: float | None = None
    memory_fraction_kind: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    data_parallel_size: int | None = None
    dtype: str | None = None
    quantization: str | None = None
    kv_cache_dtype: str | None = None
    block_size: int | None = None
    enforce_eager: bool | None = None
    enable_chunked_prefill: bool | None = None
    enable_prefix_caching: bool | None = None
    max_input_tokens: int | None = None
    max_batch_prefill_tokens: int | None = None
    max_batch_total_tokens: int | None = None
    max_concurrent_requests: int | None = None
    kv_cache_memory_bytes: int | None = None
    cpu_offload_gb: float | None = None
    host: str | None = None
    port: int | None = None
    flags: dict[str, str] = field(default_factory=dict)
    #: launch problems a human should know about, as catalog keys ("serve_repeated", ...)
    warnings: tuple[str, ...] = ()
    #: memory-relevant environment variables as the container sets them (VLLM_USE_V1,
    #: PYTORCH_CUDA_ALLOC_CONF, ...); never secrets
    env: dict[str, str] = field(default_factory=dict)


# ------------------------------------------------------------------ workload


@dataclass(frozen=True)
class Probe:
    kind: str  # liveness | readiness | startup
    handler: str | None = None  # "GET /health:8000", "exec", "tcp:8000"
    initial_delay_s: int = 0
    period_s: int = 10
    timeout_s: int = 1
    failure_threshold: int = 3

    @property
    def budget_s(self) -> int:
        """Seconds a container may stay unhealthy from start before this probe kills it."""
        return self.initial_delay_s + self.period_s * self.failure_threshold


@dataclass(frozen=True)
class GpuRequest:
    """GPUs a container asks for: whole GPUs or one MIG profile."""

    resource: str  # "nvidia.com/gpu", "nvidia.com/mig-3g.40gb", "nvidia.com/gpumem"
    count: int = 1
    mig_profile: str | None = None
    #: GPU memory granted per GPU when a vGPU scheduler caps it (HAMi nvidia.com/gpumem, in MiB)
    memory_bytes: int | None = None


@dataclass(frozen=True)
class ContainerState:
    name: str
    restart_count: int = 0
    ready: bool | None = None
    state: str | None = None  # running | waiting | terminated
    state_reason: str | None = None  # CrashLoopBackOff, OOMKilled, ...
    started_at: datetime | None = None
    last_termination_reason: str | None = None
    last_exit_code: int | None = None
    last_finished_at: datetime | None = None


@dataclass(frozen=True)
class PodState:
    name: str
    namespace: str | None = None
    node: str | None = None
    phase: str | None = None
    started_at: datetime | None = None
    containers: tuple[ContainerState, ...] = ()
    gpu: GpuRequest | None = None
    labels: dict[str, str] = field(default_factory=dict)

    @property
    def restarts(self) -> int:
        return sum(c.restart_count for c in self.containers)


@dataclass(frozen=True)
class K8sEvent:
    reason: str
    message: str = ""
    type: str = "Normal"
    object_kind: str | None = None
    object_name: str | None = None
    count: int = 1
    first_at: datetime | None = None
    last_at: datetime | None = None


@dataclass(frozen=True)
class Autoscaler:
    name: str
    min_replicas: int | None = None
    max_replicas: int | None = None
    #: "Resource:cpu", "Resource:memory", "Pods:llm_queue_depth", "External:..."
    metrics: tuple[str, ...] = ()
    current_replicas: int | None = None
    target_kind: str | None = None
    target_name: str | None = None


@dataclass(frozen=True)
class Workload:
    """The Deployment (or StatefulSet) that runs the server."""

    source: str
    name: str
    namespace: str | None = None
    kind: str = "Deployment"
    replicas: int | None = None
    ready_replicas: int | None = None
    container: str | None = None
    image: str | None = None
    gpu: GpuRequest | None = None
    probes: tuple[Probe, ...] = ()
    node_selector: dict[str, str] = field(default_factory=dict)
    max_surge: str | None = None
    max_unavailable: str | None = None
    shm_size: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    generation: int | None = None
    revision: str | None = None
    #: who manages the object besides kubectl (`collectors.kube.managers`): None = not read
    #: (a manifest file), () = read, none found
    managers: tuple[Manager, ...] | None = None
    #: a LeaderWorkerSet's pods per group (`leaderWorkerTemplate.size`: the leader and its
    #: workers, each with its own GPUs); None for every other kind
    group_size: int | None = None


# --------------------------------------------------------------------- logs


@dataclass(frozen=True)
class SignalCount:
    """How often one log signal appeared. `key` is a stable id (see runbooks.catalogs.signals)."""

    key: str
    count: int
    first_line: int | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None
    example: str | None = None


@dataclass(frozen=True)
class StartupMemory:
    """What the engine itself printed about memory at start-up (GiB = 2^30 bytes)."""

    total_gpu_gib: float | None = None
    gpu_memory_utilization: float | None = None
    weights_gib: float | None = None
    activation_gib: float | None = None
    non_torch_gib: float | None = None
    kv_cache_gib: float | None = None
    cudagraph_gib: float | None = None
    gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    max_model_len: int | None = None
    #: the engine's start-up capacity error, verbatim but clipped
    error: str | None = None
    #: the longest context the engine said its cache would hold ("estimated maximum model length")
    estimated_max_model_len: int | None = None
    #: GPU memory already in use when the engine began measuring (vLLM 0.6.4 "initial_memory_usage")
    initial_usage_gib: float | None = None
    #: free memory the engine found at start-up ("Free memory on device (free/total GiB)")
    free_at_start_gib: float | None = None
    #: SGLang "Load weight end ... avail mem": free memory left right after the weights loaded
    available_after_load_gib: float | None = None
    #: the concurrency the engine warmed up for (vLLM "warming up sampler with N dummy requests")
    max_num_seqs: int | None = None
    #: weights and non-torch memory as one figure (vLLM >= 0.33 "GiB for consumed memory")
    consumed_gib: float | None = None


#: the phases of an engine's life a CUDA OOM can happen in; all but "serving" are start-up
OOM_PHASES = ("loading", "profiling", "kv_cache", "cudagraph", "sampler_warmup", "warmup", "serving")


@dataclass(frozen=True)
class CudaOom:
    """A CUDA out-of-memory message with the numbers torch printed and the phase it came in.

    Bytes are as printed (GiB = 2^30). `in_use_bytes`: what the failing process held;
    `reserved_unallocated_bytes`: PyTorch's cached-but-free memory (fragmentation). `phase` is
    one of OOM_PHASES, read from the traceback and the lines around it; None when nothing says.
    """

    count: int = 1
    phase: str | None = None
    tried_bytes: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    in_use_bytes: int | None = None
    allocated_bytes: int | None = None
    reserved_unallocated_bytes: int | None = None
    example: str | None = None
    #: "this process has X memory in use" (torch >= 2.1), when torch printed it
    this_process_bytes: int | None = None
    #: the sum of the other "Process N has X memory in use" entries beside "this process"
    other_processes_bytes: int | None = None
    #: the cap torch was given ("X allowed;", torch.cuda.set_per_process_memory_fraction; the
    #: cudaMallocAsync block's "PyTorch limit"), when one was set
    allowed_bytes: int | None = None
    #: torch >= 2.4: "with X allocated in private pools (e.g., CUDA Graphs)", counted inside
    #: `allocated_bytes`: graph pools' cached blocks, which other allocations cannot use
    private_pools_bytes: int | None = None
    #: which of torch's wordings it is: "old" (torch <= 2.0), "new" (>= 2.1), "async" (the
    #: cudaMallocAsync allocator's block); None where no figure of one was read
    torch_form: str | None = None

    @property
    def at_startup(self) -> bool:
        return self.phase is not None and self.phase != "serving"


#: kinds of ParallelError
PARALLEL_ERRORS = ("heads_indivisible", "kv_heads_indivisible", "layers_indivisible", "gpus_insufficient")


@dataclass(frozen=True)
class ParallelError:
    """A parallel-layout error the engine printed: heads or layers that a TP/PP size does not
    divide, or fewer GPUs than the layout needs. `size` is the TP (or PP) size named."""

    kind: str
    heads: int | None = None
    size: int | None = None
    gpus: int | None = None
    example: str | None = None


@dataclass(frozen=True)
class KvAllocFailure:
    """SGLang's KV allocator refusing a batch: "Decode out of memory. Try to lower your batch
    size." with the tokens asked and the tokens it could have given (free + evictable), read
    from its own lines (see collectors.parsers.log_failures.KV_ALLOC_FORMATS). `phase`: decode,
    prefill or None (0.5.23's generic "Out of memory."). `available` above `requested` says the
    pool was not short: the failure is not KV pressure. `pool`: with sliding-window attention
    SGLang prints a full and a swa pool, and these figures are the scarcer one's ("full" or
    "swa"); None: one pool."""

    phase: str | None
    requested: int
    available: int
    free: int | None = None
    evictable: int | None = None
    count: int = 1
    example: str | None = None
    pool: str | None = None

    @property
    def tokens_to_spare(self) -> bool:
        return self.available >= self.requested


@dataclass(frozen=True)
class LaunchDevices:
    """The GPUs one launch in a log was given (see collectors.parsers.launch_devices).

    `host_devices`: the host's device ids (`--gpus device=0`, or CUDA_VISIBLE_DEVICES outside a
    container); `visible_count`: how many GPUs the engine sees; `all_gpus`: `--gpus all`.
    """

    host_devices: tuple[str, ...] = ()
    visible_count: int | None = None
    all_gpus: bool = False
    line: int | None = None
    example: str | None = None


@dataclass(frozen=True)
class LoggedError:
    """An error line a log states, whatever printed it (see collectors.parsers.log_errors).

    `kind`: error_line (ERROR/CRITICAL/FATAL level), exception (a traceback's closing exception
    or an exception class with its message), traceback (a log cut inside one: its last
    frame), process_exit (a failed start, crash, worker/shard/engine exit, kill),
    host_memory_kill (Ray's memory monitor or the kernel's OOM killer), or sharing_layer (a
    GPU-sharing layer such as HAMi-core). `explained`: a rule of the signal
    catalog matched the line. `down`: the line says a process stopped or never started.
    router_exit: the orderly stop of a router or gateway in front of the engines, whose log it
    is (`process` names it): not the engine's, never `down`.
    """

    kind: str
    example: str
    line: int | None = None
    explained: bool = False
    down: bool = False
    #: the process the line is of where the log names one that is not an engine (a router)
    process: str | None = None


@dataclass(frozen=True)
class StatsSample:
    """One periodic stats line (vLLM "Avg prompt throughput", SGLang "Decode batch")."""

    at: datetime | None = None
    running: float | None = None
    waiting: float | None = None
    kv_cache_usage_ratio: float | None = None
    preemptions: float | None = None


@dataclass(frozen=True)
class LogSignals:
    source: str
    lines: int = 0
    engine: str | None = None
    engine_version: str | None = None
    signals: tuple[SignalCount, ...] = ()
    startup: StartupMemory | None = None
    stats_last: StatsSample | None = None
    stats_peak: StatsSample | None = None
    first_at: datetime | None = None
    last_at: datetime | None = None
    #: the server launch the log shows: a pasted command line, the engine's own settings
    #: printout (vLLM config line or `args: Namespace(...)`, TGI `Args { ... }`, SGLang
    #: `server_args=...`); the evidence's server_config when no Deployment gives one
    server_config: ServerConfig | None = None
    #: the first CUDA OOM that printed numbers (else the first), with the total count
    oom: CudaOom | None = None
    parallel_error: ParallelError | None = None
    #: the first SGLang KV-allocator refusal with its figures, and how many the log holds
    kv_alloc_failure: KvAllocFailure | None = None
    #: pods from `kubectl get pods` tables or `kubectl describe pod` output inside the log
    pods: tuple[PodState, ...] = ()
    #: events from `kubectl get events` tables or describe's Events: sections inside the log
    events: tuple[K8sEvent, ...] = ()
    #: error lines of any kind, explained by a rule or not (the generic failure reader)
    errors: tuple[LoggedError, ...] = ()
    #: the launches in the log that named their GPUs, in order
    launches: tuple[LaunchDevices, ...] = ()

    def count(self, key: str) -> int:
        return sum(s.count for s in self.signals if s.key == key)


# -------------------------------------------------------------------- model


@dataclass(frozen=True)
class ModelSpec:
    """Architecture facts that size memory. From the catalog or a config.json."""

    name: str
    source: str = "catalog"
    architecture: str | None = None
    num_layers: int | None = None
    hidden_size: int | None = None
    num_attention_heads: int | None = None
    num_kv_heads: int | None = None
    head_dim: int | None = None
    vocab_size: int | None = None
    intermediate_size: int | None = None
    num_params: float | None = None
    active_params: float | None = None
    native_dtype: str | None = None
    max_position_embeddings: int | None = None
    sliding_window: int | None = None
    #: layers that use full attention when some use a sliding window (None: all full)
    full_attention_layers: int | None = None
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    num_experts: int | None = None
    experts_per_token: int | None = None
    moe_intermediate_size: int | None = None
    tie_word_embeddings: bool | None = None
    quantization: str | None = None
    quant_bits: int | None = None
    #: MLA query compression rank (DeepSeek V2/V3; None: queries not compressed)
    q_lora_rank: int | None = None

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None


# ---------------------------------------------------------- cluster context


@dataclass(frozen=True)
class ReplicaSetInfo:
    """One ReplicaSet of the Deployment: one revision of its pod template."""

    name: str
    revision: str | None = None
    replicas: int | None = None
    ready_replicas: int | None = None
    created_at: datetime | None = None
    #: the server container's image in this revision
    image: str | None = None


@dataclass(frozen=True)
class Disruption:
    """A PodDisruptionBudget covering the pods (minAvailable / maxUnavailable as written)."""

    name: str
    min_available: str | None = None
    max_unavailable: str | None = None
    disruptions_allowed: int | None = None
    current_healthy: int | None = None
    desired_healthy: int | None = None
    expected_pods: int | None = None


@dataclass(frozen=True)
class Route:
    """A Service selecting the pods, with the Ingresses that send traffic to it."""

    service: str
    type: str | None = None  # ClusterIP, NodePort, LoadBalancer, ...
    #: "80->http/TCP" (service port -> target port / protocol)
    ports: tuple[str, ...] = ()
    ingresses: tuple[str, ...] = ()
    hosts: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeInfo:
    """A node running the pods: labels and GPU resources, whole GPUs and MIG slices.

    >>> NodeInfo("gpu-node-03", gpu_allocatable={"nvidia.com/gpu": 8}).gpu_allocatable["nvidia.com/gpu"]
    8
    """

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    #: "nvidia.com/gpu", "nvidia.com/mig-1g.10gb", ... -> count
    gpu_capacity: dict[str, int] = field(default_factory=dict)
    gpu_allocatable: dict[str, int] = field(default_factory=dict)
    ready: bool | None = None
    unschedulable: bool = False
    #: the nvidia.com/gpu.product label (GPU feature discovery)
    gpu_product: str | None = None
    #: the nvidia.com/gpu.memory label (MiB per GPU) in bytes
    gpu_memory_bytes: int | None = None


@dataclass(frozen=True)
class ColocatedPod:
    """Another pod asking for GPUs on a node that runs the service's pods."""

    name: str
    namespace: str | None = None
    node: str | None = None
    phase: str | None = None
    gpu: GpuRequest | None = None
    #: the controlling owner, "ReplicaSet/name"
    owner: str | None = None


# ----------------------------------------------------------------- evidence


@dataclass(frozen=True)
class Evidence:
    """Everything gathered for one triage. Every field is optional."""

    target: str | None = None
    collected_at: datetime | None = None
    gpus: GpuSnapshot | None = None
    memory_history: MemoryHistory | None = None
    server_config: ServerConfig | None = None
    server_metrics: ServerMetrics | None = None
    workload: Workload | None = None
    pods: tuple[PodState, ...] = ()
    events: tuple[K8sEvent, ...] = ()
    hpa: Autoscaler | None = None
    logs: LogSignals | None = None
    requests: RequestProfile | None = None
    model: ModelSpec | None = None
    #: what was read (file names or live sources)
    sources: tuple[str, ...] = ()
    issues: tuple[ReadIssue, ...] = ()
    service_history: ServiceHistory | None = None
    replica_sets: tuple[ReplicaSetInfo, ...] = ()
    pdb: Disruption | None = None
    routes: tuple[Route, ...] = ()
    nodes: tuple[NodeInfo, ...] = ()
    colocated: tuple[ColocatedPod, ...] = ()
    #: each pod's own /metrics (source "metrics-<pod>.txt"); server_metrics holds their total
    pod_metrics: tuple[ServerMetrics, ...] = ()
