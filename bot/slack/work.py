"""The jobs the pool runs: triage, profile, snapshot, and CLI verbs, each ending in its parent.

Every job owns one parent message (posted when the command was accepted) and finishes it
exactly once: the answer, a failure, a timeout, or a cancellation. A job past its deadline is
reported as timed out at once; whatever the runner returns later is dropped (and logged),
because a Python thread cannot be stopped from outside.
"""

from __future__ import annotations

import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from bot.grammar.slack import Command
from bot.render import slack_fleet as F
from bot.render import slack_handover as H
from bot.render import slack_triage as R
from bot.render import slack_verbs as V
from bot.render.errors import error_line, verb_error_line
from bot.render.handover import handover_text
from bot.render.i18n import Catalog
from bot.render.templating import environment
from bot.render.text import render_text
from bot.service.fleet import view_time
from bot.service.handover import post_handover
from bot.service.notes import record_triage
from bot.service.redact import redact
from bot.service.reviews import confirm
from bot.service.runners import TriageRunner, bundle_archive
from bot.slack.api import SlackPoster, job_metadata, new_job_id
from bot.slack.jobs import Throttle
from bot.telemetry.errorid import log_crash
from bot.telemetry.metrics import BotMetrics, outcome_of
from bot.verbs import VERBS
from bot.verbs.worker import VerbRunner
from runbooks.model.errors import GpumemError, TargetNotFound

log = logging.getLogger("gpumem.work")


@dataclass(frozen=True)
class Job:
    """One accepted command: who asked, where, in which language, and its parent message."""

    command: Command
    channel: str
    user: str
    lang: str
    #: the parent message of a triage, profile or snapshot; CLI verbs post once, when done
    parent_ts: str | None
    accepted_at: float
    #: the command's response_url as Bolt's `respond`: ephemeral replies after the ack
    respond: Callable[..., Any] | None = None
    #: carried by every message of the job in Slack message metadata (see `bot.slack.api`)
    id: str = field(default_factory=new_job_id)
    #: the alert that started the job (`bot.slack.alerts.AlertFrame`): its head tops every parent edit
    alert: Any = None

    def meta(self, part: str = "parent") -> dict[str, Any]:
        """The metadata of one of the job's messages: the parent, a thread reply, the output."""
        return job_metadata(self.id, part)

    @property
    def target(self) -> str | None:
        return str(self.command.target) if self.command.target else None

    def slug(self) -> str:
        return (self.target or self.command.verb).replace("/", "-")


def warm_up(langs: set[str] | list[str] | tuple[str, ...]) -> None:
    """What answering the first job would load in this process, loaded at start-up: each
    language's catalog and the compiled report template. (The runner's own warm-up, the charts
    and the parsers, happens where it runs: see `bot.service.runners.ProcessRunner`.)"""
    for lang in langs:
        Catalog.load(lang)
    environment().get_template("triage.txt.j2")


def error_reply(cat: Catalog, error: GpumemError, target: str | None) -> str:
    """The Slack wording of a GpumemError that ended a job: the Slack surface's one mapping.

    It is the line the CLI prints for the same error (`bot.render.errors.error_line`),
    so "Deployment llm/x not found in context prod" reads alike in a terminal and a channel; a
    target that no evidence source of this bot knows keeps its own words, since it says
    nothing about whether the workload exists.
    """
    if isinstance(error, TargetNotFound) and error.source_unknown:
        return cat.t("slack.status.not_found", target=target or "")
    return error_line(cat, error)


class SharedStore:
    """The bot's one store (the config's `store.path`), used by listener and job threads in turn."""

    def __init__(self, store: Any):
        self.store = store
        self._lock = threading.Lock()

    @contextmanager
    def use(self) -> Iterator[Any]:
        with self._lock:
            yield self.store

    def close(self) -> None:
        with self._lock:
            self.store.close()

    def each_call(self) -> Any:
        """The store with the lock taken per method call, not for a whole use case: a plan's apply
        and watch read and move it between Kubernetes calls that take seconds to minutes, and
        notes and other clicks must not wait for those. Each Store method is one transaction."""
        return _LockedStore(self.store, self._lock)


