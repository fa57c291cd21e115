"""`gpumem budget --from-deployment FILE` reads the server flags an InferenceService (its model
args or its predictor containers) or a LeaderWorkerSet (its leader template, else its worker
template) declares, in the launch forms the launch grammar reads."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from bot.main import main
from tests.test_crd_schemas import ISVC, ISVC_CONTAINERS, LWS

MODEL = "Qwen/Qwen2.5-7B-Instruct"


def _budget(capsys, tmp_path, obj: dict, *extra: str) -> tuple[int, dict | str]:
    path = tmp_path / "obj.yaml"
    path.write_text(yaml.safe_dump(obj), encoding="utf-8")
    rc = main(["budget", "--from-deployment", str(path), "--model", MODEL, "--gpu", "A100-SXM4-80GB", "--json",
               *extra, "--lang", "en"])
    out = capsys.readouterr()
    try:
        return rc, json.loads(out.out)
    except ValueError:
        return rc, out.out + out.err


def _shell_lws() -> dict:
    lws = copy.deepcopy(LWS)
    line = ("ray start --head --port=6379 && vllm serve /mnt/models --max-num-seqs 24 "
            "--gpu-memory-utilization 0.8 --tensor-parallel-size 2")
    lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0] = {
        "name": "leader", "image": "vllm/vllm-openai:v0.8.5", "command": ["sh", "-c", line]}
    lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0] = {
        "name": "worker", "image": "vllm/vllm-openai:v0.8.5",
        "command": ["sh", "-c", "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"]}
    return lws


def _isvc_model_with_image() -> dict:
    isvc = copy.deepcopy(ISVC)
    isvc["spec"]["predictor"]["model"].update({"image": "vllm/vllm-openai:v0.8.5",
                                               "args": ["--max-num-seqs", "40"]})
    return isvc


@pytest.mark.parametrize("obj, seqs, fraction", [
    (ISVC, 128, 0.9),                       # model args, on KServe's Hugging Face runtime (vLLM)
    (_isvc_model_with_image(), 40, None),   # the model's own image
    (ISVC_CONTAINERS, 128, None),           # a custom predictor's containers
    (LWS, 128, None),                       # the leader template's entrypoint args
    (_shell_lws(), 24, 0.8),                # a shell line behind `ray start`, the worker running no server
])
def test_the_budget_reads_the_flags_each_kind_declares(capsys, tmp_path, obj, seqs, fraction):
    rc, doc = _budget(capsys, tmp_path, obj)
    assert rc == 0, doc
    assert doc["engine"] == "vllm"
    assert doc["max_num_seqs"] == seqs
    if fraction is not None:
        assert doc["budget_gib"] == pytest.approx(fraction * doc["gpu_total_gib"], abs=0.01)


def test_the_leader_worker_sets_parallelism_is_read_from_its_leader(capsys, tmp_path):
    rc, doc = _budget(capsys, tmp_path, _shell_lws())
    assert rc == 0 and doc["tp"] == 2


def test_an_owner_without_its_pod_template_names_the_field(capsys, tmp_path):
    broken = copy.deepcopy(LWS)
    del broken["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    rc, text = _budget(capsys, tmp_path, broken)
    assert rc == 2 and "spec.leaderWorkerTemplate.workerTemplate: missing" in text


def test_a_leader_worker_sets_ranks_across_its_pods_are_no_clash(capsys, tmp_path):
    # TP 2 over a group of two pods of one GPU each (the vLLM multi-node LeaderWorkerSet layout):
    # the leader's own request is not what the ranks can use, so no "needs 2 GPUs" clash
    lws = _shell_lws()
    for role in ("leaderTemplate", "workerTemplate"):
        container = lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    lws["spec"]["leaderWorkerTemplate"]["size"] = 2
    rc, doc = _budget(capsys, tmp_path, lws)
    assert rc == 0, doc
    assert doc["tp"] == 2
    assert not [c for c in doc.get("conflicts", []) if "GPU" in json.dumps(c)], doc.get("conflicts")


def test_a_leader_worker_set_of_one_pod_cannot_hold_ranks_its_gpus_do_not_cover(capsys, tmp_path):
    # the same TP 2, but a group of one pod with one GPU: the ranks have nowhere to go
    lws = _shell_lws()
    for role in ("leaderTemplate", "workerTemplate"):
        container = lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]
        container["resources"] = {"limits": {"nvidia.com/gpu": 1}}
    lws["spec"]["leaderWorkerTemplate"]["size"] = 1
    rc, doc = _budget(capsys, tmp_path, lws)
    assert rc == 2, doc
    assert [c for c in doc.get("conflicts", []) if "GPU" in json.dumps(c)], doc
