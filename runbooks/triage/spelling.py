"""Flags an action writes, spelled for the engine version deployed, before any plan exists.

The version is the launch's (image tag) or the log's version line; the spelling the object
already uses wins (it runs, so that version takes it). A change whose flag the version rejects
(TGI 1.4.0 has no --max-batch-size; TGI 1.x spells --max-input-tokens --max-input-length) is
respelled or left out with the reason (`runbooks.catalogs.engine_flags.choose_spelling`).
Where neither the evidence nor the object says the version, the change keeps its name: the
plan made from it is checked again against the object's image (`runbooks.remediation.edits.launch_edit`),
and refused there when the version still is not known and the flag is not in every version.
"""

from __future__ import annotations

from dataclasses import replace

from runbooks.catalogs.engine_defaults import parse_version
from runbooks.catalogs.engine_flags import Choice, choose_spelling
from runbooks.model.changes import Change, SetArg
from runbooks.model.phrases import Phrase
from runbooks.triage.context import TriageContext


def engine_version(ctx: TriageContext) -> str | None:
    """The deployed engine's version as text: the launch's (image tag), else the log's."""
    cfg = ctx.config
    logs = ctx.evidence.logs
    return (cfg.engine_version if cfg else None) or (logs.engine_version if logs else None)


def choose(ctx: TriageContext, engine: str, flag: str) -> Choice:
    cfg = ctx.config
    used = tuple(cfg.flags) if cfg is not None else ()
    return choose_spelling(engine, flag, parse_version(engine_version(ctx)), used)


def respell(ctx: TriageContext, engine: str, changes: tuple[Change, ...]) -> tuple[tuple[Change, ...], dict[str, Phrase]]:
    """(`changes` with each flag spelled for the deployed version, {flag: reason} for the ones
    that version rejects, which are left out)."""
    kept: list[Change] = []
    refused: dict[str, Phrase] = {}
    for change in changes:
        if not isinstance(change, SetArg) or not change.flag:
            kept.append(change)
            continue
        choice = choose(ctx, engine, change.flag)
        if choice.flag is None and parse_version(engine_version(ctx)) is None:
            kept.append(change)
        elif choice.flag is None:
            assert choice.reason is not None, "choose_spelling says why it refuses"
            refused[change.flag] = choice.reason
        else:
            kept.append(replace(change, flag=choice.flag) if choice.flag != change.flag else change)
    return tuple(kept), refused
