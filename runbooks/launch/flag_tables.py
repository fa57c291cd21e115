"""What each engine's command line means: canonical flag names, aliases, booleans, env vars.

Canonical names are each engine's own long option without dashes, hyphenated
(`tensor-parallel-size` for vLLM, `tp-size` for SGLang, `num-shard` for TGI). The tables cover
the flags that matter for memory triage plus the boolean flags that must not swallow the
next token (`vllm serve --trust-remote-code MODEL`).
"""

from __future__ import annotations

from runbooks.catalogs.engine_flags import FLAGS as _WRITTEN

# The flags gpumem writes (`runbooks.catalogs.engine_flags`) are the one source of their
# spellings, value kinds and TGI env names: the tables below add them, and list by hand only
# the flags gpumem reads but never writes.


def _written(engine: str, *kinds: str) -> frozenset[str]:
    """Every spelling of the written flags of `kinds` for `engine`."""
    return frozenset(s.flag for e in _WRITTEN.get(engine, {}).values() if e.kind in kinds for s in e.spellings)


def _kind(engine: str, flag: str) -> str:
    """The value kind of a written flag (any spelling), as the engine table records it."""
    entry = next(e for e in _WRITTEN[engine].values() if e.spelling(flag) is not None or e.setting == flag)
    return entry.kind


#: short or alternative spellings → canonical name, per engine
ALIASES: dict[str, dict[str, str]] = {
    "vllm": {
        "tp": "tensor-parallel-size",
        "tp-size": "tensor-parallel-size",
        "pp": "pipeline-parallel-size",
        "pp-size": "pipeline-parallel-size",
        "dp": "data-parallel-size",
        "dp-size": "data-parallel-size",
        "q": "quantization",
        "kv-cache-memory": "kv-cache-memory-bytes",
    },
    "sglang": {
        "model": "model-path",
        "tp": "tp-size",
        "tensor-parallel-size": "tp-size",
        "pp": "pp-size",
        "pipeline-parallel-size": "pp-size",
        "dp": "dp-size",
        "data-parallel-size": "dp-size",
        "ep": "ep-size",
        "expert-parallel-size": "ep-size",
        "q": "quantization",
    },
    "tgi": {},
}

#: flags that take no value (bare = "true"; `--no-X` = "false" where the engine allows it)
BOOLEAN_FLAGS: dict[str, frozenset[str]] = {
    "vllm": frozenset({
        "enable-chunked-prefill", "enable-prefix-caching", "trust-remote-code",
        "disable-log-stats", "disable-log-requests", "enable-log-requests", "enable-log-outputs",
        "disable-uvicorn-access-log", "disable-custom-all-reduce", "enable-lora",
        "enable-auto-tool-choice", "disable-sliding-window", "skip-tokenizer-init",
        "disable-frontend-multiprocessing", "enable-prompt-tokens-details",
        "enable-expert-parallel", "enable-sleep-mode", "use-v2-block-manager",
        "disable-async-output-proc", "enable-reasoning", "enable-server-load-tracking",
        "disable-fastapi-docs", "enable-request-id-headers", "headless", "enable-eplb",
        "async-scheduling", "enable-force-include-usage", "disable-cascade-attn",
        "return-tokens-as-token-ids", "enable-prompt-adapter", "fully-sharded-loras",
        "disable-mm-preprocessor-cache", "multi-step-stream-outputs", "ray-workers-use-nsight",
        "enable-tokenizer-info-endpoint", "disable-chunked-mm-input", "enable-dbo",
        "calculate-kv-scales", "enable-ssl-refresh", "disable-hybrid-kv-cache-manager",
    }) | _written("vllm", "bool"),
    "sglang": frozenset({
        "trust-remote-code", "enable-metrics", "log-requests", "disable-radix-cache",
        "disable-cuda-graph-padding", "enable-torch-compile",
        "enable-dp-attention", "enable-mixed-chunk", "skip-tokenizer-init", "is-embedding",
        "enable-p2p-check", "disable-overlap-schedule", "enable-ep-moe", "enable-deepep-moe",
        "skip-server-warmup", "disable-custom-all-reduce", "enable-nccl-nvls", "enable-lora",
        "disable-outlines-disk-cache", "enable-cache-report", "enable-hierarchical-cache",
        "show-time-cost", "disable-chunked-prefix-cache", "enable-double-sparsity",
        "enable-memory-saver", "allow-auto-truncate", "enable-custom-logit-processor",
        "enable-two-batch-overlap", "enable-multimodal", "disable-shared-experts-fusion",
        "enable-mscclpp", "enable-flashinfer-mla", "enable-deterministic-inference",
        "delete-ckpt-after-loading", "enable-dp-lm-head", "enable-metrics-for-all-schedulers",
        "disable-fast-image-processor", "enable-tokenizer-batch-encode", "enable-priority-scheduling",
    }) | _written("sglang", "bool"),
    "tgi": frozenset({
        "trust-remote-code", "disable-custom-kernels", "json-output", "disable-grammar-support",
        "enable-prefill-logprobs", "disable-crash-reports",
    }) | _written("tgi", "bool"),
}

