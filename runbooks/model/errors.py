"""The errors gpumem words for a person: one base with a stable code, children that say what to do.

An error a person reads (one line on the terminal, a Slack reply) is a `GpumemError`: `code` is
a stable id that the catalogs word (bot/render/locales), `params` the values that wording needs.
Its class says what the caller should do about it, so each surface maps the classes once
(the CLI to an exit code, Slack to a reply) instead of every verb catching its own:

- `UsageError`: the input is wrong and the person can correct it (CLI exit 2)
- `EvidenceUnavailable`: nothing could be gathered; retrying may help (exit 3)
- `TargetNotFound`: the workload does not exist (exit 2)
- `NotPermitted`: RBAC forbids a read; the wording names the missing permission (exit 2)
- `StaleObject`: the object is not what the plan was made against (changed since it was read,
  changed since gpumem wrote it, or there already); nothing was overwritten: read it again and
  plan again (children: `ChangedSincePlanned`, `ChangedAfterApply`, `SplitChangedAfterApply`)
- `PartlyApplied`: some of the objects a plan creates are there and some not; roll it back
- `PlanMoved`: the plan's state changed under the caller (approved, applied or rolled back by
  someone else, expired): tell, do nothing (children: `PlanExpired`, `AlreadyApproved`)
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

from runbooks.model.phrases import Phrase


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


class PlanNotFound(UsageError):
    """No plan has that id in the store: the id is to be corrected (`plan` names it).

    >>> PlanNotFound(plan="p-1").code
    'plan_not_found'
    """

    def __init__(self, code: str = "plan_not_found", /, **params: Any):
        super().__init__(code, **params)


class WriterNotConfigured(UsageError):
    """Remediation has no writer identity for that cluster: nothing can be planned or applied
    until the config names one (`remediation.writer`).

    >>> WriterNotConfigured().code
    'no_writer'
    """

    def __init__(self, code: str = "no_writer", /, **params: Any):
        super().__init__(code, **params)


class InvalidChange(UsageError):
    """The API server refused the object as sent as invalid (HTTP 422): `detail` is its message.
    After a dry run of the same body passed, it means a `test` of an old value failed: the
    object moved in between (`bot.actuator.apply` says so as ChangedSincePlanned).

    >>> InvalidChange(detail="spec.replicas: Invalid value").code
    'invalid_change'
    """

    def __init__(self, code: str = "invalid_change", /, **params: Any):
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
    The one class for it: a cluster's 404 (`collectors.kube.client.api_error`) and a bot that
    has no evidence source for the target (`no_source`) alike, so a surface that catches it
    catches both.

    >>> e = TargetNotFound("StatefulSet", "a", "b")
    >>> str(e), e.code, e.params
    ('StatefulSet a/b not found', 'not_found', {'kind': 'StatefulSet', 'namespace': 'a', 'name': 'b', 'context': None})
    """

    #: the code of `no_source`: nothing says whether the workload exists
    NO_SOURCE = "no_source"

    @classmethod
    def no_source(cls, target: str) -> TargetNotFound:
        """No evidence source of this bot knows `target` ("namespace/name"): no bundle is
        configured for it and no live triage can ask a cluster. It says nothing about whether
        the workload exists (`source_unknown`), and Slack words it so; `str()` is the target.

        >>> e = TargetNotFound.no_source("llm/unknown")
        >>> str(e), e.code, e.source_unknown, e.target
        ('llm/unknown', 'no_source', True, 'llm/unknown')
        """
        namespace, _, name = target.rpartition("/")
        return cls("workload", namespace, name, code=cls.NO_SOURCE)

    @property
    def source_unknown(self) -> bool:
        """Whether no source was asked at all (not "the cluster says it does not exist")."""
        return self.code == self.NO_SOURCE

    @property
    def target(self) -> str:
        """"namespace/name" (the name alone without a namespace)."""
        return f"{self.namespace}/{self.name}" if self.namespace else self.name

    def __init__(self, kind: str, namespace: str, name: str, context: str | None = None, *,
                 code: str = "not_found"):
        super().__init__(code, kind=kind, namespace=namespace, name=name, context=context)
        self.kind = kind
        self.namespace = namespace
        self.name = name
        self.context = context

    def __str__(self) -> str:
        if self.source_unknown:
            return self.target
        context = f" in context {self.context}" if self.context else ""
        return f"{self.kind} {self.target} not found{context}"


