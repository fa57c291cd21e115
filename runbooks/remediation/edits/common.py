"""What every kind's editor shares: its result, its refusal, and the patch operations it writes.

Every editor reads the object as it is now and returns the typed changes (old -> new, for the
human diff) and RFC 6902 operations that `test` each old value before replacing it; an added
list element goes at its explicit index (never `/-`), so `bot.actuator.apply.inverse_ops` can
turn each patch around for the rollback. Values are written as the API server stores them
(probes with their defaults, quantities in canonical form), so the object re-read after the
write holds exactly what the patch says and a rollback's `test` finds it.

Bad input is a UsageError `invalid_field` naming the field, never a traceback; a number or a
quantity outside what gpumem plans (`runbooks.remediation.value_ranges.OPTIONS`, `MEMORY_BYTES`)
is UsageError `flag_value_out_of_range` naming the option, the value and the range.

>>> set_op("/spec/replicas", True, 2, 3)
[{'op': 'test', 'path': '/spec/replicas', 'value': 2}, {'op': 'replace', 'path': '/spec/replicas', 'value': 3}]
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from runbooks.model.changes import Change
from runbooks.model.errors import UsageError
from runbooks.model.phrases import Phrase


@dataclass(frozen=True)
class KindEdit:
    """The typed changes and the operations on the object (`ops`), or the object to create."""

    changes: tuple[Change, ...]
    ops: tuple[dict[str, Any], ...] = ()
    create: dict[str, Any] | None = None


def invalid(field: str, value: Any, why: Phrase) -> UsageError:
    """A refused value: the field, the value as given (a `Phrase` where it is a description,
    "(none)"), why (the renderers word it)."""
    return UsageError("invalid_field", field=field, value=value if isinstance(value, Phrase) else str(value), why=why)


def get_in(obj: Any, *keys: str) -> Any:
    """`obj[k1][k2]...`, None where a level is missing or not a mapping."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def set_op(path: str, present: bool, old: Any, new: Any) -> list[dict[str, Any]]:
    """`test` old then `replace` when the field is there, else `add`."""
    if present:
        return [{"op": "test", "path": path, "value": copy.deepcopy(old)},
                {"op": "replace", "path": path, "value": copy.deepcopy(new)}]
    return [{"op": "add", "path": path, "value": copy.deepcopy(new)}]


def append_op(path: str, items: Any, item: dict[str, Any], field: str) -> list[dict[str, Any]]:
    """Add `item` at the end of the list at `path` by its index (a missing list is added whole)."""
    if items is None:
        return [{"op": "add", "path": path, "value": [copy.deepcopy(item)]}]
    if not isinstance(items, list):
        raise invalid(field, type(items).__name__, Phrase("reason.not_a_list"))
    return [{"op": "add", "path": f"{path}/{len(items)}", "value": copy.deepcopy(item)}]
