"""A plan never holds a secret, a credential flag is never planned, every planned value is in its
range: against the stand-in API server, through the real CLI, with every output searched for the
secret (plan text and JSON, `plans --json`, apply and rollback, the SQLite store's bytes, logs)
and the writes the server received counted."""

from __future__ import annotations

import copy
import json
import logging

import jsonpatch
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.actuator.apply import inverse_ops
from bot.service.remediate import parse_set
from bot.store.db import Store
from runbooks.model.errors import UsageError
from runbooks.model.secrets import secret_name
from runbooks.remediation.edits.patches import json_patch
from runbooks.remediation.value_ranges import RANGES, check_value
from tests.support.kube_fixtures import run_cli, running_scenario

TARGET = "llm/vllm-server"
#: one shaped like a credential, one that is secret only because of the flag before it
SECRETS = ("sk-proj-Zq8vT3nR7wL2mK9pX4bY6cD1", "correct-horse-battery-staple")
#: the scenario's own: a literal HF_TOKEN in env and in the last-applied annotation
HF = "hf_live_secret_value"
SHELL = ("exec python3 -m vllm.entrypoints.openai.api_server --model=Qwen/Qwen2.5-7B-Instruct "
         "--max-model-len=8192 --max-num-seqs=128 --api-key {secret} --port=8000")


def _container(sc) -> dict:
    obj = sc.kube.get("Deployment", "llm", "vllm-server")
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")


def _launch(sc) -> dict:
    """What a flag edit may change (the API server defaults the rest on the first write)."""
    container = _container(sc)
    return {f: container.get(f) for f in ("command", "args", "env")}


def _with_key(sc, form: str, secret: str) -> None:
    """The scenario's Deployment with an API key in the launch form `form`."""
    obj = sc.kube.get("Deployment", "llm", "vllm-server")
    container = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    args = container["args"]
    if form == "split":
        container["args"] = [args[0], "--api-key", secret, *args[1:]]
    elif form == "joined":
        container["args"] = [args[0], f"--api-key={secret}", *args[1:]]
    else:
        container["command"], container["args"] = ["sh", "-c"], [SHELL.format(secret=secret)]
    sc.kube.add(obj)


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _store_bytes(path) -> bytes:
    return b"".join(p.read_bytes() for p in path.parent.glob(path.name + "*"))


def _no_secret(secret: str, *texts: object) -> None:
    for text in texts:
        shown = text if isinstance(text, (str, bytes)) else json.dumps(text)
        for value in (secret, HF):
            needle = value.encode() if isinstance(shown, bytes) else value
            assert needle not in shown


@pytest.mark.parametrize("secret", SECRETS)
@pytest.mark.parametrize("form", ["split", "joined"])
@pytest.mark.parametrize("sets", [("max-num-seqs=64",), ("enforce-eager=true",), ("gpu-memory-utilization=",),
                                  ("max-num-seqs=64", "enforce-eager=true")])
def test_a_plan_beside_a_key_holds_only_the_elements_it_changes_and_rollback_restores_exactly(
        cluster, tmp_path, capsys, caplog, form, secret, sets):
    caplog.set_level(logging.DEBUG)
    _with_key(cluster, form, secret)
    before = copy.deepcopy(_launch(cluster))
    store = tmp_path / "gpumem.db"
    argv = [a for s in sets for a in ("--set", s)]
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, *argv)
    assert rc == 0 and "application/json-patch+json" in text
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, *argv, "--json")  # supersedes the first
    assert rc == 0, plan
    # element operations only: each names one element of args, never the list
    element_paths = [op["path"] for op in plan["patch"]]
    assert all(p.rsplit("/", 1)[1].isdigit() for p in element_paths), element_paths
    rc, listed = run_cli(capsys, cluster, store, "plans", "--all", "--json")
    assert rc == 0 and plan["id"] in [p["id"] for p in listed] and len(listed) == 2
    rc, applied = run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 0, applied
    assert len(cluster.kube.writes(verb="patch")) == 1
    rc, back = run_cli(capsys, cluster, store, "rollback", plan["id"], "--yes", "--json")
    assert (rc, back["state"]) == (0, "rolled_back")
    assert _launch(cluster) == before, "the rollback put back exactly what the plan changed, the key intact"
    assert len(cluster.kube.writes(verb="patch")) == 2
    audit = [r.__dict__ for r in Store.open(store).audit()]
    notes = [r for r in audit if r["event"] == "rollback_note"]
    assert notes and all(op["path"].rsplit("/", 1)[1].isdigit() for op in notes[0]["detail"]["inverse"])
    _no_secret(secret, plan, text, listed, applied, back, json.dumps(audit, default=str), _store_bytes(store),
               caplog.text)


