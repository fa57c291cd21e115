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
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from tests.support import yaml_c

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
    # leader election (gpumem's scheduler): stored, read and updated like any object
    "Lease": ("coordination.k8s.io", "v1", "leases", True),
    # custom resources (their CRDs' schemas in tests/data/crd_schemas): merge and JSON patch only
    "InferenceService": ("serving.kserve.io", "v1beta1", "inferenceservices", True),
    "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1", "leaderworkersets", True),
    "Application": ("argoproj.io", "v1alpha1", "applications", True),
}
#: custom resource kind -> its schema, cut from the upstream CRD (tests.support.crd_cut)
CUSTOM_KINDS = {
    "InferenceService": "inferenceservice-serving-v1beta1.json",
    "LeaderWorkerSet": "leaderworkerset-leaderworkerset-v1.json",
    "Application": "application-argoproj-v1alpha1.json",
}
#: what kube-apiserver accepts as a PATCH of a custom resource (no strategic merge: a CRD has no
#: Go struct with patch tags); server-side apply is not modelled here
CUSTOM_PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json")
#: (group, resource) -> kind
RESOURCE_KINDS = {(g, r): k for k, (g, _v, r, _n) in KINDS.items()}
#: versions served per group
GROUP_VERSIONS = {
    "": ("v1",),
    "apps": ("v1",),
    "autoscaling": ("v1", "v2"),
    "policy": ("v1",),
    "networking.k8s.io": ("v1",),
    "coordination.k8s.io": ("v1",),
    "serving.kserve.io": ("v1beta1",),
    "leaderworkerset.x-k8s.io": ("v1",),
    "argoproj.io": ("v1alpha1",),
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
           415: "UnsupportedMediaType", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable", 504: "Timeout"}


def qualified(group: str, resource: str) -> str:
    """`deployments.apps`, or `pods` for the core group, as the API server names resources."""
    return f"{resource}.{group}" if group else resource


# ------------------------------------------------------------------------- Status


def status(code: int, reason: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": message}
    if reason:  # an error that is not a Status on the server side has no reason (StatusReasonUnknown)
        body["reason"] = reason
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


# =========================================================================== writes
#
# What kube-apiserver does with POST, PUT and PATCH, read from its source: k8s.io/apiserver
# endpoints/handlers (create.go, update.go, patch.go), registry/rest and registry/generic/registry
# (store.go), apimachinery api/errors and util/strategicpatch, evanphx/json-patch v4, and the
# apps, core and autoscaling registry strategies. Where the stand-in departs from it, it says so.

OPTIMISTIC_LOCK = "the object has been modified; please apply your changes to the latest version and try again"

#: PATCH content types the stand-in applies, in the order kube-apiserver lists them in its 415.
#: The real server also takes application/apply-patch+yaml (server-side apply, which needs
#: managed fields and field managers): the stand-in does not do server-side apply and answers
#: it with the real 415 body, listing what the stand-in accepts.
PATCH_TYPES = ("application/json-patch+json", "application/merge-patch+json",
               "application/strategic-merge-patch+json")


class Refusal(Exception):
    """A write the API server refuses: the HTTP code and the `Status` body it answers."""

    def __init__(self, code: int, body: dict[str, Any]):
        super().__init__(body.get("message", ""))
        self.code = code
        self.body = body


def conflict(group: str, resource: str, name: str, why: str = OPTIMISTIC_LOCK) -> dict[str, Any]:
    """errors.NewConflict: a resourceVersion (or uid) precondition that does not hold."""
    return status(409, "Conflict", f'Operation cannot be fulfilled on {qualified(group, resource)} "{name}": {why}',
                  _details(group, resource, name))


def already_exists(group: str, resource: str, name: str) -> dict[str, Any]:
    return status(409, "AlreadyExists", f'{qualified(group, resource)} "{name}" already exists',
                  _details(group, resource, name))


def unsupported_media_type(accepted: tuple[str, ...] = PATCH_TYPES) -> dict[str, Any]:
    """negotiation.NewUnsupportedMediaTypeError: a PATCH in a content type not accepted."""
    return status(415, "UnsupportedMediaType",
                  f"the body of the request was in an unknown format - accepted media types include: "
                  f"{', '.join(accepted)}")


def method_not_supported(group: str, resource: str, action: str) -> dict[str, Any]:
    return status(405, "MethodNotAllowed", f'{action} is not supported on resources of kind "{qualified(group, resource)}"',
                  {"group": group, "kind": resource} if group else {"kind": resource})


def patch_not_applied() -> dict[str, Any]:
    """A JSON patch operation that does not apply (a failed `test`, a path that is not there).

    patch.go answers `NewGenericServerResponse(422, "", GroupResource{}, "", err, 0, false)`:
    code 422, reason Invalid, the generic message, empty details; the json-patch error itself is
    not in the body (isUnexpectedResponse is false, so no cause carries it). It is 422 and not
    409 even when the failed `test` was of /metadata/resourceVersion: only a resourceVersion in
    the patched object's metadata is a storage precondition (409 Conflict)."""
    return status(422, "Invalid", "the server rejected our request due to an error in our request", {})


def internal_unknown(message: str) -> dict[str, Any]:
    """An error that is not a Status on the server side (ErrorToAPIStatus): 500, no reason."""
    return status(500, "", message)


_CAUSES = {"Required value": "FieldValueRequired", "Invalid value": "FieldValueInvalid",
           "Unsupported value": "FieldValueNotSupported", "Duplicate value": "FieldValueDuplicate",
           "Forbidden": "FieldValueForbidden"}


@dataclass(frozen=True)
class FieldError:
    """One field.Error: printed `<field>: <type>[: <value>][: <detail>]`."""

    type: str  # "Required value" | "Invalid value" | "Unsupported value" | "Duplicate value" | "Forbidden"
    field: str
    value: Any = None
    detail: str = ""

    def body(self) -> str:
        text = self.type if self.type in ("Required value", "Forbidden") else f"{self.type}: {go_value(self.value)}"
        return f"{text}: {self.detail}" if self.detail else text

    def __str__(self) -> str:
        return f"{self.field}: {self.body()}"


def required(path: str, detail: str = "") -> FieldError:
    return FieldError("Required value", path, None, detail)


def invalid_value(path: str, value: Any, detail: str) -> FieldError:
    return FieldError("Invalid value", path, value, detail)


def not_supported(path: str, value: Any, supported: list[str]) -> FieldError:
    return FieldError("Unsupported value", path, value, "supported values: " + ", ".join(go_quote(s) for s in supported))


def duplicate(path: str, value: Any) -> FieldError:
    return FieldError("Duplicate value", path, value)


def invalid(group: str, kind: str, name: str, errors: list[FieldError]) -> dict[str, Any]:
    """errors.NewInvalid: 422 naming the kind (`Deployment.apps "x" is invalid: ...`), one cause
    per field error; several errors are listed in brackets."""
    messages = list(dict.fromkeys(str(e) for e in errors))
    text = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    details: dict[str, Any] = {}
    if name:
        details["name"] = name
    if group:
        details["group"] = group
    if kind:
        details["kind"] = kind
    details["causes"] = [{"reason": _CAUSES[e.type], "message": e.body(), "field": e.field} for e in errors]
    group_kind = f"{kind}.{group}" if group else kind
    return status(422, "Invalid", f"{group_kind} {go_quote(name)} is invalid: {text}", details)


# ------------------------------------------------------------------- Go's printing


def go_quote(text: str) -> str:
    """Go's %q of a string (for the printable text of names and values)."""
    return json.dumps(text, ensure_ascii=False)


def _go_number(value: float) -> str:
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(value) if isinstance(value, float) else str(value)


def go_value(value: Any) -> str:
    """A value as field.Error prints it after `Invalid value: `: %v for numbers and booleans, %q
    for strings, %#v for a map of strings (labels) or a list of strings."""
    if isinstance(value, GoText):
        return str(value)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_number(value)
    if isinstance(value, str):
        return go_quote(value)
    if isinstance(value, dict) and all(isinstance(v, str) for v in value.values()):
        pairs = ", ".join(f"{go_quote(k)}:{go_quote(v)}" for k, v in sorted(value.items()))
        return "map[string]string{" + pairs + "}"
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "[]string{" + ", ".join(go_quote(v) for v in value) + "}"
    return go_v(value)


def go_v(value: Any) -> str:
    """Go's %v of decoded JSON: `map[k:v k2:v2]` with sorted keys, `[a b]`, `<nil>`."""
    if value is None:
        return "<nil>"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return _go_number(value)
    if isinstance(value, dict):
        return "map[" + " ".join(f"{k}:{go_v(v)}" for k, v in sorted(value.items())) + "]"
    if isinstance(value, list):
        return "[" + " ".join(go_v(v) for v in value) + "]"
    return str(value)


def go_duration(seconds: float) -> str:
    """time.Duration's String for whole seconds: 10s, 1m20s, 5m0s, 1h0m0s."""
    total = int(seconds)
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes}m{secs}s"
    if minutes:
        return f"{minutes}m{secs}s"
    return f"{secs}s"


def json_equal(a: Any, b: Any) -> bool:
    """Equality of decoded JSON values: 1 == 1.0, but true is not 1."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


# --------------------------------------------------------------- JSON patch (RFC 6902)


class _NotApplied(Exception):
    pass


def _pointer(path: Any) -> list[str]:
    if not isinstance(path, str) or not path.startswith("/"):
        raise _NotApplied(f"bad path {path!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]


def _array_index(key: str, size: int) -> int:
    """evanphx/json-patch v4 indices: digits, negative ones counted from the end."""
    if not re.fullmatch(r"[+-]?\d+", key):
        raise _NotApplied(f"not an array index: {key!r}")
    idx = int(key)
    if idx >= size or idx < -size:
        raise _NotApplied(f"index out of range: {idx}")
    return idx + size if idx < 0 else idx


def _child(node: Any, key: str) -> Any:
    if isinstance(node, dict):
        if key not in node:
            raise _NotApplied(f"missing key {key!r}")
        return node[key]
    if isinstance(node, list):
        return node[_array_index(key, len(node))]
    raise _NotApplied(f"cannot descend into {type(node).__name__}")


def _container(doc: Any, path: Any) -> tuple[Any, str]:
    parts = _pointer(path)
    if not parts:
        raise _NotApplied("the whole document is not a target")
    node = doc
    for part in parts[:-1]:
        node = _child(node, part)
    if not isinstance(node, dict | list):
        raise _NotApplied("parent is not a container")
    return node, parts[-1]


def _get(doc: Any, path: Any) -> Any:
    node, key = _container(doc, path)
    return _child(node, key)


def _add(doc: Any, path: Any, value: Any) -> None:
    node, key = _container(doc, path)
    if isinstance(node, dict):
        node[key] = value
    elif key == "-":
        node.append(value)
    else:
        node.insert(_array_index(key, len(node) + 1), value)


def _remove(doc: Any, path: Any) -> Any:
    node, key = _container(doc, path)
    if isinstance(node, dict):
        if key not in node:
            raise _NotApplied(f"missing key {key!r}")
        return node.pop(key)
    return node.pop(_array_index(key, len(node)))


def _replace(doc: Any, path: Any, value: Any) -> None:
    node, key = _container(doc, path)
    if isinstance(node, dict):
        if key not in node:
            raise _NotApplied(f"missing key {key!r}")
        node[key] = value
    else:
        node[_array_index(key, len(node))] = value


def _test(doc: Any, path: Any, value: Any) -> None:
    node, key = _container(doc, path)
    if isinstance(node, dict):
        have = node.get(key)
        if have is None:  # v4: a missing or null value passes a test for null
            if value is None:
                return
            raise _NotApplied("test failed")
    else:
        have = node[_array_index(key, len(node))]
    if not json_equal(have, value):
        raise _NotApplied("test failed")


def json_patch(doc: dict[str, Any], patch: list[dict[str, Any]] | None) -> dict[str, Any]:
    """RFC 6902 as kube-apiserver applies it (evanphx/json-patch v4) to a decoded patch (see
    decode_patch). The document is not touched; operations that do not apply are a 422."""
    if patch is None:  # "null" decodes to an empty patch
        return copy.deepcopy(doc)
    out = copy.deepcopy(doc)
    try:
        for op in patch:
            kind, path = op.get("op"), op.get("path")
            if kind == "add":
                _add(out, path, copy.deepcopy(op.get("value")))
            elif kind == "remove":
                _remove(out, path)
            elif kind == "replace":
                _replace(out, path, copy.deepcopy(op.get("value")))
            elif kind == "move":
                if isinstance(path, str) and isinstance(op.get("from"), str) and path.startswith(op["from"] + "/"):
                    raise _NotApplied("cannot move a value into itself")
                _add(out, path, _remove(out, op.get("from")))
            elif kind == "copy":
                _add(out, path, copy.deepcopy(_get(out, op.get("from"))))
            elif kind == "test":
                _test(out, path, op.get("value"))
            else:
                raise _NotApplied(f"Unexpected kind: {kind}")
    except _NotApplied:
        raise Refusal(422, patch_not_applied()) from None
    return out


def go_syntax_error(text: str, error: json.JSONDecodeError | None) -> str:
    """encoding/json's words for a body that is not JSON (close to them: the stand-in parses
    with Python and names the character where Python stopped)."""
    if error is None or not text.strip() or error.pos >= len(text):
        return "unexpected end of JSON input"
    char = text[error.pos]
    shown = "'\\''" if char == "'" else f"'{char}'"
    where = {"Expecting value": "looking for beginning of value",
             "Extra data": "after top-level value",
             "Expecting property name enclosed in double quotes": "looking for beginning of object key string",
             "Expecting ':' delimiter": "after object key"}.get(error.msg, "after object key:value pair")
    return f"invalid character {shown} {where}"


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise _BadJSON(go_syntax_error(text, e)) from None


class _BadJSON(ValueError):
    pass


def decode_patch(patch_type: str, text: str, field_validation: str | None) -> Any:
    """A PATCH body decoded as patch.go does before applying it, or a Refusal (400). With the
    default field validation (Warn, since v1.27) or Strict, JSON and merge patches are first
    decoded strictly into the handler's own types, hence "error decoding patch: ... of type
    []handlers.jsonPatchOp" for an object sent as a JSON patch; with Ignore, json-patch's
    own DecodePatch answers. A strategic merge patch must be an object."""
    strict = (field_validation or "Warn") in ("Warn", "Strict")
    try:
        patch = _loads(text)
    except _BadJSON as e:
        if patch_type == "application/merge-patch+json" and not strict:
            raise Refusal(400, bad_request("Invalid JSON Patch")) from None
        prefix = "error decoding patch: " if strict and patch_type != "application/strategic-merge-patch+json" else ""
        raise Refusal(400, bad_request(f"{prefix}{e}")) from None
    if patch_type == "application/json-patch+json":
        if patch is None:
            return None
        into, item = ("[]handlers.jsonPatchOp", "handlers.jsonPatchOp") if strict else \
            ("jsonpatch.Patch", "jsonpatch.Operation")
        prefix = "error decoding patch: " if strict else ""
        if not isinstance(patch, list):
            raise Refusal(400, bad_request(
                f"{prefix}json: cannot unmarshal {_json_kind(patch).split()[0]} into Go value of type {into}"))
        for op in patch:
            if not isinstance(op, dict):
                raise Refusal(400, bad_request(
                    f"{prefix}json: cannot unmarshal {_json_kind(op).split()[0]} into Go value of type {item}"))
            for name in ("op", "path", "from"):
                if strict and name in op and op[name] is not None and not isinstance(op[name], str):
                    raise Refusal(400, bad_request(
                        f"{prefix}json: cannot unmarshal {_json_kind(op[name]).split()[0]} into Go struct field "
                        f"jsonPatchOp.{name} of type string"))
        return patch
    if not isinstance(patch, dict):
        if patch_type == "application/merge-patch+json" and not strict:
            raise Refusal(400, bad_request("Invalid JSON Patch"))
        prefix = "error decoding patch: " if patch_type == "application/merge-patch+json" else ""
        raise Refusal(400, bad_request(
            f"{prefix}json: cannot unmarshal {_json_kind(patch).split()[0]} into Go value of type map[string]interface {{}}"))
    return patch


def decode_object(kind: str, version: str, group: str, text: str, content_type: str | None) -> dict[str, Any]:
    """A POST or PUT body (JSON or YAML) decoded as create.go and update.go do, or a Refusal. (The
    real server also takes protobuf and lists it in its 415; the stand-in lists what it takes.)"""
    base = (content_type or "application/json").split(";")[0].strip().lower()
    if base not in ("application/json", "application/yaml", "*/*"):
        raise Refusal(415, unsupported_media_type(("application/json", "application/yaml")))
    summary = text[:30] + (" ..." if len(text) > 30 else "")
    unrecognized = f"the object provided is unrecognized (must be of type {kind}): couldn't get version/kind; json parse error: "
    try:
        doc = yaml_c.safe_load(text) if base == "application/yaml" else _loads(text)
    except (_BadJSON, yaml.YAMLError) as e:
        raise Refusal(400, bad_request(f"{unrecognized}{e} ({summary})")) from None
    if not isinstance(doc, dict):
        type_meta = 'struct { APIVersion string "json:\\"apiVersion,omitempty\\""; Kind string "json:\\"kind,omitempty\\"" }'
        raise Refusal(400, bad_request(f"{unrecognized}json: cannot unmarshal {_json_kind(doc).split()[0]} into Go value "
                                       f"of type {type_meta} ({summary})"))
    expected = f"{group}/{version}" if group else version
    if doc.get("apiVersion") not in (None, "", expected):
        raise Refusal(400, bad_request(f"the API version in the data ({doc['apiVersion']}) does not match the "
                                       f"expected API version ({expected})"))
    error = decode_error(kind, doc)
    if error:
        raise Refusal(400, bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {error}'))
    return doc


def _json_kind(value: Any) -> str:
    """How Go's encoding/json names a JSON value in an UnmarshalTypeError."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int | float):
        return f"number {_go_number(value)}"
    return {str: "string", dict: "object", list: "array"}.get(type(value), "null")


