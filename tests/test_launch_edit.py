"""set_args edits the flag where the Deployment keeps it (runbooks.remediation.edits.launch_edit).

For every example and held-in manifest: each relevant change, one at a time and several at once,
applied as the JSON patch with the `jsonpatch` library (and as the strategic merge patch with a
small applier below), read back with the parser triage uses, inverted byte for byte, and
touching only the container's command/args/env.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import jsonpatch
import pytest
import yaml

from bot.service.container_reader import CONTAINER_READER
from collectors.parsers.flags import server_config_from_container
from collectors.parsers.kube_pod_spec import pick_server_container
from collectors.parsers.kube_yaml import load_yaml_documents
from runbooks.catalogs.engine_flags import COVERED, version_label
from runbooks.launch.flag_tables import FIELD_MAP
from runbooks.model.errors import StaleObject, UsageError
from runbooks.model.evidence import ServerConfig
from runbooks.remediation.edits.launch_edit import EditResult, Restore, edit_flags

ROOT = Path(__file__).resolve().parent.parent
MANIFEST_FILES = sorted(
    [*ROOT.glob("examples/*/deployment.yaml"), *ROOT.glob("tests/data/kube/deployment-*.yaml"),
     *ROOT.glob("tests/data/kube/statefulset-*.yaml")])
POD = "/spec/template/spec"
#: (context length, concurrency, memory fraction) flags, as runbooks.remediation names them
ENGINE_FLAGS = {
    "vllm": ("max-model-len", "max-num-seqs", "gpu-memory-utilization"),
    "sglang": ("context-length", "max-running-requests", "mem-fraction-static"),
    "tgi": ("max-total-tokens", "max-batch-size", "cuda-memory-fraction"),
}
#: flags a plan may add, per engine, first absent one wins
ADDABLE = {
    "vllm": (("max-num-batched-tokens", 2048), ("max-num-seqs", 32), ("max-model-len", 4096),
             ("enforce-eager", True)),
    "sglang": (("max-running-requests", 32), ("max-total-tokens", 200000), ("max-prefill-tokens", 8192)),
    "tgi": (("max-batch-size", 16), ("cuda-memory-fraction", 0.9), ("max-batch-prefill-tokens", 2048)),
}
#: flags the tests change, per engine (all memory-relevant)
EDITABLE = {
    "vllm": ("max-model-len", "max-num-seqs", "gpu-memory-utilization", "max-num-batched-tokens"),
    "sglang": ("context-length", "max-running-requests", "mem-fraction-static", "max-total-tokens",
               "max-prefill-tokens"),
    "tgi": ("max-total-tokens", "max-batch-size", "cuda-memory-fraction", "max-input-tokens",
            "max-batch-prefill-tokens", "max-batch-total-tokens"),
}


def _workloads() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in MANIFEST_FILES:
        rel = str(path.relative_to(ROOT))
        for obj in load_yaml_documents(path.read_text(), rel):
            if obj.get("kind") not in ("Deployment", "StatefulSet"):
                continue
            _, config = pick_server_container(obj["spec"]["template"]["spec"], "spec.template.spec", rel)
            if config is not None and config.launch_form is not None:
                found.append((f"{rel}:{obj['metadata']['name']}", obj))
    return found


WORKLOADS = _workloads()
WORKLOAD_IDS = [name for name, _ in WORKLOADS]


def server(obj: dict[str, Any]) -> tuple[int, dict[str, Any], ServerConfig]:
    index, config = pick_server_container(obj["spec"]["template"]["spec"], "spec.template.spec", "t")
    assert index is not None and config is not None
    return index, obj["spec"]["template"]["spec"]["containers"][index], config


def config_of(container: dict[str, Any]) -> ServerConfig:
    config = server_config_from_container(container, source="workload")
    assert config is not None
    return config


# ------------------------------------------------------------------ appliers and checks


def apply_strategic(obj: dict[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
    """The strategic merge rules a container flag patch uses: containers and env merged by name,
    `$patch: delete`, `$setElementOrder/env`, command/args replaced, null removes a field."""
    out = copy.deepcopy(obj)
    containers = out["spec"]["template"]["spec"]["containers"]
    for change in patch["spec"]["template"]["spec"]["containers"]:
        target = next(c for c in containers if c["name"] == change["name"])
        order = change.get("$setElementOrder/env")
        for key, value in change.items():
            if key in ("name", "$setElementOrder/env"):
                continue
            if value is None:
                target.pop(key, None)
            elif key == "env":
                merged = {e["name"]: e for e in target.get("env", [])}
                for entry in value:
                    if entry.get("$patch") == "delete":
                        merged.pop(entry["name"], None)
                    else:
                        merged[entry["name"]] = {**merged.get(entry["name"], {}), **entry}
                names = [e["name"] for e in order] if order else list(merged)
                target["env"] = [merged[n] for n in names]
            else:
                target[key] = value
    return out


def text_of(value: Any) -> str | None:
    """What the engine reads for a requested value (None: the flag is gone)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)
    return str(value)


