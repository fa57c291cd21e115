"""Slack Block Kit for the shift's notes and its handover (`/gpumem note`, `notes`, `handover`).

>>> note_list_message("en", [])["text"]
'No notes for what was asked.'
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.render import slack_blocks as B
from bot.render.handover import (
    cause_word,
    changes_words,
    count_word,
    managers_word,
    outcomes_word,
    pct_word,
    priority_word,
    reverted_line,
    review_word,
    service_fields,
    severity_word,
    state_word,
    watch_words,
)
from bot.render.i18n import Catalog
from bot.render.remediation import revert_words
from bot.render.wording import eviction_count
from bot.store.notes import Note

Message = dict[str, Any]

#: a listing in one ephemeral reply shows at most this many notes (the newest)
MAX_LISTED_NOTES = 40


def _hm(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") if at is not None else "-"


def note_line(n: Note) -> str:
    who = f"<@{n.author}>" if n.author and n.author[:1] in "UW" and n.author.isalnum() else B.esc(n.author)
    target = f" `{B.esc(n.target)}`" if n.target else ""
    return f"{_hm(n.at)} {who}{target}: {B.esc(n.text)}"


def note_saved_message(lang: str, note: Note) -> Message:
    """The ephemeral answer to `/gpumem note`: what was recorded."""
    cat = Catalog.load(lang)
    title = cat.t("handover.note_saved", id=note.id, at=_hm(note.at))
    quoted = "\n".join("> " + line for line in B.esc(note.text).splitlines() or [""])
    target = f"`{B.esc(note.target)}`\n" if note.target else ""
    blocks = [B.section(B.clip(f":memo: {B.esc(title)}\n{target}{quoted}", B.SECTION_CHARS))]
    return B.message(B.clip(f"{title} {note.text}", B.FALLBACK_CHARS), blocks)


def note_list_message(lang: str, notes: Sequence[Note]) -> Message:
    """The ephemeral answer to `/gpumem notes`: the channel's notes, oldest first (the newest
    `MAX_LISTED_NOTES` when there are more), within Block Kit's limits."""
    cat = Catalog.load(lang)
    if not notes:
        text = cat.t("handover.notes_empty")
        return B.message(text, [B.section(B.esc(text))])
    title = cat.t("handover.notes_title", count=len(notes))
    lines: list[str] = []
    budget = B.MESSAGE_CHARS - 1000
    for n in reversed(list(notes)[-MAX_LISTED_NOTES:]):  # the newest that fit
        line = B.clip(note_line(n), B.SECTION_CHARS - 20)
        if lines and budget - len(line) < 0:
            break
        budget -= len(line) + 1
        lines.append(line)
    lines.reverse()
    blocks = B.text_sections(title, lines)
    if len(lines) < len(notes):
        blocks.append(B.context(B.esc(cat.t("slack.handover.notes_more", shown=len(lines), total=len(notes)))))
    return B.message(B.clip(title, B.FALLBACK_CHARS), blocks)


# ----------------------------------------------------------------------------- the handover

#: items of each kind named in the parent message (the rest are counted, and in the thread)
TOP_ITEMS = 3
#: thread replies at most; past that the detail is attached as a file
MAX_HANDOVER_THREAD = 6


def _z(at: Any) -> str:
    return at.strftime("%Y-%m-%d %H:%M") + "Z"


def _age(cat: Catalog, seconds: float) -> str:
    return cat.t("span.hours", value=f"{seconds / 3600:.1f}")


#: a stop-gap's live state -> its mark; anything but a read that matched is not shown as confirmed
LIVE_MARKS = {"confirmed": ":white_check_mark:", "changed": ":warning:", "unconfirmed": ":grey_question:"}


def live_mark(cat: Catalog, m: Any) -> str:
    """How a stop-gap's live state reads: confirmed, changed (with the live value), or
    unconfirmed (no cluster read, or the read failed), in the channel's language."""
    state = m.live if m.live in LIVE_MARKS else "unconfirmed"
    return f"{LIVE_MARKS[state]} {B.esc(cat.t('slack.handover.live.' + state, value=m.live_value))}"


def _review(cat: Catalog, m: Any) -> str:
    """The review a stop-gap needs (`bot.service.handover.TemporaryMeasure.review`, a key)."""
    return cat.t("slack.handover.review") if m.review == "restore_or_permanent" else review_word(cat, m.review)


def _stopgap(cat: Catalog, m: Any) -> str:
    return f"`{B.esc(m.target)}` {B.esc(m.what)} {B.esc(m.old)} → *{B.esc(m.value)}* · {_age(cat, m.age_s)} · " \
           f"{B.esc(_review(cat, m))} [{live_mark(cat, m)}]"


