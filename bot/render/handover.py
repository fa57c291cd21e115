"""The shift handover and the notes as terminal text and JSON (stable keys, see README
"Shift handovers"). Headings come from the catalogs; the items are the stored words."""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from bot.store.notes import Note

_FIELDS = ("model_precision", "pool", "oom_rejects", "request_profile", "layer", "flags_changed", "pools_split",
           "rollback_needed", "temporary_review")


def _hm(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") + "Z"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0%}"


def _n(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


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

    section("handover.incidents", [f"  {_hm(i.at)}  {i.target or '-'}  {i.verdict or '-'} ({i.priority or '-'})"
                                   f"  {i.actor}" for i in h.incidents])
    section("handover.changes", [f"  {c.plan:<12} {c.state:<11} {c.target}  {'; '.join(c.changes)}  "
                                 f"by {c.requested_by}" + (f", approved by {', '.join(c.approvers)}" if c.approvers
                                                           else "") for c in h.changes])
    section("handover.temporary", [f"  {m.target}: {m.what} {m.value} since {_hm(m.since)} ({m.age_s / 3600:.1f} h), "
                                   f"set as a stop-gap: {m.review} [{m.live}"
                                   + (f": live {m.live_value}" if m.live == "changed" else "") + "]"
                                   for m in h.temporary])
    if getattr(h, "drift", ()):
        section("handover.drift", [f"  {d.target}: {'; '.join(d.changes)} (plan {d.plan}, {d.state}, since {_hm(d.at)}; "
                                   f"{', '.join(d.managers)})" for d in h.drift])
    section("handover.notes", [f"  {_hm(n.at)}  {n.author}" + (f"  {n.target}" if n.target else "") + f": {n.text}"
                               for n in h.notes])
    if h.alerts:
        section("handover.alerts", [alert_line(cat, a) for a in h.alerts])
    section("handover.watch", [f"  - {w}" for w in h.watch_next], count=False)
    if h.services:
        out.append("")
        out.append(cat.t("handover.services"))
        for s in h.services:
            out.append(f"  {s.target}")
            for key in _FIELDS:
                value = getattr(s, key)
                if isinstance(value, tuple):
                    value = "; ".join(value) or "none"
                out.append(f"    {cat.t('handover.field.' + key)}: {value}")
    out.append("")
    if h.state is None:
        out.append(cat.t("handover.state_none"))
    elif h.state_issue:
        out.append(cat.t("handover.state_issue", issue=h.state_issue))
    else:
        out.append(cat.t("handover.state"))
        for st in h.state:
            out.append(f"  {st.target}: KV peak {_pct(st.kv_usage_peak)} (now {_pct(st.kv_usage_now)}, headroom at "
                       f"the peak {_pct(st.headroom)}), queue peak "
                       f"{_n(st.queue_peak)} (now {_n(st.queue_now)}), preemptions {_n(st.preemptions)}, "
                       f"OOM kills {_n(st.oom_kills)}, restarts {_n(getattr(st, 'restarts', None))}")
    return "\n".join(out) + "\n"


def alert_line(cat: Catalog, a: Any) -> str:
    """One `bot.service.handover.AlertItem` as a line."""
    return "  " + cat.t("handover.alert_line", first=_hm(a.first_at), last=_hm(a.last_at), alertname=a.alertname,
                        target=a.target or "-", severity=a.severity or "-", count=a.count, firing=a.firing,
                        resolved=a.resolved, outcomes=a.outcomes)


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