def spelled(before: ServerConfig, flag: str) -> str:
    """TGI's max-input-tokens is edited under the name the Deployment already uses."""
    twins = {"max-input-tokens": "max-input-length", "max-input-length": "max-input-tokens"}
    if before.engine == "tgi" and flag in twins and flag not in before.flags and twins[flag] in before.flags:
        return twins[flag]
    return flag


def expected_config(before: ServerConfig, changes: dict[str, Any]) -> ServerConfig:
    """`before` with the flags in `changes` and the fields they map to replaced by the new values."""
    engine = before.engine or ""
    flags = dict(before.flags)
    replaced: dict[str, Any] = {}
    warnings = list(before.warnings)
    for requested, value in changes.items():
        flag, text = spelled(before, requested), text_of(value)
        if text is None:
            flags.pop(flag, None)
        else:
            flags[flag] = text
        warnings = [w for w in warnings if w != f"unparsed_value:{flag}"]
        for name, field_name, kind in FIELD_MAP[engine]:
            if name != flag:
                continue
            converted = {"int": int, "float": float, "bool": lambda t: t == "true"}.get(kind, str)
            try:
                replaced[field_name] = None if text is None else converted(text)
            except ValueError:  # "16k": kept as text only, as the parser does
                replaced[field_name] = None
                warnings.append(f"unparsed_value:{flag}")
            if field_name == "memory_fraction":
                replaced["memory_fraction_kind"] = None if text is None else \
                    {"vllm": "total", "sglang": "free_static", "tgi": "process"}[engine]
    return dataclasses.replace(before, flags=flags, warnings=tuple(sorted(set(warnings))), **replaced)


