"""Kubernetes memory quantities as the API server stores them.

>>> canonical_quantity("64Gi", "--memory-limit"), canonical_quantity("1024Mi", "x"), canonical_quantity("1536Mi", "x")
('64Gi', '1Gi', '1536Mi')
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Any

from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.common import invalid
from runbooks.remediation.value_ranges import check_memory

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_QUANTITY = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTPE]i|[kMGTPE])?\s*$")


def quantity_bytes(text: Any, field: str) -> int:
    """Bytes of a Kubernetes memory quantity ("64Gi", "64G", "68719476736")."""
    m = _QUANTITY.match(str(text))
    if m is None:
        raise invalid(field, text, Phrase("reason.memory_quantity"))
    number, suffix = m.group(1), m.group(2) or ""
    scale = _BINARY.get(suffix) or _DECIMAL.get(suffix) or 1
    exact = Fraction(number) * scale
    if exact.denominator != 1:
        raise invalid(field, text, Phrase("reason.whole_bytes"))
    value = int(exact)
    if value <= 0:
        raise invalid(field, text, Phrase("reason.more_than_zero"))
    return value


def canonical_quantity(text: Any, field: str) -> str:
    """The quantity as the API server stores it: the largest suffix of its family (binary or
    decimal) that keeps it whole."""
    value = quantity_bytes(text, field)
    if field.startswith("--"):  # what someone asks for (`--shm-size`, `--memory-limit`), not a value read
        check_memory(field, text, value)
    m = _QUANTITY.match(str(text))
    assert m is not None
    table = _BINARY if (m.group(2) or "").endswith("i") else _DECIMAL
    for suffix, scale in sorted(table.items(), key=lambda kv: -kv[1]):
        if value % scale == 0:
            return f"{value // scale}{suffix}"
    return str(value)