def rbac_phrase(rule: str, namespace: str | None) -> Phrase:
    """An RBAC permission ("get pods/log") in a namespace, or cluster-wide (None), as a phrase the
    catalogs word (`phrase.read.rbac_*`): "get pods/log in namespace llm", "命名空间 llm 中的 ..."."""
    if namespace:
        return Phrase("read.rbac_namespaced", {"rule": rule, "namespace": namespace})
    return Phrase("read.rbac_cluster", {"rule": rule})


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
    def rbac(self) -> Phrase:
        """The missing permission as a person reads it, in their language (`rbac_phrase`)."""
        return rbac_phrase(f"{self.verb} {self.resource}", self.namespace)

    @property
    def permission(self) -> str:
        """The missing permission in RBAC's words: "list pods in namespace llm"."""
        scope = f"in namespace {self.namespace}" if self.namespace else "cluster-wide"
        return f"{self.verb} {self.resource} {scope}"

    def __str__(self) -> str:
        return f"{self.code}: {self.permission}"


class ManagedElsewhere(UsageError):
    """The object is managed by something that puts its spec back (a controller owner, Argo CD,
    Flux, a Helm release): gpumem does not write it. `managers` lists who (as JSON); the plan's
    source-of-truth rendering says what to change instead. Exit 2; nothing was written.

    >>> ManagedElsewhere("managed_gitops", target="llm/Deployment/vllm", managers=[]).code
    'managed_gitops'
    """

    def __init__(self, code: str = "managed_gitops", /, **params: Any):
        super().__init__(code, **params)


class StaleObject(GpumemError):
    """The object is not the one the plan was made against: it changed between reading it and
    acting on it (HTTP 409, a `test` of an old value that failed, another resourceVersion), or
    what the plan would create is there already. Nothing was overwritten; read it again and
    plan again, since whatever was decided from the old copy may no longer hold. Exit 2.

    >>> StaleObject(resource="deployments", name="x").code
    'conflict'
    """

    def __init__(self, code: str = "conflict", /, **params: Any):
        super().__init__(code, **params)


class ChangedSincePlanned(StaleObject):
    """The object moved on since the plan was made (`planned`: its resourceVersion then, `now`:
    the one read): the plan is not applied; plan again from what is there now.

    >>> ChangedSincePlanned(plan="p-1", planned="41", now="42").code
    'changed_since_planned'
    """

    def __init__(self, code: str = "changed_since_planned", /, **params: Any):
        super().__init__(code, **params)


class ChangedAfterApply(StaleObject):
    """Someone changed what gpumem wrote since it wrote it: a rollback refuses to overwrite them.
    `differences` holds the three values per field (before gpumem, gpumem's, now).

    >>> ChangedAfterApply(plan="p-1", differences=[]).code
    'changed_after_apply'
    """

    def __init__(self, code: str = "changed_after_apply", /, **params: Any):
        super().__init__(code, **params)


class SplitChangedAfterApply(StaleObject):
    """An object a pool split created was changed since: its rollback refuses to delete it.
    `differences` names paths, compared masked (a clone carries the original's credentials), so a
    surface shows the paths and never the values.

    >>> SplitChangedAfterApply(plan="p-1", differences=[]).code
    'split_changed_after_apply'
    """

    def __init__(self, code: str = "split_changed_after_apply", /, **params: Any):
        super().__init__(code, **params)


class PartlyApplied(GpumemError):
    """Some of the objects a plan creates are on the cluster and some are not (a create whose
    answer was lost): the plan failed, and its rollback deletes what exists. Exit 2.

    >>> PartlyApplied(plan="p-1", created="Deployment/x-long").code
    'split_partly_applied'
    """

    def __init__(self, code: str = "split_partly_applied", /, **params: Any):
        super().__init__(code, **params)


class PlanMoved(GpumemError):
    """The plan's state changed under the caller: someone else approved, applied, rejected or
    rolled it back first, or it expired. Tell the person; do nothing (the one who moved it
    reports). `state` is where it is now, when known. Exit 2.

    >>> e = PlanMoved(plan="p-1", state="applied", wanted="applying")
    >>> e.code, e.params["state"]
    ('plan_moved', 'applied')
    """

    def __init__(self, code: str = "plan_moved", /, **params: Any):
        super().__init__(code, **params)


class PlanExpired(PlanMoved):
    """The plan waited past its expiry for an approval: it is expired now; plan again.

    >>> PlanExpired(plan="p-1").code
    'plan_expired'
    """

    def __init__(self, code: str = "plan_expired", /, **params: Any):
        super().__init__(code, **params)


class AlreadyApproved(PlanMoved):
    """This approver approved the plan already; a second approval must come from someone else.

    >>> AlreadyApproved(plan="p-1", approver="U1").code
    'already_approved'
    """

    def __init__(self, code: str = "already_approved", /, **params: Any):
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