#: flags that take one or more values (`--served-model-name a b`)
MULTI_VALUE_FLAGS: frozenset[str] = frozenset({"served-model-name", "lora-modules", "middleware"})

#: the rest of the flags each engine knows well enough to resolve abbreviations against
VALUE_FLAGS: dict[str, frozenset[str]] = {
    "vllm": frozenset({
        "model", "served-model-name", "max-num-batched-tokens", "data-parallel-size",
        "data-parallel-size-local", "dtype", "quantization", "kv-cache-dtype", "block-size",
        "kv-cache-memory-bytes", "cpu-offload-gb", "swap-space", "host", "port", "tokenizer", "revision",
        "max-loras", "max-lora-rank", "seed", "api-key", "chat-template", "tool-call-parser",
        "reasoning-parser", "download-dir", "load-format", "max-logprobs", "override-generation-config",
        "compilation-config", "speculative-config", "limit-mm-per-prompt", "uvicorn-log-level",
        "api-server-count", "distributed-executor-backend", "show-hidden-metrics-for-version",
        "num-gpu-blocks-override", "max-seq-len-to-capture", "scheduling-policy", "hf-overrides",
        "lora-modules", "max-parallel-loading-workers", "generation-config", "max-num-partial-prefills",
        "long-prefill-token-threshold", "config",
    }) | _written("vllm", "int", "float", "int_list"),
    "sglang": frozenset({
        "model-path", "tokenizer-path", "served-model-name", "max-total-tokens", "max-queued-requests",
        "chunked-prefill-size", "max-prefill-tokens", "dp-size", "ep-size", "quantization", "kv-cache-dtype",
        "dtype", "page-size", "schedule-conservativeness", "schedule-policy", "host", "port", "log-level",
        "log-requests-level", "decode-log-interval", "watchdog-timeout", "cuda-graph-max-bs",
        "attention-backend", "nnodes", "node-rank", "dist-init-addr", "random-seed", "api-key", "chat-template",
        "tool-call-parser", "reasoning-parser", "load-format", "revision", "max-lora-rank",
    }) | _written("sglang", "int", "float", "int_list"),
    "tgi": frozenset({
        "model-id", "revision", "served-model-name", "sharded", "quantize", "dtype", "kv-cache-dtype",
        "max-concurrent-requests", "max-waiting-tokens", "waiting-served-ratio", "hostname", "port",
        "prometheus-port", "max-best-of", "max-stop-sequences", "max-top-n-tokens", "max-client-batch-size",
        "speculate", "rope-scaling", "rope-factor", "payload-limit", "usage-stats", "otlp-endpoint",
    }) | _written("tgi", "int", "float", "int_list"),
}

#: TGI env vars read as flags (every TGI flag has one; these govern memory or addressing).
#: HOSTNAME is here because TGI reads it, though Kubernetes sets it to the pod name.
TGI_ENV_FLAGS: dict[str, str] = {
    **{s.env: s.flag for e in _WRITTEN["tgi"].values() for s in e.spellings if s.env},
    **{env: env.lower().replace("_", "-") for env in (
        "MODEL_ID", "REVISION", "SHARDED", "QUANTIZE", "DTYPE", "KV_CACHE_DTYPE", "MAX_CONCURRENT_REQUESTS",
        "MAX_WAITING_TOKENS", "PORT", "HOSTNAME", "SPECULATE", "ROPE_SCALING", "ROPE_FACTOR",
    )},
}

#: environment variables worth keeping beside the flags (never secrets)
ENV_HINTS: frozenset[str] = frozenset({
    "VLLM_USE_V1", "VLLM_ATTENTION_BACKEND", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_PORT",
    "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "SGLANG_ENABLE_TORCH_COMPILE",
})

