"""Typed changes: exactly what a recommended action would do to the workload.

A report prints an action's wording from its `params`; a plan applies its `changes`. Both
come from the same computation, so what was printed is what gets applied.

`Change` is a union of frozen dataclasses, one per kind, each with its `kind` string and the
field that kind has under its own name. Every change has `old` and `new` (None: not set, the
default applies, or nothing there) and `container` (None: the server container, or a kind that
belongs to the workload or its HPA rather than to a container):

- `SetArg` (`set_arg`): one server `flag` of `container` (the engine's own flag name, without
  dashes); `new` None removes it so the engine default applies;
- `Scale` (`scale`): Deployment replicas; `hpa_field` "minReplicas" or "maxReplicas" when an HPA
  targets the Deployment and the change goes to the HPA instead (it would undo a replica change);
- `AddStartupProbe` (`add_startup_probe`): a startupProbe on `container` that allows `new`
  seconds to load the model, polling `health_path`;
- `HpaOnQueueDepth` (`hpa_on_queue_depth`): an HPA on the engine's queue `metric`, `new`
  waiting requests per pod;
- `LowerMaxSurge` (`lower_max_surge`): the rollout's `rollout_field` ("maxSurge", None meaning
  it too, or "maxUnavailable");
- `AddShm` (`add_shm`): an emptyDir (medium Memory) of size `new` mounted at /dev/shm;
- `RaiseMemoryLimit` (`raise_memory_limit`): `container`'s `memory_field` ("limits.memory",
  None meaning it too, or "requests.memory");
- `SplitPools` (`split_pools`): the runbook's long/short pool split of `container`'s
  Deployment; `part` "threshold" (`new`: the prompt length above which requests go to the long
  pool), or what a split's plan creates ("Deployment", "Service") and the confirmed "routing".

Plans and reports keep a change as `{"kind", "container", "flag", "old", "new"}` (`to_stored`;
`flag` holds the kind's own field), the shape stored plans have always had, so a plan stored
before the kinds were typed loads as the same typed change (`from_stored`) and hashes the same.

>>> SetArg("vllm", "max-num-seqs", 256, 112)
SetArg(container='vllm', flag='max-num-seqs', old=256, new=112, kind='set_arg')
>>> Scale(2, 3).describe()
'replicas 2 -> 3'
>>> Scale(2, 3, "minReplicas").describe()
'HPA minReplicas 2 -> 3'
>>> AddShm("vllm", None, "16Gi").describe()
'/dev/shm (none) -> emptyDir Memory 16Gi'
>>> SplitPools("vllm", "threshold", None, 2048).describe()
'split pools: prompts over 2048 tokens to a long pool'
>>> from_stored({"kind": "scale", "container": None, "flag": "minReplicas", "old": 2, "new": 3})
Scale(old=2, new=3, hpa_field='minReplicas', kind='scale')
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, Union


class _Kind:
    """What every change kind answers: its stored shape, its diff and the diff of its undoing."""

    kind: str
    old: Any
    new: Any
    #: the kind's own field kept in the stored shape's `flag` key (None: the kind has none)
    SLOT: ClassVar[str | None] = None

    @property
    def slot(self) -> str | None:
        """The value of the kind's own field (a flag, an HPA field, a metric, a health path, ...),
        as plans, reports and JSON keep it under `flag`."""
        return getattr(self, self.SLOT) if self.SLOT else None

    def to_stored(self) -> dict[str, Any]:
        """`{"kind", "container", "flag", "old", "new"}`: how plans and reports keep a change."""
        return {"kind": self.kind, "container": getattr(self, "container", None), "flag": self.slot,
                "old": self.old, "new": self.new}

    @classmethod
    def from_stored(cls, doc: Any) -> Change:
        """The change of this kind from its stored shape; ValueError for another kind or shape."""
        change = from_stored(doc)
        if not isinstance(change, cls):
            raise ValueError(f"expected a change of kind {cls.kind!r}, got {doc.get('kind')!r}")
        return change

    def describe(self) -> str:
        """A one-line human diff ("--max-num-seqs 256 -> 112", "replicas 2 -> 3")."""
        raise NotImplementedError

    def restored(self) -> str | None:
        """The change undone, in the plan's own notation, the arrow pointing at the value
        restored; None for a change gpumem does not write (a pool split's confirmed routing)."""
        return f"{self.kind} {_value(self.new, '(none)')} -> {_value(self.old, '(none)')}"


@dataclass(frozen=True)
class SetArg(_Kind):
    """One server flag of `container`, in the engine's own spelling without dashes.

    >>> SetArg(None, "gpu-memory-utilization", None, 0.88).describe()
    '--gpu-memory-utilization (default) -> 0.88'
    >>> SetArg("vllm", "enforce-eager", None, True).restored()
    '--enforce-eager True -> (default)'
    """

    container: str | None
    flag: str
    old: Any = None
    new: Any = None
    kind: Literal["set_arg"] = "set_arg"
    SLOT: ClassVar[str | None] = "flag"

    def describe(self) -> str:
        return f"--{self.flag} {_value(self.old, '(default)')} -> {_fmt(self.new)}"

    def restored(self) -> str | None:
        return f"--{self.flag} {_value(self.new, '(default)')} -> {_value(self.old, '(default)')}"


@dataclass(frozen=True)
class Scale(_Kind):
    """Replicas; `hpa_field` "minReplicas"/"maxReplicas" for the HPA that scales the workload.

    >>> Scale(2, 3, "minReplicas").restored()
    'HPA minReplicas 3 -> 2'
    """

    old: int | None
    new: int
    hpa_field: Literal["minReplicas", "maxReplicas"] | None = None
    kind: Literal["scale"] = "scale"
    SLOT: ClassVar[str | None] = "hpa_field"

    @property
    def container(self) -> None:
        return None

    def describe(self) -> str:
        what = f"HPA {self.hpa_field}" if self.hpa_field else "replicas"
        return f"{what} {_value(self.old, '(default)')} -> {_fmt(self.new)}"

    def restored(self) -> str | None:
        what = f"HPA {self.hpa_field}" if self.hpa_field else "replicas"
        return f"{what} {_value(self.new, '(default)')} -> {_value(self.old, '(default)')}"


@dataclass(frozen=True)
class AddStartupProbe(_Kind):
    """A startupProbe on `container` allowing `new` seconds to start (`old`: the budget of the
    one there, None without one), polling `health_path`."""

    container: str | None
    health_path: str | None = None
    old: int | None = None
    new: int | None = None
    kind: Literal["add_startup_probe"] = "add_startup_probe"
    SLOT: ClassVar[str | None] = "health_path"

    def describe(self) -> str:
        where = f"GET {self.health_path}, " if self.health_path else ""
        return f"startupProbe {_value(self.old, '(none)')} -> {where}{_fmt(self.new)} s to start"

    def restored(self) -> str | None:
        where = f"GET {self.health_path}, " if self.health_path else ""
        was = "(none)" if self.old is None else f"{_value(self.old, '')} s to start"
        return f"startupProbe {where}{_value(self.new, '')} s to start -> {was}"


@dataclass(frozen=True)
class HpaOnQueueDepth(_Kind):
    """An HPA on the engine's queue `metric` (None: the engine's own), `new` waiting requests per
    pod on average; `old` the metrics of the HPA there, in words."""

    metric: str | None = None
    old: str | None = None
    new: Any = None
    kind: Literal["hpa_on_queue_depth"] = "hpa_on_queue_depth"
    SLOT: ClassVar[str | None] = "metric"

    @property
    def container(self) -> None:
        return None

    def describe(self) -> str:
        return f"HPA metrics {_value(self.old, '(none)')} -> Pods {self.metric or 'queue depth'} average {_fmt(self.new)}"

    def restored(self) -> str | None:
        return (f"HPA metrics Pods {self.metric or 'queue depth'} average {_value(self.new, '')} -> "
                f"{_value(self.old, '(none)')}")


@dataclass(frozen=True)
class LowerMaxSurge(_Kind):
    """The rollout's `rollout_field` (None: maxSurge) from `old` to `new`."""

    rollout_field: Literal["maxSurge", "maxUnavailable"] | None = "maxSurge"
    old: Any = None
    new: Any = None
    kind: Literal["lower_max_surge"] = "lower_max_surge"
    SLOT: ClassVar[str | None] = "rollout_field"

    @property
    def container(self) -> None:
        return None

    def describe(self) -> str:
        return f"{self.rollout_field or 'maxSurge'} {_value(self.old, '(none)')} -> {_fmt(self.new)}"

    def restored(self) -> str | None:
        return f"{self.rollout_field or 'maxSurge'} {_value(self.new, '(none)')} -> {_value(self.old, '(none)')}"


@dataclass(frozen=True)
class AddShm(_Kind):
    """An emptyDir of medium Memory, sizeLimit `new`, at /dev/shm in `container`.

    >>> AddShm("vllm", None, "16Gi").restored()
    '/dev/shm emptyDir Memory 16Gi -> (none)'
    """

    container: str | None
    old: str | None = None
    new: str | None = None
    kind: Literal["add_shm"] = "add_shm"

    def describe(self) -> str:
        return f"/dev/shm {_value(self.old, '(none)')} -> emptyDir Memory {_fmt(self.new)}"

    def restored(self) -> str | None:
        was = "(none)" if self.old is None else f"emptyDir Memory {_value(self.old, '')}"
        return f"/dev/shm emptyDir Memory {_value(self.new, '')} -> {was}"


@dataclass(frozen=True)
class RaiseMemoryLimit(_Kind):
    """`container`'s `memory_field` (None: limits.memory) from `old` to `new` (None: raised by
    the planner's default step)."""

    container: str | None
    memory_field: Literal["limits.memory", "requests.memory"] | None = "limits.memory"
    old: str | None = None
    new: str | None = None
    kind: Literal["raise_memory_limit"] = "raise_memory_limit"
    SLOT: ClassVar[str | None] = "memory_field"

    def _what(self) -> str:
        return "memory request" if self.memory_field == "requests.memory" else "memory limit"

    def describe(self) -> str:
        return f"{self._what()} {_value(self.old, '(none)')} -> {_fmt(self.new)}"

    def restored(self) -> str | None:
        return f"{self._what()} {_value(self.new, '(none)')} -> {_value(self.old, '(none)')}"


@dataclass(frozen=True)
class SplitPools(_Kind):
    """The long/short pool split: `part` "threshold" (`new` prompt tokens), or one thing a split's
    plan does ("Deployment", "Service": `new` says what it creates; "routing": who confirmed it)."""

    container: str | None
    part: Literal["threshold", "Deployment", "Service", "routing"] | None = "threshold"
    old: Any = None
    new: Any = None
    kind: Literal["split_pools"] = "split_pools"
    SLOT: ClassVar[str | None] = "part"

    def describe(self) -> str:
        if self.part == "threshold":
            return f"split pools: prompts over {_fmt(self.new)} tokens to a long pool"
        return f"{self.kind} {_fmt(self.new)}"

    def restored(self) -> str | None:
        return None if self.part == "routing" else super().restored()


Change = Union[SetArg, Scale, AddStartupProbe, HpaOnQueueDepth, LowerMaxSurge, AddShm,  # noqa: UP007
               RaiseMemoryLimit, SplitPools]
#: kind string -> its class
KINDS: dict[str, type[_Kind]] = {cls.kind: cls for cls in (SetArg, Scale, AddStartupProbe, HpaOnQueueDepth,  # type: ignore[misc]
                                                          LowerMaxSurge, AddShm, RaiseMemoryLimit, SplitPools)}
CHANGE_KINDS = tuple(KINDS)


def change_of(kind: str, container: str | None = None, flag: str | None = None, old: Any = None,
              new: Any = None) -> Change:
    """The typed change from the five values plans and reports keep (`flag`: the kind's own
    field). Raises ValueError for a kind gpumem does not know.

    >>> change_of("add_startup_probe", "vllm", "/health", None, 600)
    AddStartupProbe(container='vllm', health_path='/health', old=None, new=600, kind='add_startup_probe')
    """
    cls = KINDS.get(kind)
    if cls is None:
        raise ValueError(f"unknown change kind {kind!r} (known: {', '.join(CHANGE_KINDS)})")
    names = {f.name for f in fields(cls)}  # type: ignore[arg-type]
    values: dict[str, Any] = {"old": old, "new": new}
    if "container" in names:
        values["container"] = container
    if cls.SLOT is not None:
        values[cls.SLOT] = flag
    return cls(**values)  # type: ignore[return-value]


def from_stored(doc: Any) -> Change:
    """A change from its stored shape (`to_stored`). Raises ValueError for another shape."""
    if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
        raise ValueError("expected an object with a kind")
    return change_of(doc["kind"], doc.get("container"), doc.get("flag"), doc.get("old"), doc.get("new"))


def _fmt(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _value(value: Any, none: str) -> str:
    return none if value is None else _fmt(value)
