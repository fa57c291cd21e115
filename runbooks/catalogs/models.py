"""Find a model's architecture by Hugging Face id, served name or loose spelling.

Quantized repos ("Qwen2.5-7B-Instruct-AWQ", "...-GPTQ-Int4", "...-FP8", "...-quantized.w8a8",
"...-bnb-4bit") resolve to the base architecture with `quantization` and `quant_bits` set.

>>> find_model("qwen2.5-7b").name
'Qwen/Qwen2.5-7B-Instruct'
>>> spec = find_model("Qwen/Qwen2.5-7B-Instruct-AWQ"); (spec.quantization, spec.quant_bits)
('awq', 4)
"""

from __future__ import annotations

import difflib
import re
from dataclasses import replace

from runbooks.catalogs.models_data import ENTRIES
from runbooks.model.evidence import ModelSpec


class UnknownModel(ValueError):
    """No catalog model matches `name`; `nearest` holds the closest catalog ids."""

    def __init__(self, name: str, nearest: tuple[str, ...] = ()):
        self.name = name
        self.nearest = nearest
        super().__init__(f"unknown model {name!r}" + (f"; nearest: {', '.join(nearest)}" if nearest else ""))


# (pattern at the end of the repo name, quantization, bits); tried until none matches
_QUANT_SUFFIXES: tuple[tuple[re.Pattern[str], str, int], ...] = tuple(
    (re.compile(pattern + r"$"), quant, bits)
    for pattern, quant, bits in (
        (r"[-_.]?(?:unsloth[-_])?bnb[-_]4bit", "bitsandbytes", 4),
        (r"[-_.]?bnb[-_]8bit", "bitsandbytes", 8),
        (r"[-_.]?autoround[-_]gptq[-_]4bit", "gptq", 4),
        (r"[-_.]?gptq[-_]int4", "gptq", 4),
        (r"[-_.]?gptq[-_]int8", "gptq", 8),
        (r"[-_.]?gptq(?:[-_]4bit)?", "gptq", 4),
        (r"[-_.]?int4[-_]awq", "awq", 4),
        (r"[-_.]?awq(?:[-_]int4|[-_]4bit)?", "awq", 4),
        (r"[-_.]?fp8(?:[-_]dynamic|[-_]block)?", "fp8", 8),
        (r"[-_.]?(?:quantized\.)?w8a8", "int8", 8),
        (r"[-_.]?int8", "int8", 8),
        (r"[-_.]?(?:quantized\.)?w4a16", "gptq", 4),
        (r"[-_.]?mxfp4", "mxfp4", 4),
        (r"[-_.]?nvfp4", "nvfp4", 4),
    )
)
_ROLE_WORDS = frozenset({"instruct", "chat", "it", "hf", "base", "pt"})
#: Meta publishes its own "-FP8" checkpoints (Llama 3.1 405B/70B/8B) in fbgemm_fp8 format
#: (config.json quant_method "fbgemm_fp8"), read by vLLM's FBGEMMFp8Config with the layers it
#: lists in modules_to_not_convert left unquantized (quantization/fbgemm_fp8.py:61-65@0.5.3)
_FBGEMM_FP8_OWNER = "meta-llama/"


def _last_segment(name: str) -> str:
    return name.strip().rstrip("/").split("/")[-1].lower()


def _key(name: str) -> str:
    text = _last_segment(name)
    if text.startswith("meta-llama-"):
        text = text[len("meta-"):]
    return re.sub(r"[\s_:\-]+", "", text)


def _role_free(name: str) -> str:
    words = re.split(r"[\s_:\-]+", _last_segment(name))
    if words and words[0] == "meta" and len(words) > 1 and words[1] == "llama":
        words = words[1:]
    return "".join(w for w in words if w not in _ROLE_WORDS)


def _build_index() -> tuple[dict[str, ModelSpec], dict[str, str]]:
    exact: dict[str, ModelSpec] = {}
    loose: dict[str, str] = {}
    for canonical, aliases, spec in ENTRIES:
        for label in (canonical, *aliases):
            exact.setdefault(_key(label), spec)
            loose.setdefault(_role_free(label), canonical)
    return exact, loose


_EXACT, _LOOSE = _build_index()
_BY_NAME = {canonical: spec for canonical, _, spec in ENTRIES}


def model_names() -> tuple[str, ...]:
    """Canonical ids of every catalog model."""
    return tuple(canonical for canonical, _, _ in ENTRIES)


def split_quantization(name: str) -> tuple[str, str | None, int | None]:
    """(name without quantization suffixes, quantization, bits) from a repo name.

    >>> split_quantization("Qwen/Qwen2.5-14B-Instruct-GPTQ-Int4")
    ('qwen2.5-14b-instruct', 'gptq', 4)
    """
    text = _last_segment(name)
    quant: str | None = None
    bits: int | None = None
    changed = True
    while changed:
        changed = False
        for pattern, q, b in _QUANT_SUFFIXES:
            stripped = pattern.sub("", text)
            if stripped != text and stripped:
                text, changed = stripped, True
                if quant is None:
                    quant, bits = q, b
                break
    return text, quant, bits


def _lookup(name: str) -> ModelSpec | None:
    spec = _EXACT.get(_key(name))
    if spec is not None:
        return spec
    canonical = _LOOSE.get(_role_free(name))
    return _BY_NAME.get(canonical) if canonical else None


def find_model(name: str) -> ModelSpec:
    """The catalog ModelSpec for `name`; raises UnknownModel (a ValueError) with the nearest ids."""
    text = (name or "").strip()
    spec = _lookup(text) if text else None
    if spec is not None:
        return spec
    base, quant, bits = split_quantization(text)
    spec = _lookup(base) if base else None
    if spec is None:
        raise UnknownModel(name, _nearest(text))
    if quant == "fp8" and text.lower().startswith(_FBGEMM_FP8_OWNER):
        quant = "fbgemm_fp8"
    dtype = "float16" if quant in ("awq", "gptq") else spec.native_dtype
    return replace(spec, name=text, quantization=quant, quant_bits=bits, native_dtype=dtype)


def _nearest(name: str) -> tuple[str, ...]:
    keys = {_key(canonical): canonical for canonical in model_names()}
    for canonical, aliases, _ in ENTRIES:
        for alias in aliases:
            keys.setdefault(_key(alias), canonical)
    matches = difflib.get_close_matches(_key(name), list(keys), n=6, cutoff=0.5)
    seen: list[str] = []
    for match in matches:
        if keys[match] not in seen:
            seen.append(keys[match])
    return tuple(seen[:3])
