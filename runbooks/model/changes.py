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

import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, ClassVar, Literal, Union

#: the words of a change's notation: `words(key, **values)` -> text, one key of `WORDS`
Words = Callable[..., str]

#: the notation's own words in English, what plans store and --json gives; the renderers word
#: them per language from the catalogs (`change_words` there, the same keys)
WORDS: dict[str, str] = {
    "default": "(default)",
    "none": "(none)",
    "replicas": "replicas",
    "memory_limit": "memory limit",
    "memory_request": "memory request",
    "to_start": "{seconds} s to start",
    "hpa_metrics": "HPA metrics",
    "pods_average": "Pods {metric} average {value}",
    "queue_depth": "queue depth",
    "split_threshold": "split pools: prompts over {tokens} tokens to a long pool",
    "split_threshold_undone": "one pool again: prompts over {tokens} tokens no longer go to a long pool",
    "split_creates": "create {what}",
    "split_deletes": "delete {what}",
    "split_routing": "routing confirmed by {who}: prompts over {tokens} tokens to {service}",
    "split_part": "pool split {part}: {value}",
}


def english(key: str, **values: Any) -> str:
    """One of `WORDS`, its values filled in."""
    return WORDS[key].format(**values)



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

    def describe(self, words: Words | None = None) -> str:
        """A one-line diff ("--max-num-seqs 256 -> 112", "replicas 2 -> 3"), its words from
        `words` (`WORDS`, English, by default; the renderers pass their language's)."""
        raise NotImplementedError

    def restored(self, words: Words | None = None) -> str | None:
        """The change undone, in the plan's own notation, the arrow pointing at the value
        restored; None for a change gpumem does not write (a pool split's confirmed routing)."""
        w = words or english
        return f"{self.kind} {_value(self.new, w('none'))} -> {_value(self.old, w('none'))}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        return f"--{self.flag} {_value(self.old, w('default'))} -> {_value(self.new, w('default'))}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        return f"--{self.flag} {_value(self.new, w('default'))} -> {_value(self.old, w('default'))}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        what = f"HPA {self.hpa_field}" if self.hpa_field else w("replicas")
        return f"{what} {_value(self.old, w('default'))} -> {_fmt(self.new)}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        what = f"HPA {self.hpa_field}" if self.hpa_field else w("replicas")
        return f"{what} {_value(self.new, w('default'))} -> {_value(self.old, w('default'))}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        where = f"GET {self.health_path}, " if self.health_path else ""
        return f"startupProbe {_value(self.old, w('none'))} -> {where}{w('to_start', seconds=_fmt(self.new))}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        where = f"GET {self.health_path}, " if self.health_path else ""
        was = w("none") if self.old is None else w("to_start", seconds=_value(self.old, ""))
        return f"startupProbe {where}{w('to_start', seconds=_value(self.new, ''))} -> {was}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        now = w("pods_average", metric=self.metric or w("queue_depth"), value=_fmt(self.new))
        return f"{w('hpa_metrics')} {_value(self.old, w('none'))} -> {now}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        was = w("pods_average", metric=self.metric or w("queue_depth"), value=_value(self.new, ""))
        return f"{w('hpa_metrics')} {was} -> {_value(self.old, w('none'))}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        return f"{self.rollout_field or 'maxSurge'} {_value(self.old, w('none'))} -> {_value(self.new, w('none'))}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        return f"{self.rollout_field or 'maxSurge'} {_value(self.new, w('none'))} -> {_value(self.old, w('none'))}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        return f"/dev/shm {_value(self.old, w('none'))} -> emptyDir Memory {_fmt(self.new)}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        was = w("none") if self.old is None else f"emptyDir Memory {_value(self.old, '')}"
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

    def _what(self, w: Words) -> str:
        return w("memory_request") if self.memory_field == "requests.memory" else w("memory_limit")

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        return f"{self._what(w)} {_value(self.old, w('none'))} -> {_value(self.new, w('none'))}"

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        return f"{self._what(w)} {_value(self.new, w('none'))} -> {_value(self.old, w('none'))}"


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

    def describe(self, words: Words | None = None) -> str:
        w = words or english
        if self.part == "threshold":
            return w("split_threshold", tokens=_value(self.new, w("default")))
        text = _value(self.new, w("none"))
        if self.part in ("Deployment", "Service") and text.startswith("create "):
            return w("split_creates", what=text.removeprefix("create "))
        routed = _ROUTING.fullmatch(text) if self.part == "routing" else None
        if routed:
            return w("split_routing", who=routed["who"], tokens=routed["tokens"], service=routed["service"])
        return w("split_part", part=self.part or "threshold", value=text)

    def restored(self, words: Words | None = None) -> str | None:
        w = words or english
        if self.part == "routing":
            return None
        if self.part == "threshold":
            return w("split_threshold_undone", tokens=_value(self.new, w("default")))
        text = _value(self.new, w("none"))
        return w("split_deletes", what=text.removeprefix("create "))


#: how a split's plan records the routing someone confirmed (`bot.service.split_pools`)
_ROUTING = re.compile(r"confirmed by (?P<who>.+?): prompt tokens > (?P<tokens>\d+) -> (?P<service>\S+)")


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
