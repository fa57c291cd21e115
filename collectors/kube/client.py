"""The Kubernetes API client for live gathering: connecting, one read call, and its failures.

`make_api_client` builds an `ApiClient` from a kubeconfig (any context) or the pod's service
account, without touching the client's global default configuration, so several clusters
can be read side by side. `Call` names one read the way RBAC does (verb, resource,
subresource, namespace); `issue_for` turns what went wrong with it into a ReadIssue:

- 403 -> "forbidden", naming the missing RBAC permission (`missing RBAC: list pods in namespace llm`)
- 401 -> "forbidden" (the credentials were rejected)
- 404 -> "not_found"; 400 on a previous container's log -> "missing"
- no answer in time -> "timeout"; refused, DNS, TLS, dropped connection -> "unreachable" with
  the cluster URL (never the token)

A call whose failure ends the work rather than leaving a gap in the evidence is instead mapped
by `api_error` to a `runbooks.model.errors.GpumemError` that says what to do: TargetNotFound
(404), NotPermitted (403), StaleObject (409), TemporaryError (429, 5xx: retry after Retry-After).

The reasons are phrases under `read.` (`collectors.errors`), worded in the reader's language.

>>> Call("list", "pods", "llm").permission
'list pods in namespace llm'
>>> Call("get", "pods", "llm", "p", "log").rbac
Phrase(key='read.rbac_namespaced', params={'rule': 'get pods/log', 'namespace': 'llm'})
"""

from __future__ import annotations

import email.utils
import json
import math
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from collectors.errors import quoted, said
from collectors.kube.errors import KubeConfigError as KubeConfigError
from collectors.kube.errors import KubeError as KubeError
from runbooks.model import errors
from runbooks.model.evidence import ReadIssue
from runbooks.model.phrases import Phrase
from runbooks.model.secrets import redact_text

#: enough connections for every pod's logs and metrics at once
DEFAULT_POOL_MAXSIZE = 64


def make_api_client(kubeconfig: str | None = None, context: str | None = None,
                    in_cluster: bool = False) -> k8s.ApiClient:
    """An ApiClient for one cluster, from a kubeconfig file and context or from in-cluster config.

    `kubeconfig=None` reads $KUBECONFIG / ~/.kube/config as kubectl does; `context=None` uses
    the file's current context. The global default configuration is left alone. Failed calls
    are not retried (the deadline is the caller's), and the connection pool is sized for
    parallel calls. Raises KubeConfigError when the config cannot be loaded.
    """
    configuration = k8s.Configuration()
    try:
        if in_cluster:
            k8s_config.load_incluster_config(client_configuration=configuration)
        else:
            k8s_config.load_kube_config(config_file=kubeconfig, context=context,
                                        client_configuration=configuration, persist_config=False)
    except (ConfigException, OSError, ValueError, TypeError, KeyError) as e:
        raise KubeConfigError(_one_line(e), None if in_cluster else kubeconfig, in_cluster) from e
    configuration.retries = 0
    configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, DEFAULT_POOL_MAXSIZE)
    return k8s.ApiClient(configuration)


def cluster_url(api: k8s.ApiClient) -> str:
    """The API server URL of a client (no credentials are part of it)."""
    return str(api.configuration.host)