def check_round_trip(obj: dict[str, Any], changes: dict[str, Any], container: str | None = None) -> EditResult:
    """(1) the JSON patch gives the edited object, (2) the parser reads the new values and the
    rest as before, (3) the inverse gives the original byte for byte, (4) only command/args/env.

    The version is the image tag's; where the tag gives none, the newest version read (as if
    the log's version line said so): the version guard has its own tests (test_engine_flags)."""
    original = copy.deepcopy(obj)
    index, spec, before = server(obj)
    newest = version_label(COVERED[before.engine][1]) if before.engine in COVERED else None
    result = edit_flags(obj, container, changes, engine_version=newest, reader=CONTAINER_READER)
    assert obj == original, "edit_flags modified its input"
    # (1) the exact patch, applied by an independent RFC 6902 implementation
    patched = jsonpatch.apply_patch(obj, list(result.json_patch))
    assert patched == result.workload
    assert apply_strategic(obj, result.merge_patch) == result.workload
    # (2) read back with the parser triage uses
    new_spec = result.workload["spec"]["template"]["spec"]["containers"][index]
    after = config_of(new_spec)
    assert dataclasses.replace(after, warnings=tuple(sorted(after.warnings))) == expected_config(config_of(spec), changes)
    assert {e.flag: e.new for e in result.edits} == {spelled(before, f): text_of(v) for f, v in changes.items()}
    # (3) the inverse
    back = edit_flags(result.workload, container, result.inverse, engine_version=newest, reader=CONTAINER_READER)
    assert back.workload == original
    assert json.dumps(back.workload) == json.dumps(original)
    assert yaml.safe_dump(back.workload, sort_keys=False) == yaml.safe_dump(original, sort_keys=False)
    # (4) nothing else: only this container's command/args/env
    fields = {f"{POD}/containers/{index}/{f}": f for f in ("command", "args", "env")}
    for op in result.json_patch:
        field, _, element = op["path"].partition(f"/containers/{index}/")[2].partition("/")
        assert f"{POD}/containers/{index}/{field}" in fields and (element == "" or element.isdigit()), op["path"]
    for i, op in enumerate(result.json_patch):
        if op["op"] in ("replace", "remove"):  # element by element, each tested at its old value just before
            assert result.json_patch[i - 1]["op"] == "test" and result.json_patch[i - 1]["path"] == op["path"]
        if op["op"] == "replace" and "/" not in op["path"].partition(f"/containers/{index}/")[2]:
            assert result.json_patch[i - 1]["value"] == spec[op["path"].rsplit("/", 1)[1]]
    others = copy.deepcopy(result.workload)
    for name in ("command", "args", "env"):
        others["spec"]["template"]["spec"]["containers"][index].pop(name, None)
        original["spec"]["template"]["spec"]["containers"][index].pop(name, None)
    assert others == original
    return result


