"""The verdict ranks causes from findings; healthy and insufficient_evidence are earned."""

from __future__ import annotations

import math
from dataclasses import replace

from runbooks.model.evidence import (
    ContainerState,
    Evidence,
    GpuDevice,
    GpuSnapshot,
    LogSignals,
    PodState,
    ServerConfig,
    ServerMetrics,
    SignalCount,
)
from runbooks.model.lengths import BucketShare, Histogram, ProfileShift, RequestProfile
from runbooks.model.serde import from_jsonable, to_jsonable
from runbooks.model.units import GIB
from runbooks.triage.runbook import STEPS, triage


def _gpus(used_gib: float, total_gib: float = 80.0, util: float = 40.0) -> GpuSnapshot:
    return GpuSnapshot("nvidia-smi.txt", (GpuDevice("0", "NVIDIA A100-SXM4-80GB", used_bytes=int(used_gib * GIB),
                                                    total_bytes=int(total_gib * GIB), util_gpu_pct=util),))


def _profile(s: float, m: float, l_: float, xl: float, shift: ProfileShift | None = None) -> RequestProfile:
    total = 1000
    shares = {"S": s, "M": m, "L": l_, "XL": xl}
    return RequestProfile("access.log", total=total,
                          buckets=tuple(BucketShare(k, int(v * total), v) for k, v in shares.items()),
                          p50_input_tokens=900, p95_input_tokens=7400, p99_input_tokens=7900,
                          p50_output_tokens=150, p95_output_tokens=450, p99_output_tokens=500, shift=shift)


def _config(**kw) -> ServerConfig:
    base = dict(source="deployment.yaml", engine="vllm", model="Qwen/Qwen2.5-7B-Instruct", max_model_len=8192,
                max_num_seqs=128, memory_fraction=0.9, memory_fraction_kind="total")
    base.update(kw)
    return ServerConfig(**base)


def test_nothing_but_an_idle_gpu_reading_is_insufficient_evidence():
    report = triage(Evidence(gpus=_gpus(60)))
    assert report.verdict.primary == "insufficient_evidence"
    assert report.verdict.causes == ()


def test_quiet_service_with_memory_logs_and_profile_is_healthy():
    ev = Evidence(
        gpus=_gpus(70, util=60),
        server_metrics=ServerMetrics("metrics.txt", engine="vllm", queue_depth=0, running_requests=10,
                                     kv_cache_usage_ratio=0.3, rejected_total=0, preemptions_total=0),
        requests=_profile(0.7, 0.28, 0.02, 0.0),
        logs=LogSignals("logs.txt", lines=100),
    )
    report = triage(ev)
    assert report.verdict.primary == "healthy"
    assert report.verdict.evidence_coverage >= 0.6


def test_long_share_jump_with_full_cache_names_kv_pressure_with_high_confidence():
    ev = Evidence(
        gpus=_gpus(72, util=35),
        server_config=_config(memory_fraction=0.95),
        server_metrics=ServerMetrics("metrics.txt", engine="vllm", queue_depth=18, running_requests=120,
                                     kv_cache_usage_ratio=0.99, rejected_total=12, preemptions_total=40),
        requests=_profile(0.35, 0.28, 0.37, 0.0, ProfileShift(0.08, 0.37, 400, 400)),
        logs=LogSignals("logs.txt", lines=10, signals=(SignalCount("kv_insufficient", 6),)),
    )
    report = triage(ev)
    v = report.verdict
    assert v.primary == "kv_cache_pressure"
    assert v.causes[0].confidence_label == "high"
    assert "params_near_edge" in [c.id for c in v.causes]
    assert v.priority == "high"
    # util 35% while the cache is full: the runbook's first misjudgement is called out
    assert "low_util_not_memory" in [m.id for m in v.misjudgements]
    assert "quantization_will_fix" in [m.id for m in v.misjudgements]
    assert any(a.id == "split_pools" for a in report.actions)


