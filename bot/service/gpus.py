"""This machine's GPUs through NVML: the one door the snapshot verb and the agent use.

`NvmlUnavailable` (no driver, no GPU, no permission) is the collector's own error, named here
so surfaces need not reach into collectors.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from collectors.nvml.reader import NvmlSession, NvmlUnavailable
from collectors.nvml.reader import read_gpus as _read_gpus
from runbooks.model.evidence import GpuSnapshot

__all__ = ["NvmlUnavailable", "nvml_session", "read_gpus"]


def nvml_session(nvml: Any = None) -> NvmlSession:
    """An NVML session for repeated samples (`with nvml_session() as s: s.read(now=...)`);
    `nvml` replaces the pynvml module in tests."""
    return NvmlSession(nvml)


def read_gpus(nvml: Any = None, *, now: datetime | None = None) -> GpuSnapshot:
    """One snapshot of every GPU and MIG slice. Raises NvmlUnavailable."""
    return _read_gpus(nvml, now=now)