def relevant_changes(config: ServerConfig) -> dict[str, dict[str, Any]]:
    """The changes a plan makes to this server: each alone, and several at once."""
    engine = config.engine or ""
    length, seqs, fraction = ENGINE_FLAGS[engine]
    out: dict[str, dict[str, Any]] = {
        "lower_concurrency": {seqs: max(1, (config.max_num_seqs or 256) // 2)},
        "cap_context": {length: max(512, (config.max_model_len or 8192) // 2)},
        "step_fraction_back": {fraction: round((config.memory_fraction or 0.9) - 0.05, 2)},
    }
    absent = next(((f, v) for f, v in ADDABLE[engine] if f not in config.flags), None)
    if absent is not None:
        out["add_absent"] = {absent[0]: absent[1]}
    present = [f for f in (*ENGINE_FLAGS[engine], *EDITABLE[engine]) if f in config.flags]
    if present:
        out["remove_present"] = {present[0]: None}
    several = {**out["lower_concurrency"], **out["cap_context"], **out["step_fraction_back"]}
    if absent is not None and absent[0] not in several:
        several[absent[0]] = absent[1]
    out["several"] = several
    removable = [f for f in present if f not in several]
    if removable:
        out["several_with_removal"] = {**several, removable[0]: None}
    return out


CASES = [(name, obj, label, changes) for name, obj in WORKLOADS
         for label, changes in relevant_changes(server(obj)[2]).items()]


# ------------------------------------------------------------------ every manifest


def test_every_manifest_with_a_server_is_covered():
    names = {name.split(":")[0] for name in WORKLOAD_IDS}
    assert len(names) == len(MANIFEST_FILES)  # each file has one server workload
    forms = {server(obj)[2].launch_form for _, obj in WORKLOADS}
    assert forms == {"vllm-entrypoint-args", "vllm-serve", "vllm-module", "shell-string", "tgi-launcher", "tgi-env"}


@pytest.mark.parametrize(("name", "obj", "label", "changes"), CASES,
                         ids=[f"{n}-{label}" for n, _, label, _ in CASES])
def test_patch_then_reparse_gives_the_new_values_and_nothing_else(name, obj, label, changes):
    result = check_round_trip(obj, changes)
    assert result.launch_form == server(obj)[2].launch_form
    assert len(result.diff()) == len(changes)


@pytest.mark.parametrize(("name", "obj"), WORKLOADS, ids=WORKLOAD_IDS)
def test_no_change_writes_nothing(name, obj):
    result = edit_flags(obj, None, {}, reader=CONTAINER_READER)
    assert result.json_patch == () and result.fields == {} and result.workload == obj


# ------------------------------------------------------------------ where each launch form keeps a flag


def workload(name: str) -> dict[str, Any]:
    return next(obj for n, obj in WORKLOADS if n.startswith(name))


def container(result: EditResult) -> dict[str, Any]:
    return result.workload["spec"]["template"]["spec"]["containers"][result.container_index]


def test_underscore_spelling_and_split_form_are_kept():
    obj = workload("tests/data/kube/deployment-production-stack.yaml")
    result = check_round_trip(obj, {"max-num-seqs": 16})
    old = server(obj)[1]["command"]
    new = container(result)["command"]
    assert [i for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b] == [old.index("--max_num_seqs") + 1]
    assert new[old.index("--max_num_seqs") + 1] == "16"
    assert result.diff() == ["--max_num_seqs 32 -> 16 (command[16])"]
    assert result.fields == {"command": new}


def test_joined_form_stays_joined():
    result = check_round_trip(workload("examples/runbook-incident"), {"max-num-seqs": 64})
    assert "--max-num-seqs=64" in container(result)["args"]
    assert "--max-num-seqs" not in container(result)["args"]


def test_an_added_flag_follows_its_neighbours_form():
    joined = check_round_trip(workload("examples/runbook-incident"), {"max-num-batched-tokens": 4096})
    assert container(joined)["args"][-1] == "--max-num-batched-tokens=4096"
    split = check_round_trip(workload("examples/healthy-vllm-v1"), {"max-num-batched-tokens": 4096})
    assert container(split)["args"][-2:] == ["--max-num-batched-tokens", "4096"]
    underscored = check_round_trip(workload("tests/data/kube/deployment-production-stack"),
                                   {"kv-cache-dtype": "fp8"})
    assert container(underscored)["command"][-2:] == ["--kv_cache_dtype", "fp8"]


def test_script_token_is_edited_in_place_keeping_continuations_and_other_lines():
    obj = workload("tests/data/kube/statefulset-sglang-multinode")
    result = check_round_trip(obj, {"mem-fraction-static": 0.8})
    old = server(obj)[1]["args"][0]
    new = container(result)["args"][0]
    assert new == old.replace("--mem-fraction-static 0.88 \\\n", "--mem-fraction-static 0.8 \\\n")
    changed = [(a, b) for a, b in zip(old.splitlines(), new.splitlines(), strict=True) if a != b]
    assert changed == [("  --mem-fraction-static 0.88 \\", "  --mem-fraction-static 0.8 \\")]
    assert result.diff() == ["--mem-fraction-static 0.88 -> 0.8 (args[0] line 13)"]


def test_flag_added_to_a_continuation_script_gets_its_own_line():
    obj = workload("examples/params-edge-sglang")
    result = check_round_trip(obj, {"max-running-requests": 48})
    old = server(obj)[1]["args"][0]
    assert container(result)["args"][0] == old.replace(
        "  --enable-metrics\n", "  --enable-metrics \\\n  --max-running-requests 48\n")


def test_flag_removed_from_a_script_takes_its_own_line_with_it():
    obj = workload("examples/params-edge-sglang")
    result = check_round_trip(obj, {"context-length": None})
    old = server(obj)[1]["args"][0]
    assert container(result)["args"][0] == old.replace("  --context-length 32768 \\\n", "")
    result = check_round_trip(obj, {"mem-fraction-static": None, "context-length": None})
    assert container(result)["args"][0] == old.replace("  --context-length 32768 \\\n", "").replace(
        "  --mem-fraction-static 0.95 \\\n", "")


def shell_deployment(script: str, env: list[dict[str, Any]] | None = None, image: str = "vllm/vllm-openai:v0.8.5"):
    spec: dict[str, Any] = {"name": "server", "image": image, "command": ["/bin/bash", "-c"], "args": [script]}
    if env is not None:
        spec["env"] = env
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x", "namespace": "llm"},
            "spec": {"template": {"spec": {"containers": [spec]}}}}


@pytest.mark.parametrize(("script", "edited"), [
    ("pip install x && vllm serve M --max-num-seqs 64 && echo done",
     "pip install x && vllm serve M --max-num-seqs 64 --max-model-len 4096 && echo done"),
    ("vllm serve M --max-num-seqs 64; sleep 1", "vllm serve M --max-num-seqs 64 --max-model-len 4096; sleep 1"),
    ("exec vllm serve M \\\n  --max-num-seqs 64 2>&1 | tee /tmp/log",
     "exec vllm serve M \\\n  --max-num-seqs 64 \\\n  --max-model-len 4096 2>&1 | tee /tmp/log"),
    ("vllm serve M --max-num-seqs=64 > /tmp/out", "vllm serve M --max-num-seqs=64 --max-model-len=4096 > /tmp/out"),
])
def test_flag_added_in_a_script_goes_on_the_server_line_before_chains_and_redirects(script, edited):
    result = check_round_trip(shell_deployment(script), {"max-model-len": 4096})
    assert container(result)["args"] == [edited]


@pytest.mark.parametrize(("script", "edited"), [
    ("vllm serve M --max-num-seqs '64'", "vllm serve M --max-num-seqs '32'"),
    ('vllm serve M "--max-num-seqs=64"', 'vllm serve M "--max-num-seqs=32"'),
    ('vllm serve M --max-num-seqs="64" --port 8000', 'vllm serve M --max-num-seqs="32" --port 8000'),
])
def test_quoted_script_values_keep_their_quotes(script, edited):
    result = check_round_trip(shell_deployment(script), {"max-num-seqs": 32})
    assert container(result)["args"] == [edited]


def test_k8s_env_reference_is_edited_in_the_env_value():
    obj = workload("tests/data/kube/deployment-vllm-entrypoint-args")
    result = check_round_trip(obj, {"max-model-len": 16384})
    assert set(result.fields) == {"env"}
    assert container(result)["env"][0] == {"name": "MAX_LEN", "value": "16384"}
    assert container(result)["args"] == server(obj)[1]["args"]
    assert result.diff() == ["--max-model-len 32768 -> 16384 (env MAX_LEN)"]


def test_shell_variable_from_the_container_env_is_edited_in_the_env_value():
    obj = shell_deployment("vllm serve M --max-num-seqs ${SEQS} --port 8000", env=[{"name": "SEQS", "value": "64"}])
    result = check_round_trip(obj, {"max-num-seqs": 16})
    assert container(result)["env"] == [{"name": "SEQS", "value": "16"}]
    assert container(result)["args"] == server(obj)[1]["args"]


def test_tgi_env_flags_are_edited_and_added_as_env_vars():
    obj = workload("tests/data/kube/deployment-tgi-env")
    result = check_round_trip(obj, {"cuda-memory-fraction": 0.85, "max-batch-size": 8})
    env = container(result)["env"]
    assert {"name": "CUDA_MEMORY_FRACTION", "value": "0.85"} in env
    assert env[-1] == {"name": "MAX_BATCH_SIZE", "value": "8"}
    assert set(result.fields) == {"env"}


def test_tgi_keeps_the_spelling_the_deployment_uses_for_max_input_tokens():
    result = check_round_trip(workload("tests/data/kube/deployment-tgi-env"), {"max-input-tokens": 1024})
    assert {"name": "MAX_INPUT_LENGTH", "value": "1024"} in container(result)["env"]
    assert not any(e["name"] == "MAX_INPUT_TOKENS" for e in container(result)["env"])


def test_tgi_flag_read_through_env_reference_is_edited_in_the_env():
    obj = workload("examples/platform-probes-tgi")
    result = check_round_trip(obj, {"max-total-tokens": 4096})
    assert {"name": "MAX_TOTAL_TOKENS", "value": "4096"} in container(result)["env"]
    assert container(result)["args"] == server(obj)[1]["args"]


def test_tgi_command_line_beats_its_env_var_and_removal_removes_both():
    obj = workload("tests/data/kube/deployment-tgi-args")
    result = check_round_trip(obj, {"max-total-tokens": 6000})
    assert set(result.fields) == {"args"}
    assert "shadowed" in result.diff()[0]
    removed = check_round_trip(obj, {"max-total-tokens": None})
    assert "--max-total-tokens" not in container(removed)["args"]
    assert not any(e["name"] == "MAX_TOTAL_TOKENS" for e in container(removed)["env"])
    assert config_of(container(removed)).max_model_len is None


def test_vllm_serve_entrypoint_forms():
    repeated = check_round_trip(workload("tests/data/kube/deployment-serve-repeated"), {"max-model-len": "16k"})
    assert container(repeated)["args"] == ["serve", "meta-llama/Llama-3.1-8B-Instruct", "--max-model-len", "16k",
                                          "--max-num-seqs", "64"]
    for command, args in ((["vllm", "serve"], ["M", "--max-num-seqs", "64"]),
                          (["python3", "-m", "vllm.entrypoints.cli.main", "serve", "M"], ["--max-num-seqs", "64"])):
        obj = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
            {"name": "s", "image": "vllm/vllm-openai:v0.9.0", "command": command, "args": args}]}}}}
        result = check_round_trip(obj, {"max-num-seqs": 8, "gpu-memory-utilization": 0.8})
        assert container(result)["args"][-4:] == ["--max-num-seqs", "8", "--gpu-memory-utilization", "0.8"]
        assert container(result)["command"] == command


