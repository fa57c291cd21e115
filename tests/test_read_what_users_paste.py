"""Launch forms and OOM figures as users paste them, and the verdicts they lead to."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from bot.render.i18n import Catalog
from bot.render.wording import fact_text
from collectors.parsers.launch_devices import DeviceScanner, launch_devices
from collectors.parsers.log_launch import LaunchScanner
from collectors.parsers.logs import parse_server_log
from collectors.parsers.nvidia_smi import parse_nvidia_smi
from runbooks.model.evidence import ContainerState, Evidence, PodState
from runbooks.model.units import GIB
from runbooks.triage.runbook import triage
from runbooks.triage.weights_estimate import estimate_weights_gib
from tests.support import words


def _report(text: str, **kw):
    logs = parse_server_log(text)
    return triage(Evidence(logs=logs, server_config=logs.server_config, **kw))


def _ids(report):
    return {f.id for c in report.checks for f in c.findings}


# ----------------------------------------------------------------------------- launch forms


def test_a_python_call_over_several_lines_is_read_whole():
    cfg = parse_server_log('llm = LLM(\n    model="Qwen/Qwen2.5-7B-Instruct",\n    gpu_memory_utilization=0.95,\n'
                           '    max_model_len=32768,\n    tensor_parallel_size=2,\n)\nout = llm.generate(p)').server_config
    assert (cfg.launch_form, cfg.model, cfg.memory_fraction, cfg.max_model_len, cfg.tensor_parallel_size) == (
        "vllm-offline", "Qwen/Qwen2.5-7B-Instruct", 0.95, 32768, 2)


def test_engine_args_and_a_call_cut_before_it_closes_keep_what_they_show():
    cfg = parse_server_log('engine_args = AsyncEngineArgs(\nmodel="microsoft/Phi-3-medium-128k-instruct",\n'
                           'gpu_memory_utilization=0.8,\ndtype=torch.float16,\nenforce_eager=True,\n)').server_config
    assert (cfg.model, cfg.memory_fraction, cfg.dtype, cfg.enforce_eager) == (
        "microsoft/Phi-3-medium-128k-instruct", 0.8, "float16", True)
    cut = parse_server_log('llm = LLM(model="m/x",\n   max_model_len=4096,').server_config
    assert (cut.model, cut.max_model_len) == ("m/x", 4096)


def test_parentheses_inside_quotes_do_not_close_the_call():
    cfg = parse_server_log('llm = LLM(model="a/b(c)",\n  max_model_len=2048)').server_config
    assert (cfg.model, cfg.max_model_len) == ("a/b(c)", 2048)


def test_each_docker_run_and_env_prefix_names_its_gpus():
    cases = {
        "docker run --gpus all vllm/vllm-openai --model m": ((), None, True),
        "docker run --gpus 2 vllm/vllm-openai --model m": ((), 2, False),
        "docker run --gpus device=1 vllm/vllm-openai --model m": (("1",), 1, False),
        "docker run --gpus '\"device=0,1\"' vllm/vllm-openai --model m": (("0", "1"), 2, False),
        "docker run --gpus='\"device=3\"' -e CUDA_VISIBLE_DEVICES=0 img --model m": (("3",), 1, False),
        "CUDA_VISIBLE_DEVICES=4,5 python -m vllm.entrypoints.openai.api_server --model m": (("4", "5"), 2, False),
        'llm = LLM(model="m", device="cuda:7")': (("7",), 1, False),
    }
    for text, (host, count, every) in cases.items():
        got = launch_devices(text)
        assert (got.host_devices, got.visible_count, got.all_gpus) == (host, count, every), text
    assert launch_devices("vllm serve m --port 8000") is None


def test_continued_lines_are_one_launch():
    s = DeviceScanner()
    for line in ["docker run -d \\", "    --runtime=nvidia \\", "    --gpus '\"device=1\"' \\", "    img --model=m"]:
        s.feed(line)
    (launch,) = s.result()
    assert (launch.host_devices, launch.line) == (("1",), 1)


@given(st.lists(st.text(max_size=100), max_size=30))
def test_the_launch_readers_take_any_text(lines):
    devices, launch = DeviceScanner(), LaunchScanner()
    for line in lines:
        devices.feed(line)
        launch.feed(line)
    assert all(x.visible_count is None or x.visible_count >= 1 for x in devices.result())
    launch.result()  # a config or None, never an exception


@given(st.text(alphabet="LLM(model=\"x\", )\n'0.9abc=", max_size=200))
def test_a_python_call_of_any_shape_reads_or_yields_nothing(text):
    cfg = parse_server_log(text).server_config
    assert cfg is None or cfg.engine == "vllm"


# ----------------------------------------------------------------------------- OOM figures


_OTHERS = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 768.00 MiB. GPU 0 has a total capacty of "
           "79.15 GiB of which 752.31 MiB is free. Process 25252 has 18.65 GiB memory in use. Process 36870 has 19.11 GiB "
           "memory in use. Including non-PyTorch memory, this process has 29.47 GiB memory in use. Of the allocated "
           "memory 28.83 GiB is allocated by PyTorch, and 12.70 MiB is reserved by PyTorch but unallocated.")


def test_other_processes_on_the_card_are_memory_held_elsewhere():
    oom = parse_server_log(_OTHERS).oom
    assert round(oom.this_process_bytes / GIB, 2) == 29.47
    assert round(oom.other_processes_bytes / GIB, 2) == 37.76
    report = _report(_OTHERS)
    assert "memory_held_elsewhere" in _ids(report)
    assert report.verdict.primary == "platform_amplifier"


def test_one_process_named_alone_is_the_failing_process_itself():
    text = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB. GPU 0 has a total capacity of "
            "79.33 GiB of which 16.00 MiB is free. Process 36891 has 79.29 GiB memory in use. Of the allocated memory "
            "69.59 GiB is allocated by PyTorch, and 118.89 MiB is reserved by PyTorch but unallocated.")
    assert "memory_held_elsewhere" not in _ids(_report(text))


def test_torchs_multi_line_allocator_report_is_read_whole():
    text = ("torch.cuda.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
            "Currently allocated     : 9.64 GiB\nRequested               : 1.49 MiB\n"
            "Device limit            : 39.39 GiB\nFree (according to CUDA): 3.06 MiB\n")
    oom = parse_server_log(text).oom
    assert (round(oom.allocated_bytes / GIB, 2), round(oom.total_bytes / GIB, 2), round(oom.tried_bytes / 2**20, 2)) == (
        9.64, 39.39, 1.49)
    report = _report(text)
    held = next(f for c in report.checks for f in c.findings if f.id == "memory_held_elsewhere")
    assert held.facts[0].key == "held_elsewhere_at_oom" and held.facts[0].params["held_gib"] == 29.8


def test_an_allocation_larger_than_the_card_names_no_sizing_cause():
    text = ("RuntimeError: Worker failed with error 'CUDA out of memory. Tried to allocate 1029.51 GiB. GPU 0 has a total "
            "capacity of 79.35 GiB of which 19.23 GiB is free. Process 145882 has 60.12 GiB memory in use.'")
    report = _report(text)
    assert report.verdict.causes == ()
    assert report.verdict.primary == "insufficient_evidence"
    oom = next(f for c in report.checks for f in c.findings if f.id == "cuda_oom")
    assert any(x.key == "oom_request_exceeds_card" for x in oom.facts)


def test_a_tgi_shard_that_failed_to_start_with_the_card_full_is_weights_too_large():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 128.00 MiB (GPU 0; 15.77 GiB total "
            "capacity; 15.37 GiB already allocated; 13.62 MiB free; 15.77 GiB allowed; 15.40 GiB reserved in total by "
            "PyTorch)\nError: ShardCannotStart\n2023-08-17T10:23:27Z ERROR text_generation_launcher: Shard 0 failed to start")
    report = _report(text)
    assert report.verdict.primary == "weights_too_large"


# ----------------------------------------------------------------------------- the weights from the name


def test_the_weights_from_the_name_and_precision():
    assert round(estimate_weights_gib("/data/models/Qwen2-7B-Instruct", "float", None).gib, 1) == 26.1
    assert estimate_weights_gib("Yi-1.5-34B-Chat", None, None).params_b == 34
    assert estimate_weights_gib("Qwen3-30B-A3B", None, None).params_b == 30
    assert estimate_weights_gib("x/Llama-3.1-8B-Instruct-AWQ", None, None).bytes_per_param == 0.5
    assert estimate_weights_gib("x/model-fp8", None, None) is None
    assert estimate_weights_gib("mistralai/Mixtral-8x7B-v0.1", None, None) is None


def test_a_72b_model_with_eight_gpus_visible_and_tp_unset_is_parallelism():
    text = ("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 384.00 MiB. GPU 0 has a total capacty of "
            "79.33 GiB of which 351.81 MiB is free. Including non-PyTorch memory, this process has 78.97 GiB memory in "
            "use.\nCUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 python -m vllm.entrypoints.openai.api_server \\\n"
            "--model qwen/Qwen1.5-72B-Chat\n")
    report = _report(text)
    assert report.verdict.primary == "parallelism_misconfig"
    assert "weights_beyond_card_gpus_idle" in _ids(report)


def test_a_float32_7b_on_a_22_gib_card_is_weights_too_large():
    text = ("python -m vllm.entrypoints.openai.api_server --model /m/Qwen2-7B-Instruct --max-model-len=512 --dtype=float\n"
            "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 518.00 MiB. GPU 0 has a total capacty of "
            "21.67 GiB of which 4.06 MiB is free. Process 2417585 has 21.65 GiB memory in use. Of the allocated memory "
            "21.32 GiB is allocated by PyTorch, and 1018.00 KiB is reserved by PyTorch but unallocated.")
    assert _report(text).verdict.primary == "weights_too_large"


# ----------------------------------------------------------------------------- the platform's own failures


def test_two_launches_on_one_gpu_are_a_shared_gpu_with_its_action():
    text = ("docker run -d --gpus='\"device=0\"' vllm/vllm-openai:v0.8.5 --model /m --gpu-memory-utilization 0.3 --port 8900\n"
            "docker run -d --gpus='\"device=0\"' vllm/vllm-openai:v0.8.5 --model /m --gpu-memory-utilization 0.3 --port 8901\n")
    report = _report(text)
    assert report.verdict.primary == "platform_amplifier"
    (action,) = [a for a in report.actions if a.id == "one_engine_per_gpu"]
    assert (action.params["gpus"], action.params["launches"]) == ("0", 2)
    separate = _report(text.replace('--gpus=\'"device=0"\' vllm/vllm-openai:v0.8.5 --model /m --gpu-memory-utilization 0.3 '
                                    '--port 8901', '--gpus=\'"device=1"\' vllm/vllm-openai:v0.8.5 --model /m '
                                    '--gpu-memory-utilization 0.3 --port 8901'))
    assert "engines_share_gpu" not in _ids(separate)


def test_a_sharing_layer_error_and_a_host_memory_kill_are_the_platforms():
    hami = _report("[HAMI-core ERROR (pid:1 thread=1 allocator.c:53)]: Device 0 OOM 18446744073707737660 / 24146608128")
    assert hami.verdict.primary == "platform_amplifier" and "gpu_sharing_layer_error" in _ids(hami)
    assert not any(f.id.startswith("unexplained_failure") for c in hami.checks for f in c.findings)
    ray = _report("ERROR:    Exception in ASGI application\nTraceback (most recent call last):\n"
                  '  File "x.py", line 1, in f\nray.exceptions.OutOfMemoryError: Task was killed due to the node running '
                  "low on memory.")
    assert ray.verdict.primary == "platform_amplifier" and "host_memory_killed" in _ids(ray)
    assert any(a.id == "raise_host_memory" for a in ray.actions)


def test_sglang_on_loopback_is_a_launch_problem_only_in_kubernetes():
    text = "python -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --port 30000"
    assert "launch_problem" not in _ids(_report(text))
    pods = (PodState("p-1", containers=(ContainerState("sglang", restart_count=0, ready=False, state="running"),)),)
    assert "launch_problem" in _ids(_report(text, pods=pods))


def test_a_tgi_boolean_env_var_set_to_1_is_the_launch_problem_named():
    from collectors.parsers.flags import server_config_from_container
    config = server_config_from_container({
        "image": "ghcr.io/huggingface/text-generation-inference:3.3.4",
        "env": [{"name": "MODEL_ID", "value": "Qwen/Qwen2.5-7B-Instruct"}, {"name": "TRUST_REMOTE_CODE", "value": "1"}]})
    pods = (PodState("tgi-1", containers=(ContainerState("tgi", restart_count=5, ready=False, state="waiting",
                                                         state_reason="CrashLoopBackOff",
                                                         last_termination_reason="Error", last_exit_code=2),)),)
    report = triage(Evidence(server_config=config, pods=pods))
    problems = [f for c in report.checks for f in c.findings if f.id == "launch_problem"]
    assert [f.facts[0].params["warning"] for f in problems] == ["tgi_env_not_boolean:TRUST_REMOTE_CODE"]
    assert any(a.id == "fix_launch" for a in report.actions)
    en_text, zh_text = (fact_text(Catalog.load(lang), problems[0].facts[0]) for lang in ("en", "zh"))
    assert en_text == ("TGI's launcher takes TRUST_REMOTE_CODE only as true or false; any other value (1, yes, an "
                       "empty string) stops it before the model loads (error: invalid value ... [possible values: "
                       "true, false]); set it to true or false, or remove it")
    assert "TRUST_REMOTE_CODE" in zh_text and "true 或 false" in zh_text
    fine = server_config_from_container({
        "image": "ghcr.io/huggingface/text-generation-inference:3.3.4",
        "env": [{"name": "MODEL_ID", "value": "Qwen/Qwen2.5-7B-Instruct"}, {"name": "TRUST_REMOTE_CODE", "value": "true"}]})
    assert "launch_problem" not in _ids(triage(Evidence(server_config=fine, pods=pods)))


# ----------------------------------------------------------------------------- nvidia-smi as pasted

_PROCESSES = """| Processes:                                                                              |
|  GPU   GI   CI        PID   Type   Process name                              GPU Memory |
|=========================================================================================|
|    0   N/A  N/A     15982      C   /opt/venv/bin/python3                      15982MiB |
|    0   N/A  N/A     16000      C   python3                                     4000MiB |
"""


def test_nvidia_smi_dash_l_alone_names_the_cards_and_their_mig_profile():
    snap = parse_nvidia_smi("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-ffd5acaf)\n"
                            "  MIG 3g.20gb     Device  0: (UUID: MIG-7ec5b605)\n"
                            "GPU 1: NVIDIA H100 80GB HBM3 (UUID: GPU-1234)\n")
    assert [(d.index, d.name, d.mig_profile) for d in snap.devices] == [
        ("0", "NVIDIA A100-SXM4-40GB", "3g.20gb"), ("1", "NVIDIA H100 80GB HBM3", None)]


def test_the_process_table_alone_shows_two_engines_on_one_card():
    snap = parse_nvidia_smi(_PROCESSES)
    (dev,) = snap.devices
    assert [(p.pid, p.used_bytes // 2**20) for p in dev.processes] == [(15982, 15982), (16000, 4000)]
    report = triage(Evidence(gpus=snap))
    assert "gpu_shared" in _ids(report)
    # no Kubernetes evidence: the action is not a node pool or a taint
    assert [a.id for a in report.actions] == ["one_engine_per_gpu"]


def test_a_table_cut_after_its_header_is_a_typed_error_naming_the_file():
    from collectors.errors import ParseError
    with words.raises(ParseError, match=r"nvidia-smi\.txt"):
        parse_nvidia_smi("+------+\n| NVIDIA-SMI 535.54.03              Driver Version: 535.54.03    CUDA Version: 12.2 |\n|--")


@given(st.text(max_size=300))
def test_nvidia_smi_text_of_any_shape_is_a_snapshot_or_a_typed_error(text):
    from collectors.errors import ParseError
    try:
        snap = parse_nvidia_smi(text)
    except ParseError as e:
        assert "nvidia-smi.txt" in str(e)
    else:
        assert all(d.index for d in snap.devices)


def test_the_platform_is_worded_as_kubernetes_only_with_kubernetes_evidence():
    from bot.render.text import render_text

    text = ("docker run -d --gpus='\"device=0\"' vllm/vllm-openai:v0.8.5 --model /m --port 8900\n"
            "docker run -d --gpus='\"device=0\"' vllm/vllm-openai:v0.8.5 --model /m --port 8901\n")
    report = _report(text)
    assert report.verdict.kubernetes is False
    out = render_text(report, "en")
    assert "Kubernetes amplifies it" not in out and "The platform amplifies it" in out
    (cause,) = [c for c in report.verdict.causes if c.id == "platform_amplifier"]
    assert [(f.key, f.params) for f in cause.rule_out] == [("rule_out_shared_launches", {"gpus": "0"})]
