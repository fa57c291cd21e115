"""Round 5: Kubernetes amplifiers: restarts, probes, HPA, MIG, co-location, rollout step."""

from __future__ import annotations

import re

from runbooks.catalogs import thresholds as T
from runbooks.model.report import CheckResult, Finding, fact
from runbooks.triage.checks._util import missing
from runbooks.triage.context import TriageContext
from runbooks.triage.health import in_kubernetes, unexplained_failure

ROUND = 5
#: launch problems that stop the server or make it unreachable
_LAUNCH_BREAKERS = ("vllm_port_service_collision", "sglang_host_loopback", "serve_repeated",
                    "command_as_single_string", "tgi_env_not_boolean")
#: launch problems that break a server only behind a Kubernetes Service (a workstation
#: reaches 127.0.0.1 fine): named only with Kubernetes evidence
_KUBE_ONLY_BREAKERS = frozenset({"sglang_host_loopback", "vllm_port_service_collision"})
#: findings that say the engine failed; beside one, two engines on a card are the likely reason
_FAILURE_IDS = ("startup_capacity_error", "startup_cuda_oom", "cuda_oom", "runtime_cuda_oom", "engine_not_started")
#: only liveness and startup failures kill a container; readiness failures just take it out of rotation
#: a probe the server answered "not found": the path is wrong, the server is up
_NOT_FOUND = re.compile(r"statuscode: 404")
_PROBE_EVENT_WORDS = ("liveness probe failed", "startup probe failed", "failed startup probe",
                      "failed liveness probe", "will be restarted")


def check(ctx: TriageContext) -> CheckResult:
    ev = ctx.evidence
    findings: list[Finding] = []
    used: list[str] = []
    lacking = []
    wl = ev.workload

    if ev.pods:
        used.append("pods")
        findings.extend(_restarts(ctx))
    else:
        lacking.append(missing("pods", ev.issues, "pods.yaml"))
    history = ev.memory_history
    if history is not None and history.oom_killed_at and not any(f.id == "container_oomkilled" for f in findings):
        # a later restart overwrites the pod's last state; Prometheus remembers every OOM kill
        used.append("memory_history")
        findings.append(Finding("container_oomkilled", ROUND, "critical",
                                (fact("oomkilled_history", history.source, count=len(history.oom_killed_at),
                                      last=history.oom_killed_at[-1].isoformat(timespec="minutes")),),
                                ("platform_amplifier",), 0.7))

    if ev.events:
        used.append("events")
        probe_kills = [e for e in ev.events if e.reason in ("Unhealthy", "Killing")
                       and any(w in e.message.lower() for w in _PROBE_EVENT_WORDS)]
        if probe_kills or (ev.logs and ev.logs.count("probe_killed")):
            n = sum(e.count for e in probe_kills) or (ev.logs.count("probe_killed") if ev.logs else 0)
            example = probe_kills[0].message if probe_kills else None
            findings.append(Finding("probe_kills", ROUND, "warning",
                                    (fact("probe_kills", "events", count=n, example=example),),
                                    ("platform_amplifier",), 0.6))
            missing_path = next((m.group(0) for e in probe_kills if (m := _NOT_FOUND.search(e.message))), None)
            if missing_path is not None:
                # the server answered, with "not found": the probe asks for a path it does not
                # serve, and no startup budget fixes that
                findings.append(Finding("probe_path_not_found", ROUND, "warning",
                                        (fact("probe_not_found", "events", answer=missing_path),),
                                        ("platform_amplifier",), 0.5))
        unschedulable = [e for e in ev.events if e.reason == "FailedScheduling" and "nvidia.com" in e.message]
        if unschedulable:
            findings.append(Finding("gpu_unschedulable", ROUND, "warning",
                                    (fact("event", "events", reason="FailedScheduling",
                                          message=unschedulable[0].message, count=sum(e.count for e in unschedulable)),),
                                    ("platform_amplifier",), 0.4))
    else:
        lacking.append(missing("events", ev.issues, "events.txt", "events.yaml"))

    if wl is not None:
        used.append("workload")
        findings.extend(_workload(ctx))
    else:
        lacking.append(missing("workload", ev.issues, "deployment.yaml"))

    if ev.hpa is not None:
        used.append("hpa")
        metrics = ev.hpa.metrics
        if metrics and all(m.startswith(("Resource:", "ContainerResource:")) for m in metrics):
            findings.append(Finding("hpa_cpu_only", ROUND, "warning",
                                    (fact("hpa_metrics", "hpa.yaml", name=ev.hpa.name, metrics=", ".join(metrics)),),
                                    ("platform_amplifier",), 0.45))

    findings.extend(_co_location(ctx))
    findings.extend(_launches_share_gpu(ctx))
    findings.extend(_logged_platform_errors(ctx))
    findings.extend(_engine_start(ctx))
    unexplained = unexplained_failure(ctx, ROUND)
    if unexplained is not None:
        used.append("logs")
        findings.append(unexplained)
    if ev.server_config is not None:
        kube = in_kubernetes(ctx)
        for w in ev.server_config.warnings:
            key = w.partition(":")[0]  # "tgi_env_not_boolean:TRUST_REMOTE_CODE"
            if key in _LAUNCH_BREAKERS and (kube or key not in _KUBE_ONLY_BREAKERS):
                findings.append(Finding("launch_problem", ROUND, "warning",
                                        (fact("launch_warning", ev.server_config.source, warning=w),),
                                        ("platform_amplifier",), 0.5))
            else:
                # the flags may be incomplete: say so, it lowers trust in the budget
                findings.append(Finding("launch_note", ROUND, "info",
                                        (fact("launch_warning", ev.server_config.source, warning=w),)))
    return CheckResult("platform", ROUND, tuple(findings), tuple(dict.fromkeys(used)), tuple(lacking))


