"""The stand-in's StatefulSet and LeaderWorkerSet controllers, through the real kubernetes
client's writes: pods made in order, a template change rolled from the highest ordinal down to
the partition one ready pod at a time, OnDelete left alone; a LeaderWorkerSet's groups, each
group's workers taking a new template only once its leader has, and its status."""

from __future__ import annotations

import copy

from bot.actuator.writer import JSON_PATCH, KubeWriter
from tests.support.fake_kube import LWS_HASH, FakeKube, ManualClock
from tests.support.kube_fixtures import write_kubeconfig
from tests.test_owner_watch import _lws, _sts


def _kube(ready_after_s: float = 10.0) -> FakeKube:
    kube = FakeKube(clock=ManualClock())
    kube.rollout.ready_after_s = ready_after_s
    return kube


def _revisions(kube: FakeKube, prefix: str) -> dict[str, str]:
    kube.reconcile()
    return {p["metadata"]["name"]: p["metadata"]["labels"].get("controller-revision-hash", "")
            for p in kube.list_objects("", "pods", "llm") if p["metadata"]["name"].startswith(prefix)}


def _patch_seqs(kube: FakeKube, tmp_path, kind: str, path: str, value: list) -> None:
    from bot.service.connections import Endpoint, kube_api

    config = tmp_path / "kubeconfig"
    write_kubeconfig(config, {"prod": kube.url})
    writer = KubeWriter(kube_api(Endpoint(str(config), "prod")))
    writer.patch(kind, "llm", "vllm", [{"op": "replace", "path": path, "value": value}], JSON_PATCH)


def test_a_statefulset_starts_in_order_and_rolls_from_the_highest_ordinal_to_the_partition(tmp_path):
    kube = _kube().start()
    try:
        kube.add(_sts(replicas=3, partition=1))
        kube.run("StatefulSet", "llm", "vllm")
        assert list(_revisions(kube, "vllm-")) == ["vllm-0"]  # the next waits for this one to be ready
        kube.clock.advance(10)
        assert sorted(_revisions(kube, "vllm-")) == ["vllm-0", "vllm-1"]
        kube.clock.advance(30)
        old = _revisions(kube, "vllm-")
        assert len(old) == 3 and len(set(old.values())) == 1
        args = copy.deepcopy(_sts()["spec"]["template"]["spec"]["containers"][0]["args"])
        args[-1] = "64"
        _patch_seqs(kube, tmp_path, "StatefulSet", "/spec/template/spec/containers/0/args", args)
        now = _revisions(kube, "vllm-")
        assert now["vllm-2"] != old["vllm-2"] and (now["vllm-0"], now["vllm-1"]) == (old["vllm-0"], old["vllm-1"])
        status = kube.get("StatefulSet", "llm", "vllm")["status"]
        assert status["updateRevision"] == now["vllm-2"] and status["currentRevision"] == old["vllm-0"]
        assert status.get("updatedReplicas") == 1 and status.get("readyReplicas") == 2
        kube.clock.advance(60)
        final = _revisions(kube, "vllm-")
        assert final["vllm-1"] == final["vllm-2"] != final["vllm-0"] == old["vllm-0"]  # the partition holds
        status = kube.get("StatefulSet", "llm", "vllm")["status"]
        generation = kube.get("StatefulSet", "llm", "vllm")["metadata"]["generation"]
        assert (status["updatedReplicas"], status["readyReplicas"], status["observedGeneration"]) == (2, 3, generation)
        assert status["currentRevision"] == old["vllm-0"]  # not every pod runs the update revision
    finally:
        kube.stop()


def test_on_delete_replaces_no_pod(tmp_path):
    kube = _kube().start()
    try:
        sts = _sts(replicas=2)
        sts["spec"]["updateStrategy"] = {"type": "OnDelete"}
        kube.add(sts)
        kube.run("StatefulSet", "llm", "vllm")
        kube.clock.advance(60)
        old = _revisions(kube, "vllm-")
        args = copy.deepcopy(_sts()["spec"]["template"]["spec"]["containers"][0]["args"])
        args[-1] = "64"
        _patch_seqs(kube, tmp_path, "StatefulSet", "/spec/template/spec/containers/0/args", args)
        kube.clock.advance(600)
        assert _revisions(kube, "vllm-") == old
        status = kube.get("StatefulSet", "llm", "vllm")["status"]
        assert status["updateRevision"] != status["currentRevision"] and "updatedReplicas" not in status
    finally:
        kube.stop()


def test_a_leader_worker_set_group_takes_a_new_template_leader_first(tmp_path):
    kube = _kube().start()
    try:
        kube.add(_lws(groups=2, size=3))
        kube.run("LeaderWorkerSet", "llm", "vllm")
        kube.clock.advance(100)
        kube.reconcile()
        pods = {p["metadata"]["name"]: p for p in kube.list_objects("", "pods", "llm")}
        assert sorted(pods) == ["vllm-0", "vllm-0-1", "vllm-0-2", "vllm-1", "vllm-1-1", "vllm-1-2"]
        old = {p["metadata"]["labels"][LWS_HASH] for p in pods.values()}
        status = kube.get("LeaderWorkerSet", "llm", "vllm")["status"]
        assert (status["replicas"], status["readyReplicas"], status["updatedReplicas"]) == (2, 2, 2)
        lwt = _lws(groups=2, size=3)["spec"]["leaderWorkerTemplate"]
        args = copy.deepcopy(lwt["workerTemplate"]["spec"]["containers"][0]["args"])
        args[-1] = "64"
        _patch_seqs(kube, tmp_path, "LeaderWorkerSet", "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args",
                    args)
        kube.reconcile()
        hashes = {p["metadata"]["name"]: p["metadata"]["labels"][LWS_HASH] for p in kube.list_objects("", "pods", "llm")}
        # the leader of the highest group goes first; its workers wait until it runs the new template
        assert hashes["vllm-1"] not in old and hashes["vllm-1-1"] in old and hashes["vllm-0"] in old
        conditions = {c["type"]: c["status"] for c in kube.get("LeaderWorkerSet", "llm", "vllm")["status"]["conditions"]}
        assert conditions["UpdateInProgress"] == "True"
        kube.clock.advance(200)
        kube.reconcile()
        hashes = {p["metadata"]["name"]: p["metadata"]["labels"][LWS_HASH] for p in kube.list_objects("", "pods", "llm")}
        assert len(set(hashes.values())) == 1 and not set(hashes.values()) & old
        status = kube.get("LeaderWorkerSet", "llm", "vllm")["status"]
        conditions = {c["type"]: c["status"] for c in status["conditions"]}
        assert (status["updatedReplicas"], status["readyReplicas"]) == (2, 2)
        assert (conditions["Available"], conditions["UpdateInProgress"]) == ("True", "False")
    finally:
        kube.stop()
