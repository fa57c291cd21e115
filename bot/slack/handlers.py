"""Bolt listeners: parse, check, ack at once, hand the work on. Nothing slow here.

Bolt runs a listener in the thread of the request it answers (`process_before_response`), and
the HTTP answer leaves when the listener returns. So a listener does only what the ack needs:
help and refusals are the ack itself (ephemeral, nothing in the channel), a note is one SQLite
statement; an accepted command is acked with "on it" and everything after the ack (its parent
message, queueing its job; the whole of a button click) runs on the `after_ack` threads. A
request thread never waits on Slack's Web API, and Bolt's wait for an ack on another thread
(it polls every 10 ms) is gone: under a burst of commands the acks were queueing behind those
polls and behind the parent messages being posted.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future, wait
from dataclasses import replace
from typing import Any

from bot.config.settings import WILDCARD, Settings
from bot.grammar.requests import FleetRequest
from bot.grammar.slack import (
    SLACK_VERBS,
    Command,
    CommandError,
    ParserFactory,
    available_verbs,
    fleet_scope,
    parse_command,
    parse_target,
    usage_of,
)
from bot.render import slack_handover as H
from bot.render import slack_triage as R
from bot.render import slack_verbs as V
from bot.render.i18n import Catalog
from bot.service.notes import add_note, list_notes, split_note_args
from bot.slack.api import SlackPoster, job_metadata, new_job_id
from bot.slack.drain import Stopping
from bot.slack.jobs import Answering, Claims, JobPool, StoreClaims
from bot.slack.remediation import RemediationDesk
from bot.slack.work import Job, SharedStore, Work
from bot.telemetry.errorid import log_crash
from bot.telemetry.metrics import BotMetrics
from bot.verbs import VERBS
from runbooks.model.errors import UsageError

log = logging.getLogger("gpumem.slack")

_NOT_IN_CHANNEL = ("not_in_channel", "channel_not_found", "is_archived")


class Handlers:
    def __init__(self, settings: Settings, work: Work, pool: JobPool, poster: SlackPoster, metrics: BotMetrics,
                 parser_factory: ParserFactory | None = None,
                 claims: Claims | None = None, clock: Callable[[], float] = time.monotonic,
                 stopping: Stopping | None = None, store: SharedStore | None = None,
                 after_ack: Executor | None = None, answering: Answering | None = None):
        self.settings = settings
        #: where the work after an ack runs (parent messages, queueing, button clicks); None:
        #: in the listener's own thread (then the HTTP answer waits for it)
        self.after_ack = after_ack
        #: the Slack requests being answered now (the HTTP face counts them); after-ack work waits for a lull
        self.answering = answering or Answering()
        self._pending: set[Future[Any]] = set()
        self._pending_lock = threading.Lock()
        #: the bot's store: notes and handovers (None: no `store.path` configured)
        self.store = store
        self.stopping = stopping or Stopping()
        self.work = work
        self.pool = pool
        self.poster = poster
        self.metrics = metrics
        self.parser_factory = parser_factory
        #: the "Run again" double-click guard: in the store when there is one (replicas and restarts share it)
        self.claims = claims or (StoreClaims(store) if store is not None else Claims())
        self.clock = clock

        #: plans: the "Plan" buttons, Approve / Reject / Roll back / Plan again, /gpumem plan, plans, rollback
        self.remediation = RemediationDesk(settings, poster, store, self._later, self._check_target)

    # ------------------------------------------------------------------ /gpumem

    def on_command(self, ack: Callable[..., Any], command: dict[str, Any], respond: Callable[..., Any]) -> None:
        acked = _Once(ack)
        try:
            self._command(acked, command, respond)
        except Exception as e:
            # Bolt answers 404 to Slack when a listener raises, even after ack(): never raise.
            # The asker gets an apology and an id; the log the traceback under the same id.
            error_id = log_crash(log, "/gpumem failed", e)
            lang = self.settings.lang_for(command.get("channel_id", ""))
            if not acked.called:
                acked(**V.error_message(lang, "internal", error_id=error_id))
            else:
                self._tell(respond, lang, "internal", error_id=error_id)

    def _command(self, ack: Callable[..., Any], command: dict[str, Any], respond: Callable[..., Any]) -> None:
        accepted_at = self.clock()
        channel, user = command.get("channel_id", ""), command.get("user_id", "")
        lang = self.settings.lang_for(channel)
        text = command.get("text") or ""
        first = text.split()[0].lower() if text.split() else "help"
        if self.settings.channel_policy(channel) is None:
            log.info("refused /gpumem from channel %s (not in slack.channels)", channel)
            return self._refuse(ack, lang, _verb_label(first), "channel_not_allowed")
        try:
            cmd = parse_command(text, self.settings.default_namespace, self.parser_factory)
        except CommandError as e:
            if e.key == "help_verb":
                self.metrics.command(_verb_label(first), "ok")
                return ack(**V.verb_help_message(lang, _verb_label(first), e.usage))
            return self._refuse(ack, lang, _verb_label(first), e.key, e.usage, **e.params)
        lang = cmd.lang or lang
        if cmd.verb == "help":
            self.metrics.command("help", "ok")
            if cmd.topic and cmd.topic != "help":
                return ack(**V.verb_help_message(lang, cmd.topic, usage_of(cmd.topic, self.parser_factory)))
            return ack(**V.help_message(lang, available_verbs(self.parser_factory)))
        refusal = self._check_target(cmd, channel)
        if refusal is not None:
            key, params = refusal
            return self._refuse(ack, lang, cmd.verb, key, **params)
        policy = VERBS[cmd.verb].slack
        assert policy is not None  # the grammar parses only the verbs Slack offers
        if policy.runs == "ack":
            return self._notes(ack, cmd, channel, user, lang)
        if policy.runs == "desk":
            return self.remediation.command(ack, cmd, channel, user, lang, respond)
        if "store" in policy.needs and self.store is None:
            return self._refuse(ack, lang, cmd.verb, "no_store")
        if "prometheus" in policy.needs and self.work.fleet_reader is None:
            return self._refuse(ack, lang, cmd.verb, "no_prometheus")
        if policy.scoped:
            scoped = self._fleet_scope(cmd, channel)
            if isinstance(scoped, tuple):
                return self._refuse(ack, lang, cmd.verb, scoped[0], **scoped[1])
            cmd = scoped
        self._start(cmd, channel, user, lang, accepted_at, ack=ack, respond=respond)

    # ------------------------------------------------------------------ /gpumem fleet

    def _fleet_scope(self, cmd: Command, channel: str) -> Command | tuple[str, dict[str, Any]]:
        """The command with `[NAMESPACE|--all]` resolved to the namespaces this channel may read,
        as its request's `namespace` (empty: every namespace); a refusal when one named is not allowed."""
        assert isinstance(cmd.request, FleetRequest)  # the grammar parsed `fleet`
        names = fleet_scope(cmd.request, self.settings.default_namespace)
        allowed = self.settings.namespaces_for(None, channel)
        if names is None:
            if not allowed:
                return "namespace_not_allowed", {"namespace": "*", "allowed": "-"}
            names = () if WILDCARD in allowed else allowed
        for ns in names:
            if not self.settings.namespace_allowed(ns, None, channel):
                return "namespace_not_allowed", {"namespace": ns, "allowed": ", ".join(allowed) or "-"}
        return replace(cmd, request=replace(cmd.request, namespace=tuple(names)))

    # ------------------------------------------------------------------ /gpumem note, notes

    def _notes(self, ack: Callable[..., Any], cmd: Command, channel: str, user: str, lang: str) -> None:
        """A note is recorded, or the channel's notes read, in the ack itself: one SQLite
        statement, ephemeral, nothing in the channel. The channel is always this one."""
        if self.store is None:
            return self._refuse(ack, lang, cmd.verb, "no_store")
        if cmd.verb == "notes":
            with self.store.use() as store:
                notes = list_notes(store, since=cmd.request.since, target=cmd.request.target, channel=channel)
            self.metrics.command("notes", "ok")
            return ack(response_type="ephemeral", **H.note_list_message(lang, notes))
        target, text = split_note_args(cmd.request)
        if target is not None:
            try:
                parsed = parse_target(target, self.settings.default_namespace)
            except CommandError as e:
                return self._refuse(ack, lang, "note", e.key, **e.params)
            refusal = self._check_target(Command(verb="note", target=parsed), channel)
            if refusal is not None:
                return self._refuse(ack, lang, "note", refusal[0], **refusal[1])
            target = str(parsed)
        try:
            with self.store.use() as store:
                note = add_note(store, user, text, target=target, channel=channel)
        except UsageError as e:
            reason = Catalog.load(lang).t(f"handover.error.{e.code}", **e.params)
            return self._refuse(ack, lang, "note", "note_failed", reason=reason)
        self.metrics.command("note", "ok")
        ack(response_type="ephemeral", **H.note_saved_message(lang, note))

    # ------------------------------------------------------------------ the "Run again" button

    def on_rerun(self, ack: Callable[..., Any], body: dict[str, Any], respond: Callable[..., Any]) -> None:
        ack()
        self._later(self._rerun_guarded, body, respond)

    def _rerun_guarded(self, body: dict[str, Any], respond: Callable[..., Any]) -> None:
        try:
            self._rerun(body, respond)
        except Exception as e:
            error_id = log_crash(log, "rerun failed", e)
            container = body.get("container") if isinstance(body.get("container"), dict) else {}
            self._tell(respond, self.settings.lang_for(str(container.get("channel_id") or "")), "internal",
                       error_id=error_id)

    def _rerun(self, body: dict[str, Any], respond: Callable[..., Any]) -> None:
        accepted_at = self.clock()
        user = (body.get("user") or {}).get("id", "")
        container = body.get("container") or {}
        channel = container.get("channel_id") or (body.get("channel") or {}).get("id", "")
        lang = self.settings.lang_for(channel)
        action = (body.get("actions") or [{}])[0]
        if self.settings.channel_policy(channel) is None:
            return self._tell(respond, lang, "channel_not_allowed")
        if not self.claims.claim((channel, container.get("message_ts"), action.get("action_id"))):
            return self._tell(respond, lang, "rerun_claimed")
        try:
            value = json.loads(action.get("value") or "{}")
            target = parse_target(str(value.get("target") or ""), self.settings.default_namespace)
        except (ValueError, AttributeError, CommandError):
            return self._tell(respond, lang, "bad_target", target=str(action.get("value"))[:100])
        context = value.get("context") if isinstance(value.get("context"), str) else None
        cmd = Command(verb="triage", argv=(str(target),), target=target, context=context)
        refusal = self._check_target(cmd, channel)
        if refusal is not None:
            return self._tell(respond, lang, refusal[0], **refusal[1])
        self._start(cmd, channel, user, lang, accepted_at, ack=None, respond=respond)

    def on_error(self, error: Exception, body: dict[str, Any]) -> None:
        """Bolt's error handler: what escaped a listener. Logged with an id; nothing is posted."""
        log_crash(log, "listener failed", error)

    # ------------------------------------------------------------------ shared steps

    def _check_target(self, cmd: Command, channel: str) -> tuple[str, dict[str, Any]] | None:
        if cmd.target is None:
            return None
        if not self.settings.context_known(cmd.context):
            known = ", ".join(c.name for c in self.settings.clusters) or "-"
            return "unknown_context", {"context": cmd.context, "contexts": known}
        if not self.settings.namespace_allowed(cmd.target.namespace, cmd.context, channel):
            allowed = ", ".join(self.settings.namespaces_for(cmd.context, channel)) or "-"
            return "namespace_not_allowed", {"namespace": cmd.target.namespace, "allowed": allowed}
        return None

    def _start(self, cmd: Command, channel: str, user: str, lang: str, accepted_at: float,
               ack: Callable[..., Any] | None, respond: Callable[..., Any]) -> None:
        ticket = None if self.stopping.is_set else self.pool.reserve()
        if ticket is None and (self.stopping.is_set or self.pool.closed):
            self.metrics.command(cmd.verb, "refused")
            if ack is not None:
                return ack(**V.error_message(lang, "restarting"))
            return self._tell(respond, lang, "restarting")
        if ticket is None:
            self.metrics.command(cmd.verb, "busy")
            if ack is not None:
                return ack(**V.error_message(lang, "busy", queued=self.pool.queued))
            return self._tell(respond, lang, "busy", queued=self.pool.queued)
        target = str(cmd.target) if cmd.target else None
        with_parent = _with_parent(cmd.verb)
        if ack is not None:
            ahead = ticket.ahead if ticket.queued and not with_parent else None
            ack(**V.ack_text(lang, cmd.verb, target, ahead))
            return self._later(self._queue_guarded, cmd, channel, user, lang, accepted_at, respond, ticket)
        self._queue(cmd, channel, user, lang, accepted_at, respond, ticket)

    def _queue_guarded(self, cmd: Command, channel: str, user: str, lang: str, accepted_at: float,
                       respond: Callable[..., Any], ticket: Any) -> None:
        try:
            self._queue(cmd, channel, user, lang, accepted_at, respond, ticket)
        except Exception as e:
            self.pool.release(ticket)
            error_id = log_crash(log, "/gpumem failed after the ack", e)
            self._tell(respond, lang, "internal", error_id=error_id)

    def _queue(self, cmd: Command, channel: str, user: str, lang: str, accepted_at: float,
               respond: Callable[..., Any], ticket: Any) -> None:
        """Post the parent message (for verbs that have one) and queue the job on `ticket`."""
        target = str(cmd.target) if cmd.target else None
        with_parent = _with_parent(cmd.verb)
        parent_ts = None
        job_id = new_job_id()
        if with_parent:
            first = (R.queued_message(lang, cmd.verb, target, ticket.ahead, user) if ticket.queued
                     else R.starting_message(lang, cmd.verb, target, user))
            parent_ts, error = self.poster.post_or_error(channel, first, meta=job_metadata(job_id, "parent"))
            if parent_ts is None:
                self.pool.release(ticket)
                self.metrics.command(cmd.verb, "error")
                key = "not_in_channel" if error in _NOT_IN_CHANNEL else "post_failed"
                return self._tell(respond, lang, key, error=error)
        job = Job(cmd, channel, user, lang, parent_ts, accepted_at, respond, id=job_id)
        self.pool.submit(ticket, lambda: self.work.run(job, was_queued=ticket.queued),
                         cancel=lambda: self.work.cancel(job))

    def _later(self, fn: Callable[..., None], *args: Any) -> None:
        """Run `fn(*args)` after the ack: on the `after_ack` threads, or here without them (or
        once they are shut down, in a drain)."""
        if self.after_ack is not None:
            try:
                future = self.after_ack.submit(self._after_lull, fn, *args)
            except RuntimeError:  # shut down: the drain has begun
                pass
            else:
                with self._pending_lock:
                    self._pending.add(future)
                future.add_done_callback(self._done)
                return
        fn(*args)

    def _after_lull(self, fn: Callable[..., None], *args: Any) -> None:
        self.answering.lull()
        fn(*args)

    def _done(self, future: Future[Any]) -> None:
        with self._pending_lock:
            self._pending.discard(future)

    def settle(self, timeout_s: float) -> bool:
        """Stop taking work after acks and wait up to `timeout_s` for what was handed on (a
        parent message being posted, a job being queued), so the drain that follows finds every
        accepted job in the pool. True when all of it ended."""
        if self.after_ack is None:
            return True
        self.after_ack.shutdown(wait=False)  # from now on, what an ack leaves runs in its thread
        with self._pending_lock:
            pending = set(self._pending)
        _, left = wait(pending, timeout=max(0.0, timeout_s))
        return not left

    def _refuse(self, ack: Callable[..., Any], lang: str, verb: str, key: str, usage: str = "", /,
                **params: Any) -> None:
        outcome = "refused" if key in ("channel_not_allowed", "namespace_not_allowed", "unknown_context") else "usage"
        self.metrics.command(verb, outcome)
        ack(**V.error_message(lang, key, usage, **params))

    def _tell(self, respond: Callable[..., Any], lang: str, key: str, /, **params: Any) -> None:
        try:
            respond(response_type="ephemeral", replace_original=False, **V.error_message(lang, key, **params))
        except Exception as e:  # the response_url may be used up (5 uses) or expired (30 min)
            log.warning("respond failed (%s): %s", key, type(e).__name__)


class _Once:
    """Bolt's ack, remembering whether it was called."""

    def __init__(self, ack: Callable[..., Any]):
        self.ack = ack
        self.called = False

    def __call__(self, *args: Any, **kw: Any) -> Any:
        self.called = True
        return self.ack(*args, **kw)


def _verb_label(word: str) -> str:
    """A bounded label for metrics: a known verb or "unknown"."""
    return word if word in SLACK_VERBS else "unknown"


def _with_parent(verb: str) -> bool:
    """Whether the verb's work is shown in a parent message while it runs (its registry policy)."""
    policy = VERBS[verb].slack
    return policy is not None and policy.parent
