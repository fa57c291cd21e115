"""The command grammar: every verb's arguments, one argparse tree for the CLI and Slack.

The surfaces (`bot.cli`, `bot.slack`, `bot.agent`) run verbs; this module only says what each
verb takes, so `/gpumem budget --engine vllm ...` and `gpumem budget --engine vllm ...` parse
the same way without one surface importing another, into the same typed request
(`bot.grammar.requests`). `VERBS` is the explicit, ordered table of each verb's arguments
(the order of `gpumem --help`).

>>> parse_argv(["budget", "--engine", "vllm", "--max-num-seqs", "64"]).max_num_seqs
64
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from bot.grammar import argtypes
from bot.grammar import remediation as remediation_grammar
from bot.grammar.argtypes import fraction, gib, number, port, seconds, since, tokens, whole_number

if TYPE_CHECKING:
    from bot.grammar.requests import Request

ENGINES = ("vllm", "sglang", "tgi")
#: the NVML agent's default port
AGENT_PORT = 9500


def add_common(p: argparse.ArgumentParser) -> None:
    """--json and --lang, shared by every verb."""
    p.add_argument("--json", action="store_true", help="print JSON (stable keys, see README)")
    p.add_argument("--lang", choices=("en", "zh"), default=None, help="language (default: from the locale)")


def add_live_flags(p: argparse.ArgumentParser) -> None:
    """Flags shared by every verb that reads a live cluster (triage, collect)."""
    p.add_argument("--context", help="kube context (default: the config's default, then kubeconfig's current)")
    p.add_argument("-n", "--namespace", help="namespace when TARGET has none")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    p.add_argument("--in-cluster", action="store_true", help="use the pod's service account")
    p.add_argument("--config", metavar="FILE", help="gpumem config (YAML; default $GPUMEM_CONFIG)")
    p.add_argument("--prometheus", metavar="URL", help="Prometheus base URL (token: $GPUMEM_PROMETHEUS_TOKEN)")
    p.add_argument("--direct-metrics", action="store_true",
                   help="read /metrics from pod IPs instead of through the API server's pod proxy")
    p.add_argument("--source-deadline", type=seconds(600), metavar="S", default=None,
                   help="seconds each source may take (default 5)")
    p.add_argument("--deadline", type=seconds(3600), metavar="S", default=None,
                   help="seconds the whole collection may take (default 20)")


def _triage(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="diagnose a service: verdict, evidence, next actions",
                       description="Diagnose GPU memory trouble: the verdict first, then the evidence, "
                                   "then the next actions. Live with NAMESPACE/DEPLOYMENT, offline with --bundle.")
    p.add_argument("target", nargs="?", help="NAMESPACE/DEPLOYMENT, or NAMESPACE/KIND/NAME with KIND deployment, "
                                             "statefulset (sts), inferenceservice (isvc) or leaderworkerset (lws) "
                                             "(live triage)")
    p.add_argument("--bundle", metavar="DIR", type=argtypes.bundle_folder,
                   help="an evidence bundle folder (offline triage)")
    p.add_argument("--save-bundle", metavar="DIR", help="live: also keep the collected bundle in DIR")
    add_live_flags(p)
    add_common(p)


def _budget(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="capacity budget: weights, activations, KV cache, concurrency",
                       description="Where one GPU's memory goes under vLLM's, SGLang's or TGI's own start-up "
                                   "arithmetic, what KV capacity is left, and whether the engine starts.")
    p.add_argument("--engine", choices=ENGINES, help="inference engine (default: from --from-deployment)")
    p.add_argument("--model", metavar="NAME_OR_CONFIG",
                   help="model id from the catalog (Qwen/Qwen2.5-7B-Instruct) or a config.json path (or its folder)")
    gpu = p.add_argument_group("GPU (one of them, or from the Deployment)")
    gpu.add_argument("--gpu", metavar="NAME", help="GPU model, e.g. A100-80GB, H100, L4, 'A100-80GB MIG 3g.40gb'")
    gpu.add_argument("--gpu-mem-gib", type=gib, metavar="N", help="memory one GPU reports to CUDA, in GiB")
    p.add_argument("--from-deployment", metavar="FILE", help="read engine, model, flags and GPU from a Deployment")
    p.add_argument("--tp", type=whole_number(1, 1024), metavar="N", help="tensor parallel size")
    p.add_argument("--pp", type=whole_number(1, 1024), metavar="N", help="pipeline parallel size")
    p.add_argument("--dtype", help="model dtype (auto, bfloat16, float16)")
    p.add_argument("--quantization", metavar="Q", help="awq, gptq, fp8, int8, bitsandbytes, mxfp4 (default: the checkpoint's)")
    p.add_argument("--kv-cache-dtype", metavar="D", help="auto, fp8, fp8_e4m3, fp8_e5m2")
    p.add_argument("--max-model-len", type=tokens, metavar="N", help="context length (SGLang --context-length, TGI --max-total-tokens)")
    p.add_argument("--max-num-seqs", type=whole_number(1, 1_000_000), metavar="N", help="concurrent sequences (SGLang --max-running-requests)")
    p.add_argument("--max-num-batched-tokens", type=tokens, metavar="N", help="tokens per step (SGLang --chunked-prefill-size)")
    p.add_argument("--gpu-memory-utilization", type=fraction, metavar="F", help="vLLM: share of the card's memory")
    p.add_argument("--mem-fraction-static", type=fraction, metavar="F", help="SGLang: share of free memory for weights + KV")
    p.add_argument("--cuda-memory-fraction", type=fraction, metavar="F", help="TGI: share of the card's memory")
    p.add_argument("--engine-version", metavar="V", help="engine version, e.g. 0.10.1 (default: the newest known)")
    p.add_argument("--enforce-eager", action="store_true", default=None, help="no CUDA graphs")
    p.add_argument("--other-process-gib", type=number(0, 4096, "a number of GiB"), metavar="N", help="GPU memory other processes already hold")
    p.add_argument("--vllm-engine", choices=("v0", "v1"), default=None,
                   help="vLLM engine, as VLLM_USE_V1=0/1 selects it (default: the version's own choice: V1 from "
                        "0.8, V0 below compute capability 8.0 up to 0.10.1)")
    p.add_argument("--enable-lora", action="store_true", default=None, help="vLLM: reserve LoRA adapter slots on the GPU")
    p.add_argument("--max-lora-rank", type=whole_number(1, 4096), metavar="N", help="vLLM LoRA rank of the slots (default 16)")
    p.add_argument("--max-loras", type=whole_number(1, 4096), metavar="N", help="vLLM LoRA adapters on the GPU at once (default 1)")
    p.add_argument("--max-cpu-loras", type=whole_number(1, 1_000_000), metavar="N", help="vLLM LoRA adapters kept in host memory")
    p.add_argument("--max-input-tokens", "--max-input-length", type=tokens, metavar="N", help="TGI: longest prompt")
    p.add_argument("--max-batch-prefill-tokens", type=tokens, metavar="N", help="TGI: tokens of one prefill batch (the warm-up batch)")
    p.add_argument("--max-batch-total-tokens", type=tokens, metavar="N",
                   help="TGI: batch token budget (allocated up front before 0.9.3, inferred at warm-up after)")
    p.add_argument("--what-if", metavar="K=V,...", help="show the budget before and after, e.g. 'max-num-seqs=32,max-model-len=4096'")
    p.add_argument("--profile", metavar="ACCESS_LOG", help="measured requests: per-bucket capacity and the safest flags")
    p.add_argument("--target-headroom", type=number(0, 0.95, "a share of the KV cache"), metavar="F",
                   help="share of the KV cache the safe flags keep free (default 0.1; needs --profile)")
    p.add_argument("--reported-kv-tokens", type=tokens, metavar="N",
                   help="the KV capacity the engine reported at these flags (its start-up line or capacity gauge): "
                        "the safe flags size on it plus the change the budget computes (needs --profile)")
    add_common(p)


def _profile(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="request profile: length buckets, percentiles, shift",
                       description="Bucket requests by length (S, M, L, XL), give exact percentiles and the shift "
                                   "of the L+XL share, from an access log, a server log or a metrics scrape.")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--access-log", metavar="FILE", help="one request per line: key=value or JSON with usage")
    src.add_argument("--server-log", metavar="FILE", help="an engine's log (SGLang Finish: lines with --log-requests)")
    src.add_argument("--metrics", metavar="FILE", help="a /metrics scrape with token histograms (estimated profile)")
    p.add_argument("--baseline", metavar="FILE", help="the same kind of file from a normal period (or an earlier scrape)")
    p.add_argument("--chart", metavar="PNG", help="write a chart of bucket shares over time")
    p.add_argument("--workers", type=whole_number(1, 64), metavar="N", help=argparse.SUPPRESS)
    add_common(p)


def _collect(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="save a live evidence bundle (replay it with triage --bundle)",
                       description="Gather the evidence of a running Deployment and write it as a bundle "
                                   "that `gpumem triage --bundle DIR` reads back to the same verdict.")
    p.add_argument("target", help="NAMESPACE/DEPLOYMENT or NAMESPACE/KIND/NAME (KIND: deploy, sts, isvc, lws)")
    p.add_argument("--out", required=True, metavar="DIR", help="folder to write (created if needed)")
    add_live_flags(p)
    add_common(p)


def _snapshot(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="sample GPU memory on this machine (NVML): used/total/reserved, processes",
                       description="Sample GPU memory, utilisation and processes per GPU and MIG slice on this "
                                   "machine through NVML. Exits 3 when there is no GPU or driver.")
    p.add_argument("--count", type=whole_number(1), default=1, metavar="N", help="samples to take (default 1)")
    p.add_argument("--interval", type=seconds(86400), default=2.0, metavar="S",
                   help="seconds between samples (default 2)")
    p.add_argument("--format", choices=("text", "csv", "json"), default=None,
                   help="text table (default), CSV (one row per device per sample) or JSON (a list of samples)")
    add_common(p)


def _agent(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="serve this node's GPU readings over HTTP (/snapshot, /metrics, /healthz)",
                       description="Serve NVML readings of this machine's GPUs over HTTP for a DaemonSet: "
                                   "GET /snapshot (JSON), /metrics (Prometheus), /healthz.")
    p.add_argument("--port", type=port, default=AGENT_PORT, help=f"TCP port (default {AGENT_PORT}; 0 picks one)")
    p.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0, every interface)")
    p.add_argument("--interval", type=seconds(3600), default=5.0, metavar="S",
                   help="seconds a reading is reused before NVML is asked again (default 5)")
    p.add_argument("--node", default=None,
                   help="host name put on every device (default: $NODE_NAME, else this machine's host name)")
    p.add_argument("--require-gpu", action="store_true",
                   help="exit 3 at start when NVML is unavailable instead of serving /healthz 503")
    p.add_argument("--lang", choices=("en", "zh"), default=None, help="language of messages (default: from the locale)")


def _store_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", metavar="FILE", help="gpumem config (YAML; default $GPUMEM_CONFIG): store.path")
    p.add_argument("--store", metavar="FILE", help="the store file (default: store.path, else $XDG_STATE_HOME/gpumem)")


def _audit(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="the audit trail: every plan's steps, who took them and when",
                       description="Print the append-only audit: plans proposed, approved, applied, watched, "
                                   "rolled back, refused; oldest first.")
    p.add_argument("--since", type=since, metavar="WHEN", help="only after this: 12h, 7d, or an ISO 8601 time")
    p.add_argument("--target", metavar="NAMESPACE/NAME", help="only this workload")
    p.add_argument("--verify", action="store_true",
                   help="check the audit's hash chain instead of printing it: exit 0 intact, 1 broken "
                        "(the first bad row is named)")
    _store_flags(p)
    add_common(p)


def _plans(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="plans and their states (open ones unless --all)",
                       description="List the plans in the store: the newest first, open ones unless --all.")
    p.add_argument("--target", metavar="NAMESPACE/NAME", help="only this workload")
    p.add_argument("--all", action="store_true", help="also plans that ended (applied and watched, rejected, ...)")
    p.add_argument("--context", help="kube context a plan left applying is read in when the config does not name "
                                     "its cluster (default: the plan's own)")
    p.add_argument("--kubeconfig", help="kubeconfig file that reads (default: $KUBECONFIG, ~/.kube/config)")
    _store_flags(p)
    add_common(p)


def _serve(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="run the Slack bot (Socket Mode, or HTTP with --http)",
                       description="Run the Slack bot: /gpumem triage, profile, snapshot, budget, help. "
                                   "Secrets come from SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET (HTTP), "
                                   "SLACK_APP_TOKEN (Socket Mode), or their *_FILE variants.")
    p.add_argument("--http", action="store_true", help="serve HTTP (/slack/events) instead of Socket Mode")
    p.add_argument("--host", default=None, help="address to listen on (default: http.host, 0.0.0.0)")
    p.add_argument("--port", type=port, default=None, help="port (default: http.port, 3000; 0: any free port)")
    p.add_argument("--config", metavar="FILE", default=None, help="YAML settings (default: $GPUMEM_CONFIG)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.add_argument("--lang", choices=("en", "zh"), default=None, help="language of these terminal messages")


def _dashboards(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="the runbook's Grafana dashboards per engine: GPU, request profile, service, platform",
                       description="List the runbook's dashboards for the metrics each engine exports (the same tables "
                                   "as gpumem rules): each panel, what it reads and the alert line on it. --json prints "
                                   "Grafana's dashboard JSON (one dashboard with --engine, else a list of the three).")
    p.add_argument("--engine", choices=ENGINES, default=None, help="vllm, sglang or tgi (default: all three)")
    add_common(p)


def _rules(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="Prometheus alert rules from the runbook, per engine, routed back to gpumem",
                       description="Write the runbook's alerts for the metrics each engine exports (KV cache, "
                                   "queue, preemptions, TTFT p99, long-request share; OOM restarts and GPU memory "
                                   "from kube-state-metrics and DCGM), labelled for gpumem's webhook: a "
                                   "PrometheusRule (default) or a plain rule file.")
    p.add_argument("--engine", type=argtypes.engine_list, default=None, metavar="ENGINE[,ENGINE]",
                   help="vllm, sglang, tgi, comma-separated (default: all three)")
    p.add_argument("-o", "--output", choices=argtypes.OUTPUTS, default="prometheusrule",
                   help="prometheusrule: a monitoring.coreos.com/v1 PrometheusRule (default); rules: a rule file")
    p.add_argument("--namespace-label", type=argtypes.label_name, default="namespace", metavar="LABEL",
                   help="the alert label that carries the workload's namespace (default namespace)")
    p.add_argument("--deployment-label", type=argtypes.label_name, default="deployment", metavar="LABEL",
                   help="the alert label that carries the Deployment's (or StatefulSet's) name (default deployment)")
    p.add_argument("--runbook-url", type=argtypes.runbook_url, default=argtypes.DEFAULT_RUNBOOK_URL, metavar="URL",
                   help="where gpumem's README is published; each rule links URL#<its alert name> "
                        f"(default {argtypes.DEFAULT_RUNBOOK_URL})")
    p.add_argument("--name", type=argtypes.object_name, default=None,
                   help="-o prometheusrule: the object's metadata.name (default gpumem)")
    p.add_argument("--object-label", type=argtypes.object_label, action="append", default=None, metavar="KEY=VALUE",
                   help="-o prometheusrule: a label on the object for the operator's ruleSelector, "
                        "e.g. release=kube-prometheus-stack (repeatable)")
    p.add_argument("--no-recording-rules", dest="recording_rules", action="store_false",
                   help="leave out the recording rules the fleet view reads (group gpumem-fleet)")
    add_common(p)


def _note(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="leave a note for the shift handover",
                       description="Record a note (author: the OS user) for the next shift's handover, about a "
                                   "workload when the first word is NAMESPACE/NAME.")
    p.add_argument("text", nargs="+", metavar="[NAMESPACE/NAME] TEXT", help="the note")
    p.add_argument("--channel", metavar="CHANNEL", help="the Slack channel whose handover shows it (default: all)")
    _store_flags(p)
    add_common(p)


def _notes(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="the notes left for shift handovers",
                       description="List the notes in the store, oldest first.")
    p.add_argument("--since", type=since, default=None, metavar="WHEN", help="only after this: 12h, 7d, or an ISO time")
    p.add_argument("--target", metavar="NAMESPACE/NAME", help="only notes about this workload")
    p.add_argument("--channel", metavar="CHANNEL", help="only this channel's notes (and those without a channel)")
    _store_flags(p)
    add_common(p)


def _handover(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="the shift handover: incidents, changes, stop-gaps, notes, what to watch",
                       description="Print the handover for the window since the channel's previous handover "
                                   "(or --since): incidents, changes, temporary measures, notes, watch next, the "
                                   "runbook's template per service and Prometheus state when configured.")
    p.add_argument("--since", type=since, default=None, metavar="WHEN", help="start here: 12h, 7d, or an ISO time")
    p.add_argument("--channel", metavar="CHANNEL", help="the channel whose previous handover starts the window")
    p.add_argument("--context", default=None, help="the cluster whose live objects confirm temporary measures")
    p.add_argument("--offline", action="store_true", help="read neither Prometheus nor the cluster")
    _store_flags(p)
    add_common(p)


def _fleet(sub: argparse._SubParsersAction, verb: str) -> None:
    p = sub.add_parser(verb, help="the whole fleet from Prometheus: which services are closest to OOM",
                       description="Rank every vLLM, SGLang and TGI service Prometheus sees by how close its "
                                   "KV cache, queue, preemptions, OOM kills and restarts, GPU memory, TTFT p99 and "
                                   "long-request share are to the runbook's lines, closest to trouble first, with "
                                   "the gpumem triage command for each. A fixed number of queries, however many "
                                   "services; a query that fails costs its columns, not the view.")
    p.add_argument("-n", "--namespace", type=argtypes.namespace_name, action="append", default=None, metavar="NS",
                   help="only this namespace (repeatable; default: every namespace)")
    p.add_argument("--engine", type=engine_choice, action="append", default=None, metavar="ENGINE",
                   help="only services of this engine: vllm, sglang, tgi (repeatable; default: all, and GPU "
                        "pods that run none)")
    p.add_argument("--top", type=argtypes.top_count, default=None, metavar="N", help="show the first N services only")
    p.add_argument("--at", type=since, default=None, metavar="WHEN",
                   help="read the fleet as it was then: a duration back (30m, 2h) or an ISO 8601 time")
    p.add_argument("--config", metavar="FILE", help="gpumem config (YAML; default $GPUMEM_CONFIG): its prometheus")
    p.add_argument("--prometheus", metavar="URL", help="Prometheus base URL (token: $GPUMEM_PROMETHEUS_TOKEN)")
    p.add_argument("--timeout", type=seconds(600), default=None, metavar="S",
                   help="seconds each query may take (default: the config's timeout_s, else 10)")
    add_common(p)


def engine_choice(text: str) -> str:
    """One engine name (argparse `choices` would not combine with a repeatable type)."""
    if text not in ENGINES:
        raise argparse.ArgumentTypeError(f"unknown engine {text!r}; give one of {', '.join(ENGINES)}")
    return text


#: verb -> its arguments; the order is the order of `gpumem --help`
VERBS: dict[str, Callable[[argparse._SubParsersAction, str], None]] = {
    "triage": _triage,
    "budget": _budget,
    "profile": _profile,
    "collect": _collect,
    "snapshot": _snapshot,
    "agent": _agent,
    "plan": remediation_grammar.plan,
    "apply": remediation_grammar.apply,
    "rollback": remediation_grammar.rollback,
    "plans": _plans,
    "audit": _audit,
    "note": _note,
    "notes": _notes,
    "handover": _handover,
    "rules": _rules,
    "dashboards": _dashboards,
    "fleet": _fleet,
    "serve": _serve,
}


class GpumemParser(argparse.ArgumentParser):
    """argparse with "did you mean": a verb, a choice or a flag a letter or two off gets the
    nearest known one added to the error (stdlib difflib).

    >>> import contextlib, io
    >>> err = io.StringIO()
    >>> with contextlib.redirect_stderr(err), contextlib.suppress(SystemExit):
    ...     build_parser().parse_args(["triag"])
    >>> err.getvalue().strip().splitlines()[-1].endswith("did you mean 'triage'?")
    True
    """

    def parse_known_args(self, args=None, namespace=None):  # type: ignore[override]

        self._argv = list(args) if args is not None else sys.argv[1:]
        return super().parse_known_args(args, namespace)

    def error(self, message: str):  # type: ignore[override]
        hint = did_you_mean(self, message, getattr(self, "_argv", None) or [])
        super().error(message + hint)


def _options(parser: argparse.ArgumentParser) -> list[str]:
    return [s for a in parser._actions for s in a.option_strings if s.startswith("--")]


def _verb_parser(parser: argparse.ArgumentParser, argv: Sequence[str]) -> argparse.ArgumentParser | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for word in argv:
                if word in action.choices:
                    return action.choices[word]
    return None


def did_you_mean(parser: argparse.ArgumentParser, message: str, argv: Sequence[str]) -> str:
    """"; did you mean 'triage'?" for an argparse error about a near miss, else ""."""
    choice = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
    if choice:
        near = difflib.get_close_matches(choice.group(1), re.findall(r"'([^']*)'", choice.group(2)), n=1)
        return f"; did you mean '{near[0]}'?" if near else ""
    unknown = re.match(r"unrecognized arguments: (.*)", message)
    if unknown:
        verb = _verb_parser(parser, argv)
        known = _options(verb) if verb is not None else _options(parser)
        hints = []
        for word in unknown.group(1).split():
            if word.startswith("--"):
                near = difflib.get_close_matches(word.split("=", 1)[0], known, n=1)
                if near:
                    hints.append(f"{word}: did you mean {near[0]}?")
        return "; " + "; ".join(hints) if hints else ""
    return ""


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole `gpumem` argument tree; with `only` (a verb), the tree of that verb alone, which
    parses its command lines the same way (a tenth of `gpumem profile`'s start went into
    building the other sixteen verbs' parsers)."""
    p = GpumemParser(prog="gpumem", description="GPU memory triage for LLM serving on Kubernetes.")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    for verb, add in VERBS.items():
        if only is None or verb == only:
            add(sub, verb)
    return p


def parse_argv(argv: Sequence[str] | None = None) -> Request:
    """A `gpumem` command line as its verb's request; argparse exits 2 with the usage on bad input.
    A line that starts with a verb is parsed by that verb's tree alone; any other (`--help`, a
    misspelt verb) by the whole one, which lists the verbs and says which was meant."""
    words = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(words[0] if words and words[0] in VERBS else None).parse_args(words)
    # lazy: making the seventeen request dataclasses costs ~15-25 ms (-X importtime), which
    # `gpumem --help` and a usage error would pay before argparse exits
    from bot.grammar.requests import request_of

    return request_of(args)
