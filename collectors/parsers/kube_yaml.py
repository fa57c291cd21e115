"""Kubernetes objects from file text: multi-document YAML, `kind: List`, or JSON.

>>> [o["metadata"]["name"] for o in load_yaml_documents(
...     "kind: List\\nitems:\\n- {kind: Pod, metadata: {name: a}}\\n---\\nkind: Pod\\nmetadata: {name: b}\\n", "pods.yaml")]
['a', 'b']
"""

from __future__ import annotations

import json
from typing import Any

import yaml

from collectors.errors import ParseError, field, kind_of, noun, quoted, said

try:  # the C loader is several times faster on large pod lists
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]


def load_yaml_documents(text: str, source: str) -> list[dict[str, Any]]:
    """Every object in the text, Lists unpacked. Each object has a string `kind`.

    Items of a typed list (`PodList` from the API) without their own `kind` get the list's
    item kind. Raises ParseError with the 1-based line for text that is not YAML/JSON, and for
    documents that are not objects.
    """
    if not isinstance(text, str):
        raise ParseError(source, said("expected", what=noun("text")))
    body = text.lstrip("\ufeff")
    documents = _json_document(body)
    if documents is None:
        documents = _yaml_documents(body, source)
    objects: list[dict[str, Any]] = []
    for data, line in documents:
        if data is None:
            continue
        if isinstance(data, list):  # a bare JSON array of objects
            objects.extend(_list_items(data, None, source, line))
            continue
        if not isinstance(data, dict):
            raise ParseError(source, said("expected_got", what=noun("kubernetes_object"), got=kind_of(data)), line=line)
        kind = data.get("kind")
        if not isinstance(kind, str) or not kind:
            raise ParseError(source, field("kind", said("missing")), line=line)
        if kind.endswith("List") and "items" in data:
            objects.extend(_list_items(data["items"], kind, source, line))
        else:
            objects.append(data)
    return objects


def _list_items(items: Any, list_kind: str | None, source: str, line: int | None) -> list[dict[str, Any]]:
    if items is None:
        return []
    if not isinstance(items, list):
        raise ParseError(source, field("items", said("expected", what=noun("list"))), line=line)
    item_kind = list_kind[: -len("List")] if list_kind and list_kind != "List" else None
    out = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ParseError(source, field(f"items[{i}]", said("expected", what=noun("mapping"))), line=line)
        kind = item.get("kind")
        if not isinstance(kind, str) or not kind:
            if item_kind is None:
                raise ParseError(source, field(f"items[{i}].kind", said("missing")), line=line)
            item = {**item, "kind": item_kind}
        out.append(item)
    return out


def _json_document(body: str) -> list[tuple[Any, int | None]] | None:
    stripped = body.strip()
    if not stripped.startswith(("{", "[")):
        return None
    try:
        return [(json.loads(stripped), 1)]
    except (ValueError, RecursionError):
        return None  # maybe YAML flow style; the YAML loader reports the error with its line


def _yaml_documents(body: str, source: str) -> list[tuple[Any, int | None]]:
    loader = _Loader(body)
    documents: list[tuple[Any, int | None]] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            line = node.start_mark.line + 1 if node is not None else None
            documents.append((loader.construct_document(node), line))
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        raise ParseError(source, said("not_yaml", detail=quoted(e.problem or e.context)),
                         line=mark.line + 1 if mark else None) from e
    except yaml.YAMLError as e:
        position = getattr(e, "position", None)
        line = body.count("\n", 0, position) + 1 if isinstance(position, int) else None
        raise ParseError(source, said("not_yaml", detail=quoted(e)), line=line) from e
    except (ValueError, TypeError, OverflowError, RecursionError) as e:
        # PyYAML's constructors raise plain errors for values such as `2024-02-30`.
        raise ParseError(source, said("not_yaml", detail=quoted(e))) from e
    finally:
        loader.dispose()
    return documents
