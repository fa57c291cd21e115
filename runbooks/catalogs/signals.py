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

>>> [(h.key, h.amount) for h in match_line("[2025-03-01 12:05:00 TP0] KV cache pool is full. "
...                                        "Retract requests. #retracted_reqs: 3")]
[('sglang_retraction', 3)]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: the runbook's log keywords, in its order
RUNBOOK_SIGNALS = ("cuda_oom", "alloc_failed", "prefill_rejected", "queue_full", "kv_insufficient")

COUNT_LINES, COUNT_MAX, COUNT_SUM = "lines", "max", "sum"


@dataclass(frozen=True)
class SignalRule:
    """One signal: a stable key, the patterns that find it, and how to count it."""

    key: str
    #: lower-case words, one of which every matching line holds: a cheap test before the patterns
    needles: tuple[str, ...]
    patterns: tuple[str, ...]
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
    ),
    SignalRule(
        "alloc_failed", ("failed to allocate memory",), (r"failed to allocate memory",), ignore_case=True
    ),
    SignalRule("prefill_rejected", ("prefill rejected",), (r"prefill rejected",), ignore_case=True),
    SignalRule(
        "queue_full", ("queue full", "queue is full"), (r"request queue (?:is )?full",), ignore_case=True
    ),
    SignalRule(
        "kv_insufficient", ("insufficient kv",), (r"insufficient KV[- ]cache blocks",), ignore_case=True
    ),
    # ------------------------------------------------------------------------ vLLM
    SignalRule(
        "vllm_preemption",
        ("preemptionmode",),
        # by its reason clause too: forks and retyped pastes word the start differently
        (r"is preempted by PreemptionMode", r"preempted (?:by|in) \S{1,40} mode because there is not enough KV cache space"),
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
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "no_cache_blocks",
        ("no available memory for the cache blocks",),
        (r"No available memory for the cache blocks",),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "free_below_utilization",
        ("less than desired gpu memory utilization", "less than the engine's budget"),
        (r"Free memory on device.{0,80}? is less than desired GPU memory utilization",
         # vLLM 0.33 with weights held by another process (v1/worker/utils.py:741@0.33.0)
         r"Free memory on device.{0,80}? is less than the engine's budget after excluding external process's weights"),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "sampler_warmup_oom",
        ("warming up",),
        (r"out of memory (?:occurred )?when warming up (?:the )?sampler",),
        engine="vllm",
        startup_error=True,
    ),
    SignalRule(
        "engine_init_failed",
        ("engine core initialization failed",),
        (r"Engine core initialization failed",),
        engine="vllm",
    ),
    SignalRule("vllm_port_uri", ("appears to be a uri",), (r"appears to be a URI",), engine="vllm"),
    # ------------------------------------------------------------------------- TGI
    SignalRule(
        "tgi_prefill_oom",
        ("prefill tokens",),
        (r"Not enough memory to handle \d+ prefill tokens",),
        engine="tgi",
        startup_error=True,
    ),
    SignalRule(
        "tgi_total_tokens_oom",
        ("total tokens",),
        (r"Not enough memory to handle \d+ total tokens",),
        engine="tgi",
        startup_error=True,
    ),
    SignalRule(
        "tgi_max_total_tokens_oom",
        ("max_total_tokens", "notenoughmemory("),
        (r"Not enough memory to handle `?max_total_tokens",
         # TGI >= 2.1 ends with main's Result: `Error: WebServer(NotEnoughMemory(N))`
         # (router/src/server.rs:1533@v2.1.0), from 2.3.1 `Error: Backend(NotEnoughMemory(N))`
         # (backends/v3/src/lib.rs:99@v3.3.7); the Display text is
         # "Not enough memory to handle `max_total_tokens=N`" (backends/v3/src/lib.rs:181)
         r"\b(?:WebServer|Backend)\(NotEnoughMemory\(\d+\)\)"),
        engine="tgi",
        startup_error=True,
    ),
    SignalRule(
        "tgi_prefill_reduced",
        ("reducing the max batch prefill",),
        (r"Reducing the max batch prefill",),
        engine="tgi",
    ),
    SignalRule("model_overloaded", ("model is overloaded",), (r"Model is overloaded",), engine="tgi"),
    # ---------------------------------------------------------------------- SGLang
    SignalRule(
        "sglang_retraction",
        ("retract", "decode out of memory"),
        (r"KV cache pool is full\. Retract requests", r"[Dd]ecode out of memory happened"),
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
        engine="sglang",
        startup_error=True,
    ),
    SignalRule(
        # SGLang 0.5.23 serves with a pool below one full-length request and warns
        # (managers/tp_worker.py:560@0.5.23): long requests are refused or truncated
        "sglang_pool_below_context",
        ("fewer than --context-length",),
        (r"KV pool holds \d+ tokens, fewer than --context-length \d+",),
        engine="sglang",
    ),
    # ------------------------------------------------- the engine cannot start at all
    SignalRule(
        "nccl_error",
        ("nccl",),
        (r"NCCL error", r"\bnccl(?:System|Internal|UnhandledCuda|Remote|InvalidUsage)Error\b", r"ncclCommInitRank failed"),
    ),
    SignalRule(
        "shm_exhausted",
        ("/dev/shm", "shared memory segment", "ncclshmopen"),
        (
            r"/dev/shm",
            r"Error while (?:creating|attaching to) shared memory segment",
            r"ncclShmOpen",
        ),
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
    ),
    SignalRule(
        "tp_indivisible",
        ("divisible",),
        (
            r"must be divisible by tensor parallel size",
            r"divisible by (?:the )?pipeline parallel size",
            r"GPUs per node is not divisible by the number of tensor parallelism",
        ),
    ),
    SignalRule(
        "gpus_insufficient",
        ("available gpus",),
        (
            r"required GPUs exceeds the total number of available GPUs",
            r"exceeds available GPUs",
            r"(?:larger|greater) than the number of available GPUs",
        ),
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
    ),
    # ----------------------------------------------------------------- any engine
    SignalRule(
        "context_length_exceeded",
        ("context length", "max_new_tokens must be"),
        (
            r"maximum context length is \d",
            r"inputs tokens \+ max_new_tokens must be <=",
            r"is longer than the model's context length",
        ),
    ),
    SignalRule("probe_killed", ("keyboardinterrupt",), (r"KeyboardInterrupt: terminated",)),
    SignalRule(
        "oom_killed",
        ("oomkilled", "out of memory: kill", "oom-kill"),
        (r"\bOOMKilled\b", r"Out of memory: Kill(?:ed)? process", r"\boom-kill\b"),
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
