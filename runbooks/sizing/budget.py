"""The capacity budget: where one GPU's memory goes under vLLM's, SGLang's or TGI's own
start-up arithmetic, what KV capacity is left, and whether the engine starts at all.

>>> from runbooks.catalogs.models import find_model
>>> b = compute_budget(find_model("Qwen/Qwen2.5-7B-Instruct"),
...                    BudgetInputs(engine="vllm", gpu_total_gib=23.57, engine_version="0.6.6",
...                                 max_model_len=8192, max_num_seqs=16))
>>> b.fits, round(b.weights_gib, 1)
(True, 14.2)

Engine specifics live in `budget_vllm`, `budget_sglang`, `budget_tgi`; shared arithmetic in
`kv` (bytes per token), `weights` (bytes per GPU), `activation` (profiling peaks, non-torch
memory, CUDA graphs) and `engine_defaults` (versions and defaults).
"""

from __future__ import annotations

from runbooks.catalogs.engine_defaults import TGI_WIGGLE_ROOM_ENV_FROM, parse_version
from runbooks.catalogs.gpus import GpuSpec
from runbooks.model.budget import FAILURE_IDS, Budget, BudgetInputs
from runbooks.model.evidence import ModelSpec, ServerConfig
from runbooks.model.units import GIB
from runbooks.sizing.kv import kv_bytes_per_token
from runbooks.sizing.sglang import compute_sglang
from runbooks.sizing.tgi import compute_tgi, tgi_prefill_chunking
from runbooks.sizing.vllm import compute_vllm
from runbooks.sizing.weights import weights_bytes

__all__ = [
    "FAILURE_IDS",
    "GIB",
    "Budget",
    "BudgetInputs",
    "budget_from_config",
    "compute_budget",
    "kv_bytes_per_token",
    "weights_bytes",
]

_ENGINES = {"vllm": compute_vllm, "sglang": compute_sglang, "tgi": compute_tgi}


def compute_budget(model: ModelSpec, inputs: BudgetInputs) -> Budget:
    """The budget of `model` launched as `inputs` says; raises ValueError for an unknown engine."""
    engine = (inputs.engine or "").lower()
    if engine not in _ENGINES:
        raise ValueError(f"unknown engine {inputs.engine!r}; expected one of {', '.join(_ENGINES)}")
    if inputs.gpu_total_gib <= 0:
        raise ValueError(f"gpu_total_gib must be positive, got {inputs.gpu_total_gib}")
    return _ENGINES[engine](model, inputs)


def budget_from_config(config: ServerConfig, model: ModelSpec, gpu_total_gib: float, gpu_name: str | None = None,
                       other_process_gib: float = 0.0) -> Budget:
    """The budget of a parsed server launch (`ServerConfig`) on a GPU of `gpu_total_gib`."""
    return compute_budget(model, inputs_from_config(config, gpu_total_gib, gpu_name, other_process_gib))


def inputs_from_config(config: ServerConfig, gpu_total_gib: float, gpu_name: str | None = None,
                       other_process_gib: float = 0.0) -> BudgetInputs:
    """BudgetInputs from the engine-independent names of a ServerConfig."""
    engine = (config.engine or "vllm").lower()
    fraction, kind = config.memory_fraction, config.memory_fraction_kind
    util = mfs = cmf = None
    if fraction is not None:
        if kind == "free_static" or (kind is None and engine == "sglang"):
            mfs = fraction
        elif kind == "process" or (kind is None and engine == "tgi"):
            cmf = fraction
        else:
            util = fraction
    flags = {k.lower().lstrip("-"): v for k, v in (config.flags or {}).items()}
    enforce_eager = config.enforce_eager
    if enforce_eager is None and _truthy(flags.get("disable-cuda-graph")):
        enforce_eager = True
    env = {k.upper(): v for k, v in (getattr(config, "env", None) or {}).items()}
    use_v1 = _flag_bool(env.get("VLLM_USE_V1") or flags.get("vllm_use_v1") or flags.get("vllm-use-v1"))
    enable_lora = engine == "vllm" and ("enable-lora" in flags and _truthy(flags.get("enable-lora")))
    batched = config.max_num_batched_tokens
    if batched is None and engine == "sglang":
        batched = _flag_int(flags.get("chunked-prefill-size"))
    return BudgetInputs(
        engine=engine, gpu_total_gib=gpu_total_gib, engine_version=config.engine_version,
        tp=config.tensor_parallel_size or 1, pp=config.pipeline_parallel_size or 1, dtype=config.dtype,
        quantization=config.quantization, kv_cache_dtype=config.kv_cache_dtype,
        max_model_len=config.max_model_len if engine != "tgi" else None,
        max_num_seqs=config.max_num_seqs, max_num_batched_tokens=batched,
        gpu_memory_utilization=util, mem_fraction_static=mfs, cuda_memory_fraction=cmf,
        enforce_eager=enforce_eager, block_size=config.block_size, other_process_gib=other_process_gib,
        gpu_name=gpu_name, max_batch_prefill_tokens=config.max_batch_prefill_tokens, use_v1=use_v1,
        kv_cache_memory_gib=(config.kv_cache_memory_bytes / GIB) if config.kv_cache_memory_bytes else None,
        cpu_offload_gib=config.cpu_offload_gb or 0.0, enable_chunked_prefill=config.enable_chunked_prefill,
        max_input_tokens=config.max_input_tokens,
        max_total_tokens=config.max_model_len if engine == "tgi" else None,
        max_batch_total_tokens=config.max_batch_total_tokens if engine == "tgi" else None,
        tgi_wiggle_room=tgi_wiggle_env(env, config.engine_version) if engine == "tgi" else None,
        tgi_prefill_logprobs=(_truthy(flags.get("enable-prefill-logprobs"))
                              or (env.get("REQUEST_LOGPROBS") or "").strip().lower() in ("1", "true"))
        if engine == "tgi" else None,
        tgi_chunking_off=tgi_chunking_env(env) if engine == "tgi" else None,
        tgi_speculate=max(0, _flag_int(flags.get("speculate")) or 0) if engine == "tgi" else 0,
        enable_lora=enable_lora,
        max_lora_rank=_flag_int(flags.get("max-lora-rank")) if enable_lora else None,
        max_loras=(_flag_int(flags.get("max-loras")) or 1) if enable_lora else 1,
        max_cpu_loras=_flag_int(flags.get("max-cpu-loras")) if enable_lora else None,
    )


