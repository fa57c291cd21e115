"""Evidence of health, errors no rule explains, and what to capture when neither decides.

"Healthy" is a claim about a running engine, so it needs evidence of one: a serving engine
whose KV-cache usage and queue are both below their alert lines (from /metrics or the log's
stats lines), a GPU busy with work, or pods that are ready and never restarted. A launch
command, start-up lines or flags say how the engine was started, not that it serves.

An error line a log states (see collectors.parsers.log_errors) that no rule of the signal
catalog explains is quoted as an unexplained failure; it never lets the verdict be healthy.
Once a rule explains one error, the exits that follow it ("Shard 0 failed to start", "Shutting
down shards") are its consequences and are not quoted again.

When no cause is named and health is not shown, `capture_next` says which files would decide
it and the exact command that captures each, in the world the evidence shows: `kubectl` only
when there is Kubernetes evidence.
"""

from __future__ import annotations

from runbooks.catalogs import thresholds as T
from runbooks.model.evidence import LoggedError
from runbooks.model.report import Fact, Finding, fact
from runbooks.triage.context import TriageContext

#: GPU compute utilisation at or above which a reading shows the card under load (below it
#: the catalog calls utilisation low)
GPU_BUSY_PCT = T.LOW_GPU_UTIL_PCT
#: memory in use above this share of the card: a busy GPU is not shown to be fine
GPU_FULL_RATIO = 0.99
#: unexplained errors quoted in one finding
QUOTED = 3
#: error kinds a platform rule names (a GPU-sharing layer, a host-memory kill): not unexplained
RULED_KINDS = frozenset({"sharing_layer", "host_memory_kill"})
#: the port each engine serves /metrics on when the launch does not say
_DEFAULT_PORT = {"vllm": 8000, "tgi": 80, "sglang": 30000}


def unexplained_errors(ctx: TriageContext) -> tuple[LoggedError, ...]:
    """The log's errors no rule explains (consequences of an explained one left out)."""
    logs = ctx.evidence.logs
    if logs is None or not logs.errors:
        return ()
    explained_any = any(e.explained or e.kind in RULED_KINDS for e in logs.errors)
    out = []
    for e in logs.errors:
        if e.explained or e.kind in RULED_KINDS:
            continue
        if explained_any and (e.down or e.kind in ("error_line", "traceback", "process_exit")):
            continue  # the crash that follows an explained error, or a line of its report
        out.append(e)
    return tuple(out)


def unexplained_failure(ctx: TriageContext, round_no: int) -> Finding | None:
    """One finding quoting the first unexplained errors; critical when one says the engine stopped."""
    errors = unexplained_errors(ctx)
    if not errors:
        return None
    source = ctx.evidence.logs.source if ctx.evidence.logs else None
    down = any(e.down for e in errors)
    # a router's stop is worded with the router's name ("error_kind.router_exit_vllm_router")
    facts = tuple(fact("logged_error_down" if e.down else "logged_error", source,
                       error_kind=f"{e.kind}_{e.process}" if e.process else e.kind, example=e.example,
                       line=e.line) for e in errors[:QUOTED])
    if len(errors) > QUOTED:
        facts += (fact("logged_errors_more", source, count=len(errors) - QUOTED),)
    return Finding("unexplained_failure_down" if down else "unexplained_failure", round_no,
                   "critical" if down else "warning", facts)


def health_evidence(ctx: TriageContext) -> tuple[Fact, ...]:
    """Positive evidence that an engine serves within its limits; empty when there is none."""
    out: list[Fact] = []
    kv, queue = ctx.kv_usage_ratio, ctx.queue_depth
    if kv is not None and queue is not None and kv.value < T.KV_USAGE_HIGH_RATIO and (
        queue.value < T.QUEUE_DEPTH_ALERT
    ):
        out.append(fact("health_serving", kv.source, usage_pct=round(kv.value * 100, 1),
                        usage_line_pct=round(T.KV_USAGE_HIGH_RATIO * 100), queue=round(queue.value),
                        queue_line=T.QUEUE_DEPTH_ALERT))
    util = ctx.gpu_util_pct
    used, total = ctx.gpu_used_gib, ctx.gpu_total_gib
    if (util is not None and util.value >= GPU_BUSY_PCT and used is not None and used.value > 0
            and total is not None and used.value <= GPU_FULL_RATIO * total.value):
        # busy, and with room: a reading without the card's size cannot say memory is fine
        out.append(fact("health_gpu_busy", util.source, util_pct=round(util.value), used_gib=round(used.value, 1),
                        total_gib=round(total.value, 1)))
    pods = ctx.evidence.pods
    if pods and all(c.ready is True and c.restart_count == 0 for p in pods for c in p.containers) and all(
        p.containers for p in pods
    ):
        out.append(fact("health_pods_ready", "pods", pods=len(pods)))
    return tuple(out)


def in_kubernetes(ctx: TriageContext) -> bool:
    """True when the evidence shows Kubernetes: a workload, pods, events (in files or the log)."""
    ev = ctx.evidence
    logs = ev.logs
    return bool(ev.workload or ev.pods or ev.events or (logs and (logs.pods or logs.events)))


def capture_next(ctx: TriageContext) -> tuple[Fact, ...]:
    """What to capture to decide, one fact per file, each with the exact command."""
    ev = ctx.evidence
    kube = in_kubernetes(ctx)
    name = ev.workload.name if ev.workload else (ev.target.split("/")[-1] if ev.target else "NAME")
    ns = f" -n {ev.workload.namespace}" if ev.workload and ev.workload.namespace else ""
    cfg = ev.server_config
    port = (cfg.port if cfg and cfg.port else None) or _DEFAULT_PORT.get(ctx.engine or "", 8000)
    out: list[Fact] = []
    stats = ev.logs is not None and ev.logs.stats_peak is not None
    if ev.server_metrics is None and not stats:
        cmd = (f"kubectl{ns} exec deploy/{name} -- curl -s localhost:{port}/metrics > metrics.txt" if kube
               else f"curl -s localhost:{port}/metrics > metrics.txt")
        out.append(fact("capture_metrics", None, command=cmd))
    if ctx.gpu_used_gib is None or ctx.gpu_total_gib is None:
        cmd = f"kubectl{ns} exec deploy/{name} -- nvidia-smi > nvidia-smi.txt" if kube else "nvidia-smi > nvidia-smi.txt"
        out.append(fact("capture_nvidia_smi", None, command=cmd))
    cut = ev.logs is not None and any(e.kind == "traceback" for e in ev.logs.errors)
    # TGI logs no periodic stats: a log of it without errors is all its log gives
    tgi = ctx.engine == "tgi"
    if ev.logs is None or cut or (not ev.logs.errors and not stats and not tgi):
        cmd = (f"kubectl{ns} logs deploy/{name} --tail=5000 > logs.txt" if kube
               else "docker logs CONTAINER --tail 5000 > logs.txt")
        out.append(fact("capture_logs_tgi" if tgi else "capture_logs", None, command=cmd))
    if kube and not ev.pods:
        out.append(fact("capture_pods", None,
                        command=f"kubectl{ns} get pods -l app={name} -o yaml > pods.yaml; "
                                f"kubectl{ns} get events > events.txt"))
    return tuple(out)
