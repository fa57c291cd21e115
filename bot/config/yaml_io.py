"""Typed reads from a YAML document that remember where each value came from.

Every error names the file, the 1-based line and the dotted field, so a typo in a config file
points at itself:

    gpumem.yaml:12: workers.pool_size: expected a whole number, got 'four'
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_NULL = "tag:yaml.org,2002:null"
_BOOL = "tag:yaml.org,2002:bool"
_INT = "tag:yaml.org,2002:int"
_FLOAT = "tag:yaml.org,2002:float"

Path_ = tuple[str | int, ...]


class SettingsError(Exception):
    """The configuration cannot be used; the message says where and what to change."""


class YamlDoc:
    def __init__(self, source: str, root: Node | None):
        self.source = source
        self.root = root

    @classmethod
    def empty(cls) -> YamlDoc:
        return cls("(no config file)", None)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> YamlDoc:
        name = os.fspath(path)
        try:
            with open(name, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as e:
            raise SettingsError(f"{name}: cannot read the config file: {e.strerror or e}") from None
        except UnicodeDecodeError as e:
            raise SettingsError(f"{name}: not UTF-8 text ({e.reason})") from None
        try:
            root = yaml.compose(text, Loader=yaml.SafeLoader)
        except yaml.MarkedYAMLError as e:
            line = e.problem_mark.line + 1 if e.problem_mark else "?"
            raise SettingsError(f"{name}:{line}: not valid YAML: {e.problem or e}") from None
        except yaml.YAMLError as e:
            raise SettingsError(f"{name}: not valid YAML: {e}") from None
        if root is not None and root.tag == _NULL:
            root = None
        if root is not None and not isinstance(root, MappingNode):
            raise SettingsError(f"{name}:{root.start_mark.line + 1}: the config file must be a mapping of fields")
        doc = cls(name, root)
        doc._check_duplicates(root, ())
        return doc

    # ------------------------------------------------------------------ navigation

    def _node(self, path: Path_) -> Node | None:
        node = self.root
        for part in path:
            if node is None:
                return None
            if isinstance(part, int):
                if not isinstance(node, SequenceNode) or part >= len(node.value):
                    return None
                node = node.value[part]
            else:
                if not isinstance(node, MappingNode):
                    return None
                node = next((v for k, v in node.value if isinstance(k, ScalarNode) and k.value == part), None)
        if node is not None and node.tag == _NULL:
            return None
        return node

    def _line(self, path: Path_) -> int | None:
        for cut in range(len(path), -1, -1):
            node = self._node(path[:cut]) if cut else self.root
            if node is not None:
                return node.start_mark.line + 1
        return None

    def fail(self, path: Path_, message: str) -> None:
        """Raise a SettingsError naming the file, the line and the field."""
        line = self._line(path)
        where = f"{self.source}:{line}" if line else self.source
        field = ".".join(str(p) for p in path) or "(top)"
        raise SettingsError(f"{where}: {field}: {message}")

    def has(self, path: Path_) -> bool:
        return self._node(path) is not None

    def _check_duplicates(self, node: Node | None, path: Path_) -> None:
        if isinstance(node, MappingNode):
            seen: set[str] = set()
            for k, v in node.value:
                key = k.value if isinstance(k, ScalarNode) else "?"
                if key in seen:
                    raise SettingsError(f"{self.source}:{k.start_mark.line + 1}: "
                                        f"{'.'.join(map(str, (*path, key)))}: duplicate field")
                seen.add(key)
                self._check_duplicates(v, (*path, key))
        elif isinstance(node, SequenceNode):
            for i, v in enumerate(node.value):
                self._check_duplicates(v, (*path, i))

    # ------------------------------------------------------------------ typed reads

    def _mapping(self, path: Path_) -> MappingNode | None:
        node = self._node(path)
        if node is not None and not isinstance(node, MappingNode):
            self.fail(path, "expected a mapping of fields")
        return node  # type: ignore[return-value]

    def keys(self, path: Path_) -> list[str]:
        node = self._mapping(path)
        return [str(k.value) for k, _ in node.value] if node is not None else []

    def only_keys(self, path: Path_, allowed: tuple[str, ...]) -> None:
        for key in self.keys(path):
            if key not in allowed:
                self.fail((*path, key), f"unknown field; known here: {', '.join(allowed)}")

    def list_len(self, path: Path_) -> int:
        node = self._node(path)
        if node is None:
            return 0
        if not isinstance(node, SequenceNode):
            self.fail(path, "expected a list")
        return len(node.value)

    def _scalar(self, path: Path_) -> ScalarNode | None:
        node = self._node(path)
        if node is not None and not isinstance(node, ScalarNode):
            self.fail(path, "expected a single value")
        return node  # type: ignore[return-value]

    def opt_str(self, path: Path_) -> str | None:
        node = self._scalar(path)
        if node is None:
            return None
        value = str(node.value).strip()
        return value or None

    def opt_bool(self, path: Path_) -> bool | None:
        node = self._scalar(path)
        if node is None:
            return None
        if node.tag != _BOOL:
            self.fail(path, f"expected true or false, got {node.value!r}")
        return str(node.value).lower() in ("true", "yes", "on")

    def str_list(self, path: Path_) -> tuple[str, ...]:
        out = []
        for i in range(self.list_len(path)):
            value = self.opt_str((*path, i))
            if value is None:
                self.fail((*path, i), "empty entry")
            out.append(str(value))
        return tuple(out)

    def str_map(self, path: Path_) -> dict[str, str]:
        out = {}
        for key in self.keys(path):
            value = self.opt_str((*path, key))
            if value is None:
                self.fail((*path, key), "empty value")
            out[key] = str(value)
        return out

    def check_choice(self, path: Path_, value: str, choices: tuple[str, ...]) -> None:
        if value not in choices:
            self.fail(path, f"{value!r} is not one of {', '.join(choices)}")

    def ints(self, path: Path_, defaults: Any, only: tuple[str, ...] | None = None) -> dict[str, int]:
        """Whole numbers >= 1 for the fields of the `defaults` dataclass present under `path`."""
        return self._numbers(path, defaults, only, _INT, int, "a whole number")

    def floats(self, path: Path_, defaults: Any, only: tuple[str, ...] | None = None) -> dict[str, float]:
        """Positive numbers (seconds) for the fields of the `defaults` dataclass under `path`."""
        return self._numbers(path, defaults, only, (_INT, _FLOAT), float, "a number")

    def _numbers(self, path: Path_, defaults: Any, only: tuple[str, ...] | None, tags: Any, cast: Any,
                 what: str) -> dict[str, Any]:
        names = only or tuple(f.name for f in dataclasses.fields(defaults))
        if only is None:
            self.only_keys(path, names)
        out = {}
        for name in names:
            node = self._scalar((*path, name))
            if node is None:
                continue
            if node.tag not in (tags if isinstance(tags, tuple) else (tags,)):
                self.fail((*path, name), f"expected {what}, got {node.value!r}")
            value = cast(float(node.value)) if cast is int else cast(node.value)
            minimum = 0 if name in ("queue_length", "port") else 0.000001
            if value < minimum:
                self.fail((*path, name), f"must be {'0 or more' if minimum == 0 else 'more than 0'}, got {value}")
            out[name] = value
        return out
