"""Slack rendering of remediation: the "Plan" buttons under a diagnosis, the plan message in every
stage of its life, the rollback note, the refusals, `/gpumem plans`.

The plan message is one message edited through its stages:

    proposed -> partly_approved -> approved -> dry_run_ok -> watching -> held | symptoms_remain | failed
                                                                     | reverted (another writer put it back)
    (and rejected, expired, superseded, changed, not_applied, rolled_back, failed_rolled_back;
    reconciled_applied / reconciled_failed: a plan left `applying`, settled by reading the object
    again; unknown: a write whose answer was lost and whose object could not be read again;
    rollback_unknown, reconciled_rolled_back, rollback_not_applied: the same for a rollback)

Each stage shows the same body (target, the version it was made against, the change, risk,
rollback, expiry) under its own status line, and the buttons that stage allows: Approve (with a
confirm dialog) and Reject while it waits, Roll back once the change is on the cluster, Plan
again when it expired or the object changed. The buttons carry only the plan id; the store's
row is the truth.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from bot.render import slack_blocks as B
from bot.render import slack_split as S
from bot.render.errors import plan_states
from bot.render.i18n import Catalog
from bot.render.managers import plan_manager_lines
from bot.render.plan_preview import preview_words
from bot.render.remediation import differences_lines, masked_op, reverts_words, symptoms_values, written_name
from bot.render.slack_blocks import Block, Message, esc
from bot.render.slack_triage import t
from bot.render.wording import (
    action_text,
    change_text,
    change_words,
    engine_catalog,
    engine_words,
    flag_engine,
)
from bot.store.db import StoredPlan
from runbooks.model.changes import Change, change_of
from runbooks.model.report import Report

#: action ids; the "Plan" buttons under a diagnosis are `PLAN_ACTION:<n>`
PLAN_ACTION = "gpumem_plan"
APPROVE_ACTION = "gpumem_plan_approve"
REJECT_ACTION = "gpumem_plan_reject"
ROLLBACK_ACTION = "gpumem_plan_rollback"
REPLAN_ACTION = "gpumem_plan_replan"
#: a pool split's phase-1 message, once watched: record the routing, plan phase 2
ROUTING_ACTION = S.ROUTING_ACTION
PLAN_BLOCK = "gpumem_plans"
#: "Plan" buttons under one diagnosis
MAX_PLAN_BUTTONS = 5

STAGES = ("proposed", "partly_approved", "approved", "dry_run_ok", "watching", "held", "symptoms_remain", "failed",
          "failed_rolled_back", "changed", "not_applied", "rolled_back", "rejected", "expired", "superseded",
          "reconciled_applied", "reconciled_failed", "unknown", "rollback_unknown", "reconciled_rolled_back",
          "rollback_not_applied", "partly_applied", "watch_stopped", "reverted", "not_watched")
_EMOJI = {"proposed": ":clipboard:", "partly_approved": ":ballot_box_with_check:", "approved": ":white_check_mark:",
          "dry_run_ok": ":hourglass_flowing_sand:", "watching": ":eyes:", "held": ":white_check_mark:",
          "symptoms_remain": ":large_orange_circle:", "failed": ":x:", "failed_rolled_back": ":x:",
          "changed": ":warning:", "not_applied": ":x:", "rolled_back": ":leftwards_arrow_with_hook:",
          "rejected": ":no_entry_sign:", "expired": ":hourglass:", "superseded": ":fast_forward:",
          "reconciled_applied": ":white_check_mark:", "reconciled_failed": ":x:", "unknown": ":grey_question:",
          "rollback_unknown": ":grey_question:", "reconciled_rolled_back": ":leftwards_arrow_with_hook:",
          "rollback_not_applied": ":x:", "partly_applied": ":warning:", "watch_stopped": ":warning:",
          "reverted": ":leftwards_arrow_with_hook:", "not_watched": ":warning:"}
_WAITING = ("proposed", "partly_approved")
#: the stages whose headline asks for an approval
WAITING_STAGES = _WAITING
_ON_CLUSTER = ("watching", "held", "symptoms_remain", "failed", "reconciled_applied", "rollback_not_applied",
               "partly_applied", "watch_stopped", "not_watched")
_REPLAN = ("changed", "not_applied", "expired", "reconciled_failed")


# ----------------------------------------------------------------------------- the "Plan" buttons


def plan_value(target: str, context: str | None, action_id: str, changes: Sequence[Change]) -> str:
    """What a "Plan" button carries: the target, the cluster, the action and its typed changes
    (kind, container, flag, new value); the plan itself is read against the live object."""
    doc = {"t": target, "c": context, "a": action_id,
           "ch": [[c.kind, c.container, c.slot, c.new] for c in changes]}
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def parse_plan_value(text: str) -> tuple[str, str | None, str, tuple[Change, ...]]:
    """(target, context, action id, changes) from a "Plan" button's value. Raises ValueError
    when it is not one `plan_value` made."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("not an object")
    target, context, action, raw = doc.get("t"), doc.get("c"), doc.get("a"), doc.get("ch")
    if not isinstance(target, str) or not isinstance(action, str) or not isinstance(raw, list) or not raw:
        raise ValueError("missing fields")
    if context is not None and not isinstance(context, str):
        raise ValueError("bad context")
    changes = []
    for item in raw:
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str)
                and all(x is None or isinstance(x, str) for x in item[1:3])
                and (item[3] is None or isinstance(item[3], (int, float, str)))):
            raise ValueError("bad change")
        changes.append(change_of(item[0], item[1], item[2], None, item[3]))
    return target, context, action, tuple(changes)


