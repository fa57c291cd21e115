"""Kubernetes events from YAML and from printed tables (collectors.parsers.kube_events)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.errors import ParseError
from collectors.parsers.kube_events import event_from_object, parse_events_with_issues
from collectors.parsers.kube_objects import parse_events
from runbooks.model.evidence import K8sEvent
from runbooks.model.serde import from_jsonable, to_jsonable
from tests.support import words

DATA = Path(__file__).parent / "data" / "kube"


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_events_table_reads_probe_kills_backoff_and_gpu_shortage():
    events = parse_events(read("events.txt"), source="events.txt")
    assert [e.reason for e in events] == [
        "Scheduled", "Unhealthy", "Killing", "Unhealthy", "Killing", "BackOff", "FailedScheduling",
        "ScalingReplicaSet",
    ]
    liveness = events[1]
    assert liveness.type == "Warning"
    assert liveness.message.startswith("Liveness probe failed: Get \"http://10.244.3.41:8000/health\"")
    assert (liveness.object_kind, liveness.object_name) == ("Pod", "vllm-server-7d9c6b5f4-x2k8p")
    assert events[4].message == "Container vllm failed startup probe, will be restarted"
    assert events[5].message.startswith("Back-off restarting failed container")
    scheduling = events[6]
    assert "Insufficient nvidia.com/gpu" in scheduling.message
    assert scheduling.message.endswith("4 Preemption is not helpful for scheduling.")
    assert (events[7].object_kind, events[7].object_name) == ("Deployment", "vllm-server")
    # relative ages ("3m12s", "<unknown>") give no instant
    assert all(e.last_at is None and e.first_at is None and e.count == 1 for e in events)


def test_all_namespaces_table_reads_grouped_object_kinds():
    events = parse_events(read("events-all-namespaces.txt"))
    assert [(e.reason, e.object_kind, e.object_name) for e in events] == [
        ("BackOff", "Pod", "vllm-server-7d9c6b5f4-x2k8p"),
        ("SuccessfulRescale", "HorizontalPodAutoscaler", "vllm-hpa"),
        ("FailedGetResourceMetric", "HorizontalPodAutoscaler", "vllm-hpa"),
    ]
    assert events[1].message == ("New size: 4; reason: cpu resource utilization (percentage of request) "
                                 "above target")


def test_wide_table_reads_count_and_keeps_message_between_columns():
    events, issues = parse_events_with_issues(read("events-wide.txt"))
    assert issues == ()
    backoff, scheduled = events
    assert (backoff.reason, backoff.count, backoff.message) == ("BackOff", 17, "Back-off restarting failed container")
    assert (scheduled.reason, scheduled.count) == ("Scheduled", 1)
    assert scheduled.message == "Successfully assigned llm/vllm-server-7d9c6b5f4-x2k8p to gpu-node-a100-3"
    assert scheduled.object_name == "vllm-server-7d9c6b5f4-x2k8p"  # OBJECT, not the event NAME


def test_kubectl_events_repeat_counts_come_from_the_age_column():
    events = parse_events(read("events-kubectl-events.txt"))
    assert [(e.reason, e.count, e.object_kind) for e in events] == [("Unhealthy", 4, "Pod"), ("BackOff", 9, "Pod")]
    assert events[0].message == "Readiness probe failed: HTTP probe failed with statuscode: 503"


def test_describe_pod_events_section_is_read_for_the_described_pod():
    events = parse_events(read("describe-pod.txt"), source="describe.txt")
    assert [(e.reason, e.count) for e in events] == [("Scheduled", 1), ("Pulled", 5), ("Unhealthy", 3), ("BackOff", 17)]
    assert {e.object_name for e in events} == {"vllm-server-7d9c6b5f4-x2k8p"}
    assert events[3].message == "Back-off restarting failed container vllm in pod vllm-server-7d9c6b5f4-x2k8p_llm(0a1b)"


def test_rows_whose_spacing_was_collapsed_are_split_by_words():
    text = ("LAST SEEN   TYPE      REASON    OBJECT           MESSAGE\n"
            "5m Warning BackOff pod/vllm-server-0 Back-off restarting failed container\n"
            "2m (x4 over 10m) Warning Unhealthy pod/vllm-server-0 Liveness probe failed: timeout\n")
    events, issues = parse_events_with_issues(text)
    assert issues == ()
    assert [(e.reason, e.object_name, e.count) for e in events] == [
        ("BackOff", "vllm-server-0", 1), ("Unhealthy", "vllm-server-0", 4)]
    assert events[1].message == "Liveness probe failed: timeout"


def test_unreadable_rows_are_skipped_and_reported_by_line():
    text = ("LAST SEEN   TYPE      REASON    OBJECT           MESSAGE\n"
            "5m          Warning   BackOff   pod/vllm-0       Back-off restarting failed container\n"
            "garbage\n"
            "1m          Normal    Pulled    pod/vllm-0       Container image already present\n")
    events, issues = parse_events_with_issues(text, source="events.txt")
    assert [e.reason for e in events] == ["BackOff", "Pulled"]
    assert [(i.source, i.line, i.kind) for i in issues] == [("events.txt", 3, "unreadable")]


def test_absolute_timestamps_in_a_custom_table_become_instants():
    text = ("LAST SEEN              TYPE      REASON    OBJECT       MESSAGE\n"
            "2025-03-14T02:39:15Z   Warning   BackOff   pod/vllm-0   Back-off restarting failed container\n")
    (event,) = parse_events(text)
    assert event.last_at == datetime(2025, 3, 14, 2, 39, 15, tzinfo=UTC)


def test_events_yaml_reads_core_and_events_api_shapes():
    backoff, scheduling, startup = parse_events(read("events.yaml"), source="events.yaml")
    assert backoff == K8sEvent(
        reason="BackOff",
        message="Back-off restarting failed container vllm in pod vllm-server-7d9c6b5f4-x2k8p_llm(0a1b)",
        type="Warning", object_kind="Pod", object_name="vllm-server-7d9c6b5f4-x2k8p", count=17,
        first_at=datetime(2025, 3, 14, 2, 17, 3, tzinfo=UTC), last_at=datetime(2025, 3, 14, 2, 39, 15, tzinfo=UTC),
    )
    assert "Insufficient nvidia.com/gpu" in scheduling.message
    # events.k8s.io/v1: note, regarding, series
    assert startup.message.startswith("Startup probe failed")
    assert (startup.object_kind, startup.object_name, startup.count) == ("Pod", "vllm-server-7d9c6b5f4-m4r2t", 30)
    assert startup.first_at == datetime(2025, 3, 14, 2, 30, 11, 482913, tzinfo=UTC)
    assert startup.last_at == datetime(2025, 3, 14, 2, 35, 1, 2114, tzinfo=UTC)


def test_event_without_times_or_count_defaults_to_one_occurrence():
    event = event_from_object({"reason": "Killing", "involvedObject": {"kind": "Pod", "name": "p"}})
    assert (event.count, event.type, event.message, event.first_at, event.last_at) == (1, "Normal", "", None, None)


def test_events_round_trip_through_json():
    events = parse_events(read("events.yaml"))
    assert tuple(from_jsonable(K8sEvent, to_jsonable(e)) for e in events) == events


@pytest.mark.parametrize("text", ["", "\n\n", "No resources found in llm namespace.\n"])
def test_empty_captures_have_no_events(text):
    assert parse_events(text) == ()


def test_event_with_a_bad_count_names_the_field():
    with words.raises(ParseError, match=r"items\[0\]\.count: expected an integer"):
        parse_events("kind: EventList\nitems:\n- {reason: BackOff, count: often}\n", source="events.yaml")


def test_text_that_is_neither_a_table_nor_yaml_is_a_parse_error_with_line():
    with pytest.raises(ParseError) as caught:
        parse_events("Back-off restarting failed container\n", source="events.txt")
    assert caught.value.line == 1


def test_describe_event_rows_pasted_without_their_header_are_read_and_other_lines_reported():
    text = "\n".join([
        "luding waiting). Image size: 119461385 bytes.",
        "  Warning  Unhealthy  25m (x3 over 25m)  kubelet  Liveness probe failed: HTTP probe failed with statuscode: 404",
        "  Normal   Killing    25m                kubelet  Container vllm failed liveness probe, will be restarted",
        "  Warning  BackOff    2m (x7 over 9m)    kubelet, gke-node-1  Back-off restarting failed container",
    ])
    events, issues = parse_events_with_issues(text)
    assert [(e.type, e.reason, e.count) for e in events] == [
        ("Warning", "Unhealthy", 3), ("Normal", "Killing", 1), ("Warning", "BackOff", 7)]
    assert events[0].message == "Liveness probe failed: HTTP probe failed with statuscode: 404"
    assert events[2].message == "Back-off restarting failed container"
    assert [i.line for i in issues] == [1]
