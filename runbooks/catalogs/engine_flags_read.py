"""The flags gpumem reads from a launch command but whose writing no action or plan decides,
per engine: where each engine declares them, since and until which version, the value kind,
the ServerConfig field each fills, the value range a plan may set (`gpumem plan --set`), the
TGI env var and the other names each is read under. The flags actions write are in
`runbooks.catalogs.engine_flags` (`FLAGS`); `all_entries` is both, the one list the launch
grammar (`runbooks.launch.flag_tables`) and the value ranges
(`runbooks.remediation.value_ranges`) read.

Where each line came from: the flag's declaration at the oldest and newest release read that
has it, as file:line@version:

- vLLM 0.4.3, 0.8.5, 0.10.2, 0.20.0, 0.33.0 (PyPI wheels): the `"--flag"` argument in
  `vllm/engine/arg_utils.py` or `vllm/entrypoints/{openai,common}/cli_args.py`, else the
  frontend dataclass field the flag is made from.
- SGLang 0.3.0, 0.4.1, 0.4.5, 0.4.8-0.4.10, 0.5.1, 0.5.2, 0.5.5, 0.5.9, 0.5.13, 0.5.17, 0.5.21,
  0.5.22, 0.5.23 (PyPI wheels): the `"--flag"` argument in `sglang/srt/server_args.py`; from
  0.5.22 the field in `sglang/srt/arg_groups/fields/*.py` or `arg_groups/arg_utils.py` (the
  flag is the field name hyphenated; `Arg(aliases=[...])` its other names).
- TGI: every release tag v0.9.0-v3.3.7, the field of the launcher's clap `Args`
  (`launcher/src/main.rs`); `env` where its `#[clap(...)]` says so (the env var is the field
  name upper-cased).

"since" is the oldest release read that has the flag (at least since then); "until" the
newest that has it where the newest read has it no more. A kind of "value" is a flag that
takes a value whose type gpumem does not read; "bool_value" one that takes `true` or `false` as its
value (TGI's `--sharded`, an `Option<bool>`: clap reads it with the same parser as a switch's env
var, `runbooks.launch.flag_tables.TGI_ENV_BOOLEANS`).
"""

from __future__ import annotations

from dataclasses import replace

from runbooks.catalogs.engine_flags import (
    BLOCK,
    COUNT,
    FLAGS,
    FRACTION,
    LENGTH,
    PARALLEL,
    POOL,
    PORT,
    TOKENS,
    TOKENS_OR_OFF,
    Alias,
    FlagEntry,
    Range,
    Spelling,
    _v,
)

_VA = "vllm/engine/arg_utils.py"
_VCLI_OLD = "vllm/entrypoints/openai/cli_args.py"
_VCLI = "vllm/entrypoints/common/cli_args.py"
_SA = "sglang/srt/server_args.py"
_SF = "sglang/srt/arg_groups/fields"
_SG = "sglang/srt/arg_groups"
_TL = "launcher/src/main.rs"


def _r(flag: str, kind: str, since: str, until: str | None, sources: tuple[str, ...], *, field: str | None = None,
       range: Range | None = None, env: bool = False, aliases: tuple[Alias, ...] = (),
       sets: tuple[str, bool] | None = None) -> FlagEntry:
    spelling = Spelling(flag, _v(since), _v(until) if until else None, sources,
                        env=flag.upper().replace("-", "_") if env else None)
    return FlagEntry("", flag, kind, (spelling,), None, field, range, aliases, sets)


def _table(engine: str, entries: tuple[FlagEntry, ...]) -> dict[str, FlagEntry]:
    return {e.setting: replace(e, engine=engine) for e in entries}


#: why gpumem reads a name the engine does not declare
_ABBREVIATION = "an abbreviation argparse takes while no other flag starts with it (shorter than gpumem resolves)"
_SGLANG_SPELLING = "SGLang's spelling: vLLM rejects it, read so a command mixing them up still shows its layout"

