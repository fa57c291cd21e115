"""A stand-in Kubernetes API server on a loopback port that the official client can talk to.

It serves what gpumem reads: GET and LIST (label and field selectors, `XList` bodies with a
resourceVersion, cluster-wide lists) for core, apps, autoscaling, policy and networking
objects; the pod `log` and `proxy` subresources; real `Status` bodies for 401/403/404/400/503.
Tests can add latency (all requests or per path pattern), failures (a status code or a dropped
connection per path pattern), and an RBAC mode that denies what the granted rules do not
allow. Every request is recorded so tests can assert on the calls made.

>>> kube = FakeKube().start()
>>> kube.url.startswith("http://127.0.0.1:")
True
>>> kube.stop()
"""

from __future__ import annotations

import copy
import http.client
import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.support import fake_kube_rules as rules
from tests.support.loopback import LoopbackHTTPServer, LoopbackServer

USER = "system:serviceaccount:gpumem:gpumem"


@dataclass(frozen=True)
class Request:
    """One request as the API server's authorizer sees it."""

    method: str
    path: str
    query: dict[str, str]
    verb: str | None = None  # get | list | watch; None for non-resource paths
    api_group: str | None = None
    version: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    status: int = 0


@dataclass
class _Binding:
    rules: list[dict[str, Any]]
    namespace: str | None  # None: a ClusterRoleBinding