def test_the_shell_form_with_a_key_in_the_script_is_refused_and_nothing_is_stored(cluster, tmp_path, capsys, caplog):
    caplog.set_level(logging.DEBUG)
    secret = SECRETS[0]
    _with_key(cluster, "shell", secret)
    store = tmp_path / "gpumem.db"
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, "--set", "max-num-seqs=64")
    assert rc == 2 and "args[0] also carries a credential" in text and "Traceback" not in text
    assert "$(VAR)" in text, "the refusal says what to do"
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    assert Store.open(store).plans() == []
    _no_secret(secret, text, _store_bytes(store), caplog.text)


def test_the_shell_form_with_the_key_from_a_secret_plans_and_rolls_back(cluster, tmp_path, capsys):
    obj = cluster.kube.get("Deployment", "llm", "vllm-server")
    container = obj["spec"]["template"]["spec"]["containers"][0]
    container["command"], container["args"] = ["sh", "-c"], [SHELL.format(secret="$VLLM_API_KEY")]
    container["env"] = [*container["env"], {"name": "VLLM_API_KEY", "valueFrom": {
        "secretKeyRef": {"name": "vllm", "key": "api-key"}}}]
    cluster.kube.add(obj)
    before = copy.deepcopy(_launch(cluster))
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0 and [op["path"].rsplit("/", 2)[1:] for op in plan["patch"]] == [["args", "0"], ["args", "0"]]
    assert run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
    assert "--max-num-seqs=64 " in _container(cluster)["args"][0]
    assert run_cli(capsys, cluster, store, "rollback", plan["id"], "--yes")[0] == 0
    assert _launch(cluster) == before


@pytest.mark.parametrize("value", [
    f"api-key={SECRETS[0]}", "--api-key=abc123", "api_key=abc123", f"hf-token={HF}", "ssl-keyfile-password=pw123456",
    "apiKey=x", f"served-model-name={SECRETS[0]}", "api-key=",
])
def test_a_credential_flag_or_value_is_refused_by_name_before_the_cluster_is_read(cluster, tmp_path, capsys, value):
    rc, text = run_cli(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, f"--set={value}")
    assert rc == 2 and "credential" in text and "Nothing was planned or written" in text
    flag = value.partition("=")[0].lstrip("-")
    assert f"--{flag}" in text, "the refusal names the flag"
    assert cluster.kube.calls() == [], "not even a read"
    _no_secret(SECRETS[0], text)
    assert "abc123" not in text and "pw123456" not in text


def test_a_triage_action_that_would_set_a_credential_is_refused(cluster, tmp_path, capsys):
    from bot.service.notes import record_triage
    from runbooks.model.changes import SetArg
    from runbooks.model.report import Action, Report

    store = tmp_path / "gpumem.db"
    db = Store.open(store)
    record_triage(db, Report(target=TARGET, actions=(
        Action("odd", changes=(SetArg("vllm", "api-key", None, "abcdef123"),)),)), actor="cli:test")
    db.close()
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, "--action", "odd")
    assert rc == 2 and "--api-key carries a credential" in text and "abcdef123" not in text
    assert cluster.kube.writes() == []