# -------------------------------------------------------------- merge patch (RFC 7386)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


# ------------------------------------------------------------------- strategic merge patch


@dataclass(frozen=True)
class MergeList:
    """A list field tagged `patchStrategy:"merge"`: maps merged by `key` (their fields by `item`),
    or scalars merged as a set when `key` is None. Lists not in a schema are replaced whole."""

    key: str | None
    item: Any = None


_META = {"finalizers": MergeList(None), "ownerReferences": MergeList("uid")}
_CONTAINER = {"ports": MergeList("containerPort"), "env": MergeList("name"),
              "volumeMounts": MergeList("mountPath"), "volumeDevices": MergeList("devicePath")}
_POD_SPEC = {"containers": MergeList("name", _CONTAINER), "initContainers": MergeList("name", _CONTAINER),
             "ephemeralContainers": MergeList("name", _CONTAINER), "volumes": MergeList("name"),
             "imagePullSecrets": MergeList("name"), "hostAliases": MergeList("ip"),
             "topologySpreadConstraints": MergeList("topologyKey"), "resourceClaims": MergeList("name")}
_WORKLOAD = {"metadata": _META, "spec": {"template": {"metadata": _META, "spec": _POD_SPEC}},
             "status": {"conditions": MergeList("type")}}
#: kind -> the patch strategies of its fields (k8s.io/api struct tags), for the lists that merge
PATCH_SCHEMAS: dict[str, dict[str, Any]] = {
    "Deployment": _WORKLOAD, "ReplicaSet": _WORKLOAD, "StatefulSet": _WORKLOAD, "DaemonSet": _WORKLOAD,
    "Pod": {"metadata": _META, "spec": _POD_SPEC, "status": {"conditions": MergeList("type")}},
    "Service": {"metadata": _META, "spec": {"ports": MergeList("port")}},
    "HorizontalPodAutoscaler": {"metadata": _META, "status": {"conditions": MergeList("type")}},
    "Node": {"metadata": _META, "status": {"conditions": MergeList("type"), "addresses": MergeList("type")}},
}

