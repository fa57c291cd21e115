"""The shift handover: what happened since the channel's last handover, what is still in place,
and what to watch next, per service in the runbook's handover template.

Everything comes from the store (triages, plans and their audit, notes), so a handover can be
given with no cluster at all; what needs one says so:
- a temporary measure (a stop-gap flag or replica change from an applied plan not rolled back)
  is `confirmed` against the live object when a reader is given, else `unconfirmed`;
- a change another manager put back during its watch (a plan `reverted`: a controller, Argo
  CD's self-heal) is listed with who and when, as the watch read them from managedFields, to
  be folded into the source of truth;
- the Prometheus state of the watched services (KV cache usage, queue, preemptions, OOM kills
  and restarts over the shift) is read with a constant number of queries (`PROM_QUERIES`) for
  all of them at once, and their KV usage over the shift (the chart) with one range query. The
  watched services are the channel's `watch:` list in the config, else every service the shift
  touched (triaged, changed, noted).

The template says "unknown" (its `unknown` item) wherever nothing stored tells.

Nothing here is worded: what to watch, the template's fields, a stop-gap's review and an alert
group's outcomes are keys and values (`Worded`), which `bot.render.handover` says in the
channel's language (and in English for the JSON).
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.grammar.requests import HandoverRequest
from bot.service.connections import Endpoint, endpoint, kube_api, prometheus_client
from bot.service.deps import Deps
from bot.service.records import open_store
from bot.store.alerts import AlertLog, AlertRecord
from bot.store.db import Store, StoredPlan
from bot.store.notes import HandoverRecord, Journal, Note, TriageRecord
from collectors.parsers.flags import server_config_from_container
from collectors.parsers.kube_objects import workload_from_object
from collectors.prometheus import promql
from collectors.prometheus.client import PrometheusError
from runbooks.launch.argv import canonical_flag
from runbooks.model.changes import Scale, SetArg
from runbooks.model.errors import UsageError
from runbooks.model.evidence import ServerConfig
from runbooks.model.phrases import Phrase, phrase_json

#: the default window when a channel has no earlier handover and no --since is given
DEFAULT_WINDOW = timedelta(hours=12)
#: flags whose lowering is a stop-gap that needs a review (restore, or make it permanent)
STOPGAP_FLAGS = ("max-num-seqs", "max-model-len", "max_num_seqs", "max_model_len", "max-running-requests",
                 "max-total-tokens", "max-batch-total-tokens", "context-length")
#: plan states reported as changes, and what a handover calls them
log = logging.getLogger("gpumem.handover")

CHANGE_STATES = ("applied", "watched", "rolled_back", "failed", "expired", "proposed", "approved", "rejected",
                 "reverted")
#: the review a stop-gap needs (a key under handover.review): restore it or make it permanent;
#: a stop-gap another manager reverted is folded into its source of truth instead
REVIEW_RESTORE = "restore_or_permanent"
REVIEW_FOLD = "fold_into_source"
#: the runbook's handover template, field by field (`ServiceTemplate.fields`)
TEMPLATE_FIELDS = ("model_precision", "pool", "oom_rejects", "request_profile", "layer", "flags_changed",
                   "pools_split", "rollback_needed", "temporary_review")

#: one thing to say: a catalog key (under handover.watch_item or handover.tpl) and its values
Worded = tuple[str, dict[str, Any]]

#: Prometheus reads for all services of a handover at once: name -> what it measures
PROM_QUERIES = ("kv_usage_peak", "kv_usage_now", "queue_peak", "queue_now", "preemptions", "oom_kills", "restarts")
#: points per service in the shift chart (the range query's step is the window over this)
SHIFT_POINTS = 120


@dataclass(frozen=True)
class Incident:
    at: datetime
    target: str | None
    verdict: str | None
    priority: str | None
    actor: str
    channel: str | None


@dataclass(frozen=True)
class ChangeItem:
    plan: str
    target: str
    state: str
    action: str
    changes: tuple[str, ...]
    requested_by: str
    approvers: tuple[str, ...]
    at: datetime
    #: the changes as plans store them (`Change.to_stored`), for the renderers to word per
    #: language; `changes` is their English notation
    diffs: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class TemporaryMeasure:
    plan: str
    target: str
    #: "max-num-seqs" or "replicas"
    what: str
    old: Any
    value: Any
    since: datetime
    age_s: float
    #: "confirmed" (the live object still has it), "changed" (it does not), "unconfirmed" (no cluster read)
    live: str
    live_value: Any = None
    #: the review it needs: `REVIEW_RESTORE` or `REVIEW_FOLD` (a key under handover.review)
    review: str = REVIEW_RESTORE


@dataclass(frozen=True)
class DriftItem:
    """A stop-gap written to a GitOps-managed object (`remediation.stopgap_on_gitops`) and still
    applied: the live object differs from its source of truth until the change is folded back
    (or the next sync reverts it)."""

    plan: str
    target: str
    #: who manages it, as the audit recorded them: {kind, name, namespace, owner_kind} ("argocd", "llm-serving")
    managers: tuple[dict[str, Any], ...]
    changes: tuple[str, ...]
    at: datetime
    state: str
    #: the plan's changes as stored, to word per language (`ChangeItem.diffs`)
    diffs: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RevertItem:
    """A plan whose change another manager put back during its watch (state `reverted`): the
    object is back to what its source of truth says, so the change holds only once it is folded
    into it (or planned where it is declared)."""

    plan: str
    target: str
    changes: tuple[str, ...]
    #: who put it back, from managedFields (the first reverted field's); None: not recorded
    manager: str | None
    #: when that manager wrote (RFC 3339, from managedFields); None: not recorded
    at: str | None
    #: when the watch saw it (RFC 3339)
    seen_at: str
    #: the fields as the watch saw them: path, before, gpumem, now, manager, operation, at, seen_at, put_back
    fields: tuple[dict[str, Any], ...] = ()
    #: the plan's changes as stored, to word per language (`ChangeItem.diffs`)
    diffs: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class AlertItem:
    """The alerts of one name on one target in the window, as received from Alertmanager."""

    alertname: str
    target: str | None
    severity: str | None
    count: int
    firing: int
    resolved: int
    first_at: datetime
    last_at: datetime
    #: what became of them, by how many, the most first: (("duplicate", 12), ("joined", 4), ("triaged", 1))
    outcomes: tuple[tuple[str, int], ...]
    #: the thread of the triage they started or joined (the newest), if any
    thread_ts: str | None = None
    channel: str | None = None


@dataclass(frozen=True)
class ServiceState:
    """One service's Prometheus readings over the shift (None: no series)."""

    target: str
    kv_usage_peak: float | None = None
    kv_usage_now: float | None = None
    queue_peak: float | None = None
    queue_now: float | None = None
    #: requests put back for lack of KV cache over the shift, in `eviction`'s engine word
    preemptions: float | None = None
    oom_kills: float | None = None
    #: container restarts over the shift, for any reason
    restarts: float | None = None
    #: the engine's word for what `preemptions` counts (`runbooks.catalogs.engine_metrics.eviction_term`:
    #: "preemption" vLLM, "retraction" SGLang, "none" TGI, which never does it); None: not known
    eviction: str | None = None

    @property
    def headroom(self) -> float | None:
        """The memory left at the shift's peak: the KV cache the engines had free at their fullest
        (the GPU memory itself is claimed at start-up by vLLM, SGLang and TGI)."""
        return None if self.kv_usage_peak is None else max(0.0, 1.0 - self.kv_usage_peak)

    @property
    def trouble(self) -> tuple:
        """Sort key: closest to trouble first (OOM kills, then preemptions, KV usage, queue, restarts)."""
        return (-(self.oom_kills or 0), -(self.preemptions or 0), -(self.kv_usage_peak or 0), -(self.queue_peak or 0),
                -(self.restarts or 0))