@pytest.mark.parametrize(("argv", "words"), [
    (("--set", "max-num-seqs=" + "9" * 1900), "--max-num-seqs 99999999999999999999999999999999... (1900 characters)"
                                              " is out of range: gpumem plans 1..65536"),
    (("--set", "max-model-len=1e20"), "--max-model-len 1e+20 is out of range: gpumem plans 1..32768"),
    (("--set", "gpu-memory-utilization=1.5"), "--gpu-memory-utilization 1.5 is out of range: gpumem plans (0, 1]"),
    (("--set", "gpu-memory-utilization=0"), "--gpu-memory-utilization 0 is out of range"),
    (("--set", "max-num-seqs=0"), "--max-num-seqs 0 is out of range: gpumem plans 1..65536"),
    (("--set", "max-num-seqs=-4"), "--max-num-seqs -4 is out of range"),
    (("--set", "max-num-seqs=12.5"), "--max-num-seqs 12.5 is out of range"),
    (("--set", "max-model-len=65536"), "--max-model-len 65536 is out of range: gpumem plans 1..32768 "
                                       "(max_position_embeddings)"),
    (("--set", "max-num-batched-tokens=nan"), "--max-num-batched-tokens nan is out of range: gpumem plans 1..16777216"),
    (("--set", "enforce-eager=yes"), "--enforce-eager yes is out of range: gpumem plans true/false"),
    (("--replicas", "5000"), "--replicas 5000 is out of range: gpumem plans 1..1000"),
])
def test_a_value_out_of_its_range_is_refused_naming_flag_value_and_range(cluster, tmp_path, capsys, argv, words):
    store = tmp_path / "gpumem.db"
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, *argv)
    assert rc == 2 and words in text and "Traceback" not in text, text
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    assert Store.open(store).plans() == []


def test_a_value_in_range_still_plans_and_a_switch_takes_true(cluster, tmp_path, capsys):
    rc, plan = run_cli(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--set", "gpu-memory-utilization=1",
                       "--set", "enforce-eager=true", "--set", "max-model-len=32768", "--json")
    assert rc == 0 and {c["flag"]: c["new"] for c in plan["changes"]} == {
        "gpu-memory-utilization": 1.0, "enforce-eager": True, "max-model-len": 32768}


# ----------------------------------------------------------------------------- properties

_WORDS = st.sampled_from(["--a", "1", "--b=2", "x", "--c", "--d=4", "y", "7"])


@given(st.lists(_WORDS, max_size=10), st.lists(_WORDS, max_size=10))
def test_element_patches_turn_any_list_into_any_other_and_their_inverse_back(old, new):
    prefix = "/spec/template/spec/containers/0"
    doc = {"spec": {"template": {"spec": {"containers": [{"name": "c", "args": old}]}}}}
    ops = json_patch(prefix, {"name": "c", "args": old}, {"name": "c", "args": new})
    assert all(op["path"] != f"{prefix}/args" for op in ops) or old == [] or new == []
    forward = jsonpatch.apply_patch(doc, ops)  # an independent RFC 6902 implementation
    assert forward["spec"]["template"]["spec"]["containers"][0]["args"] == new
    back = jsonpatch.apply_patch(forward, inverse_ops(ops))
    assert back == doc


@given(st.lists(st.text(min_size=0, max_size=40), min_size=1, max_size=3))
def test_parse_set_refuses_or_returns_no_credential_flag(values):
    try:
        parsed = parse_set(values)
    except UsageError as e:
        assert e.code in ("bad_set", "secret_flag_not_plannable", "secret_value_not_plannable")
        return
    from runbooks.launch.argv import canonical_flag

    for flag, _ in parsed:
        assert not all(secret_name(s) for s in {flag, *(canonical_flag(e, flag) for e in ("vllm", "sglang", "tgi"))})


_ANY = st.one_of(st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                 st.text(max_size=60), st.integers(min_value=10**30, max_value=10**2000))


@given(st.sampled_from([(e, f) for e, flags in RANGES.items() for f in flags]), _ANY)
def test_a_checked_value_is_in_its_range_or_refused_naming_flag_value_and_range(engine_flag, value):
    engine, flag = engine_flag
    rng = RANGES[engine][flag]
    try:
        got = check_value(engine, flag, value)
    except UsageError as e:
        assert e.code == "flag_value_out_of_range" and e.params["flag"] == f"--{flag}"
        assert len(e.params["value"]) <= 60 and e.params["range"]
        return
    if rng.kind == "fraction":
        assert isinstance(got, float) and 0 < got <= 1
    elif rng.kind == "int":
        assert type(got) is int and (got in rng.special or rng.low <= got <= rng.high)


