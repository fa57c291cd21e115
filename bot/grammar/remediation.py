"""The command grammar of the remediation verbs: `gpumem plan`, `gpumem apply`, `gpumem rollback`
(registered in `bot.grammar.commands.VERBS`).

The numbers a plan writes (`--hpa-max`, `--queue-target`, `--startup-probe`, `--threshold`,
`--long-replicas`) are taken as typed and held to `runbooks.remediation.value_ranges.OPTIONS`
by the service, so a refusal names the option, the value and the range like any planned value."""

from __future__ import annotations

import argparse

from bot.grammar.argtypes import seconds, whole_number
from runbooks.catalogs.engine_metrics import name


def _target_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--context", help="kube context to write with (default: the kubeconfig's current)")
    p.add_argument("--kubeconfig", help="kubeconfig of the identity that writes (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--config", metavar="FILE", help="gpumem config (YAML; default $GPUMEM_CONFIG): store, remediation")
    p.add_argument("--store", metavar="FILE", help="the store file (default: store.path, else $XDG_STATE_HOME/gpumem)")
    p.add_argument("--json", action="store_true", help="print JSON (stable keys, see README)")
    p.add_argument("--lang", choices=("en", "zh"), default=None, help="language (default: from the locale)")


def plan(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="plan a change to a Deployment: the exact patch, the diff, the rollback",
                       description="Read the object as it is now and plan one change to it: server flags set where "
                                   "the Deployment keeps them (--set), replicas (--replicas; the HPA's minReplicas "
                                   "when one scales it), a startupProbe, an HPA on queue depth, the rollout's "
                                   "maxSurge, /dev/shm, the memory limit. The plan is stored "
                                   "with the version it was made against; `gpumem apply PLAN --yes` applies it.")
    p.add_argument("target", help="NAMESPACE/NAME, or NAMESPACE/KIND/NAME (KIND: deploy, sts, isvc, lws)")
    p.add_argument("--kind", choices=("Deployment", "StatefulSet"), default="Deployment")
    p.add_argument("--set", action="append", default=[], metavar="FLAG=VALUE",
                   help="a server flag's new value, e.g. max-num-seqs=64 (FLAG= removes it); repeatable")
    p.add_argument("--replicas", type=whole_number(0, 10_000), metavar="N", help="the new replica count")
    p.add_argument("--startup-probe", nargs="?", const=300, metavar="SECONDS",
                   help="a startupProbe on the engine's /health allowing SECONDS to load (default 300: 30 x 10 s)")
    p.add_argument("--queue-target", metavar="N",
                   help="an HPA on the engine's queue metric, N waiting requests per pod on average (created "
                        "when none scales the Deployment, else its metrics replaced)")
    p.add_argument("--queue-metric", metavar="NAME", help="the queue metric as the metrics adapter serves it "
                                                          f"(default: {', '.join(name(e, 'queue_waiting') for e in ('vllm', 'sglang', 'tgi'))})")
    p.add_argument("--hpa-max", metavar="N",
                   help="maxReplicas of an HPA gpumem creates (default: twice the current replicas)")
    p.add_argument("--max-surge", metavar="N|P%", help="the rollout's maxSurge; 0 also sets maxUnavailable 1, so "
                                                       "a rollout needs no spare GPU")
    p.add_argument("--shm-size", metavar="QUANTITY", help="an emptyDir (medium Memory) of this size at /dev/shm, "
                                                          "e.g. 16Gi (NCCL with TP > 1)")
    p.add_argument("--memory-limit", metavar="QUANTITY", help="the server container's memory limit, e.g. 64Gi (and "
                                                              "its request when it equals the limit)")
    p.add_argument("--action", metavar="ID", help="the changes of a next action of the last recorded triage of "
                                                   "NAMESPACE/NAME, e.g. cap_max_model_len (instead of the options "
                                                   "above)")
    p.add_argument("--container", help="the server container when the pod has several")
    p.add_argument("--out", metavar="FILE", help="also write the change for the object's source of truth (a "
                                                 "kustomize patch, a Helm values note, the owner's field) to FILE")
    split = p.add_argument_group("pool split (--split-pools)", "split long and short requests into two pools, in "
                                 "two plans: phase 1 creates NAME-long (Deployment and Service cloned from the "
                                 "original) and leaves the original alone; phase 2, once the gateway routes long "
                                 "prompts to NAME-long, tightens the original to the short pool")
    split.add_argument("--split-pools", action="store_true", help="plan a pool split instead of --set/--replicas")
    split.add_argument("--phase", type=whole_number(1, 2), default=None, metavar="1|2",
                       help="1 (default): create NAME-long; 2: tighten the original (needs --routing-confirmed)")
    split.add_argument("--threshold", metavar="TOKENS",
                       help="prompts longer than this go to the long pool (default: the runbook's long-request "
                            "boundary, 2048)")
    split.add_argument("--routing-confirmed", action="store_true",
                       help="phase 2: you checked that the gateway sends prompts over the threshold to NAME-long")
    split.add_argument("--profile", metavar="ACCESS_LOG",
                       help="phase 1: the access log whose p99 request length sizes the long pool")
    split.add_argument("--long-replicas", metavar="N", default=None,
                       help="phase 1: replicas of the long pool (default 1)")
    split.add_argument("--service", metavar="NAME", help="phase 1: the original Service (default: named like the "
                                                          "Deployment)")
    split.add_argument("--gpu", metavar="NAME", help="the GPU model when the Deployment's nodeSelector names none")
    _target_flags(p)


def apply(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="apply a stored plan: re-read, dry run, write with its precondition",
                       description="Apply a plan with your own kubeconfig (your RBAC is the guard): the object is "
                                   "read again and must be the version the plan was made against, a server-side "
                                   "dry run must pass, the write carries the precondition, and the rollback note is "
                                   "in the audit before the write.")
    p.add_argument("plan", help="the plan id (gpumem plans)")
    p.add_argument("--yes", action="store_true", help="apply without asking (required: this writes to the cluster)")
    p.add_argument("--watch", type=seconds(86400), metavar="S", default=None,
                   help="watch the rollout this long after the write (default: remediation.watch_s, 600); on a "
                        "terminal one line updated in place, on a pipe a stamped line per change")
    p.add_argument("--no-watch", action="store_true", help="return right after the write")
    _target_flags(p)


def rollback(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="roll a plan back: restore what it changed, unless someone changed it since",
                       description="Restore the values a plan changed, with the same precondition; if someone "
                                   "changed them after gpumem did, refuse and show before / gpumem / now.")
    p.add_argument("plan", help="the plan id (gpumem plans --all)")
    p.add_argument("--yes", action="store_true", help="roll back without asking (required: this writes to the cluster)")
    _target_flags(p)