def _restarts(ctx: TriageContext) -> list[Finding]:
    pods = ctx.evidence.pods
    out: list[Finding] = []
    restarts = sum(p.restarts for p in pods)
    oomkilled = [p.name for p in pods for c in p.containers if c.last_termination_reason == "OOMKilled"]
    if oomkilled:
        # OOMKilled is the kernel killing the container for host RAM over its memory limit:
        # a CUDA OOM crashes the process (exit 1), it is never "OOMKilled".
        out.append(Finding("container_oomkilled", ROUND, "critical",
                           (fact("oomkilled_pods", "pods.yaml", pods=", ".join(sorted(set(oomkilled))),
                                 count=len(oomkilled)),),
                           ("platform_amplifier",), 0.7))
    if restarts:
        cuda = ctx.evidence.logs.count("cuda_oom") if ctx.evidence.logs else 0
        out.append(Finding("pods_restarting", ROUND, "critical" if restarts >= 3 else "warning",
                           (fact("restarts", "pods.yaml", count=restarts, pods=len(pods), cuda_oom_lines=cuda),),
                           ("platform_amplifier",), 0.35))
    return out


def _workload(ctx: TriageContext) -> list[Finding]:
    wl = ctx.evidence.workload
    out: list[Finding] = []
    probes = {p.kind: p for p in wl.probes}
    liveness = probes.get("liveness")
    if "startup" not in probes and liveness is not None and liveness.budget_s < T.MODEL_LOAD_BUDGET_S:
        out.append(Finding("liveness_kills_slow_start", ROUND, "warning",
                           (fact("probe_budget", wl.source, kind="liveness", budget_s=liveness.budget_s,
                                 need_s=T.MODEL_LOAD_BUDGET_S),),
                           ("platform_amplifier",), 0.45))
    if wl.gpu is not None and wl.gpu.mig_profile:
        cap = ctx.kv_capacity_tokens
        length = (ctx.config.max_model_len if ctx.config else None) or (
            ctx.budget.max_model_len if ctx.budget else None)
        small = ctx.budget is not None and not ctx.budget.fits
        if small or (cap is not None and length and cap.value < 4 * length):
            out.append(Finding("mig_slice_small", ROUND, "critical" if small else "warning",
                               (fact("mig_slice", wl.source, profile=wl.gpu.mig_profile,
                                     capacity_tokens=cap.value if cap else None, max_model_len=length),),
                               ("platform_amplifier",), 0.7 if small else 0.5))
    surge = _as_count(wl.max_surge, wl.replicas)
    if surge is not None and wl.replicas and wl.replicas > 1 and surge >= max(2, wl.replicas / 2):
        out.append(Finding("rollout_step_large", ROUND, "warning",
                           (fact("rollout_step", wl.source, max_surge=wl.max_surge, replicas=wl.replicas),),
                           ("platform_amplifier",), 0.3))
    tp = ctx.config.tensor_parallel_size if ctx.config else None
    if tp and tp > 1 and wl.shm_size is None:
        # without a /dev/shm volume NCCL gets the container's 64 MiB: an engine that did not
        # start is explained by it, one that serves is only at risk
        logs = ctx.evidence.logs
        down = logs is not None and any(logs.count(k) for k in ("nccl_error", "shm_exhausted", "engine_start_failed",
                                                                 "engine_init_failed"))
        out.append(Finding("no_shm_for_tp", ROUND, "critical" if down else "warning",
                           (fact("shm_missing", wl.source, tp=tp),), ("platform_amplifier",), 0.8 if down else 0.3))
    return out


