"""A sentence a layer below the renderers reports without wording it: a key and its values.

The actuator and the use cases say why a watch judged as it did ("2 restarts in new pods") and
why a write was refused or failed ("Deployment llm/vllm is not there") as a `Phrase`: a stable
key that the catalogs word under `phrase.` (bot/render/locales, `bot.render.phrases`) and the
values that wording needs; a value may be a Phrase itself (the leader StatefulSet's note of a
LeaderWorkerSet). Stored, a phrase is JSON (`to_json`: `{"phrase": KEY, "params": {...}}`);
`phrase_of` reads it back, and text stored before phrases existed stays the text it was.

>>> p = Phrase("watch.restarts_new", {"count": 2})
>>> p.to_json()
{'phrase': 'watch.restarts_new', 'params': {'count': 2}}
>>> phrase_of(p.to_json()) == p, phrase_of("2 restarts in new pods")
(True, '2 restarts in new pods')
>>> str(Phrase("watch.leader", {"note": Phrase("watch.on_delete")}))
'watch.leader(note=watch.on_delete)'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Phrase:
    """A catalog key (under `phrase.`) and the values its wording takes."""

    key: str
    params: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"phrase": self.key, "params": {k: phrase_json(v) for k, v in self.params.items()}}

    def __hash__(self) -> int:  # the values are a mapping: hashed as the compact form
        return hash(str(self))

    def to_stored(self) -> dict[str, Any]:  # `runbooks.model.serde`: stored as `to_json`
        return self.to_json()

    @classmethod
    def from_stored(cls, doc: dict[str, Any]) -> Phrase:
        found = phrase_of(doc)
        if not isinstance(found, Phrase):
            raise ValueError("not a phrase: expected {\"phrase\": KEY, \"params\": {...}}")
        return found

    def __str__(self) -> str:
        """A compact form for a log line (never shown to a person: the renderers word it)."""
        inner = ", ".join(f"{k}={v}" for k, v in self.params.items())
        return f"{self.key}({inner})" if inner else self.key


def phrase_json(value: Any) -> Any:
    """`value` as JSON: a Phrase as its `to_json`, a list, tuple or mapping item by item, else as it is."""
    if isinstance(value, Phrase):
        return value.to_json()
    if isinstance(value, list | tuple):
        return [phrase_json(v) for v in value]
    if isinstance(value, Mapping):
        return {k: phrase_json(v) for k, v in value.items()}
    return value


def phrase_of(doc: Any) -> Any:
    """What `phrase_json` wrote, read back: a Phrase from its JSON (its values too); anything
    else (text stored before phrases existed, a number) as it is."""
    if isinstance(doc, Phrase):
        return doc
    if isinstance(doc, dict) and isinstance(doc.get("phrase"), str):
        params = doc.get("params")
        return Phrase(doc["phrase"], {str(k): phrase_of(v) for k, v in (params if isinstance(params, dict) else {}).items()})
    if isinstance(doc, list):
        return [phrase_of(v) for v in doc]
    return doc


def clipped(value: Any, limit: int = 300) -> Any:
    """An error's value as an audit row keeps it: a Phrase as it is (stored as its JSON),
    anything else as text clipped to `limit` characters."""
    return value if isinstance(value, Phrase) else str(value)[:limit]
