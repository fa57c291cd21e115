"""A pool split's plan in Slack (`bot.service.split_pools`): what the plan message shows in place
of a patch, and the phase-1 message's "Routing confirmed: plan phase 2" button.

Phase 1 lists the objects it creates by kind and name with the few values a reviewer checks
(replicas, the long pool's context length and concurrency, the Service's ports and selector),
the routing step (services and threshold), the runbook's pool-split template and its
routing-rollback template, all from the template values the plan recorded. Nothing here reads an
object's body beyond those fields: the clone carries the original's env (tokens, keys), which
never goes to Slack. Phase 2 shows its flag changes and who confirmed the routing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bot.render import slack_blocks as B
from bot.render.i18n import Catalog
from bot.render.slack_blocks import Block
from bot.render.slack_triage import t
from bot.render.wording import change_text, length_status
from runbooks.model.changes import Change
from runbooks.remediation.plan import Plan
from runbooks.remediation.split import ACTION, CREATE_OBJECTS

#: the phase-1 message's button that records the routing and asks for phase 2
ROUTING_ACTION = "gpumem_plan_routing"
#: stages of a phase-1 message whose objects are on the cluster and watched
ROUTING_STAGES = ("held", "symptoms_remain")
#: where a difference's values are not shown in Slack: the pod template (env, args, volumes)
_WITHHELD = ("/spec/template/spec",)


def is_create(plan: Plan) -> bool:
    return plan.patch_type == CREATE_OBJECTS


def creates(plan: Plan) -> list[Mapping[str, Any]]:
    return [op for op in plan.patch if op.get("op") == "create"] if is_create(plan) else []


def flag_changes(plan: Plan) -> list[Change]:
    """A split plan's changes that edit a flag (phase 2); the others name objects or the routing."""
    return [c for c in plan.changes if c.kind != ACTION]


def undo_text(cat: Catalog, plan: Plan, restored: str) -> str:
    """What a rollback of a split plan puts back: phase 1 deletes what it created (Service first),
    phase 2 restores the single pool's flags (`restored`, made from its flag changes)."""
    if is_create(plan):
        objects = cat.join(f"{op.get('kind')}/{op.get('name')}" for op in reversed(creates(plan)))
        return cat.t("slack_split.undo1", objects=objects)
    return restored


def _labels(labels: Mapping[str, Any] | None) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) or "-"


def _ports(spec: Mapping[str, Any]) -> str:
    return ", ".join(f"{p.get('port')}->{p.get('targetPort', p.get('port'))}" for p in spec.get("ports") or []
                     if isinstance(p, Mapping)) or "-"


def object_lines(cat: Catalog, plan: Plan, split: Mapping[str, Any]) -> list[str]:
    """One line per object phase 1 creates: kind and name, then only the fields a reviewer checks."""
    ns = plan.target.namespace
    long = split["long"]
    length_flag, seqs_flag = split["flags"]
    lines = []
    for op in creates(plan):
        spec = (op.get("value") or {}).get("spec") or {}
        if op.get("kind") == "Deployment":
            pod_labels = ((spec.get("template") or {}).get("metadata") or {}).get("labels")
            lines.append(t(cat, "slack_split.deployment", namespace=ns, name=op.get("name"),
                           replicas=spec.get("replicas"), length_flag=length_flag, length=str(long["max_model_len"]),
                           seqs_flag=seqs_flag, seqs=str(long["max_num_seqs"]), labels=_labels(pod_labels)))
        else:
            lines.append(t(cat, "slack_split.service", namespace=ns, name=op.get("name"), ports=_ports(spec),
                           selector=_labels(spec.get("selector"))))
    return B.bullets(lines)


def _line(cat: Catalog, key: str, **params: Any) -> str:
    """A line of the terminal's template (`split_pools.*`), without its indent, escaped."""
    return B.esc(cat.t(key, params).strip())


def _length_basis(cat: Catalog, split: Mapping[str, Any], target: str) -> str:
    basis = split["long"]["length_basis"]
    if basis == "no_profile":
        return cat.t("slack_split.length_no_profile", target=target)
    profile = split.get("profile") or {}
    return cat.t(f"split_pools.length_basis.{basis}", p99=profile.get("p99_total_tokens"),
                 single=split["single"]["max_model_len"])