_DIRECTIVE = "$patch"
_RETAIN_KEYS = "$retainKeys"
_SET_ORDER = "$setElementOrder/"
_DELETE_FROM = "$deleteFromPrimitiveList/"


def strategic_merge(original: dict[str, Any], patch: dict[str, Any], kind: str) -> dict[str, Any]:
    """apimachinery's StrategicMergeMapPatch: maps merge, null deletes, lists tagged merge merge
    by their key, the `$patch` (replace, delete), `$retainKeys`, `$setElementOrder/` and
    `$deleteFromPrimitiveList/` directives apply; order follows the patch, then the live list."""
    return _smp_map(copy.deepcopy(original), copy.deepcopy(patch), PATCH_SCHEMAS.get(kind, {"metadata": _META}))


def _no_merge_key(item: Any, key: str) -> Refusal:
    return Refusal(500, internal_unknown(f"map: {go_v(item)} does not contain declared merge key: {key}"))


def _clean(value: Any) -> Any:
    """A patch value taken as it is: the directives and nulls in it are not fields of the type,
    so decoding the result drops them."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items() if not k.startswith("$") and v is not None}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    return value


def _smp_map(original: dict[str, Any], patch: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    if _DIRECTIVE in patch:
        directive = patch[_DIRECTIVE]
        if directive == "replace":
            return _clean({k: v for k, v in patch.items() if k != _DIRECTIVE})
        if directive == "delete":
            return {}
        raise Refusal(500, internal_unknown(f"unknown patch type: {go_v(directive)} in map: {go_v(patch)}"))
    if _RETAIN_KEYS in patch:
        keep = patch.pop(_RETAIN_KEYS)
        if not isinstance(keep, list) or any(
                k not in keep for k, v in patch.items()
                if v is not None and not k.startswith((_SET_ORDER, _DELETE_FROM))):
            raise Refusal(400, bad_request("invalid patch format of retainKeys"))
        for key in [k for k in original if k not in keep]:
            del original[key]
    for order_key in [k for k in patch if k.startswith(_SET_ORDER)]:
        order = patch.pop(order_key)
        name = order_key[len(_SET_ORDER):]
        if not isinstance(order, list) or not name:
            raise Refusal(400, bad_request("invalid patch format of setElementOrder list"))
        spec = schema.get(name)
        key = spec.key if isinstance(spec, MergeList) else None
        have, wanted = original.get(name), patch.pop(name, None)
        if have is None and wanted is None:
            continue
        if have is not None and wanted is not None:
            merged = _smp_list(have, wanted, spec) if isinstance(spec, MergeList) else _clean(wanted)
        else:
            merged = have if wanted is None else _clean(wanted)
        in_order, server_only = _partition(merged, order, key)
        original[name] = _normalize_order(in_order, server_only, order, have or [], key)
    for key, value in patch.items():
        if key.startswith(_DELETE_FROM):
            name = key[len(_DELETE_FROM):]
            if not isinstance(value, list) or not name:
                raise Refusal(400, bad_request("invalid patch format of primitive list"))
            if isinstance(original.get(name), list):
                original[name] = [x for x in original[name] if not any(json_equal(x, y) for y in value)]
            continue
        if value is None:
            original.pop(key, None)
            continue
        have = original.get(key)
        spec = schema.get(key)
        if have is None or type(have) is not type(value):
            original[key] = _clean(value)
        elif isinstance(value, dict):
            original[key] = _smp_map(have, value, spec if isinstance(spec, dict) else {})
        elif isinstance(value, list) and isinstance(spec, MergeList):
            original[key] = _smp_list(have, value, spec)
        else:
            original[key] = _clean(value)
    return original


def _smp_list(original: list[Any], patch: list[Any], spec: MergeList) -> list[Any]:
    if not original and not patch:
        return original
    items = original + patch
    if any(isinstance(x, list) for x in items):
        raise Refusal(422, patch_not_applied())  # mergepatch.ErrNoListOfLists
    if len({type(x) for x in items}) > 1:
        raise Refusal(500, internal_unknown(f"list element types are not identical: {go_v([original, patch])}"))
    if not isinstance(items[0], dict):
        merged: list[Any] = []
        for value in items:
            if not any(json_equal(value, m) for m in merged):
                merged.append(value)
        in_patch, server_only = _partition(merged, patch, None)
        return _normalize_order(in_patch, server_only, patch, original, None)
    key = spec.key
    if key is None:
        raise Refusal(500, internal_unknown("cannot merge lists without merge key for type map"))
    rest, replace = [], False
    for item in patch:
        directive = item.get(_DIRECTIVE)
        if _DIRECTIVE not in item:
            rest.append(item)
        elif directive == "delete":
            if key not in item:
                raise _no_merge_key(item, key)
            original = [o for o in original if not (key in o and o[key] == item[key])]
        elif directive == "replace":
            replace = True
        elif directive == "merge":
            raise Refusal(500, internal_unknown("merging lists cannot yet be specified in the patch"))
        else:
            raise Refusal(500, internal_unknown(f"unknown patch type: {go_v(directive)} in map: {go_v(item)}"))
    if replace:
        original, rest = [_clean(x) for x in rest], []
    merged = list(original)
    for item in rest:
        if key not in item:
            raise _no_merge_key(item, key)
        at = next((i for i, o in enumerate(merged) if key in o and o[key] == item[key]), None)
        if at is None:
            merged.append(_clean(item))
        else:
            merged[at] = _smp_map(merged[at], item, spec.item or {})
    in_patch, server_only = _partition(merged, rest, key)
    return _normalize_order(in_patch, server_only, rest, original, key)


def _key_of(item: Any, key: str | None) -> Any:
    return item.get(key) if key is not None and isinstance(item, dict) else item


def _index_in(items: list[Any], value: Any, key: str | None) -> int:
    wanted = _key_of(value, key)
    return next((i for i, x in enumerate(items) if _key_of(x, key) == wanted), -1)


def _partition(merged: list[Any], by: list[Any], key: str | None) -> tuple[list[Any], list[Any]]:
    if key is not None:
        for item in merged:
            if not isinstance(item, dict) or key not in item:
                raise _no_merge_key(item, key)
    wanted = [x for x in by if key is None or (isinstance(x, dict) and key in x)]
    in_by = [x for x in merged if _index_in(wanted, x, key) >= 0]
    return in_by, [x for x in merged if _index_in(wanted, x, key) < 0]


def _sort_by(items: list[Any], order: list[Any], key: str | None) -> list[Any]:
    """normalizeSliceOrder: Go's insertion sort with its `less` (items not in `order` move ahead)."""
    if key is not None:
        for item in [*items, *order]:
            if not isinstance(item, dict) or key not in item:
                raise _no_merge_key(item, key)
    out = list(items)

    def less(a: Any, b: Any) -> bool:
        ia, ib = _index_in(order, a, key), _index_in(order, b, key)
        return ia < ib if ia >= 0 and ib >= 0 else True

    for i in range(1, len(out)):
        j = i
        while j > 0 and less(out[j], out[j - 1]):
            out[j], out[j - 1] = out[j - 1], out[j]
            j -= 1
    return out