def test_one_weak_signal_does_not_name_a_cause():
    ev = Evidence(
        gpus=_gpus(40),
        server_metrics=ServerMetrics("metrics.txt", engine="vllm", queue_depth=14, kv_cache_usage_ratio=0.5),
        requests=_profile(0.7, 0.28, 0.02, 0.0),
    )
    report = triage(ev)
    # a deep queue alone (warning, weight 0.4 -> score 0.28) stays below the naming threshold;
    # a queue above its line is not evidence of health either, so no verdict either way
    assert report.verdict.causes == ()
    assert report.verdict.primary == "insufficient_evidence"
    assert report.verdict.health_evidence == ()


def test_oomkilled_is_read_as_host_memory_not_gpu():
    pods = (PodState("p-1", containers=(ContainerState("vllm", restart_count=4, last_termination_reason="OOMKilled",
                                                       last_exit_code=137),)),)
    report = triage(Evidence(pods=pods, gpus=_gpus(50), logs=LogSignals("logs.txt")))
    finding = next(f for f in report.findings if f.id == "container_oomkilled")
    assert finding.supports == ("platform_amplifier",)
    assert report.verdict.primary == "platform_amplifier"
    assert any(a.id == "raise_memory_limit" for a in report.actions)


def test_mixed_pool_with_slow_ttft_outranks_generic_pressure():
    slow = Histogram(buckets=((0.5, 500.0), (2.5, 900.0), (10.0, 1000.0), (math.inf, 1000.0)), count=1000.0)
    ev = Evidence(
        gpus=_gpus(74, util=45),
        server_metrics=ServerMetrics("metrics.txt", engine="vllm", queue_depth=6, running_requests=60,
                                     kv_cache_usage_ratio=0.8, ttft_seconds=slow),
        requests=_profile(0.55, 0.2, 0.2, 0.05),
    )
    report = triage(ev)
    assert report.verdict.primary == "mixed_pool"
    assert "bigger_gpu_will_fix" in [m.id for m in report.verdict.misjudgements]


def test_progress_reports_every_step_in_order():
    seen = []
    triage(Evidence(), on_step=lambda i, n, name: seen.append((i, n, name)))
    assert [name for _, _, name in seen] == list(STEPS)
    assert all(n == len(STEPS) for _, n, _ in seen)


def test_report_round_trips_through_json():
    from runbooks.model.report import Report

    ev = Evidence(gpus=_gpus(72), server_config=_config(), requests=_profile(0.5, 0.2, 0.3, 0.0))
    report = triage(ev)
    assert from_jsonable(Report, to_jsonable(report)) == report


def test_evidence_round_trips_through_json_with_infinite_buckets():
    h = Histogram(buckets=((1.0, 2.0), (math.inf, 3.0)), count=3.0)
    ev = Evidence(server_metrics=ServerMetrics("m", ttft_seconds=h), gpus=_gpus(1))
    assert from_jsonable(Evidence, to_jsonable(ev)) == ev


def test_histogram_quantile_interpolates_and_caps_at_last_finite_bound():
    h = Histogram(buckets=((10.0, 4.0), (20.0, 8.0), (math.inf, 10.0)), count=10.0)
    assert h.quantile(0.5) == 12.5
    assert h.quantile(0.99) == 20.0
    assert h.share_above(15.0) == 0.4


def test_queue_and_cache_sustained_in_prometheus_history_point_at_kv_pressure():
    from datetime import datetime, timedelta

    from runbooks.model.evidence import ServiceHistory

    t0 = datetime(2026, 3, 9, 19, 0)
    minutes = [t0 + timedelta(minutes=i) for i in range(30)]
    queue = tuple((t, 20.0 if 5 <= i < 20 else 2.0) for i, t in enumerate(minutes))
    usage = tuple((t, 0.97 if i >= 8 else 0.5) for i, t in enumerate(minutes))
    ev = Evidence(gpus=_gpus(72), service_history=ServiceHistory("prometheus", queue_depth=queue,
                                                                  kv_cache_usage_ratio=usage),
                  logs=LogSignals("logs.txt"))
    report = triage(ev)
    ids = {f.id for f in report.findings}
    assert {"queue_sustained", "kv_usage_sustained"} <= ids
    queue_fact = next(f for f in report.findings if f.id == "queue_sustained").facts[0]
    assert queue_fact.params["minutes"] == 14 and queue_fact.params["peak"] == 20.0
    assert report.verdict.primary == "kv_cache_pressure"


