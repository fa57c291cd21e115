"""Remediation as the Slack bot runs it: where a "Plan" button is offered, who may approve, reject
or roll back, the approval itself, a re-plan, and the writer identity per cluster.

The surfaces may not read the approval policy themselves (`runbooks.remediation` is behind this
layer); they call these functions and show what comes back. Every refusal is a `Refusal` with
the reason and, where it helps, who may: nothing in the store moves for a refused click (an
audit row records it).

>>> from runbooks.model.report import Action
>>> from runbooks.model.changes import Scale
>>> applicable(Action("scale_out", tier="now", changes=(Scale(2, 3),)))
True
>>> applicable(Action("bigger_gpu", tier="escalate", changes=(Scale(2, 3),)))
False
"""

from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from bot.actuator.writer import KubeWriter
from bot.grammar.slack import parse_target
from bot.service import remediate
from bot.service.connections import endpoint, kube_api
from bot.service.split_pools import PHASE1_LIVE
from bot.service.split_pools import replan_request as split_replan
from bot.store.db import StoredPlan
from collectors.kube.objects import ObjectReader
from runbooks.model.errors import AlreadyApproved, PlanExpired, PlanMoved, UsageError, WriterNotConfigured
from runbooks.model.report import Action, Report
from runbooks.model.templates import SPEC_OWNER_KINDS
from runbooks.remediation.policy import ApprovalPolicy, approvers_for, decide, in_scope
from runbooks.remediation.split import ACTION as SPLIT_KIND
from runbooks.remediation.split import is_phase1, is_split

#: plan states a Reject click may end
REJECTABLE = ("proposed", "approved")
#: plan states whose change is on the cluster and may be rolled back
ROLLBACKABLE = ("applied", "watched", "failed")


@dataclass(frozen=True)
class Refusal:
    """Why a click or command changes nothing.

    reason: disabled, out_of_scope, requester, not_an_approver, already_approved (policy);
    expired, moved (the plan is not where the click expects it: `state` says where it is)."""

    reason: str
    approvers: tuple[str, ...] = ()
    state: str | None = None


def cluster_name(settings: Any, context: str | None) -> str | None:
    """The configured name of the cluster a --context names (the default cluster without one)."""
    cluster = settings.cluster(context)
    if cluster is None:
        return context or settings.default_context
    return cluster.name or cluster.context


def remediation_on(settings: Any, cluster: str | None, namespace: str) -> bool:
    """`remediation.enabled` and this cluster and namespace in its scopes."""
    return in_scope(settings.remediation.policy, cluster, namespace)


def applicable(action: Action) -> bool:
    """An action gpumem can apply: on-call tier, with typed changes of kinds a plan can hold, or
    the pool split's one change (planned in two phases by `bot.service.split_pools`)."""
    if action.tier == "escalate" or not action.changes:
        return False
    kinds = {c.kind for c in action.changes}
    return kinds <= set(remediate.APPLY_KINDS) or (kinds == {SPLIT_KIND} and len(action.changes) == 1)


def is_split_action(changes: Any) -> bool:
    """Whether a "Plan" button's changes are a pool split's (phase 1 of `bot.service.split_pools`)."""
    return bool(changes) and all(c.kind == SPLIT_KIND for c in changes)


def plannable_actions(report: Report, settings: Any, target: str | None, context: str | None) -> tuple[str, ...]:
    """The ids of the report's actions that get a "Plan" button: applicable, and remediation on
    for the target's cluster and namespace (none when it is off or the target is not NS/NAME)."""
    target = target or report.target
    if not target or target.count("/") not in (1, 2):
        return ()
    try:
        parsed = parse_target(target, None)
    except UsageError:
        return ()
    if not remediation_on(settings, cluster_name(settings, context), parsed.namespace):
        return ()
    # an InferenceService or LeaderWorkerSet takes server flags only (`remediate._owner_plan`)
    flags_only = parsed.kind in SPEC_OWNER_KINDS
    return tuple(a.id for a in report.actions if applicable(a)
                 and (not flags_only or all(c.kind == "set_arg" for c in a.changes)))


def groups_to_resolve(settings: Any, namespace: str) -> tuple[str, ...]:
    """The Slack user-group ids (S...) among the namespace's approvers: the surface asks Slack
    whether the clicker is in one."""
    return tuple(i for i in approvers_for(settings.remediation.policy, namespace) if i.startswith("S"))


def bot_writer(settings: Any, cluster: str | None) -> KubeWriter:
    """The writer identity (`remediation.writer`): its kubeconfig, with its own context, else
    the kube context of the plan's cluster. A bot never writes with the reader's identity, so
    without `remediation.writer.kubeconfig` it refuses (WriterNotConfigured)."""
    writer = settings.remediation.writer
    if not writer.kubeconfig:
        raise WriterNotConfigured()
    configured = settings.cluster(cluster)
    context = writer.context or (configured.context if configured else cluster)
    return remediate.writer_for(writer.kubeconfig, context, observer=reader_api(settings, cluster))


