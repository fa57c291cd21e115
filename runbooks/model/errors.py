"""The errors gpumem words for a person: one base with a stable code, children that say what to do.

An error a person reads (one line on the terminal, a Slack reply) is a `GpumemError`: `code` is
a stable id that the catalogs word (bot/render/locales), `params` the values that wording needs.
Its class says what the caller should do about it, so each surface maps the classes once
(the CLI to an exit code, Slack to a reply) instead of every verb catching its own:

- `UsageError`: the input is wrong and the person can correct it (CLI exit 2)
- `EvidenceUnavailable`: nothing could be gathered; retrying may help (exit 3)
- `TargetNotFound`: the workload does not exist (exit 2)
- `NotPermitted`: RBAC forbids a read; the wording names the missing permission (exit 2)
- `Conflict`: the object changed while we worked on it; plan again
- `TemporaryError`: the server cannot answer now; retry after `delay_s`
- `OutcomeUnknown`: a write was sent and no answer says whether it took effect; read the
  object again before saying what happened (never "nothing was written")

Pure on purpose: no I/O and no client library, so runbooks can raise these and collectors can
map their clients' failures onto them.

>>> try:
...     raise TargetNotFound("Deployment", "llm", "nope", "prod")
... except GpumemError as e:
...     (e.code, e.params["name"], str(e))
('not_found', 'nope', 'Deployment llm/nope not found in context prod')
"""

from __future__ import annotations

from typing import Any


class GpumemError(Exception):
    """Base of every error gpumem words for a person.

    `code` is a stable id the catalogs word (renaming one that shipped breaks the wording);
    `params` holds the values of that wording. `str()` is the code and the params and nothing
    else, so it says enough in a log and carries nothing the raiser did not choose to show:
    never put a secret (a token, a header) in `params`.

    >>> e = GpumemError("what_if_syntax", item="tp")
    >>> e.code, e.params
    ('what_if_syntax', {'item': 'tp'})
    >>> str(e)
    "what_if_syntax: {'item': 'tp'}"
    >>> str(GpumemError("what_if_empty"))
    'what_if_empty: {}'
    """

    def __init__(self, code: str, /, **params: Any):
        self.code = code
        self.params = params
        super().__init__(code)

    def __str__(self) -> str:
        return f"{self.code}: {self.params}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}({str(self)!r})"


class UsageError(GpumemError):
    """Bad input a person can correct (a flag, a name, a file): the wording says what to change.

    The CLI exits 2; Slack answers only the one who typed it.

    >>> UsageError("no_engine").code, UsageError().code
    ('no_engine', 'usage')
    """

    def __init__(self, code: str = "usage", /, **params: Any):
        super().__init__(code, **params)


class EvidenceUnavailable(GpumemError):
    """Nothing could be gathered to decide on: no source answered, or none held what was needed.

    Not the person's mistake, and retrying (later, or with another source) may help. The CLI
    exits 3.

    >>> EvidenceUnavailable(path="access.log").code
    'no_evidence'
    """

    def __init__(self, code: str = "no_evidence", /, **params: Any):
        super().__init__(code, **params)


class TargetNotFound(GpumemError):
    """The workload to look at does not exist (in that namespace, in that cluster).

    Carries `kind`, `namespace`, `name` and `context` (None: the default one), so the wording
    can say which workload was looked for where. The CLI exits 2: the name is to be corrected.

    >>> e = TargetNotFound("StatefulSet", "a", "b")
    >>> str(e), e.code, e.params
    ('StatefulSet a/b not found', 'not_found', {'kind': 'StatefulSet', 'namespace': 'a', 'name': 'b', 'context': None})
    """

    def __init__(self, kind: str, namespace: str, name: str, context: str | None = None, *,
                 code: str = "not_found"):
        super().__init__(code, kind=kind, namespace=namespace, name=name, context=context)
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.context = context

    def __str__(self) -> str:
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        context = f" in context {self.context}" if self.context else ""
        return f"{self.kind} {where} not found{context}"


class NotPermitted(GpumemError):
    """The server refused a call: the account lacks an RBAC permission (HTTP 403).

    Carries the `verb`, `resource` (with its group and subresource, as a Role names it) and
    `namespace` (None: cluster-wide) of the call, so the wording names the permission to grant
    rather than a bare "forbidden". The CLI exits 2: an admin can grant it.

    >>> e = NotPermitted("get", "pods/log", "llm")
    >>> e.code, e.permission
    ('forbidden', 'get pods/log in namespace llm')
    >>> str(NotPermitted("list", "nodes"))
    'forbidden: list nodes cluster-wide'
    """

    def __init__(self, verb: str, resource: str, namespace: str | None = None, *, code: str = "forbidden",
                 **params: Any):
        super().__init__(code, verb=verb, resource=resource, namespace=namespace, **params)
        self.verb = verb
        self.resource = resource
        self.namespace = namespace

    @property
    def permission(self) -> str:
        """The missing permission in RBAC's words: "list pods in namespace llm"."""
        scope = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {self.resource} {scope}"

    def __str__(self) -> str:
        return f"{self.code}: {self.permission}"


class Conflict(GpumemError):
    """The object changed between reading it and acting on it (HTTP 409): read it again and plan
    again, since whatever was decided from the old copy may no longer hold.

    >>> Conflict(resource="deployments", name="x").code
    'conflict'
    """

    def __init__(self, code: str = "conflict", /, **params: Any):
        super().__init__(code, **params)


class TemporaryError(GpumemError):
    """The server could not answer now (throttled, restarting, overloaded): nothing is wrong
    with the request, and the same call may succeed after `delay_s` seconds.

    >>> e = TemporaryError(2.5, status=429)
    >>> e.code, e.delay_s, e.params
    ('temporary', 2.5, {'delay_s': 2.5, 'status': 429})
    """

    def __init__(self, delay_s: float = 1.0, *, code: str = "temporary", **params: Any):
        super().__init__(code, delay_s=delay_s, **params)
        self.delay_s = delay_s


#: how long a write the API server never answered may still land: longer than its own request
#: timeout (60 s by default), after which it has given up on the request
IN_FLIGHT_S = 90.0


class OutcomeUnknown(GpumemError):
    """A write was sent, and no answer says whether it took effect: a 5xx after the request
    went out, no answer within the deadline, the connection dropped mid-request. Not a
    TemporaryError: the write may be on the cluster, so nobody may be told "nothing was
    written" and it is not simply sent again. Read the object again (after `delay_s`) and say
    what that shows; when it cannot be read either, say the outcome is unknown.

    `reason` says what happened to the request ("HTTP 503", "no answer within 10.0 s",
    "connection closed without an answer"); `source` the call. `in_flight` is "yes" when no
    answer came from the API server itself (no answer in time, a dropped connection, a proxy's
    504) or it answered 500 (an etcd timeout whose proposal can still commit): the request may still be at work there, so a read that does not find the change yet is
    no proof that it will not land (`IN_FLIGHT_S`).

    >>> e = OutcomeUnknown(reason="HTTP 503", source="kube:deployments/llm/vllm")
    >>> e.code, e.delay_s, e.params["reason"]
    ('outcome_unknown', 1.0, 'HTTP 503')
    """

    def __init__(self, delay_s: float = 1.0, *, code: str = "outcome_unknown", **params: Any):
        super().__init__(code, delay_s=delay_s, **params)
        self.delay_s = delay_s