def tgi_config_chunks(config: ServerConfig, version: tuple[int, int, int] | None, model: ModelSpec | None,
                      gpu: GpuSpec | None = None) -> bool | None:
    """Whether the TGI this launch runs prefills in chunks: never before 3.0; from 3.0 as the
    model, the card (None: taken as compute capability 8.0 or more), the container's env and
    --speculate decide (`runbooks.sizing.tgi.tgi_prefill_chunking`). None when the version or
    the model is not known."""
    if version is None:
        return None
    if version < (3, 0, 0):
        return False
    if model is None:
        return None
    speculate = max(0, _flag_int(config.flags.get("speculate")) or 0)
    chunked, _ = tgi_prefill_chunking(version, model, gpu, tgi_chunking_env(dict(config.env)), speculate)
    return chunked


def tgi_chunking_env(env: dict[str, str]) -> str | None:
    """What in the container turns TGI 3's prefill chunking off: PREFILL_CHUNKING set to
    anything but 1 or true (globals.py:15@v3.3.4), or ATTENTION=paged (models/model.py:82-90);
    None otherwise.

    >>> tgi_chunking_env({"PREFILL_CHUNKING": "0"}), tgi_chunking_env({"ATTENTION": "paged"}), tgi_chunking_env({})
    ('PREFILL_CHUNKING=0', 'ATTENTION=paged', None)
    """
    raw = env.get("PREFILL_CHUNKING")
    if raw is not None and raw.strip().lower() not in ("1", "true"):
        return f"PREFILL_CHUNKING={raw.strip()[:16]}"
    if (env.get("ATTENTION") or "").strip().lower() == "paged":
        return "ATTENTION=paged"
    return None


def tgi_wiggle_env(env: dict[str, str], version: str | None) -> float | None:
    """TGI_WIGGLE_ROOM where the container sets it to a share TGI takes (it asserts 0 < w < 1,
    globals.py:32@v3.3.7) and the version reads it (2.3.0 on; an unknown version is taken to
    read it, as every TGI since 2.3.0 does).

    >>> tgi_wiggle_env({"TGI_WIGGLE_ROOM": "0.85"}, "3.3.7"), tgi_wiggle_env({"TGI_WIGGLE_ROOM": "0.85"}, "2.0.4")
    (0.85, None)
    >>> tgi_wiggle_env({"TGI_WIGGLE_ROOM": "lots"}, None) is None
    True
    """
    raw = env.get("TGI_WIGGLE_ROOM")
    parsed = parse_version(version)
    if raw is None or (parsed is not None and parsed < TGI_WIGGLE_ROOM_ENV_FROM):
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return value if 0 < value < 1 else None


def _truthy(value: str | None) -> bool:
    # a switch given bare reads "true"; an empty value is no engine's "on" (TGI's launcher
    # refuses it, `runbooks.launch.flag_tables.TGI_ENV_BOOLEANS`)
    return value is not None and value.strip().lower() in ("1", "true", "yes", "on")


def _flag_bool(value: str | None) -> bool | None:
    if value is None:
        return None
    return value.strip().lower() in ("1", "true", "yes", "on")


def _flag_int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