class _LockedStore:
    def __init__(self, store: Any, lock: threading.Lock):
        self._store = store
        self._lock = lock

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kw: Any) -> Any:
            with self._lock:
                return attr(*args, **kw)

        return call


class _Finish:
    """The single transition of a job to its end state (answer, failure, timeout, cancel)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.done = False
        #: a verb's answer is being sent (a crash after this point still tells the asker)
        self.answered = False

    def take(self) -> bool:
        with self._lock:
            if self.done:
                return False
            self.done = True
            return True

    def while_open(self, fn: Callable[[], Any]) -> None:
        """Run `fn` unless the job has ended; an ending waits for it (no progress after a timeout)."""
        with self._lock:
            if not self.done:
                fn()


class Work:
    def __init__(self, poster: SlackPoster, runner: TriageRunner, verb_runner: VerbRunner | None,
                 metrics: BotMetrics, deadline_s: float, verb_deadline_s: float, progress_interval_s: float,
                 secrets: tuple[str, ...] = (), clock: Callable[[], float] = time.monotonic,
                 store: SharedStore | None = None):
        self.poster = poster
        #: where a triage is recorded for the handover (None: no `store.path` configured)
        self.store = store
        #: the handover's Prometheus state reader (`bot.service.handover.prometheus_reader`); None: none
        self.read_state: Callable[..., Any] | None = None
        #: reads a stop-gap's live object (`bot.service.handover.live_object_reader`); None: they stay unconfirmed
        self.read_object: Callable[..., Any] | None = None
        #: reads the watched services' KV usage over the shift (the handover chart); None: no chart
        self.read_series: Callable[..., Any] | None = None
        #: a channel's watched services (`Settings.watched`); none: the services the shift touched
        self.watched: Callable[[str], tuple[str, ...]] = lambda channel: ()
        #: the fleet view (`bot.service.fleet.fleet_reader`: namespaces, engines, top -> FleetOutcome); None: no Prometheus
        self.fleet_reader: Callable[..., Any] | None = None
        #: (report, lang, target, context) -> the "Plan" buttons under a diagnosis; None: remediation off
        self.plan_buttons: Callable[..., list[Any]] | None = None
        self.runner = runner
        self.verb_runner = verb_runner
        self.metrics = metrics
        self.deadline_s = deadline_s
        self.verb_deadline_s = verb_deadline_s
        self.progress_interval_s = progress_interval_s
        self.secrets = secrets
        self.clock = clock
        self._lock = threading.Lock()
        #: the jobs running now, each with its one-way end (for `interrupt`)
        self._active: dict[int, tuple[Job, _Finish]] = {}

    # ------------------------------------------------------------------ entry points

    def run(self, job: Job, was_queued: bool = False) -> None:
        finish = _Finish()
        with self._lock:
            self._active[id(finish)] = (job, finish)
        policy = VERBS[job.command.verb].slack
        try:
            if policy is not None and policy.job == "target":
                self._run_target(job, was_queued, finish)
            elif policy is not None and policy.job == "handover":
                self._run_handover(job, finish)
            elif policy is not None and policy.job == "fleet":
                self._run_fleet(job, finish)
            else:
                self._run_verb(job, finish)
        finally:
            with self._lock:
                self._active.pop(id(finish), None)

    def cancel(self, job: Job) -> None:
        """The pool shut down before the job started."""
        self._fail(job, "cancelled", "error")

    def running(self) -> list[Job]:
        with self._lock:
            return [job for job, _ in self._active.values()]

    def interruptions(self) -> list[Callable[[], None]]:
        """For each running job, a call that ends it as interrupted (its parent says gpumem
        restarted) unless it has ended meanwhile; whatever its runner returns later is dropped."""
        with self._lock:
            active = list(self._active.values())

        def interrupt(job: Job, finish: _Finish) -> None:
            if finish.take():
                log.warning("%s %s: interrupted by the shutdown", job.command.verb, job.target or "")
                self._fail(job, "interrupted", "error")

        return [lambda j=job, f=finish: interrupt(j, f) for job, finish in active]

    # ------------------------------------------------------------------ triage, profile, snapshot

    def _run_target(self, job: Job, was_queued: bool, finish: _Finish) -> None:
        verb = job.command.verb
        throttle = Throttle(self.progress_interval_s, self.clock)
        if was_queued:
            throttle.ready()
            self._update_parent(job, R.starting_message(job.lang, verb, job.target, job.user))

        def on_step(i: int, total: int, step: str) -> None:
            if throttle.ready():
                msg = R.progress_message(job.lang, verb, job.target, i, total, step, job.user)
                finish.while_open(lambda: self._update_parent(job, msg))

        def expire() -> None:
            if finish.take():
                log.warning("%s %s: past its %.0f s deadline", verb, job.target, self.deadline_s)
                self._fail(job, "timed_out", "timeout", seconds=round(self.deadline_s))

        timer = threading.Timer(self.deadline_s, expire)
        timer.daemon = True
        timer.start()
        try:
            outcome = self.runner(str(job.target), job.command.context, on_step)
        except GpumemError as e:  # an answer (no such workload, ...), not a crash: no traceback
            log.info("%s %s: %s", verb, job.target, e.code)
            if finish.take():
                self._fail(job, "error", "error", reason=error_reply(Catalog.load(job.lang), e, job.target))
            return
        except Exception as e:  # a crash: the parent gets an apology and an id, the log the traceback
            error_id = log_crash(log, "%s %s failed", e, verb, job.target)
            if finish.take():
                self._fail(job, "crashed", "error", error_id=error_id)
            return
        finally:
            timer.cancel()
        try:
            if not finish.take():
                log.warning("%s %s: result arrived after the deadline or the shutdown and was dropped", verb,
                            job.target)
                return
            self._answer(job, outcome)
        except Exception as e:  # a rendering bug still ends the parent, with an id to find it by
            error_id = log_crash(log, "%s %s: answering failed", e, verb, job.target)
            self._fail(job, "crashed", "error", error_id=error_id)
        finally:
            if getattr(outcome, "discard_bundle", False) and outcome.bundle_dir:
                shutil.rmtree(outcome.bundle_dir, ignore_errors=True)

    def _answer_triage(self, job: Job, outcome: Any) -> None:
        report = outcome.report
        elapsed = self.clock() - job.accepted_at
        plans = self._plan_buttons(job, report)
        msg = R.diagnosis_message(report, job.lang, target=job.target, context=job.command.context,
                                  user=job.user, elapsed_s=elapsed, plan_blocks=plans)
        if not self._update_parent(job, msg):
            # the parent must not stay on "running": fall back to the headline alone
            self._update_parent(job, {"text": msg["text"], "blocks": []})
        # the diagnosis is the answer; the thread and the files follow it
        self.metrics.command("triage", outcome_of(report.verdict.primary), self.clock() - job.accepted_at)
        detail = R.thread_detail(report, job.lang)
        for i, reply in enumerate(detail.messages, 1):
            self.poster.post(job.channel, reply, thread_ts=job.parent_ts, meta=job.meta(f"thread-{i}"))
        self._uploads(job, outcome, report, detail.overflow)
        self._record(job, report)

    def _plan_buttons(self, job: Job, report: Any) -> list[Any]:
        """The "Plan" buttons where an apply is possible; a failure costs the buttons, not the diagnosis."""
        if self.plan_buttons is None or not job.target:
            return []
        try:
            return self.plan_buttons(report, job.lang, job.target, job.command.context)
        except Exception as e:
            log_crash(log, "triage %s: the Plan buttons failed", e, job.target)
            return []

    def _record(self, job: Job, report: Any) -> None:
        """Keep the triage for the shift handover; best effort: the diagnosis is already posted."""
        if self.store is None:
            return
        try:
            with self.store.use() as store:
                record_triage(store, report, actor=job.user or "alertmanager", channel=job.channel,
                              cluster=job.command.context)
        except Exception as e:
            log_crash(log, "triage %s: recording it for the handover failed", e, job.target)

    def _uploads(self, job: Job, outcome: Any, report: Any, overflow: bool) -> None:
        cat = Catalog.load(job.lang)
        slug = job.slug()
        charts = (("memory", outcome.memory_chart_png, "slack.upload.memory_chart"),
                  ("buckets", outcome.profile_chart_png, "slack.upload.profile_chart"))
        for name, png, key in charts:
            if png:
                self.poster.upload(job.channel, job.parent_ts, f"gpumem-{slug}-{name}.png", png, cat.t(key))
        if overflow:
            self.poster.upload(job.channel, job.parent_ts, f"gpumem-{slug}-report-{job.lang}.txt",
                               render_text(report, job.lang), cat.t("slack.upload.report_file", target=job.target))
        if outcome.bundle_dir:
            archive = bundle_archive(outcome.bundle_dir, f"gpumem-{slug}")

            if archive is None:
                self.poster.post(job.channel, {"text": cat.t("slack.upload.bundle_unavailable")},
                                 thread_ts=job.parent_ts, meta=job.meta("bundle-note"))
            else:
                self.poster.upload(job.channel, job.parent_ts, f"gpumem-{slug}-bundle.tar.gz", archive,
                                   cat.t("slack.upload.bundle", target=job.target))

    def _answer(self, job: Job, outcome: Any) -> None:
        """A target job's answer: its verb's message in the parent (`bot.verbs.SlackPolicy.message`),
        with the pictures it names in the thread; the triage diagnosis when it names none."""
        policy = VERBS[job.command.verb].slack
        if policy is None or policy.message is None:
            return self._answer_triage(job, outcome)
        self._update_parent(job, policy.message(outcome, job.lang, job.target or "?", job.user))
        for upload in policy.uploads:
            png = getattr(outcome, upload.attribute, None)
            if png:
                self.poster.upload(job.channel, job.parent_ts, f"gpumem-{job.slug()}-{upload.name}.png", png,
                                   Catalog.load(job.lang).t(upload.title_key))
        self.metrics.command(job.command.verb, "ok", self.clock() - job.accepted_at)

    # ------------------------------------------------------------------ the shift handover

    def _run_handover(self, job: Job, finish: _Finish) -> None:
        """`/gpumem handover`: posted now into the channel and recorded; a failure only to the asker."""
        try:
            self.post_handover(job.channel, job.lang, actor=job.user)
        except GpumemError as e:
            if finish.take():
                reason = verb_error_line(Catalog.load(job.lang), e, VERBS["handover"].error_keys)
                self._tell(job, Catalog.load(job.lang).t("slack.error.handover_failed", reason=reason))
                self.metrics.command("handover", "error", self.clock() - job.accepted_at)
            return
        except Exception as e:
            error_id = log_crash(log, "handover in %s failed", e, job.channel)
            if finish.take():
                self._tell(job, Catalog.load(job.lang).t("slack.error.internal", error_id=error_id))
                self.metrics.command("handover", "error", self.clock() - job.accepted_at)
            return
        if finish.take():
            self.metrics.command("handover", "ok", self.clock() - job.accepted_at)

    def post_handover(self, channel: str, lang: str, *, actor: str, slot: Any = None, late: bool = False) -> Any:
        """Build the channel's handover, post it (parent and thread, the detail as a file when it
        does not fit) and record it, so the next one starts where it ends. The slash command and
        the scheduler both come here. Raises when there is no store or the parent cannot be posted
        (nothing is recorded then)."""
        if self.store is None:
            raise RuntimeError("no store configured (store.path)")
        job_id = new_job_id()

        def post(handover: Any) -> None:
            parent = H.handover_parent(handover, lang)
            ts, error = self.poster.post_or_error(channel, parent, meta=job_metadata(job_id, "handover"))
            if ts is None:
                raise RuntimeError(f"posting the handover failed: {error}")
            messages, overflow = H.handover_thread(handover, lang)
            for i, reply in enumerate(messages, 1):
                self.poster.post(channel, reply, thread_ts=ts, meta=job_metadata(job_id, f"thread-{i}"))
            if overflow:
                self.poster.upload(channel, ts, f"gpumem-handover-{lang}.txt", handover_text(handover, lang),
                                   Catalog.load(lang).t("slack.handover.file"))
            self._shift_chart(channel, ts, handover, lang)

        with self.store.use() as store:
            return post_handover(store, post, channel=channel, actor=actor, slot=slot, late=late,
                                 read_state=self.read_state, read_object=self.read_object,
                                 watch=self.watched(channel), read_series=self.read_series)

    def _shift_chart(self, channel: str, ts: str, handover: Any, lang: str) -> None:
        """The chart of the shift into the handover's thread; best effort (the text says it all)."""
        if not handover.shift:
            return
        try:  # lazy, inside the try: charts need matplotlib, an optional extra (gpumem[charts])
            from bot.render.chart_shift import shift_chart

            png = shift_chart(handover.shift, handover.since, handover.until, lang)
        except Exception as e:
            log_crash(log, "handover: drawing the shift chart failed", e)
            return
        if png:
            self.poster.upload(channel, ts, "gpumem-shift.png", png, Catalog.load(lang).t("slack.upload.shift_chart"))

    def post_review(self, channel: str, lang: str, reminder: Any) -> str:
        """Post a post-change review reminder (`bot.service.reviews.ReviewReminder`) into
        `channel`, its stop-gap checked against the live object first. Returns the message ts;
        raises when it could not be posted (the scheduler records the failure)."""
        if self.store is not None:
            with self.store.use() as store:
                reminder = confirm(store, reminder, self.read_object, datetime.now(UTC))
        ts, error = self.poster.post_or_error(channel, H.review_message(reminder, lang),
                                              meta=job_metadata(new_job_id(), "review"))
        if ts is None:
            raise RuntimeError(f"posting the review reminder failed: {error}")
        return ts

    # ------------------------------------------------------------------ the fleet view

    def _run_fleet(self, job: Job, finish: _Finish) -> None:
        """`/gpumem fleet`: the ranked services posted in the channel, the headroom chart in its
        thread; a failure only to the one who asked. Each query is bounded by the Prometheus
        client's timeout (they run in parallel), so the job is too."""
        cat = Catalog.load(job.lang)
        args = job.command.request
        try:
            if self.fleet_reader is None:
                raise RuntimeError("no Prometheus configured for the fleet view")

            outcome = self.fleet_reader(tuple(getattr(args, "namespace", None) or ()),
                                        getattr(args, "engine", None), getattr(args, "top", None),
                                        view_time(getattr(args, "at", None), datetime.now(UTC)))
        except Exception as e:
            error_id = log_crash(log, "fleet in %s failed", e, job.channel)
            if finish.take():
                self._tell(job, cat.t("slack.error.internal", error_id=error_id))
                self.metrics.command("fleet", "error", self.clock() - job.accepted_at)
            return
        if not finish.take():
            log.warning("fleet: its answer arrived after the shutdown interrupted it and was dropped")
            return
        if outcome.nothing_read:
            reason = "; ".join(f"{m.query}: {m.kind}" for m in outcome.missing)
            self._tell(job, cat.t("slack.error.fleet_unread", reason=reason))
            self.metrics.command("fleet", "error", self.clock() - job.accepted_at)
            return
        ts, error = self.poster.post_or_error(job.channel, F.fleet_message(outcome, job.lang, job.user),
                                              meta=job.meta("fleet"))
        if ts is None:
            self._tell(job, cat.t("slack.error.post_failed", error=error))
            self.metrics.command("fleet", "error", self.clock() - job.accepted_at)
            return
        try:  # lazy, inside the try: charts need matplotlib, an optional extra (gpumem[charts])
            from bot.render.chart_fleet import fleet_chart

            png = fleet_chart(outcome.rows, F.chart_title(outcome, job.lang), job.lang)
        except Exception as e:  # the ranking is posted; a chart that cannot be drawn is logged, not fatal
            log_crash(log, "fleet: drawing the headroom chart failed", e)
            png = None
        if png:
            self.poster.upload(job.channel, ts, "gpumem-fleet-headroom.png", png, cat.t("slack.upload.fleet_chart"))
        self.metrics.command("fleet", "ok", self.clock() - job.accepted_at)

    # ------------------------------------------------------------------ CLI verbs (budget)

    def _run_verb(self, job: Job, finish: _Finish) -> None:
        """A CLI verb: its output goes to the channel; a failure only to the one who asked."""
        try:
            self._verb(job, finish)
        except Exception as e:
            error_id = log_crash(log, "%s failed", e, job.command.verb)
            if finish.take() or finish.answered:  # not when the shutdown already told the asker
                self._tell(job, Catalog.load(job.lang).t("slack.error.internal", error_id=error_id))
                self.metrics.command(job.command.verb, "error", self.clock() - job.accepted_at)

    def _verb(self, job: Job, finish: _Finish) -> None:
        verb, cat = job.command.verb, Catalog.load(job.lang)
        argv = [verb, *job.command.argv]
        if "--lang" in job.command.options and job.command.lang is None:
            argv += ["--lang", job.lang]
        if self.verb_runner is None:
            raise RuntimeError("no CLI verb runner configured")
        out = self.verb_runner(argv, job.lang)
        if not finish.take():  # interrupted by the shutdown while the worker ran
            log.warning("%s: its answer arrived after the shutdown interrupted it and was dropped", verb)
            return
        finish.answered = True
        if out.returncode == -1 and not out.timed_out:
            # the worker raised or died: what it said (an exception's class) goes to the log only
            error_id = log_crash(log, "%s: the worker ended without an answer (%s)", None, verb,
                                 out.error or "no detail")
            self._tell(job, cat.t("slack.error.internal", error_id=error_id))
            self.metrics.command(verb, "error", self.clock() - job.accepted_at)
            return
        if out.timed_out:
            self._tell(job, cat.t("slack.error.verb_timed_out", verb=verb, seconds=round(self.verb_deadline_s)))
            self.metrics.command(verb, "timeout", self.clock() - job.accepted_at)
            return
        if out.returncode == 2 or (out.returncode != 0 and not out.text.strip()):
            detail = redact((out.error or out.text).strip()[-1500:], self.secrets)
            self._tell(job, cat.t("slack.error.verb_failed", verb=verb, code=out.returncode, detail=detail))
            self.metrics.command(verb, "usage" if out.returncode == 2 else "error", self.clock() - job.accepted_at)
            return
        msg, attach = V.verb_output_message(job.lang, verb, job.command.argv, out.text, out.returncode, job.user)
        ts, error = self.poster.post_or_error(job.channel, msg, meta=job.meta("output"))
        if ts is None:
            self._tell(job, cat.t("slack.error.post_failed", error=error))
            self.metrics.command(verb, "error", self.clock() - job.accepted_at)
            return
        if attach is not None:
            self.poster.upload(job.channel, ts, f"gpumem-{verb}.txt", attach, cat.t("slack.upload.output_file"))
        self.metrics.command(verb, "ok", self.clock() - job.accepted_at)

    def _tell(self, job: Job, text: str) -> None:
        """An ephemeral note to the one who asked, through the command's response_url."""
        msg = V.note_message(text)
        try:
            if job.respond is not None:
                job.respond(response_type="ephemeral", replace_original=False, **msg)
                return
        except Exception as e:
            log.warning("respond failed: %s", type(e).__name__)
        self.poster.ephemeral(job.channel, job.user, msg)

    # ------------------------------------------------------------------ endings

    def _update_parent(self, job: Job, msg: dict[str, Any]) -> bool:
        """Edit the job's parent; under an alert's head when an alert started it (`bot.slack.alerts`)."""
        if job.alert is None:
            return self.poster.update(job.channel, str(job.parent_ts), msg, job.meta())
        return bool(job.alert.send(msg, lambda framed: self.poster.update(job.channel, str(job.parent_ts), framed,
                                                                          job.meta())))

    def _fail(self, job: Job, key: str, outcome: str, **params: Any) -> None:
        msg = R.failed_message(job.lang, job.command.verb, job.target, key, job.user, **params)
        if job.parent_ts is None:
            self._tell(job, msg["text"])
        elif not self._update_parent(job, msg):
            log.error("%s %s: could not report its failure (%s) in the channel", job.command.verb, job.target, key)
        self.metrics.command(job.command.verb, outcome, self.clock() - job.accepted_at)