def template_lines(cat: Catalog, plan: Plan, split: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """The runbook's pool-split template and its routing-rollback template, filled."""
    ns, long, short, single = split["namespace"], split["long"], split["short"], split["single"]
    length_flag, seqs_flag = split["flags"]
    phase = int(split["phase"])
    target = f"{plan.target.namespace}/{plan.target.name}"
    when = cat.t(f"split_pools.short_when.phase{phase}", single=single["max_model_len"],
                 allowance=short.get("output_allowance"), threshold=split["threshold"])
    pools = [
        _line(cat, "split_pools.short_service", namespace=ns, service=short["service"], deployment=short["deployment"],
              replicas=short["replicas"]),
        _line(cat, "split_pools.long_service", namespace=ns, service=long["service"], deployment=long["deployment"],
              replicas=long["replicas"]),
        _line(cat, "split_pools.max_model_len", flag=length_flag, short=short["max_model_len"], short_when=when,
              long=long["max_model_len"], long_basis=_length_basis(cat, split, target)),
        _line(cat, "split_pools.max_num_seqs" + ("_engine" if split.get("kv_pool_basis") == "engine_anchored" else ""),
              flag=seqs_flag, short=short["max_num_seqs"],
              single=single["max_num_seqs"], long=long["max_num_seqs"], kv_tokens=long["kv_tokens"],
              gpu=split.get("gpu")),
        _line(cat, "split_pools.gpu_quota", resource=split.get("gpu_resource"), per_pod=long["gpus_per_pod"],
              short_replicas=short["replicas"], short=short["gpu_quota"], long_replicas=long["replicas"],
              long=long["gpu_quota"]),
    ]
    profile = split.get("profile")
    if profile:
        share = profile.get("long_share")
        pools.append(t(cat, "slack_split.profile", source=profile.get("source"), requests=profile.get("requests"),
                       p99=profile.get("p99_total_tokens"), share="-" if share is None else f"{share:.0%}"))
    pools.append(t(cat, "slack_split.rollback", phase1=split["phase1"], long=long["deployment"],
                   short=short["service"],
                   phase2=split["plan"] if phase == 2 else cat.t("split_pools.phase2_plan")))
    default = cat.t("split_pools.default")
    route = [
        _line(cat, "split_pools.current_long", namespace=ns, long=long["service"]),
        _line(cat, "split_pools.current_short", namespace=ns, short=short["service"]),
        _line(cat, "split_pools.switch_back", long=long["deployment"], short=short["service"],
              length_status=length_status(length_flag)),
        _line(cat, "split_pools.single_flags", length_flag=length_flag,
              length=default if single["max_model_len"] is None else single["max_model_len"], seqs_flag=seqs_flag,
              seqs=default if single["max_num_seqs"] is None else single["max_num_seqs"],
              replicas=single["replicas"], short=short["deployment"]),
        _line(cat, "split_pools.watch", minutes=round(float(split.get("watch_s") or 0) / 60, 1)),
    ]
    return B.bullets(pools), B.bullets(route)


def _routing(cat: Catalog, split: Mapping[str, Any], mention: Any) -> str:
    ns, long, short = split["namespace"], split["long"], split["short"]
    if int(split["phase"]) == 2:
        return t(cat, "slack_split.routing_confirmed", raw={"who": mention(split.get("routing_confirmed_by") or "")},
                 threshold=split["threshold"], namespace=ns, long=long["service"], short=short["service"])
    return t(cat, "slack_split.routing", threshold=split["threshold"], namespace=ns, long=long["service"],
             short=short["service"], port=split.get("port") or "-")


def _next(cat: Catalog, split: Mapping[str, Any], stage: str, mention: Any) -> str | None:
    ns, long, short = split["namespace"], split["long"], split["short"]
    values = {"threshold": split["threshold"], "namespace": ns, "long": long["service"], "short": short["service"],
              "deployment": short["deployment"]}
    if int(split["phase"]) == 2:
        if stage in ("proposed", "partly_approved"):
            return t(cat, "slack_split.next2", raw={"who": mention(split.get("routing_confirmed_by") or "")},
                     **values)
        return None
    if stage in ROUTING_STAGES:
        return t(cat, "slack_split.next1_applied", **values)
    if stage in ("proposed", "partly_approved", "approved", "dry_run_ok", "watching"):
        return t(cat, "slack_split.next1_proposed", **values)
    return None


def sections(plan: Plan, split: Mapping[str, Any], lang: str, stage: str, mention: Any) -> list[Block]:
    """The blocks a split plan shows in place of the change list: objects (phase 1) or flag
    changes (phase 2), the routing, both runbook templates and the next step."""
    cat = Catalog.load(lang)
    phase = int(split["phase"])
    title = t(cat, f"slack_split.title{phase}", long=split["long"]["deployment"], short=split["short"]["deployment"])
    blocks: list[Block] = [B.section(f"*{title}*")]
    if phase == 1:
        blocks += B.text_sections(cat.t("slack_split.objects", short=split["short"]["deployment"]),
                                  object_lines(cat, plan, split))
    else:
        blocks += B.text_sections(cat.t("slack_plan.changes"),
                                  B.bullets(B.code(change_text(cat, c)) for c in flag_changes(plan)))
    blocks += B.text_sections(cat.t(f"slack_split.routing_title{phase}"), [_routing(cat, split, mention)])
    pools, route = template_lines(cat, plan, split)
    blocks += B.text_sections(cat.t("slack_split.template_title"), pools)
    blocks += B.text_sections(cat.t("slack_split.route_template_title"), route)
    step = _next(cat, split, stage, mention)
    if step:
        blocks.append(B.context(step))
    return blocks


def risks(cat: Catalog, plan: Plan, split: Mapping[str, Any]) -> list[str]:
    if is_create(plan):
        long = split["long"]
        return [t(cat, "slack_split.risk1", objects=len(creates(plan)), gpus=long["gpu_quota"],
                  resource=split.get("gpu_resource"), short=split["short"]["deployment"]),
                t(cat, "slack_split.not_cloned", short=split["short"]["deployment"], long=long["deployment"])]
    length_flag, _ = split["flags"]
    return [t(cat, "slack_split.risk2", short=split["short"]["deployment"], length_flag=length_flag,
              length_status=length_status(length_flag),
              length=str(split["short"]["max_model_len"]), threshold=split["threshold"])]


def approve_text(cat: Catalog, plan: Plan, split: Mapping[str, Any], where: Mapping[str, Any]) -> str:
    """The Approve dialog of a split plan: phase 1 creates objects beside the original; phase 2
    writes the original's flags."""
    if is_create(plan):
        objects = cat.join(f"{op.get('kind')}/{op.get('name')}" for op in creates(plan))
        return cat.t("slack_split.confirm_approve1", objects=objects, short=split["short"]["deployment"], **where)
    changes = "; ".join(change_text(cat, c) for c in flag_changes(plan))
    return cat.t("slack_plan.confirm.approve_text", changes=changes, **where)


def routing_button(cat: Catalog, plan: Plan, split: Mapping[str, Any]) -> Any:
    """"Routing confirmed: plan phase 2", behind a confirm dialog naming the threshold and services;
    it carries only the phase-1 plan id."""
    ns = split["namespace"]
    ask = B.confirm(cat.t("slack_split.confirm_title", plan=plan.id),
                    cat.t("slack_split.confirm_text", threshold=split["threshold"], namespace=ns,
                          long=split["long"]["service"], short=split["short"]["service"]),
                    cat.t("slack_split.confirm_yes"), cat.t("slack_plan.confirm.deny"), "primary")
    return B.button(cat.t("slack_split.button"), ROUTING_ACTION, plan.id, "primary", ask)


def differences_text(rows: Sequence[Mapping[str, Any]], lang: str, limit: int = 1500) -> str:
    """A phase-1 rollback's refusal (what someone changed in the objects it created) for Slack:
    object, field, gpumem / now; values inside the pod template (env, args) are withheld, since
    the clone carries the original's env."""
    cat = Catalog.load(lang)
    out = []
    for row in rows:
        path = str(row.get("path") or "")
        where = f"{row.get('object')} {path}".strip()
        if any(path.startswith(p) for p in _WITHHELD):
            out.append(cat.t("slack_split.difference_withheld", where=where))
        else:
            out.append(cat.t("slack_split.difference", where=where, gpumem=_short(row.get("gpumem")),
                             now=_short(row.get("now"))))
    return B.clip("; ".join(out), limit)


def _short(value: Any) -> str:
    if isinstance(value, (dict, list)):
        return "(" + type(value).__name__ + ")"
    return B.clip(str(value), 80)
