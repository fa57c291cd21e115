"""Connecting to a cluster, and what each kind of failure becomes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from collectors.kube.client import (
    Call,
    HttpStatusError,
    KubeConfigError,
    classify_transport_error,
    issue_for,
    make_api_client,
)
from runbooks.model.errors import TargetNotFound
from tests.support import words
from tests.support.kube_fixtures import TEST_TOKEN, write_kubeconfig

SERVER = "https://10.0.0.1:6443"


def _api_error(code: int, message: str) -> ApiException:
    error = ApiException(status=code, reason="x")
    error.body = json.dumps({"kind": "Status", "message": message, "code": code})
    return error


def test_call_names_the_permission_and_a_stable_source():
    assert Call("list", "pods", "llm").permission == "list pods in namespace llm"
    assert Call("get", "deployments", "llm", "x", group="apps").permission == "get deployments.apps in namespace llm"
    assert Call("get", "pods", "llm", "p:8000", "proxy").permission == "get pods/proxy in namespace llm"
    assert Call("get", "nodes", None, "n1").permission == "get nodes cluster-wide"
    assert Call("list", "pods", None, detail="spec.nodeName=n1").source == "kube:pods#spec.nodeName=n1"


@pytest.mark.parametrize(("code", "call", "kind", "message"), [
    (403, Call("get", "pods", "llm", "p", "log"), "forbidden", "missing RBAC: get pods/log in namespace llm"),
    (401, Call("list", "pods", "llm"), "forbidden", f"credentials rejected by {SERVER} (401 Unauthorized)"),
    (404, Call("list", "ingresses", "llm", group="networking.k8s.io"), "not_found",
     "not found: the server could not find the requested resource"),
    (400, Call("get", "pods", "llm", "p", "log"), "missing", "the server could not find the requested resource"),
    (500, Call("list", "events", "llm"), "unreadable", "HTTP 500: the server could not find the requested resource"),
    (504, Call("list", "events", "llm"), "timeout", "HTTP 504: the server could not find the requested resource"),
])
def test_http_failures_become_issues_of_their_kind(code, call, kind, message):
    issue = issue_for(_api_error(code, "the server could not find the requested resource"), call, SERVER, 5.0)
    assert (issue.kind, words.message(issue), issue.source) == (kind, message, call.source)


def test_direct_metrics_http_status_is_an_issue_too():
    issue = issue_for(HttpStatusError(404, "http://10.0.0.5:8000/metrics"), Call("get", "pods", "llm", "p"), SERVER, 5)
    assert issue.kind == "not_found" and "http://10.0.0.5:8000/metrics" in words.message(issue)


@pytest.mark.parametrize(("error", "expected"), [
    (urllib3.exceptions.NewConnectionError(None, "Failed to establish a new connection: [Errno 111] Connection refused"),
     ("unreachable", "connection refused")),
    (urllib3.exceptions.NameResolutionError("kube.example", None, OSError("no such host")),
     ("unreachable", "name not resolved")),
    (urllib3.exceptions.ReadTimeoutError(None, "/api", "Read timed out."), ("timeout", "timed out")),
    (urllib3.exceptions.ConnectTimeoutError("connect timed out"), ("timeout", "timed out")),
    (urllib3.exceptions.ProtocolError("Connection aborted.", ConnectionResetError()),
     ("unreachable", "connection closed without an answer")),
    (urllib3.exceptions.SSLError("certificate verify failed"), ("unreachable", "TLS handshake failed")),
    (ApiException(status=0, reason="SSLError\n[SSL: CERTIFICATE_VERIFY_FAILED]"), ("unreachable", "TLS handshake failed")),
])
def test_transport_failures_are_timeouts_or_unreachable(error, expected):
    kind, reason = classify_transport_error(error)
    assert (kind, words.en(reason)) == expected
    wrapped = urllib3.exceptions.MaxRetryError(None, "/api", reason=error) if not isinstance(error, ApiException) else error
    kind, reason = classify_transport_error(wrapped)
    assert (kind, words.en(reason)) == expected


def test_an_answer_that_is_not_json_is_unreadable():
    issue = issue_for(json.JSONDecodeError("Expecting value", "<html>", 0), Call("list", "pods", "llm"), SERVER, 5)
    assert issue.kind == "unreadable" and words.message(issue).startswith(f"unexpected answer from {SERVER}: Expecting value")


def test_timeout_issue_names_the_deadline_and_the_call():
    issue = issue_for(urllib3.exceptions.ReadTimeoutError(None, "/x", "t"), Call("list", "events", "llm"), SERVER, 2.5)
    assert (issue.kind, words.message(issue)) == ("timeout", "no answer within 2.5 s: list events in namespace llm")
    assert words.message(issue, "zh") == "2.5 秒内没有回答：命名空间 llm 中的 `list events`"


def test_make_api_client_picks_the_context_and_leaves_the_global_default_alone(tmp_path: Path):
    before = k8s.Configuration.get_default_copy().host
    config = write_kubeconfig(tmp_path / "kubeconfig", {"a": "http://127.0.0.1:1111", "b": "http://127.0.0.1:2222"},
                              current="b")
    api_a = make_api_client(str(config), "a")
    api_default = make_api_client(str(config), None)
    assert api_a.configuration.host == "http://127.0.0.1:1111"
    assert api_default.configuration.host == "http://127.0.0.1:2222"
    assert api_a.configuration.api_key == {"BearerToken": f"Bearer {TEST_TOKEN}"}
    assert api_a.configuration.retries == 0
    assert k8s.Configuration.get_default_copy().host == before


def test_missing_kubeconfig_and_missing_in_cluster_account_are_config_errors(tmp_path: Path, monkeypatch):
    with pytest.raises(KubeConfigError, match="nope"):
        make_api_client(str(tmp_path / "nope"), None)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeConfigError, match="in-cluster"):
        make_api_client(in_cluster=True)


def test_target_not_found_says_which_workload_and_context():
    error = TargetNotFound("Deployment", "llm", "x", "prod")
    assert str(error) == "Deployment llm/x not found in context prod"
    assert str(TargetNotFound("StatefulSet", "a", "b")) == "StatefulSet a/b not found"
