"""The launch a log shows becomes the server config: pasted commands and the engines' printouts.

Every line here is from a public issue thread (the real-evidence corpus, tests/data/real, or a
thread it cites), as posted.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.bundle import load_bundle
from collectors.parsers.log_launch import LaunchScanner
from collectors.parsers.logs import parse_server_log

REAL = Path(__file__).parent / "data" / "real"


def _scan(text: str):
    scanner = LaunchScanner()
    for line in text.splitlines():
        scanner.feed(line)
    return scanner.result()


def test_a_module_command_with_continuations_is_read_and_the_last_one_wins():
    cfg = _scan((REAL / "vllm-10533-two-instances-a100" / "logs.txt").read_text())
    assert (cfg.engine, cfg.launch_form) == ("vllm", "vllm-module")
    assert cfg.model == "/models/Qwen2.5-14B-Instruct-GPTQ-Int4"  # the second server, the one that failed
    assert (cfg.memory_fraction, cfg.memory_fraction_kind, cfg.max_model_len) == (0.2, "total", 16384)


def test_vllm_serve_after_a_language_tag_and_env_assignments():
    cfg = _scan("bash VLLM_PP_LAYER_PARTITION=16,32 CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 vllm serve "
                "./Qwen/Qwen3-Coder-30B-A3B-Instruct-FP8 --gpu-memory-utilization 0.9 --served-model-name "
                "Qwen3-Coder-30B-A3B-Instruct-FP8 --pipeline-parallel-size 2 --enable-chunked-prefill")
    assert (cfg.engine, cfg.launch_form, cfg.pipeline_parallel_size, cfg.memory_fraction) == (
        "vllm", "vllm-serve", 2, 0.9)
    assert cfg.env == {"CUDA_VISIBLE_DEVICES": "0,1"}


def test_a_shell_prompt_before_the_command_is_passed_over():
    cfg = _scan("[root@localhost wangjianqiang]# python -m vllm.entrypoints.openai.api_server --model "
                "/root/wangjianqiang/deepseek-moe/deepseek-coder-33b-base/ --tensor-parallel-size 8 --port 9010")
    assert (cfg.engine, cfg.tensor_parallel_size) == ("vllm", 8)


def test_docker_run_reads_the_image_and_its_arguments():
    cfg = _scan((REAL / "vllm-14376-two-tinyllama-l40s-v1" / "logs.txt").read_text())
    assert (cfg.engine, cfg.launch_form, cfg.model) == ("vllm", "vllm-entrypoint-args",
                                                        "TinyLlama/TinyLlama-1.1B-Chat-v1.0")
    assert (cfg.max_model_len, cfg.memory_fraction) == (1024, 0.2)
    tgi = _scan("docker run -ti --runtime nvidia --shm-size 1g -p 8080:80 ghcr.io/huggingface/text-generation-"
                "inference:1.4 --model-id mistralai/Mixtral-8x7B-Instruct-v0.1 --quantize bitsandbytes")
    assert (tgi.engine, tgi.engine_version, tgi.model, tgi.quantization) == (
        "tgi", "1.4", "mistralai/Mixtral-8x7B-Instruct-v0.1", "bitsandbytes")


def test_a_docker_compose_service_is_read_from_its_image_and_command():
    cfg = _scan((REAL / "vllm-13100-mistral-large-compose-099" / "logs.txt").read_text())
    assert (cfg.engine, cfg.model) == ("vllm", "TechxGenus/Mistral-Large-Instruct-2407-GPTQ")
    assert (cfg.memory_fraction, cfg.max_model_len, cfg.max_num_seqs, cfg.kv_cache_dtype) == (
        0.99, 25000, 64, "fp8_e4m3")


def test_the_offline_llm_call_gives_its_keyword_arguments():
    cfg = _scan('llm = LLM(model="hiuman/Vistral-7B-Chat-quantize", quantization="AWQ",enforce_eager=True, '
                "gpu_memory_utilization=0.1)")
    assert (cfg.engine, cfg.model, cfg.memory_fraction, cfg.enforce_eager) == (
        "vllm", "hiuman/Vistral-7B-Chat-quantize", 0.1, True)


def test_vllm_printouts_the_engine_config_line_and_the_namespace():
    v0 = _scan("INFO 01-11 15:51:02 llm_engine.py:70] Initializing an LLM engine with config: model='/home/"
               "***/***/models/alpaca-2', tokenizer='/home/***/***/models/alpaca-2', tokenizer_mode=auto, "
               "revision=None, tokenizer_revision=None, trust_remote_code=False, dtype=torch.float16, "
               "max_seq_len=4096, download_dir=None, load_format=auto, tensor_parallel_size=1, quantization=None, "
               "enforce_eager=False, seed=0)")
    assert (v0.engine, v0.launch_form, v0.max_model_len, v0.dtype, v0.tensor_parallel_size) == (
        "vllm", "engine-printout", 4096, "float16", 1)
    versioned = _scan("Initializing an LLM engine (v0.5.4) with config: model='/mnt/models/models--meta-llama--"
                      "llama-3-1-70b-instruct', dtype=torch.float16, max_seq_len=131072, tensor_parallel_size=2, "
                      "pipeline_")
    assert (versioned.engine_version, versioned.max_model_len, versioned.tensor_parallel_size) == (
        "0.5.4", 131072, 2)
    namespace = _scan((REAL / "vllm-7107-tp8-gpus-exceed-cluster" / "logs.txt").read_text())
    assert (namespace.tensor_parallel_size, namespace.pipeline_parallel_size, namespace.memory_fraction) == (8, 1, 0.9)


def test_the_engines_printout_overrides_the_command_flag_by_flag():
    cfg = _scan("vllm serve m --max-model-len 8192\n"
                "INFO 08-03 15:45:33 api_server.py:220] non-default args: {'model_tag': 'm', 'max_model_len': 4096}")
    assert cfg.max_model_len == 4096


def test_tgi_args_with_and_without_the_args_word():
    bare = _scan((REAL / "tgi-710-total-tokens-70b-8xa10g" / "logs.txt").read_text())
    assert (bare.engine, bare.tensor_parallel_size, bare.max_batch_total_tokens, bare.max_batch_prefill_tokens,
            bare.max_model_len) == ("tgi", 8, 16000, 4096, 4096)
    logged = _scan('2023-08-17T10:47:36.256664Z  INFO text_generation_launcher: Args { model_id: "Trelis/Llama-2-7b-'
                   'chat-hf-hosted-inference-8bit", revision: None, validation_workers: 2, sharded: None, num_shard: '
                   'None, quantize: None, dtype: Some(BFloat16), trust_remote_code: false, max_concurrent_requests: '
                   "128, max_best_of: 2, max_stop_sequences: 4, max_input_length: 1024, max_total_tokens: 2048, "
                   "cuda_memory_fraction: 1.0, rope_scaling: None }")
    assert (logged.model, logged.memory_fraction, logged.memory_fraction_kind, logged.max_model_len) == (
        "Trelis/Llama-2-7b-chat-hf-hosted-inference-8bit", 1.0, "process", 2048)


def test_sglang_server_args_and_the_fraction_its_refusal_names():
    cfg = _scan("[2025-03-29 18:12:40] server_args=ServerArgs(model_path='/llm/model/google/gemma-3-27b-it-int4-awq/'"
                ", tokenizer_path='/llm/model/google/gemma-3-27b-it-int4-awq/', context_length=4096, device='cuda', "
                "mem_fraction_static=0.88, max_running_requests=None, chunked_prefill_size=2048, tp_size=1, ")
    assert (cfg.engine, cfg.memory_fraction, cfg.memory_fraction_kind, cfg.max_model_len) == (
        "sglang", 0.88, "free_static", 4096)
    refusal = _scan((REAL / "sglang-inferencex-2128-dsv4-h200" / "logs.txt").read_text())
    assert (refusal.engine, refusal.memory_fraction) == ("sglang", 0.88)


def test_a_version_pin_gives_the_engine_version():
    logs = parse_server_log((REAL / "basalam-10-colab-kv-3664" / "logs.txt").read_text())
    assert (logs.engine, logs.engine_version) == ("vllm", "0.2.7")


@pytest.mark.parametrize("text", ["", "INFO: vllm serve is the CLI", 'File "/usr/local/bin/vllm serve", line 8'])
def test_lines_that_only_mention_a_server_give_no_launch(text):
    assert _scan(text) is None


def test_the_launch_a_log_shows_is_the_bundles_server_config_without_a_deployment(tmp_path):
    (tmp_path / "logs.txt").write_text("vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192\n")
    ev = load_bundle(tmp_path)
    assert ev.server_config is not None and ev.server_config.source == "logs.txt"
    assert ev.server_config.max_model_len == 8192


def test_a_deployment_still_wins_over_the_log(tmp_path):
    examples = Path(__file__).parent.parent / "examples" / "params-edge-sglang"
    for name in ("deployment.yaml",):
        (tmp_path / name).write_text((examples / name).read_text())
    (tmp_path / "logs.txt").write_text("python3 -m sglang.launch_server --model-path m --mem-fraction-static 0.5\n")
    ev = load_bundle(tmp_path)
    assert ev.server_config.source == "deployment.yaml" and ev.server_config.memory_fraction == 0.95


def test_a_kubernetes_container_args_list_is_read_with_its_image_after_it():
    # vllm#8219: the container's `- args:` list, its items at the key's column, `image:` after `env:`
    cfg = _scan((REAL / "vllm-8219-v060-preempted-then-engine-dies" / "logs.txt").read_text())
    assert (cfg.engine, cfg.model) == ("vllm", "/data/models/llama-65b-instruct/base")
    assert (cfg.memory_fraction, cfg.max_model_len, cfg.flags["tensor-parallel-size"]) == (0.95, 8192, "4")
    assert "name" not in cfg.flags and "VLLM_WORKER_MULTIPROC_METHOD" not in str(cfg.flags)


def test_a_container_args_list_before_its_image_and_one_with_the_image_first_read_the_same():
    args = ["args:", "- --model", "- Qwen/Qwen2.5-7B-Instruct", "- --max-model-len", '- "4096"']
    after = _scan("\n".join(["containers:", "- name: vllm", "  " + "\n  ".join(args), "  image: vllm/vllm-openai:v0.8.5"]))
    before = _scan("\n".join(["containers:", "- name: vllm", "  image: vllm/vllm-openai:v0.8.5", "  " + "\n  ".join(args)]))
    assert after is not None and before is not None
    assert (after.model, after.max_model_len) == (before.model, before.max_model_len) == ("Qwen/Qwen2.5-7B-Instruct", 4096)
    # an args list with no image anywhere names no engine: nothing is invented
    assert _scan("\n".join(args)) is None


DATA = Path(__file__).parent / "data" / "logs"


def test_tgi_2_0_2_on_prints_its_args_one_field_per_line_and_they_are_read():
    # TGI 2.2.0 as a public thread posted it: `{:#?}` (launcher/src/main.rs:1287@v2.0.2), then
    # the limits the launcher chose for what was not given
    logs = parse_server_log((DATA / "tgi_220_pretty_args.log").read_text(), year=2024)
    cfg = logs.server_config
    assert (cfg.engine, cfg.engine_version, cfg.model) == ("tgi", "2.2.0", "meta-llama/Meta-Llama-3.1-8B-Instruct")
    assert (cfg.memory_fraction, cfg.max_concurrent_requests, cfg.port) == (1.0, 128, 80)
    assert (cfg.max_input_tokens, cfg.max_model_len, cfg.max_batch_prefill_tokens) == (4095, 4096, 4145)
    assert cfg.tensor_parallel_size is None  # num_shard: None
    assert cfg.flags["huggingface-hub-cache"] == "/data"


def test_a_pretty_option_list_and_shard_count_are_read_as_the_one_line_form_reads_them():
    pretty = ["2025-06-01T10:00:00.000000Z  INFO text_generation_launcher: Args {",
              '    model_id: "m/x",', "    num_shard: Some(", "        4,", "    ),",
              "    cuda_graphs: Some(", "        [", "            1,", "            8,", "        ],", "    ),",
              "    max_total_tokens: Some(", "        8192,", "    ),", "}"]
    flat = ('2025-06-01T10:00:00.000000Z  INFO text_generation_launcher: Args { model_id: "m/x", '
            "num_shard: Some(4), cuda_graphs: Some([1, 8]), max_total_tokens: Some(8192) }")
    a, b = _scan("\n".join(pretty)), _scan(flat)
    assert a == b
    assert (a.tensor_parallel_size, a.max_model_len, a.flags["cuda-graphs"]) == (4, 8192, "[1, 8]")


def test_a_pretty_block_cut_short_keeps_what_it_showed_and_the_next_record_is_read():
    cut = ["2025-06-01T10:00:00.000000Z  INFO text_generation_launcher: Args {",
           '    model_id: "m/x",', "    num_shard: Some(", "        2,", "    ),",
           "2025-06-01T10:00:01.000000Z  INFO text_generation_launcher: Default `max_batch_prefill_tokens` to 4096"]
    cfg = _scan("\n".join(cut))
    assert (cfg.model, cfg.tensor_parallel_size, cfg.max_batch_prefill_tokens) == ("m/x", 2, 4096)
    ended = _scan("\n".join(cut[:3]))  # the paste stops inside the Args
    assert ended.model == "m/x"


def test_a_limit_given_is_not_replaced_by_a_default_line():
    text = ('2024-09-03T04:36:57Z  INFO text_generation_launcher: Args { model_id: "m/x", max_total_tokens: Some(8192) }\n'
            "2024-09-03T04:36:58Z  INFO text_generation_launcher: Default `max_input_tokens` to 8191")
    cfg = _scan(text)
    assert (cfg.max_model_len, cfg.max_input_tokens) == (8192, 8191)


def test_a_line_that_is_not_indented_ends_a_pretty_block_and_is_read_itself():
    text = "\n".join(["2025-06-01T10:00:00Z  INFO text_generation_launcher: Args {", '    model_id: "m/x",',
                      "$ vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 8192"])
    cfg = _scan(text)
    assert (cfg.engine, cfg.model, cfg.max_model_len) == ("vllm", "Qwen/Qwen2.5-7B-Instruct", 8192)


@pytest.mark.parametrize("message", [
    # to 2.0.1, `{:?}` (a TGI 1.4 deployment on OpenShift logged it so, with quantize: Some(Bitsandbytes))
    'Args { model_id: "google/flan-t5-small", num_shard: None, quantize: Some(Bitsandbytes), '
    "max_input_length: 1024, max_total_tokens: 2048, cuda_memory_fraction: 1.0 }",
    # from 2.0.2, `{:#?}`: the same fields, one per line, in one JSON message
    'Args {\n    model_id: "google/flan-t5-small",\n    num_shard: None,\n    quantize: Some(\n        Bitsandbytes,\n'
    "    ),\n    max_input_length: Some(\n        1024,\n    ),\n    max_total_tokens: Some(\n        2048,\n    ),\n"
    "    cuda_memory_fraction: 1.0,\n}",
])
def test_tgi_json_output_carries_its_args_in_the_message_and_they_are_read(message):
    import json

    line = json.dumps({"timestamp": "2024-02-21T05:09:46.814956Z", "level": "INFO", "fields": {"message": message},
                       "target": "text_generation_launcher"})
    cfg = parse_server_log(line, year=2024).server_config
    assert cfg is not None
    assert (cfg.engine, cfg.model, cfg.max_model_len, cfg.memory_fraction) == ("tgi", "google/flan-t5-small", 2048, 1.0)
    assert (cfg.max_input_tokens, cfg.quantization) == (1024, "bitsandbytes")


@pytest.mark.parametrize("line", [
    # SGLang to 0.5.15: the dataclass (entrypoints/engine.py:225@0.5.15, `{server_args=}`)
    "[2025-06-01 10:00:00] server_args=ServerArgs(model_path='Qwen/Qwen3-32B', mem_fraction_static=0.871, "
    "context_length=32768, tp_size=2, chunked_prefill_size=8192, cuda_graph_bs=[1, 2, 4], port=30000)",
    # from 0.5.19: its resolved dict (engine.py:265@0.5.19, :311@0.5.23)
    "[2026-11-01 10:00:00] server_args={'model_path': 'Qwen/Qwen3-32B', 'mem_fraction_static': 0.871, "
    "'max_running_requests': None, 'context_length': 32768, 'tp_size': 2, 'chunked_prefill_size': 8192, "
    "'cuda_graph_bs': [1, 2, 4], 'enable_dp_attention': False, 'port': 30000}",
])
def test_sglang_server_args_are_read_as_the_dataclass_and_as_the_dict(line):
    cfg = parse_server_log(line, year=2026).server_config
    assert cfg is not None
    assert (cfg.engine, cfg.model, cfg.memory_fraction, cfg.tensor_parallel_size) == ("sglang", "Qwen/Qwen3-32B", 0.871, 2)
    assert (cfg.max_model_len, cfg.max_num_batched_tokens, cfg.port) == (32768, 8192, 30000)
    assert cfg.flags["cuda-graph-bs"] == "[1, 2, 4]"  # a list is read whole
    assert "max-running-requests" not in cfg.flags  # None is not a value


def test_a_nested_config_lends_its_model_to_nobody():
    # vLLM's engine config (config/vllm.py:2809-2844@0.33.0) holds the draft model of speculative
    # decoding inside SpeculativeConfig(...): the served model is the top-level `model=`
    line = ("(EngineCore_DP0 pid=1) INFO 11-20 10:00:00 [core.py:98] Initializing a V1 LLM engine (v0.33.0) with "
            "config: model='meta-llama/Llama-3.1-70B-Instruct', speculative_config=SpeculativeConfig("
            "method='eagle3', model='yuhuili/EAGLE3-LLaMA3.1-Instruct-70B', num_spec_tokens=3), "
            "tokenizer='meta-llama/Llama-3.1-70B-Instruct', dtype=torch.bfloat16, max_seq_len=16384, "
            "tensor_parallel_size=4, quantization=None, served_model_name=llama-70b, "
            "compilation_config={'level': 3, 'cudagraph_capture_sizes': [1, 2, 4]}, kernel_config=KernelConfig()")
    cfg = parse_server_log(line, year=2026).server_config
    assert (cfg.engine_version, cfg.model, cfg.served_model_name) == ("0.33.0", "meta-llama/Llama-3.1-70B-Instruct", "llama-70b")
    assert (cfg.tensor_parallel_size, cfg.max_model_len, cfg.dtype) == (4, 16384, "bfloat16")
    # the nested values are no flag values of their own
    assert not {"speculative-config", "compilation-config", "kernel-config", "num-spec-tokens", "method"} & set(cfg.flags)


def test_a_pretty_block_behind_a_compose_prefix_is_read_whole():
    # `docker compose logs` puts "SERVICE  | " before every line, and the reader strips it with
    # the indentation: the block's lines are known by their shape
    text = "\n".join(f"tgi-1  | {line}" for line in [
        "2024-09-03T04:36:57.491823Z  INFO text_generation_launcher: Args {",
        '    model_id: "meta-llama/Meta-Llama-3.1-8B-Instruct",', "    num_shard: Some(", "        2,", "    ),",
        "    huggingface_hub_cache: Some(", '        "http://cache:8080/data",', "    ),",
        "    cuda_memory_fraction: 0.9,", "}",
        "2024-09-03T04:36:58.000000Z  INFO text_generation_launcher: Default `max_total_tokens` to 4096"])
    cfg = parse_server_log(text, year=2024).server_config
    assert (cfg.model, cfg.tensor_parallel_size, cfg.memory_fraction, cfg.max_model_len) == (
        "meta-llama/Meta-Llama-3.1-8B-Instruct", 2, 0.9, 4096)
    assert cfg.flags["huggingface-hub-cache"] == "http://cache:8080/data"


def test_after_a_restart_the_last_default_line_is_what_ran():
    text = "\n".join([
        '2024-09-03T04:36:57Z  INFO text_generation_launcher: Args { model_id: "m/a", max_total_tokens: None }',
        "2024-09-03T04:36:57Z  INFO text_generation_launcher: Default `max_total_tokens` to 4096",
        '2024-09-03T05:00:00Z  INFO text_generation_launcher: Args { model_id: "m/b", max_total_tokens: None }',
        "2024-09-03T05:00:00Z  INFO text_generation_launcher: Default `max_total_tokens` to 8192"])
    cfg = _scan(text)
    assert (cfg.model, cfg.max_model_len) == ("m/b", 8192)