def plan_buttons(report: Report, lang: str, target: str, context: str | None,
                 plannable: Sequence[str]) -> list[Block]:
    """An actions block of "Plan: <action>" buttons for the actions in `plannable` (at most
    `MAX_PLAN_BUTTONS`); none when there are none."""
    cat = engine_catalog(lang, report.engine)
    buttons = []
    for i, action in enumerate(report.actions, 1):
        if action.id not in plannable or len(buttons) >= MAX_PLAN_BUTTONS:
            continue
        value = plan_value(target, context, action.id, action.changes)
        if len(value) > B.VALUE_CHARS:  # would be cut: no button rather than a broken one
            continue
        title = action_text(cat, action)["title"]
        buttons.append(B.button(cat.t("slack_plan.button.plan", title=title), f"{PLAN_ACTION}:{i}", value))
    return [B.actions(PLAN_BLOCK, *buttons)] if buttons else []


# ----------------------------------------------------------------------------- the plan message


def mention(ident: str) -> str:
    """A user (`<@U..>`) or user group (`<!subteam^S..>`) mention; anything else as text."""
    if ident.startswith("S"):
        return f"<!subteam^{ident}>"
    if ident[:1] in ("U", "W"):
        return f"<@{ident}>"
    return esc(ident)


def mentions(cat: Catalog, ids: Sequence[str]) -> str:
    return cat.join(mention(i) for i in ids) if ids else esc(cat.t("slack_plan.nobody"))


def slack_date(at: datetime) -> str:
    """A date Slack shows in the reader's time zone, with the UTC time as the fallback."""
    return f"<!date^{int(at.timestamp())}^{{date_short_pretty}} {{time}}|{at.strftime('%Y-%m-%d %H:%M UTC')}>"


def restored(changes: Sequence[Change], cat: Catalog | None = None) -> str:
    """What a rollback puts back: `--max-model-len 4096 -> 8192; replicas 3 -> 2`, in `cat`'s
    language (English without one)."""
    words = change_words(cat) if cat is not None else None
    return "; ".join(replace(c, old=c.new, new=c.old).describe(words) for c in changes)


def _changes(changes: Sequence[Change], cat: Catalog) -> str:
    return "; ".join(change_text(cat, c) for c in changes)


def restored_of(cat: Catalog, plan: Any) -> str:
    """What a rollback of `plan` puts back, in words: the inverse of its changes; for a pool
    split, its flag changes (phase 2) or the objects it deletes (phase 1)."""
    if plan.action_id == S.ACTION:
        return S.undo_text(cat, plan, restored(S.flag_changes(plan), cat))
    return restored(plan.changes, cat)


