"""The plan preview of an InferenceService or LeaderWorkerSet plan, against the stand-in API
server: the budget from the flags the owner's spec declares (the reader triage and `gpumem
budget --from-deployment` use: the same figures), the blast radius over the pods its controller
runs (a LeaderWorkerSet's groups counted in pods: leader and workers, each on its own node)."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from bot.main import main
from tests.support.kube_fixtures import run_cli, running_scenario
from tests.test_crd_schemas import CONTAINER, ISVC_CONTAINERS, LWS

FIGURES = ("kv_cache_tokens", "max_concurrency", "headroom_gib", "max_num_seqs", "fits")
MODEL_ARGS = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-num-seqs", "128"]
PRODUCT = {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}


@pytest.fixture
def sc(tmp_path):
    with running_scenario(None, tmp_path) as scenario:
        yield scenario


def _node(name: str, gpus: int) -> dict:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": dict(PRODUCT)},
            "status": {"allocatable": {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi"}}}


def _pod(name: str, node: str, labels: dict, gpus: int = 1) -> dict:
    container = {**copy.deepcopy(CONTAINER), "args": list(MODEL_ARGS),
                 "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "llm", "labels": labels},
            "spec": {"nodeName": node, "containers": [container]}, "status": {"phase": "Running"}}


def _isvc(min_replicas: int = 2) -> dict:
    isvc = copy.deepcopy(ISVC_CONTAINERS)
    isvc["spec"]["predictor"]["minReplicas"] = min_replicas
    container = isvc["spec"]["predictor"]["containers"][0]
    container["args"] = list(MODEL_ARGS)
    isvc["spec"]["predictor"]["nodeSelector"] = dict(PRODUCT)
    return isvc


def _lws(groups: int = 2, size: int = 2) -> dict:
    lws = copy.deepcopy(LWS)
    lws["spec"]["replicas"] = groups
    lwt = lws["spec"]["leaderWorkerTemplate"]
    lwt["size"] = size
    for role in ("leaderTemplate", "workerTemplate"):
        spec = lwt[role]["spec"]
        # pipeline parallel across the group's pods, on Ray (as vLLM runs multi-node)
        spec["containers"][0]["args"] = [*MODEL_ARGS, "--tensor-parallel-size", "1", "--pipeline-parallel-size",
                                         str(size), "--distributed-executor-backend", "ray"]
        spec["nodeSelector"] = dict(PRODUCT)
    return lws


def _budget_what_if(capsys, tmp_path, obj: dict, what_if: str) -> dict:
    path = tmp_path / "owner.yaml"
    path.write_text(yaml.safe_dump(obj), encoding="utf-8")
    assert main(["budget", "--from-deployment", str(path), "--what-if", what_if, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_an_inference_service_plan_predicts_the_budget_of_its_flags_and_restarts_its_pods(sc, tmp_path, capsys):
    isvc = _isvc()
    sc.kube.add(isvc, _node("gpu-a", 2), _node("gpu-b", 2),
                _pod("llama-predictor-1", "gpu-a", {"serving.kserve.io/inferenceservice": "llama"}),
                _pod("llama-predictor-2", "gpu-a", {"serving.kserve.io/inferenceservice": "llama"}),
                _pod("other", "gpu-b", {"app": "other"}))
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/isvc/llama", "--set", "max-num-seqs=64", "--json")
    assert rc == 0, p
    preview = p["preview"]
    budget = preview["budget"]
    expected = _budget_what_if(capsys, tmp_path, isvc, "max-num-seqs=64")
    for side in ("before", "after"):
        assert {k: budget[side][k] for k in FIGURES} == {k: expected[side][k] for k in FIGURES}, side
    assert (budget["before"]["max_num_seqs"], budget["after"]["max_num_seqs"]) == (128, 64)
    assert (budget["replicas_before"], budget["replicas_after"]) == (2, 2)
    blast = preview["blast_radius"]
    # the two pods KServe runs restart; a Deployment's 25% surge of 2 is one extra pod of 1 GPU,
    # and gpu-b has one spare GPU (gpu-a's two are KServe's, the other pod has one of gpu-b's)
    assert blast["restart_pods"] == ["llama-predictor-1", "llama-predictor-2"]
    assert (blast["strategy"], blast["max_surge"], blast["extra_pods"], blast["gpus_needed"]) == (
        "RollingUpdate", 1, 1, 1)
    assert (blast["spare_gpus"], blast["outcome"]) == (1, "fits")
    assert sc.kube.writes() == []
    rc, text = run_cli(capsys, sc, tmp_path / "text.db", "plan", "llm/isvc/llama", "--set", "max-num-seqs=64")
    assert "Predicted budget: not computed" not in text and "no budget or blast radius" not in text
    assert "restarts all 2 pods" in text


def test_a_leader_worker_set_plan_counts_leader_and_workers_per_group(sc, tmp_path, capsys):
    lws = _lws(groups=2, size=2)
    labels = {"leaderworkerset.sigs.k8s.io/name": "vllm"}
    sc.kube.add(lws, *[_node(f"gpu-{i}", 1) for i in range(4)],
                *[_pod(f"vllm-{g}{'' if w == 0 else f'-{w}'}", f"gpu-{2 * g + w}", labels)
                  for g in range(2) for w in range(2)])
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/lws/vllm", "--set", "max-num-seqs=64", "--json")
    assert rc == 0, p
    preview = p["preview"]
    budget = preview["budget"]
    expected = _budget_what_if(capsys, tmp_path, lws, "max-num-seqs=64")
    for side in ("before", "after"):
        assert {k: budget[side][k] for k in FIGURES} == {k: expected[side][k] for k in FIGURES}, side
    assert (budget["replicas_before"], budget["replicas_after"]) == (2, 2)  # groups: one engine each
    blast = preview["blast_radius"]
    assert blast["restart_pods"] == ["vllm-0", "vllm-0-1", "vllm-1", "vllm-1-1"]
    # maxUnavailable 1 group, maxSurge 0 (the LeaderWorkerSet defaults), in pods of 1 GPU each
    assert (blast["replicas_before"], blast["max_surge"], blast["max_unavailable"]) == (4, 0, 2)
    assert (blast["extra_pods"], blast["gpus_per_pod"], blast["outcome"]) == (0, 1, "no_extra")
    assert [n["id"] for n in preview["notes"]] == ["lws_groups"]


def test_a_leader_worker_set_surge_needs_a_whole_group_of_spare_gpus(sc, tmp_path, capsys):
    lws = _lws(groups=1, size=3)
    lws["spec"]["rolloutStrategy"] = {"type": "RollingUpdate",
                                      "rollingUpdateConfiguration": {"maxSurge": 1, "maxUnavailable": 0}}
    labels = {"leaderworkerset.sigs.k8s.io/name": "vllm"}
    sc.kube.add(lws, *[_node(f"gpu-{i}", 1) for i in range(5)],
                *[_pod(name, f"gpu-{i}", labels) for i, name in enumerate(("vllm-0", "vllm-0-1", "vllm-0-2"))])
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/lws/vllm", "--set", "max-num-seqs=64", "--json")
    assert rc == 0, p
    blast = p["preview"]["blast_radius"]
    # a surge of one group is 3 pods at once; two nodes have a spare GPU: maxUnavailable 0, stuck
    assert (blast["extra_pods"], blast["gpus_needed"], blast["spare_gpus"]) == (3, 3, 2)
    assert blast["outcome"] == "stuck"


def test_a_rollout_setting_the_preview_cannot_read_is_a_note_and_the_plan_is_still_made(sc, tmp_path, capsys):
    lws = _lws(groups=1, size=2)
    lws["spec"]["rolloutStrategy"] = {"rollingUpdateConfiguration": {"maxSurge": "lots"}}
    sc.kube.add(lws)
    rc, p = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/lws/vllm", "--set", "max-num-seqs=64", "--json")
    assert rc == 0, p
    (note,) = [n for n in p["preview"]["notes"] if n["id"] == "preview_failed"]
    assert "lots" in note["params"]["error"]
    assert p["preview"]["blast_radius"] is None and sc.kube.writes() == []
