"""Label selectors: a workload's selector as a `labelSelector` query, and matching labels
client-side (Services, PodDisruptionBudgets).

>>> selector_query({"matchLabels": {"app": "vllm"},
...                 "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu", "big"]}]})
'app=vllm,tier in (big,gpu)'
>>> selector_matches({"matchLabels": {"app": "vllm"}}, {"app": "vllm", "pod-template-hash": "7d9c"})
True
"""

from __future__ import annotations

from typing import Any

from collectors.errors import quoted, said
from collectors.parsers.kube_fields import as_list, as_mapping, as_str, fail, str_map

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


def _requirements(selector: Any, path: str, source: str) -> list[tuple[str, str, tuple[str, ...]]]:
    """(key, operator, values) for matchLabels (as In with one value) and matchExpressions."""
    sel = as_mapping(selector, path, source)
    reqs = [(k, "In", (v,)) for k, v in sorted(str_map(sel.get("matchLabels"), f"{path}.matchLabels", source).items())]
    for i, item in enumerate(as_list(sel.get("matchExpressions"), f"{path}.matchExpressions", source)):
        where = f"{path}.matchExpressions[{i}]"
        expr = as_mapping(item, where, source)
        key = as_str(expr.get("key"), f"{where}.key", source)
        op = as_str(expr.get("operator"), f"{where}.operator", source)
        if not key:
            raise fail(source, f"{where}.key", said("missing"))
        if op not in _OPERATORS:
            raise fail(source, f"{where}.operator", said("one_of", choices=", ".join(_OPERATORS), got=quoted(repr(op))))
        values = []
        for j, value in enumerate(as_list(expr.get("values"), f"{where}.values", source)):
            text = as_str(value, f"{where}.values[{j}]", source)
            if text is not None:
                values.append(text)
        reqs.append((key, op, tuple(sorted(values))))
    return reqs


def selector_query(selector: Any, path: str = "spec.selector", source: str = "deployment.yaml") -> str:
    """A LabelSelector (matchLabels + matchExpressions) as the API's `labelSelector` parameter.

    An empty selector gives "" (everything); raises ParseError for an unknown operator.
    """
    parts = []
    for key, op, values in _requirements(selector, path, source):
        if op == "In" and len(values) == 1:
            parts.append(f"{key}={values[0]}")
        elif op == "In":
            parts.append(f"{key} in ({','.join(values)})")
        elif op == "NotIn":
            parts.append(f"{key} notin ({','.join(values)})")
        elif op == "Exists":
            parts.append(key)
        else:
            parts.append(f"!{key}")
    return ",".join(parts)


def selector_matches(selector: Any, labels: dict[str, str], path: str = "spec.selector",
                     source: str = "object") -> bool:
    """Whether a LabelSelector selects an object with `labels`; an empty selector selects all."""
    for key, op, values in _requirements(selector, path, source):
        have = labels.get(key)
        if op == "In" and have not in values:
            return False
        if op == "NotIn" and have in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def map_selects(selector: Any, labels: dict[str, str], path: str = "spec.selector", source: str = "object") -> bool:
    """A Service-style selector (a plain map): selects when non-empty and every pair is in `labels`."""
    wanted = str_map(selector, path, source)
    return bool(wanted) and all(labels.get(k) == v for k, v in wanted.items())