def _stage_line(cat: Catalog, stored: StoredPlan, stage: str, params: dict[str, Any]) -> str:
    p = stored.plan
    users = params.pop("users", ())
    raw = {"users": mentions(cat, users)}
    values = {"needed": p.approvals_needed, "namespace": p.target.namespace, "count": len(stored.approvals),
              "rv": p.resource_version, "restored": restored_of(cat, p), "at": p.expires_at.strftime("%H:%M UTC"),
              **params}
    if "notes" in values:  # the watch's notes (`runbooks.model.phrases.Phrase`; text as stored before them)
        values["notes"] = cat.phrases(values["notes"]) or "-"
    if stage == "reverted" or "reverted" in values:  # the watch's reverts: who put the change back, when
        values["reverted"] = reverts_words(cat, values.get("reverted") or ()) or "-"
    return t(cat, f"slack_plan.stage.{stage}", raw=raw, **values)


def _buttons(cat: Catalog, stored: StoredPlan, stage: str, split: dict[str, Any] | None = None) -> list[Block]:
    p = stored.plan
    where = {"plan": p.id, "kind": p.target.kind, "namespace": p.target.namespace, "name": p.target.name,
             "cluster": p.target.cluster or "-"}
    if stage in _WAITING:
        text = (S.approve_text(cat, p, split, where) if split is not None
                else cat.t("slack_plan.confirm.approve_text", changes=_changes(p.changes, cat), **where))
        ask = B.confirm(cat.t("slack_plan.confirm.approve_title", plan=p.id), text,
                        cat.t("slack_plan.confirm.approve_yes"), cat.t("slack_plan.confirm.deny"), "primary")
        return [B.actions(f"gpumem_plan_{p.id}",
                          B.button(cat.t("slack_plan.button.approve"), APPROVE_ACTION, p.id, "primary", ask),
                          B.button(cat.t("slack_plan.button.reject"), REJECT_ACTION, p.id, "danger"))]
    if stage in _ON_CLUSTER:
        ask = B.confirm(cat.t("slack_plan.confirm.rollback_title", plan=p.id),
                        cat.t("slack_plan.confirm.rollback_text", restored=restored_of(cat, p), **where),
                        cat.t("slack_plan.confirm.rollback_yes"), cat.t("slack_plan.confirm.deny"), "danger")
        buttons = [B.button(cat.t("slack_plan.button.rollback"), ROLLBACK_ACTION, p.id, "danger", ask)]
        if split is not None and S.is_create(p) and stage in S.ROUTING_STAGES:
            buttons.insert(0, S.routing_button(cat, p, split))
        return [B.actions(f"gpumem_plan_{p.id}", *buttons)]
    if stage in _REPLAN:
        return [B.actions(f"gpumem_plan_{p.id}", B.button(cat.t("slack_plan.button.replan"), REPLAN_ACTION, p.id))]
    return []


def headline(cat: Catalog, stored: StoredPlan, stage: str, approvers: Sequence[str] | None = None,
             configured: bool = True) -> str:
    """What the message leads with, the change itself: "Approve `--max-model-len 8192 -> 4096` on
    llm/vllm-server? (needs 1 of: @ana, @bo)" while it waits, else "`...` on llm/vllm-server"; an
    object other than a Deployment is named KIND/NAME ("llm/inferenceservice/llama"); a
    plan with no change of its own (a pool split's phase 1) leads with its id and kind.
    `approvers`: who may still approve (None: not known, the question alone; empty: nobody may,
    said in words, `configured` telling whether the namespace names no approver at all)."""
    p = stored.plan
    tgt = p.target
    if not p.changes or p.action_id == S.ACTION:
        return t(cat, "slack_plan.title", plan=p.id, kind=tgt.kind, namespace=tgt.namespace, name=tgt.name)
    changes = "; ".join(B.code(change_text(cat, c)) for c in p.changes)
    if stage in _WAITING:
        if approvers is None:  # not known here: the status line under it says who may approve
            return t(cat, "slack_plan.headline.waiting_anyone", raw={"changes": changes}, namespace=tgt.namespace,
                     name=written_name(tgt))
        if not approvers:
            key = "waiting_no_other" if configured else "waiting_unconfigured"
            return t(cat, f"slack_plan.headline.{key}", raw={"changes": changes}, namespace=tgt.namespace,
                     name=written_name(tgt))
        who = cat.join(mention(a) for a in approvers)
        left = max(1, p.approvals_needed - len(stored.approvals))
        return t(cat, "slack_plan.headline.waiting", raw={"changes": changes, "approvers": who},
                 namespace=tgt.namespace, name=written_name(tgt), needed=left)
    return t(cat, "slack_plan.headline.other", raw={"changes": changes}, namespace=tgt.namespace, name=written_name(tgt))


