"""Slack rendering of everything but the triage diagnosis: help, errors, acks, profile,
snapshot and the output of CLI verbs (`budget`). All wording from the catalogs."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from bot.render import slack_blocks as B
from bot.render.i18n import Catalog
from bot.render.slack_blocks import Block, Message, esc
from bot.render.slack_triage import t
from bot.render.view import view
from bot.render.wording import pct
from runbooks.model.evidence import Evidence, GpuDevice
from runbooks.model.lengths import BUCKETS
from runbooks.model.report import Report
from runbooks.model.units import GIB

#: how each verb is typed, and an example (syntax, not wording)
FORMS = {
    "triage": ("/gpumem triage NAMESPACE/DEPLOYMENT [--context C]", "/gpumem triage llm/vllm-server"),
    "profile": ("/gpumem profile NAMESPACE/DEPLOYMENT [--context C]", "/gpumem profile llm/vllm-server"),
    "snapshot": ("/gpumem snapshot NAMESPACE/DEPLOYMENT [--context C]", "/gpumem snapshot llm/vllm-server"),
    "budget": ("/gpumem budget [flags of gpumem budget]", "/gpumem help budget"),
    "fleet": ("/gpumem fleet [NAMESPACE|--all] [--engine E] [--top N]", "/gpumem fleet llm"),
    "plan": ("/gpumem plan NAMESPACE/DEPLOYMENT [--action ID | --set FLAG=VALUE ... | --replicas N] [--context C]",
             "/gpumem plan llm/vllm-server --set max-num-seqs=64"),
    "plans": ("/gpumem plans [--target NAMESPACE/NAME] [--all]", "/gpumem plans"),
    "rollback": ("/gpumem rollback PLAN", "/gpumem rollback p-0a1b2c3d"),
    "help": ("/gpumem help [VERB]", "/gpumem help triage"),
}
#: snapshot lines before "+N more"
MAX_GPU_LINES = 40
#: verb output shown inline before the rest goes to a file
MAX_INLINE_OUTPUT = 5_800


def help_message(lang: str, verbs: Sequence[str]) -> Message:
    cat = Catalog.load(lang)
    blocks: list[Block] = [B.section(f"*{t(cat, 'slack.help.title')}*")]
    for verb in verbs:
        form, example = FORMS.get(verb, (f"/gpumem {verb}", f"/gpumem help {verb}"))
        blocks.append(B.section(f"{B.code(form)}\n{t(cat, f'slack.help.{verb}')}\n"
                                f"{t(cat, 'slack.help.example')}: {B.code(example)}"))
    blocks.append(B.context(t(cat, "slack.help.footer", lang_name=cat.t("slack.lang_name"))))
    return B.message(cat.t("slack.help.title"), blocks)


def verb_help_message(lang: str, verb: str, usage: str) -> Message:
    cat = Catalog.load(lang)
    title = t(cat, "slack.error.help_verb", verb=verb)
    return B.message(title, [B.section(f"*{title}*"), *_code_sections(usage)])


def error_message(lang: str, key: str, usage: str = "", /, **params: Any) -> Message:
    """An ephemeral refusal: what was wrong, the right form, where to look next."""
    cat = Catalog.load(lang)
    text = t(cat, f"slack.error.{key}", **params)
    blocks: list[Block] = [B.section(f":warning: {text}")]
    if usage:
        blocks.append(B.section(f"*{t(cat, 'slack.error.usage_title')}*"))
        blocks += _code_sections(usage.strip())
    blocks.append(B.context(t(cat, "slack.error.help_hint")))
    return B.message(text, blocks)


def ack_text(lang: str, verb: str, target: str | None, ahead: int | None = None) -> Message:
    """The immediate, ephemeral reply to a command that will run (with its place in the queue)."""
    cat = Catalog.load(lang)
    text = ":hourglass_flowing_sand: " + t(cat, f"slack.ack.{verb}", target=target or "")
    if ahead is not None:
        text += " (" + (t(cat, "slack.progress.queued", ahead=ahead) if ahead else
                        t(cat, "slack.progress.queued_next")) + ")"
    return B.message(text, [B.section(text)])


def note_message(text: str) -> Message:
    """A short ephemeral note (already worded)."""
    return B.message(text, [B.section(":warning: " + esc(text))])


def _code_sections(text: str, limit: int = B.SECTION_CHARS - 10) -> list[Block]:
    """Preformatted text in ``` blocks, split on lines so each section stays under the limit."""
    chunks, current = [], ""
    for line in esc(text).splitlines():
        line = B.clip(line, limit)
        if current and len(current) + len(line) + 1 > limit:
            chunks.append(current)
            current = line
        else:
            current = f"{current}\n{line}" if current else line
    if current or not chunks:
        chunks.append(current or " ")
    return [B.section(f"```{c.replace('```', 'ˋˋˋ')}```") for c in chunks]


# ----------------------------------------------------------------------------- profile


def profile_message(report: Report, lang: str, target: str, user: str | None = None) -> Message:
    cat = Catalog.load(lang)
    title = t(cat, "slack.profile.title", target=target)
    p = report.profile
    blocks: list[Block] = []
    if p is None or not p.total:
        line = t(cat, "slack.profile.none", target=target)
        blocks.append(B.section(f":grey_question: *{title}*\n{line}"))
        return B.message(cat.t("slack.title_line", title=title, line=line), blocks)
    by_bucket = {b.bucket: b for b in p.buckets}
    pairs = [(b, t(cat, "slack.profile.bucket", share=pct(p.share(b)),
                   count=by_bucket[b].count if b in by_bucket else 0)) for b in BUCKETS]
    blocks.append(B.section(f":bar_chart: *{title}*"))
    blocks.append(B.fields(pairs))
    lines = [esc(x) for x in view(report, lang).profile]
    blocks += B.text_sections(None, lines)
    ctx = [t(cat, "slack.profile.source", source=p.source)]
    if user:
        ctx.append(t(cat, "slack.progress.asked_by", raw={"user": f"<@{user}>"}))
    blocks.append(B.context(*ctx))
    shares = " · ".join(f"{b} {pct(p.share(b))}%" for b in BUCKETS)
    return B.message(cat.t("slack.title_line", title=title, line=shares), blocks)


# ----------------------------------------------------------------------------- snapshot


def _gpu_devices(evidence: Evidence) -> tuple[tuple[GpuDevice, ...], str | None, Any]:
    if evidence.gpus is not None and evidence.gpus.devices:
        return evidence.gpus.devices, evidence.gpus.source, evidence.gpus.taken_at
    if evidence.server_metrics is not None and evidence.server_metrics.gpus:
        return evidence.server_metrics.gpus, evidence.server_metrics.source, evidence.collected_at
    return (), None, None


def _gpu_line(cat: Catalog, d: GpuDevice) -> str:
    name = " ".join(x for x in (d.name, d.mig_profile) if x) or "GPU"
    used = round(d.used_bytes / GIB, 1) if d.used_bytes is not None else None
    total = round(d.total_bytes / GIB, 1) if d.total_bytes else None
    line = f"{B.code(d.index)} " + t(cat, "slack.snapshot.device", name=name, used_gib=used, total_gib=total,
                                     pct=pct(d.used_ratio))
    extra = []
    if d.util_gpu_pct is not None:
        extra.append(t(cat, "slack.snapshot.util", util_pct=round(d.util_gpu_pct)))
    if d.pod:
        extra.append(t(cat, "slack.snapshot.pod", pod=d.pod))
    elif d.host:
        extra.append(t(cat, "slack.snapshot.host", host=d.host))
    if d.processes:
        extra.append(t(cat, "slack.snapshot.processes", count=len(d.processes)))
    mark = ":red_circle:" if (d.used_ratio or 0) >= 0.95 else (
        ":large_orange_circle:" if (d.used_ratio or 0) >= 0.9 else ":large_green_circle:")
    return f"{mark} {line}" + (" · " + " · ".join(extra) if extra else "")


def snapshot_message(evidence: Evidence, lang: str, target: str, user: str | None = None) -> Message:
    cat = Catalog.load(lang)
    title = t(cat, "slack.snapshot.title", target=target)
    devices, source, taken_at = _gpu_devices(evidence)
    if not devices:
        line = t(cat, "slack.snapshot.none", target=target)
        return B.message(cat.t("slack.title_line", title=title, line=line), [B.section(f":grey_question: *{title}*\n{line}")])
    ordered = sorted(devices, key=lambda d: -(d.used_ratio or 0.0))
    lines = [_gpu_line(cat, d) for d in ordered[:MAX_GPU_LINES]]
    if len(ordered) > MAX_GPU_LINES:
        lines.append(t(cat, "slack.snapshot.more", count=len(ordered) - MAX_GPU_LINES))
    blocks = [B.section(f":desktop_computer: *{title}*"), *B.text_sections(None, lines)]
    when = taken_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if taken_at else "?"
    ctx = [t(cat, "slack.snapshot.source", source=source or "?", at=when)]
    if user:
        ctx.append(t(cat, "slack.progress.asked_by", raw={"user": f"<@{user}>"}))
    blocks.append(B.context(*ctx))
    worst = ordered[0]
    summary = f"{title}: {len(devices)} GPU, max {pct(worst.used_ratio)}%"
    return B.message(summary, blocks)


# ----------------------------------------------------------------------------- CLI verb output


def verb_output_message(lang: str, verb: str, argv: Sequence[str], stdout: str, returncode: int,
                        user: str | None = None) -> tuple[Message, str | None]:
    """A CLI verb's output as a message; returns (message, full text to attach when it is cut)."""
    cat = Catalog.load(lang)
    shown = " ".join(argv)
    title = f"*/gpumem {esc(verb)}* {B.code(shown)}" if shown else f"*/gpumem {esc(verb)}*"
    mark = ":white_check_mark:" if returncode == 0 else ":large_orange_circle:"
    body = stdout.strip() or cat.t("section.none")
    attach = None
    if len(body) > MAX_INLINE_OUTPUT:
        attach = stdout
        body = B.clip(body, MAX_INLINE_OUTPUT)
    blocks: list[Block] = [B.section(f"{mark} {title}"), *_code_sections(body)]
    ctx = [t(cat, "slack.verb.exit_code", code=returncode)]
    if attach is not None:
        ctx.append(t(cat, "slack.verb.cut"))
    if user:
        ctx.append(t(cat, "slack.progress.asked_by", raw={"user": f"<@{user}>"}))
    blocks.append(B.context(*ctx))
    return B.message(f"/gpumem {verb} {shown}: " + B.clip(body, 200), blocks), attach


def profile_answer(outcome: Any, lang: str, target: str, user: str | None = None) -> Message:
    """`/gpumem profile`'s answer from the triage of the service (`bot.service.triage.TriageOutcome`)."""
    return profile_message(outcome.report, lang, target, user)


def snapshot_answer(outcome: Any, lang: str, target: str, user: str | None = None) -> Message:
    """`/gpumem snapshot`'s answer from the triage of the service (`bot.service.triage.TriageOutcome`)."""
    return snapshot_message(outcome.evidence, lang, target, user)
