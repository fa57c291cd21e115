"""What the stand-in API server (tests/support/fake_kube.py) knows of Kubernetes: resource names,
`Status` error bodies, label and field selectors, and RBAC rule matching.

Written apart from the collectors on purpose: a test double that shared the code under
test would agree with its bugs.

>>> sel = parse_label_selector("app=vllm,tier in (gpu, big),!canary")
>>> labels_match(sel, {"app": "vllm", "tier": "gpu"})
True
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

#: kind -> (group, preferred version, plural resource, namespaced)
KINDS: dict[str, tuple[str, str, str, bool]] = {
    "Pod": ("", "v1", "pods", True),
    "Event": ("", "v1", "events", True),
    "Service": ("", "v1", "services", True),
    "ConfigMap": ("", "v1", "configmaps", True),
    "Endpoints": ("", "v1", "endpoints", True),
    "ServiceAccount": ("", "v1", "serviceaccounts", True),
    "Node": ("", "v1", "nodes", False),
    "Namespace": ("", "v1", "namespaces", False),
    "Deployment": ("apps", "v1", "deployments", True),
    "ReplicaSet": ("apps", "v1", "replicasets", True),
    "StatefulSet": ("apps", "v1", "statefulsets", True),
    "DaemonSet": ("apps", "v1", "daemonsets", True),
    "ControllerRevision": ("apps", "v1", "controllerrevisions", True),
    "HorizontalPodAutoscaler": ("autoscaling", "v2", "horizontalpodautoscalers", True),
    "PodDisruptionBudget": ("policy", "v1", "poddisruptionbudgets", True),
    "Ingress": ("networking.k8s.io", "v1", "ingresses", True),
}
#: (group, resource) -> kind
RESOURCE_KINDS = {(g, r): k for k, (g, _v, r, _n) in KINDS.items()}
#: versions served per group
GROUP_VERSIONS = {
    "": ("v1",),
    "apps": ("v1",),
    "autoscaling": ("v1", "v2"),
    "policy": ("v1",),
    "networking.k8s.io": ("v1",),
}

# Field selectors the real API server accepts per resource (others: 400 "field label not supported").
_COMMON_FIELDS = frozenset({"metadata.name", "metadata.namespace"})
FIELDS: dict[str, frozenset[str]] = {
    "pods": _COMMON_FIELDS | {"spec.nodeName", "spec.restartPolicy", "spec.schedulerName",
                              "spec.serviceAccountName", "spec.hostNetwork", "status.phase",
                              "status.podIP", "status.nominatedNodeName"},
    "events": _COMMON_FIELDS | {"involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                                "involvedObject.uid", "involvedObject.apiVersion",
                                "involvedObject.resourceVersion", "involvedObject.fieldPath", "reason",
                                "reportingComponent", "source", "type"},
    "nodes": _COMMON_FIELDS | {"spec.unschedulable"},
    "replicasets": _COMMON_FIELDS | {"status.replicas"},
}


_RFC3339_PREFIX = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) ")

REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "Conflict",
           429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable", 504: "Timeout"}


def qualified(group: str, resource: str) -> str:
    """`deployments.apps`, or `pods` for the core group, as the API server names resources."""
    return f"{resource}.{group}" if group else resource


# ------------------------------------------------------------------------- Status


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message, "reason": reason}
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def _details(group: str, resource: str, name: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if name:
        out["name"] = name
    if group:
        out["group"] = group
    out["kind"] = resource
    return out


def not_found(group: str, resource: str, name: str) -> dict[str, Any]:
    return status(404, "NotFound", f'{qualified(group, resource)} "{name}" not found',
                  _details(group, resource, name))


def no_such_resource() -> dict[str, Any]:
    return status(404, "NotFound", "the server could not find the requested resource", {})


def forbidden(user: str, verb: str, group: str, resource: str, subresource: str | None,
              namespace: str | None, name: str | None) -> dict[str, Any]:
    """The RBAC denial exactly as kube-apiserver words it."""
    what = f'{qualified(group, resource)} "{name}"' if name else qualified(group, resource)
    full = f"{resource}/{subresource}" if subresource else resource
    scope = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    message = (f'{what} is forbidden: User "{user}" cannot {verb} resource "{full}" '
               f'in API group "{group}" {scope}')
    return status(403, "Forbidden", message, _details(group, resource, name))


def unauthorized() -> dict[str, Any]:
    return status(401, "Unauthorized", "Unauthorized")


def bad_request(message: str) -> dict[str, Any]:
    return status(400, "BadRequest", message)


# -------------------------------------------------------------------- selectors


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: tuple[str, ...] = ()


class SelectorError(ValueError):
    pass


_SET_REQ = re.compile(r"\s*(!?)\s*([A-Za-z0-9./_-]+)\s*(?:(in|notin)\s*\(([^)]*)\))?\s*$")
_EQ_REQ = re.compile(r"\s*([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)\s*$")


def _split_top(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def parse_label_selector(text: str) -> tuple[Requirement, ...]:
    reqs = []
    for part in _split_top(text or ""):
        eq = _EQ_REQ.match(part)
        if eq:
            reqs.append(Requirement(eq.group(1), "!=" if eq.group(2) == "!=" else "=", (eq.group(3),)))
            continue
        m = _SET_REQ.match(part)
        if not m or (m.group(1) and m.group(3)):
            raise SelectorError(f"unable to parse requirement: {part.strip()!r}")
        if m.group(3):
            values = tuple(v.strip() for v in m.group(4).split(",") if v.strip())
            reqs.append(Requirement(m.group(2), m.group(3), values))
        else:
            reqs.append(Requirement(m.group(2), "!" if m.group(1) else "exists"))
    return tuple(reqs)


def labels_match(reqs: tuple[Requirement, ...], labels: dict[str, str]) -> bool:
    for r in reqs:
        have = labels.get(r.key)
        ok = {
            "=": have == r.values[0] if r.values else False,
            "!=": have != r.values[0] if r.values else True,
            "in": have in r.values,
            "notin": have not in r.values,
            "exists": r.key in labels,
            "!": r.key not in labels,
        }[r.op]
        if not ok:
            return False
    return True


def parse_field_selector(text: str, resource: str) -> tuple[tuple[str, str, str], ...]:
    """(field, op, value) triples; an unsupported field raises SelectorError with the real message."""
    out = []
    allowed = FIELDS.get(resource, _COMMON_FIELDS)
    for part in [p for p in (text or "").split(",") if p.strip()]:
        m = re.fullmatch(r"\s*([A-Za-z.]+)\s*(==|=|!=)\s*(.*?)\s*", part)
        if not m:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{part}'")
        if m.group(1) not in allowed:
            raise SelectorError(f'field label not supported: {m.group(1)}')
        out.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
    return tuple(out)


def field_value(obj: dict[str, Any], dotted: str) -> str:
    value: Any = obj
    for step in dotted.split("."):
        value = value.get(step) if isinstance(value, dict) else None
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def fields_match(reqs: tuple[tuple[str, str, str], ...], obj: dict[str, Any]) -> bool:
    return all((field_value(obj, f) == v) == (op == "=") for f, op, v in reqs)


# ------------------------------------------------------------------------- RBAC


def rule_allows(rule: dict[str, Any], verb: str, group: str, resource: str, subresource: str | None,
                name: str | None) -> bool:
    """One PolicyRule against one request, with RBAC's wildcards (`*`, `*/sub`)."""
    groups = rule.get("apiGroups") or []
    resources = rule.get("resources") or []
    verbs = rule.get("verbs") or []
    names = rule.get("resourceNames") or []
    full = f"{resource}/{subresource}" if subresource else resource
    if "*" not in groups and group not in groups:
        return False
    if "*" not in verbs and verb not in verbs:
        return False
    wanted = {full, "*"} | ({f"*/{subresource}"} if subresource else set())
    if not wanted & set(resources):
        return False
    return not names or (name is not None and name in names)