@dataclass(frozen=True)
class Call:
    """One read, named the way RBAC names it.

    >>> Call("get", "pods", "llm", "vllm-0", "log").source
    'kube:pods/log/llm/vllm-0'
    """

    verb: str
    resource: str
    namespace: str | None = None
    name: str | None = None
    subresource: str | None = None
    group: str = ""
    #: extra words for the source id (a container, "previous", a port)
    detail: str | None = None

    @property
    def resource_path(self) -> str:
        return f"{self.resource}/{self.subresource}" if self.subresource else self.resource

    @property
    def rule(self) -> str:
        """The verb and resource as a Role names them: "get pods/log", "list ingresses.networking.k8s.io"."""
        group = f".{self.group}" if self.group else ""
        return f"{self.verb} {self.resource}{group}{'/' + self.subresource if self.subresource else ''}"

    @property
    def permission(self) -> str:
        """The RBAC permission this call needs, e.g. "get pods/log in namespace llm" (for logs;
        a person reads `rbac`, worded in their language)."""
        return f"{self.rule} {'in namespace ' + self.namespace if self.namespace else 'cluster-wide'}"

    @property
    def rbac(self) -> Phrase:
        """The permission as a phrase: the rule and its namespace, or cluster-wide."""
        return errors.rbac_phrase(self.rule, self.namespace)

    @property
    def source(self) -> str:
        """A stable id of what was read: kube:<resource>[/<sub>][/<namespace>][/<name>][#detail]."""
        parts = [self.resource_path] + [p for p in (self.namespace, self.name) if p]
        tail = f"#{self.detail}" if self.detail else ""
        return "kube:" + "/".join(parts) + tail


class HttpStatusError(Exception):
    """A non-2xx answer from a plain HTTP endpoint (a pod's /metrics read directly)."""

    def __init__(self, status: int, url: str):
        super().__init__(f"HTTP {status} from {url}")
        self.status = status
        self.url = url


def issue_for(error: BaseException, call: Call, server: str, timeout_s: float) -> ReadIssue:
    """What went wrong with `call`, as a ReadIssue of the right kind."""
    if isinstance(error, ApiException) and error.status:
        return _http_issue(error.status, status_message(error), call, server)
    if isinstance(error, HttpStatusError):
        return _http_issue(error.status, str(error), call, server)
    if isinstance(error, ValueError) and not isinstance(error, urllib3.exceptions.HTTPError):
        # an answer came, but not the JSON the API sends (a login page, a proxy's error page)
        return ReadIssue(call.source, said("unexpected_answer_from", server=server,
                                           detail=quoted(_one_line(error)[:200])))
    kind, reason = classify_transport_error(error)
    if kind == "timeout":
        return ReadIssue(call.source, no_answer_within(timeout_s, call.rbac), kind="timeout")
    return ReadIssue(call.source, said("cannot_reach", server=server, reason=reason), kind="unreachable")


def no_answer_within(seconds: float, rbac: Phrase | None = None) -> Phrase:
    """"no answer within 2.0 s", and the permission of the call that waited where there is one."""
    if rbac is None:
        return said("no_answer_within", seconds=f"{seconds:.1f}")
    return said("no_answer_within_call", seconds=f"{seconds:.1f}", permission=rbac)


def _http_issue(code: int, message: str, call: Call, server: str) -> ReadIssue:
    text = quoted(message)
    if code == 403:
        return ReadIssue(call.source, said("missing_rbac", permission=call.rbac), kind="forbidden")
    if code == 401:
        return ReadIssue(call.source, said("credentials_rejected", server=server), kind="forbidden")
    if code == 404:
        return ReadIssue(call.source, said("not_found", message=text), kind="not_found")
    if code == 400 and call.subresource == "log":
        return ReadIssue(call.source, said("log_refused", message=text), kind="missing")
    return ReadIssue(call.source, said("http_status", code=code, message=text),
                     kind="timeout" if code == 504 else "unreadable")


#: HTTP statuses that say "not now" rather than "not this": the same call may succeed later
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
#: the retry delay when a retryable answer names none
DEFAULT_RETRY_DELAY_S = 1.0
#: the most of an answer's body an error carries (into logs and replies)
MAX_BODY_CHARS = 256
#: resource -> kind, so a missing object reads as `kubectl` would name it
_KINDS = {"deployments": "Deployment", "statefulsets": "StatefulSet", "replicasets": "ReplicaSet",
          "pods": "Pod", "nodes": "Node", "services": "Service", "namespaces": "Namespace"}


