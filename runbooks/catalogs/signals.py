"""Server-log signals: stable keys and the rules that find them in a log line.

The first five are the runbook's own keywords; the rest are what vLLM, TGI and SGLang print
when memory runs short (formats in reference/formats.md §8). Renderers word each key.

How a rule counts:
- "lines": every matching line is one occurrence;
- "max": the line carries a running total (vLLM V0 prints its preemption warning on the 1st
  and then every 50th preemption, with `total_num_cumulative_preemption=N`), so the count is
  the largest total seen (or the number of lines, if larger);
- "sum": the line carries how many occurred (SGLang `#retracted_reqs: N`), summed.

A line may match several rules: a sampler warm-up OOM is also a CUDA OOM.

Each pattern has its `Origin`: an engine's own line with the first and last version read that
print it and the file:line of its format string (the versions of `runbooks.catalogs.engine_logs`;
`tests/test_signal_origins.py` holds each to a line rendered from that format string), or what
else prints it (torch, CUDA, NCCL, the kernel, Kubernetes, a wrapper seen in a real report).
Lines are matched whatever the version: a fork or a backport prints the same words.

>>> [(h.key, h.amount) for h in match_line("[2025-03-01 12:05:00 TP0] KV cache pool is full. "
...                                        "Retract requests. #retracted_reqs: 3")]
[('sglang_retraction', 3)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runbooks.catalogs.versions import Version, within

#: the runbook's log keywords, in its order
RUNBOOK_SIGNALS = ("cuda_oom", "alloc_failed", "prefill_rejected", "queue_full", "kv_insufficient")

COUNT_LINES, COUNT_MAX, COUNT_SUM = "lines", "max", "sum"


@dataclass(frozen=True)
class Origin:
    """Where the text one pattern finds comes from.

    `by`: an engine (`runbooks.model.evidence.ENGINES`: its versions are the engine's, and a
    rendered line of it at one of them is in tests/data/engine_lines/lines.yaml), or what else prints it: `torch`, `cuda` (the CUDA runtime's
    error strings), `nvml`, `nccl`, `kubernetes`, `linux` (the kernel's OOM killer), `runbook`
    (the runbook's own keywords: gateways and wrappers print them, no engine's source does),
    or the wrapper a real report showed printing it (`runpod-worker-vllm`, `kserve`, `llm-d`).
    For an engine, `since` and `until` are the first and last version read that print it (the
    rules of `runbooks.catalogs.engine_logs`: a "since" of the oldest version read means at
    least since then, `until` None means the newest version read still prints it) and `source`
    is file:line at the first and the newest of them; `read` False: no version read prints
    it, and `source` says where it was seen.
    """

    by: str
    source: str
    since: Version | None = None
    until: Version | None = None
    read: bool = True

    def printed_by(self, version: Version) -> bool:
        """Whether the engine at `version` prints it (as far as the versions read say)."""
        if self.since is None:
            return self.read
        return within(version, self.since, self.until)


_RUNBOOK = Origin("runbook", "RUNBOOK.md, the log keywords (the runbook's grep list)")


@dataclass(frozen=True)
class SignalRule:
    """One signal: a stable key, the patterns that find it, and how to count it."""

    key: str
    #: lower-case words, one of which every matching line holds: a cheap test before the patterns
    needles: tuple[str, ...]
    patterns: tuple[str, ...]
    #: where each pattern's text comes from, one per pattern, in order
    origins: tuple[Origin, ...]
    #: the engine that prints it, None for any
    engine: str | None = None
    count: str = COUNT_LINES
    #: with count "max"/"sum": a pattern whose group 1 is the number on the line
    amount_pattern: str | None = None
    #: start-up capacity errors: the engine refused to start for lack of memory
    startup_error: bool = False
    ignore_case: bool = False


RULES: tuple[SignalRule, ...] = (
    # ------------------------------------------------------------- runbook keywords
    SignalRule(
        "cuda_oom",
        ("out of memory", "outofmemoryerror"),
        (r"CUDA out of memory", r"\bOutOfMemoryError\b", r"CUDA error: out of memory"),
        (Origin("torch", "c10/cuda/CUDACachingAllocator.cpp: the caching allocator's refusal "
                         "(\"CUDA out of memory. Tried to allocate ...\"), which engines also re-raise; its "
                         "wordings by torch version in runbooks.catalogs.torch_oom"),
         Origin("torch", "the exception's class name in a traceback: torch.cuda.OutOfMemoryError 1.13-2.3, "
                         "torch.OutOfMemoryError from 2.4 (torch/csrc/Exceptions.cpp; also the name of the "
                         "cudaMallocAsync allocator's block)"),
         Origin("cuda", "cudaErrorMemoryAllocation's text as torch's C10_CUDA_CHECK prints it")),
    ),
    SignalRule(
        "alloc_failed", ("failed to allocate memory",), (r"failed to allocate memory",), (_RUNBOOK,),
        ignore_case=True,
    ),
    SignalRule("prefill_rejected", ("prefill rejected",), (r"prefill rejected",), (_RUNBOOK,), ignore_case=True),
    SignalRule(
        "queue_full", ("queue full", "queue is full"), (r"request queue (?:is )?full",), (_RUNBOOK,),
        ignore_case=True,
    ),
    SignalRule(
        "kv_insufficient", ("insufficient kv",), (r"insufficient KV[- ]cache blocks",), (_RUNBOOK,),
        ignore_case=True,
    ),
    # ------------------------------------------------------------------------ vLLM
    SignalRule(
        "vllm_preemption",
        ("preemptionmode",),
        # by its reason clause too: forks and retyped pastes word the start differently
        (r"is preempted by PreemptionMode", r"preempted (?:by|in) \S{1,40} mode because there is not enough KV cache space"),
        (Origin("vllm", "vllm/core/scheduler.py:1078@0.4.3, :1776@0.10.2 (V0; V1 prints no such warning)",
            (0, 4, 3), (0, 10, 2)),
         Origin("vllm", "vllm/core/scheduler.py:1079@0.4.3, :1777@0.10.2 (the same warning's reason clause)",
            (0, 4, 3), (0, 10, 2))),
        engine="vllm",
        count=COUNT_MAX,
        amount_pattern=r"total_num_cumulative_preemption=(\d{1,15})",
    ),
    SignalRule(
        "kv_startup_too_small",
        ("max seq len", "can be stored in kv cache"),
        (
            r"To serve at least one request with the models?'s max seq len",
            r"is larger than the maximum number of tokens that can be stored in KV cache",
        ),
        (Origin("vllm", "vllm/v1/core/kv_cache_utils.py:466@0.7.3, vllm/v1/core/kv_cache_planning.py:78@0.33.0",
            (0, 7, 3)),
         Origin("vllm", "vllm/engine/llm_engine.py:287@0.2.7, vllm/worker/worker.py:668@0.10.2 (V0)",
            (0, 2, 7), (0, 10, 2))),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "no_cache_blocks",
        ("no available memory for the cache blocks",),
        (r"No available memory for the cache blocks",),
        (Origin("vllm", "vllm/engine/llm_engine.py:279@0.2.7, vllm/v1/core/kv_cache_planning.py:58@0.33.0",
            (0, 2, 7)),),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "free_below_utilization",
        ("less than desired gpu memory utilization", "less than the engine's budget"),
        (r"Free memory on device.{0,80}? is less than desired GPU memory utilization",
         r"Free memory on device.{0,80}? is less than the engine's budget after excluding external process's weights"),
        (Origin("vllm", "vllm/v1/worker/gpu_worker.py:146@0.9.2, vllm/v1/worker/utils.py:766@0.33.0", (0, 9, 2)),
         Origin("vllm", "vllm/v1/worker/utils.py:741@0.33.0 (weights held by another process)", (0, 33, 0))),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "sampler_warmup_oom",
        ("warming up",),
        (r"out of memory (?:occurred )?when warming up (?:the )?sampler",),
        (Origin("vllm", "vllm/v1/worker/gpu_model_runner.py:1313@0.8.0, :5930@0.33.0 (not in 0.34.0's source)",
            (0, 8, 0)),),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "engine_init_failed",
        ("engine core initialization failed",),
        (r"Engine core initialization failed",),
        (Origin("vllm", "vllm/v1/engine/core_client.py:430@0.8.5, vllm/v1/engine/utils.py:1474@0.33.0", (0, 8, 5)),),
        engine="vllm",
    ),
    SignalRule("vllm_port_uri", ("appears to be a uri",), (r"appears to be a URI",),
               (Origin("vllm", "vllm/envs.py:165@0.9.0, :541@0.33.0 (VLLM_PORT set by a Kubernetes Service)",
                   (0, 9, 0)),),
               engine="vllm"),
    # ------------------------------------------------------------------------- TGI
    SignalRule(
        "tgi_prefill_oom",
        ("prefill tokens",),
        (r"Not enough memory to handle \d+ prefill tokens",),
        (Origin("tgi", "server/text_generation_server/models/flash_causal_lm.py:730@v0.9.4, :1551@v3.3.7",
            (0, 9, 4)),),
        engine="tgi",
        startup_error=True,
    ),
    SignalRule(
        "tgi_total_tokens_oom",
        ("total tokens",),
        (r"Not enough memory to handle \d+ total tokens",),
        (Origin("tgi", "server/text_generation_server/models/flash_causal_lm.py:737@v0.9.0, :730@v0.9.3",
            (0, 9, 0), (0, 9, 3)),),
        engine="tgi",
        startup_error=True,
    ),
    SignalRule(
        "tgi_max_total_tokens_oom",
        ("max_total_tokens", "notenoughmemory("),
        (r"Not enough memory to handle `?max_total_tokens",
         r"\b(?:WebServer|Backend)\(NotEnoughMemory\(\d+\)\)"),
        (Origin("tgi", "router/src/server.rs:1973@v2.1.0, backends/v3/src/lib.rs:181@v3.3.7 (the error's Display text)",
            (2, 1, 0)),
         # main's Result printed with Debug: WebServer(...) from 2.1.0, Backend(...) from 2.3.1
         Origin("tgi", "router/src/server.rs:1533@v2.1.0, backends/v3/src/lib.rs:99@v3.3.7 (main's Result, Debug)",
            (2, 1, 0))),
        engine="tgi",
        startup_error=True,
    ),
    SignalRule(
        "tgi_prefill_reduced",
        ("reducing the max batch prefill",),
        (r"Reducing the max batch prefill",),
        (Origin("tgi", "launcher/src/main.rs:2050@v3.0.0, :2144@v3.3.7", (3, 0, 0)),),
        engine="tgi",
    ),
    SignalRule("model_overloaded", ("model is overloaded",), (r"Model is overloaded",),
               (Origin("tgi", "router/src/infer.rs:592@v0.9.0, router/src/infer/mod.rs:412@v3.3.7 (the 429's error text)",
                   (0, 9, 0)),),
               engine="tgi"),
    # ---------------------------------------------------------------------- SGLang
    SignalRule(
        "sglang_retraction",
        ("retract", "decode out of memory"),
        (r"KV cache pool is full\. Retract requests", r"[Dd]ecode out of memory happened"),
        (Origin("sglang", "sglang/srt/managers/scheduler.py:1527@0.4.7, :4526@0.5.23", (0, 4, 7)),
         Origin("sglang", "sglang/srt/managers/tp_worker.py:662@0.3.0, sglang/srt/managers/scheduler.py:1350@0.4.5",
            (0, 3, 0), (0, 4, 5))),
        engine="sglang",
        count=COUNT_SUM,
        amount_pattern=r"#retracted_reqs: (\d{1,15})",
    ),
    SignalRule(
        "sglang_not_enough_memory",
        ("mem-fraction-static", "profiled value -"),
        (
            r"Not enough memory\. Please try to increase --mem-fraction-static",
            r"Loaded weights leave no GPU memory for the KV cache",
            r"is larger than the profiled value -\d",
        ),
        (Origin("sglang", "sglang/srt/model_executor/model_runner.py:370@0.3.0, "
                          "sglang/srt/model_executor/pool_configurator.py:96@0.5.23", (0, 3, 0)),
         Origin("sglang", "sglang/srt/model_executor/model_runner_kv_cache_mixin.py:130@0.5.15, "
                          "sglang/srt/mem_cache/kv_cache_configurator.py:3051@0.5.23", (0, 5, 15)),
         Origin("sglang", "sglang/srt/model_executor/model_runner.py:362@0.3.0, "
                          "sglang/srt/mem_cache/kv_cache_configurator.py:3102@0.5.23 (a negative value)", (0, 3, 0))),
        engine="sglang",
        startup_error=True,
    ),
    SignalRule(
        # SGLang 0.5.23 serves with a pool below one full-length request and warns: long
        # requests are refused or truncated
        "sglang_pool_below_context",
        ("fewer than --context-length",),
        (r"KV pool holds \d+ tokens, fewer than --context-length \d+",),
        (Origin("sglang", "sglang/srt/managers/tp_worker.py:560@0.5.23", (0, 5, 23)),),
        engine="sglang",
    ),
    # ------------------------------------------------- the engine cannot start at all
    SignalRule(
        "nccl_error",
        ("nccl",),
        (r"NCCL error", r"\bnccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage)Error\b", r"ncclCommInitRank failed"),
        (Origin("torch", "torch.distributed's NCCL process group: \"NCCL error in: ...\""),
         Origin("nccl", "nccl.h: the ncclResult_t names"),
         Origin("nccl", "NCCL's own WARN line for a failed communicator")),
    ),
    SignalRule(
        "shm_exhausted",
        ("/dev/shm", "shared memory segment", "ncclshmopen"),
        (
            r"/dev/shm",
            r"Error while (?:creating|attaching to) shared memory segment",
            r"ncclShmOpen",
        ),
        (Origin("linux", "the shared-memory mount (a container's 64 MiB default), named by whoever fails on it"),
         Origin("nccl", "NCCL's shared-memory transport (its WARN line)"),
         Origin("nccl", "the NCCL function named in its WARN line")),
    ),
    SignalRule(
        "cuda_driver_error",
        ("driver", "nvml", "cuda-capable", "no cuda gpus"),
        (
            r"CUDA driver version is insufficient",
            r"NVML_SUCCESS == r INTERNAL ASSERT FAILED",
            r"Failed to initialize NVML",
            r"no CUDA-capable device is detected",
            r"Found no NVIDIA driver",
            r"No CUDA GPUs are available",
            r"Driver/library version mismatch",
        ),
        (Origin("cuda", "cudaErrorInsufficientDriver's text"),
         Origin("torch", "c10/cuda/CUDACachingAllocator.cpp: TORCH_INTERNAL_ASSERT on an NVML call"),
         Origin("nvml", "nvidia-smi and NVML's initialisation failure"),
         Origin("cuda", "cudaErrorNoDevice's text"),
         Origin("torch", "torch/cuda/__init__.py: _lazy_init without a driver"),
         Origin("torch", "torch's CUDA initialisation with no visible device"),
         Origin("nvml", "NVML_ERROR_LIB_RM_VERSION_MISMATCH's text (driver and kernel module differ)")),
    ),
    SignalRule(
        "tp_indivisible",
        ("divisible",),
        (
            r"must be divisible by tensor parallel size",
            r"divisible by (?:the )?pipeline parallel size",
            r"GPUs per node is not divisible by the number of tensor parallelism",
        ),
        (Origin("vllm", "vllm/config.py:194@0.2.7, vllm/config/model.py:1562@0.33.0 (attention heads over TP)",
            (0, 2, 7)),
         Origin("vllm", "vllm/config.py:202@0.2.7, :244@0.5.0 (layers over PP)", (0, 2, 7), (0, 5, 0)),
         Origin("vllm", "vllm/engine/ray_utils.py before 0.2.7 (vllm-project/vllm issue 596, July 2023)", read=False)),
    ),
    SignalRule(
        "gpus_insufficient",
        ("available gpus",),
        (
            r"required GPUs exceeds the total number of available GPUs",
            r"exceeds available GPUs",
            r"(?:larger|greater) than the number of available GPUs",
        ),
        (Origin("vllm", "vllm/engine/ray_utils.py:107@0.2.7, vllm/executor/ray_utils.py:101@0.5.0", (0, 2, 7), (0, 5, 0)),
         Origin("vllm", "vllm/v1/executor/ray_utils.py:332@0.12.0, :294@0.33.0", (0, 12, 0)),
         Origin("vllm", "vllm/config/parallel.py:566@0.12.0 (\"Tensor parallel size (N) cannot be larger\"), "
                        ":1072@0.33.0 (\"World size (N) is larger\", from 0.13.0)", (0, 12, 0))),
        ignore_case=True,
    ),
    SignalRule(
        "engine_start_failed",
        ("failed to start", "error initializing", "webserver crashed", "crashed container"),
        (
            r"WorkerProc failed to start",
            r"EngineCore failed to start",
            r"Error initializing vLLM engine",
            r"Webserver Crashed",
            r"Shard \d+ failed to start",
            r"[Ff]ailed to start model server",
            r"Engine process failed to start",
            r"Crashed container in pod",
        ),
        (Origin("vllm", "vllm/v1/executor/multiproc_executor.py:348@0.7.3, :1057@0.33.0", (0, 7, 3)),
         Origin("vllm", "vllm/v1/engine/core.py:396@0.8.5, :1584@0.33.0", (0, 8, 5)),
         Origin("runpod-worker-vllm", "RunPod's vLLM worker (tests/data/real/runpod-40-cudagraph-capture-44g)", read=False),
         Origin("tgi", "launcher/src/main.rs:1064@v0.9.0, :2342@v3.3.7", (0, 9, 0)),
         Origin("tgi", "launcher/src/main.rs:832@v0.9.0, :1677@v3.3.7", (0, 9, 0)),
         Origin("kserve", "KServe's model server (tests/data/real/kserve-3946-llama3-hf-predictor-nvml-assert)", read=False),
         Origin("vllm", "vllm/entrypoints/openai/api_server.py:195@0.6.3, :295@0.10.2 (the V0 engine process)",
            (0, 6, 3), (0, 10, 2)),
         Origin("llm-d", "llm-d's benchmark harness (tests/data/real/llm-d-benchmark-668-pod-crash-no-log)", read=False)),
    ),
    # ----------------------------------------------------------------- any engine
    SignalRule(
        "context_length_exceeded",
        ("context length", "must be <="),
        (
            r"maximum context length is \d",
            # TGI's validation error puts its names in backticks; pastes often drop them
            r"`?inputs`? tokens \+ `?max_new_tokens`? must be <=",
            r"is longer than the model's context length",
        ),
        (Origin("vllm", "vllm/entrypoints/openai/api_server.py:158@0.2.7, vllm/renderers/params.py:405@0.33.0",
            (0, 2, 7)),
         Origin("tgi", "router/src/validation.rs:375@v0.9.0, :999@v3.3.7", (0, 9, 0)),
         Origin("sglang", "sglang/srt/managers/tokenizer_manager.py:421@0.3.0, :1341@0.5.23", (0, 3, 0))),
    ),
    SignalRule("probe_killed", ("keyboardinterrupt",), (r"KeyboardInterrupt: terminated",),
               (Origin("vllm", "vllm/entrypoints/openai/api_server.py:548@0.6.3, "
                               "vllm/entrypoints/launchers/api_server/entry.py:171@0.33.0 (its SIGTERM handler)",
                   (0, 6, 3)),)),
    SignalRule(
        "oom_killed",
        ("oomkilled", "out of memory: kill", "oom-kill"),
        (r"\bOOMKilled\b", r"Out of memory: Kill(?:ed)? process", r"\boom-kill\b"),
        (Origin("kubernetes", "a container's last state, reason OOMKilled (kubectl describe, events)"),
         Origin("linux", "mm/oom_kill.c: the kernel's OOM killer"),
         Origin("linux", "mm/oom_kill.c: the oom-kill summary line (constraint, cgroup, task)")),
    ),
)

#: every stable signal key, in rule order
SIGNAL_KEYS: tuple[str, ...] = tuple(rule.key for rule in RULES)

RULES_BY_KEY: dict[str, SignalRule] = {rule.key: rule for rule in RULES}


@dataclass(frozen=True)
class SignalHit:
    """One rule matching one line. `amount`: the number the line carries, for "max"/"sum" rules."""

    key: str
    amount: int | None = None


def _compile(rule: SignalRule) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in rule.patterns), re.IGNORECASE if rule.ignore_case else 0)


_COMPILED: tuple[tuple[SignalRule, re.Pattern[str], re.Pattern[str] | None], ...] = tuple(
    (rule, _compile(rule), re.compile(rule.amount_pattern) if rule.amount_pattern else None) for rule in RULES
)

# every rule's needles at once: most lines hold none and cost one lower() and a few substring tests
_ALL_NEEDLES: tuple[str, ...] = tuple(dict.fromkeys(n for rule in RULES for n in rule.needles))


def match_line(line: str) -> tuple[SignalHit, ...]:
    """Every rule that matches `line`, in rule order."""
    low = line.lower()
    if not any(map(low.__contains__, _ALL_NEEDLES)):
        return ()
    hits = []
    for rule, pattern, amount_pattern in _COMPILED:
        if not any(map(low.__contains__, rule.needles)) or pattern.search(line) is None:
            continue
        amount = None
        if amount_pattern is not None:
            m = amount_pattern.search(line)
            amount = int(m.group(1)) if m else None
        hits.append(SignalHit(rule.key, amount))
    return tuple(hits)


def is_startup_error(key: str) -> bool:
    """True for keys that mean the engine refused to start for lack of memory."""
    rule = RULES_BY_KEY.get(key)
    return rule is not None and rule.startup_error


#: processes that route requests to engines and serve none (a router or gateway in front of
#: them), each by the name its own log lines carry and where that name comes from: a log that
#: names one is that process's, and its orderly stop (uvicorn's "Shutting down") is the
#: router's, not the engine's
ROUTER_PROCESSES: tuple[tuple[str, str, str], ...] = (
    ("vllm_router", r"\bvllm_router\b",
     "its logger ends every line with the module (httpx_client.py:35:vllm_router.httpx_client)"),
    ("sglang_router", r"\bsglang_router\b|\bsgl[_-]router\b",
     "the sglang_router package (python -m sglang_router.launch_router) and the sgl-router binary"),
    ("aibrix_gateway", r"\bgateway[_-]plugins\b|\baibrix-gateway\b",
     "AIBrix's Envoy external-processing plugin (gateway-plugins), the aibrix-gateway deployment"),
)
ROUTER_MARK = re.compile("|".join(f"(?:{pattern})" for _, pattern, _ in ROUTER_PROCESSES))
#: an orderly stop as a uvicorn/Starlette server prints it (engines and routers alike)
ORDERLY_SHUTDOWN = re.compile(r"^(?:INFO:\s*)?(?:Shutting down(?! shards)|Waiting for application shutdown"
                              r"|Application shutdown complete|Finished server process)")


def router_named(line: str) -> str | None:
    """The router or gateway process a log line names, by its key in `ROUTER_PROCESSES` (None:
    it names none).

    >>> router_named("[2025-05-21 11:44:46,899] INFO: httpx AsyncClient closed (httpx_client.py:43:vllm_router.httpx_client)")
    'vllm_router'
    >>> router_named("INFO 05-21 11:44:46 [api_server.py:1] vLLM API server version 0.8.5") is None
    True
    """
    if ROUTER_MARK.search(line) is None:
        return None
    return next(name for name, pattern, _ in ROUTER_PROCESSES if re.search(pattern, line))
