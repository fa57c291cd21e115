"""The one place gpumem writes to a cluster: PATCH, POST and DELETE through the writer identity's client,
each able to run as a server-side dry run (`dryRun=All`).

Reads for a write (the object as it is right before changing it) go through the same client, so
the precondition is checked with the writer's own view. Failures come back typed
(`runbooks.model.errors`): 409 StaleObject, 403 NotPermitted naming the verb and resource the
writer lacks, 404 TargetNotFound, 422 InvalidChange, 429 TemporaryError. A write
whose outcome the answer does not settle (a 5xx once it was sent, no answer in time, the
connection dropped mid-request) is OutcomeUnknown: the caller reads the object again
(`bot.actuator.apply`). A read (or a dry run) that gets no answer is TemporaryError.
"""

from __future__ import annotations

import json
from typing import Any

import urllib3

from collectors.kube.client import RETRYABLE_STATUSES, Call, transport_error
from collectors.kube.objects import ObjectReader, resource_path
from collectors.kube.rest import KubeRest, error_for
from runbooks.model.errors import OutcomeUnknown
from runbooks.model.phrases import Phrase

JSON_PATCH = "application/json-patch+json"
#: a plan whose "patch" is the one object it creates (POST), rolled back by deleting that object
CREATE = "create"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
FIELD_MANAGER = "gpumem"


class KubeWriter:
    """Reads, patches, creates and deletes objects of one cluster as the writer identity.

    `writes` counts the requests that could change the cluster (dry runs not included).
    `observer` is what the watch reads pods, their logs and ReplicaSets with: the reader's
    identity when one is given (`observer_api`; the writer's Role grants none of those), else
    this one (the CLI operator's own kubeconfig)."""

    def __init__(self, api: Any, timeout_s: float = 10.0, observer_api: Any = None):
        self.rest = KubeRest(api)
        self.reader = ObjectReader(api, timeout_s)
        self.observer = KubeRest(observer_api) if observer_api is not None else self.rest
        self.timeout_s = timeout_s
        self.writes = 0

    def read(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        """The object right before a write, as the writer identity sees it."""
        return self.reader.read(kind, namespace, name)

    def list(self, kind: str, namespace: str) -> list[dict[str, Any]]:
        """The objects of `kind` in `namespace` (e.g. the HPAs, to find the one that scales a workload)."""
        return self.reader.list(kind, namespace)

    def patch(self, kind: str, namespace: str, name: str, body: Any, content_type: str,
              dry_run: bool = False) -> dict[str, Any]:
        where, call = resource_path(kind, namespace, name)
        return self._send("PATCH", where, body, content_type, dry_run, Call("patch", call.resource, namespace, name,
                                                                            group=call.group))

    def create(self, kind: str, namespace: str, body: dict[str, Any], dry_run: bool = False) -> dict[str, Any]:
        where, call = resource_path(kind, namespace)
        return self._send("POST", where, body, "application/json", dry_run,
                          Call("create", call.resource, namespace, group=call.group))

    def delete(self, kind: str, namespace: str, name: str, preconditions: dict[str, str],
               dry_run: bool = False) -> dict[str, Any]:
        """DELETE one object, only if it still has `preconditions` (uid, resourceVersion): an
        object replaced or changed in between is a 409, not a deletion."""
        where, call = resource_path(kind, namespace, name)
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": dict(preconditions),
                "propagationPolicy": "Background"}
        return self._send("DELETE", where, body, "application/json", dry_run,
                          Call("delete", call.resource, namespace, name, group=call.group))

    def _send(self, method: str, where: str, body: Any, content_type: str, dry_run: bool, call: Call) -> dict[str, Any]:
        query = {"fieldManager": FIELD_MANAGER}
        if dry_run:
            query["dryRun"] = "All"
        where += "?" + "&".join(f"{k}={v}" for k, v in query.items())
        if not dry_run:
            self.writes += 1
        return send_json(self.rest, method, where, body, call, self.timeout_s, content_type, dry_run=dry_run)


def send_json(rest: KubeRest, method: str, where: str, body: Any, call: Call, timeout_s: float,
              content_type: str = "application/json", *, dry_run: bool = False) -> dict[str, Any]:
    """One request to the API server through `rest`'s connection (`body` None: none sent), no
    retries; the answer's JSON object, or the typed error for its status (`error_for`). Every
    write gpumem makes to a cluster goes through here (plans, and the scheduler's Lease).

    A write (not GET, not `dry_run`) that may have reached the server and got no answer that
    settles it raises OutcomeUnknown: a 5xx (500, 502, 503, 504), no answer within
    `timeout_s`, the connection closed mid-request, an answer that is not JSON. Failures before
    it was sent (refused, DNS, TLS, connect timeout) and reads are TemporaryError."""
    write = method != "GET" and not dry_run
    headers = {**rest._headers("application/json"), "Content-Type": content_type}
    try:
        response = rest.pool.request(method, rest.host + where,
                                     body=None if body is None else json.dumps(body).encode(), headers=headers,
                                     retries=False, timeout=urllib3.Timeout(total=timeout_s), preload_content=True)
    except urllib3.exceptions.HTTPError as e:
        raise transport_error(e, call, timeout_s, write=write) from e
    if not 200 <= response.status < 300:
        error = error_for(response, call)
        if write and response.status in RETRYABLE_STATUSES and response.status != 429:
            # answered after the request was sent: the server may have stored it before failing
            # a 504 is a gateway's, and a 500 may be etcd's "request timed out", whose proposal can
            # still commit: either way the write may still land
            in_flight = {"in_flight": "yes"} if response.status in (500, 504) else {}
            unknown = OutcomeUnknown(getattr(error, "delay_s", 1.0), reason=f"HTTP {response.status}",
                                     source=call.source, verb=call.verb,
                                     detail=getattr(error, "params", {}).get("detail", ""), **in_flight)
            raise unknown from error
        raise error
    try:
        doc = json.loads(response.data)
    except ValueError as e:
        if write:
            raise OutcomeUnknown(reason=Phrase("reason.answer_not_json"), source=call.source, verb=call.verb) from e
        raise
    if not isinstance(doc, dict):
        if write:
            raise OutcomeUnknown(reason=Phrase("reason.answer_not_object"), source=call.source, verb=call.verb)
        raise ValueError("expected a JSON object")
    return doc