def _normalize_order(in_patch: list[Any], server_only: list[Any], patch_order: list[Any],
                     server_order: list[Any], key: str | None) -> list[Any]:
    """normalizeElementOrder + mergeSortedSlice: patch items in patch order, live-only items in
    live order, interleaved where the live list orders both."""
    right = _sort_by(in_patch, patch_order, key)
    left = _sort_by(server_only, server_order, key)
    out, i, j = [], 0, 0
    while i < len(left) or j < len(right):
        if i >= len(left):
            out.append(right[j])
            j += 1
        elif j >= len(right):
            out.append(left[i])
            i += 1
        else:
            li, ri = _index_in(server_order, left[i], key), _index_in(server_order, right[j], key)
            if li >= 0 and ri >= 0 and li < ri:
                out.append(left[i])
                i += 1
            else:
                out.append(right[j])
                j += 1
    return out


# ------------------------------------------------------------------------- decoding


#: integer fields whose JSON type the stand-in checks the way decoding into the Go type does:
#: kind -> [(path, Go struct, Go type)]
_INT_FIELDS: dict[str, list[tuple[str, str, str]]] = {
    "Deployment": [("spec.replicas", "DeploymentSpec", "int32"), ("spec.minReadySeconds", "DeploymentSpec", "int32"),
                   ("spec.revisionHistoryLimit", "DeploymentSpec", "int32"),
                   ("spec.progressDeadlineSeconds", "DeploymentSpec", "int32")],
    "HorizontalPodAutoscaler": [("spec.minReplicas", "HorizontalPodAutoscalerSpec", "int32"),
                                ("spec.maxReplicas", "HorizontalPodAutoscalerSpec", "int32")],
    "Scale": [("spec.replicas", "ScaleSpec", "int32")],
}


