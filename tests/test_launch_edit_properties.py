"""Property tests of set_args (runbooks.remediation.edits.launch_edit): random valid values for random flags,
on every example and held-in manifest and on generated launch forms, keep the round trip:
the JSON patch gives the edited object, the parser reads the new values and nothing else
changed, the inverse gives the original byte for byte, only command/args/env are patched."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runbooks.launch.flag_tables import FIELD_MAP
from tests.test_launch_edit import EDITABLE, WORKLOAD_IDS, WORKLOADS, check_round_trip, server

SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def kind_of(engine: str, flag: str) -> str:
    return next((kind for name, _, kind in FIELD_MAP[engine] if name == flag), "str")


def value_for(kind: str) -> st.SearchStrategy[Any]:
    """Values a plan may send: numbers, or their text (None removes the flag)."""
    if kind == "float":
        fractions = st.integers(min_value=5, max_value=99).map(lambda n: n / 100)
        return st.one_of(fractions, fractions.map(str))
    counts = st.integers(min_value=1, max_value=2**20)
    return st.one_of(counts, counts.map(str))


@st.composite
def changes_for(draw: st.DrawFn, engine: str) -> dict[str, Any]:
    flags = draw(st.lists(st.sampled_from(EDITABLE[engine]), min_size=1, max_size=4, unique=True))
    return {f: draw(st.one_of(st.none(), value_for(kind_of(engine, f)))) for f in flags}


@pytest.mark.parametrize(("name", "obj"), WORKLOADS, ids=WORKLOAD_IDS)
@SETTINGS
@given(data=st.data())
def test_random_changes_on_every_manifest_keep_the_round_trip(name, obj, data):
    engine = server(obj)[2].engine
    changes = data.draw(changes_for(engine))
    if engine == "tgi" and "max-input-tokens" in changes and "max-input-length" in server(obj)[2].flags:
        changes.pop("max-input-length", None)
    check_round_trip(obj, changes)


# ------------------------------------------------------------------ generated launch forms

VLLM_FLAGS = ("max-model-len", "max-num-seqs", "gpu-memory-utilization", "max-num-batched-tokens", "port")


@st.composite
def vllm_deployment(draw: st.DrawFn) -> dict[str, Any]:
    """A vLLM container in one of the launch forms the parser reads, flags joined or split,
    hyphenated or underscored, optionally one read from an env var."""
    present = draw(st.lists(st.sampled_from(VLLM_FLAGS), max_size=len(VLLM_FLAGS), unique=True))
    joined = draw(st.booleans())
    words: list[str] = []
    env: list[dict[str, str]] = []
    via_env = draw(st.sampled_from([None, *present])) if present else None
    for flag in present:
        spelled = "--" + (flag.replace("-", "_") if draw(st.booleans()) else flag)
        value = str(draw(value_for(kind_of("vllm", flag))))
        if flag == via_env:
            env.append({"name": "FLAG_VALUE", "value": value})
            value = "$(FLAG_VALUE)"
        words += [f"{spelled}={value}"] if joined else [spelled, value]
    form = draw(st.sampled_from(["entrypoint", "serve", "module", "sh-line", "bash-lines"]))
    spec: dict[str, Any] = {"name": "server", "image": "vllm/vllm-openai:v0.10.1"}
    if form == "entrypoint":
        spec["args"] = ["Qwen/Qwen2.5-7B-Instruct", *words]
    elif form == "serve":
        spec["command"] = ["vllm", "serve", "Qwen/Qwen2.5-7B-Instruct"]
        spec["args"] = words
    elif form == "module":
        spec["command"] = ["python3", "-m", "vllm.entrypoints.openai.api_server"]
        spec["args"] = ["--model=Qwen/Qwen2.5-7B-Instruct", *words]
    elif form == "sh-line":
        spec["command"] = ["/bin/sh", "-c"]
        spec["args"] = [" ".join(["pip install -q x &&", "exec vllm serve Qwen/Qwen2.5-7B-Instruct", *words,
                                  "2>&1 | tee /tmp/log"])]
    else:
        pairs = [words[i:i + (1 if joined else 2)] for i in range(0, len(words), 1 if joined else 2)]
        lines = ["vllm serve Qwen/Qwen2.5-7B-Instruct", *("  " + " ".join(p) for p in pairs)]
        spec["command"] = ["/bin/bash", "-c"]
        spec["args"] = ["set -e\n" + " \\\n".join(lines) + "\n"]
    if env:
        spec["env"] = env
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "gen", "namespace": "llm"},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [spec]}}}}


@SETTINGS
@given(obj=vllm_deployment(), data=st.data())
def test_random_changes_on_generated_launch_forms_keep_the_round_trip(obj, data):
    flags = data.draw(st.lists(st.sampled_from(VLLM_FLAGS[:4]), min_size=1, max_size=4, unique=True))
    changes = {f: data.draw(st.one_of(st.none(), value_for(kind_of("vllm", f)))) for f in flags}
    check_round_trip(obj, changes)