def bot_reader(settings: Any, cluster: str | None) -> ObjectReader:
    """The reader identity of `cluster`, for reads only: what reconciliation reads the object
    with; it cannot write."""
    return ObjectReader(reader_api(settings, cluster))


def reader_api(settings: Any, cluster: str | None) -> Any:
    """The reader identity's client for `cluster` (what the watch lists pods and reads logs with)."""
    return kube_api(endpoint(settings, cluster))


def _policy(settings: Any) -> ApprovalPolicy:
    return settings.remediation.policy


def may_still_approve(settings: Any, stored: StoredPlan) -> tuple[tuple[str, ...], bool]:
    """Who may still approve the plan as the policy decides it (`decide`): the namespace's approvers
    (user and group ids, in config order) less the users who approved it already and, under four-eyes,
    the requester; and whether the namespace has any approver configured at all (none: nobody may)."""
    policy = _policy(settings)
    configured = approvers_for(policy, stored.plan.target.namespace)
    left = tuple(i for i in configured if i not in stored.approvals
                 and not (policy.four_eyes and i == stored.plan.requested_by))
    return left, bool(configured)


def approve(store: Any, settings: Any, plan_id: str, user: str, user_groups: tuple[str, ...],
            channel: str | None = None, now: datetime | None = None) -> StoredPlan | Refusal:
    """`user`'s approval of the plan as stored (its content hash), or why not. An expired plan is
    moved to expired here. The store moves the plan in one transaction: of two clicks at once,
    one approves and the other finds it moved."""
    now = now or datetime.now(UTC)
    stored = store.get(plan_id)
    plan = stored.plan
    if stored.state == "proposed" and plan.expired(now):
        with contextlib.suppress(PlanMoved):  # moved meanwhile: it is not proposed any more either way
            store.move(plan_id, "expired", actor="gpumem", expect="proposed", channel=channel, now=now)
        return Refusal("expired", state="expired")
    if stored.state != "proposed":
        return Refusal("expired" if stored.state == "expired" else "moved", state=stored.state)
    decision = decide(_policy(settings), plan.target.namespace, requested_by=plan.requested_by, user=user,
                      user_groups=user_groups, cluster=plan.target.cluster, approved_by=stored.approvals)
    if not decision.allowed:
        store.record("approval_refused", actor=user, channel=channel, now=now,
                     detail={"plan": plan_id, "reason": decision.reason})
        return Refusal(decision.reason, decision.approvers)
    try:
        return store.approve(plan_id, user, plan.content_hash, channel=channel, now=now)
    except PlanExpired:
        return Refusal("expired", state="expired")
    except AlreadyApproved:
        return Refusal("already_approved", decision.approvers)
    except PlanMoved as e:
        return Refusal("moved", state=str(e.params.get("state") or store.get(plan_id).state))


def reject(store: Any, settings: Any, plan_id: str, user: str, user_groups: tuple[str, ...],
           channel: str | None = None, now: datetime | None = None) -> StoredPlan | Refusal:
    """Reject a plan not yet applied: its requester or anyone who may approve in its namespace."""
    stored = store.get(plan_id)
    plan = stored.plan
    if stored.state not in REJECTABLE:
        return Refusal("moved", state=stored.state)
    if user != plan.requested_by:
        refusal = _not_an_approver(store, settings, plan, user, user_groups, "reject_refused", channel, now)
        if refusal is not None:
            return refusal
    try:
        return store.move(plan_id, "rejected", actor=user, expect=REJECTABLE, channel=channel, now=now)
    except PlanMoved as e:
        return Refusal("moved", state=str(e.params.get("state")))


def may_roll_back(store: Any, settings: Any, plan_id: str, user: str, user_groups: tuple[str, ...],
                  channel: str | None = None, now: datetime | None = None) -> StoredPlan | Refusal:
    """Whether `user` may roll the plan back: remediation on, an approver of its namespace (the
    one who asked for the plan too: a rollback restores the reviewed state before it), and the
    plan in a state whose change is on the cluster."""
    stored = store.get(plan_id)
    refusal = _not_an_approver(store, settings, stored.plan, user, user_groups, "rollback_refused", channel, now)
    if refusal is not None:
        return refusal
    if stored.state not in ROLLBACKABLE:
        return Refusal("moved", state=stored.state)
    return stored