@dataclass(frozen=True)
class ShiftSeries:
    """One watched service's KV cache usage over the shift (the most used engine), for the chart."""

    target: str
    #: (time, usage 0-1), in time order
    points: tuple[tuple[datetime, float], ...]


@dataclass(frozen=True)
class ServiceTemplate:
    """The runbook's handover template for one service: each of `TEMPLATE_FIELDS` as its items
    (catalog key under handover.tpl, values); `unknown` where nothing stored tells."""

    target: str
    fields: tuple[tuple[str, tuple[Worded, ...]], ...] = ()
    last_triage: datetime | None = None

    def field(self, name: str) -> tuple[Worded, ...]:
        """One field's items (`(("unknown", {}),)` when the template has none for it)."""
        return dict(self.fields).get(name, (("unknown", {}),))


@dataclass(frozen=True)
class Handover:
    channel: str | None
    since: datetime
    until: datetime
    #: where `since` came from: "previous" (the channel's last handover), "since" (asked), "default"
    since_from: str
    incidents: tuple[Incident, ...] = ()
    changes: tuple[ChangeItem, ...] = ()
    temporary: tuple[TemporaryMeasure, ...] = ()
    notes: tuple[Note, ...] = ()
    #: what the next shift should look at first: (catalog key under handover.watch_item, values)
    watch_items: tuple[Worded, ...] = ()
    services: tuple[ServiceTemplate, ...] = ()
    #: None: no Prometheus configured; () configured but nothing read
    state: tuple[ServiceState, ...] | None = None
    #: why the services' state could not be read: Prometheus' reason as a phrase, else the text
    state_issue: Phrase | str | None = None
    late: bool = False
    #: Alertmanager alerts received in the window, grouped by name and target (newest first)
    alerts: tuple[AlertItem, ...] = ()
    #: the channel's configured watch list (empty: the services the shift touched are watched)
    watched: tuple[str, ...] = ()
    #: KV usage over the shift per watched service, for the chart (empty: no Prometheus, or nothing read)
    shift: tuple[ShiftSeries, ...] = ()
    #: stop-gaps on GitOps-managed objects still applied: drift to fold back into the source of truth
    drift: tuple[DriftItem, ...] = ()
    #: changes another manager put back during their watch, in the window: fold them into the source of truth
    reverted: tuple[RevertItem, ...] = ()

    def to_record(self) -> dict[str, Any]:
        """The handover as data, for the store (`Journal.add_handover`): its values, and what to
        watch and the template as keys and values (`bot.render.handover.handover_json` words
        them for `--json`). Earlier records held the English lines instead; nothing reads a
        record back but its window."""
        def conv(value: Any) -> Any:
            if isinstance(value, datetime):
                return value.isoformat()
            if isinstance(value, dict):
                return {k: conv(v) for k, v in value.items()}
            if isinstance(value, list | tuple):
                return [conv(v) for v in value]
            return value

        doc = {
            "channel": self.channel, "since": self.since, "until": self.until, "since_from": self.since_from,
            "late": self.late,
            "incidents": [asdict(i) for i in self.incidents],
            "changes": [asdict(c) for c in self.changes],
            "temporary": [asdict(t) for t in self.temporary],
            "notes": [{"id": n.id, "at": n.at, "author": n.author, "channel": n.channel, "target": n.target,
                       "text": n.text} for n in self.notes],
            "watch_items": [{"key": k, "values": v} for k, v in self.watch_items],
            "services": [{"target": t.target, "last_triage": t.last_triage,
                          "fields": {name: [{"key": k, "values": v} for k, v in items] for name, items in t.fields}}
                         for t in self.services],
            "state": None if self.state is None else [asdict(s) for s in self.state],
            "state_issue": phrase_json(self.state_issue),
            "alerts": [asdict(a) for a in self.alerts],
            "watched": list(self.watched),
            "drift": [asdict(d) for d in self.drift],
            "reverted": [asdict(r) for r in self.reverted],
        }
        return conv(doc)


