"""GET a path of the Kubernetes API with the client's connection and credentials, without its
generated API classes.

The `kubernetes` package's generated API modules (`CoreV1Api` and friends, with their pydantic
models) take over a second to import, and a triage reads raw JSON anyway (nothing a model would
drop or reject is lost; it is what `kubectl get -o json` shows). So reads go through the
`ApiClient`'s own connection pool (its TLS settings, proxy and client certificate) with the
headers its configuration gives (the bearer token, refreshed by the exec or OIDC hook when the
kubeconfig has one). A non-2xx answer raises the client's own `ApiException`, so callers see
the same errors as before.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote, urlencode

import urllib3
from kubernetes.client.exceptions import ApiException

from collectors.kube.client import api_error, status_message
from runbooks.model.errors import InvalidChange


def path(*parts: str) -> str:
    """A resource path with each part quoted (names never add path segments).

    >>> path("api", "v1", "namespaces", "llm", "pods", "vllm-0:8000", "proxy", "metrics")
    '/api/v1/namespaces/llm/pods/vllm-0:8000/proxy/metrics'
    """
    return "/" + "/".join(quote(p, safe=":") for p in parts)


class KubeRest:
    """GETs against one cluster: `get_json(path, query, timeout_s)`, `get_text(...)`."""

    def __init__(self, api: Any):
        self.configuration = api.configuration
        self.pool = api.rest_client.pool_manager
        self.host = str(self.configuration.host).rstrip("/")

    def _headers(self, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "gpumem"}
        for setting in self.configuration.auth_settings().values():
            if setting.get("in") == "header" and setting.get("value"):
                headers[setting["key"]] = setting["value"]
        return headers

    def _get(self, resource_path: str, query: dict[str, Any] | None, timeout_s: float, accept: str) -> bytes:
        params = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        url = self.host + resource_path + ("?" + urlencode(params) if params else "")
        response = self.pool.request("GET", url, headers=self._headers(accept), retries=False,
                                     timeout=urllib3.Timeout(total=timeout_s), preload_content=True)
        if not 200 <= response.status < 300:
            raise ApiException(http_resp=response)
        return bytes(response.data)

    def get_json(self, resource_path: str, query: dict[str, Any] | None = None, *, timeout_s: float) -> dict[str, Any]:
        """The JSON object at `resource_path`. Raises ApiException (non-2xx), ValueError (not a
        JSON object), urllib3 errors (transport)."""
        doc = json.loads(self._get(resource_path, query, timeout_s, "application/json"))
        if not isinstance(doc, dict):
            raise ValueError("expected a JSON object")
        return doc

    def get_text(self, resource_path: str, query: dict[str, Any] | None = None, *, timeout_s: float) -> str:
        """The body at `resource_path` as text (logs, proxied /metrics)."""
        return self._get(resource_path, query, timeout_s, "*/*").decode("utf-8", errors="replace")


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def error_for(response: Any, call: Any) -> Exception:
    """The typed error (`runbooks.model.errors`) of a non-2xx urllib3 response to `call`, as
    `collectors.kube.client.api_error` words it for a read; a 422 (the server refused the
    object as invalid) is InvalidChange (a UsageError) with the server's message."""

    error = ApiException(http_resp=response)
    if error.status == 422:
        mapped = InvalidChange(detail=status_message(error))
        mapped.__cause__ = error
        return mapped
    return api_error(error, call)
