"""The Slack side of remediation: the "Plan" button under a diagnosis, Approve / Reject / Roll back
/ Plan again on a plan message, and `/gpumem plan`, `/gpumem plans`, `/gpumem rollback`.

Listeners ack at once and hand the click to the `after_ack` threads (`later`): nothing calls
Slack or Kubernetes before the ack. Who may do what is decided in `bot.service.approvals`; the
store's state machine makes each step happen once (a double click, two approvers at once or a
retried delivery finds the plan moved and is told so). An approval that completes a plan starts
the apply on `jobs` (threads of their own: a watch lasts minutes): the rollback note is posted
in the thread before the write, and the plan message is edited through approved -> dry run ok
-> watching -> held / symptoms remain / failed.

A button of a plan counts only on the plan's own message, where the store recorded it was
posted (`_guarded_on_plan`); what follows uses that record, never the click's channel or thread.
A typed command acting on an existing plan (`/gpumem rollback`, `--routing-confirmed`) acts under
the policy of that recorded channel, and shows its result on that message and in its thread
(`_typed_on_plan`); an error after an applied change edits the message to say the watch stopped.
Approving, rejecting, rolling back and confirming a routing also need an account Slack calls a
full, active member (`bot.slack.accounts`, users.info).
"""

from __future__ import annotations

import copy
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from bot.grammar.slack import Command, CommandError, Target, parse_target
from bot.render import slack_remediation as P
from bot.render import slack_split as S
from bot.render import slack_verbs as V
from bot.render import source_of_truth
from bot.render.errors import error_line
from bot.render.i18n import Catalog
from bot.render.slack_plan_notices import RECONCILED_STAGES
from bot.service import approvals, remediate, split_pools, watch_metrics
from bot.service.plan_preview import reader_for
from bot.slack.accounts import AccountCheck
from bot.slack.api import SlackPoster
from bot.slack.work import SharedStore
from bot.telemetry.errorid import log_crash
from runbooks.model.errors import (
    ChangedAfterApply,
    ChangedSincePlanned,
    GpumemError,
    OutcomeUnknown,
    PartlyApplied,
    PlanMoved,
    SplitChangedAfterApply,
    StaleObject,
    UsageError,
    WriterNotConfigured,
)

log = logging.getLogger("gpumem.slack.remediation")

#: how long a "Plan" click holds its button (a double click makes one plan)
PLAN_CLAIM_S = 30.0
#: how long a rollback holds its plan (a second click or command meanwhile is told one runs)
ROLLBACK_CLAIM_S = 30.0
#: how long a click on a plan message waits for the message's place to be recorded after its post
POSTING_WAIT_S = 10.0



class _NoteNotPosted(RuntimeError):
    """The rollback note did not reach the thread, so the write was not started."""

class Click:
    """What a block_actions body says: who clicked what, where."""

    def __init__(self, body: dict[str, Any]):
        container = body.get("container") if isinstance(body.get("container"), dict) else {}
        action = (body.get("actions") or [{}])[0]
        self.user = str((body.get("user") or {}).get("id") or "")
        self.channel = str(container.get("channel_id") or (body.get("channel") or {}).get("id") or "")
        self.ts = str(container.get("message_ts") or "")
        #: the thread the message is in; a top-level message is its own thread
        self.thread = str(container.get("thread_ts") or self.ts)
        self.action_id = str(action.get("action_id") or "")
        self.value = str(action.get("value") or "")

    def at(self, channel: str, ts: str, thread: str | None) -> Click:
        """The same click placed where the store says its plan message is."""
        placed = copy.copy(self)
        placed.channel, placed.ts, placed.thread = channel, ts, thread or ts
        return placed



def _acked(click: str) -> Callable[..., None]:
    """A button listener: ack at once, then run the desk's `click` handler after the ack
    (`_guarded`: errors become an ephemeral apology, never an exception into Bolt)."""

    def listener(self: Any, ack: Callable[..., Any], body: dict[str, Any], respond: Callable[..., Any]) -> None:
        ack()
        self.later(self._guarded, getattr(self, click), body, respond)

    listener.__name__ = listener.__qualname__ = f"on_{click.strip('_').removesuffix('_click')}"
    return listener


#: the typed command that acts on an existing plan, by its verb (named in its refusals)
TYPED_COMMAND = {"rollback": "/gpumem rollback", "routing": "/gpumem plan --routing-confirmed"}
#: the audit event a refused click on a plan's button is recorded as, by the button's verb
REFUSED_EVENT = {"approve": "approval_refused", "reject": "reject_refused", "rollback": "rollback_refused",
                 "replan": "replan_refused", "routing": "routing_refused"}


def _acked_on_plan(click: str, verb: str) -> Callable[..., None]:
    """A listener for a button on a plan's message (its value is the plan id): as `_acked`, and
    the click counts only on that plan's own message (`_guarded_on_plan`)."""

    def listener(self: Any, ack: Callable[..., Any], body: dict[str, Any], respond: Callable[..., Any]) -> None:
        ack()
        self.later(self._guarded_on_plan, getattr(self, click), verb, body, respond)

    listener.__name__ = listener.__qualname__ = f"on_{click.strip('_').removesuffix('_click')}"
    return listener