def decode_error(kind: str, obj: dict[str, Any]) -> str | None:
    """encoding/json's error for a value of the wrong JSON type (`"3"` for replicas), or None."""
    for path, struct, go_type in _INT_FIELDS.get(kind, []):
        value: Any = obj
        for step in path.split("."):
            value = value.get(step) if isinstance(value, dict) else None
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or not -(2**31) <= value < 2**31:
            text = f"number {value!r}" if isinstance(value, float | int) and not isinstance(value, bool) \
                else _json_kind(value)
            return f"json: cannot unmarshal {text} into Go struct field {struct}.{path} of type {go_type}"
    return None


def go_json(doc: Any) -> str:
    """Compact JSON as Go's encoding/json writes a map: sorted keys, <>& escaped."""
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ------------------------------------------------------------------------- defaults


def _default_probe(probe: dict[str, Any]) -> None:
    for name, value in (("timeoutSeconds", 1), ("periodSeconds", 10), ("successThreshold", 1),
                        ("failureThreshold", 3)):
        probe.setdefault(name, value)
    if isinstance(probe.get("httpGet"), dict):
        probe["httpGet"].setdefault("scheme", "HTTP")


def _default_container(container: dict[str, Any]) -> None:
    container.setdefault("terminationMessagePath", "/dev/termination-log")
    container.setdefault("terminationMessagePolicy", "File")
    image = container.get("image")
    if isinstance(image, str) and image and "imagePullPolicy" not in container:
        # SetDefaults_Container: Always for the `latest` tag, which an image with neither tag
        # nor digest has; IfNotPresent otherwise
        name, _, digest = image.partition("@")
        last = name.rsplit("/", 1)[-1]
        tag = last.partition(":")[2] or ("" if digest else "latest")
        container["imagePullPolicy"] = "Always" if tag == "latest" else "IfNotPresent"
    for port in container.get("ports") or []:
        if isinstance(port, dict):
            port.setdefault("protocol", "TCP")
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if isinstance(container.get(probe), dict):
            _default_probe(container[probe])