def action_risks(cat: Catalog, plan: Any) -> list[str]:
    """The triage's own risk for the plan's action (`action.<id>.risk`, e.g. "requests longer
    than 4096 tokens get HTTP 400"), its values from the plan's one change; else the generic
    risk of each change kind (how the rollout goes)."""
    key = f"action.{plan.action_id}.risk"
    if cat.has(key):
        params: dict[str, Any] = {}
        if len(plan.changes) == 1:
            c = plan.changes[0]
            params = {"flag": getattr(c, "flag", None), "current": c.old, "target": c.new}
        # the engine's own words where the change's flag names one engine (TGI's 422 for length)
        params.update(engine_words(flag_engine(params.get("flag"))))
        text = cat.t(key, params)
        if "n/a" not in text:
            return [esc(text)]
    kinds = dict.fromkeys(c.kind for c in plan.changes)
    return [t(cat, f"slack_plan.risk_{k}") for k in kinds if cat.has(f"slack_plan.risk_{k}")]


def next_step(cat: Catalog, stored: StoredPlan, stage: str) -> str:
    """What to do next once the plan no longer waits (in place of its expiry)."""
    tgt = stored.plan.target
    kind = "" if tgt.kind in ("Deployment", "HorizontalPodAutoscaler") else f"{tgt.kind.lower()}/"  # NAMESPACE/KIND/NAME
    return t(cat, f"slack_plan.next.{stage}", raw={"triage": B.code(f"/gpumem triage {tgt.namespace}/{kind}{tgt.name}")},
             plan=stored.plan.id)


def plan_message(stored: StoredPlan, lang: str, stage: str, split: dict[str, Any] | None = None,
                 **params: Any) -> Message:
    """The plan message at `stage` (`STAGES`); `params` fill its status line (`users`: the ids it
    names; `updated`, `available`, `replicas`, `minutes` while watching; `notes`; `reason`; `symptoms`: the
    watch's Prometheus reading, shown under the status line while watching and at the result;
    `reverted`: the watch's reverts, `bot.actuator.watch.Reverted`, at stage `reverted`).
    `split`: a pool split's template values (`bot.service.split_pools.template_of`), shown in place
    of the change list; a split plan without them shows no object at all, only its id and kind."""
    if stage not in STAGES:
        raise ValueError(f"unknown plan stage {stage!r}")
    cat = Catalog.load(lang)
    p = stored.plan
    tgt = p.target
    approvers = params.pop("approvers", None)
    configured = bool(params.pop("approvers_configured", True))
    title = headline(cat, stored, stage, None if approvers is None else tuple(approvers), configured)
    symptoms = params.pop("symptoms", None)
    line = _stage_line(cat, stored, stage, dict(params))
    blocks: list[Block] = [B.section(f"{_EMOJI[stage]} *{title}*\n{line}")]
    if symptoms is not None and stage in _ON_CLUSTER:
        blocks.append(B.context(watch_metrics_line(cat, symptoms)))
    blocks.append(B.fields([
        (cat.t("slack_plan.field.target"), esc(f"{tgt.kind} {tgt.namespace}/{tgt.name}")),
        (cat.t("slack_plan.field.cluster"), esc(tgt.cluster or "-")),
        (cat.t("slack_plan.field.version"), t(cat, "slack_plan.field.version_value", rv=p.resource_version,
                                              generation=p.generation)),
        (cat.t("slack_plan.field.requested_by"), mention(p.requested_by)),
        ((cat.t("slack_plan.field.expires"), slack_date(p.expires_at)) if stage in _WAITING
         else (cat.t("slack_plan.field.next"), next_step(cat, stored, stage))),
        (cat.t("slack_plan.field.approvals"), t(cat, "slack_plan.field.approvals_value", count=len(stored.approvals),
                                                needed=p.approvals_needed)),
    ]))
    if p.action_id == S.ACTION and split is not None:
        blocks += S.sections(p, split, lang, stage, mention)
        risks = S.risks(cat, p, split)
    else:
        blocks += B.text_sections(cat.t("slack_plan.changes"), B.bullets(B.code(change_text(cat, c)) for c in p.changes))
        blocks += preview_sections(stored, lang)
        risks = action_risks(cat, p)
    blocks += B.text_sections(cat.t("slack_plan.risk"), risks)
    if stage != "reverted":  # another writer put the old values back: no rollback of gpumem's is left
        blocks += B.text_sections(cat.t("slack_plan.rollback"),
                                  [t(cat, "slack_plan.rollback_value", restored=restored_of(cat, p), plan=p.id)])
    blocks.append(B.context(t(cat, "slack_plan.footer", raw={"plan": B.code(p.id), "action": B.code(p.action_id),
                                                          "hash": B.code(p.content_hash[:12])})))
    blocks += _buttons(cat, stored, stage, split if p.action_id == S.ACTION else None)
    return B.message(f"{_EMOJI[stage]} " + cat.t("slack.title_line", title=title, line=line), blocks)


