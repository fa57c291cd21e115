"""The rules that keep credentials out of what gpumem reads, shows and writes
(`runbooks.model.secrets`), where they are applied (`collectors.kube.pod_reads.scrub`, the
snapshot, the Prometheus and Kubernetes clients' errors, bundle.json), and what they must never
touch: names of settings that only look like secrets, and the numbers triage reads."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections import namedtuple
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from kubernetes.client.exceptions import ApiException

from bot.service.bundle_out import write_bundle_json
from collectors.bundle import load_bundle
from collectors.kube.client import Call, api_error, issue_for
from collectors.kube.evidence import bundle_files, parse_logs, redact_snapshot, snapshot_evidence
from collectors.kube.live import gather_workload
from collectors.kube.pod_reads import scrub
from collectors.kube.snapshot import KubeSnapshot, LogTail, Scrape
from collectors.parsers.flags import server_config_from_container
from collectors.prometheus.client import PrometheusClient, PrometheusError
from runbooks.launch.flag_tables import FIELD_MAP, known_flags
from runbooks.model.evidence import Evidence, ReadIssue, ServerConfig
from runbooks.model.secrets import (
    REDACTED,
    redact_argv,
    redact_evidence,
    redact_flags,
    redact_text,
    secret_name,
    secret_value,
)
from tests.support import words
from tests.support.kube_fixtures import running_scenario
from tests.support.loopback import LoopbackServer

SECRET = "planted-Secret-9f8e7d"

# ------------------------------------------------------------------------------ names


@pytest.mark.parametrize("name", [
    "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "WANDB_KEY", "WANDB_API_KEY", "OPENAI_API_KEY", "VLLM_API_KEY",
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "DB_PASSWORD", "db_password", "DB_PASSWORD_FILE",
    "GOOGLE_APPLICATION_CREDENTIALS", "CLIENT_SECRET", "SLACK_BOT_TOKEN", "BASIC_AUTH", "PRIVATE_KEY", "SSH_KEY",
    "api-key", "hf-token", "admin-api-key", "ngrok-authtoken", "ssl-keyfile-password", "auth-token",
    "apiKey", "accessToken", "APIKey", "token", "password", "secret", "passwd",
])
def test_secret_names(name):
    assert secret_name(name), name


@pytest.mark.parametrize("name", [
    "MAX_TOKENS", "MAX_TOTAL_TOKENS", "MAX_INPUT_TOKENS", "TOKENIZERS_PARALLELISM", "HF_HOME", "HF_HUB_OFFLINE",
    "VLLM_USE_V1", "PYTORCH_CUDA_ALLOC_CONF", "CUDA_VISIBLE_DEVICES", "HF_TOKEN_PATH", "KEYCLOAK_URL",
    "max-num-batched-tokens", "max-total-tokens", "max-batch-total-tokens", "max-batch-prefill-tokens",
    "max-input-tokens", "max-prefill-tokens", "kv-cache-dtype", "kv-cache-memory-bytes",
    "long-prefill-token-threshold", "tokenizer", "tokenizer-mode", "skip-tokenizer-init", "ssl-keyfile",
    "ssl-certfile", "api-key-file", "key", "auth", "monkey", "keys", "tokens", "hotkey", "max-model-len",
])
def test_setting_names_that_only_look_like_secrets(name):
    assert not secret_name(name), name


@pytest.mark.parametrize("engine", sorted(FIELD_MAP))
def test_no_flag_triage_reads_is_taken_for_a_secret(engine):
    assert [flag for flag, _, _ in FIELD_MAP[engine] if secret_name(flag)] == []
    # of every flag gpumem knows, only the API key is a secret
    assert {f for f in known_flags(engine) if secret_name(f)} <= {"api-key"}


# ------------------------------------------------------------------------------ values

SHAPED = [
    "sk-proj-" + "Ab1" * 16, "sk-" + "a1B2" * 12, "sk-ant-api03-" + "x" * 40, "hf_" + "AbCd1234" * 4 + "xy",
    "ghp_" + "A1b2" * 9, "gho_" + "z" * 36, "github_pat_" + "A" * 22 + "_" + "b" * 59, "glpat-" + "x1" * 10,
    "xoxb-1234-5678-abcdEFGH", "xoxp-1-2-3-abcdef", "xapp-1-A0-123-abcdef", "AKIAIOSFODNN7EXAMPLE",
    "ASIA" + "Q" * 16, "AIza" + "S" * 35, "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
    "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA\n-----END RSA PRIVATE KEY-----",
]
PLAIN = [
    "Qwen/Qwen2.5-7B-Instruct", "vllm/vllm-openai:v0.6.6", "sha256:0f3c4e5d6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5",
    "4f6d1a52-0000-4000-8000-00000000d001", "hf_live_secret_value", "sk-short", "task-0123456789abcdefghij",
    "eyJhbGciOi", "AKIAlowercase0000000", "8192", "0.95", "fp8_e5m2", "expandable_segments:True",
    "meta-llama/Llama-3.1-70B-Instruct", "gpu-node-03", "nvidia.com/gpu",
]


@pytest.mark.parametrize("value", SHAPED)
def test_credential_shapes(value):
    assert secret_value(value)
    assert redact_text(f"got {value} here") == f"got {REDACTED} here"


@pytest.mark.parametrize("value", PLAIN)
def test_values_that_are_not_credentials(value):
    assert not secret_value(value)
    assert redact_text(value) == value


# ------------------------------------------------------------------------------ free text (log lines, error bodies)


@pytest.mark.parametrize(("line", "masked"), [
    ("Authorization: Bearer abc.def-ghi_123", "Authorization: Bearer <redacted>"),
    ("'authorization': 'Basic dXNlcjpwYXNz'", "'authorization': 'Basic <redacted>'"),
    ("curl -H 'Authorization: token tok_0123'", "curl -H 'Authorization: token <redacted>'"),
    ("proxy-authorization=Negotiate YII", "proxy-authorization=Negotiate <redacted>"),
    ("retrying with bearer 0123456789abcdef", "retrying with bearer <redacted>"),
    ("GET https://admin:hunter2@prometheus.example:9090/api/v1/query",
     "GET https://admin:<redacted>@prometheus.example:9090/api/v1/query"),
    ("args: Namespace(model='m', api_key='k-0123', max_num_seqs=128)",
     "args: Namespace(model='m', api_key='<redacted>', max_num_seqs=128)"),
    ('{"api_key": "k-0123", "max_tokens": 512}', '{"api_key": "<redacted>", "max_tokens": 512}'),
    ("export HF_TOKEN=abcdef && vllm serve m", "export HF_TOKEN=<redacted> && vllm serve m"),
    ("vllm serve m --api-key k-0123 --port 8000", "vllm serve m --api-key <redacted> --port 8000"),
    ("vllm serve m --hf-token=k-0123 --max-num-batched-tokens=8192",
     "vllm serve m --hf-token=<redacted> --max-num-batched-tokens=8192"),
    ("db password: s3cr3t!", "db password: <redacted>"),
    ("GET /v1/models?token=abc123&x=1", "GET /v1/models?token=<redacted>&x=1"),
])
def test_free_text_is_masked_keeping_the_name(line, masked):
    assert redact_text(line) == masked


@pytest.mark.parametrize("line", [
    "max_num_batched_tokens=8192 max_total_tokens=16000 kv_cache_dtype=fp8",
    'INFO text_generation_router: time_per_token="20.5ms" validation_time="0.2ms" queue_time="3ms"',
    "args: Namespace(api_key=None, max_model_len=8192)",
    "Avg prompt throughput: 1201.3 tokens/s, Running: 24 reqs, GPU KV cache usage: 98.3%",
    "first token: 512 ms; key: 3",
    "vllm serve m --api-key $(API_KEY) --api-key=${VLLM_API_KEY}",
    "secretKeyRef: {name: hf, key: token}",
    "kube:pods/log/llm/vllm-server-7d9c8b6f4-q8wvn#vllm,previous",
    "missing RBAC: get secrets in namespace llm",
])
def test_free_text_without_credentials_is_left_alone(line):
    assert redact_text(line) == line


def test_known_secrets_are_masked_wherever_they_appear():
    assert redact_text(f"echoed X-Token={SECRET}; again {SECRET}.", [SECRET, "short"]) == \
        f"echoed X-Token={REDACTED}; again {REDACTED}."
    assert redact_text("a short word", ["short"]) == "a short word"  # too short to search for


def test_masking_twice_changes_nothing():
    text = ("Authorization: Bearer abcdefgh123 https://u:pw@h/ api_key='x1' --hf-token y2 "
            "sk-" + "a" * 20 + " HF_TOKEN=z3")
    once = redact_text(text)
    assert redact_text(once) == once
    assert redact_text(redact_text(text, shell=True), shell=True) == redact_text(text, shell=True)


# ------------------------------------------------------------------------------ server flags in every launch form

_VLLM = "vllm/vllm-openai:v0.6.6"
_NUMBERS = {"max-model-len": "8192", "max-num-batched-tokens": "4096", "gpu-memory-utilization": "0.9"}
LAUNCHES = {
    "args list": {"image": _VLLM, "args": ["--model=m", "--max-model-len", "8192", "--api-key", SECRET,
                                            "--max-num-batched-tokens=4096", "--gpu-memory-utilization", "0.9"]},
    "--flag=value": {"image": _VLLM, "args": ["--model=m", "--max-model-len=8192", f"--api-key={SECRET}",
                                               "--max-num-batched-tokens=4096", "--gpu-memory-utilization=0.9"]},
    "flag in command, value in args": {
        "image": _VLLM, "command": ["python3", "-m", "vllm.entrypoints.openai.api_server", "--api-key"],
        "args": [SECRET, "--model=m", "--max-model-len=8192", "--max-num-batched-tokens=4096",
                 "--gpu-memory-utilization=0.9"]},
    "sh -c": {"image": _VLLM, "command": ["/bin/sh", "-c"], "args": [
        f"pip install x && exec vllm serve m --max-model-len 8192 --api-key {SECRET} "
        "--max-num-batched-tokens 4096 --gpu-memory-utilization 0.9"]},
    "bash -c with quotes and continuations": {"image": _VLLM, "command": ["bash", "-c"], "args": [
        f"set -e\nvllm serve m \\\n  --api-key \"{SECRET}\" \\\n  --hf-token='{SECRET}' \\\n"
        "  --max-model-len 8192 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.9"]},
    "nested bash -c": {"image": _VLLM, "command": ["sh", "-c"], "args": [
        f"bash -c \"vllm serve m --max-model-len 8192 --api-key {SECRET} --max-num-batched-tokens 4096 "
        "--gpu-memory-utilization 0.9\""]},
    "whole command line in one element": {"image": _VLLM, "command": [
        f"vllm serve m --max-model-len 8192 --api-key={SECRET} --max-num-batched-tokens 4096 "
        "--gpu-memory-utilization 0.9"]},
}
_SGLANG = {"image": "lmsysorg/sglang:v0.4.6", "command": ["python3", "-m", "sglang.launch_server"], "args": [
    "--model-path", "m", "--context-length", "8192", "--api-key", SECRET, "--max-total-tokens", "20000",
    "--mem-fraction-static", "0.8", "--chunked-prefill-size", "4096"]}
_TGI = {"image": "ghcr.io/huggingface/text-generation-inference:3.0.1", "args": [
    "--model-id", "m", "--max-total-tokens", "8192", "--max-batch-total-tokens", "16000", "--api-key", SECRET,
    "--ngrok-authtoken", SECRET, "--max-input-tokens", "4096"]}


def _without_secret_flags(cfg: ServerConfig) -> ServerConfig:
    return dataclasses.replace(cfg, flags={k: v for k, v in cfg.flags.items() if not secret_name(k)})


@pytest.mark.parametrize("container", [*LAUNCHES.values(), _SGLANG, _TGI], ids=[*LAUNCHES, "sglang", "tgi"])
def test_secret_flags_are_masked_in_every_launch_form_and_the_numbers_stay(container):
    before = server_config_from_container(copy.deepcopy(container))
    masked = scrub({"spec": {"containers": [container]}})["spec"]["containers"][0]
    assert SECRET not in json.dumps(masked)
    after = server_config_from_container(masked)
    assert before is not None and after is not None
    assert SECRET in json.dumps(before.flags)
    # every parsed number and setting is the same; only the secrets' values changed
    assert _without_secret_flags(after) == _without_secret_flags(before)
    secret_flags = {k: v for k, v in after.flags.items() if secret_name(k)}
    assert secret_flags and set(secret_flags.values()) == {REDACTED}, after.flags


def test_the_numbers_of_a_vllm_launch_are_read_after_masking():
    for name, container in LAUNCHES.items():
        cfg = server_config_from_container(scrub(container))
        assert (cfg.max_model_len, cfg.max_num_batched_tokens, cfg.memory_fraction) == (8192, 4096, 0.9), name
        assert {k: cfg.flags[k] for k in _NUMBERS} == _NUMBERS, name


def test_redact_argv_keeps_references_and_the_next_flag():
    assert redact_argv(["--api-key", "$(API_KEY)", "--hf-token", "--port", "8000", "--api-key=${K}", 7]) == \
        ["--api-key", "$(API_KEY)", "--hf-token", "--port", "8000", "--api-key=${K}", 7]


def test_parsed_flags_are_masked_by_name_and_shape():
    flags = {"api-key": "k", "hf-token": "t", "max-num-batched-tokens": "8192", "kv-cache-dtype": "fp8",
             "served-model-name": "sk-" + "x" * 20, "ssl-keyfile": "/etc/tls/key.pem"}
    assert redact_flags(flags) == {"api-key": REDACTED, "hf-token": REDACTED, "max-num-batched-tokens": "8192",
                                   "kv-cache-dtype": "fp8", "served-model-name": REDACTED,
                                   "ssl-keyfile": "/etc/tls/key.pem"}


# ------------------------------------------------------------------------------ environment variables


def test_environment_variables_are_masked_by_name_and_by_value_shape():
    env = [
        {"name": "WANDB_KEY", "value": "plain-looking-value"},
        {"name": "HF_TOKEN", "value": "hf_live_secret_value"},
        {"name": "LAUNCH_NOTE", "value": "ghp_" + "A1b2" * 9},
        {"name": "UPSTREAM", "value": "https://user:pw@upstream.example/v1"},
        {"name": "EXTRA_ARGS", "value": f"--api-key {SECRET} --max-model-len 4096"},
        {"name": "MAX_TOKENS", "value": "4096"},
        {"name": "TOKENIZERS_PARALLELISM", "value": "false"},
        {"name": "VLLM_USE_V1", "value": "1"},
        {"name": "DB_PASSWORD", "value": ""},
        {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}},
    ]
    out = scrub({"spec": {"containers": [{"name": "c", "env": env}]}})["spec"]["containers"][0]["env"]
    assert [v.get("value") for v in out] == [
        REDACTED, REDACTED, REDACTED, "https://user:<redacted>@upstream.example/v1",
        "--api-key <redacted> --max-model-len 4096", "4096", "false", "1", "", None]
    assert out[-1] == env[-1]


def test_scrub_masks_shapes_anywhere_and_is_idempotent():
    obj = {"metadata": {"annotations": {"note": "deployed with sk-" + "q" * 24}},
           "spec": {"containers": [{"name": "c", "args": ["--api-key", "x"],
                                    "livenessProbe": {"exec": {"command": ["curl", "-H",
                                                                           "Authorization: Bearer abcdefgh1"]}}}]}}
    once = scrub(obj)
    assert once["metadata"]["annotations"]["note"] == "deployed with <redacted>"
    assert once["spec"]["containers"][0]["livenessProbe"]["exec"]["command"][-1] == "Authorization: Bearer <redacted>"
    assert scrub(once) == once


# ------------------------------------------------------------------------------ the snapshot, the evidence, the bundle


def test_log_lines_are_masked_and_parse_to_the_same_numbers():
    text = (Path(__file__).parent / "data" / "kube_live" / "vllm-incident" / "logs"
            / "vllm-server-7d9c8b6f4-2xkqp.vllm.log").read_text(encoding="utf-8")
    planted = text.replace("gpu_memory_utilization=0.95)", f"gpu_memory_utilization=0.95, api_key='{SECRET}')")
    planted += f"2026-03-09T20:40:01.000000000Z INFO 03-09 20:40:01 hub.py:88] token hf_{'Ab1' * 10}\n"
    masked = redact_text(planted)
    assert SECRET not in masked and "hf_Ab1" not in masked
    assert parse_logs(masked, 2026) == redact_evidence(parse_logs(planted, 2026))
    assert parse_logs(redact_text(text), 2026) == parse_logs(text, 2026)


def test_a_redacted_snapshot_masks_objects_logs_scrapes_and_issues_once():
    snap = KubeSnapshot(
        "llm", "x", "Deployment", "https://k", "prod", datetime(2026, 3, 9),
        workload={"spec": {"template": {"spec": {"containers": [{"args": ["--api-key", SECRET]}]}}}},
        events=({"message": f"pull failed: Authorization: Bearer {SECRET}"},),
        logs=(LogTail("p", "c", False, f"HF_TOKEN={SECRET}\n"),),
        scrapes=(Scrape("p", "http://u:pw@10.0.0.1:8000/metrics", f'# HELP x api_key="{SECRET}"\nx 1\n'),),
        issues=(ReadIssue("kube:events/llm", f"HTTP 500: token={SECRET}"),))
    masked = redact_snapshot(snap)
    assert masked.redacted and redact_snapshot(masked) is masked
    assert SECRET not in repr(masked) and "pw@" not in repr(masked)
    assert masked.scrapes[0].text.endswith("x 1\n")
    assert SECRET not in "".join(bundle_files(snap).values())
    assert SECRET not in repr(snapshot_evidence(snap))


def test_redact_evidence_touches_strings_only():
    Point = namedtuple("Point", "label value")
    cfg = ServerConfig("deployment.yaml", engine="vllm", max_model_len=8192, memory_fraction=0.95,
                       flags={"api-key": SECRET, "max-model-len": "8192"}, env={"VLLM_USE_V1": "0"})
    ev = Evidence(target="llm/x", server_config=cfg, issues=(ReadIssue("prometheus", f"Bearer {SECRET}xyz"),))
    out = redact_evidence(ev)
    assert out.server_config.flags == {"api-key": REDACTED, "max-model-len": "8192"}
    assert (out.server_config.max_model_len, out.server_config.memory_fraction) == (8192, 0.95)
    assert out.issues[0].message == "Bearer <redacted>"
    assert redact_evidence(out) == out
    clean = Evidence(target="llm/x")
    assert redact_evidence(clean) is clean
    assert redact_evidence((Point(f"sk-{'a' * 20}", 1.5),)) == (Point(REDACTED, 1.5),)


def test_bundle_json_is_written_masked(tmp_path):
    cfg = ServerConfig("deployment.yaml", engine="vllm", flags={"api-key": SECRET})
    write_bundle_json(tmp_path, Evidence(target="llm/x", server_config=cfg))
    text = (tmp_path / "bundle.json").read_text(encoding="utf-8")
    assert SECRET not in text and '"api-key": "<redacted>"' in text


def test_a_bundle_with_masked_secrets_reads_back_to_the_same_evidence(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        kube = sc.kube
        deployment = kube.get_object("apps", "deployments", "llm", "vllm-server")
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        container["command"] = ["/bin/sh", "-c"]
        container["args"] = ["exec python3 -m vllm.entrypoints.openai.api_server " + " ".join(container["args"])
                             + f" --api-key {SECRET} --hf-token=\"{SECRET}\""]
        container["env"].append({"name": "WANDB_KEY", "value": SECRET})
        kube.add(deployment)
        snap = gather_workload(sc.api(), "llm", "vllm-server", context="prod")
    live = snapshot_evidence(snap)
    folder = tmp_path / "bundle"
    folder.mkdir()
    for name, text in bundle_files(snap).items():
        (folder / name).write_text(text, encoding="utf-8")
    write_bundle_json(folder, live)
    assert not [p.name for p in folder.iterdir() if SECRET in p.read_text(encoding="utf-8")]
    back = load_bundle(folder)
    assert back.server_config == live.server_config
    assert (live.server_config.max_model_len, live.server_config.max_num_seqs) == (8192, 128)
    assert live.server_config.flags["api-key"] == live.server_config.flags["hf-token"] == REDACTED
    for field in ("workload", "pods", "logs", "server_metrics", "replica_sets"):
        assert getattr(back, field) == getattr(live, field), field


# ------------------------------------------------------------------------------ errors that echo credentials


class _Echo(LoopbackServer):
    """Answers every request with `status` and a body quoting the request's Authorization header."""

    def __init__(self, status: int, json_error: bool):
        self.status, self.json_error = status, json_error

    class handler(BaseHTTPRequestHandler):
        server_state: _Echo

        def log_message(self, *args: object) -> None:
            pass

        def do_GET(self) -> None:
            quoted = f"Authorization: {self.headers.get('Authorization')}"
            state = self.server_state
            if state.json_error:
                body = json.dumps({"status": "error", "errorType": "bad_data", "error": f"denied; {quoted}"})
            else:
                body = f"<html>bad gateway for {self.path} with {quoted}</html>"
            data = body.encode()
            self.send_response(state.status)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)