def test_short_spikes_in_history_are_not_sustained():
    from datetime import datetime, timedelta

    from runbooks.model.evidence import ServiceHistory

    t0 = datetime(2026, 3, 9, 19, 0)
    queue = tuple((t0 + timedelta(minutes=i), 30.0 if i % 5 == 0 else 1.0) for i in range(60))
    report = triage(Evidence(gpus=_gpus(50), service_history=ServiceHistory("prometheus", queue_depth=queue)))
    assert "queue_sustained" not in {f.id for f in report.findings}


def test_oom_kills_remembered_by_prometheus_count_when_pods_forgot_them():
    from datetime import datetime

    from runbooks.model.evidence import MemoryHistory

    pods = (PodState("p-1", containers=(ContainerState("vllm", restart_count=2, last_termination_reason="Error"),)),)
    hist = MemoryHistory("prometheus", oom_killed_at=(datetime(2026, 3, 9, 19, 40), datetime(2026, 3, 9, 19, 55)))
    report = triage(Evidence(pods=pods, memory_history=hist, gpus=_gpus(60), logs=LogSignals("logs.txt")))
    finding = next(f for f in report.findings if f.id == "container_oomkilled")
    assert finding.facts[0].params == {"count": 2, "last": "2026-03-09T19:55"}


def test_each_flag_is_changed_by_one_action_and_the_template_keeps_only_the_rest():
    from runbooks.model.changes import SetArg
    from runbooks.model.report import Action, Cause
    from runbooks.triage.verdict import one_action_per_flag

    template = Action("set_safe_flags", {"args": "--max-model-len=4096 --max-num-seqs=32 --gpu-memory-utilization=0.88"},
                      changes=(SetArg("vllm", "max-model-len", 8192, 4096),
                               SetArg("vllm", "max-num-seqs", 128, 32),
                               SetArg("vllm", "gpu-memory-utilization", 0.95, 0.88)))
    seqs = Action("lower_max_num_seqs", {"flag": "max-num-seqs", "current": 128, "target": 32},
                  changes=(SetArg("vllm", "max-num-seqs", 128, 32),))
    fraction = Action("lower_memory_fraction", {"flag": "gpu-memory-utilization", "current": 0.95, "target": 0.88},
                      changes=(SetArg("vllm", "gpu-memory-utilization", 0.95, 0.88),))
    kv = Cause("kv_cache_pressure", 0.8, "high", actions=(seqs,))
    edge = Cause("params_near_edge", 0.6, "medium", actions=(template, fraction))
    out = one_action_per_flag([kv, edge])
    (kept_seqs,) = out[0].actions
    assert kept_seqs == seqs
    left, kept_fraction = out[1].actions
    assert [c.flag for c in left.changes] == ["max-model-len"]
    assert left.params["args"] == "--max-model-len=4096"
    assert kept_fraction == fraction
    # the template covering nothing else is dropped; a cause whose only action it was keeps it
    out = one_action_per_flag([kv, Cause("params_near_edge", 0.6, "medium",
                                         actions=(replace(template, changes=template.changes[1:2]), fraction))])
    assert [a.id for a in out[1].actions] == ["lower_memory_fraction"]
    alone = Cause("params_near_edge", 0.6, "medium", actions=(replace(template, changes=template.changes[1:2]),))
    assert one_action_per_flag([kv, alone])[1].actions == alone.actions


def test_a_rule_out_quotes_the_values_its_findings_read():
    from pathlib import Path

    from collectors.bundle import load_bundle
    from runbooks.triage.runbook import triage

    report = triage(load_bundle(Path(__file__).resolve().parent.parent / "examples" / "runbook-incident"))
    kv = next(c for c in report.verdict.causes if c.id == "kv_cache_pressure")
    by_key = {f.key: f.params for f in kv.rule_out}
    assert by_key["rule_out_kv_usage"] == {"usage_pct": 98.3}
    assert by_key["rule_out_preemptions"] == {"count": 57}
    assert by_key["rule_out_long_share"] == {"before_pct": 8.3, "after_pct": 36.5}
    assert "rule_out_kv" not in by_key  # every finding quoted its own values: no general test needed