@dataclass
class FakeKube(LoopbackServer):
    """The API server state: objects, logs, proxy upstreams, latency, failures, RBAC."""

    token: str | None = None
    user: str = USER
    latency_s: float = 0.0
    objects: dict[tuple[str, str], dict[tuple[str, str], dict[str, Any]]] = field(default_factory=dict)
    logs: dict[tuple[str, str, str, bool], str] = field(default_factory=dict)
    upstreams: dict[tuple[str, str, int], str] = field(default_factory=dict)
    requests: list[Request] = field(default_factory=list)
    disabled_versions: set[str] = field(default_factory=set)
    _latency_rules: list[tuple[re.Pattern[str], float]] = field(default_factory=list)
    _failures: list[tuple[re.Pattern[str], int | str]] = field(default_factory=list)
    _bindings: list[_Binding] | None = None
    _rv: int = 1000
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _server: LoopbackHTTPServer | None = None
    _idle: threading.Condition = field(default_factory=threading.Condition)
    _inflight: int = 0

    # ---------------------------------------------------------------- contents

    def add(self, *objs: dict[str, Any]) -> None:
        """Store objects (kind/apiVersion/metadata as kubectl prints them); Lists are unpacked."""
        for obj in objs:
            if obj.get("kind", "").endswith("List") and "items" in obj:
                self.add(*obj["items"])
                continue
            kind = obj["kind"]
            group, _version, resource, namespaced = rules.KINDS[kind]
            obj = copy.deepcopy(obj)
            meta = obj.setdefault("metadata", {})
            with self._lock:
                self._rv += 1
                meta.setdefault("resourceVersion", str(self._rv))
            meta.setdefault("uid", str(uuid.uuid5(uuid.NAMESPACE_URL, f"{kind}/{meta.get('namespace')}/{meta['name']}")))
            meta.setdefault("creationTimestamp", "2026-03-09T08:00:00Z")
            namespace = meta.get("namespace", "default") if namespaced else ""
            if namespaced:
                meta["namespace"] = namespace
            self.objects.setdefault((group, resource), {})[(namespace, meta["name"])] = obj

    def remove(self, kind: str, namespace: str, name: str) -> None:
        group, _v, resource, namespaced = rules.KINDS[kind]
        self.objects.get((group, resource), {}).pop((namespace if namespaced else "", name), None)

    def set_log(self, namespace: str, pod: str, container: str, text: str, previous: bool = False) -> None:
        """A container's log; lines may start with an RFC 3339 time, kept only with timestamps=true."""
        self.logs[(namespace, pod, container, previous)] = text

    def set_upstream(self, namespace: str, pod: str, port: int, base_url: str) -> None:
        """Where the pod proxy forwards `pods/{pod}:{port}/proxy/...` (a loopback URL)."""
        if not base_url.startswith("http://127.0.0.1:"):
            raise ValueError("upstreams must be loopback URLs")
        self.upstreams[(namespace, pod, port)] = base_url.rstrip("/")

    def add_latency(self, path_pattern: str, seconds: float) -> None:
        """Delay requests whose `path?query` matches the regex (on top of `latency_s`)."""
        self._latency_rules.append((re.compile(path_pattern), seconds))

    def fail(self, path_pattern: str, status: int | str) -> None:
        """Answer matching requests with `status` (an HTTP code) or "drop" (close, no answer)."""
        self._failures.append((re.compile(path_pattern), status))

    def grant(self, rules_: list[dict[str, Any]], namespace: str | None = None) -> None:
        """Turn on RBAC mode and bind rules: cluster-wide (None) or in one namespace (a Role)."""
        if self._bindings is None:
            self._bindings = []
        self._bindings.append(_Binding(list(rules_), namespace))

    def calls(self, **match: Any) -> list[Request]:
        """Recorded requests whose fields equal every given value, e.g. calls(verb="list")."""
        # a request is recorded after its answer is sent, so a client can be done before the
        # record lands: wait (briefly) until nothing is in flight
        with self._idle:
            self._idle.wait_for(lambda: self._inflight == 0, timeout=2.0)
            recorded = list(self.requests)
        return [r for r in recorded if all(getattr(r, k) == v for k, v in match.items())]

    # ---------------------------------------------------------------- serving

    def _begin(self) -> None:
        with self._idle:
            self._inflight += 1

    def _record(self, req: Request) -> None:
        with self._idle:
            self.requests.append(req)
            self._inflight -= 1
            self._idle.notify_all()

    def _delay_for(self, target: str) -> float:
        return self.latency_s + sum(s for pattern, s in self._latency_rules if pattern.search(target))

    def _failure_for(self, target: str) -> int | str | None:
        for pattern, outcome in self._failures:
            if pattern.search(target):
                return outcome
        return None

    def authorize(self, req: Request) -> bool:
        if self._bindings is None or req.verb is None:
            return True
        for binding in self._bindings:
            if binding.namespace is not None and binding.namespace != req.namespace:
                continue
            for rule in binding.rules:
                if rules.rule_allows(rule, req.verb, req.api_group or "", req.resource or "",
                                     req.subresource, req.name):
                    return True
        return False

    def served(self, group: str, version: str) -> bool:
        gv = f"{group}/{version}" if group else version
        return version in rules.GROUP_VERSIONS.get(group, ()) and gv not in self.disabled_versions

    def list_objects(self, group: str, resource: str, namespace: str | None) -> list[dict[str, Any]]:
        store = self.objects.get((group, resource), {})
        return [obj for (ns, _name), obj in sorted(store.items()) if namespace is None or ns == namespace]

    def get_object(self, group: str, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return self.objects.get((group, resource), {}).get((namespace or "", name))


def parse_request(method: str, raw_path: str) -> Request:
    """Map a URL to (verb, group, version, resource, subresource, namespace, name)."""
    split = urlsplit(raw_path)
    query = {k: v[-1] for k, v in parse_qs(split.query, keep_blank_values=True).items()}
    parts = [unquote(p) for p in split.path.strip("/").split("/")]
    base = Request(method, split.path, query)
    if len(parts) >= 2 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return base
    if not rest:
        return base
    namespace = None
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    subresource = rest[2] if len(rest) > 2 else None
    if method == "GET":
        verb = "get" if name else ("watch" if query.get("watch") in ("true", "1") else "list")
    else:
        verb = {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())
    return Request(method, split.path, query, verb, group, version, resource, subresource, namespace, name)



class _Handler(BaseHTTPRequestHandler):
    kube: FakeKube
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out as separate writes
    server_version = "fake-kube/1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
        pass

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    # ------------------------------------------------------------------ replies

    def _send(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _json(self, code: int, doc: dict[str, Any]) -> int:
        self._send(code, json.dumps(doc).encode(), "application/json")
        return code

    def _text(self, code: int, text: str) -> int:
        self._send(code, text.encode(), "text/plain")
        return code

    # ------------------------------------------------------------------ routing

    def _serve(self, method: str) -> None:
        kube = self.kube
        if method != "GET" and self.headers.get("Content-Length"):
            self.rfile.read(int(self.headers["Content-Length"]))
        req = parse_request(method, self.path)
        target = self.path
        delay = kube._delay_for(target)
        if delay > 0:
            time.sleep(delay)
        outcome = kube._failure_for(target)
        code = 0
        kube._begin()  # nothing is sent before this, so no client can finish unrecorded
        try:
            if outcome == "drop":
                self.close_connection = True
                self.connection.shutdown(2)
            elif isinstance(outcome, int):
                code = self._json(outcome, rules.status(outcome, rules.REASONS.get(outcome, "InternalError"),
                                                        f"injected failure {outcome}"))
            else:
                code = self._route(req)
        except (BrokenPipeError, ConnectionResetError, OSError):
            code = -1  # the client gave up (timeout) before the answer
        finally:
            kube._record(Request(**{**req.__dict__, "status": code}))

    def _route(self, req: Request) -> int:
        kube = self.kube
        if kube.token is not None and self.headers.get("Authorization") != f"Bearer {kube.token}":
            return self._json(401, rules.unauthorized())
        if req.verb is None:
            if req.path in ("/version", "/version/"):
                return self._json(200, {"major": "1", "minor": "30", "gitVersion": "v1.30.0-fake"})
            return self._json(404, rules.no_such_resource())
        if not kube.authorize(req):
            return self._json(403, rules.forbidden(kube.user, req.verb, req.api_group or "", req.resource or "",
                                                   req.subresource, req.namespace, req.name))
        group, version, resource = req.api_group or "", req.version or "", req.resource or ""
        if not kube.served(group, version) or (group, resource) not in rules.RESOURCE_KINDS:
            return self._json(404, rules.no_such_resource())
        if req.method != "GET":
            return self._json(405, rules.status(405, "MethodNotAllowed", "the stand-in server is read-only"))
        if req.name is None:
            return self._list(req, group, version, resource)
        obj = kube.get_object(group, resource, req.namespace, req.name.split(":")[0])
        if obj is None or (req.subresource == "proxy" and resource != "pods"):
            return self._json(404, rules.not_found(group, resource, req.name.split(":")[0]))
        if req.subresource is None:
            return self._json(200, rules.as_served(obj, version, group))
        if req.subresource == "log" and resource == "pods":
            return self._log(req, obj)
        if req.subresource == "proxy":
            return self._proxy(req, obj)
        if req.subresource == "status":
            return self._json(200, rules.as_served(obj, version, group))
        return self._json(404, rules.no_such_resource())

    def _list(self, req: Request, group: str, version: str, resource: str) -> int:
        try:
            labels = rules.parse_label_selector(req.query.get("labelSelector", ""))
            fields = rules.parse_field_selector(req.query.get("fieldSelector", ""), resource)
        except rules.SelectorError as e:
            return self._json(400, rules.bad_request(str(e)))
        items = []
        for obj in self.kube.list_objects(group, resource, req.namespace):
            if rules.labels_match(labels, obj["metadata"].get("labels") or {}) and rules.fields_match(fields, obj):
                item = copy.deepcopy(obj)
                item.pop("kind", None)
                item.pop("apiVersion", None)
                items.append(item)
        kind = rules.RESOURCE_KINDS[(group, resource)]
        return self._json(200, {
            "kind": f"{kind}List",
            "apiVersion": f"{group}/{version}" if group else version,
            "metadata": {"resourceVersion": str(self.kube._rv)},
            "items": items,
        })

    def _log(self, req: Request, pod: dict[str, Any]) -> int:
        name, ns = pod["metadata"]["name"], pod["metadata"]["namespace"]
        containers = [c["name"] for c in pod.get("spec", {}).get("containers", [])]
        container = req.query.get("container")
        if not container:
            if len(containers) != 1:
                return self._json(400, rules.bad_request(
                    f"a container name must be specified for pod {name}, choose one of: [{' '.join(containers)}]"))
            container = containers[0]
        if container not in containers:
            return self._json(400, rules.bad_request(f"container {container} is not valid for pod {name}"))
        previous = req.query.get("previous") in ("true", "1")
        text = self.kube.logs.get((ns, name, container, previous))
        if text is None and previous:
            return self._json(400, rules.bad_request(
                f'previous terminated container "{container}" in pod "{name}" not found'))
        if text is None:
            waiting = rules.waiting_reason(pod, container)
            if waiting:
                return self._json(400, rules.bad_request(
                    f'container "{container}" in pod "{name}" is waiting to start: {waiting}'))
            text = ""
        return self._text(200, rules.log_body(text, req.query))

    def _proxy(self, req: Request, pod: dict[str, Any]) -> int:
        parts = (req.name or "").split(":")
        if len(parts) == 3:  # scheme:name:port
            parts = parts[1:]
        port = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 80
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        rest = self.path.split("/proxy", 1)[1] if "/proxy" in self.path else "/"
        base = self.kube.upstreams.get((ns, name, port))
        pod_ip = (pod.get("status") or {}).get("podIP", "10.0.0.1")
        if base is None:
            return self._json(503, rules.status(
                503, "ServiceUnavailable",
                f"error trying to reach service: dial tcp {pod_ip}:{port}: connect: connection refused"))
        split = urlsplit(base)
        conn = http.client.HTTPConnection(split.hostname or "127.0.0.1", split.port, timeout=30)
        try:
            conn.request("GET", rest or "/")
            answer = conn.getresponse()
            body = answer.read()
            content_type = answer.getheader("Content-Type", "text/plain")
            code = answer.status
        except OSError as e:
            return self._json(503, rules.status(503, "ServiceUnavailable", f"error trying to reach service: {e}"))
        finally:
            conn.close()
        self._send(code, body, content_type)
        return code


FakeKube.handler, FakeKube.handler_attr, FakeKube.thread_name = _Handler, "kube", "fake-kube"
