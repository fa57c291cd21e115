"""Who may approve what, and how many must: pure rules over the config and the plan.

Remediation is off unless the config turns it on for the cluster and namespace. Approvers are
Slack user ids (`U...`) or user-group ids (`S...`) per namespace, or `*` for every namespace.
Four-eyes by default: whoever asked for a plan cannot approve it. Change kinds the config calls
high-risk need two approvals from two different people.

>>> p = ApprovalPolicy(enabled=True, approvers={"llm": ("U2", "S9")})
>>> decide(p, "llm", requested_by="U1", user="U2", user_groups=()).allowed
True
>>> decide(p, "llm", requested_by="U1", user="U1", user_groups=("S9",)).reason
'requester'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from runbooks.model.changes import Change


@dataclass(frozen=True)
class ApprovalPolicy:
    enabled: bool = False
    #: namespace (or "*") -> user ids and user-group ids that may approve there
    approvers: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    #: (cluster or "*", namespace or "*") pairs where remediation is on; empty: everywhere it is enabled
    scopes: tuple[tuple[str, str], ...] = ()
    four_eyes: bool = True
    #: change kinds that need two approvals
    two_approvals_for: tuple[str, ...] = ()
    ttl_s: int = 900


@dataclass(frozen=True)
class Decision:
    allowed: bool
    #: why not: "disabled", "out_of_scope", "requester", "not_an_approver", "already_approved"
    reason: str = ""
    #: who may approve here (user and group ids), for the answer to someone who may not
    approvers: tuple[str, ...] = ()


def approvers_for(policy: ApprovalPolicy, namespace: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys((*policy.approvers.get(namespace, ()), *policy.approvers.get("*", ()))))


def in_scope(policy: ApprovalPolicy, cluster: str | None, namespace: str) -> bool:
    """Remediation is on for this cluster and namespace."""
    if not policy.enabled:
        return False
    if not policy.scopes:
        return True
    return any(c in ("*", cluster) and n in ("*", namespace) for c, n in policy.scopes)


def approvals_needed(policy: ApprovalPolicy, changes: tuple[Change, ...]) -> int:
    """2 when a change is of a kind the config calls high-risk, else 1."""
    return 2 if any(c.kind in policy.two_approvals_for for c in changes) else 1


def decide(policy: ApprovalPolicy, namespace: str, *, requested_by: str, user: str, user_groups: tuple[str, ...],
           cluster: str | None = None, approved_by: tuple[str, ...] = ()) -> Decision:
    """May `user` (in `user_groups`) approve a plan for `namespace` that `requested_by` asked for?"""
    who = approvers_for(policy, namespace)
    if not policy.enabled:
        return Decision(False, "disabled", who)
    if not in_scope(policy, cluster, namespace):
        return Decision(False, "out_of_scope", who)
    if user not in who and not set(user_groups) & set(who):
        return Decision(False, "not_an_approver", who)
    if policy.four_eyes and user == requested_by:
        return Decision(False, "requester", who)
    if user in approved_by:
        return Decision(False, "already_approved", who)
    return Decision(True, "", who)
