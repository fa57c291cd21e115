"""'Healthy' is earned by evidence of a serving engine; an error no rule explains is evidence."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from bot.main import main
from bot.render.i18n import LANGS, Catalog
from collectors.parsers.log_errors import MAX_ERRORS, ErrorReader
from collectors.parsers.logs import parse_server_log
from runbooks.catalogs.signals import ROUTER_PROCESSES
from runbooks.model.evidence import (
    ContainerState,
    Evidence,
    GpuDevice,
    GpuSnapshot,
    PodState,
    ServerMetrics,
)
from runbooks.model.units import GIB
from runbooks.triage.runbook import triage

KINDS = {"error_line", "exception", "traceback", "process_exit", "sharing_layer", "host_memory_kill", "router_exit"}


def _errors(text: str):
    return parse_server_log(text).errors


def _log(text: str) -> Evidence:
    return Evidence(logs=parse_server_log(text), server_config=parse_server_log(text).server_config)


def _finding(report, fid):
    return next((f for c in report.checks for f in c.findings if f.id == fid), None)


# ----------------------------------------------------------------------------- the error reader


def test_a_vllm_worker_traceback_is_one_error_quoted_by_its_exception():
    text = "\n".join([
        "(VllmWorkerProcess pid=614) ERROR 02-14 08:44:33 multiproc_worker_utils.py:242] Traceback (most recent call last):",
        '(VllmWorkerProcess pid=614) ERROR 02-14 08:44:33 multiproc_worker_utils.py:242]   File "/x/worker.py", line 3, in run',
        "(VllmWorkerProcess pid=614) ERROR 02-14 08:44:33 multiproc_worker_utils.py:242]     raise e",
        "(VllmWorkerProcess pid=614) ERROR 02-14 08:44:33 multiproc_worker_utils.py:242]     ^^^^^^^",
        "(VllmWorkerProcess pid=614) ERROR 02-14 08:44:33 multiproc_worker_utils.py:242] KeyError: 'lm_head.weight'",
    ])
    errors = _errors(text)
    assert [(e.kind, e.example, e.explained) for e in errors] == [("exception", "KeyError: 'lm_head.weight'", False)]


def test_a_log_cut_inside_a_traceback_counts_it_by_its_last_frame():
    text = '  File "/usr/lib/vllm/worker.py", line 155, in load_model\n    self.model_runner.load_model()\n'
    (e,) = _errors(text)
    assert (e.kind, e.example) == ("traceback", 'File "/usr/lib/vllm/worker.py", line 155, in load_model')


def test_an_info_line_ends_a_cut_traceback_and_later_errors_still_count():
    text = "\n".join([
        "Traceback (most recent call last):",
        '  File "a.py", line 1, in f',
        "INFO 05-10 12:00:01 [api_server.py:1] Started server process",
        "ERROR 05-10 12:00:02 [engine.py:9] Engine loop stopped",
    ])
    kinds = [e.kind for e in _errors(text)]
    assert kinds == ["traceback", "error_line"]


def test_sharing_layer_shard_exit_and_exception_class_forms():
    text = "\n".join([
        "[HAMI-core ERROR (pid:1 thread=1 allocator.c:53)]: Device 0 OOM 18446744073707737660 / 24146608128",
        "2023-08-17T10:23:27.032737Z ERROR text_generation_launcher: Shard 0 failed to start",
        'DriverError(CUDA_ERROR_UNKNOWN, "<Failure when calling cuGetErrorString()>")',
        "ray.exceptions.OutOfMe",
    ])
    got = [(e.kind, e.down) for e in _errors(text)]
    assert got == [("sharing_layer", False), ("process_exit", True), ("exception", False), ("host_memory_kill", True)]


def test_raylets_kill_summary_hamis_bare_allocator_error_and_a_dead_engine_loop_are_read():
    text = "\n".join([
        "(raylet) node_manager.cc:3007: 2 Workers (tasks /",
        " actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node",
        "gpu error cuMemoryAllocate failed res=2 CUDA failure 2: out of memeory",
        "ERROR 09-11 17:21:30 async_llm_engine.py:63] Engine background task failed",
    ])
    got = [(e.kind, e.down) for e in _errors(text)]
    assert got == [("host_memory_kill", True), ("sharing_layer", False), ("process_exit", True)]
    # a CUDA driver allocation that failed is not the sharing layer's
    assert [e.kind for e in _errors("RuntimeError: cuMemAlloc failed: out of memory")] == ["exception"]


def test_a_line_a_rule_explains_is_recorded_as_explained():
    text = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 MiB. GPU 0 has a total capacity of 44.53 GiB"
    (e,) = _errors(text)
    assert (e.kind, e.explained) == ("exception", True)


def test_info_and_warning_lines_are_not_errors():
    text = ("INFO 05-10 12:00:01 [x.py:1] errors so far: 0\n"
            "WARNING 05-10 12:00:01 [x.py:1] error handling is disabled\n"
            "INFO 05-10 12:00:01 [metrics.py:1] Avg prompt throughput: 1 tokens/s, Running: 1 reqs, Pending: 0 reqs")
    assert _errors(text) == ()


def test_a_crash_loop_repeating_one_error_quotes_it_once():
    text = "\n".join(f"ERROR 05-10 12:00:{i:02d} [core.py:1] EngineCore died unexpectedly (pid {100 + i})"
                     for i in range(40))
    errors = _errors(text)
    assert len(errors) == 1 and errors[0].down


@given(st.lists(st.text(max_size=120), max_size=40))
def test_the_error_reader_takes_any_text(lines):
    r = ErrorReader()
    for line in lines:
        r.feed(line, line, explained=len(line) % 2 == 0)
    out = r.result()
    assert len(out) <= MAX_ERRORS
    assert all(e.kind in KINDS and isinstance(e.example, str) for e in out)


# ----------------------------------------------------------------------------- healthy is earned


_UVICORN_STOP = ["INFO:     Shutting down", "INFO:     Waiting for connections to close. (CTRL+C to force quit)",
                 "INFO:     Waiting for application shutdown."]


def test_a_routers_orderly_stop_is_the_routers_not_the_engines():
    # production-stack 448: the router's log, its module named on the lines after the stop
    router = [*_UVICORN_STOP, "[2025-05-21 11:44:46,899] INFO: httpx AsyncClient closed "
              "(httpx_client.py:43:vllm_router.httpx_client)"]
    errors = _errors("\n".join(router))
    assert [(e.kind, e.down, e.process) for e in errors] == [("router_exit", False, "vllm_router")]
    report = triage(_log("\n".join(router)))
    assert _finding(report, "unexplained_failure_down") is None
    assert report.verdict.priority != "high"
    quoted = _finding(report, "unexplained_failure").facts[0]
    assert quoted.params["error_kind"] == "router_exit_vllm_router"
    # an SGLang router and an AIBrix gateway are read the same way; an engine's own stop is down
    for mark, key in (("[Router] sglang_router.launch_router started", "sglang_router"),
                      ("gateway-plugins: ext_proc stream closed", "aibrix_gateway")):
        assert [(e.kind, e.process) for e in _errors("\n".join([mark, *_UVICORN_STOP]))] == [("router_exit", key)]
    engine = ["INFO 05-21 11:40:00 [api_server.py:1043] vLLM API server version 0.8.5", *_UVICORN_STOP]
    assert [(e.kind, e.down, e.process) for e in _errors("\n".join(engine))] == [("process_exit", True, None)]
    assert _finding(triage(_log("\n".join(engine))), "unexplained_failure_down") is not None
    # TGI's shards stopping is the engine's even beside a router's name
    shards = _errors("\n".join(["(httpx_client.py:43:vllm_router.httpx_client)", "Shutting down shards"]))
    assert [(e.kind, e.down) for e in shards] == [("process_exit", True)]


def test_every_router_has_its_stop_worded_in_each_language():
    for lang in LANGS:
        for key, _, _ in ROUTER_PROCESSES:
            assert Catalog.load(lang).has(f"error_kind.router_exit_{key}"), (lang, key)


def _metrics(kv: float, queue: float) -> ServerMetrics:
    return ServerMetrics("metrics.txt", engine="vllm", queue_depth=queue, running_requests=4, kv_cache_usage_ratio=kv)


def test_a_launch_command_alone_is_not_evidence_of_health():
    report = triage(_log("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.9"))
    assert report.verdict.primary == "insufficient_evidence"
    keys = [f.key for f in report.verdict.capture_next]
    assert keys == ["capture_metrics", "capture_nvidia_smi", "capture_logs"]
    assert report.verdict.capture_next[0].params["command"] == "curl -s localhost:8000/metrics > metrics.txt"


def test_a_serving_engine_below_its_lines_is_healthy_and_says_why():
    report = triage(Evidence(server_metrics=_metrics(0.31, 0)))
    assert report.verdict.primary == "healthy"
    (f,) = report.verdict.health_evidence
    assert (f.key, f.params["usage_pct"], f.params["queue"]) == ("health_serving", 31.0, 0)
    assert report.verdict.capture_next == ()


def test_kv_usage_or_queue_over_its_line_is_not_health():
    for kv, queue in ((0.95, 0), (0.3, 40)):
        report = triage(Evidence(server_metrics=_metrics(kv, queue)))
        assert report.verdict.primary != "healthy", (kv, queue)


def test_requests_waiting_for_a_cache_that_cannot_hold_one_more_are_kv_pressure_not_health():
    # 2 running at 82%: each holds ~41%, so a third cannot be admitted and 3 wait
    blocked = ServerMetrics("metrics.txt", engine="vllm", queue_depth=3, running_requests=2,
                            kv_cache_usage_ratio=0.821)
    report = triage(Evidence(server_metrics=blocked))
    assert report.verdict.primary == "kv_cache_pressure"
    f = _finding(report, "kv_admission_blocked")
    assert (f.facts[0].params["waiting"], f.facts[0].params["running"], f.facts[0].params["per_request_pct"]) == (
        3, 2, 41.0)
    assert _finding(report, "kv_usage_ok") is None
    # the same usage with room for one more of the running size (20 running at ~4% each) is not blocked
    roomy = ServerMetrics("metrics.txt", engine="vllm", queue_depth=3, running_requests=20, kv_cache_usage_ratio=0.821)
    report = triage(Evidence(server_metrics=roomy))
    assert _finding(report, "kv_admission_blocked") is None
    assert report.verdict.primary == "healthy"
    # nothing waiting: no admission problem to speak of
    idle = ServerMetrics("metrics.txt", engine="vllm", queue_depth=0, running_requests=2, kv_cache_usage_ratio=0.821)
    assert _finding(triage(Evidence(server_metrics=idle)), "kv_admission_blocked") is None


def test_ready_pods_without_restarts_are_evidence_and_one_restart_is_not():
    ready = (PodState("p-1", containers=(ContainerState("vllm", restart_count=0, ready=True, state="running"),)),)
    assert triage(Evidence(pods=ready)).verdict.primary == "healthy"
    restarted = (PodState("p-1", containers=(ContainerState("vllm", restart_count=1, ready=True, state="running"),)),)
    assert triage(Evidence(pods=restarted)).verdict.primary != "healthy"


def test_a_busy_gpu_needs_the_cards_size_to_count():
    dev = GpuDevice("0", None, used_bytes=int(60 * GIB), util_gpu_pct=90)
    assert triage(Evidence(gpus=GpuSnapshot("nvidia-smi.txt", (dev,)))).verdict.primary == "insufficient_evidence"
    sized = GpuDevice("0", "NVIDIA A100-SXM4-80GB", used_bytes=int(60 * GIB), total_bytes=int(80 * GIB),
                      util_gpu_pct=90)
    report = triage(Evidence(gpus=GpuSnapshot("nvidia-smi.txt", (sized,))))
    assert report.verdict.primary == "healthy"
    assert report.verdict.health_evidence[0].key == "health_gpu_busy"


def test_an_unexplained_error_is_quoted_and_forbids_healthy_even_beside_good_metrics():
    logs = parse_server_log("INFO 05-10 12:00:01 [api_server.py:1] vLLM API server version 0.8.5\n"
                            "ERROR 05-10 12:00:09 [core.py:2] EngineCore encountered a fatal error.\n"
                            "KeyError: 'lm_head.weight'")
    report = triage(Evidence(logs=logs, server_metrics=_metrics(0.2, 0)))
    assert report.verdict.primary == "insufficient_evidence"
    f = _finding(report, "unexplained_failure")
    assert f is not None and f.severity == "warning"
    assert [x.params["example"] for x in f.facts] == ["EngineCore encountered a fatal error.",
                                                      "KeyError: 'lm_head.weight'"]


def test_an_unexplained_exit_says_the_engine_is_down_and_raises_priority():
    report = triage(_log("2023-08-17T10:23:27Z ERROR text_generation_launcher: Shard 0 failed to start"))
    f = _finding(report, "unexplained_failure_down")
    assert f is not None and f.severity == "critical"
    assert report.verdict.primary == "insufficient_evidence"
    assert report.verdict.priority == "high"


def test_the_exits_after_an_explained_oom_are_not_quoted_again():
    report = triage(_log(
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB total "
        "capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.77 GiB allowed; 15.40 GiB reserved in total by "
        "PyTorch)\nError: ShardCannotStart\n2023-08-17T10:23:27Z ERROR text_generation_launcher: Shard 0 failed to start"))
    assert _finding(report, "unexplained_failure") is None
    assert _finding(report, "unexplained_failure_down") is None


def test_kubectl_is_suggested_only_with_kubernetes_evidence(tmp_path: Path):
    (tmp_path / "logs.txt").write_text("python -m vllm.entrypoints.openai.api_server --model m --port 8011\n")
    rc = main(["triage", "--bundle", str(tmp_path), "--json"])
    assert rc == 3
    from collectors.bundle import load_bundle
    report = triage(load_bundle(tmp_path))
    commands = [f.params["command"] for f in report.verdict.capture_next]
    assert commands[0] == "curl -s localhost:8011/metrics > metrics.txt"
    assert not any("kubectl" in c for c in commands)
    (tmp_path / "events.txt").write_text(
        "LAST SEEN   TYPE      REASON      OBJECT            MESSAGE\n"
        "2m          Warning   BackOff     pod/vllm-0        Back-off restarting failed container\n")
    report = triage(load_bundle(tmp_path))
    assert any(c.startswith("kubectl") for c in (f.params["command"] for f in report.verdict.capture_next))


def test_a_traceback_cut_before_its_exception_asks_for_the_whole_log():
    report = triage(_log('  File "/usr/lib/vllm/worker.py", line 155, in load_model\n    self.model_runner.load_model()\n'))
    assert report.verdict.primary == "insufficient_evidence"
    assert "capture_logs" in [f.key for f in report.verdict.capture_next]
    f = _finding(report, "unexplained_failure")
    assert f.facts[0].params["error_kind"] == "traceback"


def test_flags_alone_name_no_cause_and_the_same_flags_beside_a_symptom_do():
    launch = "vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192 --gpu-memory-utilization 0.97"
    alone = triage(_log(launch))
    assert alone.verdict.primary == "insufficient_evidence" and alone.verdict.causes == ()
    assert _finding(alone, "memory_fraction_at_edge") is not None  # still shown, as a flag reading
    oom = (launch + "\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.27 GiB. GPU 0 has a total "
           "capacity of 79.33 GiB of which 109.81 MiB is free. Process 1 has 79.19 GiB memory in use.")
    assert "params_near_edge" in {c.id for c in triage(_log(oom)).verdict.causes}
    visible = triage(_log("CUDA_VISIBLE_DEVICES=1,2 vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192"))
    assert visible.verdict.primary == "insufficient_evidence"
    assert _finding(visible, "gpus_visible_unused") is not None
    # an amplifier in the configuration (an HPA on CPU only) beside an engine serving below its
    # lines: a risk shown, not a cause; the same HPA beside restarts amplifies them
    from runbooks.model.evidence import Autoscaler

    hpa = Autoscaler("qwen", 1, 4, ("Resource:cpu",))
    calm = triage(Evidence(server_metrics=_metrics(0.31, 0), hpa=hpa))
    assert calm.verdict.primary == "healthy" and _finding(calm, "hpa_cpu_only") is not None
    restarting = (PodState("qwen-0", containers=(ContainerState("vllm", restart_count=4, ready=False),)),)
    assert triage(Evidence(server_metrics=_metrics(0.31, 0), hpa=hpa, pods=restarting)).verdict.primary == (
        "platform_amplifier")