# ----------------------------------------------------------------------------- building

#: reads one object live: (kind, namespace, name) -> the object as the API server returns it
ObjectReader = Callable[[str, str, str], dict[str, Any]]
#: reads the Prometheus state of services: (targets, since, until) -> states
StateReader = Callable[[list[str], datetime, datetime], list[ServiceState]]
#: reads the services' KV usage over the shift: (targets, since, until) -> series
SeriesReader = Callable[[list[str], datetime, datetime], list[ShiftSeries]]


def window_start(journal: Journal, channel: str | None, since: datetime | timedelta | None,
                 now: datetime) -> tuple[datetime, str]:
    """Where the handover starts: --since when given, else the channel's last handover's end,
    else `DEFAULT_WINDOW` ago."""
    if isinstance(since, timedelta):
        return now - since, "since"
    if isinstance(since, datetime):
        return since if since.tzinfo else since.replace(tzinfo=UTC), "since"
    last: HandoverRecord | None = journal.last_handover(channel)
    if last is not None and last.until < now:
        return last.until, "previous"
    return now - DEFAULT_WINDOW, "default"


def build_handover(store: Store, *, channel: str | None = None, since: datetime | timedelta | None = None,
                   now: datetime | None = None, read_object: ObjectReader | None = None,
                   read_state: StateReader | None = None, late: bool = False, watch: tuple[str, ...] = (),
                   read_series: SeriesReader | None = None) -> Handover:
    """The handover for `channel` up to `now` (see the module docstring). `watch`: the channel's
    watched services (their state and chart; empty: every service the shift touched)."""
    now = now or datetime.now(UTC)
    journal = Journal(store)
    start, since_from = window_start(journal, channel, since, now)
    if start >= now:
        raise UsageError("handover_empty_window", since=start.isoformat(), until=now.isoformat())
    triages = journal.triages(since=start, until=now)
    incidents = tuple(Incident(t.at, f"{t.namespace}/{t.name}" if t.name else t.summary.get("target"), t.verdict,
                               t.priority, t.actor, t.channel) for t in triages)
    plans = store.plans(limit=1000)
    applied_at = _applied_times(store)
    changes = tuple(_change(p) for p in sorted(plans, key=lambda p: p.updated_at)
                    if p.state in CHANGE_STATES and (p.updated_at >= start or p.state in ("proposed", "approved"))
                    and p.updated_at <= now)
    temporary = tuple(sorted((m for p in plans if p.state in ("applied", "watched")
                              for m in _temporary(p, applied_at.get(p.plan.id, p.updated_at), now, read_object)),
                             key=lambda m: (m.since, m.plan)))
    notes = tuple(journal.notes(since=start, until=now, channel=channel))
    targets = sorted({i.target for i in incidents if i.target and "/" in i.target}
                     | {c.target for c in changes} | {m.target for m in temporary}
                     | {n.target for n in notes if n.target})
    watched = list(dict.fromkeys(watch)) or targets
    services = tuple(_template(t, journal, plans, temporary, now) for t in sorted({*targets, *watched}))
    state: tuple[ServiceState, ...] | None = None
    issue = None
    if read_state is not None and watched:
        try:
            state = tuple(sorted(read_state(watched, start, now), key=lambda s: s.trouble))
        except Exception as e:  # a Prometheus that cannot answer leaves the rest of the handover
            state = ()
            issue = e.message if isinstance(e, PrometheusError) else Phrase("read.quoted", {"text": str(e)[:300]})
    shift: tuple[ShiftSeries, ...] = ()
    if read_series is not None and watched and not issue:
        try:
            shift = tuple(s for s in read_series(watched, start, now) if s.points)
        except Exception as e:  # the chart is a picture of the state above: its loss is logged only
            log.warning("handover: the shift chart's series could not be read: %s", e)
    alerts = alert_items(store, start, now, channel)
    reverted = revert_items(store, plans, start, now)
    return Handover(channel, start, now, since_from, incidents, changes, temporary, notes,
                    _watch(changes, temporary, state or (), incidents, alerts, reverted), services, state, issue,
                    late, alerts, tuple(dict.fromkeys(watch)), shift, drift_items(store, plans), reverted)