def may_confirm_routing(store: Any, settings: Any, plan_id: str, user: str, user_groups: tuple[str, ...],
                        channel: str | None = None, now: datetime | None = None) -> StoredPlan | Refusal:
    """Whether `user` may confirm that the gateway routes long prompts to a phase-1 plan's long
    pool (and so ask for phase 2): remediation on, an approver of its namespace (four-eyes is for
    the phase-2 plan's approval, which someone else gives), the plan a pool split's phase 1 whose
    objects are on the cluster (applied or watched)."""
    stored = store.get(plan_id)
    if not (is_split(stored.plan) and is_phase1(stored.plan)):
        return Refusal("not_split", state=stored.state)
    refusal = _not_an_approver(store, settings, stored.plan, user, user_groups, "routing_refused", channel, now)
    if refusal is not None:
        return refusal
    if stored.state not in PHASE1_LIVE:
        return Refusal("moved", state=stored.state)
    return stored


def may_confirm_routing_of(store: Any, settings: Any, namespace: str, cluster: str | None, user: str,
                           user_groups: tuple[str, ...], channel: str | None = None) -> Refusal | None:
    """`/gpumem plan ... --phase 2 --routing-confirmed`: None when `user` may confirm the routing
    in `namespace` (an approver there), else the refusal (recorded in the audit)."""
    decision = decide(dataclasses.replace(_policy(settings), four_eyes=False), namespace, requested_by="",
                      user=user, user_groups=user_groups, cluster=cluster)
    if decision.allowed:
        return None
    store.record("routing_refused", actor=user, channel=channel,
                 detail={"namespace": namespace, "reason": decision.reason})
    return Refusal(decision.reason, decision.approvers)


def replan_request(stored: StoredPlan, user: str, store: Any = None, watch_s: float = 600.0) -> Any:
    """A new plan for the same change against the object as it is now, asked for by `user` (a
    pool split's phase 1 again with `store`: `bot.service.split_pools.replan_request`)."""
    p = stored.plan
    if p.action_id == SPLIT_KIND and store is not None:
        return split_replan(store, stored, user, watch_s=watch_s)
    w = p.workload or p.target  # an HPA plan is re-made for the workload the HPA scales
    return remediate.request_from_changes(w.namespace, w.name, w.cluster, p.action_id,
                                          p.changes, requested_by=user, origin=p.origin, kind=w.kind)


def account_refusal(user: dict[str, Any]) -> str | None:
    """Why a Slack account may not approve, roll back or confirm, whatever the config lists (its
    users.info record): deactivated, a guest (restricted or ultra-restricted), a bot or app user;
    None for a full member.

    >>> account_refusal({"id": "U1", "deleted": False, "is_bot": False}) is None
    True
    >>> account_refusal({"id": "U1", "is_ultra_restricted": True}), account_refusal({"id": "B1", "is_app_user": True})
    ('account_guest', 'account_bot')
    """
    if user.get("deleted"):
        return "account_deleted"
    if user.get("is_restricted") or user.get("is_ultra_restricted"):
        return "account_guest"
    if user.get("is_bot") or user.get("is_app_user"):
        return "account_bot"
    return None


def on_its_message(store: Any, plan_id: str, channel: str, ts: str) -> tuple[str, str, str | None] | str:
    """Where the plan's message is (channel, ts, thread_ts) when a click on (`channel`, `ts`) is
    on it; else why not: `no_message` (never posted) or `not_its_message`."""
    where = slack_message(store, plan_id)
    if where is None:
        return "no_message"
    if (where[0], where[1]) != (channel, ts):
        return "not_its_message"
    return where


def slack_message(store: Any, plan_id: str) -> tuple[str, str, str | None] | None:
    """Where the plan's Slack message is: (channel, ts, thread_ts), from the newest
    `slack_message` row of its audit; None when it was never posted."""
    for row in reversed(store.plan_audit(plan_id)):
        if row.event == "slack_message" and row.detail.get("ts") and row.channel:
            return row.channel, str(row.detail["ts"]), row.detail.get("thread_ts")
    return None


def record_message(store: Any, plan_id: str, channel: str, ts: str, thread_ts: str | None) -> None:
    store.record("slack_message", actor="gpumem", channel=channel,
                 detail={"plan": plan_id, "ts": ts, "thread_ts": thread_ts})


def _not_an_approver(store: Any, settings: Any, plan: Any, user: str, user_groups: tuple[str, ...], event: str,
                     channel: str | None, now: datetime | None) -> Refusal | None:
    """None when `user` may approve in the plan's namespace (the requester included: four-eyes
    is for applying); else the refusal, recorded in the audit as `event`."""
    relaxed = dataclasses.replace(_policy(settings), four_eyes=False)
    decision = decide(relaxed, plan.target.namespace, requested_by=plan.requested_by, user=user,
                      user_groups=user_groups, cluster=plan.target.cluster)
    if decision.allowed:
        return None
    store.record(event, actor=user, channel=channel, now=now, detail={"plan": plan.id, "reason": decision.reason})
    return Refusal(decision.reason, decision.approvers)
