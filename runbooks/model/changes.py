"""Typed changes: exactly what a recommended action would do to the workload.

A report prints an action's wording from its `params`; a plan applies its `changes`. Both
come from the same computation, so what was printed is what gets applied.

Kinds (`flag` names the field when a kind has several):
- `set_arg`: set one server flag of `container` (the engine's own flag name, without dashes)
  from `old` (None: not set, the engine default applies) to `new`;
- `scale`: Deployment replicas from `old` to `new`; `flag` "minReplicas" or "maxReplicas" when an
  HPA targets the Deployment and the change goes to the HPA instead (it would undo a replica change);
- `add_startup_probe`: a startupProbe on `container` that allows `new` seconds to load the model
  (`flag`: the health path it polls);
- `hpa_on_queue_depth`: an HPA on the engine's queue metric (`flag`), `new` waiting requests per pod;
- `lower_max_surge`: the rollout's `flag` ("maxSurge", None meaning it too, or "maxUnavailable")
  from `old` to `new`;
- `add_shm`: an emptyDir (medium Memory) of size `new` mounted at /dev/shm in `container`;
- `raise_memory_limit`: `container`'s memory limit (`flag` "limits.memory", None meaning it too,
  or "requests.memory") from `old` to `new`;
- `split_pools`: the runbook's long/short pool split of `container`'s Deployment (`flag`
  "threshold": `new` is the prompt length above which requests go to the long pool; a split's
  plans also name the objects they create and the confirmed routing with this kind).

>>> Change.set_arg("vllm", "max-num-seqs", 256, 112)
Change(kind='set_arg', container='vllm', flag='max-num-seqs', old=256, new=112)
>>> Change.scale(2, 3).describe()
'replicas 2 -> 3'
>>> Change.scale(2, 3, "minReplicas").describe()
'HPA minReplicas 2 -> 3'
>>> Change("add_shm", "vllm", None, None, "16Gi").describe()
'/dev/shm (none) -> emptyDir Memory 16Gi'
>>> Change("split_pools", "vllm", "threshold", None, 2048).describe()
'split pools: prompts over 2048 tokens to a long pool'
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

CHANGE_KINDS = ("set_arg", "scale", "add_startup_probe", "hpa_on_queue_depth", "lower_max_surge", "add_shm",
                "raise_memory_limit", "split_pools")


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
    def scale(cls, old: int | None, new: int, field: str | None = None) -> Change:
        """Replicas; `field` "minReplicas"/"maxReplicas" for the HPA that scales the workload."""
        return cls("scale", flag=field, old=old, new=new)

    def describe(self) -> str:
        """A one-line human diff ("--max-num-seqs 256 -> 112", "replicas 2 -> 3").

        >>> Change.set_arg(None, "gpu-memory-utilization", None, 0.88).describe()
        '--gpu-memory-utilization (default) -> 0.88'
        """
        old = "(default)" if self.old is None else _fmt(self.old)
        none = "(none)" if self.old is None else _fmt(self.old)
        if self.kind == "set_arg":
            return f"--{self.flag} {old} -> {_fmt(self.new)}"
        if self.kind == "scale":
            return f"HPA {self.flag} {old} -> {_fmt(self.new)}" if self.flag else f"replicas {old} -> {_fmt(self.new)}"
        if self.kind == "add_startup_probe":
            where = f"GET {self.flag}, " if self.flag else ""
            return f"startupProbe {none} -> {where}{_fmt(self.new)} s to start"
        if self.kind == "hpa_on_queue_depth":
            metric = self.flag or "queue depth"
            return f"HPA metrics {none} -> Pods {metric} average {_fmt(self.new)}"
        if self.kind == "lower_max_surge":
            return f"{self.flag or 'maxSurge'} {none} -> {_fmt(self.new)}"
        if self.kind == "add_shm":
            return f"/dev/shm {none} -> emptyDir Memory {_fmt(self.new)}"
        if self.kind == "raise_memory_limit":
            what = "memory request" if self.flag == "requests.memory" else "memory limit"
            return f"{what} {none} -> {_fmt(self.new)}"
        if self.kind == "split_pools" and self.flag == "threshold":
            return f"split pools: prompts over {_fmt(self.new)} tokens to a long pool"
        return f"{self.kind} {_fmt(self.new)}"

def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)
