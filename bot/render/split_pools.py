"""A pool split's plan in words: the objects phase 1 creates (never their full bodies, which hold
the original's env), the runbook's pool-split and routing-rollback templates filled, and the
next step (the routing, named with its services and threshold)."""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog
from bot.render.wording import length_status
from runbooks.remediation.plan import Plan
from runbooks.remediation.split import CREATE_OBJECTS


def _labels(labels: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def object_lines(plan: Plan, lang: str) -> list[str]:
    """In place of a patch: what phase 1 creates, one line per object."""
    cat = Catalog.load(lang)
    ns = plan.target.namespace
    lines = [cat.t("split_pools.objects")]
    for op in plan.patch:
        body = op.get("value") or {}
        spec = body.get("spec") or {}
        if op.get("kind") == "Deployment":
            pod = (spec.get("template") or {}).get("spec") or {}
            images = ", ".join(str(c.get("image")) for c in pod.get("containers") or [])
            lines.append(cat.t("split_pools.deployment", namespace=ns, name=op.get("name"),
                               replicas=spec.get("replicas"), selector=_labels((spec.get("selector") or {})
                                                                               .get("matchLabels") or {}),
                               images=images))
        else:
            ports = ", ".join(f"{p.get('port')}->{p.get('targetPort', p.get('port'))}" for p in spec.get("ports") or [])
            lines.append(cat.t("split_pools.service", namespace=ns, name=op.get("name"),
                               selector=_labels(spec.get("selector") or {}), ports=ports or "-"))
    lines.append(cat.t("split_pools.full"))
    return lines


def is_create(plan: Plan) -> bool:
    return plan.patch_type == CREATE_OBJECTS


def template_text(t: dict[str, Any], state: str, lang: str) -> str:
    """The runbook's pool-split and routing-rollback templates, filled, and the next step."""
    cat = Catalog.load(lang)
    ns, long, short, single = t["namespace"], t["long"], t["short"], t["single"]
    length_flag, seqs_flag = t["flags"]
    phase = int(t["phase"])
    port = t.get("port") or "-"
    lines = [cat.t(f"split_pools.title{phase}", long=long["deployment"], short=short["deployment"],
                   who=t.get("routing_confirmed_by"))]
    lines.append(cat.t("split_pools.template"))
    lines.append(cat.t("split_pools.short_service", namespace=ns, service=short["service"],
                       deployment=short["deployment"], replicas=short["replicas"]))
    lines.append(cat.t("split_pools.long_service", namespace=ns, service=long["service"],
                       deployment=long["deployment"], replicas=long["replicas"]))
    lines.append(cat.t("split_pools.routing", threshold=t["threshold"], long=long["service"], short=short["service"],
                       port=port))
    profile = t.get("profile") or {}
    basis = cat.t(f"split_pools.length_basis.{long['length_basis']}", p99=profile.get("p99_total_tokens"),
                  single=single["max_model_len"])
    when = cat.t(f"split_pools.short_when.phase{phase}", single=single["max_model_len"],
                 allowance=short.get("output_allowance"), threshold=t["threshold"])
    lines.append(cat.t("split_pools.max_model_len", flag=length_flag, short=short["max_model_len"], short_when=when,
                       long=long["max_model_len"], long_basis=basis))
    lines.append(cat.t("split_pools.max_num_seqs" + ("_engine" if t.get("kv_pool_basis") == "engine_anchored" else ""),
                       flag=seqs_flag, short=short["max_num_seqs"],
                       single=single["max_num_seqs"], long=long["max_num_seqs"], kv_tokens=long["kv_tokens"],
                       gpu=t.get("gpu")))
    lines.append(cat.t("split_pools.gpu_quota", resource=t.get("gpu_resource"), per_pod=long["gpus_per_pod"],
                       short_replicas=short["replicas"], short=short["gpu_quota"], long_replicas=long["replicas"],
                       long=long["gpu_quota"]))
    lines.append(cat.t("split_pools.rollback", phase1=t["phase1"], long=long["deployment"], short=short["service"],
                       phase2=t["plan"] if phase == 2 else cat.t("split_pools.phase2_plan")))
    lines.append(cat.t("split_pools.route_template"))
    lines.append(cat.t("split_pools.current_long", namespace=ns, long=long["service"]))
    lines.append(cat.t("split_pools.current_short", namespace=ns, short=short["service"]))
    lines.append(cat.t("split_pools.switch_back", long=long["deployment"], short=short["service"],
                       length_status=length_status(length_flag)))
    default = cat.t("split_pools.default")
    lines.append(cat.t("split_pools.single_flags", length_flag=length_flag,
                       length=default if single["max_model_len"] is None else single["max_model_len"],
                       seqs_flag=seqs_flag, seqs=default if single["max_num_seqs"] is None else single["max_num_seqs"],
                       replicas=single["replicas"],
                       short=short["deployment"]))
    lines.append(cat.t("split_pools.watch", minutes=round(float(t.get("watch_s") or 0) / 60, 1)))
    if phase == 1:
        lines.append(cat.t("split_pools.not_cloned", short=short["deployment"], long=long["deployment"]))
    if phase == 1 and state in ("applied", "watched"):
        nxt = "next1_applied"
    elif phase == 1 and state in ("proposed", "approved"):
        nxt = "next1_proposed"
    elif phase == 2 and state in ("proposed", "approved"):
        nxt = "next2"
    else:
        nxt = None
    if nxt:
        lines.append(cat.t(f"split_pools.{nxt}", plan=t["plan"], threshold=t["threshold"], namespace=ns,
                           long=long["service"], short=short["service"], deployment=short["deployment"],
                           who=t.get("routing_confirmed_by")))
    return "\n".join(lines) + "\n"
