"""A plan's preview against the stand-in API server: the predicted budget before and after (the
same figures as `gpumem budget --from-deployment ... --what-if ...`), the blast radius (pods that
restart, GPUs the rollout needs against the spare GPUs on the nodes that fit, a rollout that
would be stuck), and what is missing when the model is unknown."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
import yaml

from bot.main import main
from bot.render.remediation import plan_json, plan_text
from bot.store.db import Store
from tests.support.kube_fixtures import INCIDENT_POD_A, INCIDENT_POD_B, running_scenario

TARGET = "llm/vllm-server"
FIGURES = ("kv_cache_tokens", "max_concurrency", "headroom_gib", "max_num_seqs", "max_model_len", "fits")


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _run(capsys, sc, tmp_path, *argv: str, lang: str = "en") -> tuple[int, dict | str]:
    rc = main([*argv, "--kubeconfig", str(sc.kubeconfig), "--context", "prod", "--store",
               str(tmp_path / "gpumem.db"), "--lang", lang])
    out = capsys.readouterr()
    try:
        return rc, json.loads(out.out)
    except ValueError:
        return rc, out.out + out.err


def _budget_what_if(capsys, tmp_path, obj: dict, what_if: str) -> dict:
    """`gpumem budget --from-deployment` on the live object, with `--what-if`."""
    path = tmp_path / "deployment.yaml"
    path.write_text(yaml.safe_dump(obj), encoding="utf-8")
    assert main(["budget", "--from-deployment", str(path), "--what-if", what_if, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def _gpu_pod(name: str, node: str, gpus: int, namespace: str = "research") -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace},
            "spec": {"nodeName": node, "containers": [{"name": "train", "image": "pytorch/pytorch:2.4",
                                                        "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}]},
            "status": {"phase": "Running"}}


def _edit_deployment(sc, change) -> None:
    obj = sc.kube.get("Deployment", "llm", "vllm-server")
    for key in ("resourceVersion", "uid", "creationTimestamp"):
        obj["metadata"].pop(key, None)
    change(obj)
    sc.kube.add(obj)


# ----------------------------------------------------------------------------- a flag change


def test_a_flag_change_predicts_what_gpumem_budget_predicts_and_restarts_every_pod(cluster, tmp_path, capsys):
    live = cluster.kube.get("Deployment", "llm", "vllm-server")
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64",
                    "--set", "gpu-memory-utilization=0.9", "--json")
    assert rc == 0
    budget = plan["preview"]["budget"]
    expected = _budget_what_if(capsys, tmp_path, live, "max-num-seqs=64,gpu-memory-utilization=0.9")
    for side in ("before", "after"):
        assert {k: budget[side][k] for k in FIGURES} == {k: expected[side][k] for k in FIGURES}, side
    # and the figures themselves: less memory for the engine, fewer KV tokens, more headroom
    assert (budget["before"]["kv_cache_tokens"], budget["after"]["kv_cache_tokens"]) == (1120992, 1046896)
    assert (budget["before"]["max_num_seqs"], budget["after"]["max_num_seqs"]) == (128, 64)
    assert budget["after"]["headroom_gib"] > budget["before"]["headroom_gib"] + 3.9
    assert (budget["model"], budget["gpu"], budget["engine"]) == ("Qwen/Qwen2.5-7B-Instruct", "A100-SXM4-80GB",
                                                                  "vllm")
    # requests at once: min(--max-num-seqs, what the cache holds at 8192), whole requests; halving
    # max-num-seqs halves it, per pod and across the 2 pods
    assert budget["before"]["max_concurrency"] == pytest.approx(136.8398)
    assert (budget["before"]["kv_requests"], budget["before"]["concurrency"],
            budget["before"]["concurrency_limit"]) == (136, 128, "max_num_seqs")
    assert (budget["after"]["concurrency"], budget["after"]["concurrency_limit"]) == (64, "max_num_seqs")
    assert (budget["service_max_concurrency_before"], budget["service_max_concurrency_after"]) == (256, 128)
    assert budget["missing"] == [] and budget["computed"] is True
    assert "tgi_kv_optimistic_preview" not in {n["id"] for n in budget["notes"]}
    blast = plan["preview"]["blast_radius"]
    assert blast["template_changed"] is True
    assert blast["restart_pods"] == [INCIDENT_POD_A, INCIDENT_POD_B]
    assert (blast["strategy"], blast["max_surge"], blast["max_unavailable"]) == ("RollingUpdate", 1, 0)
    assert (blast["extra_pods"], blast["gpus_per_pod"], blast["gpus_needed"]) == (1, 1, 1)
    # gpu-node-03: 8 GPUs, one vLLM pod; gpu-node-05: 6, one vLLM pod and the canary (the
    # finished fine-tune holds none, the MIG slice is another resource)
    assert blast["nodes"] == [{"name": "gpu-node-03", "allocatable": 8, "requested": 1, "spare": 7},
                              {"name": "gpu-node-05", "allocatable": 6, "requested": 2, "spare": 4}]
    assert (blast["spare_gpus"], blast["outcome"], blast["stuck"]) == (11, "fits", False)
    assert cluster.kube.writes() == []


def test_the_plan_text_shows_the_budget_and_the_blast_radius(cluster, tmp_path, capsys):
    rc, text = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64")
    assert rc == 0
    for words in ("Predicted budget per pod (Qwen/Qwen2.5-7B-Instruct on A100-SXM4-80GB, vllm",
                  "KV cache tokens 1,120,992 -> 1,120,992", "headroom 3.30 GiB -> 3.35 GiB",
                  "max-num-seqs 128 -> 64", "requests at once per pod 128 -> 64 (after: capped by --max-num-seqs 64; "
                  "the KV cache holds 136 requests of 8192 tokens)",
                  "requests at once across the service 256 -> 128 (2 -> 2 pods)", "Blast radius:",
                  f"restarts all 2 pods (rolling update, maxSurge 1, maxUnavailable 0): {INCIDENT_POD_A}, "
                  f"{INCIDENT_POD_B}",
                  "GPUs at once: 1 extra pod x 1 nvidia.com/gpu = 1; spare on the 2 nodes that fit: 11",
                  "fits: the spare GPUs hold every extra pod at once"):
        assert words in text, words
    rc, zh = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", lang="zh")
    assert rc == 0 and "影响范围：" in zh and "全部 2 个 pod 会重启" in zh


# ----------------------------------------------------------------------------- a replica change


def test_a_replica_change_restarts_nothing_and_scales_the_service_total(cluster, tmp_path, capsys):
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--replicas", "4", "--json")
    assert rc == 0
    budget = plan["preview"]["budget"]
    assert budget["before"] == budget["after"]  # per pod, nothing changes
    assert (budget["replicas_before"], budget["replicas_after"]) == (2, 4)
    per_pod = budget["before"]["max_concurrency"]
    assert per_pod == pytest.approx(136.8398)
    # whole requests, capped by --max-num-seqs 128 per pod: 2 x 128 -> 4 x 128, never 2 x 136.84
    assert budget["before"]["concurrency"] == 128
    assert (budget["service_max_concurrency_before"], budget["service_max_concurrency_after"]) == (256, 512)
    blast = plan["preview"]["blast_radius"]
    assert (blast["template_changed"], blast["restart_pods"]) == (False, [])
    assert (blast["pods_added"], blast["pods_removed"], blast["extra_pods"], blast["gpus_needed"]) == (2, 0, 2, 2)
    assert blast["outcome"] == "fits"
    rc, text = _run(capsys, cluster, tmp_path, "plan", TARGET, "--replicas", "1")
    assert "restarts no pod" in text and "removes 1 pod (2 -> 1)" in text
    assert "no extra GPU needed" in text


def test_a_scale_up_beyond_the_spare_gpus_leaves_pods_pending(cluster, tmp_path, capsys):
    cluster.kube.add(_gpu_pod("batch-a", "gpu-node-03", 6), _gpu_pod("batch-b", "gpu-node-05", 4))
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--replicas", "4", "--json")
    blast = plan["preview"]["blast_radius"]
    assert (blast["spare_gpus"], blast["placeable_pods"], blast["outcome"]) == (1, 1, "pending")
    rc, text = _run(capsys, cluster, tmp_path, "plan", TARGET, "--replicas", "4")
    assert rc == 0
    assert "!! PODS LEFT PENDING: 1 of the 2 new pods find no node with 1 free nvidia.com/gpu" in text
    assert "Fix: free 1 nvidia.com/gpu on a node that fits, or ask for fewer replicas." in text


# ----------------------------------------------------------------------------- stuck, or not


def test_a_rollout_with_no_spare_gpu_and_max_unavailable_0_is_stuck_and_says_how_to_fix_it(cluster, tmp_path,
                                                                                            capsys):
    cluster.kube.add(_gpu_pod("batch-a", "gpu-node-03", 7), _gpu_pod("batch-b", "gpu-node-05", 4))
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0 and cluster.kube.writes() == []
    blast = plan["preview"]["blast_radius"]
    assert (blast["spare_gpus"], blast["placeable_pods"], blast["gpus_needed"]) == (0, 0, 1)
    assert (blast["outcome"], blast["stuck"], blast["blocking"]) == ("stuck", True, True)
    rc, text = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64")
    assert ("!! ROLLOUT WOULD BE STUCK: its next new pod needs 1 free nvidia.com/gpu on one node, the nodes that "
            "fit have 0 spare, and maxUnavailable is 0") in text
    assert ("Fix: set maxUnavailable to 1 (one pod fewer serves during the rollout), or free 1 nvidia.com/gpu on a "
            "node that fits (gpu-node-03, gpu-node-05).") in text


def test_one_spare_gpu_on_a_node_that_fits_is_enough(cluster, tmp_path, capsys):
    cluster.kube.add(_gpu_pod("batch-a", "gpu-node-03", 6), _gpu_pod("batch-b", "gpu-node-05", 4))
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0
    blast = plan["preview"]["blast_radius"]
    assert [n["spare"] for n in blast["nodes"]] == [1, 0]
    assert (blast["spare_gpus"], blast["outcome"]) == (1, "fits")


def test_spare_gpus_on_a_node_the_selector_rules_out_do_not_count(cluster, tmp_path, capsys):
    # gpu-node-05 loses its product label: the Deployment's nodeSelector no longer fits it
    node = cluster.kube.get("Node", None, "gpu-node-05")
    del node["metadata"]["labels"]["nvidia.com/gpu.product"]
    node["metadata"].pop("resourceVersion")
    cluster.kube.add(node)
    cluster.kube.add(_gpu_pod("batch-a", "gpu-node-03", 7))
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0
    blast = plan["preview"]["blast_radius"]
    assert [n["name"] for n in blast["nodes"]] == ["gpu-node-03"] and blast["nodes_ruled_out"] == 1
    assert (blast["spare_gpus"], blast["outcome"]) == (0, "stuck")


def test_max_unavailable_1_lets_it_go_on_one_pod_down(cluster, tmp_path, capsys):
    cluster.kube.add(_gpu_pod("batch-a", "gpu-node-03", 7), _gpu_pod("batch-b", "gpu-node-05", 4))
    _edit_deployment(cluster, lambda d: d["spec"]["strategy"]["rollingUpdate"].update(maxUnavailable=1))
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0
    assert plan["preview"]["blast_radius"]["outcome"] == "unavailable"


# ----------------------------------------------------------------------------- what is missing


def test_an_unknown_model_says_what_is_missing_and_the_blast_radius_still_shows(cluster, tmp_path, capsys):
    def rename(d):
        args = d["spec"]["template"]["spec"]["containers"][0]["args"]
        args[:2] = ["--model=acme/mystery-llm-13b"]

    _edit_deployment(cluster, rename)
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0
    budget = plan["preview"]["budget"]
    assert (budget["computed"], budget["before"], budget["after"]) == (False, None, None)
    (missing,) = budget["missing"]
    assert (missing["what"], missing["code"], missing["name"]) == ("model", "unknown_model", "acme/mystery-llm-13b")
    assert plan["preview"]["blast_radius"]["outcome"] == "fits"
    rc, text = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64")
    assert "Predicted budget: not computed:" in text
    assert "missing: the model's architecture: acme/mystery-llm-13b is not in gpumem's model catalog" in text


def test_a_gpu_the_deployment_does_not_pin_comes_from_the_nodes_its_pods_run_on(cluster, tmp_path, capsys):
    _edit_deployment(cluster, lambda d: d["spec"]["template"]["spec"].pop("nodeSelector"))
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    budget = plan["preview"]["budget"]
    assert budget["gpu"] == "A100-SXM4-80GB" and budget["before"]["kv_cache_tokens"] == 1120992
    assert {"id": "gpu_from_nodes", "params": {"gpu": "NVIDIA-A100-SXM4-80GB"}} in budget["notes"]
    # without the label on the nodes either, the GPU is missing, and said so
    for name in ("gpu-node-03", "gpu-node-05"):
        node = cluster.kube.get("Node", None, name)
        del node["metadata"]["labels"]["nvidia.com/gpu.product"]
        node["metadata"].pop("resourceVersion")
        cluster.kube.add(node)
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0
    assert [(m["what"], m["code"]) for m in plan["preview"]["budget"]["missing"]] == [("gpu", "no_gpu")]


# ----------------------------------------------------------------------------- stored with the plan


def test_the_preview_is_stored_with_the_plan_outside_its_hash_and_old_plans_still_load(cluster, tmp_path, capsys):
    rc, plan = _run(capsys, cluster, tmp_path, "plan", TARGET, "--set", "max-num-seqs=64", "--json")
    assert rc == 0
    store = Store.open(str(tmp_path / "gpumem.db"))
    stored = store.get(plan["id"])
    assert plan_json(stored)["preview"] == plan["preview"]
    assert stored.plan.preview is not None and stored.plan.preview.blast.outcome == "fits"
    store.close()
    # a plan stored before previews existed: its body has no "preview"
    with sqlite3.connect(tmp_path / "gpumem.db") as db:
        body = json.loads(db.execute("SELECT body FROM plans WHERE id = ?", (plan["id"],)).fetchone()[0])
        del body["preview"]
        db.execute("UPDATE plans SET body = ? WHERE id = ?", (json.dumps(body), plan["id"]))
    store = Store.open(str(tmp_path / "gpumem.db"))
    old = store.get(plan["id"])
    assert old.plan.preview is None and old.plan.content_hash == plan["content_hash"]
    assert plan_json(old)["preview"] is None
    assert "Blast radius" not in plan_text(old, "en") and "--max-num-seqs 128 -> 64" in plan_text(old, "en")
    store.close()


# ----------------------------------------------------------------------------- in Slack


def test_the_slack_plan_message_carries_the_preview_read_with_the_reader_identity(tmp_path):
    from tests.support.slack_kit import CHANNEL
    from tests.test_slack_remediation import _diagnosis, _plan, remediation_bot

    with remediation_bot(tmp_path) as (sc, fake, bot):
        desk = bot.handlers.remediation
        asked = []
        default = desk.reader_for  # the desk's own: the configured cluster's reader, made once

        def reader(cluster):
            asked.append(cluster)
            return default(cluster)

        desk.reader_for = reader
        ts, diagnosis = _diagnosis(bot, fake)
        before = len(sc.kube.calls())
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        blocks = json.dumps(fake.messages[(CHANNEL, plan_ts)]["blocks"], ensure_ascii=False)
        reads = [r for r in sc.kube.calls()[before:] if r.verb == "list"]
    assert asked == ["prod"]
    assert sorted((r.resource, r.namespace) for r in reads) == [("nodes", None), ("pods", None)]
    assert "Predicted budget per pod (Qwen/Qwen2.5-7B-Instruct on A100-SXM4-80GB, vllm" in blocks
    assert "max-model-len 8192 -&gt; 4096 (in effect)" in blocks
    assert f"restarts all 2 pods (rolling update, maxSurge 1, maxUnavailable 0): {INCIDENT_POD_A}" in blocks
    store = Store.open(str(tmp_path / "gpumem.db"))
    assert store.get(plan_id).plan.preview.blast.outcome == "fits"
    store.close()


# ----------------------------------------------------------------------------- TGI


def test_tgi_flags_are_budgeted_as_gpumem_budget_does_and_its_full_nodes_would_stick_the_rollout(tmp_path, capsys):
    """support-bot/mistral-7b-tgi: no GPU pinned (its nodes say A10G), maxSurge 100% and
    maxUnavailable 25% of 2 replicas (2 and 0 pods) on two one-GPU nodes that are full."""
    with running_scenario("tgi-probes", tmp_path) as sc:
        live = sc.kube.get("Deployment", "support-bot", "mistral-7b-tgi")
        rc, plan = _run(capsys, sc, tmp_path, "plan", "support-bot/mistral-7b-tgi", "--set",
                        "cuda-memory-fraction=0.75", "--json")
        assert rc == 0
        # what the approver reads: the plan says, in words, that TGI would refuse to start
        rc, text = _run(capsys, sc, tmp_path, "plan", "support-bot/mistral-7b-tgi", "--set",
                        "cuda-memory-fraction=0.75")
        assert rc == 0
        assert "AFTER THE CHANGE THE ENGINE WOULD NOT START" in text, text
        assert "Not enough memory to handle 8315 prefill tokens" in text, text
        path = tmp_path / "tgi.yaml"
        path.write_text(yaml.safe_dump(live), encoding="utf-8")
        # exit 1: on the "after" side TGI would refuse to start (below)
        assert main(["budget", "--from-deployment", str(path), "--gpu", "NVIDIA-A10G", "--what-if",
                     "cuda-memory-fraction=0.75", "--json"]) == 1
        expected = json.loads(capsys.readouterr().out)
    budget = plan["preview"]["budget"]
    for side in ("before", "after"):
        assert {k: budget[side][k] for k in FIGURES} == {k: expected[side][k] for k in FIGURES}, side
    # TGI 3.3.4's launcher makes the prefill batch 8,315 tokens on an A10G (125 TFLOP/s over 15.03
    # GFLOP a token); its warm-up requests of 7,168 and 1,147 tokens each hold blocks for 8,191
    # (the router asks for max_total - prompt new tokens), 2.0 GiB. With 0.75 torch may use 16.55
    # GiB, less than the weights (13.50), those blocks and the forward pass (1.08, FlashInfer's
    # 0.15 of workspaces beside it): the warm-up itself fails, as the plan's text says (above)
    assert (budget["before"]["kv_cache_tokens"], budget["after"]["kv_cache_tokens"]) == (39070, 16382)
    assert (budget["before"]["fits"], budget["after"]["fits"], budget["after"]["max_model_len"]) == (True, False, 8192)
    assert budget["after"]["failure_id"] == "tgi_prefill_oom"
    assert {"id": "gpu_from_nodes", "params": {"gpu": "NVIDIA-A10G"}} in budget["notes"]
    # TGI 3.3.4's start-ups printed less cache than the budget computes: the approver is told so
    assert {"id": "tgi_kv_optimistic_preview", "params": {"version": "3.3.4"}} in budget["notes"]
    assert "the KV figures are computed by gpumem, and every start-up of TGI 2.1 or newer" in text
    blast = plan["preview"]["blast_radius"]
    assert (blast["max_surge"], blast["max_unavailable"], blast["extra_pods"]) == (2, 0, 2)
    assert (blast["spare_gpus"], blast["outcome"]) == (0, "stuck")


# ------------------------------------------------------------------ the engine's own pool


def _triaged(cluster, tmp_path, monkeypatch, capsys) -> Path:
    """A live triage of the incident, recorded in the store `gpumem plan` then reads."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    db = tmp_path / "gpumem" / "gpumem.db"
    db.parent.mkdir()
    Store.open(db).close()
    assert main(["triage", TARGET, "--json", "--kubeconfig", str(cluster.kubeconfig), "--context", "prod"]) == 1
    report = json.loads(capsys.readouterr().out)
    # vLLM printed 1,108,880 tokens where the budget computes 1,120,992 for the same flags
    assert (report["memory"]["kv_cache_tokens"], report["memory"]["kv_tokens_measured"]) == (1108880, True)
    return db


