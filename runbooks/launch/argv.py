"""An engine's own arguments, as the engine reads them, to a `ServerConfig`.

>>> cfg = parse_command_line(["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct", "--max_model_len=8192", "-tp", "2"])
>>> cfg.engine, cfg.launch_form, cfg.max_model_len, cfg.tensor_parallel_size
('vllm', 'vllm-serve', 8192, 2)

Values keep the engine's meaning under engine-independent names (see `ServerConfig`). Every
flag seen is kept as text in `ServerConfig.flags`; a value that does not parse stays only there
and adds the warning "unparsed_value:<flag>". A flag the engine reads with a value that has none
after it (the next word is a flag, or the line ends: a value the shell took as a redirection,
`--model-path <MODEL>`) is kept with the empty value and adds "missing_value:<flag>"; it is never
read as a switch that is on.
"""

from __future__ import annotations

import math
import re
from typing import Any

from runbooks.catalogs.engine_flags import HOST_FIELD
from runbooks.launch.flag_tables import (
    ALIASES,
    BOOLEAN_FLAGS,
    ENV_HINTS,
    FIELD_FLAG,
    FIELD_MAP,
    MEMORY_FRACTION_KIND,
    MODEL_FLAG,
    MULTI_VALUE_FLAGS,
    SWITCH_SETS,
    TGI_ENV_BOOLEANS,
    TGI_ENV_FLAGS,
    VALUE_FLAGS,
    known_flags,
)
from runbooks.launch.forms import Launch, find_server, image_version, is_engine_release
from runbooks.model.evidence import ServerConfig

_NUMBER_WORD = re.compile(r"-\d+(\.\d+)?")
_INT = re.compile(r"[+-]?\d{1,18}")
_UNRESOLVED_REF = re.compile(r"\$(?:\(|\{|[A-Za-z_])")
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})
_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
#: abbreviations shorter than this are never expanded (too many near-collisions)
_MIN_ABBREVIATION = 6


def parse_command_line(
    argv: list[str], env: dict[str, str] | None = None, source: str = "cmdline", image: str | None = None
) -> ServerConfig | None:
    """The server flags of a process command line (e.g. /proc/PID/cmdline), None when not a server.

    >>> parse_command_line(["python3", "-m", "sglang.launch_server", "--model-path", "m",
    ...                     "--mem-fraction-static", "0.8"]).memory_fraction_kind
    'free_static'
    """
    env = {str(k): str(v) for k, v in (env or {}).items()}
    found = find_server([str(w) for w in argv], env)
    if found is None:
        return None
    engine, form, rest = found
    return config_from_launch(Launch(engine=engine, form=form, argv=rest, env=env), source, image, frozenset())