#: the audit event `bot.service.remediate` records for a stop-gap on a GitOps-managed object
STOPGAP_EVENT = "stopgap_on_gitops"


def drift_items(store: Store, plans: list[StoredPlan]) -> tuple[DriftItem, ...]:
    """The stop-gaps on GitOps-managed objects whose plans are still applied or watched (not
    rolled back or failed), oldest first, whenever they were written: drift outlives a shift."""
    states = {p.plan.id: p for p in plans}
    out = []
    rows = store.db.execute("SELECT at, detail FROM audit WHERE event = ? ORDER BY id", [STOPGAP_EVENT]).fetchall()
    for at, raw in rows:
        detail = json.loads(raw or "{}")
        stored = states.get(str(detail.get("plan")))
        if stored is None or stored.state not in ("applied", "watched"):
            continue
        managers = tuple({k: m.get(k) for k in ("kind", "name", "namespace", "owner_kind")}
                         for m in detail.get("managers") or [] if isinstance(m, dict))
        out.append(DriftItem(stored.plan.id, _target(stored), managers, tuple(str(c) for c in detail.get("changes") or []),
                             datetime.fromisoformat(at), stored.state,
                             tuple(c.to_stored() for c in stored.plan.changes)))
    return tuple(out)


def reverted_detail(store: Store, plan_id: str) -> tuple[datetime, list[dict[str, Any]]] | None:
    """When a plan became `reverted` and the fields its watch found put back (the audit row
    `bot.service.remediate.watch_after` wrote); None when it never did."""
    row = store.db.execute("SELECT at, detail FROM audit WHERE plan_id = ? AND to_state = 'reverted' ORDER BY id DESC "
                           "LIMIT 1", [plan_id]).fetchone()
    if row is None:
        return None
    fields = (json.loads(row[1] or "{}") or {}).get("reverted") or []
    return datetime.fromisoformat(row[0]), [f for f in fields if isinstance(f, dict)]


def revert_item(p: StoredPlan, fields: list[dict[str, Any]], at: datetime) -> RevertItem:
    """The item of a reverted plan: who put it back and when (the first field a manager is recorded for)."""
    named = next((f for f in fields if f.get("manager")), fields[0] if fields else {})
    return RevertItem(p.plan.id, _target(p), tuple(c.describe() for c in p.plan.changes),
                      named.get("manager") or None, named.get("at") or None,
                      str(named.get("seen_at") or at.isoformat()), tuple(fields),
                      tuple(c.to_stored() for c in p.plan.changes))