def test_image_entrypoint_with_no_args_gets_an_args_list_and_loses_it_on_rollback():
    obj = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"name": "s", "image": "vllm/vllm-openai:v0.9.0", "resources": {}}]}}}}
    result = check_round_trip(obj, {"max-num-seqs": 8})
    assert container(result)["args"] == ["--max-num-seqs", "8"]
    assert result.json_patch == ({"op": "add", "path": f"{POD}/containers/0/args", "value": ["--max-num-seqs", "8"]},)


def test_whole_command_line_in_one_command_element_is_edited_in_place():
    obj = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"name": "s", "image": "vllm/vllm-openai:v0.7.3",
         "command": ["vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 4096"]}]}}}}
    result = check_round_trip(obj, {"max-model-len": 2048, "max-num-seqs": 32})
    assert container(result)["command"] == ["vllm serve Qwen/Qwen2.5-7B-Instruct --max-model-len 2048 --max-num-seqs 32"]


def test_switch_is_added_bare_and_a_negated_one_is_turned_on():
    result = check_round_trip(workload("examples/healthy-vllm-v1"), {"enforce-eager": True})
    assert container(result)["args"][-1] == "--enforce-eager"
    obj = shell_deployment("vllm serve M --no-enable-prefix-caching --port 8000")
    result = check_round_trip(obj, {"enable-prefix-caching": True})
    assert container(result)["args"] == ["vllm serve M --enable-prefix-caching --port 8000"]
    assert isinstance(result.inverse["enable-prefix-caching"], Restore)


