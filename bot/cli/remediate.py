"""`gpumem plan`, `gpumem apply`, `gpumem rollback`: approval-free remediation for an operator with
their own kubeconfig (their RBAC is the guard), through every actuator guard (`bot.service.remediate`)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from bot.cli.guard import live_guard
from bot.cli.watch_progress import WatchProgress, is_live
from bot.grammar.requests import ApplyRequest, PlanRequest, RollbackRequest
from bot.grammar.slack import split_workload
from bot.render import remediation as render
from bot.render import remediation_outcome as outcome
from bot.render import source_of_truth
from bot.render import split_pools as split_render
from bot.render.i18n import Catalog
from bot.service import remediate, split_pools
from bot.service.deps import Deps
from bot.service.exits import EXIT_CAUSE, EXIT_OK, EXIT_USAGE
from bot.service.plan_ids import known_plan
from bot.service.reconcile import reconcile_for_cli
from bot.service.records import open_store
from bot.service.watch_metrics import symptoms_reader
from runbooks.model.errors import ChangedAfterApply


def run(request: PlanRequest | ApplyRequest | RollbackRequest, lang: str, deps: Deps, *, clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep, now: Callable[[], datetime] | None = None) -> int:
    """Run `gpumem plan`, `apply` or `rollback`; the watch after `apply` keeps time with `clock`,
    waits with `sleep` and stamps a pipe's lines with `now()` (UTC)."""
    if request.verb in ("apply", "rollback"):  # an unknown id is refused before any cluster is named or read

        ids = open_store(request, deps)
        try:
            known_plan(ids, request.plan)
        finally:
            ids.close()
    if request.verb in ("apply", "rollback") and not request.yes:
        print(Catalog.load(lang).t("remediate_cli.needs_yes", verb=request.verb, plan=request.plan), file=sys.stderr)
        return EXIT_USAGE

    with live_guard(lang) as guard:  # no cluster, a broken config: one line and exit 2, never a traceback
        settings = deps.settings
        cluster = settings.cluster(request.context)
        kubeconfig = request.kubeconfig or (cluster.kubeconfig if cluster else None)
        context = request.context or (cluster.context if cluster else None)
        writer = remediate.writer_for(kubeconfig, context)
    if guard.exit_code:
        return guard.exit_code
    store = open_store(request, deps)
    watched, elapsed, window = None, 0.0, 0
    try:
        actor = remediate.operator()
        if request.verb == "plan":
            namespace, kind, name = split_workload(request.target, settings.default_namespace)
            kind = request.kind if kind == "Deployment" else kind  # NAMESPACE/NAME with --kind StatefulSet
            planned = split_pools.request_from_args(request, namespace, name, cluster=request.context, requested_by=actor,
                                                    origin="cli", watch_s=settings.remediation.watch_s)
            if planned is None:
                planned = remediate.plan_request(store, namespace, name, kind=kind, cluster=request.context,
                                                 sets=request.set, replicas=request.replicas, container=request.container,
                                                 action=request.action, requested_by=actor, origin="cli",
                                                 other=remediate.explicit_changes(request), hpa_max=request.hpa_max)
            stored = split_pools.make_plan(store, writer, planned, settings.remediation.policy,
                                           argocd_namespace=settings.remediation.argocd_namespace)
        elif request.verb == "apply":
            sys.stderr.write(render.reconciled_text(reconcile_for_cli(request, store, deps), lang))
            stored = remediate.apply_now(store, writer, request.plan, actor,
                                         stopgap_on_gitops=settings.remediation.stopgap_on_gitops,
                                         argocd_namespace=settings.remediation.argocd_namespace)
            window = settings.remediation.watch_s if request.watch is None else request.watch
            if not request.no_watch and window > 0 and not remediate.watchable(stored.plan):
                t = stored.plan.target
                print(Catalog.load(lang).t("remediate_cli.not_watched", target=str(t), kind=t.kind), file=sys.stderr)
            elif not request.no_watch and window > 0:
                t = stored.plan.target
                progress = WatchProgress(sys.stderr, lang, window, live=is_live(sys.stderr, deps.env),
                                         clock=clock, sleep=sleep, now=now)
                try:
                    stored, seen = remediate.watch_after(store, writer, request.plan, window,
                                                         auto_rollback=settings.remediation.auto_rollback,
                                                         clock=clock, sleep=progress.sleep, on_look=progress.look,
                                                         symptoms=symptoms_reader(settings, t.cluster, t.namespace,
                                                                                  t.name))
                except BaseException:  # interrupted or refused: the last line stays, ended
                    progress.close(keep=True)
                    raise
                progress.close()
                watched, elapsed = seen, progress.elapsed()
        else:
            try:
                stored = remediate.rollback_now(store, writer, request.plan, actor)
            except ChangedAfterApply as e:  # one line per changed field, not a Python list
                rows = render.differences_lines(e.params.get("differences") or ())
                e.params["differences"] = "".join(f"\n  {line}" for line in rows)
                raise
        template = split_pools.template_of(store, stored.plan.id) if split_pools.is_split(stored.plan) else None
    finally:
        store.close()
    out = getattr(request, "out", None)
    if request.verb == "plan" and out:  # the change for the source of truth, beside the plan
        try:
            Path(out).write_text(source_of_truth.source_file(stored.plan), encoding="utf-8")
        except OSError as e:
            print(Catalog.load(lang).t("managers.out_failed", path=out, reason=e.strerror or type(e).__name__),
                  file=sys.stderr)
            return EXIT_USAGE
        print(Catalog.load(lang).t("managers.out_written", path=out, plan=stored.plan.id), file=sys.stderr)
    if request.json:
        doc = render.plan_json(stored)
        if template is not None:
            doc["split_pools"] = template
        if watched is not None:
            doc["watch"] = outcome.watch_json(render.look_json(watched), elapsed, window)
        if stored.state == "rolled_back":  # the inverse, as the object is now
            doc["restored"] = outcome.restored_json(stored.plan, lang)
        json.dump(doc, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        if watched is not None:  # the summary first, then the detail
            sys.stdout.write(outcome.watch_summary(stored, watched, elapsed, window, lang))
        if request.verb == "rollback":
            sys.stdout.write(outcome.rollback_text(stored, lang))
        else:
            sys.stdout.write(render.plan_text(stored, lang))
        if template is not None:
            sys.stdout.write(split_render.template_text(template, stored.state, lang))
    return EXIT_OK if watched is None or watched.outcome in ("held", "symptoms_remain") else EXIT_CAUSE