def _unconfirmed(cat: Catalog, h: Any) -> list[dict[str, Any]]:
    """A line under the stop-gaps when some could not be checked against the live object."""
    count = sum(1 for m in h.temporary if m.live not in ("confirmed", "changed"))
    return [B.context(B.esc(cat.t("slack.handover.unconfirmed_note", count=count, total=len(h.temporary))))] \
        if count else []


def _incident(cat: Catalog, i: Any) -> str:
    target = f"`{B.esc(i.target)}`" if i.target else B.esc(cat.t("handover.target_unknown"))
    return f"{_z(i.at)} {target} " + B.esc(cat.t("slack.handover.incident", cause=cause_word(cat, i.verdict),
                                                   priority=priority_word(cat, i.priority)))


def _alert(cat: Catalog, a: Any) -> str:
    """One `bot.service.handover.AlertItem`: name, target, how many, what became of them."""
    return (f"{_z(a.last_at)} *{B.esc(a.alertname)}* `{B.esc(a.target or '-')}` {B.esc(severity_word(cat, a.severity))} "
            f"×{a.count} " + B.esc(cat.t("slack.handover.alert_counts", firing=a.firing, resolved=a.resolved,
                                          outcomes=outcomes_word(cat, a.outcomes))))


def _top(cat: Catalog, lines: Sequence[str]) -> list[str]:
    shown = [f"• {line}" for line in lines[:TOP_ITEMS]]
    if len(lines) > TOP_ITEMS:
        shown.append(cat.t("slack.handover.more", count=len(lines) - TOP_ITEMS))
    return shown


def handover_title(h: Any, lang: str) -> str:
    cat = Catalog.load(lang)
    return cat.t("handover.title", channel="", since=_z(h.since), until=_z(h.until),
                 since_from=cat.t(f"handover.since_from.{h.since_from}"))


def handover_parent(h: Any, lang: str) -> Message:
    """The parent message: the window, the counts, the top incidents, stop-gaps and what to watch.
    `h` is a `bot.service.handover.Handover`."""
    cat = Catalog.load(lang)
    title = handover_title(h, lang)
    blocks = [B.header(B.clip(cat.t("slack.handover.header"), B.HEADER_CHARS)), B.section(B.clip(B.esc(title),
                                                                                               B.SECTION_CHARS))]
    if h.late:
        blocks.append(B.context(":alarm_clock: " + B.esc(cat.t("handover.late"))))
    counts = [cat.t("handover.incidents", count=len(h.incidents)), cat.t("handover.changes", count=len(h.changes)),
              cat.t("handover.temporary", count=len(h.temporary)), cat.t("handover.notes", count=len(h.notes))]
    blocks.append(B.fields([(k.rstrip(":："), " ") for k in counts]))
    for key, lines in (("handover.incidents", [_incident(cat, i) for i in h.incidents]),
                       ("handover.temporary", [_stopgap(cat, m) for m in h.temporary]),
                       ("handover.drift", [f"`{B.esc(d.target)}` {B.esc(changes_words(cat, d))} ({B.esc(d.plan)}, "
                                           f"{B.esc(managers_word(cat, d.managers))})" for d in getattr(h, "drift", ())]),
                       ("handover.reverted", [":leftwards_arrow_with_hook: " + B.esc(reverted_line(cat, r))
                                              for r in getattr(h, "reverted", ())]),
                       ("handover.alerts", [_alert(cat, a) for a in getattr(h, "alerts", ())])):
        if lines:
            blocks += B.text_sections(cat.t(key, count=len(lines)), _top(cat, lines))
            if key == "handover.temporary":
                blocks += _unconfirmed(cat, h)
    watch = [B.esc(w) for w in watch_words(cat, h)]
    blocks += B.text_sections(cat.t("handover.watch"), _top(cat, watch) if watch else [cat.t("handover.none").strip()])
    blocks.append(B.context(B.esc(cat.t("slack.handover.thread_hint"))))
    summary = cat.t("slack.handover.summary", incidents=len(h.incidents), changes=len(h.changes),
                    temporary=len(h.temporary), watch=len(h.watch_items))
    return B.message(B.clip(f"{title} {summary}", B.FALLBACK_CHARS), blocks[: B.MAX_BLOCKS])


