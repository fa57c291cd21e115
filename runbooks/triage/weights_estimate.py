"""The weights' size from the model's name and precision, for models the catalog does not know.

An on-call engineer reads "Qwen1.5-72B-Chat" as 72 billion parameters and `--dtype float` as
four bytes each; so does this. The estimate is used only where the catalog and config.json
give nothing, only against a card whose size the evidence shows, and only with a margin
(the name rounds the count: "7B" models hold 6.5 to 7.7 billion parameters).

>>> round(estimate_weights_gib("/data/models/Qwen1.5-72B-Chat", None, None).gib)
134
>>> estimate_weights_gib("Qwen/Qwen2.5-72B-Instruct-GPTQ-Int4", None, None).bytes_per_param
0.5
>>> estimate_weights_gib("mistralai/Mixtral-8x7B-v0.1", None, None) is None
True
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from runbooks.model.units import GIB

#: the parameter count in a name: "72B", "0.5B", "1.5-34B" (34), not "A3B" (active experts)
_PARAMS = re.compile(r"(?<![\w.])(\d{1,4}(?:\.\d{1,2})?)[Bb](?![A-Za-z0-9])")
#: "8x7B": a mixture of experts whose total the name does not give
_MOE = re.compile(r"\d{1,3}x\d{1,4}(?:\.\d)?[Bb]\b")
_FOUR_BIT = re.compile(r"int4|awq|gptq|4bit|4-bit|w4a16|nf4|bnb|gguf|q4", re.IGNORECASE)
_EIGHT_BIT = re.compile(r"int8|w8a8|w8a16|fp8|8bit|8-bit|eetq", re.IGNORECASE)
_FOUR_BYTES = ("float", "float32", "fp32")


@dataclass(frozen=True)
class WeightsEstimate:
    params_b: float
    bytes_per_param: float
    gib: float


def estimate_weights_gib(model: str | None, dtype: str | None, quantization: str | None) -> WeightsEstimate | None:
    """The whole model's weights in GiB from its name and precision; None when the name gives no size."""
    if not model or _MOE.search(model):
        return None
    name = model.rstrip("/").split("/")[-1]
    m = _PARAMS.search(name)
    if m is None:
        return None
    params = float(m.group(1))
    if params <= 0:
        return None
    marks = " ".join(x for x in (name, quantization or "") if x)
    if _FOUR_BIT.search(marks):
        per = 0.5
    elif _EIGHT_BIT.search(marks):
        per = 1.0
    elif (dtype or "").lower() in _FOUR_BYTES:
        per = 4.0
    else:
        per = 2.0
    return WeightsEstimate(params, per, params * 1e9 * per / GIB)