class RemediationDesk:
    def __init__(self, settings: Any, poster: SlackPoster, store: SharedStore | None,
                 later: Callable[..., None], check_target: Callable[[Command, str], Any],
                 writer_for: Callable[[str | None], Any] | None = None, jobs: Executor | None = None,
                 reader_for: Callable[[str | None], Any] | None = None,
                 watch_clock: Callable[[], float] | None = None, watch_sleep: Callable[[float], None] | None = None,
                 poll_s: float = 10.0, now: Callable[[], datetime] | None = None,
                 accounts: AccountCheck | None = None):
        self.settings = settings
        #: who the clicker is, as Slack says (users.info, kept 60 s): no guest, bot or deactivated approver
        self.accounts = accounts or AccountCheck(poster.user_info)
        #: plan id -> set once its message's place is in the store (a click can beat that by milliseconds)
        self._posting: dict[str, threading.Event] = {}
        self.poster = poster
        self.shared = store
        self.later = later
        self.check_target = check_target
        #: cluster name -> KubeWriter (the writer identity; tests hand in the stand-in's)
        self.writer_for = writer_for or (lambda cluster: approvals.bot_writer(settings, cluster))
        #: cluster name -> the reader identity's connection (a plan's preview reads nodes and pods
        #: with it: the writer's Role grants neither)
        self.reader_for = reader_for or self._preview_reader
        self._readers: dict[str | None, Any] = {}
        #: where applies, watches and rollbacks run (they take minutes; not the ack threads)
        self.jobs = jobs or ThreadPoolExecutor(max_workers=4, thread_name_prefix="gpumem-remediate")
        self.watch_clock = watch_clock or time.monotonic
        self.watch_sleep = watch_sleep or time.sleep
        self.poll_s = poll_s
        #: the wall clock plans expire by
        self.now = now or (lambda: datetime.now(UTC))

    def _preview_reader(self, cluster: str | None) -> Any:
        """The reader's connection to `cluster`, made once (None, and tried again next time, when
        no config loads)."""
        if self._readers.get(cluster) is None:
            self._readers[cluster] = reader_for(self.settings, cluster)
        return self._readers[cluster]

    @property
    def store(self) -> Any:
        assert self.shared is not None
        return self.shared.each_call()

    def shutdown(self) -> None:
        """In a drain: no new job starts; a running watch ends with the process (the plan stays
        `applied` in the store, and the audit says how far it got)."""
        shutdown = getattr(self.jobs, "shutdown", None)
        if callable(shutdown):
            shutdown(wait=False, cancel_futures=True)

    # ------------------------------------------------------------------ listeners (ack, then later)

    on_plan = _acked("_plan_click")
    on_approve = _acked_on_plan("_approve_click", "approve")
    on_reject = _acked_on_plan("_reject_click", "reject")
    on_rollback = _acked_on_plan("_rollback_click", "rollback")
    on_replan = _acked_on_plan("_replan_click", "replan")
    on_routing = _acked_on_plan("_routing_click", "routing")

    def _guarded(self, fn: Callable[[Click, str, Callable[..., Any]], None], body: dict[str, Any],
                 respond: Callable[..., Any]) -> None:
        click = Click(body)
        lang = self.settings.lang_for(click.channel)
        try:
            if self.settings.channel_policy(click.channel) is None:
                return self._say(respond, V.error_message(lang, "channel_not_allowed"))
            if self.shared is None:
                return self._refuse(respond, lang, "no_store")
            fn(click, lang, respond)
        except Exception as e:
            error_id = log_crash(log, "%s failed", e, click.action_id)
            self._say(respond, V.error_message(lang, "internal", error_id=error_id))

    def _guarded_on_plan(self, fn: Callable[[Click, str, Callable[..., Any]], None], verb: str,
                         body: dict[str, Any], respond: Callable[..., Any]) -> None:
        """A click on a plan's button counts only on the plan's own message: the click's channel
        and message ts must be where the store recorded that message. Then it runs placed there
        (channel, ts and thread from the store, never the payload), under that channel's policy.
        A click from anywhere else is refused, audited, and changes, edits or posts nothing."""
        click = Click(body)
        lang = self.settings.lang_for(click.channel)
        try:
            if self.shared is None:
                return self._refuse(respond, lang, "no_store")
            plan_id = click.value[:64]
            if self._stored(plan_id, respond, lang) is None:
                return
            posting = self._posting.get(plan_id)
            if posting is not None:  # posted, its place not recorded yet: a click right after the post waits for it
                posting.wait(POSTING_WAIT_S)
            where = approvals.on_its_message(self.store, plan_id, click.channel, click.ts)
            if isinstance(where, str):
                log.warning("refused a %s click on plan %s: %s", verb, plan_id, where)
                found = approvals.slack_message(self.store, plan_id)
                self.store.record(REFUSED_EVENT[verb], actor=click.user, channel=found[0] if found else None,
                                  detail={"plan": plan_id, "reason": where, "clicked_channel": click.channel[:64],
                                          "clicked_ts": click.ts[:64]})
                return self._refuse(respond, lang, where, plan=plan_id)
            click = click.at(*where)
            lang = self.settings.lang_for(click.channel)
            if self.settings.channel_policy(click.channel) is None:
                return self._say(respond, V.error_message(lang, "channel_not_allowed"))
            fn(click, lang, respond)
        except Exception as e:
            error_id = log_crash(log, "%s failed", e, click.action_id)
            self._say(respond, V.error_message(lang, "internal", error_id=error_id))

    def _account_refused(self, user: str, plan_id: str | None, channel: str, verb: str, lang: str,
                         respond: Callable[..., Any], namespace: str | None = None) -> bool:
        """True (the clicker told, the audit written) when Slack's record of `user` rules them out
        as an approver (deactivated, guest, bot) or cannot be read (fail closed)."""
        refusal = self.accounts.refusal(user)
        if refusal is None:
            return False
        key, params = refusal
        detail = {"plan": plan_id, "reason": key, **params}
        if namespace is not None:
            detail["namespace"] = namespace
        self.store.record(REFUSED_EVENT[verb], actor=user, channel=channel, detail=detail)
        self._refuse(respond, lang, key, plan=plan_id or "-", verb=verb, reason=str(params.get("error") or ""))
        return True

    # ------------------------------------------------------------------ /gpumem plan, plans, rollback

    def command(self, ack: Callable[..., Any], cmd: Command, channel: str, user: str, lang: str,
                respond: Callable[..., Any]) -> None:
        """In the ack: `plans` is the answer itself (one SQLite read); `plan` and `rollback` are
        acked, then run after the ack (a plan reads the object; a rollback writes)."""
        if self.shared is None:
            return ack(response_type="ephemeral", **P.refusal_message(lang, "no_store"))
        if cmd.verb == "plans":
            return ack(response_type="ephemeral", **P.plans_message(self._plans(cmd, channel), lang))
        if cmd.verb == "plan":
            assert cmd.target is not None  # a TARGET_VERB: the grammar parsed it
            cluster = approvals.cluster_name(self.settings, cmd.context)
            if not approvals.remediation_on(self.settings, cluster, cmd.target.namespace):
                return ack(response_type="ephemeral", **P.refusal_message(
                    lang, "remediation_off", namespace=cmd.target.namespace, cluster=cluster or "-"))
            ack(**V.ack_text(lang, "plan", str(cmd.target)))
            return self.later(self._slash_guarded, lang, respond, self._slash_plan, cmd, channel, user, lang, respond)
        plan_id = str(getattr(cmd.request, "plan", "") or "")[:64]
        ack(**V.ack_text(lang, "rollback", plan_id))
        self.later(self._slash_guarded, lang, respond, self._rollback, plan_id, user, channel, lang, respond, None)

    def _slash_guarded(self, lang: str, respond: Callable[..., Any], fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception as e:
            error_id = log_crash(log, "/gpumem %s failed after the ack", e, getattr(fn, "__name__", "?"))
            self._say(respond, V.error_message(lang, "internal", error_id=error_id))

    def _plans(self, cmd: Command, channel: str) -> list[Any]:
        """The plans this channel may see: open ones (all with --all), in namespaces it may read."""
        wanted = getattr(cmd.request, "target", None)
        found = self.store.plans(open_only=not getattr(cmd.request, "all", False))
        return [s for s in found
                if self.settings.namespace_allowed(s.plan.target.namespace, s.plan.target.cluster, channel)
                and (not wanted or wanted in {f"{t.namespace}/{t.name}" for t in (s.plan.target, s.plan.workload) if t})]

    def _slash_plan(self, cmd: Command, channel: str, user: str, lang: str, respond: Callable[..., Any]) -> None:
        assert cmd.target is not None
        args = cmd.request
        cluster = approvals.cluster_name(self.settings, cmd.context)
        try:
            split = split_pools.slack_request(self.store, args, cmd.target.namespace, cmd.target.name, cluster=cluster,
                                              requested_by=user, origin=f"/gpumem plan in {channel}",
                                              watch_s=self.settings.remediation.watch_s)
        except UsageError as e:
            return self._plan_failed(respond, lang, e)
        if split is not None:
            home, thread = channel, None
            if split.routing_confirmed:  # an attestation that phase 2 relies on: an approver's
                # it acts on the phase-1 plan: under its channel's policy, phase 2 posted in its thread
                first = split_pools.phase1_of(self.store, split.namespace, split.name)
                if first is not None:
                    where = self._typed_on_plan(first, user, channel, "routing", lang, respond)
                    if where is None:
                        return
                    home, thread = where[0], where[2] or where[1]
                if self._account_refused(user, first.plan.id if first else None, home, "routing", lang, respond,
                                         namespace=split.namespace):
                    return
                groups = self._groups(user, split.namespace)
                refusal = approvals.may_confirm_routing_of(self.store, self.settings, split.namespace, cluster, user,
                                                           groups, channel=home)
                if refusal is not None:
                    return self._refuse(respond, lang, "routing_not_an_approver", namespace=split.namespace,
                                        approvers=refusal.approvers)
            self._make_and_post(split, home, thread, self.settings.lang_for(home) if thread else lang, respond)
            return
        try:
            request = remediate.plan_request(
                self.store, cmd.target.namespace, cmd.target.name,
                kind=getattr(args, "kind", "Deployment") if cmd.target.kind == "Deployment" else cmd.target.kind,
                cluster=approvals.cluster_name(self.settings, cmd.context), sets=list(getattr(args, "set", []) or []),
                replicas=getattr(args, "replicas", None), container=getattr(args, "container", None),
                action=getattr(args, "action", None), requested_by=user, origin=f"/gpumem plan in {channel}",
                other=remediate.explicit_changes(args), hpa_max=getattr(args, "hpa_max", None))
        except UsageError as e:
            return self._plan_failed(respond, lang, e)
        self._make_and_post(request, channel, None, lang, respond)

    # ------------------------------------------------------------------ Plan (under a diagnosis)

    def _plan_click(self, click: Click, lang: str, respond: Callable[..., Any]) -> None:
        try:
            target, context, action_id, changes = P.parse_plan_value(click.value)
            parsed = parse_target(target, self.settings.default_namespace)
        except (ValueError, CommandError):
            return self._refuse(respond, lang, "bad_value")
        refusal = self._target_refusal(parsed, context, click.channel)
        if refusal is not None:
            return self._say(respond, V.error_message(lang, refusal[0], **refusal[1]))
        cluster = approvals.cluster_name(self.settings, context)
        if not approvals.remediation_on(self.settings, cluster, parsed.namespace):
            return self._refuse(respond, lang, "remediation_off", namespace=parsed.namespace, cluster=cluster or "-")
        if not self.store.claim(f"plan:{click.channel}:{click.ts}:{click.action_id}", click.user, ttl_s=PLAN_CLAIM_S):
            return self._refuse(respond, lang, "claimed")
        try:
            if approvals.is_split_action(changes):  # phase 1 of a pool split, sized from the recorded triage
                request = split_pools.request_from_action(self.store, parsed.namespace, parsed.name, cluster, changes,
                                                          requested_by=click.user, origin=f"triage of {parsed}",
                                                          watch_s=self.settings.remediation.watch_s)
            else:
                request = remediate.request_from_changes(parsed.namespace, parsed.name, cluster, action_id, changes,
                                                         requested_by=click.user, origin=f"triage of {parsed}",
                                                         kind=parsed.kind)
        except UsageError as e:
            return self._plan_failed(respond, lang, e)
        self._make_and_post(request, click.channel, click.thread, lang, respond)

    def _make_and_post(self, request: Any, channel: str, thread: str | None, lang: str,
                       respond: Callable[..., Any]) -> str | None:
        """Make the plan against the live object and post it (in `thread`, or as a new message
        whose own thread it then is). Returns the plan id, None when refused (the asker is told)."""
        try:
            writer = self.writer_for(request.cluster)
            stored = split_pools.make_plan(self.store, writer, request, self.settings.remediation.policy,
                                           channel=channel, thread_ts=thread, reader=self.reader_for(request.cluster),
                                           argocd_namespace=getattr(self.settings.remediation, "argocd_namespace",
                                                                    "argocd"))
        except WriterNotConfigured:
            self._refuse(respond, lang, "no_writer")
            return None
        except UsageError as e:
            self._plan_failed(respond, lang, e)
            return None
        except GpumemError as e:
            self._plan_failed(respond, lang, e)
            return None
        posting = self._posting.setdefault(stored.plan.id, threading.Event())
        try:
            ts, error = self.poster.post_or_error(channel, self._message(stored, lang, "proposed"), thread_ts=thread)
            if ts is None:
                self._say(respond, V.error_message(lang, "post_failed", error=error))
                return stored.plan.id
            approvals.record_message(self.store, stored.plan.id, channel, ts, thread or ts)
        finally:
            posting.set()
            self._posting.pop(stored.plan.id, None)
        exact = P.patch_message(stored, lang)
        if exact is not None:  # the exact patch, under the plan message (best effort: the hash binds it)
            self.poster.post(channel, exact, thread_ts=thread or ts)
        managed = P.managers_message(stored, lang)
        if managed is not None:  # who manages it, and the change for its source of truth as a file
            self.poster.post(channel, managed, thread_ts=thread or ts)
            self.poster.upload(channel, thread or ts, source_of_truth.filename(stored.plan),
                               source_of_truth.source_file(stored.plan), title=source_of_truth.filename(stored.plan))
        return stored.plan.id

    def _plan_failed(self, respond: Callable[..., Any], lang: str, e: GpumemError) -> None:
        cat = Catalog.load(lang)
        reason = P.error_reason(cat, e.code, e.params, error_line(cat, e))
        self._refuse(respond, lang, "plan_failed", reason=reason)

    # ------------------------------------------------------------------ Approve, Reject

    def _groups(self, user: str, namespace: str) -> tuple[str, ...]:
        """The approver user groups of `namespace` that `user` is in (asked of Slack)."""
        member_of = []
        for group in approvals.groups_to_resolve(self.settings, namespace):
            members = self.poster.group_members(group)
            if members is not None and user in members:
                member_of.append(group)
        return tuple(member_of)

    def _stored(self, plan_id: str, respond: Callable[..., Any], lang: str) -> Any:
        try:
            return self.store.get(plan_id)
        except UsageError:
            self._refuse(respond, lang, "plan_not_found", plan=plan_id[:40])
            return None

    def _stored_to_plan(self, plan_id: str, respond: Callable[..., Any], lang: str) -> Any:
        """The stored plan a click makes a new plan from, or None (refused, and the clicker told)
        when there is none or remediation is off where it would act."""
        stored = self._stored(plan_id, respond, lang)
        if stored is None:
            return None
        target = stored.plan.target
        if not approvals.remediation_on(self.settings, target.cluster, target.namespace):
            self._refuse(respond, lang, "remediation_off", namespace=target.namespace, cluster=target.cluster or "-")
            return None
        return stored

    def _approve_click(self, click: Click, lang: str, respond: Callable[..., Any]) -> None:
        stored = self._stored(click.value, respond, lang)
        if stored is None:
            return
        plan = stored.plan
        if self._account_refused(click.user, plan.id, click.channel, "approve", lang, respond):
            return
        groups = self._groups(click.user, plan.target.namespace)
        out = approvals.approve(self.store, self.settings, plan.id, click.user, groups, channel=click.channel,
                                now=self.now())
        if isinstance(out, approvals.Refusal):
            if out.reason == "expired":
                self.poster.update(click.channel, click.ts, self._message(self.store.get(plan.id), lang, "expired"))
            return self._refuse(respond, lang, out.reason, plan=plan.id, namespace=plan.target.namespace,
                                approvers=out.approvers, state=out.state, verb="approve")
        if out.state == "proposed":  # more approvals needed
            self.poster.update(click.channel, click.ts,
                               self._message(out, lang, "partly_approved", users=out.approvals))
            return
        self.poster.update(click.channel, click.ts, self._message(out, lang, "approved", users=out.approvals))
        self.jobs.submit(self._apply_guarded, plan.id, click.channel, click.ts, click.thread, lang, click.user)

    def _reject_click(self, click: Click, lang: str, respond: Callable[..., Any]) -> None:
        stored = self._stored(click.value, respond, lang)
        if stored is None:
            return
        plan = stored.plan
        if self._account_refused(click.user, plan.id, click.channel, "reject", lang, respond):
            return
        groups = self._groups(click.user, plan.target.namespace)
        out = approvals.reject(self.store, self.settings, plan.id, click.user, groups, channel=click.channel)
        if isinstance(out, approvals.Refusal):
            return self._refuse(respond, lang, out.reason, plan=plan.id, namespace=plan.target.namespace,
                                approvers=out.approvers, state=out.state, verb="reject")
        self.poster.update(click.channel, click.ts, self._message(out, lang, "rejected", users=(click.user,)))

    def _replan_click(self, click: Click, lang: str, respond: Callable[..., Any]) -> None:
        stored = self._stored_to_plan(click.value, respond, lang)
        if stored is None:
            return
        plan = stored.plan
        if not self.store.claim(f"replan:{plan.id}", click.user, ttl_s=PLAN_CLAIM_S):
            return self._refuse(respond, lang, "claimed")
        try:
            request = approvals.replan_request(stored, click.user, self.store, self.settings.remediation.watch_s)
        except UsageError as e:
            return self._plan_failed(respond, lang, e)
        self._make_and_post(request, click.channel, click.thread, lang, respond)

    # ------------------------------------------------------------------ a pool split: routing confirmed

    def _routing_click(self, click: Click, lang: str, respond: Callable[..., Any]) -> None:
        """"Routing confirmed: plan phase 2" on a watched phase-1 plan: an approver of the namespace
        attests that the gateway routes long prompts to the long pool; phase 2 is planned (the
        audit's `routing_confirmed` names them) and posted in the thread for approval."""
        stored = self._stored_to_plan(click.value, respond, lang)
        if stored is None:
            return
        plan = stored.plan
        if self._account_refused(click.user, plan.id, click.channel, "routing", lang, respond):
            return
        groups = self._groups(click.user, plan.target.namespace)
        out = approvals.may_confirm_routing(self.store, self.settings, plan.id, click.user, groups,
                                            channel=click.channel, now=self.now())
        if isinstance(out, approvals.Refusal):
            if out.reason == "not_an_approver":
                return self._refuse(respond, lang, "routing_not_an_approver", namespace=plan.target.namespace,
                                    approvers=out.approvers)
            return self._refuse(respond, lang, out.reason, plan=plan.id, namespace=plan.target.namespace,
                                approvers=out.approvers, state=out.state, verb="approve")
        if not self.store.claim(f"routing:{plan.id}", click.user, ttl_s=PLAN_CLAIM_S):
            return self._refuse(respond, lang, "claimed")
        request = split_pools.phase2_request(stored, click.user, origin=f"routing confirmed in {click.channel}",
                                             watch_s=self.settings.remediation.watch_s)
        self._make_and_post(request, click.channel, click.thread, lang, respond)

    # ------------------------------------------------------------------ apply and watch

    def _apply_guarded(self, plan_id: str, channel: str, ts: str, thread: str, lang: str, actor: str) -> None:
        try:
            self._apply(plan_id, channel, ts, thread, lang, actor)
        except Exception as e:
            error_id = log_crash(log, "applying plan %s failed", e, plan_id)
            reason = Catalog.load(lang).t("slack.error.internal", error_id=error_id)
            stored = self.store.get(plan_id)
            if stored.state == "applying":  # it may have been sent: only a re-read can tell
                self.store.record(remediate.OUTCOME_UNKNOWN, actor="gpumem", channel=channel,
                                  detail={"plan": plan_id, "reason": reason[:300]})
                self.poster.update(channel, ts, self._message(stored, lang, "unknown", reason=reason, reread="-"))
                return
            if stored.state in ("approved", "failed") and not any(r.to_state == "applied"
                                                                 for r in self.store.plan_audit(plan_id)):
                self.poster.update(channel, ts, self._message(stored, lang, "not_applied", reason=reason))
                return
            if stored.state in ("applied", "watched"):  # applied before the error (in the watch): say so
                self.store.record("watch_stopped", actor="gpumem", channel=channel,
                                  detail={"plan": plan_id, "error_id": error_id})
                self.poster.update(channel, ts, self._message(stored, lang, "watch_stopped", error_id=error_id))
            # rolled back meanwhile: the rollback edited the message

    def _apply(self, plan_id: str, channel: str, ts: str, thread: str, lang: str, actor: str) -> None:
        store = self.store
        stored = store.get(plan_id)
        plan = stored.plan
        cat = Catalog.load(lang)

        def before_write(note: dict[str, Any]) -> None:
            # the note is in the audit already; the thread gets it before the write too
            if self.poster.post(channel, P.rollback_note_message(store.get(plan_id), lang), thread_ts=thread) is None:
                raise _NoteNotPosted("the rollback note could not be posted in the thread; nothing was written")

        def on_dry_run() -> None:
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "dry_run_ok"))

        try:
            writer = self.writer_for(plan.target.cluster)
            remediate.apply_approved(store, writer, plan_id, actor, channel=channel, before_write=before_write,
                                     on_dry_run=on_dry_run,
                                     stopgap_on_gitops=getattr(self.settings.remediation, "stopgap_on_gitops", ()),
                                     argocd_namespace=getattr(self.settings.remediation, "argocd_namespace",
                                                              "argocd"))
        except PlanMoved as e:  # another approval started it: that one reports
            log.info("plan %s: already %s, not applied again", plan_id, e.params.get("state"))
            return
        except ChangedSincePlanned as e:
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "changed",
                                                           planned=plan.resource_version,
                                                           now=e.params.get("now") or cat.t("slack_plan.rv_unread")))
            return
        except PartlyApplied as e:  # some of a split's objects are there: Roll back deletes them
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "partly_applied",
                                                           reason=e.params.get("proof") or "-"))
            return
        except OutcomeUnknown as e:  # sent, the answer lost, the object unreadable: the reconcile pass reads it
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "unknown",
                                                           reason=e.params.get("reason") or "-",
                                                           reread=e.params.get("reread") or "-"))
            self._settled_meanwhile(plan_id, channel, ts, lang)
            return
        except GpumemError as e:  # refused before the write, by a 4xx, or a re-read proved it absent
            reason = P.error_reason(cat, e.code, e.params, error_line(cat, e))
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "not_applied", reason=reason))
            return
        except _NoteNotPosted:  # the note could not be posted: the plan failed before any write
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "not_applied",
                                                           reason=cat.t("slack_plan.note_not_posted")))
            return
        self._watch(plan_id, channel, ts, lang, writer)

    def _settled_meanwhile(self, plan_id: str, channel: str, ts: str, lang: str) -> None:
        """A reconcile pass may have settled the plan between the unknown outcome being recorded
        and the message saying so: then the message says what the pass found, not "unknown"."""
        stored = self.store.get(plan_id)
        if stored.state in ("applied", "failed"):
            last = next((r for r in reversed(self.store.plan_audit(plan_id)) if r.to_state), None)
            detail = (last.detail or {}) if last is not None else {}
            partly = stored.state == "failed" and detail.get("error") == "split_partly_applied"
            stage = RECONCILED_STAGES["partly_applied" if partly else stored.state]
            self.poster.update(channel, ts, self._message(stored, lang, stage, reason=detail.get("reason") or "-"))

    def _watch(self, plan_id: str, channel: str, ts: str, lang: str, writer: Any) -> None:
        store = self.store
        window = self.settings.remediation.watch_s
        minutes = max(1, round(window / 60))

        def on_look(look: Any) -> None:
            if look.outcome == "rolling_out":
                self.poster.update(channel, ts, self._message(
                    store.get(plan_id), lang, "watching", minutes=minutes, updated=look.updated,
                    available=look.available, replicas=look.replicas, symptoms=look.symptoms))

        target = store.get(plan_id).plan.target
        if not remediate.watchable(store.get(plan_id).plan):  # a StatefulSet's or LeaderWorkerSet's: not judged
            self.poster.update(channel, ts, self._message(store.get(plan_id), lang, "not_watched", kind=target.kind,
                                                           name=target.name))
            return
        symptoms = watch_metrics.symptoms_reader(self.settings, target.cluster, target.namespace, target.name,
                                                 now=self.now)
        try:
            stored, seen = remediate.watch_after(store, writer, plan_id, window,
                                                 auto_rollback=self.settings.remediation.auto_rollback,
                                                 poll_s=self.poll_s, clock=self.watch_clock, sleep=self.watch_sleep,
                                                 on_look=on_look, symptoms=symptoms)
        except (PlanMoved, StaleObject) as e:  # rolled back while watched: the rollback edited the message
            log.info("plan %s: the watch ended early (%s)", plan_id, e.params.get("state"))
            return
        except OutcomeUnknown as e:  # the automatic rollback's answer was lost: the reconcile pass reads it
            self.poster.update(channel, ts, self._message(
                store.get(plan_id), lang, "rollback_unknown", users=("remediation.auto_rollback",),
                reason=e.params.get("reason") or "-", reread=e.params.get("reread") or "-"))
            return
        stage = "failed_rolled_back" if stored.state == "rolled_back" else seen.outcome
        self.poster.update(channel, ts, self._message(stored, lang, stage, notes=seen.notes, replicas=seen.replicas,
                                                       symptoms=seen.symptoms, reverted=seen.reverted))

    # ------------------------------------------------------------------ Roll back

    def _rollback_click(self, click: Click, lang: str, respond: Callable[..., Any]) -> None:
        self._rollback(click.value, click.user, click.channel, lang, respond, (click.channel, click.ts))

    def _rollback(self, plan_id: str, user: str, channel: str, lang: str, respond: Callable[..., Any],
                  message: tuple[str, str] | None) -> None:
        """Roll back: a click on the plan's message (`message`, where the store says it is), or
        `/gpumem rollback PLAN` typed in `channel` (`message` None): then it acts under the policy
        of the channel the plan's message is in and edits that message (`_typed_on_plan`)."""
        stored = self._stored(plan_id, respond, lang)
        if stored is None:
            return
        plan = stored.plan
        refusal = self._target_refusal(Target(plan.target.namespace, plan.target.name), plan.target.cluster, channel)
        if refusal is not None:  # typed: the channel it is typed in may narrow, never widen
            return self._say(respond, V.error_message(lang, refusal[0], **refusal[1]))
        if message is None:
            where = self._typed_on_plan(stored, user, channel, "rollback", lang, respond)
            if where is None:
                return
            message = (where[0], where[1])
        channel = message[0]  # the plan's channel: its policy, its audit rows
        if self._account_refused(user, plan.id, channel, "rollback", lang, respond):
            return
        groups = self._groups(user, plan.target.namespace)
        out = approvals.may_roll_back(self.store, self.settings, plan.id, user, groups, channel=channel)
        if isinstance(out, approvals.Refusal):
            return self._refuse(respond, lang, out.reason, plan=plan.id, namespace=plan.target.namespace,
                                approvers=out.approvers, state=out.state, verb="rollback")
        if not self.store.claim(f"rollback:{plan.id}", user, ttl_s=ROLLBACK_CLAIM_S):
            return self._refuse(respond, lang, "rollback_running", plan=plan.id)
        self.jobs.submit(self._rollback_guarded, plan.id, user, channel, lang, respond, message)

    def _rollback_guarded(self, plan_id: str, user: str, channel: str, lang: str, respond: Callable[..., Any],
                          message: tuple[str, str] | None) -> None:
        try:
            self._rollback_job(plan_id, user, channel, lang, respond, message)
        finally:  # over, done or refused: a retry (a phase 1 after its phase 2) is not told one runs
            self.store.release(f"rollback:{plan_id}", user)

    def _rollback_job(self, plan_id: str, user: str, channel: str, lang: str, respond: Callable[..., Any],
                      message: tuple[str, str] | None) -> None:
        cat = Catalog.load(lang)
        #: the plan message's language (its channel's); `lang` is the one told, ephemerally
        home = self.settings.lang_for(message[0]) if message is not None else lang
        try:
            writer = self.writer_for(self.store.get(plan_id).plan.target.cluster)
            stored = remediate.rollback_now(self.store, writer, plan_id, user, channel=channel)
        except ChangedAfterApply as e:
            rows = P.differences_text(e.params.get("differences") or ())
            return self._refuse(respond, lang, "rollback_changed", plan=plan_id, differences=rows)
        except SplitChangedAfterApply as e:  # the clone holds the original's env: paths, not values
            rows = S.differences_text(e.params.get("differences") or (), lang)
            return self._refuse(respond, lang, "rollback_changed", plan=plan_id, differences=rows)
        except PlanMoved as e:
            return self._refuse(respond, lang, "moved", plan=plan_id, state=str(e.params.get("state")))
        except OutcomeUnknown as e:  # the plan keeps its state; the reconcile pass reads the object
            if message is not None:
                self.poster.update(message[0], message[1], self._message(
                    self.store.get(plan_id), home, "rollback_unknown", users=(user,),
                    reason=e.params.get("reason") or "-", reread=e.params.get("reread") or "-"))
            reason = P.error_reason(cat, e.code, e.params, error_line(cat, e))
            return self._refuse(respond, lang, "rollback_unknown", plan=plan_id, reason=reason)
        except GpumemError as e:
            reason = P.error_reason(cat, e.code, e.params, error_line(cat, e))
            return self._refuse(respond, lang, "rollback_failed", plan=plan_id, reason=reason)
        except Exception as e:
            error_id = log_crash(log, "rolling back plan %s failed", e, plan_id)
            return self._say(respond, V.error_message(lang, "internal", error_id=error_id))
        msg = self._message(stored, home, "rolled_back", users=(user,))
        if message is not None:
            self.poster.update(message[0], message[1], msg)
        else:
            self.poster.post(channel, msg)

    # ------------------------------------------------------------------ helpers

    def _typed_on_plan(self, stored: Any, user: str, typed: str, verb: str, lang: str,
                       respond: Callable[..., Any]) -> tuple[str, str, str | None] | None:
        """Where the plan's own message is (channel, ts, thread), for a command typed in channel
        `typed` that acts on that plan: it acts under the policy of the plan's channel, never the
        typed one's, and its results go to that message and its thread. None (refused: the typer
        told ephemerally, the audit written, nothing changed) when the plan has no recorded message,
        or its channel is not one gpumem answers in or does not allow the plan's namespace now."""
        plan = stored.plan
        posting = self._posting.get(plan.id)
        if posting is not None:  # posted, its place not recorded yet: wait for it, as a click does
            posting.wait(POSTING_WAIT_S)
        where = approvals.slack_message(self.store, plan.id)
        if where is None:
            reason = "typed_no_message"
        elif self.settings.channel_policy(where[0]) is None:
            reason = "typed_plan_channel"
        elif not self.settings.namespace_allowed(plan.target.namespace, plan.target.cluster, where[0]):
            reason = "typed_plan_namespace"
        else:
            return where
        log.warning("refused a typed %s of plan %s from %s: %s", verb, plan.id, typed, reason)
        self.store.record(REFUSED_EVENT[verb], actor=user, channel=where[0] if where else None,
                          detail={"plan": plan.id, "reason": reason, "typed_channel": typed[:64]})
        self._refuse(respond, lang, reason, plan=plan.id, namespace=plan.target.namespace,
                     channel=where[0] if where else "-", command=TYPED_COMMAND[verb])
        return None

    def _message(self, stored: Any, lang: str, stage: str, **params: Any) -> dict[str, Any]:
        """The plan message at `stage`; a pool split's with the template values it recorded."""
        split = split_pools.template_of(self.store, stored.plan.id) if split_pools.is_split(stored.plan) else None
        if stage in P.WAITING_STAGES:  # the headline names who may still approve, as the policy decides it
            params["approvers"], params["approvers_configured"] = approvals.may_still_approve(self.settings, stored)
        return P.plan_message(stored, lang, stage, split=split, **params)

    def _target_refusal(self, target: Any, context: str | None, channel: str) -> Any:
        return self.check_target(Command(verb="plan", target=target, context=context), channel)

    @staticmethod
    def _state_word(lang: str, state: str) -> str:
        cat = Catalog.load(lang)
        return cat.t_or(f"remediate_cli.state.{state}", state)

    def _refuse(self, respond: Callable[..., Any], lang: str, reason: str, /, **params: Any) -> None:
        if "state" in params and params["state"] is not None:
            params["state"] = self._state_word(lang, str(params["state"]))
        self._say(respond, P.refusal_message(lang, reason, **params))

    @staticmethod
    def _say(respond: Callable[..., Any], msg: dict[str, Any]) -> None:
        try:
            respond(response_type="ephemeral", replace_original=False, **msg)
        except Exception as e:  # the response_url may be used up (5 uses) or expired (30 min)
            log.warning("respond failed: %s", type(e).__name__)