# -------------------------------------------------------------------------- objects


def as_served(obj: dict[str, Any], version: str, group: str) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["apiVersion"] = f"{group}/{version}" if group else version
    return out


def waiting_reason(pod: dict[str, Any], container: str) -> str | None:
    """Why a container that never ran is waiting (it has no log yet), None otherwise."""
    for item in (pod.get("status") or {}).get("containerStatuses") or []:
        if item.get("name") == container:
            waiting = (item.get("state") or {}).get("waiting")
            if waiting is not None and not item.get("restartCount"):
                return waiting.get("reason", "ContainerCreating")
    return None


def log_body(text: str, query: dict[str, str]) -> str:
    """A stored log as the kubelet serves it: timestamps kept only when asked, then the tail
    (`tailLines`), then at most `limitBytes`."""
    lines = text.splitlines(keepends=True)
    if query.get("timestamps") not in ("true", "1"):
        lines = [_RFC3339_PREFIX.sub("", line, count=1) for line in lines]
    tail = query.get("tailLines")
    if tail is not None and tail.isdigit():
        lines = lines[len(lines) - int(tail):] if int(tail) else []
    body = "".join(lines)
    limit = query.get("limitBytes")
    if limit and limit.isdigit():
        body = body.encode()[: int(limit)].decode(errors="ignore")
    return body