# ------------------------------------------------------------------ given twice


def test_flag_given_twice_edits_the_one_argparse_reads_and_says_so():
    obj = shell_deployment("vllm serve M --max-num-seqs 64 --port 8000 --max-num-seqs 128")
    result = check_round_trip(obj, {"max-num-seqs": 32})
    assert container(result)["args"] == ["vllm serve M --max-num-seqs 64 --port 8000 --max-num-seqs 32"]
    assert "given 2 times: the engine reads the last" in result.diff()[0]
    removed = check_round_trip(obj, {"max-num-seqs": None})
    assert container(removed)["args"] == ["vllm serve M --port 8000"]
    assert "all removed" in removed.diff()[0]


def test_adjacent_flags_removed_together_leave_no_stray_blanks():
    obj = shell_deployment("vllm serve M --max-num-seqs 64 --max-model-len 4096 --port 8000")
    result = check_round_trip(obj, {"max-num-seqs": None, "max-model-len": None})
    assert container(result)["args"] == ["vllm serve M --port 8000"]
    result = check_round_trip(obj, {"max-model-len": None, "port": None, "gpu-memory-utilization": 0.8})
    assert container(result)["args"] == ["vllm serve M --max-num-seqs 64 --gpu-memory-utilization 0.8"]


def test_tgi_flag_given_twice_is_refused():
    obj = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"name": "tgi", "image": "ghcr.io/huggingface/text-generation-inference:3.0.0",
         "args": ["--model-id", "m", "--max-batch-size", "8", "--max-batch-size", "16"]}]}}}}
    with pytest.raises(UsageError) as err:
        edit_flags(obj, "tgi", {"max-batch-size": 4}, reader=CONTAINER_READER)
    assert (err.value.code, err.value.params["reason"]) == ("flag_not_editable", "given_twice")
    check_round_trip(obj, {"max-batch-size": None}, "tgi")


