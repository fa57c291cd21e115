"""kubectl output as pasted: the pods table and `kubectl describe pod`, wherever they appear."""

from __future__ import annotations

from pathlib import Path

from collectors.bundle import load_bundle
from collectors.parsers.kube_tables import parse_pod_text
from collectors.parsers.logs import parse_server_log

DATA = Path(__file__).parent / "data"


def test_the_pods_table_as_posted_with_shell_prompts_around_it():
    pods = {p.name: p for p in parse_pod_text(
        (DATA / "real" / "production-stack-800-router-crashloop" / "pods.txt").read_text())}
    router = pods["vllm-deployment-router-7bdd445bbd-7hvhm"]
    assert (router.restarts, router.phase, router.containers[0].state_reason, router.containers[0].ready) == (
        5, "Running", "CrashLoopBackOff", False)
    engine = pods["vllm-opt125m-deployment-vllm-7cf788c496-zfnnj"]
    assert (engine.restarts, engine.containers[0].state, engine.containers[0].ready) == (0, "running", True)
    assert pods["gpu-test"].phase == "Succeeded"


def test_the_all_namespaces_table_and_an_oomkilled_status():
    pods = parse_pod_text("NAMESPACE   NAME                 READY   STATUS      RESTARTS      AGE\n"
                          "llm         vllm-0               0/1     OOMKilled   4 (57s ago)   2m40s\n"
                          "not a row of the table\n"
                          "llm         vllm-1               1/1     Running     0             2m40s\n")
    assert [(p.namespace, p.name, p.restarts) for p in pods] == [("llm", "vllm-0", 4)]
    assert pods[0].containers[0].last_termination_reason == "OOMKilled"


def test_describe_pod_gives_the_container_state_and_last_termination():
    (pod,) = parse_pod_text((DATA / "kube" / "describe-pod.txt").read_text())
    (vllm,) = pod.containers
    assert (pod.name, pod.namespace, pod.node, pod.phase) == (
        "vllm-server-7d9c6b5f4-x2k8p", "llm", "gpu-node-a100-3", "Running")
    assert (vllm.state, vllm.state_reason, vllm.last_termination_reason, vllm.last_exit_code, vllm.restart_count) == (
        "waiting", "CrashLoopBackOff", "OOMKilled", 137, 4)


def test_a_pods_table_inside_a_log_gives_the_pods():
    logs = parse_server_log("$ kubectl get pods\n"
                            "NAME                        READY   STATUS             RESTARTS      AGE\n"
                            "vllm-router-7bdd445bbd-7hvhm   0/1     CrashLoopBackOff   5 (13s ago)   3m42s\n"
                            "INFO 05-10 12:00:05 api_server.py:1] vLLM API server version 0.6.4\n")
    assert [p.restarts for p in logs.pods] == [5]


def test_pods_txt_is_read_into_the_bundle(tmp_path):
    src = DATA / "real" / "production-stack-800-router-crashloop" / "pods.txt"
    (tmp_path / "pods.txt").write_text(src.read_text())
    ev = load_bundle(tmp_path)
    assert "pods.txt" in ev.sources and sum(p.restarts for p in ev.pods) == 5


def test_pods_txt_without_kubectl_output_is_a_read_issue(tmp_path):
    (tmp_path / "pods.txt").write_text("nothing kubectl printed\n")
    ev = load_bundle(tmp_path)
    assert ev.pods == () and [i.source for i in ev.issues] == ["pods.txt"]


def test_events_tables_inside_a_log_and_describes_events_reach_the_bundle(tmp_path):
    (tmp_path / "logs.txt").write_text(
        "$ kubectl get events\n"
        "LAST SEEN   TYPE      REASON      OBJECT              MESSAGE\n"
        "2m          Warning   BackOff     pod/vllm-0          Back-off restarting failed container\n"
        "\n"
        "INFO 05-10 12:00:05 api_server.py:1] vLLM API server version 0.6.4\n")
    ev = load_bundle(tmp_path)
    assert [(e.reason, e.object_name) for e in ev.events] == [("BackOff", "vllm-0")]
    described = tmp_path / "described"
    described.mkdir()
    (described / "pods.txt").write_text((DATA / "kube" / "describe-pod.txt").read_text())
    ev = load_bundle(described)
    assert {e.reason for e in ev.events} == {"Scheduled", "Pulled", "Unhealthy", "BackOff"}
    assert ev.pods[0].containers[0].last_termination_reason == "OOMKilled"


def test_the_pods_of_kubectl_get_all_keep_their_name_without_the_pod_prefix():
    (pod,) = parse_pod_text(
        "NAME                                                               READY   STATUS    RESTARTS       AGE\n"
        "pod/vllm-standalone-3b-vllm-llama-3-3b-instruct-57c8d4996c-qtr8b   0/1     Running   6 (118s ago)   20m\n")
    assert (pod.name, pod.restarts, pod.containers[0].ready) == (
        "vllm-standalone-3b-vllm-llama-3-3b-instruct-57c8d4996c-qtr8b", 6, False)
