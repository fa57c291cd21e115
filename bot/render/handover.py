"""The shift handover and the notes as terminal text and JSON (stable keys, docs/json.md
"handover"). Everything is worded here from the handover's keys and values (the use case words
nothing): in the channel's language for the text and Slack, in English for the JSON."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.render.i18n import Catalog
from bot.render.managers import who
from bot.render.remediation import revert_words
from bot.render.wording import change_text, eviction_count
from bot.store.notes import Note

_FIELDS = ("model_precision", "pool", "oom_rejects", "request_profile", "layer", "flags_changed", "pools_split",
           "rollback_needed", "temporary_review")
#: a stop-gap's review as older handovers stored it (English), by its key now
_REVIEW_TEXT = {"restore or make permanent": "restore_or_permanent",
                "fold the change into the source of truth": "fold_into_source"}


def _hm(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") + "Z"


# ----------------------------------------------------------------------------- words shared with Slack


def cause_word(cat: Catalog, cause: str | None) -> str:
    """A cause id as its short title ("KV-cache pressure"); an id the catalogs do not know is
    shown as it is stored."""
    if not cause:
        return cat.t("handover.cause_unknown")
    return cat.t_or(f"slack.cause_short.{cause}", cause)


def priority_word(cat: Catalog, priority: str | None) -> str:
    if not priority:
        return cat.t("handover.priority_unknown")
    return cat.t_or(f"priority_level.{priority}", priority)


def state_word(cat: Catalog, state: str) -> str:
    """A plan state as words ("rolled back")."""
    return cat.t_or(f"remediate_cli.state.{state}", state)


def severity_word(cat: Catalog, severity: str | None) -> str:
    return cat.t_or(f"handover.severity.{severity}", severity) if severity else "-"


def outcomes_word(cat: Catalog, outcomes: Any) -> str:
    """An AlertItem's outcomes ((outcome, count) pairs; "triaged 1, duplicate 2" as older
    records have it) in words; an outcome the catalogs do not know is left as it is."""
    parts = []
    for name, count in _outcome_pairs(outcomes):
        key = f"handover.outcome.{name}"
        parts.append(cat.t(key, count=count) if cat.has(key) else f"{name} {count}")
    return ("、" if cat.lang == "zh" else ", ").join(parts)


def _outcome_pairs(outcomes: Any) -> list[tuple[str, int]]:
    if isinstance(outcomes, str):
        pairs = []
        for part in (p.strip() for p in outcomes.split(",") if p.strip()):
            name, _, count = part.rpartition(" ")
            if count.isdigit():
                pairs.append((name, int(count)))
        return pairs
    return [(str(name), int(count)) for name, count in outcomes or ()]


def pct_word(cat: Catalog, value: float | None) -> str:
    return cat.t("handover.not_measured") if value is None else f"{value:.0%}"


def n_word(cat: Catalog, value: float | None) -> str:
    return cat.t("handover.not_measured") if value is None else f"{value:.0f}"


def count_word(cat: Catalog, key: str, value: float | None) -> str:
    """"2 restarts", "1 restart", "restarts not measured" (en); "重启 2 次" (zh)."""
    if value is None:
        return cat.t(f"handover.count_unknown.{key}")
    return cat.t(f"handover.count.{key}", count=int(round(value)))


def review_word(cat: Catalog, review: str) -> str:
    """The review a stop-gap needs (`bot.service.handover.REVIEW_RESTORE`, `REVIEW_FOLD`) in words."""
    key = _REVIEW_TEXT.get(review, review)
    return cat.t(f"handover.review_need.{key}") if cat.has(f"handover.review_need.{key}") else str(review)


def pct(value: float) -> str:
    return f"{value:.0%}"


def clock(at: Any) -> str:
    """A time of day in UTC: "02:14Z" (a datetime, or its ISO text)."""
    if isinstance(at, str):
        try:
            at = datetime.fromisoformat(at.replace("Z", "+00:00"))
        except ValueError:
            return at
    return at.astimezone(UTC).strftime("%H:%M") + "Z"


def live_word(cat: Catalog, m: Any) -> str:
    state = m.live if m.live in ("confirmed", "changed") else "unconfirmed"
    return cat.t(f"handover.live.{state}", value=m.live_value)


def watch_item_words(cat: Catalog, key: str, values: dict[str, Any]) -> str:
    """One thing to watch (`bot.service.handover.Handover.watch_items`) in words."""
    v = dict(values)
    if isinstance(v.get("changes"), list | tuple):
        v["changes"] = "; ".join(v["changes"])
    if key == "stopgap":
        v["live"] = cat.t(f"handover.live.{v['live']}", value=v.get("live_value"))
        v["review"] = review_word(cat, v["review"])
        v["hours"] = f"{float(v['hours']):.1f}"
    elif key == "incident":
        v["cause"], v["priority"] = cause_word(cat, v["cause"]), priority_word(cat, v["priority"])
        v["at"] = clock(v["at"])
    elif key == "kv_peak":
        v["pct"] = pct(v["usage"])
    elif key == "reverted":
        v["reverted"], v["fold"] = revert_words(cat, v), cat.t("remediate_cli.revert_fold")
    return cat.t(f"handover.watch_item.{key}", v)


def watch_words(cat: Catalog, h: Any) -> list[str]:
    """What to watch next in the channel's language."""
    return [watch_item_words(cat, key, values) for key, values in h.watch_items]


