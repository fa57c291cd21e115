"""What each engine's command line means: canonical flag names, aliases, booleans, env vars.

Canonical names are each engine's own long option without dashes, hyphenated
(`tensor-parallel-size` for vLLM, `tp-size` for SGLang, `num-shard` for TGI). The tables cover
the flags that matter for memory triage plus the boolean flags that must not swallow the
next token (`vllm serve --trust-remote-code MODEL`).
"""

from __future__ import annotations

from runbooks.catalogs.engine_flags import ENGINE_NAMES, MODEL_FIELD
from runbooks.catalogs.engine_flags_read import all_entries

# Every flag name, spelling, alias, value kind, ServerConfig field and TGI env name below comes
# from the engine tables (`runbooks.catalogs.engine_flags` for the flags gpumem writes,
# `runbooks.catalogs.engine_flags_read` for those it only reads), each with the engine source
# it was read from: none is written here by hand (tests/test_engine_flags.py holds that).

#: the engines the tables cover
ENGINES = tuple(ENGINE_NAMES)


def _spellings(engine: str, bool_kind: bool) -> frozenset[str]:
    return frozenset(s.flag for e in all_entries(engine) if (e.kind == "bool") == bool_kind for s in e.spellings)


#: short or alternative spellings → canonical name, per engine (the engine's own short and
#: second names, and the few gpumem also reads, each with its reason in the table)
ALIASES: dict[str, dict[str, str]] = {
    engine: {a.name: e.spellings[-1].flag for e in all_entries(engine) for a in e.aliases} for engine in ENGINES
}

#: flags that take no value (bare = "true"; `--no-X` = "false" where the engine allows it)
BOOLEAN_FLAGS: dict[str, frozenset[str]] = {engine: _spellings(engine, True) for engine in ENGINES}

#: flags that take one or more values (`--served-model-name a b`)
MULTI_VALUE_FLAGS: frozenset[str] = frozenset(
    s.flag for engine in ENGINES for e in all_entries(engine) if e.kind == "multi" for s in e.spellings)

#: the rest of the flags each engine knows well enough to resolve abbreviations against
VALUE_FLAGS: dict[str, frozenset[str]] = {engine: _spellings(engine, False) for engine in ENGINES}

#: TGI env vars read as flags (the launcher reads each flag declared `env` from its env var).
#: HOSTNAME is one, though Kubernetes sets it to the pod name.
TGI_ENV_FLAGS: dict[str, str] = {s.env: s.flag for e in all_entries("tgi") for s in e.spellings if s.env}

#: TGI env vars the launcher parses as booleans, which take exactly `true` or `false`: clap 4
#: (every TGI release) parses a switch's env var with the switch's value parser
#: (clap_builder parser.rs `add_env` -> `react`), which for a `bool` is `ValueParser::bool()`
#: (action.rs `default_value_parser`), a `BoolValueParser` that accepts only those two words,
#: case included (value_parser.rs). Any other value, `1`, `yes` or the empty string among them,
#: stops the launcher with "error: invalid value ... [possible values: true, false]".
TGI_ENV_BOOLEANS: frozenset[str] = frozenset(
    s.env for e in all_entries("tgi") if e.kind in ("bool", "bool_value") for s in e.spellings if s.env)

#: environment variables worth keeping beside the flags (never secrets)
ENV_HINTS: frozenset[str] = frozenset({
    "VLLM_USE_V1", "VLLM_ATTENTION_BACKEND", "VLLM_ALLOW_LONG_MAX_MODEL_LEN", "VLLM_PORT",
    "VLLM_WORKER_MULTIPROC_METHOD", "VLLM_ENABLE_V1_MULTIPROCESSING", "VLLM_CPU_KVCACHE_SPACE",
    "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_ALLOC_CONF", "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES", "SGLANG_ENABLE_TORCH_COMPILE", "TGI_WIGGLE_ROOM", "REQUEST_LOGPROBS",
    "PREFILL_CHUNKING", "ATTENTION",
})

#: the ServerConfig value kind of each table kind (a multi-value flag: its first word)
_FIELD_KIND = {"multi": "first", "value": "str"}

# (flag, ServerConfig field, value kind) per engine. Kinds: int, float, str, bool, and
# first (the first word of a multi-value flag); every spelling of a flag fills its field.
FIELD_MAP: dict[str, tuple[tuple[str, str, str], ...]] = {
    engine: tuple((s.flag, e.field, _FIELD_KIND.get(e.kind, e.kind)) for e in all_entries(engine)
                  if e.field is not None and e.field != MODEL_FIELD for s in e.spellings)
    for engine in ENGINES
}

#: ServerConfig field -> the flag that fills it, per engine (the newest spelling)
FIELD_FLAG: dict[str, dict[str, str]] = {
    engine: {e.field: e.spellings[-1].flag for e in all_entries(engine) if e.field is not None} for engine in ENGINES
}

#: (switch, ServerConfig field, value) per engine: a switch that, on, sets a field of the other
#: engines' meaning (SGLang's --disable-radix-cache: prefix caching off)
SWITCH_SETS: dict[str, tuple[tuple[str, str, bool], ...]] = {
    engine: tuple((s.flag, *e.sets) for e in all_entries(engine) if e.sets is not None for s in e.spellings)
    for engine in ENGINES
}

#: the flag that names the model, per engine (vLLM also takes it positionally)
MODEL_FLAG = {engine: next(e.setting for e in all_entries(engine) if e.field == MODEL_FIELD) for engine in ENGINES}

#: what ServerConfig.memory_fraction means for each engine
MEMORY_FRACTION_KIND = {"vllm": "total", "sglang": "free_static", "tgi": "process"}


def known_flags(engine: str) -> frozenset[str]:
    return VALUE_FLAGS.get(engine, frozenset()) | BOOLEAN_FLAGS.get(engine, frozenset())