def revert_items(store: Store, plans: list[StoredPlan], since: datetime, until: datetime) -> tuple[RevertItem, ...]:
    """The plans reverted by another manager in [since, until], oldest first."""
    out = []
    for p in plans:
        if p.state != "reverted":
            continue
        found = reverted_detail(store, p.plan.id)
        if found is not None and since <= found[0] <= until:
            out.append((found[0], revert_item(p, found[1], found[0])))
    return tuple(item for _at, item in sorted(out, key=lambda pair: (pair[0], pair[1].plan)))


def alert_items(store: Store, since: datetime, until: datetime, channel: str | None) -> tuple[AlertItem, ...]:
    """The window's alerts (the channel's and the unrouted ones), one item per name and target."""
    groups: dict[tuple[str, str | None], list[AlertRecord]] = {}
    for a in AlertLog(store).alerts(since=since, until=until, channel=channel):
        groups.setdefault((a.alertname or "?", a.target), []).append(a)
    items = []
    for (name, target), rows in groups.items():
        outcomes: dict[str, int] = {}
        for r in rows:
            outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
        threaded = [r for r in rows if r.thread_ts]
        items.append(AlertItem(
            alertname=name, target=target, severity=next((r.severity for r in reversed(rows) if r.severity), None),
            count=len(rows), firing=sum(r.status == "firing" for r in rows),
            resolved=sum(r.status == "resolved" for r in rows), first_at=rows[0].at, last_at=rows[-1].at,
            outcomes=tuple(sorted(outcomes.items(), key=lambda kv: (-kv[1], kv[0]))),
            thread_ts=threaded[-1].thread_ts if threaded else None,
            channel=threaded[-1].channel if threaded else rows[-1].channel))
    return tuple(sorted(items, key=lambda i: (i.last_at, i.count), reverse=True))


def _applied_times(store: Store) -> dict[str, datetime]:
    """plan id -> when it was applied (its `applied` audit row)."""
    rows = store.db.execute("SELECT plan_id, MIN(at) FROM audit WHERE to_state = 'applied' GROUP BY plan_id").fetchall()
    return {r[0]: datetime.fromisoformat(r[1]) for r in rows}


def _target(p: StoredPlan) -> str:
    w = p.plan.workload or p.plan.target  # an HPA plan is about the workload the HPA scales
    return f"{w.namespace}/{w.name}"


def _change(p: StoredPlan) -> ChangeItem:
    return ChangeItem(p.plan.id, _target(p), p.state, p.plan.action_id, tuple(c.describe() for c in p.plan.changes),
                      p.plan.requested_by, p.approvals, p.updated_at, tuple(c.to_stored() for c in p.plan.changes))


def _norm(flag: str | None) -> str:
    return (flag or "").replace("_", "-")


def _num(value: Any) -> float | None:
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _temporary(p: StoredPlan, since: datetime, now: datetime, read_object: ObjectReader | None) -> list[TemporaryMeasure]:
    """The stop-gaps in an applied plan: a lowered (or newly capped) concurrency or length flag,
    a raised replica count."""
    found = []
    obj: dict[str, Any] | None = None
    read_failed = read_object is None
    for c in p.plan.changes:
        if isinstance(c, SetArg) and _norm(c.flag) in {_norm(f) for f in STOPGAP_FLAGS}:
            old, new = _num(c.old), _num(c.new)
            if new is None or (old is not None and new >= old):
                continue
            what = _norm(c.flag)
        elif isinstance(c, Scale) and c.hpa_field in (None, "minReplicas") and c.new is not None and (
                c.old is None or c.new > c.old):
            what = "replicas"
        else:
            continue
        live, live_value = "unconfirmed", None
        if not read_failed and obj is None:
            reader = read_object
            if p.plan.target.cluster and hasattr(read_object, "for_cluster"):  # the plan's own cluster
                reader = read_object.for_cluster(p.plan.target.cluster)
            try:
                obj = reader(p.plan.target.kind, p.plan.target.namespace, p.plan.target.name)  # type: ignore[misc]
            except Exception:  # no cluster: the measure stays unconfirmed, never fails the handover
                read_failed = True
        if obj is not None:
            live_value = _live_value(obj, c)
            if live_value is not None:
                live = "confirmed" if _num(live_value) == _num(c.new) else "changed"
        found.append(TemporaryMeasure(p.plan.id, _target(p), what, c.old, c.new, since, (now - since).total_seconds(),
                                      live, live_value))
    return found


def _live_value(obj: dict[str, Any], change: SetArg | Scale) -> Any:
    """The live value of what `change` set (None: not readable): the flag as the launch parser
    reads it from the object (`collectors.parsers.flags`), `change.new` itself when it holds."""
    if isinstance(change, Scale):  # the Deployment's replicas, or the HPA's minReplicas
        return (obj.get("spec") or {}).get(change.hpa_field or "replicas")
    try:
        config = _launch_config(obj, change.container)
    except Exception:  # not an engine launch this parser reads: unconfirmed
        return None
    if config is None or config.engine is None:
        return None
    value = config.flags.get(canonical_flag(config.engine, change.flag))
    if value is None:
        return None
    same = _num(value) == _num(change.new) if _num(value) is not None else str(value) == str(change.new)
    return change.new if same else value