def watch_metrics_line(cat: Catalog, symptoms: Any) -> str:
    """The watch's Prometheus reading at its last look (`bot.actuator.watch.Symptoms`)."""
    key = "slack_plan.watch_metrics_unread" if symptoms.error else "slack_plan.watch_metrics"
    return t(cat, key, **symptoms_values(cat, symptoms))


#: pod and node names a plan message lists before "… (+N)"
PREVIEW_NAMES = 4


def preview_sections(stored: StoredPlan, lang: str) -> list[Block]:
    """The predicted budget, the blast radius and, first, what a reviewer must not miss (a stuck
    rollout, pods left Pending, an engine that would not start); none for a plan stored before
    previews existed."""
    if stored.plan.preview is None:
        return []
    cat = Catalog.load(lang)
    words = preview_words(stored.plan.preview, lang, shown=PREVIEW_NAMES)
    blocks = [B.section(B.clip(f":warning: *{esc(w)}*", B.SECTION_CHARS)) for w in words.warnings]
    blocks += B.text_sections(words.budget_title, B.bullets(esc(line) for line in words.budget))
    blocks += B.text_sections(cat.t("plan_preview.blast_title"), B.bullets(esc(line) for line in words.blast))
    return blocks


def patch_message(stored: StoredPlan, lang: str) -> Message | None:
    """The exact patch a plan applies, as a thread reply under its message: the operations in
    order (the `test` ones are its precondition), secret values masked (`--api-key`, a token in
    an env value); its content hash is the one Approve binds to. None for a pool split's
    phase 1, whose objects are listed without their bodies.

    >>> from datetime import UTC, datetime
    >>> from runbooks.remediation.plan import Plan, PlanTarget
    >>> t0 = datetime(2026, 12, 1, tzinfo=UTC)
    >>> ops = ({"op": "test", "path": "/spec/template/spec/containers/0/args", "value": ["--api-key", "sk-1", "--max-num-seqs", "128"]},
    ...        {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": ["--api-key", "sk-1", "--max-num-seqs", "64"]})
    >>> p = Plan("p-1", PlanTarget(None, "llm", "Deployment", "v"), "x", (), "1", 1, ops, "application/json-patch+json", "U1", t0, t0)
    >>> text = patch_message(StoredPlan(p, "proposed", None, None, (), t0), "en")["blocks"][0]["text"]["text"]
    >>> "sk-1" in text, '"--max-num-seqs", "64"' in text
    (False, True)
    """
    p = stored.plan
    if S.is_create(p):
        return None
    cat = Catalog.load(lang)
    lines = [json.dumps(masked_op(op), ensure_ascii=False) for op in p.patch]
    body = "\n".join(lines)
    limit = B.SECTION_CHARS - 400
    clipped = len(body) > limit
    if clipped:
        body = body[:limit].rsplit("\n", 1)[0]
    head = t(cat, "slack_plan.patch_title", patch_type=p.patch_type, hash=p.content_hash[:12])
    text = f"{head}\n```{body}```" + ("\n" + t(cat, "slack_plan.patch_clipped", plan=p.id) if clipped else "")
    return B.message(head, [B.section(text)])


def managers_message(stored: StoredPlan, lang: str) -> Message | None:
    """The thread reply under a plan whose object something else manages: who (with the
    evidence), what will happen to a patch, whether Approve will write it; None when nothing
    but kubectl manages it. The change for its source of truth follows as a file
    (`bot.render.source_of_truth`)."""

    p = stored.plan
    if not p.managers:
        return None
    cat = Catalog.load(lang)
    lines = plan_manager_lines(cat, [m.to_json() for m in p.managers], p.target.namespace)
    text = "\n".join(lines)
    return B.message(text, [B.section(":warning: " + esc(text))])