def api_error(error: ApiException, call: Call) -> errors.GpumemError:
    """What a failed API call means, as the GpumemError a surface can word and act on.

    404 -> TargetNotFound (the object `call` names); 403 -> NotPermitted naming the verb and
    resource the call needs; 409 -> StaleObject; 429 and 500/502/503/504 -> TemporaryError with the
    Retry-After header as `delay_s` (1 s when there is none); 401 -> EvidenceUnavailable
    "unauthorized"; anything else -> EvidenceUnavailable "api_error". The ApiException is kept
    as `__cause__`; body text is cut to 256 characters, and the headers (which may echo
    credentials back) are never copied.

    >>> e = api_error(ApiException(status=403, reason="Forbidden"), Call("list", "pods", "llm"))
    >>> type(e).__name__, e.permission, str(e)
    ('NotPermitted', 'list pods in namespace llm', 'forbidden: list pods in namespace llm')
    """
    status = error.status or 0
    detail = _body_text(error)
    mapped: errors.GpumemError
    if status == 404:
        kind = _KINDS.get(call.resource, call.resource_path)
        mapped = errors.TargetNotFound(kind, call.namespace or "", call.name or "")
    elif status == 403:
        group = f".{call.group}" if call.group else ""
        sub = f"/{call.subresource}" if call.subresource else ""
        mapped = errors.NotPermitted(call.verb, f"{call.resource}{group}{sub}", call.namespace, detail=detail)
    elif status == 409:
        mapped = errors.StaleObject(resource=call.resource_path, namespace=call.namespace, name=call.name,
                                 detail=detail)
    elif status in RETRYABLE_STATUSES:
        mapped = errors.TemporaryError(retry_after_s(error), status=status, source=call.source, detail=detail)
    elif status == 401:
        mapped = errors.EvidenceUnavailable("unauthorized", status=status, source=call.source, detail=detail)
    else:
        mapped = errors.EvidenceUnavailable("api_error", status=status, source=call.source, detail=detail)
    mapped.__cause__ = error
    return mapped


def retry_after_s(error: ApiException, default: float = DEFAULT_RETRY_DELAY_S) -> float:
    """The Retry-After header of an answer in seconds (delta-seconds or an HTTP date), else `default`.

    >>> from types import SimpleNamespace
    >>> retry_after_s(ApiException(http_resp=SimpleNamespace(status=429, reason="", data=b"",
    ...                                                      headers={"Retry-After": "7"})))
    7.0
    """
    value = next((str(v) for k, v in (error.headers or {}).items() if str(k).lower() == "retry-after"), "")
    value = value.strip()
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        try:
            at = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return default
        if at.tzinfo is None:
            return default
        seconds = (at - datetime.now(UTC)).total_seconds()
    return max(0.0, seconds) if math.isfinite(seconds) else default


def _body_text(error: ApiException) -> str:
    """The Status message of an answer, else its body, else its reason: one line, at most 256 characters."""
    body = error.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    text = status_message(error) if isinstance(body, str) and body.strip().startswith("{") else (body or "")
    return redact_text(" ".join(str(text or error.reason or "").split()))[:MAX_BODY_CHARS]