def _launch_config(obj: dict[str, Any], container: str | None) -> ServerConfig | None:
    """The server flags of the object's `container`, else of the server container triage picks."""
    if container is None:
        return workload_from_object(obj, "kube:live")[1]
    pod = obj["spec"]["template"]["spec"]
    spec = next(c for c in pod["containers"] if c.get("name") == container)
    return server_config_from_container(spec, pod, "kube:live")


def _template(target: str, journal: Journal, plans: list[StoredPlan], temporary: tuple[TemporaryMeasure, ...],
              now: datetime) -> ServiceTemplate:
    """The template for one service, each field as (catalog key under handover.tpl, values)."""
    namespace, name = target.split("/", 1)
    last: TriageRecord | None = journal.last_triage(namespace, name, until=now)
    mine = [p for p in plans if _target(p) == target]
    applied = sorted((p for p in mine if p.state in ("applied", "watched", "failed")), key=lambda p: p.plan.created_at)
    changed = sorted((p for p in mine if p.state in ("applied", "watched", "failed", "reverted")),
                     key=lambda p: p.plan.created_at)
    reverted = [p for p in changed if p.state == "reverted"]
    split = any(p.plan.action_id == "split_pools" for p in applied)
    temps = [m for m in temporary if m.target == target]
    failed = [p for p in mine if p.state == "failed"]
    s = last.summary if last else {}
    model, precision = s.get("model"), s.get("precision")
    engine = s.get("engine")
    pool = {"engine": engine, "version": s.get("engine_version") or None, "gpu": s.get("gpu") or None}
    oom, rejects = s.get("oom"), s.get("rejects")
    prof = s.get("profile")
    unknown: tuple[Worded, ...] = (("unknown", {}),)
    if failed:
        rollback: tuple[Worded, ...] = (("rollback_failed", {"plans": [p.plan.id for p in failed]}),)
    elif temps:
        rollback = (("rollback_stopgap", {"items": [{"plan": m.plan, "what": m.what} for m in temps]}),)
    elif applied:
        rollback = (("rollback_no_stopgaps", {}),)
    elif reverted:
        rollback = (("rollback_reverted", {"plans": [p.plan.id for p in reverted]}),)
    else:
        rollback = (("rollback_nothing", {}),) if mine else unknown
    fields: dict[str, tuple[Worded, ...]] = {
        "model_precision": (("model_precision", {"model": model, "precision": precision}),)
        if model or precision else unknown,
        "pool": (("pool", pool),) if engine or pool["gpu"] else unknown,
        "oom_rejects": unknown if oom is None and rejects is None
        else (("oom_rejects", {"oom": bool(oom), "rejects": bool(rejects)}),),
        "request_profile": (("request_profile", {
            "p50": _tok(prof.get("p50_input_tokens")), "p95": _tok(prof.get("p95_input_tokens")),
            "share": prof.get("long_share"), "estimated": bool(prof.get("estimated"))}),) if prof else unknown,
        "layer": (("cause", {"cause": s.get("verdict")}),) if s.get("verdict") else unknown,
        "flags_changed": tuple(("flag", {"change": c.describe(), "diff": c.to_stored(), "plan": p.plan.id,
                                         "state": p.state})
                               for p in changed for c in p.plan.changes) or (("none", {}),),
        "pools_split": (("split" if split else ("not_split" if applied else "unknown"), {}),),
        "rollback_needed": rollback,
        "temporary_review": tuple(("review", {"what": m.what, "value": m.value, "at": m.since, "review": m.review,
                                              "live": m.live, "live_value": m.live_value})
                                  for m in temps) or (("none_in_place", {}),),
    }
    return ServiceTemplate(target=target, fields=tuple((f, fields[f]) for f in TEMPLATE_FIELDS),
                           last_triage=last.at if last else None)


def _tok(value: Any) -> int | None:
    return None if value is None else round(float(value))


