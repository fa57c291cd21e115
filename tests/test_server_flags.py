"""Server flags from every launch form seen in Kubernetes manifests (collectors.parsers.flags, runbooks.launch.argv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from collectors.errors import ParseError
from collectors.parsers.flags import server_config_from_container
from collectors.parsers.kube_yaml import load_yaml_documents
from collectors.parsers.log_launch import LaunchScanner
from runbooks.launch.argv import canonical_flag, parse_command_line, parse_engine_args
from runbooks.model.evidence import ServerConfig
from runbooks.model.serde import from_jsonable, to_jsonable
from tests.support import words

DATA = Path(__file__).parent / "data" / "kube"


def server_container(file_name: str) -> dict:
    """The container that runs the server in a recorded manifest (the last one with a command/args/env)."""
    objects = load_yaml_documents((DATA / file_name).read_text(), file_name)
    workload = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")][-1]
    return workload["spec"]["template"]["spec"]["containers"][-1]


def vllm(*args: str, **container: object) -> ServerConfig:
    config = server_config_from_container({"image": "vllm/vllm-openai:v0.8.5", "args": list(args), **container})
    assert config is not None
    return config


# ------------------------------------------------------------------ launch forms


def test_vllm_serve_command_with_equals_args_reads_the_runbook_incident_flags():
    config = server_config_from_container(server_container("deployment-runbook-incident.yaml"))
    assert config.engine == "vllm"
    assert config.launch_form == "vllm-serve"
    assert config.model == "Qwen/Qwen2.5-7B-Instruct"
    assert (config.max_model_len, config.max_num_seqs) == (8192, 128)
    assert config.memory_fraction == 0.95
    assert config.memory_fraction_kind == "total"
    assert config.engine_version == "0.6.4"
    assert config.env == {"VLLM_USE_V1": "0"}  # HF_TOKEN is a secret and is never kept
    assert config.warnings == ()


def test_production_stack_underscore_flags_read_like_hyphenated_ones():
    config = server_config_from_container(server_container("deployment-production-stack.yaml"))
    assert config.launch_form == "vllm-serve"
    assert config.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert config.max_model_len == 16384
    assert config.memory_fraction == 0.9
    assert config.tensor_parallel_size == 1
    assert config.max_num_seqs == 32
    assert config.max_num_batched_tokens == 2048
    assert config.enable_chunked_prefill is True
    assert config.enable_prefix_caching is False
    assert config.flags["max-model-len"] == "16384"
    assert config.flags["disable-log-requests"] == "true"
    assert config.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}


def test_kubeai_module_form_reads_equals_flags_and_resolves_an_abbreviated_flag():
    config = server_config_from_container(server_container("deployment-kubeai.yaml"))
    assert config.launch_form == "vllm-module"
    assert config.model == "neuralmagic/Meta-Llama-3.1-8B-Instruct-FP8"
    assert config.served_model_name == "llama-3.1-8b-instruct-fp8-l4"
    assert config.max_num_batched_tokens == 16384  # written --max-num-batched-token=16384
    assert "max-num-batched-tokens" in config.flags
    assert config.kv_cache_dtype == "fp8"
    assert config.engine_version == "0.6.3.post1"


def test_vllm_docs_sh_c_single_string_is_split_like_a_shell():
    config = server_config_from_container(server_container("deployment-vllm-docs.yaml"))
    assert config.launch_form == "shell-string"
    assert config.model == "mistralai/Mistral-7B-Instruct-v0.3"
    assert config.max_num_batched_tokens == 1024
    assert config.flags["trust-remote-code"] == "true"
    assert config.enable_chunked_prefill is True
    assert config.engine_version is None  # the :latest tag names no version


def test_sglang_bash_block_with_continuations_keeps_pod_index_unresolved():
    config = server_config_from_container(server_container("statefulset-sglang-multinode.yaml"))
    assert config.engine == "sglang"
    assert config.launch_form == "shell-string"
    assert config.model == "/llm-folder/DeepSeek-V3"
    assert config.tensor_parallel_size == 16
    assert config.max_model_len == 32768
    assert config.memory_fraction == 0.88
    assert config.memory_fraction_kind == "free_static"
    assert config.flags["node-rank"] == "$POD_INDEX"
    assert config.flags["enable-metrics"] == "true"
    assert config.warnings == ("unresolved_env",)


def test_tgi_args_only_expand_model_id_from_env_and_flags_beat_env_vars():
    config = server_config_from_container(server_container("deployment-tgi-args.yaml"))
    assert config.engine == "tgi"
    assert config.launch_form == "tgi-launcher"
    assert config.model == "TechxGenus/Meta-Llama-3-70B-Instruct-AWQ"
    assert config.tensor_parallel_size == 2
    assert config.max_input_tokens == 4096
    assert config.max_model_len == 8192  # --max-total-tokens 8192 wins over MAX_TOTAL_TOKENS=4096
    assert config.max_batch_prefill_tokens == 4146
    assert config.max_concurrent_requests == 64  # only in the env
    assert config.quantization == "awq"
    assert config.port == 8080
    assert config.engine_version == "2.4.1"
    assert config.warnings == ()


def _tgi_env(**env: str) -> ServerConfig:
    container = {"image": "ghcr.io/huggingface/text-generation-inference:3.3.4",
                 "env": [{"name": "MODEL_ID", "value": "meta-llama/Llama-3.1-8B-Instruct"},
                         *({"name": k, "value": v} for k, v in env.items())]}
    config = server_config_from_container(container)
    assert config is not None
    return config


@pytest.mark.parametrize("value", ["1", "", "True", "yes", "on", "0", " true"])
def test_a_tgi_boolean_env_var_other_than_true_or_false_is_a_launch_that_never_starts(value):
    """clap reads a switch's env var with the switch's parser, which takes exactly `true` or
    `false`: TRUST_REMOTE_CODE=1 stops the launcher, and sets nothing."""
    config = _tgi_env(TRUST_REMOTE_CODE=value, ENABLE_PREFILL_LOGPROBS=value, SHARDED=value, MAX_INPUT_TOKENS="4095")
    assert config.warnings == ("tgi_env_not_boolean:ENABLE_PREFILL_LOGPROBS", "tgi_env_not_boolean:SHARDED",
                               "tgi_env_not_boolean:TRUST_REMOTE_CODE")
    assert {"trust-remote-code", "enable-prefill-logprobs", "sharded"}.isdisjoint(config.flags)
    assert config.max_input_tokens == 4095  # the other env vars are still read


@pytest.mark.parametrize("value", ["true", "false"])
def test_a_tgi_boolean_env_var_of_true_or_false_is_read_as_written(value):
    config = _tgi_env(TRUST_REMOTE_CODE=value, ENABLE_PREFILL_LOGPROBS=value, SHARDED=value)
    assert config.warnings == ()
    assert (config.flags["trust-remote-code"], config.flags["enable-prefill-logprobs"], config.flags["sharded"]) == (
        value, value, value)


def test_a_tgi_switch_on_the_command_line_leaves_its_env_var_unread():
    """clap reads an env var only for an argument the command line does not give (add_env)."""
    config = server_config_from_container({
        "image": "ghcr.io/huggingface/text-generation-inference:3.3.4",
        "args": ["--model-id", "m/x", "--enable-prefill-logprobs"],
        "env": [{"name": "ENABLE_PREFILL_LOGPROBS", "value": "1"}]})
    assert config is not None and config.warnings == ()
    assert config.flags["enable-prefill-logprobs"] == "true"


def test_the_tgi_booleans_read_from_env_are_the_tables_own():
    from runbooks.catalogs.engine_flags_read import all_entries
    from runbooks.launch.flag_tables import TGI_ENV_BOOLEANS
    assert {"TRUST_REMOTE_CODE", "ENABLE_PREFILL_LOGPROBS", "SHARDED", "DISABLE_CUSTOM_KERNELS",
                                "JSON_OUTPUT", "DISABLE_GRAMMAR_SUPPORT"} <= TGI_ENV_BOOLEANS
    assert "MAX_INPUT_TOKENS" not in TGI_ENV_BOOLEANS and "NUM_SHARD" not in TGI_ENV_BOOLEANS
    assert all(e.kind in ("bool", "bool_value") for e in all_entries("tgi") for s in e.spellings
               if s.env in TGI_ENV_BOOLEANS)


def test_tgi_env_only_launch_reads_every_setting_from_env_vars():
    config = server_config_from_container(server_container("deployment-tgi-env.yaml"))
    assert config.launch_form == "tgi-env"
    assert config.model == "google/gemma-2-9b-it"
    assert config.tensor_parallel_size == 1
    assert config.max_input_tokens == 2048  # MAX_INPUT_LENGTH, the v1 spelling
    assert config.max_model_len == 4096
    assert config.memory_fraction == 0.9
    assert config.memory_fraction_kind == "process"
    assert config.flags["max-batch-prefill-tokens"] == "8k"
    assert config.max_batch_prefill_tokens is None
    assert config.warnings == ("unparsed_value:max-batch-prefill-tokens",)


def test_vllm_image_entrypoint_args_start_with_the_model():
    config = server_config_from_container(server_container("deployment-vllm-entrypoint-args.yaml"))
    assert config.launch_form == "vllm-entrypoint-args"
    assert config.model == "Qwen/Qwen2.5-Coder-32B-Instruct-AWQ"
    assert config.max_model_len == 32768  # "$(MAX_LEN)" expanded from the container env
    assert config.tensor_parallel_size == 2
    assert config.quantization == "awq_marlin"
    assert config.served_model_name == "qwen-coder"
    assert config.flags["served-model-name"] == "qwen-coder qwen-coder-32b"
    assert config.enforce_eager is True
    assert config.engine_version == "0.10.1.1"


def test_serve_after_the_vllm_serve_entrypoint_is_parsed_and_warned():
    config = server_config_from_container(server_container("deployment-serve-repeated.yaml"))
    assert config.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert config.max_num_seqs == 64
    assert "serve_repeated" in config.warnings


def test_whole_command_line_in_one_command_element_is_parsed_and_warned():
    config = server_config_from_container(
        {"image": "vllm/vllm-openai:v0.7.3", "command": ["vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096"]}
    )
    assert config.launch_form == "single-string-command"
    assert config.model == "Qwen/Qwen2.5-7B-Instruct"
    assert config.max_model_len == 4096
    assert config.warnings == ("command_as_single_string",)


@pytest.mark.parametrize(
    "script",
    [
        "pip install -q flash-attn && vllm serve M --max-num-seqs 48",
        "set -e; huggingface-cli download M; exec vllm serve M --max-num-seqs 48",
        "export VLLM_USE_V1=1\nnohup vllm serve M \\\n  --max-num-seqs 48 2>&1 | tee /tmp/vllm.log",
        "VLLM_USE_V1=1 exec python3 -u -m vllm.entrypoints.openai.api_server --model M --max-num-seqs=48",
    ],
)
def test_server_is_found_inside_shell_chains(script):
    config = server_config_from_container({"image": "custom/runtime:1", "command": ["bash", "-c", script]})
    assert config.engine == "vllm"
    assert config.launch_form == "shell-string"
    assert config.model == "M"
    assert config.max_num_seqs == 48
    assert config.engine_version is None  # not an engine image


def test_shell_assignments_count_as_environment_hints():
    script = "export VLLM_USE_V1=1\nnohup vllm serve M 2>&1 | tee /tmp/vllm.log"
    config = server_config_from_container({"command": ["/bin/sh", "-ec", script]})
    assert config.env == {"VLLM_USE_V1": "1"}


def test_sglang_module_and_serve_forms_map_to_shared_names():
    args = [
        "--model-path", "Qwen/Qwen2.5-72B-Instruct", "--tp-size", "4", "--dp", "2", "--host", "0.0.0.0",
        "--context-length", "32768", "--max-running-requests", "96", "--chunked-prefill-size", "8192",
        "--max-total-tokens", "400000", "--page-size", "16", "--disable-radix-cache", "--port", "30000",
    ]
    module = server_config_from_container({"command": ["python3", "-m", "sglang.launch_server", *args]})
    serve = server_config_from_container({"command": ["sglang", "serve", *args]})
    assert (module.launch_form, serve.launch_form) == ("sglang-module", "sglang-serve")
    for config in (module, serve):
        assert config.tensor_parallel_size == 4
        assert config.data_parallel_size == 2
        assert config.max_model_len == 32768
        assert config.max_num_seqs == 96
        assert config.max_num_batched_tokens == 8192
        assert config.max_batch_total_tokens == 400000
        assert config.block_size == 16
        assert config.enable_prefix_caching is False
        assert config.port == 30000
        assert config.warnings == ()


def test_sglang_without_host_binds_loopback_and_is_warned():
    config = server_config_from_container({"command": ["python3", "-m", "sglang.launch_server", "--model", "m"]})
    assert config.model == "m"
    assert config.warnings == ("sglang_host_loopback",)
    explicit = parse_command_line(["sglang", "serve", "--model-path", "m", "--host", "127.0.0.1"])
    assert explicit.warnings == ("sglang_host_loopback",)


def test_sglang_chunked_prefill_minus_one_means_disabled():
    config = parse_command_line(["python", "-m", "sglang.launch_server", "--model-path", "m",
                                 "--host", "0.0.0.0", "--chunked-prefill-size", "-1"])
    assert config.flags["chunked-prefill-size"] == "-1"
    assert config.enable_chunked_prefill is False
    assert config.max_num_batched_tokens is None
    assert config.warnings == ()


# ------------------------------------------------------------------ flag syntax


@pytest.mark.parametrize(
    "written",
    [["-tp", "2"], ["--tp", "2"], ["--tp-size", "2"], ["--tensor-parallel-size", "2"],
     ["--tensor_parallel_size=2"], ["-tp=2"]],
)
def test_tensor_parallel_spellings_all_mean_the_same(written):
    config = vllm("M", *written)
    assert config.tensor_parallel_size == 2
    assert config.flags == {"tensor-parallel-size": "2"}


def test_short_aliases_for_pipeline_data_parallel_and_quantization():
    config = vllm("M", "-pp", "2", "-dp", "4", "-q", "fp8")
    assert (config.pipeline_parallel_size, config.data_parallel_size, config.quantization) == (2, 4, "fp8")


def test_no_prefix_turns_a_boolean_off_and_bare_boolean_is_true():
    config = vllm("M", "--no-enable-prefix-caching", "--enforce-eager", "--enable-chunked-prefill", "False")
    assert config.enable_prefix_caching is False
    assert config.enforce_eager is True
    assert config.enable_chunked_prefill is False
    assert config.flags["enforce-eager"] == "true"


def test_boolean_flag_before_the_model_does_not_swallow_it():
    config = vllm("--trust-remote-code", "M", "--max-model-len", "2048")
    assert config.model == "M"
    assert config.max_model_len == 2048


def test_value_after_equals_may_itself_contain_equals():
    flags, _ = parse_engine_args("vllm", ["--override-generation-config={\"a\":1}", "--hf-overrides=k=v"])
    assert flags == {"override-generation-config": '{"a":1}', "hf-overrides": "k=v"}


def test_negative_number_is_a_value_not_a_flag():
    flags, positionals = parse_engine_args("sglang", ["--chunked-prefill-size", "-1", "--port", "30000"])
    assert flags == {"chunked-prefill-size": "-1", "port": "30000"}
    assert positionals == []


def test_ambiguous_or_short_prefix_is_left_as_written():
    assert canonical_flag("vllm", "max-num") == "max-num"
    assert canonical_flag("vllm", "gpu") == "gpu"
    assert canonical_flag("tgi", "max-input-len") == "max-input-len"


def test_kv_cache_memory_and_cpu_offload_are_read():
    config = vllm("M", "--kv-cache-memory=8589934592", "--cpu-offload-gb", "4.5", "--block-size", "32")
    assert config.kv_cache_memory_bytes == 8 * 2**30
    assert config.flags["kv-cache-memory-bytes"] == "8589934592"
    assert config.cpu_offload_gb == 4.5
    assert config.block_size == 32


# ------------------------------------------------------------- env and expansion


def test_k8s_expansion_escapes_double_dollar_and_leaves_unknown_names():
    config = vllm("M", "--served-model-name", "$$(NAME)", "--max-model-len", "$(MAXLEN)",
                  env=[{"name": "OTHER", "value": "x"}])
    assert config.flags["served-model-name"] == "$(NAME)"
    assert config.flags["max-model-len"] == "$(MAXLEN)"
    assert config.max_model_len is None
    assert "unparsed_value:max-model-len" in config.warnings
    assert "unresolved_env" in config.warnings


def test_env_from_secret_cannot_be_resolved_and_is_warned():
    config = vllm("$(MODEL)", "--max-num-seqs", "8",
                  env=[{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "model"}}}])
    assert config.model == "$(MODEL)"
    assert config.max_num_seqs == 8
    assert config.warnings == ("unresolved_env",)


def test_env_values_expand_earlier_env_vars_like_kubernetes():
    config = vllm("$(MODEL_DIR)", env=[{"name": "ROOT", "value": "/models"},
                                       {"name": "MODEL_DIR", "value": "$(ROOT)/qwen"}])
    assert config.model == "/models/qwen"


def test_tgi_model_id_from_a_secret_is_warned_but_kubernetes_hostname_is_not():
    config = server_config_from_container({
        "image": "ghcr.io/huggingface/text-generation-inference:3.0.1",
        "env": [{"name": "MODEL_ID", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
                {"name": "HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
    })
    assert config.launch_form == "tgi-env"
    assert config.model is None
    assert config.host is None
    assert config.warnings == ("unresolved_env",)


def test_vllm_port_holding_a_service_uri_is_warned():
    config = server_config_from_container(server_container("deployment-vllm-entrypoint-args.yaml"))
    assert config.warnings == ("vllm_port_service_collision",)
    assert config.env["VLLM_PORT"] == "tcp://10.96.12.7:8000"


# ------------------------------------------------------------ identification


@pytest.mark.parametrize(
    ("image", "engine", "version"),
    [
        ("vllm/vllm-openai:v0.6.4", "vllm", "0.6.4"),
        ("registry.local:5000/vllm/vllm-openai:v0.8.5@sha256:abc", "vllm", "0.8.5"),
        ("vllm/vllm-openai@sha256:0123", "vllm", None),
        ("ghcr.io/huggingface/text-generation-inference:2.4.1", "tgi", "2.4.1"),
        ("ghcr.io/huggingface/text-generation-inference:3.0.1-rocm", "tgi", "3.0.1"),
        ("ghcr.io/huggingface/text-generation-inference:sha-7e2a743", "tgi", None),
        ("lmsysorg/sglang:v0.4.6.post1-cu124", "sglang", "0.4.6.post1"),
        ("lmsysorg/sglang:latest", "sglang", None),
    ],
)
def test_engine_version_comes_from_an_engine_image_tag(image, engine, version):
    config = server_config_from_container({"image": image, "command": ["/start.sh"]})
    assert (config.engine, config.engine_version) == (engine, version)
    assert config.launch_form is None
    assert config.warnings == ("launch_form_unknown",)


def test_a_custom_image_tag_is_not_taken_for_the_engine_version():
    config = server_config_from_container({"image": "acme/vllm-app:1.2.3", "command": ["vllm", "serve", "M"]})
    assert (config.engine, config.engine_version) == ("vllm", None)


def test_positional_model_overrides_the_model_flag_for_vllm_serve():
    assert parse_command_line(["vllm", "serve", "A", "--model", "B"]).model == "A"


@pytest.mark.parametrize(
    "container",
    [
        {"image": "lmcache/lmstack-router:latest", "args": ["--host", "0.0.0.0", "--port", "8000"]},
        {"image": "busybox:1.36", "command": ["sh", "-c", "sleep 3600"]},
        {"name": "empty"},
    ],
)
def test_containers_that_run_no_server_give_none(container):
    assert server_config_from_container(container) is None


def test_engine_image_without_any_launch_is_still_the_server_with_unknown_form():
    config = server_config_from_container({"image": "lmsysorg/sglang:v0.4.6"})
    assert (config.engine, config.launch_form, config.flags) == ("sglang", None, {})
    assert config.warnings == ("launch_form_unknown",)


def test_parse_command_line_reads_a_process_argv():
    config = parse_command_line(
        ["/usr/bin/python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "M",
         "--gpu_memory_utilization", "0.85"], env={"VLLM_USE_V1": "1"}, source="proc/4242/cmdline")
    assert (config.source, config.launch_form, config.model) == ("proc/4242/cmdline", "vllm-module", "M")
    assert config.memory_fraction == 0.85
    assert config.env == {"VLLM_USE_V1": "1"}
    assert parse_command_line(["nginx", "-g", "daemon off;"]) is None


def test_server_config_round_trips_through_json():
    config = server_config_from_container(server_container("deployment-vllm-entrypoint-args.yaml"))
    assert from_jsonable(ServerConfig, to_jsonable(config)) == config


# ----------------------------------------------------------------- bad shapes


@pytest.mark.parametrize(
    ("container", "message"),
    [
        ({"args": 5}, "spec.template.spec.containers[0].args: expected a list"),
        ({"command": ["vllm", {"a": 1}]}, "spec.template.spec.containers[0].command[1]: expected a string"),
        ({"env": [{"value": "x"}]}, "spec.template.spec.containers[0].env[0].name: missing"),
        ({"env": {"A": "b"}}, "spec.template.spec.containers[0].env: expected a list"),
        ("vllm serve", "spec.template.spec.containers[0]: expected a mapping"),
    ],
)
def test_bad_container_shapes_raise_parse_error_naming_the_field(container, message):
    with pytest.raises(ParseError) as caught:
        server_config_from_container(container, source="deployment.yaml", path="spec.template.spec.containers[0]")
    assert caught.value.source == "deployment.yaml"
    assert message in words.en(caught.value)


def test_a_value_flag_with_no_value_is_never_read_as_on():
    # `--model-path <MODEL>`: the shell takes `<MODEL>` as a redirection, the next word is a flag
    config = parse_command_line(["python", "-m", "sglang.launch_server", "--mem-fraction-static", "0.90",
                                 "--model-path", "--trust-remote-code", "--tp-size", "8", "--page-size"])
    assert config.model is None
    assert config.flags["model-path"] == "" and config.flags["trust-remote-code"] == "true"
    assert config.tensor_parallel_size == 8 and config.memory_fraction == 0.9
    assert "missing_value:model-path" in config.warnings and "missing_value:page-size" in config.warnings
    assert not any(w.startswith("unparsed_value") for w in config.warnings)
    # vLLM: a number flag at the end of the line has no value; a switch at the end is on
    config = vllm("M", "--enforce-eager", "--max-model-len")
    assert config.model == "M" and config.max_model_len is None and config.flags["enforce-eager"] == "true"
    assert config.warnings.count("missing_value:max-model-len") == 1


def test_a_launch_line_whose_model_was_a_redirection_names_no_model():
    scanner = LaunchScanner("logs.txt")
    scanner.feed("python -m sglang.launch_server --model-path <deepseek-v3> --trust-remote-code --tp-size 8")
    config = scanner.result()
    assert config.engine == "sglang" and config.model is None and config.tensor_parallel_size == 8
    assert "missing_value:model-path" in config.warnings
