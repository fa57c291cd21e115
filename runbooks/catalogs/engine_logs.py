"""Every start-up line gpumem reads a memory figure from, by engine version, as the engines print it.

One entry per printed line and figure: the engine, a literal piece of the engine's own format
string (`needle`: the cheap test before the pattern, and what to search the source for), the
pattern that reads the figures, which `StartupMemory` field each group fills, the first and last
version that print it and where the format string is (file:line at the first and the newest
version read). `collectors.parsers.log_startup` builds its reader from this table and nothing
else; `tests/test_engine_logs.py` holds the two together and checks each entry against the lines
rendered from the engines' format strings in `tests/data/engine_lines/lines.yaml`.

Versions read are those of `runbooks.catalogs.engine_metrics` (PyPI source distributions of vLLM
and SGLang, every TGI release tag), plus vLLM 0.6.0, 0.6.4-0.6.6, 0.8.0, 0.10.0-0.10.1, 0.11.1-0.11.2,
0.14.0-0.14.1, 0.17.0-0.27.1, 0.29.0-0.32.0 and SGLang 0.4.6-0.4.9, 0.5.2-0.5.5. The same rules as
there: a "since" of the oldest version read means "at least since then", a first version between
two read releases is the newer of the two, and `until` None means the newest version read (vLLM
0.33.0, SGLang 0.5.23, TGI 3.3.7) still prints it.

A `torch` entry is PyTorch's own message (any engine), not an engine's: its versions are torch's.
"GB" in vLLM and SGLang logs is 2^30 bytes, as is GiB.
"""

from __future__ import annotations

from dataclasses import dataclass

from runbooks.catalogs.versions import Version, within

#: a decimal figure; a figure in GiB (or GB); an integer, maybe with thousands separators
F = r"(\d{1,7}(?:\.\d{1,12})?)"
GIB = F + r"\s*Gi?B"
INT = r"(\d{1,3}(?:,\d{3})+|\d{1,15})"

#: how a group is read: "float", "int" (thousands separators allowed), "bytes_gib" (a byte count, as GiB)
KINDS = ("float", "int", "bytes_gib")


@dataclass(frozen=True)
class LogLine:
    """One printed line (or one figure of it). `fields[i]` is what group i+1 fills: a
    (`StartupMemory` field, kind) pair, or None for a group that is not kept. A line whose figures
    need more than that names a `reader` of `collectors.parsers.log_startup` instead."""

    id: str
    engine: str
    needle: str
    pattern: str
    since: Version | None
    until: Version | None
    source: str
    fields: tuple[tuple[str, str] | None, ...] = ()
    reader: str = ""
    note: str = ""

    def printed_by(self, version: Version) -> bool:
        """Whether `version` prints this line (as far as the versions read say)."""
        if self.since is None:
            return True
        return within(version, self.since, self.until)


def _l(id: str, engine: str, needle: str, pattern: str, since: Version | None, until: Version | None,
       source: str, *fields: tuple[str, str] | None, reader: str = "", note: str = "") -> LogLine:
    return LogLine(id, engine, needle, pattern, since, until, source, tuple(fields), reader, note)


_W0 = "vllm/worker/worker.py"
_W1 = "vllm/v1/worker/gpu_worker.py"
_MR1 = "vllm/v1/worker/gpu_model_runner.py"
_KV1 = "vllm/v1/core/kv_cache_utils.py"
_SMR = "sglang/srt/model_executor/model_runner.py"
_SMP = "sglang/srt/mem_cache/memory_pool.py"