# (flag, ServerConfig field, value kind) per engine. Kinds: int, float, str, bool, and
# first (the first word of a multi-value flag); a written flag's kind is the engine table's.
FIELD_MAP: dict[str, tuple[tuple[str, str, str], ...]] = {
    "vllm": (
        ("served-model-name", "served_model_name", "first"),
        ("max-model-len", "max_model_len", _kind("vllm", "max-model-len")),
        ("max-num-seqs", "max_num_seqs", _kind("vllm", "max-num-seqs")),
        ("max-num-batched-tokens", "max_num_batched_tokens", "int"),
        ("gpu-memory-utilization", "memory_fraction", _kind("vllm", "gpu-memory-utilization")),
        ("tensor-parallel-size", "tensor_parallel_size", _kind("vllm", "tensor-parallel-size")),
        ("pipeline-parallel-size", "pipeline_parallel_size", _kind("vllm", "pipeline-parallel-size")),
        ("data-parallel-size", "data_parallel_size", "int"),
        ("dtype", "dtype", "str"),
        ("quantization", "quantization", "str"),
        ("kv-cache-dtype", "kv_cache_dtype", "str"),
        ("block-size", "block_size", "int"),
        ("enforce-eager", "enforce_eager", _kind("vllm", "enforce-eager")),
        ("enable-chunked-prefill", "enable_chunked_prefill", "bool"),
        ("enable-prefix-caching", "enable_prefix_caching", "bool"),
        ("kv-cache-memory-bytes", "kv_cache_memory_bytes", "int"),
        ("cpu-offload-gb", "cpu_offload_gb", "float"),
        ("host", "host", "str"),
        ("port", "port", "int"),
    ),
    "sglang": (
        ("served-model-name", "served_model_name", "first"),
        ("context-length", "max_model_len", _kind("sglang", "context-length")),
        ("max-running-requests", "max_num_seqs", _kind("sglang", "max-running-requests")),
        ("chunked-prefill-size", "max_num_batched_tokens", "int"),
        ("max-total-tokens", "max_batch_total_tokens", "int"),
        ("max-prefill-tokens", "max_batch_prefill_tokens", "int"),
        ("mem-fraction-static", "memory_fraction", _kind("sglang", "mem-fraction-static")),
        ("tp-size", "tensor_parallel_size", _kind("sglang", "tp-size")),
        ("pp-size", "pipeline_parallel_size", _kind("sglang", "pp-size")),
        ("dp-size", "data_parallel_size", "int"),
        ("dtype", "dtype", "str"),
        ("quantization", "quantization", "str"),
        ("kv-cache-dtype", "kv_cache_dtype", "str"),
        ("page-size", "block_size", "int"),
        ("host", "host", "str"),
        ("port", "port", "int"),
    ),
    "tgi": (
        ("served-model-name", "served_model_name", "first"),
        ("max-total-tokens", "max_model_len", _kind("tgi", "max-total-tokens")),
        # every spelling of TGI's prompt limit (--max-input-length before 2.0, both from 2.0)
        *((sp.flag, "max_input_tokens", _kind("tgi", sp.flag)) for sp in _WRITTEN["tgi"]["max-input-tokens"].spellings),
        ("max-batch-size", "max_num_seqs", _kind("tgi", "max-batch-size")),
        ("max-concurrent-requests", "max_concurrent_requests", "int"),
        ("max-batch-prefill-tokens", "max_batch_prefill_tokens", _kind("tgi", "max-batch-prefill-tokens")),
        ("max-batch-total-tokens", "max_batch_total_tokens", _kind("tgi", "max-batch-total-tokens")),
        ("num-shard", "tensor_parallel_size", _kind("tgi", "num-shard")),
        ("dtype", "dtype", "str"),
        ("quantize", "quantization", "str"),
        ("kv-cache-dtype", "kv_cache_dtype", "str"),
        ("cuda-memory-fraction", "memory_fraction", _kind("tgi", "cuda-memory-fraction")),
        ("hostname", "host", "str"),
        ("port", "port", "int"),
    ),
}

#: the flag that names the model, per engine (vLLM also takes it positionally)
MODEL_FLAG = {"vllm": "model", "sglang": "model-path", "tgi": "model-id"}

#: what ServerConfig.memory_fraction means for each engine
MEMORY_FRACTION_KIND = {"vllm": "total", "sglang": "free_static", "tgi": "process"}


def known_flags(engine: str) -> frozenset[str]:
    return VALUE_FLAGS.get(engine, frozenset()) | BOOLEAN_FLAGS.get(engine, frozenset())