# ------------------------------------------------------------------ refused, never guessed


def refusal(obj: dict[str, Any], changes: dict[str, Any]) -> str:
    with pytest.raises(UsageError) as err:
        edit_flags(obj, None, changes, reader=CONTAINER_READER)
    assert err.value.code == "flag_not_editable"
    return err.value.params["reason"]


@pytest.mark.parametrize(("script", "env", "reason"), [
    ("vllm serve M --max-num-seqs $((BASE * 2))", [{"name": "BASE", "value": "32"}], "value_computed_by_shell"),
    ("vllm serve M --max-num-seqs $(cat /etc/seqs)", None, "value_computed_by_shell"),
    ("vllm serve M --max-num-seqs ${SEQS:-64}", [{"name": "SEQS", "value": "8"}], "value_computed_by_shell"),
    ("vllm serve M --max-num-seqs `cat /etc/seqs`", None, "value_computed_by_shell"),
    ("SEQS=64; vllm serve M --max-num-seqs $SEQS", [{"name": "SEQS", "value": "8"}], "value_set_in_script"),
    ("vllm serve M --max-num-seqs $SEQS --max-loras $SEQS", [{"name": "SEQS", "value": "8"}], "env_var_shared"),
    ("vllm serve M --max-num-seqs $SEQS",
     [{"name": "SEQS", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
     "value_from_secret_or_configmap"),
    ("vllm serve M --max-num-seqs $(SEQS)",
     [{"name": "SEQS", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}],
     "value_from_secret_or_configmap"),
    ("bash -c 'vllm serve M --max-num-seqs 64'", None, "nested_shell"),
    ("sh /config/start.sh", None, "launch_form_unknown"),
])
def test_what_cannot_be_edited_safely_is_refused(script, env, reason):
    obj = shell_deployment(script, env)
    if reason == "launch_form_unknown":
        obj["spec"]["template"]["spec"]["containers"][0]["command"] = ["sh", "/config/start.sh"]
        obj["spec"]["template"]["spec"]["containers"][0].pop("args")
    assert refusal(obj, {"max-num-seqs": 16}) == reason


def test_env_value_from_a_secret_or_shared_between_flags_is_refused():
    base = {"name": "s", "image": "vllm/vllm-openai:v0.9.0"}
    secret = {**base, "args": ["M", "--max-num-seqs", "$(SEQS)"],
              "env": [{"name": "SEQS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]}
    shared = {**base, "args": ["M", "--max-num-seqs=$(N)", "--max-loras=$(N)"], "env": [{"name": "N", "value": "8"}]}
    engine_var = {**base, "args": ["M", "--max-num-seqs", "$(VLLM_SEQS)"], "env": [{"name": "VLLM_SEQS", "value": "8"}]}
    computed = {**base, "args": ["M", "--max-num-seqs", "$(N)"],
                "env": [{"name": "B", "value": "4"}, {"name": "N", "value": "$(B)"}]}
    for spec, reason in ((secret, "value_from_secret_or_configmap"), (shared, "env_var_shared"),
                         (engine_var, "env_var_read_by_engine"), (computed, "env_value_computed")):
        obj = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [spec]}}}}
        assert refusal(obj, {"max-num-seqs": 4}) == reason, reason


def test_tgi_env_var_read_for_another_setting_is_refused():
    obj = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [
        {"name": "tgi", "image": "ghcr.io/huggingface/text-generation-inference:3.0.0",
         "args": ["--model-id", "m", "--max-batch-size", "$(MAX_BATCH_PREFILL_TOKENS)"],
         "env": [{"name": "MAX_BATCH_PREFILL_TOKENS", "value": "16"}]}]}}}}
    assert refusal(obj, {"max-batch-size": 8}) == "env_var_read_by_engine"