@pytest.mark.parametrize(("status", "json_error"), [(400, True), (502, False), (401, False)])
def test_prometheus_errors_never_carry_the_token_or_password(status, json_error):
    with _Echo(status, json_error) as echo:
        for client in (PrometheusClient(echo.url, bearer_token=SECRET, timeout_s=5),
                       PrometheusClient(echo.url.replace("http://", f"http://reader:{SECRET}@"), timeout_s=5),
                       PrometheusClient(echo.url, basic_auth=("reader", SECRET), timeout_s=5)):
            with pytest.raises(PrometheusError) as raised:
                client.query("up")
            text = f"{raised.value} {raised.value.issue('memory')} {client!r}"
            assert SECRET not in text
            assert "cmVhZGVy" not in text  # base64 of "reader:" starts every basic credential
            if json_error:
                assert "Authorization: Bearer <redacted>" in text or "Authorization: Basic <redacted>" in text


def test_kubernetes_errors_never_carry_the_token():
    body = json.dumps({"kind": "Status", "message": f"webhook denied request with authorization: Bearer {SECRET}"})
    call = Call("list", "events", "llm")
    for status in (500, 404, 409, 401, 418):
        error = ApiException(status=status, reason="Failure")
        error.body = body
        assert SECRET not in str(api_error(error, call))
        assert SECRET not in repr(api_error(error, call).__dict__)
        issue = issue_for(error, call, "https://k8s", 5)
        assert SECRET not in words.message(issue) and SECRET not in str(issue.message)
    raw = ApiException(status=502, reason="Bad Gateway")
    raw.body = f"<html>upstream said Authorization: Bearer {SECRET}</html>"
    assert SECRET not in str(api_error(raw, call))
    issue = issue_for(ValueError(f"not JSON: token={SECRET}"), call, "https://k8s", 5)
    assert SECRET not in words.message(issue) and SECRET not in str(issue.message)
