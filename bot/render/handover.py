"""The shift handover and the notes as terminal text and JSON (stable keys, see README
"Shift handovers"). Headings come from the catalogs; the items are the stored words."""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from bot.render.remediation import revert_words
from bot.store.notes import Note

_FIELDS = ("model_precision", "pool", "oom_rejects", "request_profile", "layer", "flags_changed", "pools_split",
           "rollback_needed", "temporary_review")


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


def outcomes_word(cat: Catalog, outcomes: str) -> str:
    """An AlertItem's "triaged 1, duplicate 2" (as the JSON has it) in words; a part the
    catalogs do not know is left as stored."""
    parts = []
    for part in (p.strip() for p in str(outcomes or "").split(",") if p.strip()):
        name, _, count = part.rpartition(" ")
        key = f"handover.outcome.{name}"
        parts.append(cat.t(key, count=int(count)) if count.isdigit() and cat.has(key) else part)
    return ("、" if cat.lang == "zh" else ", ").join(parts)


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
    return cat.t("handover.review_default") if review == "restore or make permanent" else review


def live_word(cat: Catalog, m: Any) -> str:
    state = m.live if m.live in ("confirmed", "changed") else "unconfirmed"
    return cat.t(f"handover.live.{state}", value=m.live_value)


def watch_words(cat: Catalog, h: Any) -> list[str]:
    """What to watch next in the channel's language (the stored English when the handover
    carries no keyed items)."""
    items = getattr(h, "watch_items", ())
    if not items:
        return list(h.watch_next)
    out = []
    for key, values in items:
        v = dict(values)
        if key == "stopgap":
            v["live"] = cat.t(f"handover.live.{v['live']}", value=v.get("live_value"))
            v["review"] = review_word(cat, v["review"])
        elif key == "incident":
            v["cause"], v["priority"] = cause_word(cat, v["cause"]), priority_word(cat, v["priority"])
        elif key == "reverted":
            v["reverted"], v["fold"] = revert_words(cat, v), cat.t("remediate_cli.revert_fold")
        out.append(cat.t(f"handover.watch_item.{key}", v))
    return out


def _tpl_word(cat: Catalog, key: str, values: dict[str, Any]) -> str:
    v = dict(values)
    if key == "model_precision":
        v["model"] = v.get("model") or cat.t("handover.tpl.model_unknown")
        v["precision"] = v.get("precision") or cat.t("handover.tpl.precision_unknown")
    elif key == "oom_rejects":
        v = {k: cat.t("handover.tpl." + ("seen" if v[k] else "not_seen")) for k in ("oom", "rejects")}
    elif key == "request_profile":
        v["estimated"] = cat.t("handover.tpl.estimated") if v.get("estimated") else ""
        v["share"] = v.get("share") or cat.t("handover.not_measured")
        for k in ("p50", "p95"):
            v[k] = cat.t("handover.not_measured") if v.get(k) in (None, "unknown") else v[k]
    elif key == "cause":
        v["cause"] = cause_word(cat, v.get("cause"))
    elif key == "flag":
        v["state"] = state_word(cat, v["state"])
    elif key == "review":
        v["review"], v["live"] = review_word(cat, v["review"]), live_word(cat, _Live(v.get("live"), v.get("live_value")))
    return cat.t(f"handover.tpl.{key}", v)


class _Live:
    def __init__(self, live: Any, live_value: Any):
        self.live, self.live_value = live, live_value


def service_fields(cat: Catalog, h: Any, s: Any) -> list[tuple[str, str]]:
    """One service's template as (label, value) pairs in the channel's language (the stored
    English where the handover carries no keyed words)."""
    words = dict(getattr(h, "service_words", ())).get(s.target)
    out = []
    for key in _FIELDS:
        if words and key in words:
            value = "; ".join(_tpl_word(cat, k, v) for k, v in words[key])
        else:
            value = getattr(s, key)
            if isinstance(value, tuple):
                value = "; ".join(value) or "none"
        out.append((cat.t("handover.field." + key), str(value)))
    return out


def reverted_line(cat: Catalog, r: Any) -> str:
    """A `bot.service.handover.RevertItem`: the change, its plan, who put it back and when, what to do."""
    return cat.t("handover.reverted_line", target=r.target, changes="; ".join(r.changes), plan=r.plan,
                 reverted=revert_words(cat, r), fold=cat.t("remediate_cli.revert_fold"))


def state_line(cat: Catalog, st: Any) -> str:
    return cat.t("handover.state_line", target=st.target, kv_peak=pct_word(cat, st.kv_usage_peak),
                 kv_now=pct_word(cat, st.kv_usage_now), headroom=pct_word(cat, st.headroom),
                 queue_peak=n_word(cat, st.queue_peak), queue_now=n_word(cat, st.queue_now),
                 preemptions=count_word(cat, "preemptions", st.preemptions),
                 oom_kills=count_word(cat, "oom_kills", st.oom_kills),
                 restarts=count_word(cat, "restarts", getattr(st, "restarts", None)))


def handover_json(h: Any) -> dict[str, Any]:
    return h.to_json()


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
                                              target=c.target, changes="; ".join(c.changes), by=c.requested_by,
                                              approved=cat.t("handover.change_approved",
                                                             approvers=cat.join(c.approvers))
                                              if c.approvers else "") for c in h.changes])
    section("handover.temporary", ["  " + cat.t("handover.temporary_line", target=m.target, what=m.what,
                                                value=m.value, since=_hm(m.since), hours=f"{m.age_s / 3600:.1f}",
                                                review=review_word(cat, m.review), live=live_word(cat, m))
                                   for m in h.temporary])
    if getattr(h, "drift", ()):
        section("handover.drift", ["  " + cat.t("handover.drift_line", target=d.target, changes="; ".join(d.changes),
                                                plan=d.plan, state=state_word(cat, d.state), at=_hm(d.at),
                                                managers=cat.join(d.managers)) for d in h.drift])
    if getattr(h, "reverted", ()):
        section("handover.reverted", ["  " + reverted_line(cat, r) for r in h.reverted])
    section("handover.notes", [f"  {_hm(n.at)}  {n.author}" + (f"  {n.target}" if n.target else "") + f": {n.text}"
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