def _default_pod_spec(spec: dict[str, Any]) -> None:
    for name, value in (("restartPolicy", "Always"), ("terminationGracePeriodSeconds", 30),
                        ("dnsPolicy", "ClusterFirst"), ("securityContext", {}),
                        ("schedulerName", "default-scheduler")):
        spec.setdefault(name, value)
    for field_name in ("containers", "initContainers"):
        for container in spec.get(field_name) or []:
            if isinstance(container, dict):
                _default_container(container)
    for volume in spec.get("volumes") or []:
        for source in ("configMap", "secret"):
            if isinstance(volume, dict) and isinstance(volume.get(source), dict):
                volume[source].setdefault("defaultMode", 420)


_SCALE_UP = {"stabilizationWindowSeconds": 0, "selectPolicy": "Max",
             "policies": [{"type": "Pods", "value": 4, "periodSeconds": 15},
                          {"type": "Percent", "value": 100, "periodSeconds": 15}]}
_SCALE_DOWN = {"selectPolicy": "Max", "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}]}


def apply_defaults(kind: str, obj: dict[str, Any]) -> None:
    """The defaulting a decode into the Go type applies (k8s.io/kubernetes pkg/apis/*/v1 and v2
    defaults), for the fields the stand-in's kinds are written with. Idempotent."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        if kind in ("Deployment", "ReplicaSet", "Service", "HorizontalPodAutoscaler"):
            spec = obj["spec"] = {}
        else:
            return
    template_spec = ((spec.get("template") or {}).get("spec") if isinstance(spec.get("template"), dict) else None)
    if kind == "Deployment":
        spec.setdefault("replicas", 1)
        strategy = spec.setdefault("strategy", {})
        strategy.setdefault("type", "RollingUpdate")
        if strategy["type"] == "RollingUpdate":
            rolling = strategy.setdefault("rollingUpdate", {})
            rolling.setdefault("maxUnavailable", "25%")
            rolling.setdefault("maxSurge", "25%")
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("progressDeadlineSeconds", 600)
    elif kind == "ReplicaSet":
        spec.setdefault("replicas", 1)
    elif kind == "Service":
        spec.setdefault("type", "ClusterIP")
        spec.setdefault("sessionAffinity", "None")
        if spec["type"] != "ExternalName":
            spec.setdefault("internalTrafficPolicy", "Cluster")
        for port in spec.get("ports") or []:
            if isinstance(port, dict):
                port.setdefault("protocol", "TCP")
                if "port" in port:
                    port.setdefault("targetPort", port["port"])
    elif kind == "HorizontalPodAutoscaler":
        spec.setdefault("minReplicas", 1)
        if not spec.get("metrics"):
            spec["metrics"] = [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]
        behavior = spec.get("behavior")
        if isinstance(behavior, dict):
            for direction, defaults in (("scaleUp", _SCALE_UP), ("scaleDown", _SCALE_DOWN)):
                rules_ = copy.deepcopy(defaults)
                if direction == "scaleDown":
                    rules_["stabilizationWindowSeconds"] = 300
                rules_.update({k: v for k, v in (behavior.get(direction) or {}).items() if v is not None})
                behavior[direction] = rules_
    elif kind == "Pod":
        template_spec = spec
    if isinstance(template_spec, dict):
        _default_pod_spec(template_spec)


# ----------------------------------------------------------------------- validation

_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_LABEL_1123 = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_LABEL_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_SUBDOMAIN_MSG = ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
                  "and must start and end with an alphanumeric character (e.g. 'example.com', regex used for "
                  "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')")
_LABEL_1123_MSG = ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
                   "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
                   "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')")
_LABEL_1035_MSG = ("a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
                   "alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', "
                   "regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')")


class GoText(str):
    """A value field.Error prints as it is (Go's %#v of a nil map, say)."""


def _name_errors(path: str, name: str, dns1035: bool) -> list[FieldError]:
    pattern, message, limit = (_LABEL_1035, _LABEL_1035_MSG, 63) if dns1035 else (_SUBDOMAIN, _SUBDOMAIN_MSG, 253)
    errors = []
    if len(name) > limit:
        errors.append(invalid_value(path, name, f"must be no more than {limit} characters"))
    if not pattern.fullmatch(name):
        errors.append(invalid_value(path, name, message))
    return errors


def validate_name(kind: str, name: str) -> list[FieldError]:
    """metadata.name on create: Services are DNS-1035 labels, the others DNS-1123 subdomains."""
    return _name_errors("metadata.name", name, dns1035=kind == "Service")


def _nonnegative(errors: list[FieldError], path: str, value: Any) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        errors.append(invalid_value(path, value, "must be greater than or equal to 0"))


def _validate_pod_spec(errors: list[FieldError], path: str, spec: dict[str, Any]) -> None:
    containers = spec.get("containers")
    if not containers:
        errors.append(required(f"{path}.containers"))
        return
    names: set[str] = set()
    for i, container in enumerate(containers):
        at = f"{path}.containers[{i}]"
        container = container if isinstance(container, dict) else {}
        name = container.get("name") or ""
        if not name:
            errors.append(required(f"{at}.name"))
        elif len(name) > 63 or not _LABEL_1123.fullmatch(name):
            errors.append(invalid_value(f"{at}.name", name, _LABEL_1123_MSG))
        if not container.get("image"):
            errors.append(required(f"{at}.image"))
        if name in names:
            errors.append(duplicate(f"{at}.name", name))
        names.add(name)


def validate(kind: str, obj: dict[str, Any]) -> list[FieldError]:
    """The validation errors (422) kube-apiserver finds in an object of the stand-in's kinds, in
    its order: a subset of ValidateDeployment, ValidateHorizontalPodAutoscaler, ValidateService
    (replica counts, selectors against template labels, containers, ports)."""
    if kind in CUSTOM_KINDS:
        return validate_custom(kind, obj)
    errors: list[FieldError] = []
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    if kind == "Deployment":
        _nonnegative(errors, "spec.replicas", spec.get("replicas"))
        selector = spec.get("selector")
        template = spec.get("template") if isinstance(spec.get("template"), dict) else {}
        labels = (template.get("metadata") or {}).get("labels")
        if not selector:
            errors.append(required("spec.selector"))
        elif not selector_matches(selector, labels or {}):
            errors.append(invalid_value("spec.template.metadata.labels",
                                        labels if labels is not None else GoText("map[string]string(nil)"),
                                        "`selector` does not match template `labels`"))
        pod_spec = template.get("spec") if isinstance(template.get("spec"), dict) else {}
        _validate_pod_spec(errors, "spec.template.spec", pod_spec)
        restart = pod_spec.get("restartPolicy")
        if restart is not None and restart != "Always":
            errors.append(not_supported("spec.template.spec.restartPolicy", restart, ["Always"]))
        strategy = spec.get("strategy") if isinstance(spec.get("strategy"), dict) else {}
        if strategy.get("type") == "Recreate" and strategy.get("rollingUpdate") is not None:
            errors.append(FieldError("Forbidden", "spec.strategy.rollingUpdate", None,
                                     "may not be specified when strategy `type` is 'Recreate'"))
        elif strategy.get("type") not in (None, "Recreate", "RollingUpdate"):
            errors.append(not_supported("spec.strategy.type", strategy["type"], ["Recreate", "RollingUpdate"]))
        _nonnegative(errors, "spec.minReadySeconds", spec.get("minReadySeconds"))
        _nonnegative(errors, "spec.revisionHistoryLimit", spec.get("revisionHistoryLimit"))
        deadline = spec.get("progressDeadlineSeconds")
        if isinstance(deadline, int):
            _nonnegative(errors, "spec.progressDeadlineSeconds", deadline)
            if deadline <= (spec.get("minReadySeconds") or 0):
                errors.append(invalid_value("spec.progressDeadlineSeconds", deadline,
                                            "must be greater than minReadySeconds"))
    elif kind == "Pod":
        _validate_pod_spec(errors, "spec", spec)
    elif kind == "HorizontalPodAutoscaler":
        low, high = spec.get("minReplicas"), spec.get("maxReplicas")
        if isinstance(low, int) and low < 1:
            errors.append(invalid_value("spec.minReplicas", low, "must be greater than or equal to 1"))
        if not isinstance(high, int) or high < 1:
            errors.append(invalid_value("spec.maxReplicas", high or 0, "must be greater than 0"))
        if isinstance(low, int) and isinstance(high, int) and high < low:
            errors.append(invalid_value("spec.maxReplicas", high, "must be greater than or equal to `minReplicas`"))
        ref = spec.get("scaleTargetRef") if isinstance(spec.get("scaleTargetRef"), dict) else {}
        if not ref.get("kind"):
            errors.append(required("spec.scaleTargetRef.kind"))
        if not ref.get("name"):
            errors.append(required("spec.scaleTargetRef.name"))
    elif kind == "Service":
        ports = spec.get("ports") or []
        headless = spec.get("clusterIP") == "None"
        if not ports and not headless and spec.get("type") != "ExternalName":
            errors.append(required("spec.ports"))
        for i, port in enumerate(ports):
            number = port.get("port") if isinstance(port, dict) else None
            if not isinstance(number, int) or not 1 <= number <= 65535:
                errors.append(invalid_value(f"spec.ports[{i}].port", number or 0,
                                            "must be between 1 and 65535, inclusive"))
    elif kind == "Scale":
        _nonnegative(errors, "spec.replicas", spec.get("replicas"))
    return errors


#: kinds whose metadata.generation the API server bumps on a change under spec (their registry
#: strategies); a Deployment's also on a change of its annotations (apps/deployment/strategy.go:
#: "annotations are copied from deployments to their replica sets"). HorizontalPodAutoscalers
#: bump only behind the HPAGeneration feature gate, off in the v1.30 the stand-in announces.
GENERATION_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "PodDisruptionBudget",
                              "Ingress"})