def test_the_preview_sizes_on_the_pool_the_last_triage_read_from_the_engine(cluster, tmp_path, monkeypatch,
                                                                           capsys):
    _triaged(cluster, tmp_path, monkeypatch, capsys)
    rc, plan = _run(capsys, cluster, tmp_path / "gpumem", "plan", TARGET, "--set", "gpu-memory-utilization=0.9",
                    "--json")
    assert rc == 0
    budget = plan["preview"]["budget"]
    # before: the engine's own pool; after: it plus what gpumem computes the change does
    # (1,120,992 -> 1,046,896 computed, as in the test above)
    assert (budget["before"]["kv_cache_tokens"], budget["after"]["kv_cache_tokens"]) == (
        1108880, 1046896 + 1108880 - 1120992)
    assert budget["before"]["max_concurrency"] == pytest.approx(1108880 / 8192, abs=1e-4)
    (note,) = [n for n in budget["notes"] if n["id"] == "kv_from_triage"]
    assert (note["params"]["tokens"], note["params"]["computed"]) == ("1,108,880", "1,120,992")
    rc, text = _run(capsys, cluster, tmp_path / "gpumem", "plan", TARGET, "--set", "gpu-memory-utilization=0.9")
    assert "KV cache tokens 1,108,880 -> 1,034,784" in text, text
    assert "the 1,108,880 the engine reported in the triage of " in text
    assert cluster.kube.writes() == []


def test_a_pool_read_under_other_flags_does_not_size_the_preview(cluster, tmp_path, monkeypatch, capsys):
    _triaged(cluster, tmp_path, monkeypatch, capsys)

    def lower_length(obj):  # the object changed after the triage: its pool was another launch's
        container = obj["spec"]["template"]["spec"]["containers"][0]
        key = "args" if any("--max-model-len" in a for a in container.get("args") or []) else "command"
        container[key] = [a.replace("--max-model-len=8192", "--max-model-len=4096") for a in container[key]]
        assert "--max-model-len=4096" in container[key]

    _edit_deployment(cluster, lower_length)
    rc, plan = _run(capsys, cluster, tmp_path / "gpumem", "plan", TARGET, "--set", "gpu-memory-utilization=0.9",
                    "--json")
    assert rc == 0
    budget = plan["preview"]["budget"]
    assert "kv_from_triage" not in {n["id"] for n in budget["notes"]}
    assert budget["before"]["kv_cache_tokens"] != 1108880
