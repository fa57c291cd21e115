"""`gpumem plan NS/DEPLOY --split-pools`: phase 1 creates `<name>-long` (exactly two objects, the
original byte for byte untouched), phase 2 is refused until phase 1 is applied and the routing
confirmed, then tightens the original with one patch; rollbacks in the right order, each
refusal with the number of writes the stand-in API server received."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path

import pytest
import yaml

from bot.main import main
from bot.store.db import Store
from collectors.parsers.flags import server_config_from_container
from tests.support.kube_fixtures import run_cli, running_scenario

TARGET = "llm/vllm-server"
DATA = Path(__file__).parent / "data"
PROFILE = str(Path(__file__).parent.parent / "examples" / "mixed-pool-vllm-v1" / "access.log")


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


_run = run_cli


def _container(obj: dict, name: str) -> dict:
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == name)


def _config(obj: dict, name: str):
    return server_config_from_container(_container(obj, name))


def _apply_phase1(capsys, sc, store, *extra: str) -> dict:
    rc, plan = _run(capsys, sc, store, "plan", TARGET, "--split-pools", *extra, "--json")
    assert rc == 0, plan
    rc, applied = _run(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
    assert (rc, applied["state"]) == (0, "applied"), applied
    return plan


def test_phase1_creates_exactly_two_objects_and_leaves_the_original_byte_identical(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    before = json.dumps(cluster.kube.get("Deployment", "llm", "vllm-server"), sort_keys=True)
    service_before = json.dumps(cluster.kube.get("Service", "llm", "vllm-server"), sort_keys=True)
    rc, plan = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--profile", PROFILE, "--json")
    assert rc == 0 and plan["action"] == "split_pools" and plan["state"] == "proposed"
    assert [c["diff"] for c in plan["changes"]] == ["create Deployment/vllm-server-long",
                                                     "create Service/vllm-server-long"]
    t = plan["split_pools"]
    assert (t["threshold"], t["long"]["max_model_len"], t["long"]["length_basis"]) == (2048, 27648, "p99")
    assert t["profile"]["p99_total_tokens"] == 27433
    assert 1 <= t["long"]["max_num_seqs"] < 128 and t["long"]["max_num_seqs"] == t["long"]["fits"]
    assert (t["short"]["max_model_len"], t["single"]["max_model_len"], t["single"]["max_num_seqs"]) == (4096, 8192, 128)
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []

    rc, applied = _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
    assert (rc, applied["state"]) == (0, "applied")
    creates = cluster.kube.writes()
    assert [(r.verb, r.resource, r.status) for r in creates] == [("create", "deployments", 201),
                                                                  ("create", "services", 201)]
    assert [r.resource for r in cluster.kube.dry_runs()] == ["deployments", "services"]
    assert json.dumps(cluster.kube.get("Deployment", "llm", "vllm-server"), sort_keys=True) == before
    assert json.dumps(cluster.kube.get("Service", "llm", "vllm-server"), sort_keys=True) == service_before

    long = cluster.kube.get("Deployment", "llm", "vllm-server-long")
    pod_labels = long["spec"]["template"]["metadata"]["labels"]
    assert pod_labels == {"app": "vllm-server-long", "track": "stable", "gpumem.io/pool": "long"}
    assert long["spec"]["replicas"] == 1
    assert long["metadata"]["annotations"]["gpumem.io/plan"] == plan["id"]
    original_selector = cluster.kube.get("Service", "llm", "vllm-server")["spec"]["selector"]
    assert any(pod_labels.get(k) != v for k, v in original_selector.items()), "the Services do not overlap"
    long_service = cluster.kube.get("Service", "llm", "vllm-server-long")
    assert long_service["spec"]["selector"] == {"app": "vllm-server-long", "gpumem.io/pool": "long"}
    assert [(p["port"], p["targetPort"]) for p in long_service["spec"]["ports"]] == [(80, "http")]
    assert long_service["spec"]["clusterIP"] != cluster.kube.get("Service", "llm", "vllm-server")["spec"].get(
        "clusterIP"), "allocated by the server, not copied"


def test_the_clone_reparses_with_the_new_flags_and_nothing_else_changed(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    original = copy.deepcopy(cluster.kube.get("Deployment", "llm", "vllm-server"))
    plan = _apply_phase1(capsys, cluster, store)
    long = cluster.kube.get("Deployment", "llm", "vllm-server-long")
    seqs = plan["split_pools"]["long"]["max_num_seqs"]
    before, after = _config(original, "vllm"), _config(long, "vllm")
    assert (after.max_model_len, after.max_num_seqs) == (8192, seqs), "no profile: today's length is kept"
    assert seqs < before.max_num_seqs
    fields = {f.name for f in dataclasses.fields(before)} - {"max_num_seqs", "flags", "source"}
    assert {f: getattr(after, f) for f in fields} == {f: getattr(before, f) for f in fields}
    assert {k: v for k, v in after.flags.items() if k != "max-num-seqs"} == \
        {k: v for k, v in before.flags.items() if k != "max-num-seqs"}
    # the rest of the spec is the original's: only replicas, the selector, the pod labels and the args differ
    from bot.render.remediation import masked_op

    sent = next(op["value"] for op in plan["patch"] if op["kind"] == "Deployment")
    assert "hf_live_secret_value" not in json.dumps(plan), "the clone is shown with its credentials masked"
    masked = masked_op({"op": "create", "value": original})["value"]
    spec, was = copy.deepcopy(sent["spec"]), copy.deepcopy(masked["spec"])
    for s in (spec, was):
        s.pop("replicas")
        s.pop("selector")
        s["template"]["metadata"].pop("labels")
        _container(s and {"spec": s}, "vllm").pop("args")
    assert spec == was
    old_args, new_args = _container(original, "vllm")["args"], _container(long, "vllm")["args"]
    assert [a for a in new_args if a not in old_args] == [f"--max-num-seqs={seqs}"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in long["metadata"].get("annotations", {})


def test_a_sh_c_launch_form_is_edited_inside_its_script(cluster, tmp_path, capsys):
    doc = yaml.safe_load((DATA / "kube" / "deployment-vllm-docs.yaml").read_text())
    doc["metadata"]["namespace"] = "llm"
    cluster.kube.add(doc, {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "mistral-7b", "namespace": "llm"},
                           "spec": {"selector": {"app": "mistral-7b"}, "ports": [{"port": 8000}]}})
    store = tmp_path / "gpumem.db"
    rc, text = _run(capsys, cluster, store, "plan", "llm/mistral-7b", "--split-pools")
    assert rc == 2 and "give --gpu NAME" in text and "Traceback" not in text
    rc, plan = _run(capsys, cluster, store, "plan", "llm/mistral-7b", "--split-pools", "--gpu", "A100-80GB", "--json")
    assert rc == 0
    rc, _ = _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
    assert rc == 0 and len(cluster.kube.writes(verb="create")) == 2
    long = cluster.kube.get("Deployment", "llm", "mistral-7b-long")
    c = _container(long, "mistral-7b")
    assert c["command"] == ["/bin/sh", "-c"] and len(c["args"]) == 1
    seqs = plan["split_pools"]["long"]["max_num_seqs"]
    assert c["args"][0] == ("vllm serve mistralai/Mistral-7B-Instruct-v0.3 --trust-remote-code "
                            f"--enable-chunked-prefill --max_num_batched_tokens 1024 --max_model_len 32768 "
                            f"--max_num_seqs {seqs}")
    config = server_config_from_container(c)
    assert (config.max_model_len, config.max_num_seqs, config.max_num_batched_tokens) == (32768, seqs, 1024)
    assert 1 <= seqs <= 16, "few sequences of a 32K context fit one A100 80GB"
    assert c["env"] == _container(doc, "mistral-7b")["env"], "the secret reference is cloned, not resolved"


def test_an_existing_long_pool_refuses_with_zero_writes(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    rc, plan = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    assert rc == 0
    cluster.kube.add({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "vllm-server-long", "namespace": "llm"},
                      "spec": {"selector": {"app": "other"}, "ports": [{"port": 80}]}})
    rc, text = _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 2 and "Service/vllm-server-long exists already in namespace llm" in text
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    assert Store.open(store).get(plan["id"]).state == "failed"
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--split-pools")
    assert rc == 2 and "exists already" in text and cluster.kube.writes() == []


def test_phase2_is_refused_before_phase1_is_applied_and_without_the_routing_confirmed(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--phase", "2", "--routing-confirmed")
    assert rc == 2 and "phase 2 needs the long pool first" in text and "is none" in text
    _, plan = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--phase", "2", "--routing-confirmed")
    assert rc == 2 and f"is proposed ({plan['id']})" in text
    assert _run(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--phase", "2")
    assert rc == 2 and "prompts over 2048 tokens to Service llm/vllm-server-long" in text
    assert "--routing-confirmed" in text and "Traceback" not in text
    assert len(cluster.kube.writes()) == 2, "only phase 1's two creates"
    assert [p.plan.id for p in Store.open(store).plans()] == [plan["id"]], "no phase-2 plan was stored"


def test_phase2_applies_one_patch_and_the_rollbacks_go_in_order(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    first = _apply_phase1(capsys, cluster, store)
    rc, second = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--phase", "2", "--routing-confirmed",
                      "--json")
    assert rc == 0 and second["split_pools"]["phase"] == 2
    assert [c["diff"] for c in second["changes"]][:1] == ["--max-model-len 8192 -> 3072"]
    assert second["changes"][-1]["new"].endswith("prompt tokens > 2048 -> Service/vllm-server-long")
    db = Store.open(store)
    confirmed = [r for r in db.audit() if r.event == "routing_confirmed"]
    assert [(r.actor.startswith("cli:"), r.plan_id, r.detail["phase1"]) for r in confirmed] == \
        [(True, second["id"], first["id"])]
    db.close()
    rc, applied = _run(capsys, cluster, store, "apply", second["id"], "--yes", "--no-watch", "--json")
    assert (rc, applied["state"]) == (0, "applied")
    assert len(cluster.kube.writes(verb="patch")) == 1 and len(cluster.kube.writes()) == 3
    assert _config(cluster.kube.get("Deployment", "llm", "vllm-server"), "vllm").max_model_len == 3072

    rc, text = _run(capsys, cluster, store, "rollback", first["id"], "--yes")
    assert rc == 2 and f"plan {second['id']} (phase 2, applied) still tightens" in text
    assert cluster.kube.writes(verb="delete") == [] and cluster.kube.dry_runs(verb="delete") == []

    rc, back = _run(capsys, cluster, store, "rollback", second["id"], "--yes", "--json")
    assert (rc, back["state"]) == (0, "rolled_back")
    restored = _config(cluster.kube.get("Deployment", "llm", "vllm-server"), "vllm")
    assert (restored.max_model_len, restored.max_num_seqs) == (8192, 128), "the single pool's flags"

    rc, back = _run(capsys, cluster, store, "rollback", first["id"], "--yes", "--json")
    assert (rc, back["state"]) == (0, "rolled_back")
    assert [(r.resource, r.status) for r in cluster.kube.writes(verb="delete")] == [("services", 200),
                                                                                     ("deployments", 200)]
    assert cluster.kube.get("Deployment", "llm", "vllm-server-long") is None
    assert cluster.kube.get("Service", "llm", "vllm-server-long") is None
    assert cluster.kube.get("Deployment", "llm", "vllm-server") is not None

    assert main(["plans", "--all", "--store", str(store), "--lang", "en"]) == 0
    listed = capsys.readouterr().out
    for p in (first, second):
        assert f"{p['id']:<14} rolled back llm/vllm-server" in listed
    assert "create Deployment/vllm-server-long; create Service/vllm-server-long" in listed


def test_a_phase1_rollback_refuses_when_someone_changed_the_long_pool(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    first = _apply_phase1(capsys, cluster, store)
    other = tmp_path / "other.db"
    rc, theirs = _run(capsys, cluster, other, "plan", "llm/vllm-server-long", "--replicas", "3", "--json")
    assert rc == 0
    assert _run(capsys, cluster, other, "apply", theirs["id"], "--yes", "--no-watch")[0] == 0
    rc, text = _run(capsys, cluster, store, "rollback", first["id"], "--yes")
    assert rc == 2 and "nothing was deleted" in text
    assert "'path': '/spec/replicas', 'gpumem': 1, 'now': 3" in text
    assert cluster.kube.writes(verb="delete") == [] and cluster.kube.dry_runs(verb="delete") == []
    assert cluster.kube.get("Deployment", "llm", "vllm-server-long")["spec"]["replicas"] == 3
    assert Store.open(store).get(first["id"]).state == "applied"


@pytest.mark.parametrize(("argv", "words"), [
    (("--threshold", "4000"), "--threshold belongs to a pool split; add --split-pools"),
    (("--split-pools", "--set", "max-num-seqs=64"), "leave out --set, --replicas and --action"),
    (("--split-pools", "--threshold", "9000"), "gives a short pool of 10,240 tokens, not below today's 8192"),
    (("--split-pools", "--routing-confirmed"), "--routing-confirmed belongs to phase 2"),
    (("--split-pools", "--phase", "2", "--profile", "x.log"), "--profile sizes phase 1"),
    (("--split-pools", "--service", "vllm-server-canary"), "does not select the pods of Deployment vllm-server"),
    (("--split-pools", "--service", "nope"), "no Service llm/nope to clone"),
    (("--split-pools", "--profile", "/nonexistent/access.log"), "--profile /nonexistent/access.log: no such file"),
])
def test_bad_split_input_is_one_line_and_exit_2(cluster, tmp_path, capsys, argv, words):
    rc, text = _run(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, *argv)
    assert rc == 2 and words in text and "Traceback" not in text
    assert cluster.kube.writes() == []


def test_a_phase_out_of_range_is_refused_by_the_grammar(cluster, tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        _run(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--split-pools", "--phase", "3")
    assert stop.value.code == 2 and "argument --phase: must be between 1 and 2" in capsys.readouterr().err
    assert cluster.kube.calls() == []


def test_the_plan_text_fills_both_runbook_templates(cluster, tmp_path, capsys):
    rc, text = _run(capsys, cluster, tmp_path / "gpumem.db", "plan", TARGET, "--split-pools", "--threshold", "3000")
    assert rc == 0
    for line in ("short pool service: llm/vllm-server (Deployment vllm-server, 2 replicas)",
                 "long pool service: llm/vllm-server-long (Deployment vllm-server-long, 1 replica)",
                 "routing rule: requests with more than 3000 prompt tokens -> Service vllm-server-long:80; "
                 "all others -> Service vllm-server:80",
                 "max-model-len per pool: short 4096",
                 "GPU quota per pool: short 2 x 1 nvidia.com/gpu = 2, long 1 x 1 = 1",
                 "current long pool service: llm/vllm-server-long",
                 "the single pool's flags after rollback: --max-model-len=8192 --max-num-seqs=128 on vllm-server",
                 "watch window: 10 minutes",
                 "not cloned: an HPA scaling vllm-server does not scale vllm-server-long"):
        assert line in text, line
    assert "hf_live_secret_value" not in text, "the clone's env is not printed"


def test_the_pools_size_on_the_engines_own_pool_when_the_last_triage_read_it(cluster, tmp_path, capsys,
                                                                             monkeypatch):
    # the budget's own pools first, with no triage recorded
    rc, computed = _run(capsys, cluster, tmp_path / "none.db", "plan", TARGET, "--split-pools", "--profile", PROFILE,
                        "--json")
    assert rc == 0 and computed["split_pools"]["kv_pool_basis"] == "budget"
    # a live triage, recorded: vLLM printed 1,108,880 tokens where the budget computes 1,120,992
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    store = tmp_path / "gpumem" / "gpumem.db"
    store.parent.mkdir()
    Store.open(store).close()
    assert main(["triage", TARGET, "--json", "--kubeconfig", str(cluster.kubeconfig), "--context", "prod"]) == 1
    capsys.readouterr()
    rc, anchored = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--profile", PROFILE, "--json")
    assert rc == 0
    t, c = anchored["split_pools"], computed["split_pools"]
    assert t["kv_pool_basis"] == "engine_anchored"
    for pool in ("long", "short"):
        assert t[pool]["kv_tokens"] == c[pool]["kv_tokens"] + 1108880 - 1120992, pool
    assert t["long"]["max_num_seqs"] <= c["long"]["max_num_seqs"]
    rc, text = _run(capsys, cluster, store, "plan", TARGET, "--split-pools", "--profile", PROFILE)
    assert "KV tokens of the engine's own pool, as the last triage read it" in text
    assert cluster.kube.writes() == []