#: kinds with a status subresource: a write to the object keeps the stored status, a write to
#: `/status` keeps the stored spec (and, for workloads, the stored labels)
STATUS_KINDS = frozenset({"Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Pod", "Service", "Node",
                          "HorizontalPodAutoscaler", "PodDisruptionBudget", "Ingress"})


# -------------------------------------------------------------- selectors and names


def selector_requirements(selector: dict[str, Any]) -> tuple[Requirement, ...]:
    """A LabelSelector (matchLabels, matchExpressions) as requirements."""
    reqs = [Requirement(k, "=", (str(v),)) for k, v in (selector.get("matchLabels") or {}).items()]
    ops = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}
    for expr in selector.get("matchExpressions") or []:
        reqs.append(Requirement(expr["key"], ops[expr["operator"]], tuple(expr.get("values") or ())))
    return tuple(reqs)


def selector_matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    return labels_match(selector_requirements(selector), labels)


def format_selector(selector: dict[str, Any]) -> str:
    """metav1.FormatLabelSelector: requirements sorted by key, `k=v`, `k in (a,b)`, `!k`."""
    parts = []
    for r in sorted(selector_requirements(selector), key=lambda r: r.key):
        values = ",".join(sorted(r.values))
        parts.append({"=": f"{r.key}={values}", "in": f"{r.key} in ({values})",
                      "notin": f"{r.key} notin ({values})", "exists": r.key, "!": f"!{r.key}"}[r.op])
    return ",".join(parts) or "<none>"


#: k8s.io/apimachinery/pkg/util/rand's alphabet: no vowels, no 0/1/3
SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"


def safe_encode(text: str) -> str:
    """rand.SafeEncodeString: each byte to a letter of SAFE_ALPHABET."""
    return "".join(SAFE_ALPHABET[b % len(SAFE_ALPHABET)] for b in text.encode())


def pod_template_hash(template: dict[str, Any]) -> str:
    """The pod-template-hash label: an FNV-32a of the template, its decimal digits safe-encoded.
    (The controller hashes the Go struct as printed by spew; the stand-in hashes canonical JSON,
    so the values differ from a real cluster's while having their form, e.g. `7d9c8b6f4`.)"""
    h = 0x811C9DC5
    for byte in json.dumps(template, sort_keys=True, separators=(",", ":")).encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return safe_encode(str(h))


_CRD_SCHEMAS = Path(__file__).resolve().parents[1] / "data" / "crd_schemas"


@functools.cache
def _custom_validator(kind: str) -> Any:
    import jsonschema

    schema = json.loads((_CRD_SCHEMAS / CUSTOM_KINDS[kind]).read_text(encoding="utf-8"))
    return jsonschema.Draft202012Validator(schema)


def _dotted(path: Any) -> str:
    out = ""
    for step in path:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else str(step))
    return out