def handover_thread(h: Any, lang: str) -> tuple[tuple[Message, ...], bool]:
    """The thread under the parent: per service the runbook's template, the notes, the stop-gaps
    with their age, changes and Prometheus state. Returns (messages, overflow): on overflow the
    last message says the rest is in the attached file."""
    cat = Catalog.load(lang)
    blocks: list[dict[str, Any]] = []

    def group(title: str, lines: list[str]) -> None:
        if blocks:
            blocks.append(B.divider())
        blocks.extend(B.text_sections(title, lines or [cat.t("handover.none").strip()]))

    for s in h.services:
        lines = [B.esc(cat.t("handover.field_line", label=label, value=value))
                 for label, value in service_fields(cat, h, s)]
        group(f"{s.target} · {cat.t('handover.services').rstrip(':：')}", lines)
    group(cat.t("handover.notes", count=len(h.notes)), [note_line(n) for n in h.notes])
    group(cat.t("handover.temporary", count=len(h.temporary)), [_stopgap(cat, m) for m in h.temporary])
    blocks += _unconfirmed(cat, h)
    if getattr(h, "reverted", ()):
        group(cat.t("handover.reverted", count=len(h.reverted)),
              [":leftwards_arrow_with_hook: " + B.esc(reverted_line(cat, r)) for r in h.reverted])
    group(cat.t("handover.changes", count=len(h.changes)),
          [f"`{B.esc(c.plan)}` {B.esc(state_word(cat, c.state))} `{B.esc(c.target)}` {B.esc(changes_words(cat, c))} "
           f"({B.esc(c.requested_by)})" for c in h.changes])
    if getattr(h, "alerts", ()):
        group(cat.t("handover.alerts", count=len(h.alerts)), [_alert(cat, a) for a in h.alerts])
    group(cat.t("handover.incidents", count=len(h.incidents)),
          [_incident(cat, i) + f" <@{B.esc(i.actor)}>" if i.actor[:1] in "UW" else _incident(cat, i)
           for i in h.incidents])
    if h.state is None or h.state_issue:
        said = cat.t("handover.state_none") if h.state is None else cat.t("handover.state_issue", issue=h.state_issue)
        blocks += [B.divider(), B.context(B.esc(B.clip(said, 2000)))]
    else:
        group(cat.t("handover.state"), [
            f"`{B.esc(st.target)}` " + B.esc(cat.t(
                "slack.handover.state_line", kv_peak=pct_word(cat, st.kv_usage_peak),
                kv_now=pct_word(cat, st.kv_usage_now), headroom=pct_word(cat, st.headroom),
                queue_peak=pct_word(cat, None) if st.queue_peak is None else f"{st.queue_peak:.0f}",
                queue_now=pct_word(cat, None) if st.queue_now is None else f"{st.queue_now:.0f}",
                preemptions=eviction_count(cat, st.preemptions, getattr(st, "eviction", None)),
                oom_kills=count_word(cat, "oom_kills", st.oom_kills),
                restarts=count_word(cat, "restarts", getattr(st, "restarts", None)))) for st in h.state])
    pages = B.paginate(blocks)
    overflow = len(pages) > MAX_HANDOVER_THREAD
    if overflow:
        pages = pages[: MAX_HANDOVER_THREAD - 1]
        pages.append([B.section(B.esc(cat.t("slack.handover.overflow")))])
    title = cat.t("slack.handover.header")
    return tuple(B.message(cat.t("slack.page_title", title=title, page=i, pages=len(pages)), page) for i, page in enumerate(pages, 1)), overflow


# ----------------------------------------------------------------------------- review reminders


def review_message(reminder: Any, lang: str) -> Message:
    """A post-change review reminder: which stop-gap, since when, whether it is still running,
    and what to do (restore or make permanent). `reminder` is a `bot.service.reviews.ReviewReminder`."""
    cat = Catalog.load(lang)
    m = reminder.measure
    title = cat.t("slack.review.title", target=m.target)
    what = cat.t("slack.review.what", what=m.what, old=m.old, value=m.value, plan=m.plan, since=_z(m.since),
                 age=_age(cat, m.age_s), due=_z(reminder.review_at))
    people = [f"<@{u}>" if u[:1] in "UW" and u.isalnum() else B.esc(u) for u in reminder.approvers]
    who = cat.t("slack.review.who", requested_by=f"<@{reminder.requested_by}>"
                if reminder.requested_by[:1] in "UW" and reminder.requested_by.isalnum()
                else B.esc(reminder.requested_by), approvers=cat.join(people) or "-")
    reverted = getattr(reminder, "reverted", None)
    if reverted is not None:  # put back by another manager: not running, and not gpumem's to restore
        live = cat.t("slack.review.reverted", reverted=revert_words(cat, reverted))
        mark, ask = f":leftwards_arrow_with_hook: {B.esc(live)}", cat.t("slack.review.ask_reverted",
                                                                         fold=cat.t("remediate_cli.revert_fold"))
    else:
        live = cat.t("slack.handover.live." + (m.live if m.live in LIVE_MARKS else "unconfirmed"), value=m.live_value)
        mark, ask = live_mark(cat, m), cat.t("slack.review.ask", plan=m.plan)
    blocks = [
        B.header(B.clip(title, B.HEADER_CHARS)),
        B.section(B.clip(f"{B.esc(what)}\n{mark}", B.SECTION_CHARS)),
        B.section(B.clip(B.esc(ask), B.SECTION_CHARS)),
        B.context(B.clip(who, 2000)),
    ]
    return B.message(B.clip(f"{title}: {what} ({live})", B.FALLBACK_CHARS), blocks)
