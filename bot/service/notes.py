"""Notes and triage records: what a shift writes down for the next one.

`add_note` keeps a person's note (the CLI's author is the OS user, Slack's the user id), with
an optional channel and target. `record_triage` keeps a triage's summary (`summarize_report`)
so the handover can list the shift's incidents and fill the runbook's template per service
from the last one, without re-running anything.

>>> from runbooks.model.report import Report, Verdict
>>> summarize_report(Report(target="llm/vllm", model="Qwen2.5-7B", verdict=Verdict("kv_cache")))["verdict"]
'kv_cache'
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from bot.config.remediation import store_path
from bot.config.yaml_io import SettingsError
from bot.grammar.requests import NoteRequest, NotesRequest, TriageRequest
from bot.grammar.slack import split_target
from bot.service.deps import Deps
from bot.service.operators import operator
from bot.service.records import open_store
from bot.store.db import Store
from bot.store.notes import Journal, Note, TriageRecord
from runbooks.model.errors import UsageError
from runbooks.model.report import Report

#: a note longer than this is refused (a note is a line for the next shift, not a document)
MAX_NOTE_CHARS = 2000


def add_note(store: Store, author: str, text: str, *, target: str | None = None, channel: str | None = None,
             cluster: str | None = None, now: datetime | None = None) -> Note:
    """Record a note. Raises UsageError empty_note, note_too_long or a target error."""
    text = " ".join(text.split())
    if not text:
        raise UsageError("empty_note")
    if len(text) > MAX_NOTE_CHARS:
        raise UsageError("note_too_long", limit=MAX_NOTE_CHARS, length=len(text))
    namespace = name = None
    if target:
        namespace, name = split_target(target)
    return Journal(store).add_note(author, text, channel=channel, cluster=cluster, namespace=namespace, name=name,
                                   now=now)


def list_notes(store: Store, *, since: datetime | timedelta | None = None, target: str | None = None,
               channel: str | None = None, now: datetime | None = None) -> list[Note]:
    """Notes oldest first; `since` a time or a duration back from `now`."""
    if isinstance(since, timedelta):
        since = (now or datetime.now(UTC)) - since
    namespace = name = None
    if target:
        namespace, name = split_target(target)
    return Journal(store).notes(since=since, namespace=namespace, name=name, channel=channel)


def split_note_args(request: NoteRequest) -> tuple[str | None, str]:
    """`gpumem note [NS/DEPLOY] TEXT...`: the first word is a target when it has one slash and no
    spaces (`llm/vllm`), else it is part of the text."""
    words = list(request.text)
    if len(words) > 1 and words[0].count("/") == 1 and not words[0].startswith(("/", "http")) \
            and not words[0].endswith("/"):
        return words[0], " ".join(words[1:])
    return None, " ".join(words)


def record_note(request: NoteRequest, deps: Deps) -> Note:
    """`gpumem note`: the note, its author the operator at the terminal."""
    target, text = split_note_args(request)
    store = open_store(request, deps)
    try:
        return add_note(store, operator(), text, target=target, channel=request.channel, now=deps.now())
    finally:
        store.close()


def find_notes(request: NotesRequest, deps: Deps) -> list[Note]:
    """`gpumem notes`: the notes --since, --target and --channel ask for."""
    store = open_store(request, deps)
    try:
        return list_notes(store, since=request.since, target=request.target, channel=request.channel, now=deps.now())
    finally:
        store.close()


# ----------------------------------------------------------------------------- triages


def summarize_report(report: Report) -> dict[str, Any]:
    """What the handover keeps of a triage: plain JSON, every field None when the report did not
    know it (the handover then says "unknown")."""
    assumptions = dict(report.budget.assumptions) if report.budget else {}
    assumed = assumptions.get("quantization") or assumptions.get("dtype")
    precision = None if assumed is None else str(assumed.value)
    profile = None
    if report.profile is not None:
        p = report.profile
        long_share = sum(b.share for b in p.buckets if b.bucket.upper() in ("L", "XL")) if p.buckets else None
        profile = {"requests": p.total, "p50_input_tokens": p.p50_input_tokens, "p95_input_tokens": p.p95_input_tokens,
                   "p99_input_tokens": p.p99_input_tokens, "p95_output_tokens": p.p95_output_tokens,
                   "p99_output_tokens": p.p99_output_tokens, "p95_total_tokens": p.p95_total_tokens,
                   "p99_total_tokens": p.p99_total_tokens,
                   "buckets": {b.bucket: [b.count, b.share] for b in p.buckets},
                   "source": p.source, "long_share": long_share, "estimated": p.estimated}
    findings = [{"id": f.id, "severity": f.severity} for f in report.findings]
    ids = " ".join(f["id"] for f in findings)
    memory = report.memory
    return {
        "target": report.target,
        "at": report.generated_at.isoformat() if report.generated_at else None,
        "verdict": report.verdict.primary,
        "priority": report.verdict.priority,
        "causes": [c.id for c in report.verdict.causes],
        "engine": report.engine,
        "engine_version": report.engine_version,
        "model": report.model,
        "precision": str(precision).split(" ")[0] if precision else None,
        "gpu": report.gpu,
        "gpu_used_gib": memory.gpu_used_gib if memory else None,
        "gpu_total_gib": memory.gpu_total_gib if memory else None,
        "kv_cache_usage": memory.kv_cache_usage_ratio if memory else None,
        "max_model_len": report.budget.max_model_len if report.budget else None,
        "max_concurrency": report.budget.max_concurrency if report.budget else None,
        "oom": "oom" in ids if findings else None,
        "rejects": any(w in ids for w in ("reject", "queue", "preempt")) if findings else None,
        "findings": findings,
        "flags_at_edge": [{"flag": f.flag, "value": f.value, "safe_value": f.safe_value} for f in report.flags_at_edge],
        "actions": [a.id for a in report.actions],
        #: each action's typed changes (kind, container, flag, old, new): `gpumem plan --action ID`
        "action_changes": {a.id: [[c.kind, c.container, c.slot, c.old, c.new] for c in a.changes]
                           for a in report.actions if a.changes and a.tier != "escalate"},
        "profile": profile,
        #: the KV pool the engine reported, beside the budget's own figure for the same flags:
        #: a plan preview of the unchanged object sizes on it (`bot.service.plan_preview`)
        "kv_pool": ({"tokens": memory.kv_cache_tokens, "computed": report.budget.kv_cache_tokens}
                    if memory is not None and memory.kv_tokens_measured and memory.kv_cache_tokens
                    and report.budget is not None else None),
    }


def record_triage(store: Store, report: Report, *, actor: str, channel: str | None = None,
                  cluster: str | None = None, now: datetime | None = None) -> TriageRecord:
    """Keep a triage's summary for the handover (the CLI after `gpumem triage`, Slack after a
    triage job). A report without a NS/NAME target is kept without one."""
    namespace = name = None
    if report.target and report.target.count("/") in (1, 2):  # NAMESPACE/NAME or NAMESPACE/KIND/NAME
        try:
            namespace, name = split_target(report.target)
        except UsageError:
            namespace = name = None
    return Journal(store).add_triage(actor, summarize_report(report), channel=channel, cluster=cluster,
                                     namespace=namespace, name=name, now=now)


def record_cli_triage(request: TriageRequest, report: Report, deps: Deps) -> TriageRecord | None:
    """`gpumem triage` records what it found when there is a store to record in: --store, the
    config's `store.path`, or the default file once something (a note, a plan) created it; a
    terminal that never used the store gets no file from a triage. A store that cannot be opened
    never fails the triage: the report was printed, the record is best effort."""
    try:
        if getattr(request, "store", None):
            path = request.store
        else:
            settings = deps.settings
            path = store_path(settings.store, deps.env)
            if not settings.store.path and not path.exists():
                return None
        store = Store.open(path)
    except (UsageError, OSError, SettingsError):
        return None
    try:
        return record_triage(store, report, actor=operator(), cluster=getattr(request, "context", None))
    finally:
        store.close()