def test_a_removed_flag_comes_back_between_the_same_neighbours_or_not_at_all(cluster, tmp_path, capsys):
    from bot.actuator.writer import JSON_PATCH, KubeWriter

    _with_key(cluster, "split", SECRETS[0])
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--set", "gpu-memory-utilization=", "--json")
    assert rc == 0
    assert [op["op"] for op in plan["patch"]] == ["test", "remove", "test"], "the neighbour is tested after the gap"
    assert run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
    # someone puts a flag first: every element moves one place on
    path = plan["patch"][0]["path"].rsplit("/", 1)[0]
    KubeWriter(cluster.api("prod")).patch("Deployment", "llm", "vllm-server", [
        {"op": "add", "path": f"{path}/0", "value": "--disable-log-requests"}], JSON_PATCH)
    assert len(cluster.kube.writes(verb="patch")) == 2
    after_edit = _launch(cluster)
    rc, text = run_cli(capsys, cluster, store, "rollback", plan["id"], "--yes")
    assert rc == 2 and "the API server refused the change" in text and "Traceback" not in text, text
    assert len(cluster.kube.writes(verb="patch")) == 2, "no rollback write"
    assert _launch(cluster) == after_edit
    _no_secret(SECRETS[0], text)


@pytest.mark.parametrize(("engine", "flag", "value", "words"), [
    ("sglang", "mem-fraction-static", 1.5, "(0, 1]"),
    ("sglang", "context-length", 1e20, "1..32768 (max_position_embeddings)"),
    ("sglang", "max-prefill-tokens", 1e20, "1..16777216"),
    ("sglang", "max-running-requests", 70000, "1..65536"),
    ("tgi", "cuda-memory-fraction", 0, "(0, 1]"),
    ("tgi", "max-batch-size", "9" * 5000, "1..65536"),
    ("tgi", "max-input-tokens", 40000, "1..32768 (max_position_embeddings)"),
])
def test_sglang_and_tgi_values_out_of_range_are_refused_naming_the_range(engine, flag, value, words):
    with pytest.raises(UsageError) as e:
        check_value(engine, flag, value, max_length=32768)
    assert e.value.code == "flag_value_out_of_range" and e.value.params["range"] == words
    assert e.value.params["flag"] == f"--{flag}" and len(e.value.params["value"]) <= 60


def test_in_range_values_and_engine_specials_pass():
    assert check_value("sglang", "chunked-prefill-size", -1) == -1
    assert check_value("tgi", "cuda-memory-fraction", "0.9") == 0.9
    assert check_value("vllm", "max-model-len", 65536.0) == 65536
    assert check_value("vllm", "max-model-len", 131072, max_length=131072) == 131072


def test_five_thousand_digits_are_refused_as_typed_not_as_infinity(cluster, tmp_path, capsys):
    rc, text = run_cli(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--set", "max-num-seqs=" + "9" * 5000)
    assert rc == 2 and "(5000 characters) is out of range: gpumem plans 1..65536" in text and "inf" not in text
    assert cluster.kube.writes() == []


def test_a_pool_split_beside_a_key_shows_its_clone_masked(cluster, tmp_path, capsys):
    _with_key(cluster, "split", SECRETS[0])
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--threshold", "3000", "--json")
    assert rc == 0 and plan["patch_type"] != "application/json-patch+json"
    clone = plan["patch"][0]["value"]["spec"]["template"]["spec"]["containers"][0]
    assert "--api-key" in clone["args"] and "<redacted>" in clone["args"], "the flag is named, its value masked"
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--threshold", "3000")
    rc, listed = run_cli(capsys, cluster, store, "plans", "--all", "--json")
    _no_secret(SECRETS[0], plan, text, listed)


def test_a_rollback_refusal_never_quotes_a_credential_that_now_sits_where_gpumem_wrote(cluster, tmp_path, capsys):
    from bot.actuator.writer import JSON_PATCH, KubeWriter

    _with_key(cluster, "joined", SECRETS[0])
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    (path,) = [op["path"] for op in plan["patch"] if op["op"] == "replace"]
    assert run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
    KubeWriter(cluster.api("prod")).patch("Deployment", "llm", "vllm-server", [
        {"op": "add", "path": path, "value": "--hf-token=zzz-later-secret-1"}], JSON_PATCH)
    after_edit = _launch(cluster)
    rc, text = run_cli(capsys, cluster, store, "rollback", plan["id"], "--yes")
    assert rc == 2 and f"{path}: --max-num-seqs=128 / --max-num-seqs=64 / --hf-token=<redacted>" in text, text
    assert "zzz-later-secret-1" not in text and len(cluster.kube.writes(verb="patch")) == 2
    assert _launch(cluster) == after_edit
    _no_secret(SECRETS[0], text)
