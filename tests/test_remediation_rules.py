"""The plan's state machine and the approval policy: pure rules, each refusal named."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest

from runbooks.model.changes import Scale, SplitPools
from runbooks.remediation.plan import FINAL, STATES, TRANSITIONS, WRITTEN, Plan, PlanTarget, can_move
from runbooks.remediation.policy import ApprovalPolicy, approvals_needed, decide, in_scope

POLICY = ApprovalPolicy(enabled=True, approvers={"llm": ("U2", "S_SRE"), "*": ("U_ADMIN",)},
                        scopes=(("prod", "llm"), ("staging", "*")), two_approvals_for=("split_pools",))


def test_the_happy_path_is_one_way():
    path = ["proposed", "approved", "applying", "applied", "watched", "rolled_back"]
    assert all(can_move(a, b) for a, b in itertools.pairwise(path))
    assert not any(can_move(b, a) for a, b in itertools.pairwise(path))


def test_final_states_go_nowhere_and_every_state_is_known():
    assert {"rolled_back", "rejected", "expired", "superseded", "reverted"} == FINAL
    assert set(TRANSITIONS) == set(STATES)
    assert all(nxt <= set(STATES) for nxt in TRANSITIONS.values())
    assert WRITTEN.isdisjoint({"proposed", "approved"})


@pytest.mark.parametrize(("user", "groups", "requested_by", "cluster", "namespace", "reason"), [
    ("U2", (), "U1", "prod", "llm", ""),
    ("U9", ("S_SRE",), "U1", "prod", "llm", ""),
    ("U_ADMIN", (), "U1", "staging", "batch", ""),
    ("U2", (), "U2", "prod", "llm", "requester"),
    ("U7", (), "U1", "prod", "llm", "not_an_approver"),
    ("U2", (), "U1", "prod", "batch", "out_of_scope"),
])
def test_who_may_approve(user, groups, requested_by, cluster, namespace, reason):
    d = decide(POLICY, namespace, requested_by=requested_by, user=user, user_groups=groups, cluster=cluster)
    assert (d.allowed, d.reason) == (reason == "", reason)
    if namespace == "llm":
        assert d.approvers == ("U2", "S_SRE", "U_ADMIN")


def test_remediation_is_off_unless_enabled():
    off = ApprovalPolicy(approvers={"*": ("U2",)})
    assert not in_scope(off, "prod", "llm")
    assert decide(off, "llm", requested_by="U1", user="U2", user_groups=()).reason == "disabled"


def test_four_eyes_can_be_turned_off_and_an_approver_counts_once():
    solo = ApprovalPolicy(enabled=True, approvers={"*": ("U1",)}, four_eyes=False)
    assert decide(solo, "llm", requested_by="U1", user="U1", user_groups=()).allowed
    assert decide(solo, "llm", requested_by="U1", user="U1", user_groups=(), approved_by=("U1",)).reason == \
        "already_approved"


def test_high_risk_kinds_need_two_approvals():
    assert approvals_needed(POLICY, (SplitPools(None, None, None, None),)) == 2
    assert approvals_needed(POLICY, (Scale(2, 3),)) == 1


def test_the_hash_covers_what_is_applied_and_not_who_asked():
    t = datetime(2026, 12, 1, tzinfo=UTC)
    base = Plan("p1", PlanTarget("prod", "llm", "Deployment", "vllm"), "scale_out", (Scale(2, 3),), "41", 7,
                ({"op": "replace", "path": "/spec/replicas", "value": 3},), "application/json-patch+json", "U1", t,
                t + timedelta(minutes=15))
    same = Plan(**{**base.__dict__, "id": "p2", "requested_by": "U9", "created_at": t + timedelta(minutes=1)})
    assert same.content_hash == base.content_hash
    for field, value in (("resource_version", "42"), ("generation", 8), ("changes", (Scale(2, 4),)),
                         ("patch", ({"op": "replace", "path": "/spec/replicas", "value": 4},))):
        assert Plan(**{**base.__dict__, field: value}).content_hash != base.content_hash, field
    assert base.expired(t + timedelta(minutes=15)) and not base.expired(t + timedelta(minutes=14))
