"""JSON round-trip for the frozen dataclasses of runbooks (evidence, report).

A dataclass that keeps a shape of its own defines `to_stored()` and a classmethod
`from_stored(doc)` (a typed change keeps the shape plans were stored in before it was typed).
A union of dataclasses tagged by a `kind` default is read by the document's `kind`.

>>> from runbooks.model.evidence import ReadIssue
>>> from_jsonable(ReadIssue, to_jsonable(ReadIssue("a.txt", "bad", 3)))
ReadIssue(source='a.txt', message='bad', line=3, kind='unreadable')
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from datetime import datetime
from functools import cache
from typing import Any, Union


class SerdeError(ValueError):
    """A JSON document does not have the shape of the dataclass it should become."""


def to_jsonable(obj: Any) -> Any:
    """Turn dataclasses, tuples, datetimes and floats into JSON-ready values.

    Infinite floats become the strings "+Inf"/"-Inf" (JSON has no infinity); NaN becomes None.
    """
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if hasattr(obj, "to_stored"):
            return to_jsonable(obj.to_stored())
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, datetime):
        return obj.isoformat()
    if isinstance(obj, float):
        if math.isnan(obj):
            return None
        if math.isinf(obj):
            return "+Inf" if obj > 0 else "-Inf"
        return obj
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    return obj


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _tagged(args: tuple[Any, ...]) -> dict[Any, Any]:
    """The dataclasses of a union by their `kind` default (a string), when they have one."""
    out = {}
    for arg in args:
        if dataclasses.is_dataclass(arg):
            kind = getattr(arg, "kind", None)
            if isinstance(kind, str):
                out[kind] = arg
    return out


def fields_from_jsonable(tp: Any, data: dict[str, Any], path: str = "$", skip: tuple[str, ...] = ()) -> dict[str, Any]:
    """The fields of dataclass `tp` rebuilt from `data` (those present, less `skip`): what a
    `from_stored` hook hands the constructor beside the fields it reads itself."""
    hints = _hints(tp)
    return {f.name: from_jsonable(hints[f.name], data[f.name], f"{path}.{f.name}")
            for f in dataclasses.fields(tp) if f.name in data and f.name not in skip}


def from_jsonable(tp: Any, data: Any, path: str = "$") -> Any:
    """Rebuild a value of type `tp` from `to_jsonable` output. Raises SerdeError naming the path."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return data
    if origin in (Union, types.UnionType):
        args = typing.get_args(tp)
        if data is None and type(None) in args:
            return None
        tagged = _tagged(args)
        if isinstance(data, dict) and data.get("kind") in tagged:
            return from_jsonable(tagged[data["kind"]], data, path)
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return from_jsonable(arg, data, path)
            except SerdeError as e:
                errors.append(str(e))
        raise SerdeError(f"{path}: {errors[0] if errors else 'unexpected null'}")
    if dataclasses.is_dataclass(tp):
        if not isinstance(data, dict):
            raise SerdeError(f"{path}: expected an object for {tp.__name__}")
        if hasattr(tp, "from_stored"):
            try:
                return tp.from_stored(data)
            except (TypeError, ValueError) as e:
                raise SerdeError(f"{path}: {e}") from e
        try:
            return tp(**fields_from_jsonable(tp, data, path))
        except TypeError as e:
            raise SerdeError(f"{path}: {e}") from e
    if origin is tuple:
        args = typing.get_args(tp)
        if not isinstance(data, list):
            raise SerdeError(f"{path}: expected a list")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(from_jsonable(args[0], v, f"{path}[{i}]") for i, v in enumerate(data))
        if len(args) != len(data):
            raise SerdeError(f"{path}: expected {len(args)} items")
        return tuple(from_jsonable(a, v, f"{path}[{i}]") for i, (a, v) in enumerate(zip(args, data, strict=True)))
    if origin is dict:
        kt, vt = typing.get_args(tp)
        if not isinstance(data, dict):
            raise SerdeError(f"{path}: expected an object")
        return {from_jsonable(kt, k, path): from_jsonable(vt, v, f"{path}.{k}") for k, v in data.items()}
    if origin is list:
        (vt,) = typing.get_args(tp)
        if not isinstance(data, list):
            raise SerdeError(f"{path}: expected a list")
        return [from_jsonable(vt, v, f"{path}[{i}]") for i, v in enumerate(data)]
    if tp is datetime:
        if not isinstance(data, str):
            raise SerdeError(f"{path}: expected an ISO time string")
        try:
            return datetime.fromisoformat(data)
        except ValueError as e:
            raise SerdeError(f"{path}: {e}") from e
    if tp is float:
        if data in ("+Inf", "Inf"):
            return math.inf
        if data == "-Inf":
            return -math.inf
        if isinstance(data, bool) or not isinstance(data, (int, float)):
            raise SerdeError(f"{path}: expected a number")
        return float(data)
    if tp is int:
        if isinstance(data, bool) or not isinstance(data, int):
            raise SerdeError(f"{path}: expected an integer")
        return data
    if tp is bool:
        if not isinstance(data, bool):
            raise SerdeError(f"{path}: expected true or false")
        return data
    if tp is str:
        if not isinstance(data, str):
            raise SerdeError(f"{path}: expected a string")
        return data
    raise SerdeError(f"{path}: unsupported type {tp!r}")
