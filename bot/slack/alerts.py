"""Alertmanager's alerts as triages posted into channels: the `AlertDesk`.

POST /alertmanager (`bot.http.alertmanager`) checks a notification and hands it to the desk
(`offer`); the desk is the handler `bot.serve` gives the HTTP face.

One thread (`AlertDesk`) works through the queued notifications in order. For each alert:

- a repeat (same fingerprint, start and status within `alerts.dedupe_window_s`) is a duplicate;
- it is placed (`bot.service.alerts.place`): the workload from its labels, the cluster, the
  channel by the routes, the channel's namespace policy;
- a firing alert on a workload triaged within `alerts.triage_interval_s` joins that triage's
  thread (one reply per workload and notification, the alerts listed in it); one on a workload
  not triaged lately starts a triage through the same job path as `/gpumem triage` (progress,
  diagnosis, thread, charts), its parent topped by the alert's summary, if an alert triage is
  free (at most `alerts.max_triages` at once, and a place in the pool); the rest of a
  notification's alerts on that workload join it;
- alerts that found no free triage are named in one note per channel and notification;
- a resolved alert edits the parent of the triage it belongs to once all its alerts have
  resolved ("Resolved at ...");
- every alert is recorded in the store with what became of it (one transaction per notification).

The dedupe set, the recent triages and the alert slots live in this process; the recent
triages are also looked up in the store, so a restart does not triage a workload again within
its interval.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.grammar.slack import Command
from bot.render import slack_alerts as A
from bot.render import slack_triage as R
from bot.render.slack_alerts import AlertHead
from bot.service.alert_payload import Alert, Notification
from bot.service.alerts import Placement, alert_row, last_triaged, place, record_alerts
from bot.slack.api import job_metadata, new_job_id
from bot.slack.gate import SeenRequests
from bot.slack.work import Job
from bot.telemetry.errorid import log_crash

log = logging.getLogger("gpumem.alerts")

class AlertFrame:
    """The alert head of one triage's parent: every edit of the parent goes through `send`, so
    a resolve and a progress edit never cross (the last one sent carries the current head)."""

    def __init__(self, head: AlertHead, lang: str):
        self.head = head
        self.lang = lang
        self.last: dict[str, Any] | None = None
        self._lock = threading.Lock()

    def send(self, msg: dict[str, Any], update: Callable[[dict[str, Any]], bool]) -> bool:
        with self._lock:
            self.last = msg
            return update(A.frame(self.head, self.lang, msg))

    def first(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.last = msg
            return A.frame(self.head, self.lang, msg)

    def resolve(self, at: datetime, count: int, update: Callable[[dict[str, Any]], bool]) -> bool:
        with self._lock:
            self.head = replace(self.head, resolved_at=at, count=count)
            return update(A.frame(self.head, self.lang, self.last or {"text": "", "blocks": []}))

    def refire(self, count: int, update: Callable[[dict[str, Any]], bool]) -> bool:
        """An alert fired again on a resolved triage: the head says firing again, not resolved."""
        with self._lock:
            self.head = replace(self.head, resolved_at=None, count=count)
            return update(A.frame(self.head, self.lang, self.last or {"text": "", "blocks": []}))


@dataclass
class Incident:
    """A triage started by alerts: where its parent is, and which alerts are behind it."""

    key: tuple[str | None, str, str]
    channel: str
    lang: str
    parent_ts: str
    at: datetime
    started: float
    frame: AlertFrame | None = None
    firing: set[str] = field(default_factory=set)
    seen: set[str] = field(default_factory=set)
    resolved: bool = False
    #: the newest endsAt of its resolved alerts (what "Resolved at" says)
    ended_at: datetime | None = None

    @property
    def target(self) -> str:
        return f"{self.key[1]}/{self.key[2]}"


@dataclass
class _BusyNote:
    ts: str
    started: float
    count: int
    targets: list[str]


class AlertDesk:
    """The queue of accepted notifications and the one thread that turns them into triages."""

    def __init__(self, settings: Any, work: Any, pool: Any, poster: Any, metrics: Any, store: Any = None,
                 stopping: Any = None, resolve_pod: Callable[[str | None, str, str], str] | None = None,
                 clock: Callable[[], float] = time.monotonic, wall: Callable[[], datetime] = lambda: datetime.now(UTC)):
        self.settings = settings
        self.config = settings.alerts
        self.work = work
        self.pool = pool
        self.poster = poster
        self.metrics = metrics
        self.store = store
        self.stopping = stopping
        self.resolve_pod = resolve_pod
        self.clock = clock
        self.wall = wall
        self.limit = self.config.max_triages or settings.workers.pool_size
        self.seen = SeenRequests(window_s=self.config.dedupe_window_s, max_keys=200_000, clock=clock)
        self._queue: deque[Notification] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._working = False
        self._slots = 0
        self._slot_lock = threading.Lock()
        self.incidents: dict[tuple[str | None, str, str], Incident] = {}
        self.by_fingerprint: dict[str, Incident] = {}
        self._busy_notes: dict[str, _BusyNote] = {}
        #: triages started, per target (tests and the log read it)
        self.started: list[str] = []
        self._thread = threading.Thread(target=self._loop, name="gpumem-alerts", daemon=True)

    # ------------------------------------------------------------------ the queue

    def start(self) -> AlertDesk:
        if self.store is None:
            log.warning("alerts are not recorded and the per-target interval does not survive a restart: "
                        "no store.path in the config")
        self._thread.start()
        return self

    def offer(self, notification: Notification) -> bool:
        """Queue a notification; False when the queue is full or the desk has stopped."""
        with self._cond:
            if self._closed or len(self._queue) >= self.config.queue_length:
                return False
            self._queue.append(notification)
            self._cond.notify()
            return True

    @property
    def closed(self) -> bool:
        return self._closed

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until every queued notification has been worked through (tests, the drain)."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self._queue or self._working:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def shutdown(self, timeout_s: float = 5.0) -> None:
        """Take no more; what is queued is recorded (outcome "shutdown") without being triaged."""
        with self._cond:
            self._closed = True
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join(timeout_s)
        if left:
            log.warning("stopping: %d queued alert notification(s) recorded, not triaged", len(left))
            rows = [alert_row(a, n.group_key, Placement("shutdown"), "shutdown", names=self.config.labels)
                    for n in left for a in n.alerts]
            self._record(rows)

    def _loop(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._closed:
                    self._cond.wait()
                if not self._queue:
                    return
                notification = self._queue.popleft()
                self._working = True
            try:
                self.handle(notification)
            except Exception as e:  # one bad notification must not stop the desk
                log_crash(log, "alert notification %s failed", e, notification.group_key[:120])
            finally:
                with self._cond:
                    self._working = False
                    self._cond.notify_all()

    # ------------------------------------------------------------------ one notification

    def handle(self, n: Notification) -> None:
        rows: list[dict[str, Any]] = []
        names = self.config.labels
        starts: dict[tuple[str | None, str, str], list[tuple[Alert, Placement]]] = {}
        joins: dict[tuple[str | None, str, str], tuple[Incident, list[tuple[Alert, Placement]]]] = {}
        busy: dict[str, list[tuple[Alert, Placement]]] = {}
        resolved: list[Incident] = []
        now = self.clock()
        self._prune(now)
        for alert in n.alerts:
            if not self.seen.first_sight([("alert", alert.fingerprint, alert.starts_at.isoformat(), alert.status)]):
                known = place(alert, self.settings, None)  # no reads for a repeat: the labels say enough
                rows.append(alert_row(alert, n.group_key, known, "duplicate", names=names, detail="seen before"))
                self._count(alert, "duplicate")
                continue
            if alert.status == "resolved":
                rows.append(self._resolved(alert, n.group_key, resolved))
                continue
            placement = place(alert, self.settings, self.resolve_pod)
            if placement.outcome != "ok" or placement.key is None:
                if placement.outcome not in ("no_target", "no_route"):
                    log.info("alert %s (%s) not triaged: %s: %s", alert.name, alert.fingerprint, placement.outcome,
                             placement.detail)
                rows.append(alert_row(alert, n.group_key, placement, placement.outcome, names=names))
                self._count(alert, placement.outcome)
                continue
            key = placement.key
            if key in starts:
                starts[key].append((alert, placement))
                continue
            incident = self._recent(key, now)
            if incident is not None:
                joins.setdefault(key, (incident, []))[1].append((alert, placement))
                continue
            if not self._take_slot():
                busy.setdefault(str(placement.channel), []).append((alert, placement))
                continue
            starts[key] = [(alert, placement)]
        for key, items in starts.items():
            rows += self._start(key, items, n.group_key, busy)
        for _key, (incident, items) in joins.items():
            rows += self._join(incident, items, n.group_key)
        for channel, items in busy.items():
            rows += self._busy(channel, items, n.group_key)
        for incident in resolved:
            self._edit_resolved(incident)
        self._record(rows)

    def _count(self, alert: Alert, outcome: str) -> None:
        self.metrics.alerts.labels(status=alert.status, outcome=outcome).inc()

    def _record(self, rows: list[dict[str, Any]]) -> None:
        if self.store is None or not rows:
            return
        try:
            with self.store.use() as store:
                record_alerts(store, rows, now=self.wall())
        except Exception as e:  # the triages are started; the record is best effort
            log_crash(log, "recording %d alert(s) failed", e, len(rows))

    # ------------------------------------------------------------------ where a target stands

    def _recent(self, key: tuple[str | None, str, str], now: float) -> Incident | None:
        """The triage of `key` within the interval: in memory, else in the store (a restart)."""
        interval = self.config.triage_interval_s
        incident = self.incidents.get(key)
        if incident is not None:
            return incident if now - incident.started < interval else None
        if self.store is None:
            return None
        wall = self.wall()
        with self.store.use() as store:
            record = last_triaged(store, key, since=wall - timedelta(seconds=interval))
        if record is None or not record.channel or not record.thread_ts:
            return None
        age = max(0.0, (wall - record.at).total_seconds())
        incident = Incident(key, record.channel, self.settings.lang_for(record.channel), record.thread_ts, record.at,
                            now - age)
        self.incidents[key] = incident
        return incident

    def _prune(self, now: float) -> None:
        keep_s = max(self.config.triage_interval_s, self.config.dedupe_window_s)
        old = [k for k, i in self.incidents.items() if now - i.started > keep_s]
        for k in old:
            gone = self.incidents.pop(k)
            for fp in gone.seen:
                if self.by_fingerprint.get(fp) is gone:
                    del self.by_fingerprint[fp]

    def _take_slot(self) -> bool:
        with self._slot_lock:
            if self._slots >= self.limit:
                return False
            self._slots += 1
            return True

    def _give_slot(self) -> None:
        with self._slot_lock:
            self._slots = max(0, self._slots - 1)

    @property
    def slots_taken(self) -> int:
        return self._slots

    # ------------------------------------------------------------------ the actions

    def _start(self, key: tuple[str | None, str, str], items: list[tuple[Alert, Placement]], group_key: str,
               busy: dict[str, list[tuple[Alert, Placement]]]) -> list[dict[str, Any]]:
        """Post the parent (the alert's head over "starting") and queue the triage job."""
        names = self.config.labels
        first, placement = items[0]
        channel = str(placement.channel)
        lang = self.settings.lang_for(channel)
        target = placement.target
        assert target is not None
        stopping = self.stopping is not None and self.stopping.is_set
        ticket = None if stopping else self.pool.reserve()
        if ticket is None:
            self._give_slot()
            busy.setdefault(channel, []).extend(items)
            return []
        head = AlertHead(first.name, first.labels.get(names.severity, ""), first.summary, str(target),
                         first.starts_at, count=len(items), cluster=placement.cluster,
                         generator_url=first.generator_url)
        frame = AlertFrame(head, lang)
        verb, target_text = "triage", str(target)
        opening = (R.queued_message(lang, verb, target_text, ticket.ahead) if ticket.queued
                   else R.starting_message(lang, verb, target_text))
        job_id = new_job_id()
        ts, error = self.poster.post_or_error(channel, frame.first(opening), meta=job_metadata(job_id, "parent"))
        if ts is None:
            self.pool.release(ticket)
            self._give_slot()
            log.warning("alert triage of %s: posting its parent in %s failed (%s)", target_text, channel, error)
            return [self._row(a, p, group_key, "post_failed", detail=f"chat.postMessage: {error}") for a, p in items]
        incident = Incident(key, channel, lang, ts, self.wall(), self.clock(), frame)
        self._track(incident, items)
        argv = (target_text, *(("--context", placement.cluster) if placement.cluster else ()))
        cmd = Command(verb="triage", argv=argv, target=target, context=placement.cluster)
        job = Job(cmd, channel, "", lang, ts, self.clock(), None, id=job_id, alert=frame)

        def run() -> None:
            try:
                self.work.run(job, was_queued=ticket.queued)
            finally:
                self._give_slot()

        def cancel() -> None:
            try:
                self.work.cancel(job)
            finally:
                self._give_slot()

        self.pool.submit(ticket, run, cancel=cancel)
        self.started.append(target_text)
        log.info("alert %s: triage of %s started in %s (%d alert(s))", first.name, target_text, channel, len(items))
        rows = [self._row(first, placement, group_key, "triaged", thread_ts=ts)]
        rows += [self._row(a, p, group_key, "joined", thread_ts=ts) for a, p in items[1:]]
        return rows

    def _track(self, incident: Incident, items: list[tuple[Alert, Placement]]) -> None:
        self.incidents[incident.key] = incident
        for alert, _ in items:
            incident.firing.add(alert.fingerprint)
            incident.seen.add(alert.fingerprint)
            self.by_fingerprint[alert.fingerprint] = incident
        incident.resolved = False

    def _join(self, incident: Incident, items: list[tuple[Alert, Placement]], group_key: str) -> list[dict[str, Any]]:
        """One thread reply under the recent triage for the alerts on its target (and its head
        back to firing when it had said resolved)."""
        was_resolved = incident.resolved
        self._track(incident, items)
        if was_resolved and incident.frame is not None and any(a.status == "firing" for a, _ in items):
            incident.frame.refire(len(incident.seen), lambda m: self.poster.update(incident.channel,
                                                                                   incident.parent_ts, m))
        next_at = incident.at + timedelta(seconds=self.config.triage_interval_s)
        msg = A.joined_message(incident.lang, incident.target, incident.at, next_at,
                               [(a.status, a.name, a.summary) for a, _ in items])
        ts = self.poster.post(incident.channel, msg, thread_ts=incident.parent_ts,
                              meta=job_metadata(new_job_id(), "alerts"))
        outcome = "joined" if ts is not None else "post_failed"
        return [self._row(a, replace(p, channel=incident.channel), group_key, outcome, thread_ts=incident.parent_ts)
                for a, p in items]

    def _busy(self, channel: str, items: list[tuple[Alert, Placement]], group_key: str) -> list[dict[str, Any]]:
        """Name the alerts that found no free triage: one note per channel and interval, edited
        as more come (a storm of notifications is one message, not one per notification)."""
        targets = list(dict.fromkeys(str(p.target) for _, p in items))
        lang = self.settings.lang_for(channel)
        note = self._busy_notes.get(channel)
        now = self.clock()
        if note is not None and now - note.started < self.config.triage_interval_s:
            note.count += len(items)
            note.targets = list(dict.fromkeys([*note.targets, *targets]))
            self.poster.update(channel, note.ts, A.busy_message(lang, note.count, self.limit, note.targets))
        else:
            ts = self.poster.post(channel, A.busy_message(lang, len(items), self.limit, targets),
                                  meta=job_metadata(new_job_id(), "alerts-busy"))
            if ts is not None:
                self._busy_notes[channel] = _BusyNote(ts, now, len(items), targets)
        log.warning("%d alert(s) for %d target(s) not triaged: the %d alert triages are taken", len(items),
                    len(targets), self.limit)
        return [self._row(a, p, group_key, "busy") for a, p in items]

    def _resolved(self, alert: Alert, group_key: str, resolved: list[Incident]) -> dict[str, Any]:
        names = self.config.labels
        incident = self.by_fingerprint.get(alert.fingerprint)
        if incident is None:
            placement = place(alert, self.settings, None)
            self._count(alert, "resolved")
            return alert_row(alert, group_key, placement, "resolved", names=names,
                             detail="no triage of this alert is known")
        incident.firing.discard(alert.fingerprint)
        ended = alert.ends_at or self.wall()
        incident.ended_at = ended if incident.ended_at is None else max(incident.ended_at, ended)
        if not incident.firing and not incident.resolved and incident not in resolved:
            resolved.append(incident)
        target = Placement("ok", None, incident.key[0], incident.channel)
        row = alert_row(alert, group_key, target, "resolved", names=names, thread_ts=incident.parent_ts)
        row.update(namespace=incident.key[1], name=incident.key[2])
        self._count(alert, "resolved")
        return row

    def _edit_resolved(self, incident: Incident) -> None:
        """Every alert behind the triage has resolved: its parent says so (a reply when the parent
        is not this process's to edit, after a restart)."""
        incident.resolved = True
        at = incident.ended_at or self.wall()
        if incident.frame is not None:
            ok = incident.frame.resolve(at, len(incident.seen), lambda m: self.poster.update(
                incident.channel, incident.parent_ts, m))
        else:
            ok = self.poster.post(incident.channel, A.resolved_reply(incident.lang, at, "", incident.target),
                                  thread_ts=incident.parent_ts) is not None
        if not ok:
            log.warning("alerts on %s resolved, but its message in %s could not be edited", incident.target,
                        incident.channel)

    def _row(self, alert: Alert, placement: Placement, group_key: str, outcome: str, thread_ts: str | None = None,
             detail: str = "") -> dict[str, Any]:
        self._count(alert, outcome)
        return alert_row(alert, group_key, placement, outcome, names=self.config.labels, thread_ts=thread_ts,
                         detail=detail)