def test_values_and_flags_that_make_no_sense_are_usage_errors():
    obj = workload("examples/healthy-vllm-v1")
    for changes, code in (({"max-num-seqs": float("nan")}, "flag_value_invalid"),
                          ({"max-num-seqs": 1.5}, "flag_value_invalid"),
                          ({"max-num-seqs": True}, "flag_value_invalid"),
                          ({"enforce-eager": 1}, "flag_value_invalid"),
                          ({"max-num-seqs": "6 4"}, "flag_value_invalid"),
                          ({"max-num-seqs": "$(N)"}, "flag_value_invalid"),
                          ({"context-length": 4096}, "flag_unknown"),
                          ({"max-num-seqs": 8, "max_num_seqs": 16}, "flag_repeated")):
        with pytest.raises(UsageError) as err:
            edit_flags(obj, None, changes, reader=CONTAINER_READER)
        assert err.value.code == code, changes
    assert refusal(obj, {"model": "other/model"}) == "model_flag"
    assert refusal(obj, {"enforce-eager": False}) == "switch_off_unsupported"
    with pytest.raises(UsageError) as err:
        edit_flags(obj, "sidecar", {"max-num-seqs": 8}, reader=CONTAINER_READER)
    assert err.value.code == "container_not_found"


def test_script_values_that_would_need_new_quoting_are_refused():
    obj = shell_deployment("vllm serve M --max-num-seqs 64")
    with pytest.raises(UsageError) as err:
        edit_flags(obj, None, {"served-model-name": "a;b"}, reader=CONTAINER_READER)
    assert err.value.code == "flag_value_not_safe"


def test_a_restore_applies_only_to_the_object_it_was_made_from():
    obj = workload("examples/params-edge-sglang")
    result = edit_flags(obj, None, {"context-length": None}, reader=CONTAINER_READER)
    changed = copy.deepcopy(result.workload)
    changed["spec"]["template"]["spec"]["containers"][0]["args"][0] += "# edited by hand\n"
    with pytest.raises(StaleObject):
        edit_flags(changed, None, result.inverse, reader=CONTAINER_READER)


def test_the_sidecar_is_never_touched_and_the_server_is_picked_like_triage():
    obj = workload("tests/data/kube/deployment-mig")
    result = check_round_trip(obj, {"max-model-len": 8192})
    assert result.container == "vllm" and result.container_index == 1
    assert result.workload["spec"]["template"]["spec"]["containers"][0] == obj["spec"]["template"]["spec"]["containers"][0]