def _tpl_word(cat: Catalog, key: str, values: dict[str, Any]) -> str:
    v = dict(values)
    if key == "model_precision":
        v["model"] = v.get("model") or cat.t("handover.tpl.model_unknown")
        v["precision"] = v.get("precision") or cat.t("handover.tpl.precision_unknown")
    elif key == "pool":
        engine = " ".join(str(b) for b in (v.get("engine"), v.get("version")) if b)
        v = {"pool": ("，" if cat.lang == "zh" else ", ").join(b for b in (engine, v.get("gpu")) if b)}
    elif key == "oom_rejects":
        v = {k: cat.t("handover.tpl." + ("seen" if v[k] else "not_seen")) for k in ("oom", "rejects")}
    elif key == "request_profile":
        v["estimated"] = cat.t("handover.tpl.estimated") if v.get("estimated") else ""
        v["share"] = cat.t("handover.not_measured") if v.get("share") is None else pct(v["share"])
        for k in ("p50", "p95"):
            v[k] = cat.t("handover.not_measured") if v.get(k) is None else v[k]
    elif key == "cause":
        v["cause"] = cause_word(cat, v.get("cause"))
    elif key == "flag":
        v["state"] = state_word(cat, v["state"])
        if isinstance(v.get("diff"), dict):
            v["change"] = change_text(cat, v["diff"])
    elif key in ("rollback_failed", "rollback_reverted"):
        v["plans"] = cat.join(v["plans"])
    elif key == "rollback_stopgap":
        v["items"] = cat.join(cat.t("handover.tpl.stopgap_item", i) for i in v["items"])
    elif key == "review":
        v["review"], v["live"] = review_word(cat, v["review"]), live_word(cat, _Live(v.get("live"), v.get("live_value")))
        v["at"] = clock(v["at"])
    return cat.t(f"handover.tpl.{key}", v)


class _Live:
    def __init__(self, live: Any, live_value: Any):
        self.live, self.live_value = live, live_value


def service_fields(cat: Catalog, h: Any, s: Any) -> list[tuple[str, str]]:
    """One service's template (`bot.service.handover.ServiceTemplate`) as (label, value) pairs."""
    return [(cat.t("handover.field." + key), ("；" if cat.lang == "zh" else "; ").join(
        _tpl_word(cat, k, v) for k, v in s.field(key))) for key in _FIELDS]


def changes_words(cat: Catalog, item: Any) -> str:
    """An item's changes in `cat`'s language (`diffs`); the English notation stored before them."""
    diffs = getattr(item, "diffs", ())
    return "; ".join(change_text(cat, d) for d in diffs) if diffs else "; ".join(item.changes)


def reverted_line(cat: Catalog, r: Any) -> str:
    """A `bot.service.handover.RevertItem`: the change, its plan, who put it back and when, what to do."""
    return cat.t("handover.reverted_line", target=r.target, changes=changes_words(cat, r), plan=r.plan,
                 reverted=revert_words(cat, r), fold=cat.t("remediate_cli.revert_fold"))


def state_line(cat: Catalog, st: Any) -> str:
    return cat.t("handover.state_line", target=st.target, kv_peak=pct_word(cat, st.kv_usage_peak),
                 kv_now=pct_word(cat, st.kv_usage_now), headroom=pct_word(cat, st.headroom),
                 queue_peak=n_word(cat, st.queue_peak), queue_now=n_word(cat, st.queue_now),
                 preemptions=eviction_count(cat, st.preemptions, getattr(st, "eviction", None)),
                 oom_kills=count_word(cat, "oom_kills", st.oom_kills),
                 restarts=count_word(cat, "restarts", getattr(st, "restarts", None)))


def handover_json(h: Any) -> dict[str, Any]:
    """The stable `--json` document (docs/json.md "handover"): the handover's record, with what
    to watch (`watch_next`) and the template's fields in English; ids stay ids (`layer` is the
    cause id, a field nothing stored tells is `unknown`), `outcomes` reads "duplicate 1, triaged 1"."""
    en = Catalog.load("en")
    doc = h.to_record()
    doc.pop("watch_items")
    if doc["state_issue"] is not None:  # Prometheus' reason, in English words like the rest
        doc["state_issue"] = en.phrase(doc["state_issue"])
    doc["watch_next"] = watch_words(en, h)
    doc["services"] = [{"target": s.target, **{key: _json_field(en, key, s.field(key)) for key in _FIELDS},
                        "last_triage": s.last_triage.isoformat() if s.last_triage else None} for s in h.services]
    for alert in doc["alerts"]:
        alert["outcomes"] = ", ".join(f"{name} {count}" for name, count in _outcome_pairs(alert["outcomes"]))
    for m in doc["temporary"]:
        m["review"] = review_word(en, m["review"])
    for d in doc["drift"]:  # "argocd llm-serving", as the JSON always had it
        d["managers"] = [f"{m.get('kind')} {m.get('name')}" for m in d["managers"]]
    for item in [*doc["changes"], *doc["drift"], *doc["reverted"]]:
        item.pop("diffs", None)  # `changes` gives them in the plans' own notation
    return doc