READ_FLAGS: dict[str, dict[str, FlagEntry]] = {
    "vllm": _table("vllm", (
        _r("api-key", "value", "0.4.3", None, (f"{_VCLI_OLD}:54@0.4.3", f"{_VCLI}:335@0.33.0")),
        _r("api-server-count", "value", "0.10.2", None, (f"{_VCLI_OLD}:248@0.10.2", f"{_VCLI}:452@0.33.0")),
        _r("async-scheduling", "bool", "0.10.2", None, (f"{_VA}:888@0.10.2", f"{_VA}:1811@0.33.0")),
        _r("block-size", "int", "0.4.3", None, (f"{_VA}:261@0.4.3", f"{_VA}:1387@0.33.0"),
            field="block_size", range=BLOCK),
        _r("calculate-kv-scales", "bool", "0.8.5", "0.20.0", (f"{_VA}:570@0.8.5", f"{_VA}:1083@0.20.0")),
        _r("chat-template", "value", "0.4.3", None, (f"{_VCLI_OLD}:67@0.4.3", f"{_VCLI}:86@0.33.0")),
        _r("compilation-config", "value", "0.8.5", None, (f"{_VA}:873@0.8.5", f"{_VA}:1891@0.33.0")),
        _r("config", "value", "0.10.2", None, (f"{_VCLI_OLD}:254@0.10.2", f"{_VCLI}:460@0.33.0")),
        _r("cpu-offload-gb", "float", "0.8.5", None, (f"{_VA}:568@0.8.5", f"{_VA}:1470@0.33.0"),
            field="cpu_offload_gb"),
        _r("data-parallel-size", "int", "0.8.5", None, (f"{_VA}:535@0.8.5", f"{_VA}:1241@0.33.0"),
            field="data_parallel_size", range=PARALLEL, aliases=(
                Alias("dp", (f"{_VA}:535@0.8.5", f"{_VA}:1241@0.33.0")),
                Alias("dp-size", (), own=False, why=_SGLANG_SPELLING),
            )),
        _r("data-parallel-size-local", "value", "0.10.2", None, (f"{_VA}:662@0.10.2", f"{_VA}:1259@0.33.0")),
        _r("disable-async-output-proc", "bool", "0.8.5", "0.10.2", (f"{_VA}:812@0.8.5", f"{_VA}:552@0.10.2")),
        _r("disable-cascade-attn", "bool", "0.8.5", None, (f"{_VA}:956@0.8.5", f"{_VA}:1019@0.33.0")),
        _r("disable-chunked-mm-input", "bool", "0.8.5", None, (f"{_VA}:855@0.8.5", f"{_VA}:1792@0.33.0")),
        _r("disable-custom-all-reduce", "bool", "0.4.3", None, (f"{_VA}:363@0.4.3", f"{_VA}:1367@0.33.0")),
        _r("disable-fastapi-docs", "bool", "0.8.5", None, (f"{_VCLI_OLD}:253@0.8.5", f"{_VCLI}:369@0.33.0")),
        _r("disable-frontend-multiprocessing", "bool", "0.8.5", "0.10.2", (f"{_VCLI_OLD}:206@0.8.5", f"{_VCLI_OLD}:133@0.10.2")),
        _r("disable-hybrid-kv-cache-manager", "bool", "0.10.2", None, (f"{_VA}:886@0.10.2", f"{_VA}:1807@0.33.0")),
        _r("disable-log-requests", "bool", "0.4.3", "0.10.2", (f"{_VA}:685@0.4.3", f"{_VA}:1783@0.10.2")),
        _r("disable-log-stats", "bool", "0.4.3", None, (f"{_VA}:324@0.4.3", f"{_VA}:1920@0.33.0")),
        _r("disable-mm-preprocessor-cache", "bool", "0.8.5", "0.10.2", (f"{_VA}:685@0.8.5", f"{_VA}:782@0.10.2")),
        _r("disable-sliding-window", "bool", "0.4.3", None, (f"{_VA}:271@0.4.3", f"{_VA}:1016@0.33.0")),
        _r("disable-uvicorn-access-log", "bool", "0.8.5", None, (f"{_VCLI_OLD}:92@0.8.5", f"{_VCLI}:319@0.33.0")),
        _r("distributed-executor-backend", "value", "0.4.3", None, (f"{_VA}:229@0.4.3", f"{_VA}:1167@0.33.0")),
        _r("download-dir", "value", "0.4.3", None, (f"{_VA}:151@0.4.3", f"{_VA}:1086@0.33.0")),
        _r("dtype", "str", "0.4.3", None, (f"{_VA}:178@0.4.3", f"{_VA}:977@0.33.0"), field="dtype"),
        _r("enable-auto-tool-choice", "bool", "0.8.5", None, (f"{_VCLI_OLD}:216@0.8.5", f"{_VCLI}:123@0.33.0")),
        _r("enable-chunked-prefill", "bool", "0.4.3", None, (f"{_VA}:475@0.4.3", f"{_VA}:1785@0.33.0"),
            field="enable_chunked_prefill"),
        _r("enable-dbo", "bool", "0.20.0", None, (f"{_VA}:1012@0.20.0", f"{_VA}:1320@0.33.0")),
        _r("enable-eplb", "bool", "0.10.2", None, (f"{_VA}:689@0.10.2", f"{_VA}:1352@0.33.0")),
        _r("enable-expert-parallel", "bool", "0.8.5", None, (f"{_VA}:538@0.8.5", f"{_VA}:1305@0.33.0")),
        _r("enable-force-include-usage", "bool", "0.10.2", None, (f"{_VCLI_OLD}:168@0.10.2", f"{_VCLI}:162@0.33.0")),
        _r("enable-log-outputs", "bool", "0.10.2", None, (f"{_VCLI_OLD}:173@0.10.2", f"{_VCLI}:174@0.33.0")),
        _r("enable-log-requests", "bool", "0.10.2", None, (f"{_VA}:1779@0.10.2", f"{_VA}:3260@0.33.0")),
        _r("enable-lora", "bool", "0.4.3", None, (f"{_VA}:387@0.4.3", f"{_VA}:1610@0.33.0")),
        _r("enable-prefix-caching", "bool", "0.4.3", None, (f"{_VA}:268@0.4.3", f"{_VA}:1402@0.33.0"),
            field="enable_prefix_caching"),
        _r("enable-prompt-adapter", "bool", "0.8.5", "0.8.5", (f"{_VA}:725@0.8.5",)),
        _r("enable-prompt-tokens-details", "bool", "0.8.5", None, (f"{_VCLI_OLD}:259@0.8.5", f"{_VCLI}:156@0.33.0")),
        _r("enable-reasoning", "bool", "0.8.5", "0.8.5", (f"{_VA}:948@0.8.5",)),
        _r("enable-request-id-headers", "bool", "0.8.5", None, (f"{_VCLI_OLD}:211@0.8.5", f"{_VCLI}:367@0.33.0")),
        _r("enable-server-load-tracking", "bool", "0.8.5", None, (f"{_VCLI_OLD}:264@0.8.5", f"{_VCLI}:160@0.33.0")),
        _r("enable-sleep-mode", "bool", "0.8.5", None, (f"{_VA}:932@0.8.5", f"{_VA}:1047@0.33.0")),
        _r("enable-ssl-refresh", "bool", "0.8.5", None, (f"{_VCLI_OLD}:171@0.8.5", f"{_VCLI}:352@0.33.0")),
        _r("enable-tokenizer-info-endpoint", "bool", "0.10.2", None, (f"{_VCLI_OLD}:170@0.10.2", f"{_VCLI}:171@0.33.0")),
        _r("fully-sharded-loras", "bool", "0.4.3", None, (f"{_VA}:431@0.4.3", f"{_VA}:1626@0.33.0")),
        _r("generation-config", "value", "0.8.5", None, (f"{_VA}:910@0.8.5", f"{_VA}:1041@0.33.0")),
        _r("headless", "bool", "0.10.2", None, (f"{_VCLI_OLD}:243@0.10.2", f"{_VCLI}:445@0.33.0")),
        _r("hf-overrides", "value", "0.8.5", None, (f"{_VA}:633@0.8.5", f"{_VA}:1035@0.33.0")),
        _r("host", "str", "0.4.3", None, (f"{_VCLI_OLD}:28@0.4.3", f"{_VCLI}:293@0.33.0"), field="host"),
        _r("kv-cache-dtype", "str", "0.4.3", None, (f"{_VA}:193@0.4.3", f"{_VA}:1397@0.33.0"),
            field="kv_cache_dtype"),
        _r("kv-cache-memory-bytes", "int", "0.10.2", None, (f"{_VA}:744@0.10.2", f"{_VA}:1395@0.33.0"),
            field="kv_cache_memory_bytes"),
        _r("limit-mm-per-prompt", "value", "0.8.5", None, (f"{_VA}:673@0.8.5", f"{_VA}:1500@0.33.0")),
        _r("load-format", "value", "0.4.3", None, (f"{_VA}:158@0.4.3", f"{_VA}:1085@0.33.0")),
        _r("long-prefill-token-threshold", "int", "0.8.5", None, (f"{_VA}:836@0.8.5", f"{_VA}:1772@0.33.0"),
            range=TOKENS),
        _r("lora-modules", "multi", "0.4.3", None, (f"{_VCLI_OLD}:60@0.4.3", f"{_VCLI}:81@0.33.0")),
        _r("max-logprobs", "value", "0.4.3", None, (f"{_VA}:319@0.4.3", f"{_VA}:1009@0.33.0")),
        _r("max-lora-rank", "value", "0.4.3", None, (f"{_VA}:394@0.4.3", f"{_VA}:1615@0.33.0")),
        _r("max-loras", "value", "0.4.3", None, (f"{_VA}:390@0.4.3", f"{_VA}:1614@0.33.0")),
        _r("max-num-batched-tokens", "int", "0.4.3", None, (f"{_VA}:309@0.4.3", f"{_VA}:1740@0.33.0"),
            field="max_num_batched_tokens", range=TOKENS),
        _r("max-long-partial-prefills", "int", "0.8.5", "0.20.0", (f"{_VA}:833@0.8.5", f"{_VA}:1301@0.20.0"),
            range=COUNT),
        _r("max-num-partial-prefills", "int", "0.8.5", "0.20.0", (f"{_VA}:830@0.8.5", f"{_VA}:1298@0.20.0"),
            range=COUNT),
        _r("max-parallel-loading-workers", "value", "0.4.3", None, (f"{_VA}:250@0.4.3", f"{_VA}:1360@0.33.0")),
        _r("max-seq-len-to-capture", "int", "0.4.3", "0.10.2", (f"{_VA}:357@0.4.3", f"{_VA}:532@0.10.2"),
            range=LENGTH),
        _r("middleware", "multi", "0.4.3", None, (f"{_VCLI_OLD}:102@0.4.3", f"{_VCLI}:361@0.33.0")),
        _r("model", "value", "0.4.3", None, (f"{_VA}:106@0.4.3", f"{_VA}:969@0.33.0"), field="model"),
        _r("multi-step-stream-outputs", "bool", "0.8.5", "0.8.5", (f"{_VA}:847@0.8.5",)),
        _r("num-gpu-blocks-override", "value", "0.4.3", None, (f"{_VA}:304@0.4.3", f"{_VA}:1399@0.33.0")),
        _r("override-generation-config", "value", "0.8.5", None, (f"{_VA}:923@0.8.5", f"{_VA}:1044@0.33.0")),
        _r("port", "int", "0.4.3", None, (f"{_VCLI_OLD}:32@0.4.3", f"{_VCLI}:295@0.33.0"),
            field="port", range=PORT),
        _r("quantization", "str", "0.4.3", None, (f"{_VA}:328@0.4.3", f"{_VA}:992@0.33.0"),
            field="quantization", aliases=(
                Alias("q", (f"{_VA}:329@0.4.3", f"{_VA}:992@0.33.0")),
            )),
        _r("ray-workers-use-nsight", "bool", "0.4.3", None, (f"{_VA}:257@0.4.3", f"{_VA}:1364@0.33.0")),
        _r("reasoning-parser", "value", "0.8.5", None, (f"{_VA}:496@0.8.5", f"{_VA}:1147@0.33.0")),
        _r("return-tokens-as-token-ids", "bool", "0.8.5", None, (f"{_VCLI_OLD}:200@0.8.5", f"{_VCLI}:119@0.33.0")),
        _r("revision", "value", "0.4.3", None, (f"{_VA}:120@0.4.3", f"{_VA}:986@0.33.0")),
        _r("scheduling-policy", "value", "0.8.5", None, (f"{_VA}:849@0.8.5", f"{_VA}:1782@0.33.0")),
        _r("seed", "value", "0.4.3", None, (f"{_VA}:287@0.4.3", f"{_VA}:978@0.33.0")),
        _r("served-model-name", "multi", "0.4.3", None, (f"{_VA}:533@0.4.3", f"{_VA}:1031@0.33.0"),
            field="served_model_name"),
        _r("show-hidden-metrics-for-version", "value", "0.8.5", None, (f"{_VA}:783@0.8.5", f"{_VA}:1683@0.33.0")),
        _r("skip-tokenizer-init", "bool", "0.4.3", None, (f"{_VA}:116@0.4.3", f"{_VA}:1025@0.33.0")),
        _r("speculative-config", "value", "0.8.5", None, (f"{_VA}:749@0.8.5", f"{_VA}:1866@0.33.0")),
        _r("swap-space", "value", "0.4.3", "0.10.2", (f"{_VA}:291@0.4.3", f"{_VA}:746@0.10.2")),
        _r("tokenizer", "value", "0.4.3", None, (f"{_VA}:111@0.4.3", f"{_VA}:972@0.33.0")),
        _r("tool-call-parser", "value", "0.8.5", None, (f"{_VCLI_OLD}:224@0.8.5", f"{_VCLI}:129@0.33.0")),
        _r("trust-remote-code", "bool", "0.4.3", None, (f"{_VA}:148@0.4.3", f"{_VA}:975@0.33.0")),
        _r("use-v2-block-manager", "bool", "0.4.3", "0.8.5", (f"{_VA}:275@0.4.3", f"{_VA}:577@0.8.5")),
        _r("uvicorn-log-level", "value", "0.4.3", None, (f"{_VCLI_OLD}:34@0.4.3", f"{_VCLI}:315@0.33.0")),
    )),
    "sglang": _table("sglang", (
        _r("allow-auto-truncate", "bool", "0.4.5", None, (f"{_SA}:1066@0.4.5", f"{_SF}/serving.py:254@0.5.23")),
        _r("api-key", "value", "0.3.0", None, (f"{_SA}:342@0.3.0", f"{_SF}/serving.py:160@0.5.23")),
        _r("attention-backend", "value", "0.4.1", None, (f"{_SA}:644@0.4.1", f"{_SF}/exec_.py:207@0.5.23")),
        _r("chat-template", "value", "0.3.0", None, (f"{_SA}:246@0.3.0", f"{_SF}/serving.py:176@0.5.23")),
        _r("chunked-prefill-size", "int", "0.3.0", None, (f"{_SA}:276@0.3.0", f"{_SF}/schedule.py:52@0.5.23"),
            field="max_num_batched_tokens", range=TOKENS_OR_OFF),
        _r("cuda-graph-max-bs", "int", "0.4.1", "0.5.17", (f"{_SA}:733@0.4.1", f"{_SA}:8316@0.5.17"),
            range=COUNT),
        _r("decode-log-interval", "value", "0.4.1", None, (f"{_SA}:515@0.4.1", f"{_SF}/observability.py:136@0.5.23")),
        _r("delete-ckpt-after-loading", "bool", "0.4.1", None, (f"{_SA}:775@0.4.1", f"{_SF}/model.py:356@0.5.23")),
        _r("disable-chunked-prefix-cache", "bool", "0.4.8", None, (f"{_SA}:1490@0.4.8", f"{_SF}/schedule.py:189@0.5.23")),
        _r("disable-cuda-graph-padding", "bool", "0.3.0", None, (f"{_SA}:411@0.3.0", f"{_SF}/exec_.py:671@0.5.23")),
        _r("disable-custom-all-reduce", "bool", "0.3.0", None, (f"{_SA}:421@0.3.0", f"{_SF}/exec_.py:725@0.5.23")),
        _r("disable-fast-image-processor", "bool", "0.4.8", None, (f"{_SA}:1495@0.4.8", f"{_SF}/mm.py:141@0.5.23")),
        _r("disable-outlines-disk-cache", "bool", "0.4.1", None, (f"{_SA}:687@0.4.1", f"{_SF}/exec_.py:189@0.5.23")),
        _r("disable-overlap-schedule", "bool", "0.4.1", None, (f"{_SA}:702@0.4.1", f"{_SF}/schedule.py:193@0.5.23")),
        _r("disable-radix-cache", "bool", "0.3.0", None, (f"{_SA}:396@0.3.0", f"{_SF}/memory.py:64@0.5.23"),
           sets=("enable_prefix_caching", False)),
        _r("disable-shared-experts-fusion", "bool", "0.4.5", None, (f"{_SA}:1114@0.4.5", f"{_SF}/exec_.py:984@0.5.23")),
        _r("dist-init-addr", "value", "0.4.1", None, (f"{_SA}:569@0.4.1", f"{_SF}/parallel.py:32@0.5.23")),
        _r("dp-size", "int", "0.3.0", None, (f"{_SA}:357@0.3.0", f"{_SF}/parallel.py:73@0.5.23"),
            field="data_parallel_size", range=PARALLEL, aliases=(
                Alias("data-parallel-size", (f"{_SA}:356@0.3.0", f"{_SF}/parallel.py:77@0.5.23")),
                Alias("dp", (), own=False, why=_ABBREVIATION),
            )),
        _r("dtype", "str", "0.3.0", None, (f"{_SA}:187@0.3.0", f"{_SF}/model.py:160@0.5.23"), field="dtype"),
        _r("enable-cache-report", "bool", "0.4.1", None, (f"{_SA}:535@0.4.1", f"{_SF}/serving.py:196@0.5.23")),
        _r("enable-custom-logit-processor", "bool", "0.4.5", None, (f"{_SA}:1071@0.4.5", f"{_SF}/exec_.py:70@0.5.23")),
        _r("enable-deepep-moe", "bool", "0.4.5", "0.5.2", (f"{_SA}:1095@0.4.5", f"{_SA}:2198@0.5.2")),
        _r("enable-deterministic-inference", "bool", "0.5.5", None, (f"{_SA}:3421@0.5.5", f"{_SF}/exec_.py:1153@0.5.23")),
        _r("enable-double-sparsity", "bool", "0.4.1", "0.5.9", (f"{_SA}:591@0.4.1", f"{_SA}:4396@0.5.9")),
        _r("enable-dp-attention", "bool", "0.4.1", None, (f"{_SA}:712@0.4.1", f"{_SA}:419@0.5.23")),
        _r("enable-dp-lm-head", "bool", "0.4.8", None, (f"{_SA}:1379@0.4.8", f"{_SF}/parallel.py:199@0.5.23")),
        _r("enable-ep-moe", "bool", "0.4.1", "0.5.2", (f"{_SA}:717@0.4.1", f"{_SA}:2193@0.5.2")),
        _r("enable-flashinfer-mla", "bool", "0.4.5", "0.4.5", (f"{_SA}:839@0.4.5",)),
        _r("enable-hierarchical-cache", "bool", "0.4.5", None, (f"{_SA}:1083@0.4.5", f"{_SF}/memory.py:98@0.5.23")),
        _r("enable-lora", "bool", "0.4.10", None, (f"{_SA}:1166@0.4.10", f"{_SF}/lora.py:34@0.5.23")),
        _r("enable-memory-saver", "bool", "0.4.5", None, (f"{_SA}:1061@0.4.5", f"{_SF}/exec_.py:58@0.5.23")),
        _r("enable-metrics", "bool", "0.4.1", None, (f"{_SA}:510@0.4.1", f"{_SF}/observability.py:70@0.5.23")),
        _r("enable-metrics-for-all-schedulers", "bool", "0.4.10", None, (f"{_SA}:1005@0.4.10", f"{_SF}/observability.py:82@0.5.23")),
        _r("enable-mixed-chunk", "bool", "0.3.0", None, (f"{_SA}:427@0.3.0", f"{_SF}/schedule.py:208@0.5.23")),
        _r("enable-mscclpp", "bool", "0.4.8", None, (f"{_SA}:1354@0.4.8", f"{_SF}/exec_.py:732@0.5.23")),
        _r("enable-multimodal", "bool", "0.4.8", None, (f"{_SA}:728@0.4.8", f"{_SF}/mm.py:28@0.5.23")),
        _r("enable-nccl-nvls", "bool", "0.4.5", None, (f"{_SA}:957@0.4.5", f"{_SF}/exec_.py:715@0.5.23")),
        _r("enable-p2p-check", "bool", "0.3.0", None, (f"{_SA}:437@0.3.0", f"{_SF}/parallel.py:273@0.5.23")),
        _r("enable-priority-scheduling", "bool", "0.5.5", None, (f"{_SA}:2138@0.5.5", f"{_SF}/schedule.py:103@0.5.23")),
        _r("enable-tokenizer-batch-encode", "bool", "0.4.8", None, (f"{_SA}:1339@0.4.8", f"{_SF}/serving.py:313@0.5.23")),
        _r("enable-torch-compile", "bool", "0.3.0", None, (f"{_SA}:432@0.3.0", f"{_SF}/exec_.py:691@0.5.23")),
        _r("enable-two-batch-overlap", "bool", "0.4.8", None, (f"{_SA}:1384@0.4.8", f"{_SF}/exec_.py:1047@0.5.23")),
        _r("ep-size", "value", "0.4.1", None, (f"{_SA}:561@0.4.1", f"{_SF}/parallel.py:281@0.5.23"), aliases=(
                Alias("ep", (f"{_SA}:1330@0.4.10", f"{_SF}/parallel.py:285@0.5.23")),
                Alias("expert-parallel-size", (f"{_SA}:560@0.4.1", f"{_SF}/parallel.py:285@0.5.23")),
            )),
        _r("host", "str", "0.3.0", None, (f"{_SA}:144@0.3.0", f"{_SG}/arg_utils.py:23@0.5.23"), field="host"),
        _r("is-embedding", "bool", "0.3.0", None, (f"{_SA}:213@0.3.0", f"{_SF}/model.py:118@0.5.23")),
        _r("kv-cache-dtype", "str", "0.3.0", None, (f"{_SA}:201@0.3.0", f"{_SF}/model.py:197@0.5.23"),
            field="kv_cache_dtype"),
        _r("load-format", "value", "0.3.0", None, (f"{_SA}:171@0.3.0", f"{_SG}/arg_utils.py:30@0.5.23")),
        _r("log-level", "value", "0.3.0", None, (f"{_SA}:320@0.3.0", f"{_SF}/observability.py:31@0.5.23")),
        _r("log-requests", "bool", "0.3.0", None, (f"{_SA}:332@0.3.0", f"{_SF}/observability.py:36@0.5.23")),
        _r("log-requests-level", "value", "0.4.5", None, (f"{_SA}:695@0.4.5", f"{_SF}/observability.py:40@0.5.23")),
        _r("max-lora-rank", "value", "0.4.10", None, (f"{_SA}:1172@0.4.10", f"{_SF}/lora.py:42@0.5.23")),
        _r("max-prefill-tokens", "int", "0.3.0", None, (f"{_SA}:282@0.3.0", f"{_SF}/schedule.py:71@0.5.23"),
            field="max_batch_prefill_tokens", range=TOKENS),
        _r("max-queued-requests", "value", "0.4.10", None, (f"{_SA}:803@0.4.10", f"{_SF}/schedule.py:35@0.5.23")),
        _r("max-total-tokens", "int", "0.3.0", None, (f"{_SA}:270@0.3.0", f"{_SF}/schedule.py:39@0.5.23"),
            field="max_batch_total_tokens", range=POOL),
        _r("model-path", "value", "0.3.0", None, (f"{_SA}:132@0.3.0", f"{_SG}/arg_utils.py:29@0.5.23"),
            field="model", aliases=(
                Alias("model", (f"{_SA}:576@0.4.9", f"{_SG}/arg_utils.py:29@0.5.23")),
            )),
        _r("nnodes", "value", "0.3.0", None, (f"{_SA}:380@0.3.0", f"{_SF}/parallel.py:43@0.5.23")),
        _r("node-rank", "value", "0.3.0", None, (f"{_SA}:382@0.3.0", f"{_SF}/parallel.py:44@0.5.23")),
        _r("page-size", "int", "0.4.5", None, (f"{_SA}:608@0.4.5", f"{_SF}/schedule.py:143@0.5.23"),
            field="block_size", range=BLOCK),
        _r("port", "int", "0.3.0", None, (f"{_SA}:147@0.3.0", f"{_SG}/arg_utils.py:24@0.5.23"),
            field="port", range=PORT),
        _r("quantization", "str", "0.3.0", None, (f"{_SA}:224@0.3.0", f"{_SF}/model.py:177@0.5.23"),
            field="quantization", aliases=(
                Alias("q", (), own=False, why="vLLM's -q: SGLang finds it ambiguous (--quantization-param-path)"),
            )),
        _r("random-seed", "value", "0.3.0", None, (f"{_SA}:314@0.3.0", f"{_SF}/device.py:47@0.5.23")),
        _r("reasoning-parser", "value", "0.4.5", None, (f"{_SA}:737@0.4.5", f"{_SA}:369@0.5.23")),
        _r("revision", "value", "0.4.1", None, (f"{_SA}:380@0.4.1", f"{_SF}/model.py:122@0.5.23")),
        _r("schedule-conservativeness", "value", "0.3.0", None, (f"{_SA}:295@0.3.0", f"{_SF}/schedule.py:139@0.5.23")),
        _r("schedule-policy", "value", "0.3.0", None, (f"{_SA}:288@0.3.0", f"{_SF}/schedule.py:86@0.5.23")),
        _r("served-model-name", "multi", "0.3.0", None, (f"{_SA}:240@0.3.0", f"{_SF}/serving.py:168@0.5.23"),
            field="served_model_name"),
        _r("show-time-cost", "bool", "0.3.0", None, (f"{_SA}:337@0.3.0", f"{_SF}/observability.py:69@0.5.23")),
        _r("skip-server-warmup", "bool", "0.4.9", None, (f"{_SA}:620@0.4.9", f"{_SF}/serving.py:116@0.5.23")),
        _r("skip-tokenizer-init", "bool", "0.3.0", None, (f"{_SA}:166@0.3.0", f"{_SF}/serving.py:58@0.5.23")),
        _r("tokenizer-path", "value", "0.3.0", None, (f"{_SA}:138@0.3.0", f"{_SG}/arg_utils.py:26@0.5.23")),
        _r("tool-call-parser", "value", "0.4.5", None, (f"{_SA}:1076@0.4.5", f"{_SA}:379@0.5.23")),
        _r("trust-remote-code", "bool", "0.3.0", None, (f"{_SA}:208@0.3.0", f"{_SG}/arg_utils.py:25@0.5.23")),
        _r("watchdog-timeout", "value", "0.4.1", None, (f"{_SA}:468@0.4.1", f"{_SF}/device.py:66@0.5.23")),
    )),
    "tgi": _table("tgi", (
        _r("disable-crash-reports", "bool", "2.2.0", "2.2.0", (f"{_TL}:471@v2.2.0",), env=True),
        _r("disable-custom-kernels", "bool", "0.9.0", None, (f"{_TL}:232@v0.9.0", f"{_TL}:808@v3.3.7"),
            env=True),
        _r("disable-grammar-support", "bool", "1.4.1", None, (f"{_TL}:388@v1.4.1", f"{_TL}:876@v3.3.7"),
            env=True),
        _r("dtype", "str", "0.9.0", None, (f"{_TL}:95@v0.9.0", f"{_TL}:631@v3.3.7"), field="dtype", env=True),
        _r("enable-prefill-logprobs", "bool", "3.0.0", None, (f"{_TL}:876@v3.0.0", f"{_TL}:909@v3.3.7"),
            env=True),
        _r("hostname", "str", "0.9.1", None, (f"{_TL}:202@v0.9.1", f"{_TL}:770@v3.3.7"),
            field="host", env=True),
        _r("json-output", "bool", "0.9.0", None, (f"{_TL}:236@v0.9.0", f"{_TL}:837@v3.3.7"), env=True),
        _r("kv-cache-dtype", "str", "2.4.0", None, (f"{_TL}:435@v2.4.0", f"{_TL}:637@v3.3.7"),
            field="kv_cache_dtype", env=True),
        _r("max-best-of", "value", "0.9.0", None, (f"{_TL}:113@v0.9.0", f"{_TL}:655@v3.3.7"), env=True),
        _r("max-client-batch-size", "value", "2.0.1", None, (f"{_TL}:420@v2.0.1", f"{_TL}:884@v3.3.7"),
            env=True),
        _r("max-concurrent-requests", "int", "0.9.0", None, (f"{_TL}:107@v0.9.0", f"{_TL}:649@v3.3.7"),
            field="max_concurrent_requests", range=COUNT, env=True),
        _r("max-stop-sequences", "value", "0.9.0", None, (f"{_TL}:121@v0.9.0", f"{_TL}:663@v3.3.7"),
            env=True),
        _r("max-top-n-tokens", "value", "1.0.3", None, (f"{_TL}:168@v1.0.3", f"{_TL}:671@v3.3.7"), env=True),
        _r("max-waiting-tokens", "value", "0.9.0", None, (f"{_TL}:198@v0.9.0", f"{_TL}:755@v3.3.7"),
            env=True),
        _r("model-id", "value", "0.9.0", None, (f"{_TL}:68@v0.9.0", f"{_TL}:589@v3.3.7"),
            field="model", env=True),
        _r("otlp-endpoint", "value", "0.9.0", None, (f"{_TL}:239@v0.9.0", f"{_TL}:840@v3.3.7"), env=True),
        _r("payload-limit", "value", "2.4.1", None, (f"{_TL}:700@v2.4.1", f"{_TL}:901@v3.3.7"), env=True),
        _r("port", "int", "0.9.0", None, (f"{_TL}:202@v0.9.0", f"{_TL}:774@v3.3.7"),
            field="port", range=PORT, env=True),
        _r("prometheus-port", "value", "3.3.0", None, (f"{_TL}:778@v3.3.0", f"{_TL}:778@v3.3.7"), env=True),
        _r("quantize", "str", "0.9.0", None, (f"{_TL}:91@v0.9.0", f"{_TL}:620@v3.3.7"),
            field="quantization", env=True),
        _r("revision", "value", "0.9.0", None, (f"{_TL}:73@v0.9.0", f"{_TL}:594@v3.3.7"), env=True),
        _r("rope-factor", "value", "1.0.1", None, (f"{_TL}:300@v1.0.1", f"{_TL}:833@v3.3.7"), env=True),
        _r("rope-scaling", "value", "1.0.1", None, (f"{_TL}:295@v1.0.1", f"{_TL}:828@v3.3.7"), env=True),
        _r("sharded", "bool_value", "0.9.0", None, (f"{_TL}:79@v0.9.0", f"{_TL}:605@v3.3.7"), env=True),
        _r("speculate", "value", "1.3.0", None, (f"{_TL}:163@v1.3.0", f"{_TL}:627@v3.3.7"), env=True),
        _r("trust-remote-code", "bool", "0.9.0", None, (f"{_TL}:101@v0.9.0", f"{_TL}:643@v3.3.7"), env=True),
        _r("usage-stats", "value", "2.3.0", None, (f"{_TL}:641@v2.3.0", f"{_TL}:895@v3.3.7"), env=True),
        _r("waiting-served-ratio", "float", "0.9.0", None, (f"{_TL}:152@v0.9.0", f"{_TL}:708@v3.3.7"),
            range=FRACTION, env=True),
    )),
}


def all_entries(engine: str) -> tuple[FlagEntry, ...]:
    """Every flag of `engine` the tables hold: those actions write, then those only read."""
    return (*FLAGS.get(engine, {}).values(), *READ_FLAGS.get(engine, {}).values())


def any_entry(engine: str, flag: str) -> FlagEntry | None:
    """The entry that `flag` (a setting or any of its spellings, no dashes) belongs to, among the
    flags actions write and then those only read.

    >>> [(s.flag, s.since) for s in any_entry("tgi", "max-batch-size").spellings]
    [('max-batch-size', (1, 4, 1))]
    """
    for entry in all_entries(engine):
        if entry.setting == flag or entry.spelling(flag) is not None:
            return entry
    return None
