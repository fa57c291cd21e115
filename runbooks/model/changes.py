"""Typed changes: exactly what a recommended action would do to the workload.

A report prints an action's wording from its `params`; a plan applies its `changes`. Both
come from the same computation, so what was printed is what gets applied.

Kinds:
- `set_arg`: set one server flag of `container` (the engine's own flag name, without dashes)
  from `old` (None: not set, the engine default applies) to `new`;
- `scale`: Deployment replicas from `old` to `new`;
- `add_startup_probe`: a startupProbe that allows `new` seconds to load the model;
- `hpa_on_queue_depth`: an HPA on the engine's queue depth, `new` waiting requests per pod.

>>> Change.set_arg("vllm", "max-num-seqs", 256, 112)
Change(kind='set_arg', container='vllm', flag='max-num-seqs', old=256, new=112)
>>> Change.scale(2, 3).describe()
'replicas 2 -> 3'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHANGE_KINDS = ("set_arg", "scale", "add_startup_probe", "hpa_on_queue_depth")


@dataclass(frozen=True)
class Change:
    kind: str
    container: str | None = None
    flag: str | None = None
    old: Any = None
    new: Any = None

    @classmethod
    def set_arg(cls, container: str | None, flag: str, old: Any, new: Any) -> Change:
        return cls("set_arg", container, flag, old, new)

    @classmethod
    def scale(cls, old: int | None, new: int) -> Change:
        return cls("scale", old=old, new=new)

    def describe(self) -> str:
        """A one-line human diff ("--max-num-seqs 256 -> 112", "replicas 2 -> 3").

        >>> Change.set_arg(None, "gpu-memory-utilization", None, 0.88).describe()
        '--gpu-memory-utilization (default) -> 0.88'
        """
        old = "(default)" if self.old is None else _fmt(self.old)
        if self.kind == "set_arg":
            return f"--{self.flag} {old} -> {_fmt(self.new)}"
        if self.kind == "scale":
            return f"replicas {old} -> {_fmt(self.new)}"
        return f"{self.kind} {_fmt(self.new)}"


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
