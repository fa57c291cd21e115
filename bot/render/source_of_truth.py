"""A plan's change rendered for the object's source of truth, when something else manages it:
a kustomize JSON6902 patch (a plain Deployment, Argo CD or a Flux Kustomization), a Helm values
note (a Helm release or a Flux HelmRelease: the chart's values path is not known, so it says so
and gives the rendered container field), or the owner's field (a KServe InferenceService's
`spec.predictor.model.args`). `gpumem plan --out FILE` writes it; Slack posts it as a file in the
plan's thread. YAML, with the values as JSON (valid YAML); secrets masked like the plan's patch.
"""

from __future__ import annotations

import json
from typing import Any

from bot.render.remediation import masked_op
from runbooks.model.changes import SetArg
from runbooks.remediation.plan import Plan

#: where a KServe InferenceService keeps the model server's args
KSERVE_ARGS = "spec.predictor.model.args"
_GROUPS = {"Deployment": ("apps", "v1"), "StatefulSet": ("apps", "v1"),
           "HorizontalPodAutoscaler": ("autoscaling", "v2"),
           "InferenceService": ("serving.kserve.io", "v1beta1"), "LeaderWorkerSet": ("leaderworkerset.x-k8s.io", "v1")}


def filename(plan: Plan) -> str:
    return f"gpumem-{plan.id}-{plan.target.name}.yaml"


def _ops(plan: Plan) -> list[dict[str, Any]]:
    return [masked_op(op) for op in plan.patch if op.get("op") != "test"]


def _kustomize(plan: Plan, lines: list[str]) -> list[str]:
    t = plan.target
    group, version = _GROUPS.get(t.kind, ("", "v1"))
    lines += ["# A kustomize JSON6902 patch. In the kustomization.yaml that renders this object:",
              "#   patches:",
              f"#     - path: {filename(plan)}",
              f"#       target: {{group: {group}, version: {version}, kind: {t.kind}, name: {t.name}, "
              f"namespace: {t.namespace}}}",
              "# (gpumem's `test` operations on the live values are left out: git may hold other values.)"]
    lines += [f"- {json.dumps(op, ensure_ascii=False)}" for op in _ops(plan)]
    return lines


def _helm(plan: Plan, lines: list[str]) -> list[str]:
    lines += ["# A Helm release renders this object: the chart's values path for these fields is not known",
              "# to gpumem. Set them through the chart's values (e.g. the server args, replicas), so that the",
              "# rendered object carries these JSON-patch values at these paths:"]
    lines += [f"#   {op.get('path')}: {json.dumps(op.get('value'), ensure_ascii=False)}" for op in _ops(plan)]
    lines += ["# As a kustomize post-render patch instead:"]
    return _kustomize(plan, lines)


def _flag_args(plan: Plan) -> tuple[list[str], list[str]]:
    """The server flags the plan sets, as args (`--max-num-seqs=64`; a switch bare), and those it removes."""
    sets, removes = [], []
    for c in plan.changes:
        if not isinstance(c, SetArg) or not c.flag:
            continue
        flag = "--" + str(c.flag).lstrip("-")
        if c.new is None or c.new is False:
            removes.append(flag)
        else:
            sets.append(flag if c.new is True else f"{flag}={c.new}")
    return sets, removes


def _owner(plan: Plan, owner: dict[str, Any], lines: list[str]) -> list[str]:
    kind, name = owner.get("owner_kind") or "?", owner.get("name") or "?"
    sets, removes = _flag_args(plan)
    if kind == "InferenceService" and (sets or removes):
        lines += [f"# {kind} {plan.target.namespace}/{name} writes this Deployment: change its {KSERVE_ARGS}",
                  "# (merge: replace each flag where the args have it, add it where not"
                  + (f"; remove {', '.join(removes)}" if removes else "") + "):",
                  f"apiVersion: {owner.get('api_version') or 'serving.kserve.io/v1beta1'}",
                  f"kind: {kind}",
                  f"metadata: {{name: {name}, namespace: {plan.target.namespace}}}",
                  "spec:", "  predictor:", "    model:",
                  f"      args: {json.dumps(sets, ensure_ascii=False)}"]
        return lines
    lines += [f"# {kind} {plan.target.namespace}/{name} writes this object: gpumem does not know which of its",
              "# fields makes these values; change it so that the object it writes carries them:"]
    lines += [f"#   {op.get('path')}: {json.dumps(op.get('value'), ensure_ascii=False)}" for op in _ops(plan)]
    return lines


def source_file(plan: Plan) -> str:
    """The plan's change for the source of truth of its object, as a YAML file."""
    t = plan.target
    changes = "; ".join(c.describe() for c in plan.changes)
    lines = [f"# gpumem plan {plan.id}: {t.namespace}/{t.kind}/{t.name} (made against resourceVersion "
             f"{plan.resource_version})", f"# changes: {changes}"]
    managers = [m.to_json() for m in plan.managers]
    for m in managers:
        lines.append(f"# managed by: {m.get('kind')} {m.get('name')} ({m.get('evidence')})")
    owner = next((m for m in managers if m.get("kind") == "controller"), None)
    if owner is not None:
        return "\n".join(_owner(plan, owner, lines)) + "\n"
    if any(m.get("kind") == "helm" or (m.get("kind") == "flux" and m.get("owner_kind") == "HelmRelease")
           for m in managers):
        return "\n".join(_helm(plan, lines)) + "\n"
    return "\n".join(_kustomize(plan, lines)) + "\n"