def _engine_start(ctx: TriageContext) -> list[Finding]:
    """An engine that cannot start for a platform reason: NCCL (usually /dev/shm), the GPU
    driver or runtime, or memory another process holds on the card."""
    ev = ctx.evidence
    logs = ev.logs
    out: list[Finding] = []
    if logs is not None:
        nccl = [s for s in logs.signals if s.key in ("nccl_error", "shm_exhausted")]
        if nccl:
            out.append(Finding("nccl_failed", ROUND, "critical",
                               tuple(fact("log_signal", logs.source, signal=s.key, count=s.count, example=s.example)
                                     for s in nccl),
                               ("platform_amplifier",), 0.9))
        driver = next((s for s in logs.signals if s.key == "cuda_driver_error"), None)
        if driver is not None:
            out.append(Finding("gpu_runtime_error", ROUND, "critical",
                               (fact("log_signal", logs.source, signal=driver.key, count=driver.count,
                                     example=driver.example),),
                               ("platform_amplifier",), 0.9))
        failed = next((s for s in logs.signals if s.key in ("engine_start_failed", "engine_init_failed")), None)
        if failed is not None:
            out.append(Finding("engine_not_started", ROUND, "warning",
                               (fact("log_signal", logs.source, signal=failed.key, count=failed.count,
                                     example=failed.example),)))
    held = ctx.memory_held_elsewhere_gib
    if held is not None and ctx.gpu_total_gib is not None:
        out.append(Finding("memory_held_elsewhere", ROUND, "critical",
                           (fact("held_elsewhere_at_oom" if ctx.held_elsewhere_at_oom else "held_elsewhere",
                                 held.source, held_gib=round(held.value, 1),
                                 total_gib=round(ctx.gpu_total_gib.value, 1)),),
                           ("platform_amplifier",), 0.9))
    return out


def _co_location(ctx: TriageContext) -> list[Finding]:
    gpus = ctx.evidence.gpus
    if gpus is None:
        return []
    crowded = [d for d in gpus.devices if len({p.pid for p in d.processes}) > 1]
    if not crowded:
        return []
    d = crowded[0]
    return [Finding("gpu_shared", ROUND, "warning",
                    (fact("gpu_processes", gpus.source, gpu=d.index, processes=len(d.processes),
                          names=", ".join(sorted({p.name or "?" for p in d.processes}))),),
                    ("platform_amplifier",), 0.6)]


def _as_count(value: str | None, replicas: int | None) -> float | None:
    if value is None:
        return None
    try:
        if value.endswith("%"):
            return None if not replicas else replicas * float(value[:-1]) / 100
        return float(value)
    except ValueError:
        return None


def _launches_share_gpu(ctx: TriageContext) -> list[Finding]:
    """Two launches in the evidence given the same GPU (`--gpus device=0` twice, the same
    CUDA_VISIBLE_DEVICES): each engine's memory share is taken against a card the other uses."""
    logs = ctx.evidence.logs
    if logs is None or len(logs.launches) < 2:
        return []
    seen: dict[str, int] = {}
    for launch in logs.launches:
        for dev in set(launch.host_devices):
            seen[dev] = seen.get(dev, 0) + 1
    shared = sorted(d for d, n in seen.items() if n > 1)
    if not shared:
        return []
    failed = logs.count("no_cache_blocks") or logs.count("kv_startup_too_small") or logs.oom is not None or any(
        e.down or e.kind == "exception" for e in logs.errors)
    return [Finding("engines_share_gpu", ROUND, "critical" if failed else "warning",
                    (fact("launches_share_gpu", logs.source, gpus=", ".join(shared), launches=seen[shared[0]]),),
                    ("platform_amplifier",), 0.85 if failed else 0.6)]


def _logged_platform_errors(ctx: TriageContext) -> list[Finding]:
    """Errors the log states that are the platform's: a GPU-sharing layer (HAMi-core) refusing
    or failing an allocation, a process killed for host memory (Ray's monitor, the OOM killer)."""
    logs = ctx.evidence.logs
    if logs is None:
        return []
    out: list[Finding] = []
    sharing = [e for e in logs.errors if e.kind == "sharing_layer"]
    if sharing:
        out.append(Finding("gpu_sharing_layer_error", ROUND, "critical",
                           tuple(fact("sharing_layer_error", logs.source, example=e.example, line=e.line)
                                 for e in sharing[:2]),
                           ("platform_amplifier",), 0.85))
    host = [e for e in logs.errors if e.kind == "host_memory_kill"]
    oomkilled_pods = any(c.last_termination_reason == "OOMKilled" for p in ctx.evidence.pods for c in p.containers)
    if host and not oomkilled_pods:  # pods that say OOMKilled are read by the restarts finding
        out.append(Finding("host_memory_killed", ROUND, "critical",
                           (fact("host_memory_kill", logs.source, example=host[0].example, line=host[0].line),),
                           ("platform_amplifier",), 0.8))
    return out