def managers_word(cat: Catalog, managers: Any) -> str:
    """Who manages a drifted object, in words ("Argo CD application llm-serving")."""
    return cat.join(who(cat, m) if isinstance(m, dict) else str(m) for m in managers)


def _json_field(en: Catalog, field: str, items: Any) -> Any:
    words = ["unknown" if k == "unknown" else (v.get("cause") if k == "cause" else _tpl_word(en, k, v))
             for k, v in items]
    return words if field == "flags_changed" and items[0][0] != "none" else \
        ([] if field == "flags_changed" else "; ".join(str(w) for w in words))


def handover_text(h: Any, lang: str) -> str:
    """`h` is a `bot.service.handover.Handover` (render sits below service and does not import it)."""
    cat = Catalog.load(lang)
    out = [cat.t("handover.title", channel=f" {h.channel}" if h.channel else "", since=_hm(h.since),
                 until=_hm(h.until), since_from=cat.t(f"handover.since_from.{h.since_from}"))]
    if h.late:
        out.append(cat.t("handover.late"))

    def section(key: str, lines: list[str], count: bool = True) -> None:
        out.append("")
        out.append(cat.t(key, count=len(lines)) if count else cat.t(key))
        out.extend(lines or [cat.t("handover.none")])

    section("handover.incidents", ["  " + cat.t("handover.incident_line", at=_hm(i.at),
                                                target=i.target or cat.t("handover.target_unknown"),
                                                cause=cause_word(cat, i.verdict),
                                                priority=priority_word(cat, i.priority), actor=i.actor)
                                   for i in h.incidents])
    section("handover.changes", ["  " + cat.t("handover.change_line", plan=c.plan, state=state_word(cat, c.state),
                                              target=c.target, changes=changes_words(cat, c), by=c.requested_by,
                                              approved=cat.t("handover.change_approved",
                                                             approvers=cat.join(c.approvers))
                                              if c.approvers else "") for c in h.changes])
    section("handover.temporary", ["  " + cat.t("handover.temporary_line", target=m.target, what=m.what,
                                                value=m.value, since=_hm(m.since), hours=f"{m.age_s / 3600:.1f}",
                                                review=review_word(cat, m.review), live=live_word(cat, m))
                                   for m in h.temporary])
    if getattr(h, "drift", ()):
        section("handover.drift", ["  " + cat.t("handover.drift_line", target=d.target, changes=changes_words(cat, d),
                                                plan=d.plan, state=state_word(cat, d.state), at=_hm(d.at),
                                                managers=managers_word(cat, d.managers)) for d in h.drift])
    if getattr(h, "reverted", ()):
        section("handover.reverted", ["  " + reverted_line(cat, r) for r in h.reverted])
    section("handover.notes", ["  " + cat.t("handover.note_line", at=_hm(n.at), author=n.author,
                                            target=f"  {n.target}" if n.target else "", text=n.text)
                               for n in h.notes])
    if h.alerts:
        section("handover.alerts", [alert_line(cat, a) for a in h.alerts])
    section("handover.watch", [f"  - {w}" for w in watch_words(cat, h)], count=False)
    if h.services:
        out.append("")
        out.append(cat.t("handover.services"))
        for s in h.services:
            out.append(f"  {s.target}")
            for label, value in service_fields(cat, h, s):
                out.append("    " + cat.t("handover.field_line", label=label, value=value))
    out.append("")
    if h.state is None:
        out.append(cat.t("handover.state_none"))
    elif h.state_issue:
        out.append(cat.t("handover.state_issue", issue=h.state_issue))
    else:
        out.append(cat.t("handover.state"))
        for st in h.state:
            out.append("  " + state_line(cat, st))
    return "\n".join(out) + "\n"


def alert_line(cat: Catalog, a: Any) -> str:
    """One `bot.service.handover.AlertItem` as a line."""
    return "  " + cat.t("handover.alert_line", first=_hm(a.first_at), last=_hm(a.last_at), alertname=a.alertname,
                        target=a.target or "-", severity=severity_word(cat, a.severity), count=a.count, firing=a.firing,
                        resolved=a.resolved, outcomes=outcomes_word(cat, a.outcomes))


def notes_json(notes: list[Note]) -> list[dict[str, Any]]:
    return [{"id": n.id, "at": n.at.isoformat(), "author": n.author, "channel": n.channel, "cluster": n.cluster,
             "target": n.target, "text": n.text} for n in notes]


def notes_text(notes: list[Note], lang: str) -> str:
    cat = Catalog.load(lang)
    if not notes:
        return cat.t("handover.notes_empty") + "\n"
    lines = [cat.t("handover.notes_title", count=len(notes))]
    lines += [f"  {_hm(n.at)}  {n.author:<14} {n.target or '-':<28} {n.text}" for n in notes]
    return "\n".join(lines) + "\n"
