"""What `gpumem apply --yes` and `gpumem rollback` say happened, in words and JSON.

While the watch runs: `live_line` (the line a terminal redraws in place: elapsed time, the
judgement so far, updated and available replicas) and `change_line` (the line a pipe gets,
stamped, only when what it says changed: `progress_body` is what is compared). When the watch
ends: `watch_summary`, the outcome and the judgement first, then the detail. After a rollback:
`restored_lines` and `restored_json`, the inverse of each change, with the values as they are
once the rollback wrote them (its `test`s checked that gpumem's values were still there, and the
write restored the ones from before).

>>> clock_text(65), clock_text(600), clock_text(3725)
('1:05', '10:00', '1:02:05')
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.render.i18n import Catalog
from bot.render.remediation import look_text, notes_words
from bot.render.wording import restored_text
from bot.store.db import StoredPlan
from runbooks.model.changes import Change, SplitPools
from runbooks.remediation.plan import Plan
from runbooks.remediation.split import CREATE_OBJECTS

#: the patch type of a plan that creates its object (an HPA on queue depth): `bot.actuator.writer.CREATE`
_CREATE = "create"


def clock_text(seconds: float) -> str:
    """Elapsed time as a clock reads: m:ss, or h:mm:ss from an hour."""
    whole = max(0, int(seconds))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_body(look: Any, lang: str) -> str:
    """The judgement so far and the replicas, with the look's notes: what a new pipe line needs
    to differ in."""
    cat = Catalog.load(lang)
    body = cat.t("remediate_cli.progress.body", judgement=cat.t(f"remediate_cli.progress.{look.outcome}"),
                 updated=look.updated, available=look.available, replicas=look.replicas)
    return body + notes_words(cat, look.notes)


def live_line(look: Any, elapsed_s: float, window_s: float, lang: str) -> str:
    """The line a terminal shows in place while the watch runs (no newline, no controls)."""
    return Catalog.load(lang).t("remediate_cli.progress.live", elapsed=clock_text(elapsed_s),
                                window=clock_text(window_s), body=progress_body(look, lang))


def change_line(look: Any, at: datetime, elapsed_s: float, lang: str) -> str:
    """A pipe's line for a look that says something new, stamped with the UTC time."""
    stamp = at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return Catalog.load(lang).t("remediate_cli.progress.change", at=stamp, elapsed=clock_text(elapsed_s),
                                body=progress_body(look, lang)) + "\n"


def watch_summary(stored: StoredPlan, look: Any, elapsed_s: float, window_s: float, lang: str) -> str:
    """When the watch ends: one line with the outcome (the judgement and what became of the
    plan), then the detail (replicas, notes, Prometheus), then what an automatic rollback
    restored."""
    cat = Catalog.load(lang)
    out = cat.t("remediate_cli.watch_end", elapsed=clock_text(elapsed_s), window=clock_text(window_s),
                judgement=cat.t(f"remediate_cli.watch_judgement.{look.outcome}"), plan=stored.plan.id,
                state=cat.t(f"remediate_cli.state.{stored.state}")) + "\n"
    out += look_text(look, lang, rolled_back=stored.state == "rolled_back")
    if stored.state == "rolled_back":
        out += "".join(line + "\n" for line in restored_lines(stored.plan, lang))
    return out


def watch_json(look_doc: dict[str, Any], elapsed_s: float, window_s: float) -> dict[str, Any]:
    """The watch's JSON (`bot.render.remediation.look_json`) with how long it ran and its window."""
    return {**look_doc, "elapsed_s": round(elapsed_s, 1), "window_s": window_s}


def rollback_text(stored: StoredPlan, lang: str) -> str:
    """After `gpumem rollback`: the plan's new state first, then what was restored, as it is now."""
    cat = Catalog.load(lang)
    p = stored.plan
    lines = [cat.t("remediate_cli.title", plan=p.id, state=cat.t(f"remediate_cli.state.{stored.state}")),
             *restored_lines(p, lang)]
    return "\n".join(lines) + "\n"


def restored_lines(plan: Plan, lang: str) -> list[str]:
    """The heading (the object, and that the values are as they are now) and one line per change undone."""
    cat = Catalog.load(lang)
    t = plan.target
    lines = [cat.t("remediate_cli.restored", kind=t.kind, namespace=t.namespace, name=t.name,
                   cluster=t.cluster or "-")]
    return lines + [f"    - {row['diff']}" for row in restored_json(plan, lang)]


def restored_json(plan: Plan, lang: str = "en") -> list[dict[str, Any]]:
    """Per change the plan made, its inverse: `kind`, `container`, `flag`, `from` (what gpumem had
    written), `to` (what is there after the rollback; null: the field or object is gone, or the
    engine default applies), `diff` (the inverse in words)."""
    cat = Catalog.load(lang)
    rows = []
    for c in plan.changes:
        diff = _deleted(plan, c, cat) or restored_text(cat, c) or cat.t("remediate_cli.restored_routing")
        created = plan.patch_type in (CREATE_OBJECTS, _CREATE)
        rows.append({"kind": c.kind, "container": c.container, "flag": c.slot, "from": c.new,
                     "to": None if created else c.old, "diff": diff})
    return rows


def _deleted(plan: Plan, change: Change, cat: Catalog) -> str | None:
    """The line for an object the plan created and its rollback deleted."""
    t = plan.target
    if plan.patch_type == _CREATE:
        return cat.t("remediate_cli.restored_deleted", kind=t.kind, namespace=t.namespace, name=t.name)
    if plan.patch_type == CREATE_OBJECTS and isinstance(change, SplitPools) and change.part in ("Deployment", "Service"):
        name = str(change.new or "").rpartition("/")[2]
        return cat.t("remediate_cli.restored_deleted", kind=change.part, namespace=t.namespace, name=name)
    return None


def _value(value: Any, none: str) -> str:
    if value is None:
        return none
    return f"{value:g}" if isinstance(value, float) else str(value)