def rollback_note_message(stored: StoredPlan, lang: str) -> Message:
    """The thread reply posted before the write: what a rollback restores, who, why."""
    cat = Catalog.load(lang)
    p = stored.plan
    text = t(cat, "slack_plan.note", raw={"approvers": mentions(cat, stored.approvals),
                                          "requester": mention(p.requested_by)},
             plan=p.id, restored=restored_of(cat, p), target=str(p.target), origin=p.origin or p.action_id)
    return B.message(text, [B.section(":memo: " + text)])


def refusal_message(lang: str, key: str, /, **params: Any) -> Message:
    """An ephemeral refusal (`slack_plan.refused.<key>`); `approvers` are ids, mentioned."""
    cat = Catalog.load(lang)
    approvers = params.pop("approvers", ())
    if params.get("verb"):
        params["verb"] = cat.t(f"slack_plan.verb.{params['verb']}")
    params = plan_states(cat, params)
    text = t(cat, f"slack_plan.refused.{key}", raw={"approvers": mentions(cat, approvers)}, **params)
    return B.message(text, [B.section(f":warning: {text}")])


def error_reason(cat: Catalog, code: str, params: dict[str, Any], fallback: str) -> str:
    """The plan-specific wording of an error code; for a pool split's codes without one of their
    own, the terminal's wording without its `gpumem plan:` lead (what to change is the same
    option in `/gpumem plan`); else `fallback` (the shared error line).

    >>> error_reason(Catalog.load("en"), "split_no_gpu", {}, "-")
    'which GPU does the Deployment run on? Its nodeSelector names none; give --gpu NAME (e.g. A100-80GB).'
    """
    key = f"slack_plan.error.{code}"
    if cat.has(key):
        return cat.t(key, plan_states(cat, params))
    if code in ("managed_gitops", "managed_controller"):  # the shared refusal, without the terminal's lead
        return _CLI_LEAD.sub("", fallback, count=1)
    if code.startswith("split_") and code not in _VALUES_INSIDE and cat.has(f"remediate_cli.error.{code}"):
        return _CLI_LEAD.sub("", cat.t(f"remediate_cli.error.{code}", plan_states(cat, params)), count=1)
    return fallback


#: codes whose terminal wording prints object values (a clone's env among them): never in Slack
_VALUES_INSIDE = frozenset({"split_changed_after_apply"})
#: how the terminal's error lines begin (`gpumem plan: `, `gpumem rollback：`)
_CLI_LEAD = re.compile(r"^gpumem(?: [a-z]+)?[:：]\s*")


def differences_text(rows: Sequence[dict[str, Any]], limit: int = 1500) -> str:
    """A rollback's refusal on one line (`bot.render.remediation.differences_lines`), clipped.

    >>> differences_text([{"path": "/a/args", "before": ["x", "--n=1"], "gpumem": ["x", "--n=2"], "now": ["x", "--n=3"]}])
    '/a/args/1: --n=1 / --n=2 / --n=3'
    """
    return B.clip("; ".join(differences_lines(rows)), limit)


def plans_message(plans: Sequence[StoredPlan], lang: str) -> Message:
    """`/gpumem plans`: the open plans, newest first (ephemeral)."""
    cat = Catalog.load(lang)
    title = cat.t("slack_plan.plans.title", count=len(plans))
    if not plans:
        return B.message(title, [B.section(f"*{esc(title)}*\n{esc(cat.t('slack_plan.plans.none'))}")])
    lines = []
    for s in plans:
        p = s.plan
        state = cat.t(f"remediate_cli.state.{s.state}")
        lines.append("• " + t(cat, "slack_plan.plans.line", raw={"user": mention(p.requested_by),
                                                                 "at": slack_date(p.expires_at)},
                              plan=p.id, state=state, kind=p.target.kind, namespace=p.target.namespace,
                              name=p.target.name, changes=_changes(p.changes, cat)))
    blocks = B.text_sections(title, lines)[: B.MAX_BLOCKS]
    return B.message(title, blocks)