def status_message(error: ApiException) -> str:
    """The `message` of a Status body, else the HTTP reason phrase."""
    body = error.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    if isinstance(body, str) and body.strip().startswith("{"):
        try:
            doc = json.loads(body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and isinstance(doc.get("message"), str):
            return redact_text(doc["message"])[:300]
    return redact_text(str(error.reason or ""))[:300]


def classify_transport_error(error: BaseException) -> tuple[str, Phrase]:
    """("timeout" | "unreachable", the short reason as a phrase) for an error below HTTP."""
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    # NameResolutionError and NewConnectionError subclass ConnectTimeoutError in urllib3:
    # test them first so a refused connection is not taken for a slow one.
    if isinstance(error, urllib3.exceptions.NameResolutionError):
        return "unreachable", said("transport.name_not_resolved")
    if isinstance(error, urllib3.exceptions.NewConnectionError):
        return "unreachable", _connection_reason(error)
    if isinstance(error, (urllib3.exceptions.TimeoutError, TimeoutError, socket.timeout)):
        return "timeout", said("transport.timed_out")
    if isinstance(error, urllib3.exceptions.SSLError) or (isinstance(error, ApiException) and "SSLError" in str(error.reason)):
        return "unreachable", said("transport.tls_failed")
    if isinstance(error, urllib3.exceptions.ProtocolError):
        return "unreachable", said("transport.closed")
    if isinstance(error, (ConnectionError, OSError, urllib3.exceptions.HTTPError)):
        return "unreachable", quoted(_one_line(error)[:120])
    return "unreachable", quoted(type(error).__name__)


def sent_before_failing(error: BaseException) -> bool:
    """Whether the request may have reached the server before `error` (an error below HTTP):
    False only when no connection was made (refused, DNS, connect timeout, TLS handshake), so
    the server never saw it; a read timeout or a connection dropped mid-request may come after
    the server took it."""
    if isinstance(error, urllib3.exceptions.MaxRetryError) and error.reason is not None:
        error = error.reason
    return not isinstance(error, (urllib3.exceptions.ConnectTimeoutError, urllib3.exceptions.NameResolutionError,
                                  urllib3.exceptions.NewConnectionError, urllib3.exceptions.SSLError,
                                  ConnectionRefusedError))


def transport_error(error: BaseException, call: Call, timeout_s: float, *, write: bool = False) -> errors.GpumemError:
    """A failure below HTTP (`classify_transport_error`) as the GpumemError that says what to
    do: a write that may have been sent (`write` and `sent_before_failing`) is OutcomeUnknown
    (read the object again before saying anything); anything else is TemporaryError, code
    "timeout" (no answer within `timeout_s`) or "unreachable", retry after `delay_s`. The
    urllib3 error is kept as `__cause__`; its text is cut and never carries a header.

    >>> e = transport_error(urllib3.exceptions.ReadTimeoutError(None, "/x", "timed out"), Call("get", "pods", "llm"), 2.0)
    >>> type(e).__name__, e.code, e.params["reason"]
    ('TemporaryError', 'timeout', Phrase(key='read.no_answer_within', params={'seconds': '2.0'}))
    """
    kind, reason = classify_transport_error(error)
    words = no_answer_within(timeout_s) if kind == "timeout" else reason
    mapped: errors.GpumemError
    if write and sent_before_failing(error):
        mapped = errors.OutcomeUnknown(DEFAULT_RETRY_DELAY_S, reason=words, source=call.source, verb=call.verb,
                                       in_flight="yes")
    else:
        mapped = errors.TemporaryError(DEFAULT_RETRY_DELAY_S, code=kind, reason=words, source=call.source,
                                       verb=call.verb)
    mapped.__cause__ = error
    return mapped


def _connection_reason(error: BaseException) -> Phrase:
    text = str(error).lower()
    if "refused" in text:
        return said("transport.refused")
    if "unreachable" in text:
        return said("transport.net_unreachable")
    return said("transport.cannot_connect")


def _one_line(error: BaseException) -> str:
    return redact_text(" ".join(str(error).split()))[:300] or type(error).__name__


def read_json(method: Any, *args: Any, timeout_s: float, **kwargs: Any) -> dict[str, Any]:
    """Call a typed API method and return the raw JSON object the server sent (camelCase keys).

    Raw JSON rather than the client's models: nothing the models would drop or reject (an
    unknown enum value, a newer field) is lost, and it is what `kubectl get -o json` shows.
    """
    response = method(*args, _preload_content=False, _request_timeout=timeout_s, **kwargs)
    doc = json.loads(response.data)
    if not isinstance(doc, dict):
        raise ValueError("expected a JSON object")
    return doc


def read_text(method: Any, *args: Any, timeout_s: float, **kwargs: Any) -> str:
    """Call a typed API method that answers text (logs, proxied /metrics) and return it as is.

    `_preload_content=False` keeps the client from parsing a one-line JSON log as an object.
    """
    response = method(*args, _preload_content=False, _request_timeout=timeout_s, **kwargs)
    return bytes(response.data).decode("utf-8", errors="replace")
