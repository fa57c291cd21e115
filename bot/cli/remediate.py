"""`gpumem plan`, `gpumem apply`, `gpumem rollback`: approval-free remediation for an operator with
their own kubeconfig (their RBAC is the guard), through every actuator guard (`bot.service.remediate`)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from bot.service.exits import EXIT_CAUSE, EXIT_OK, EXIT_USAGE

ERROR_KEYS = "remediate_cli.error"


def run(args: argparse.Namespace, lang: str) -> int:
    from bot.render import remediation as render
    from bot.service import remediate
    from bot.service.records import open_store
    from bot.service.settings import load_settings

    if args.verb in ("apply", "rollback") and not args.yes:
        from bot.render.i18n import Catalog

        print(Catalog.load(lang).t("remediate_cli.needs_yes", verb=args.verb, plan=args.plan), file=sys.stderr)
        return EXIT_USAGE
    from bot.service.live_errors import live_guard

    with live_guard(lang) as guard:  # no cluster, a broken config: one line and exit 2, never a traceback
        settings = load_settings(args.config, os.environ)
        cluster = settings.cluster(args.context)
        kubeconfig = args.kubeconfig or (cluster.kubeconfig if cluster else None)
        context = args.context or (cluster.context if cluster else None)
        writer = remediate.writer_for(kubeconfig, context)
    if guard.exit_code:
        return guard.exit_code
    store = open_store(args)
    watched = None
    try:
        actor = remediate.operator()
        if args.verb == "plan":
            from bot.service.triage import split_target

            namespace, name = split_target(args.target, settings.default_namespace)
            request = remediate.plan_request(store, namespace, name, kind=args.kind, cluster=args.context,
                                             sets=args.set, replicas=args.replicas, container=args.container,
                                             action=args.action, requested_by=actor, origin="cli",
                                             other=remediate.explicit_changes(args), hpa_max=args.hpa_max)
            stored = remediate.make_plan(store, writer, request, settings.remediation.policy)
        elif args.verb == "apply":
            stored = remediate.apply_now(store, writer, args.plan, actor)
            window = settings.remediation.watch_s if args.watch is None else args.watch
            if not args.no_watch and window > 0:
                stored, seen = remediate.watch_after(store, writer, args.plan, window,
                                                     auto_rollback=settings.remediation.auto_rollback,
                                                     on_look=lambda look: _progress(look, lang))
                watched = seen
        else:
            stored = remediate.rollback_now(store, writer, args.plan, actor)
    finally:
        store.close()
    if args.json:
        doc = render.plan_json(stored)
        if watched is not None:
            doc["watch"] = render.look_json(watched)
        json.dump(doc, sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.plan_text(stored, lang))
        if watched is not None:
            sys.stdout.write(render.look_text(watched, lang))
    return EXIT_OK if watched is None or watched.outcome in ("held", "symptoms_remain") else EXIT_CAUSE


def _progress(look, lang: str) -> None:
    from bot.render import remediation as render

    sys.stderr.write(render.look_text(look, lang))