def _watch(changes: tuple[ChangeItem, ...], temporary: tuple[TemporaryMeasure, ...],
           state: tuple[ServiceState, ...], incidents: tuple[Incident, ...],
           alerts: tuple[AlertItem, ...] = (), reverted: tuple[RevertItem, ...] = ()) -> tuple[Worded, ...]:
    """What the next shift should look at first, each as (catalog key under handover.watch_item,
    values), without repeats: reverted changes, plans waiting or failed, stop-gaps, OOM kills or
    a KV cache above 90%, alerts still firing, the last three high-priority incidents."""
    watch: list[Worded] = []
    for r in reverted:  # first: the change the shift believes in is not on the cluster
        watch.append(("reverted", {"target": r.target, "changes": list(r.changes), "plan": r.plan,
                                   "manager": r.manager, "at": r.at, "seen_at": r.seen_at}))
    for c in changes:
        v = {"plan": c.plan, "target": c.target, "changes": list(c.changes)}
        if c.state in ("proposed", "approved"):
            watch.append(("awaits_apply" if c.state == "approved" else "awaits_approval", v))
        elif c.state == "failed":
            watch.append(("failed", v))
    for m in temporary:
        watch.append(("stopgap", {"target": m.target, "what": m.what, "value": m.value, "hours": m.age_s / 3600,
                                  "live": m.live if m.live in ("confirmed", "changed") else "unconfirmed",
                                  "live_value": m.live_value, "review": m.review}))
    for s in state:
        if s.oom_kills:
            watch.append(("oom", {"target": s.target, "count": round(s.oom_kills)}))
        elif s.kv_usage_peak is not None and s.kv_usage_peak >= 0.9:
            watch.append(("kv_peak", {"target": s.target, "usage": s.kv_usage_peak}))
    for a in alerts:
        if a.firing and not a.resolved and a.target:
            watch.append(("alert", {"target": a.target, "alertname": a.alertname, "count": a.firing}))
    open_high = [i for i in incidents if i.priority in ("highest", "high")]
    for i in open_high[-3:]:
        watch.append(("incident", {"target": i.target, "cause": i.verdict, "priority": i.priority, "at": i.at}))
    seen: dict[str, Worded] = {}
    for key, values in watch:
        seen.setdefault(json.dumps([key, values], sort_keys=True, default=str), (key, values))
    return tuple(seen.values())


# ----------------------------------------------------------------------------- Prometheus


def prometheus_state(client: Any, targets: list[str], since: datetime, until: datetime) -> list[ServiceState]:
    """The services' state over [since, until] in `len(PROM_QUERIES)` instant queries, however
    many services there are. `client` is a `collectors.prometheus.client.PrometheusClient`."""
    pairs, sel = promql.service_selector(targets)
    queries = promql.service_state_queries(sel, (until - since).total_seconds())
    values: dict[tuple[str, str], dict[str, float]] = {p: {} for p in pairs}
    evictions: dict[tuple[str, str], list[Any]] = {p: [] for p in pairs}
    for key in PROM_QUERIES:
        result = client.query(queries[key], at=until)
        for series in result.series:
            where = (series.labels.get("namespace", ""), series.labels.get("deployment", ""))
            if key == "preemptions" and where in evictions:
                evictions[where].append(series)
            elif where in values and series.points:
                values[where][key] = series.points[-1][1]
    for where, found in evictions.items():
        reading = promql.eviction_reading(found)
        if reading is not None:
            values[where]["preemptions"], values[where]["eviction"] = reading
    return [ServiceState(f"{ns}/{name}", **values[(ns, name)]) for ns, name in pairs]


def prometheus_series(client: Any, targets: list[str], since: datetime, until: datetime,
                      points: int = SHIFT_POINTS) -> list[ShiftSeries]:
    """The services' KV cache usage over [since, until] (the most used engine of each), in one
    range query of about `points` steps, for the shift chart."""
    pairs, sel = promql.service_selector(targets)
    step_s = max(15.0, (until - since).total_seconds() / points)
    result = client.query_range(promql.service_usage_query(sel), since, until, step_s)
    found: dict[tuple[str, str], tuple[tuple[datetime, float], ...]] = {}
    for series in result.series:
        where = (series.labels.get("namespace", ""), series.labels.get("deployment", ""))
        if where in set(pairs):
            found[where] = tuple((datetime.fromtimestamp(t, UTC), v) for t, v in series.points)
    return [ShiftSeries(f"{ns}/{name}", found.get((ns, name), ())) for ns, name in pairs]


def _prometheus_client(settings: Any) -> Any:
    """A client for the configured Prometheus (the top-level one, else the default cluster's); None: none."""
    prom = settings.prometheus
    if prom is None:
        cluster = settings.cluster(None)
        prom = cluster.prometheus if cluster else None
    if prom is None:
        return None
    return prometheus_client(prom)


def prometheus_reader(settings: Any) -> StateReader | None:
    """A StateReader for the configured Prometheus (None: none configured)."""
    client = _prometheus_client(settings)
    if client is None:
        return None
    return lambda targets, since, until: prometheus_state(client, targets, since, until)