def parse_engine_args(engine: str, argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """(flags by canonical name, positional words) of an engine's own arguments.

    >>> parse_engine_args("vllm", ["M", "--max_num_seqs=64", "--no-enable-prefix-caching"])
    ({'max-num-seqs': '64', 'enable-prefix-caching': 'false'}, ['M'])
    >>> parse_engine_args("sglang", ["--model-path", "--trust-remote-code", "--tp-size"])
    ({'model-path': '', 'trust-remote-code': 'true', 'tp-size': ''}, [])
    """
    booleans = BOOLEAN_FLAGS.get(engine, frozenset())
    valued = VALUE_FLAGS.get(engine, frozenset())
    flags: dict[str, str] = {}
    positionals: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        i += 1
        if word == "--":
            positionals.extend(argv[i:])
            break
        if not _is_flag(word):
            positionals.append(word)
            continue
        raw_name, has_value, value = word.lstrip("-").partition("=")
        name = canonical_flag(engine, raw_name)
        if not has_value and name.startswith("no-") and canonical_flag(engine, name[3:]) in booleans:
            flags[canonical_flag(engine, name[3:])] = "false"
        elif has_value:
            flags[name] = value
        elif name in booleans:
            # Older vLLM booleans also took an optional True/False word.
            if i < len(argv) and argv[i].lower() in ("true", "false"):
                flags[name] = argv[i].lower()
                i += 1
            else:
                flags[name] = "true"
        elif i < len(argv) and not _is_flag(argv[i]):
            values = [argv[i]]
            i += 1
            while name in MULTI_VALUE_FLAGS and i < len(argv) and not _is_flag(argv[i]):
                values.append(argv[i])
                i += 1
            flags[name] = " ".join(values)
        else:
            # a flag the engine reads with a value, none given: not a switch that is on
            flags[name] = "" if name in valued else "true"
    return flags, positionals


def canonical_flag(engine: str, name: str) -> str:
    """An engine's canonical long name for a flag as written (`tp`, `max_model_len`, abbreviations).

    >>> canonical_flag("vllm", "max-num-batched-token"), canonical_flag("sglang", "tp")
    ('max-num-batched-tokens', 'tp-size')
    """
    name = name.strip().replace("_", "-")
    name = ALIASES.get(engine, {}).get(name, name)
    known = known_flags(engine)
    if name in known or engine == "tgi" or len(name) < _MIN_ABBREVIATION:
        return name
    # argparse accepts unambiguous prefixes (KubeAI ships `--max-num-batched-token`).
    candidates = [flag for flag in known if flag.startswith(name)]
    return candidates[0] if len(candidates) == 1 else name


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _NUMBER_WORD.fullmatch(word)


def config_from_launch(launch: Launch, source: str, image: str | None, unresolved: frozenset[str]) -> ServerConfig:
    """The ServerConfig of a located launch; `unresolved`: env names whose value is not known
    (TGI reads its flags from env vars too)."""
    engine = launch.engine or ""
    warnings = list(launch.warnings)
    flags, positionals = parse_engine_args(engine, launch.argv)
    if engine == "tgi":
        _merge_tgi_env(flags, launch.env, unresolved, warnings)
    model = flags.get(MODEL_FLAG.get(engine, MODEL_FLAG["vllm"])) or None
    if engine == "vllm" and positionals:
        model = positionals[0]  # `vllm serve` lets the positional model override --model
    if engine == "vllm" and launch.env.get("VLLM_PORT", "").startswith("tcp://"):
        warnings.append("vllm_port_service_collision")
    if engine == "sglang" and launch.form is not None and (flags.get(FIELD_FLAG[engine][HOST_FIELD]) or "127.0.0.1") in _LOOPBACK:
        warnings.append("sglang_host_loopback")
    if any(_UNRESOLVED_REF.search(v) for v in [*flags.values(), model or ""]):
        warnings.append("unresolved_env")
    return config_from_flags(
        launch.engine, flags, source=source, model=model, form=launch.form, warnings=warnings, env=launch.env,
        version=image_version(image) if is_engine_release(image, launch.engine) else None)


def config_from_flags(
    engine: str | None,
    flags: dict[str, str],
    *,
    source: str,
    model: str | None = None,
    form: str | None = None,
    version: str | None = None,
    warnings: list[str] | tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> ServerConfig:
    """A ServerConfig from an engine's flags by canonical name (values as text).

    >>> cfg = config_from_flags("tgi", {"num-shard": "8", "max-batch-total-tokens": "16000"}, source="logs.txt")
    >>> cfg.tensor_parallel_size, cfg.max_batch_total_tokens
    (8, 16000)
    """
    found = list(warnings)
    values = _normalise(engine or "", flags, found)
    model_flag = MODEL_FLAG.get(engine or "", MODEL_FLAG["vllm"])
    if model is None:
        model = flags.get(model_flag) or None
    found += [f"missing_value:{flag}" for flag, value in flags.items()
              if value == "" and (flag == model_flag or flag in VALUE_FLAGS.get(engine or "", ()))]
    return ServerConfig(
        source=source,
        engine=engine,
        engine_version=version,
        launch_form=form,
        model=model,
        flags=dict(flags),
        warnings=tuple(dict.fromkeys(found)),
        env={k: v for k, v in sorted((env or {}).items()) if k in ENV_HINTS},
        **values,
    )


def _merge_tgi_env(flags: dict[str, str], env: dict[str, str], unresolved: frozenset[str], warnings: list[str]) -> None:
    """TGI reads each flag from its env var too; a flag on the command line wins. A boolean's
    env var that is not exactly `true` or `false` stops the launcher before it reads the rest
    ("tgi_env_not_boolean:<VAR>"), so it sets nothing."""
    for var, flag in TGI_ENV_FLAGS.items():
        if flag in flags:
            continue
        if var in env and var in TGI_ENV_BOOLEANS and env[var] not in ("true", "false"):
            warnings.append(f"tgi_env_not_boolean:{var}")
        elif var in env:
            flags[flag] = env[var]
        elif var in unresolved and var != "HOSTNAME":
            warnings.append("unresolved_env")


def _normalise(engine: str, flags: dict[str, str], warnings: list[str]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    for flag, field_name, kind in FIELD_MAP.get(engine, ()):
        if flag not in flags or flags[flag] == "":
            continue  # not given, or given with no value ("missing_value")
        parsed = _convert(flags[flag], kind)
        if parsed is _UNPARSED:
            warnings.append(f"unparsed_value:{flag}")
        elif parsed is not None:
            values[field_name] = parsed
    for flag, field_name, meaning in SWITCH_SETS.get(engine, ()):
        if flags.get(flag, "").lower() in _TRUE:
            values[field_name] = meaning
    if engine == "sglang":
        _sglang_chunking(flags, values)
    if values.get("memory_fraction") is not None:
        values["memory_fraction_kind"] = MEMORY_FRACTION_KIND[engine]
    return values


def _sglang_chunking(flags: dict[str, str], values: dict[str, Any]) -> None:
    """SGLang's chunk size below 0 (its range's special -1) turns chunked prefill off."""
    chunk = FIELD_FLAG["sglang"]["max_num_batched_tokens"]
    if _INT.fullmatch(flags.get(chunk, "").strip()) and int(flags[chunk]) < 0:
        values["enable_chunked_prefill"] = False


_UNPARSED = object()


def _convert(raw: str, kind: str) -> Any:
    text = raw.strip()
    if kind == "str":
        return text or None
    if kind == "first":
        return text.split()[0] if text.split() else None
    if kind == "bool":
        if text.lower() in _TRUE:
            return True
        return False if text.lower() in _FALSE else _UNPARSED
    if kind == "int":
        if not _INT.fullmatch(text):
            return _UNPARSED
        number = int(text)
        # Negative sizes mean "auto" or "disabled" to the engines; no size to report.
        return number if number >= 0 else None
    try:
        number = float(text)
    except ValueError:
        return _UNPARSED
    return number if math.isfinite(number) and number >= 0 else _UNPARSED