STARTUP_LINES: tuple[LogLine, ...] = (
    # ---------------------------------------------------------------------------- vLLM V0
    _l("vllm.profiling_results", "vllm", "Memory profiling results", r"Memory profiling results:",
       (0, 6, 4), (0, 6, 4), f"{_W0}:233@0.6.4", reader="profiling_results",
       note="one line of key=value pairs: total_gpu_memory, initial_memory_usage, non_torch_memory, "
            "kv_cache_size, gpu_memory_utilization"),
    _l("vllm.total_x_utilization", "vllm", "total_gpu_memory (",
       r"total_gpu_memory \(" + GIB + r"\) x gpu_memory_utilization \(" + F + r"\)",
       (0, 6, 5), (0, 10, 2), f"{_W0}:229@0.6.5, :278@0.10.2",
       ("total_gpu_gib", "float"), ("gpu_memory_utilization", "float")),
    _l("vllm.weights_take", "vllm", "model weights take", r"model weights take " + GIB,
       (0, 6, 5), (0, 10, 2), f"{_W0}:232@0.6.5, :281@0.10.2", ("weights_gib", "float")),
    _l("vllm.non_torch_takes", "vllm", "non_torch_memory takes", r"non_torch_memory takes " + GIB,
       (0, 6, 5), (0, 10, 2), f"{_W0}:234@0.6.5, :283@0.10.2", ("non_torch_gib", "float")),
    _l("vllm.activation_takes", "vllm", "activation peak memory takes", r"activation peak memory takes " + GIB,
       (0, 6, 5), (0, 10, 2), f"{_W0}:236@0.6.5, :285@0.10.2", ("activation_gib", "float")),
    _l("vllm.kv_reserved", "vllm", "reserved for KV Cache is", r"reserved for KV Cache is " + GIB,
       (0, 6, 5), (0, 10, 2), f"{_W0}:238@0.6.5, :287@0.10.2", ("kv_cache_gib", "float")),
    _l("vllm.loading_weights_took", "vllm", "Loading model weights took", r"Loading model weights took " + GIB,
       (0, 4, 1), (0, 9, 2), "vllm/worker/model_runner.py:173@0.4.1, :1115@0.7.3; "
       "vllm/worker/xpu_model_runner.py:415@0.9.2", ("weights_gib", "float"),
       note="on CUDA to 0.7.3 (then \"Model loading took\"); on XPU to 0.9.2"),
    _l("vllm.gpu_blocks", "vllm", " blocks: ",
       r"# (?:GPU|gpu|cuda|CUDA|rocm|ROCm|xpu|XPU|npu|NPU) blocks: " + INT,
       (0, 2, 7), (0, 11, 0), "vllm/engine/llm_engine.py:275@0.2.7; vllm/executor/executor_base.py:116@0.11.0",
       ("gpu_blocks", "int"), note="\"# GPU blocks\" to 0.7.3, the device's name (\"# cuda blocks\") by 0.8.5; V1 prints the cache in tokens"),
    _l("vllm.max_seq_len_above_kv", "vllm", "can be stored in KV cache",
       r"max seq len \(" + INT + r"\) is larger than the maximum number of tokens that can be stored in "
       r"KV cache \(" + INT + r"\)",
       (0, 2, 7), (0, 10, 2), "vllm/engine/llm_engine.py:286@0.2.7; vllm/worker/worker.py:667@0.10.2",
       ("max_model_len", "int"), ("kv_cache_tokens", "int"), note="a start-up refusal"),
    # ---------------------------------------------------------------------------- vLLM V1 (and both)
    _l("vllm.model_loading_took", "vllm", "Model loading took", r"Model loading took " + GIB,
       (0, 8, 0), None, f"{_MR1}:1140@0.8.0, :5089@0.33.0", ("weights_gib", "float"),
       note="\"GB\" in 0.8.0, \"GiB\" by 0.8.5"),
    _l("vllm.max_concurrency", "vllm", "Maximum concurrency for",
       r"Maximum concurrency for " + INT + r" tokens(?: per request)?: " + F + r"\s*x",
       (0, 6, 3), None, f"vllm/executor/distributed_gpu_executor.py:61@0.6.3; {_KV1}:1149@0.33.0",
       ("max_model_len", "int"), ("max_concurrency", "float")),
    _l("vllm.graph_took", "vllm", "Graph capturing finished", r"Graph capturing finished .*?took " + GIB,
       (0, 6, 4), None, f"vllm/worker/model_runner.py:1518@0.6.4; {_MR1}:6517@0.33.0",
       ("cudagraph_gib", "float"), note="before 0.6.4 the line has no memory figure"),
    _l("vllm.kv_cache_tokens", "vllm", "KV cache size:", r"KV cache size: " + INT + r" tokens",
       (0, 8, 0), None, f"{_KV1}:537@0.8.0, :1148@0.33.0", ("kv_cache_tokens", "int")),
    _l("vllm.kv_needed_above_available", "vllm", "KV cache is needed",
       r"max seq len \(" + INT + r"\),? \(?" + GIB + r" KV cache is needed, which is larger than the "
       r"available KV cache memory \(" + GIB,
       (0, 7, 3), None, f"{_KV1}:466@0.7.3; vllm/v1/core/kv_cache_planning.py:78@0.33.0",
       ("max_model_len", "int"), None, ("kv_cache_gib", "float"), note="a start-up refusal"),
    _l("vllm.sampler_warmup_oom", "vllm", "warming up sampler", r"warming up sampler with " + INT + r"\b",
       (0, 8, 0), None, f"{_MR1}:1313@0.8.0, :5930@0.33.0", ("max_num_seqs", "int"),
       note="the OOM while warming up the sampler names max_num_seqs; not in 0.34.0's source"),
    _l("vllm.estimated_max_model_len", "vllm", "estimated maximum model length",
       r"estimated maximum model length is " + INT,
       (0, 9, 1), None, f"{_KV1}:570@0.9.1; vllm/v1/core/kv_cache_planning.py:74@0.33.0",
       ("estimated_max_model_len", "int"),
       note="0.8.5 and 0.9.0 build the sentence but drop it (a bare f-string statement, kv_cache_utils.py:543@0.8.5): "
            "they print only \"Based on the available memory,\""),
    _l("vllm.non_default_args", "vllm", "non-default args", r"'max_model_len': " + INT,
       (0, 9, 0), None, "vllm/entrypoints/openai/cli_args.py:300@0.9.0; vllm/entrypoints/common/startup.py:96@0.33.0",
       ("max_model_len", "int")),
    _l("vllm.config_max_seq_len", "vllm", "max_seq_len=", r"\bmax_seq_len=" + INT,
       (0, 2, 7), None, "vllm/engine/llm_engine.py:79@0.2.7; vllm/config/vllm.py:2820@0.33.0",
       ("max_model_len", "int"), note="the engine's config line (\"Initializing ... LLM engine ... with config\")"),
    _l("vllm.available_kv", "vllm", "Available KV cache memory", r"Available KV cache memory: " + GIB,
       (0, 9, 1), None, f"{_W1}:227@0.9.1, :773@0.33.0", ("kv_cache_gib", "float")),
    _l("vllm.free_on_device", "vllm", "Free memory on device",
       r"Free memory on device (?:\S+ )?\(" + F + r"\s*/\s*" + GIB + r"\)",
       (0, 9, 1), None, f"{_W1}:141@0.9.1, :1045@0.33.0; vllm/v1/worker/utils.py:742@0.33.0",
       ("free_at_start_gib", "float"), ("total_gpu_gib", "float"),
       note="the pre-flight refusal, and from 0.10.2 the start-up summary"),
    _l("vllm.desired_utilization", "vllm", "GPU memory utilization",
       r"(?:Desired|desired) GPU memory utilization (?:is )?\(" + F + r", ",
       (0, 9, 1), None, f"{_W1}:144@0.9.1; vllm/v1/worker/utils.py:766@0.33.0", ("gpu_memory_utilization", "float")),
    _l("vllm.summary_weights", "vllm", "GiB for weight", GIB + r" for weight",
       (0, 10, 2), (0, 26, 0), f"{_W1}:380@0.10.2, :843@0.26.0", ("weights_gib", "float"),
       note="from 0.27 weights and non-torch memory are one figure (vllm.summary_consumed)"),
    _l("vllm.summary_activation", "vllm", "for peak activation", GIB + r" for peak activation",
       (0, 10, 2), None, f"{_W1}:381@0.10.2, :1054@0.33.0", ("activation_gib", "float")),
    _l("vllm.summary_non_torch", "vllm", "for non-torch memory", GIB + r" for non-torch memory",
       (0, 10, 2), (0, 26, 0), f"{_W1}:382@0.10.2, :845@0.26.0", ("non_torch_gib", "float")),
    _l("vllm.summary_cudagraph", "vllm", "for CUDAGraph memory", GIB + r" for CUDAGraph memory",
       (0, 10, 2), None, f"{_W1}:383@0.10.2, :1055@0.33.0", ("cudagraph_gib", "float")),
    _l("vllm.kv_in_use_gib", "vllm", "kv cache memory in use is", r"[Kk][Vv] cache memory in use is " + GIB,
       (0, 11, 0), None, f"{_W1}:390@0.11.0, :1062@0.33.0", ("kv_cache_gib", "float")),
    _l("vllm.kv_in_use_bytes", "vllm", "kv cache memory in use is",
       r"[Kk][Vv] cache memory in use is " + INT + r" bytes",
       (0, 10, 2), (0, 10, 2), f"{_W1}:388@0.10.2", ("kv_cache_gib", "bytes_gib"), note="in bytes in 0.10.2 only"),
    _l("vllm.summary_consumed", "vllm", "GiB for consumed memory", GIB + r" for consumed memory",
       (0, 27, 1), None, f"{_W1}:775@0.27.1, :1052@0.33.0", ("consumed_gib", "float"),
       note="weights and non-torch memory as one figure"),
    _l("vllm.estimated_graph", "vllm", "Estimated CUDA graph memory", r"Estimated CUDA graph memory: " + GIB + r" total",
       (0, 18, 0), None, f"{_MR1}:5687@0.18.0, :6410@0.33.0", ("cudagraph_gib", "float"),
       note="printed before capture; the capture's own figure, when printed, replaces it; not in "
            "0.34.0's source"),
    _l("vllm.budget_after_external", "vllm", "excluding external process",
       r"excluding external process's weights \(" + F + r", ",
       (0, 32, 0), None, "vllm/v1/worker/utils.py:745@0.32.0, :745@0.33.0", ("gpu_memory_utilization", "float"),
       note="the pre-flight refusal with weights held by another process; it names the budget it wanted"),
    # ---------------------------------------------------------------------------- SGLang
    _l("sglang.load_weight_mem", "sglang", "Load weight end", r"Load weight end\..*?mem usage=" + GIB,
       (0, 4, 5), None, f"{_SMR}:441@0.4.5, :1373@0.5.23", ("weights_gib", "float")),
    _l("sglang.load_weight_avail", "sglang", "Load weight end", r"Load weight end\..*?avail mem=" + GIB,
       (0, 3, 0), None, f"{_SMR}:223@0.3.0, :1373@0.5.23", ("available_after_load_gib", "float")),
    _l("sglang.kv_allocated_tokens", "sglang", "KV Cache is allocated", r"#tokens: " + INT,
       (0, 4, 5), None, f"{_SMP}:241@0.4.5, :2088@0.5.23", ("kv_cache_tokens", "int"),
       note="from 0.5.22 the pool of a post-capture sizing prints \"VA upper bound\" here instead: not read"),
    _l("sglang.kv_allocated_k_v", "sglang", "KV Cache is allocated", r"K size: " + GIB + r",\s*V size: " + GIB,
       (0, 4, 5), None, f"{_SMP}:241@0.4.5, :2088@0.5.23", reader="kv_sum",
       note="the pool's K and V sizes; the KV cache is their sum"),
    _l("sglang.kv_allocated_mla", "sglang", "KV Cache is allocated", r"\bKV size: " + GIB,
       (0, 4, 6), None, f"{_SMP}:521@0.4.6, :2097@0.5.23",
       ("kv_cache_gib", "float"), note="MLA pools print one size"),
    _l("sglang.post_capture_kv", "sglang", "Post-capture KV sizing: KV cache allocated",
       r"Post-capture KV sizing: KV cache allocated\..*?#tokens: " + INT + r",\s*KV size: " + GIB,
       (0, 5, 22), None, "sglang/srt/model_executor/model_runner_components/kv_pool_runtime.py:195@0.5.22, :195@0.5.23",
       ("kv_cache_tokens", "int"), ("kv_cache_gib", "float"),
       note="the pool sized after the graphs are captured (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING, off by default)"),
    _l("sglang.max_total_num_tokens", "sglang", "max_total_num_tokens=", r"max_total_num_tokens=" + INT,
       (0, 3, 0), None, "sglang/srt/managers/tp_worker.py:149@0.3.0; sglang/srt/managers/scheduler.py:1269@0.5.23",
       ("kv_cache_tokens", "int")),
    _l("sglang.context_len", "sglang", "max_total_num_tokens=", r"\bcontext_len=" + INT,
       (0, 3, 0), None, "sglang/srt/managers/tp_worker.py:152@0.3.0; sglang/srt/managers/scheduler.py:1273@0.5.23",
       ("max_model_len", "int"),
       note="on the max_total_num_tokens line"),
    _l("sglang.graph_end", "sglang", "Capture cuda graph end", r"Capture cuda graph end\..*?mem usage=" + GIB,
       (0, 4, 5), (0, 5, 10), f"{_SMR}:937@0.4.5, :2460@0.5.10", ("cudagraph_gib", "float"),
       note="from 0.4.0 without a memory figure, with one from 0.4.5; from 0.5.15 one line per phase"),
    _l("sglang.phase_graph_end", "sglang", "CUDA graph end",
       r"Capture (\w+) (\w+) CUDA graph end\..*?mem usage=" + F + r" GB",
       (0, 5, 15), None, f"{_SMR}:2693,2858@0.5.15; "
       "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py:696,788@0.5.23", reader="graph_part",
       note="each phase's graphs apart (\"target decode\", then \"target prefill\"): their sum"),
    _l("sglang.pool_below_context", "sglang", "fewer than --context-length",
       r"KV pool holds " + INT + r" tokens, fewer than --context-length " + INT,
       (0, 5, 23), None, "sglang/srt/managers/tp_worker.py:560@0.5.23",
       ("kv_cache_tokens", "int"), ("max_model_len", "int")),
    # ---------------------------------------------------------------------------- TGI
    _l("tgi.kv_cache_blocks", "tgi", "KV-cache blocks:", r"KV-cache blocks: " + INT + r", size: " + INT,
       (2, 4, 0), None, "server/text_generation_server/models/flash_causal_lm.py:1542@v2.4.0; "
       "backends/gaudi/server/text_generation_server/models/flash_causal_lm.py:1711@v3.3.7", reader="tgi_blocks",
       note="the shard's blocks; the router's total tokens line is the authority"),
    _l("tgi.max_batch_total_tokens", "tgi", "max batch total tokens",
       r"(?:Setting max batch total tokens to|Inferred max batch total tokens:) " + INT,
       (0, 9, 4), None, "router/src/main.rs:233,239@v0.9.4; backends/v2/src/lib.rs:62,100@v3.3.7",
       ("kv_cache_tokens", "int")),
    # ---------------------------------------------------------------------------- PyTorch
    # the card's capacity as torch's OOM prints it (runbooks.catalogs.torch_oom): "GPU 0 has a
    # total capacity of X" from 2.2, "total capacty" (sic) in 2.1.x, "(GPU 0; X total capacity;" to 2.0
    _l("torch.total_capacity", "torch", "total capac",
       r"GPU \d+ has a total capac(?:i)?ty of " + GIB + r"|GPU \d+; " + GIB + r" total capacity",
       None, None, "c10/cuda/CUDACachingAllocator.cpp (torch's OutOfMemoryError message; 2.1.x spells it "
       "\"capacty\"; the second form to 2.0)",
       reader="first_of:total_gpu_gib", note="a figure from an engine's start-up line wins over it"),
)

ENGINES = ("vllm", "sglang", "tgi", "torch")