def validate_custom(kind: str, obj: dict[str, Any]) -> list[FieldError]:
    """The CRD's OpenAPI schema checked as kube-apiserver checks a custom resource: a wrong type,
    a missing required field or a value outside an enum, each as the field error it reports
    (`spec.predictor.minReplicas: Invalid value: "string": ...`); status is not the client's."""
    body = {k: v for k, v in obj.items() if k != "status"}
    errors: list[FieldError] = []
    for error in sorted(_custom_validator(kind).iter_errors(body), key=lambda e: list(map(str, e.absolute_path))):
        path = _dotted(error.absolute_path)
        if error.validator == "required":
            missing = error.message.split("'")[1] if "'" in error.message else ""
            errors.append(required(f"{path}.{missing}" if path else missing))
        elif error.validator == "enum":
            errors.append(not_supported(path, error.instance, [str(v) for v in error.validator_value]))
        elif error.validator == "type":
            expected = error.validator_value
            expected = expected if isinstance(expected, str) else " or ".join(expected)
            got = _json_kind(error.instance).split()[0]
            errors.append(invalid_value(path, got, f'{path} in body must be of type {expected}: "{got}"'))
        else:
            errors.append(invalid_value(path, error.instance, error.message))
    return errors


# ------------------------------------------------------------------------- discovery

_SUBRESOURCES = {"Pod": ("log", "proxy", "status"), "Deployment": ("scale", "status"),
                 "StatefulSet": ("scale", "status"), "ReplicaSet": ("scale", "status")}


def _group_entry(group: str, served: Any) -> dict[str, Any]:
    versions = [{"groupVersion": f"{group}/{v}", "version": v} for v in GROUP_VERSIONS[group] if served(group, v)]
    preferred = next((v for v in versions if v["version"] == next(
        (ver for g, ver, _r, _n in KINDS.values() if g == group), None)), versions[0] if versions else None)
    return {"name": group, "versions": versions, "preferredVersion": preferred}


def discovery(path: str, served: Any) -> dict[str, Any] | None:
    """The discovery documents (aggregated discovery not modelled): /api, /apis, /apis/GROUP and
    /api/v1 or /apis/GROUP/VERSION with the kinds served there; None for any other path."""
    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if parts == ["apis"]:
        return {"kind": "APIGroupList", "apiVersion": "v1",
                "groups": [_group_entry(g, served) for g in GROUP_VERSIONS if g]}
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in GROUP_VERSIONS and parts[1]:
        return {"kind": "APIGroup", "apiVersion": "v1", **_group_entry(parts[1], served)}
    if parts == ["api", "v1"]:
        group, version = "", "v1"
    elif len(parts) == 3 and parts[0] == "apis" and parts[1] in GROUP_VERSIONS and parts[1]:
        group, version = parts[1], parts[2]
    else:
        return None
    if not served(group, version):
        return None
    resources = []
    for kind, (g, v, plural, namespaced) in KINDS.items():
        if g != group or (version != v and not (group == "autoscaling" and kind == "HorizontalPodAutoscaler")):
            continue
        verbs = ["get", "list", "watch", "create", "update", "patch", "delete"]
        resources.append({"name": plural, "singularName": kind.lower(), "namespaced": namespaced, "kind": kind,
                          "verbs": verbs})
        resources += [{"name": f"{plural}/{sub}", "singularName": "", "namespaced": namespaced,
                       "kind": {"scale": "Scale", "log": "Pod", "proxy": "Pod"}.get(sub, kind),
                       "verbs": ["get"] if sub in ("log", "proxy") else ["get", "patch", "update"]}
                      for sub in _SUBRESOURCES.get(kind, ())]
    gv = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}


# ------------------------------------------------------------------------- managedFields

_SYSTEM_META = frozenset({"resourceVersion", "generation", "uid", "creationTimestamp", "managedFields", "name",
                          "namespace", "selfLink"})


def changed_fields(old: Any, new: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """The leaf fields a write changed, maps walked and lists taken whole (as an atomic list such
    as `args` is owned); status and the system's metadata are nobody's to own here."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: set[tuple[str, ...]] = set()
        for key in set(old) | set(new):
            if (not prefix and key in ("status", "apiVersion", "kind")) or (prefix == ("metadata",)
                                                                            and key in _SYSTEM_META):
                continue
            if key in new and (key not in old or not json_equal(old[key], new[key])):
                out |= changed_fields(old.get(key), new[key], (*prefix, key))
        return out
    return {prefix} if prefix else set()


def _owns(fields: dict[str, Any], path: tuple[str, ...]) -> bool:
    """The entry owns the field itself, or a whole field above it (a leaf `{}`: a list, a value)."""
    node: Any = fields
    for step in path:
        node = node.get(f"f:{step}") if isinstance(node, dict) else None
        if node is None:
            return False
        if node == {}:
            return True
    return True


def _drop(fields: dict[str, Any], path: tuple[str, ...]) -> None:
    if not path:
        return
    key = f"f:{path[0]}"
    if key in fields:
        if len(path) == 1:
            del fields[key]
        else:
            _drop(fields[key], path[1:])
            if fields[key] == {}:
                del fields[key]


def managed_after(entries: list[dict[str, Any]], manager: str, api_version: str, time: str,
                  paths: set[tuple[str, ...]]) -> list[dict[str, Any]]:
    """managedFields after `manager` wrote `paths` (operation Update): the fields move to it from
    any other manager, an entry left owning nothing is dropped, its own entry gets the time."""
    out = copy.deepcopy(entries)
    for entry in out:
        if entry.get("manager") != manager:
            for p in paths:
                _drop(entry.setdefault("fieldsV1", {}), p)
    mine = next((e for e in out if e.get("manager") == manager and e.get("operation") == "Update"), None)
    if mine is None:
        mine = {"manager": manager, "operation": "Update", "apiVersion": api_version, "fieldsType": "FieldsV1",
                "fieldsV1": {}}
        out.append(mine)
    mine["time"], mine["apiVersion"] = time, api_version
    for p in paths:
        node = mine["fieldsV1"]
        for step in p:
            node = node.setdefault(f"f:{step}", {})
    return [e for e in out if e.get("fieldsV1")]


def owner_of_field(entries: list[dict[str, Any]], path: tuple[str, ...]) -> tuple[str, str] | None:
    """(manager, time) of the entry that owns `path` (or a field above it), None: no owner."""
    for entry in entries:
        if path and _owns(entry.get("fieldsV1") or {}, path):
            return entry.get("manager", ""), entry.get("time", "")
    return None