def prometheus_series_reader(settings: Any) -> SeriesReader | None:
    """A SeriesReader (the shift chart's) for the configured Prometheus (None: none configured)."""
    client = _prometheus_client(settings)
    if client is None:
        return None
    return lambda targets, since, until: prometheus_series(client, targets, since, until)


def _objects(api: Any, timeout_s: float | None = None) -> Any:
    """A `collectors.kube.objects.ObjectReader` on `api`, imported here: with it comes the
    Kubernetes client (0.3-0.5 s, -X importtime), which a handover or a note that reads no
    cluster does not pay."""
    from collectors.kube.objects import ObjectReader

    return ObjectReader(api) if timeout_s is None else ObjectReader(api, timeout_s=timeout_s)


def kube_reader(kubeconfig: str | None, context: str | None) -> ObjectReader:
    """An ObjectReader for the cluster, whose client is made at its first read: a handover with
    no stop-gap to confirm makes none. A client that cannot be made (no kubeconfig, no in-cluster
    account) raises on the read, which leaves the stop-gap unconfirmed."""
    made: list[ObjectReader] = []

    def read(kind: str, namespace: str, name: str) -> dict[str, Any]:
        if not made:
            made.append(_objects(kube_api(Endpoint(kubeconfig, context))).read)
        return made[0](kind, namespace, name)

    return read


def live_object_reader(settings: Any, timeout_s: float = 5.0) -> ObjectReader | None:
    """The bot's ObjectReader for stop-gaps: the cluster each plan names (its kubeconfig and
    context from the config; `context: in-cluster` is the pod's service account), the default
    cluster for plans that name none; each client made on first use. None when the config names
    no cluster (the stop-gaps stay unconfirmed). A plan on a cluster the config does not know, or
    a client that cannot be made, raises on the read, which leaves the stop-gap unconfirmed."""
    if not settings.clusters:
        return None
    return ClusterReaders(settings, timeout_s)


class ClusterReaders:
    """Reads objects live, one client per configured cluster (see `live_object_reader`).
    Called as an ObjectReader it reads the default cluster; `for_cluster(name)` gives the
    reader of the cluster a plan names."""

    def __init__(self, settings: Any, timeout_s: float):
        self.settings = settings
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._made: dict[str, ObjectReader] = {}

    def __call__(self, kind: str, namespace: str, name: str) -> dict[str, Any]:
        return self.for_cluster(None)(kind, namespace, name)

    def for_cluster(self, wanted: str | None) -> ObjectReader:
        cluster = self.settings.cluster(wanted)

        def read(kind: str, namespace: str, name: str) -> dict[str, Any]:
            if cluster is None:
                raise LookupError(f"no cluster {wanted!r} in the config")
            return self._reader(cluster)(kind, namespace, name)

        return read

    def _reader(self, cluster: Any) -> ObjectReader:
        key = cluster.name or cluster.context
        with self._lock:
            if key not in self._made:
                api = kube_api(endpoint(self.settings, cluster.name))
                self._made[key] = _objects(api, timeout_s=self.timeout_s).read
            return self._made[key]


# ----------------------------------------------------------------------------- the CLI's use case


def cli_handover(request: HandoverRequest, deps: Deps) -> Handover:
    """`gpumem handover`: the handover --channel and --since ask for, with the configured
    Prometheus and cluster when there are (--offline: neither). Nothing is recorded: only the
    scheduler's posted handovers move a channel's window."""
    settings = deps.settings
    offline = request.offline
    read_state = None if offline else prometheus_reader(settings)
    read_object = None
    if not offline:
        cluster = settings.cluster(request.context)
        read_object = kube_reader(cluster.kubeconfig if cluster else None,
                                  request.context or (cluster.context if cluster else None))
    store = open_store(request, deps)
    try:
        watch = settings.watched(request.channel) if request.channel else ()
        return build_handover(store, channel=request.channel, since=request.since, now=deps.now(),
                              read_object=read_object,
                              read_state=read_state, watch=watch)
    finally:
        store.close()


def post_handover(store: Store, post: Callable[[Handover], Any], *, channel: str, actor: str = "gpumem",
                  slot: datetime | None = None, late: bool = False, now: datetime | None = None,
                  read_object: ObjectReader | None = None, read_state: StateReader | None = None,
                  watch: tuple[str, ...] = (), read_series: SeriesReader | None = None) -> HandoverRecord:
    """Build the channel's handover, hand it to `post` (the Slack poster, later), and record it,
    so the channel's next handover starts where this one ends."""
    handover = build_handover(store, channel=channel, now=now, read_object=read_object, read_state=read_state,
                              late=late, watch=watch, read_series=read_series)
    post(handover)
    return Journal(store).add_handover(actor, handover.to_record(), since=handover.since, until=handover.until,
                                       channel=channel, slot=slot, late=late, now=now)

