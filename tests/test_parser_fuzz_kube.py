"""Kubernetes and flag parsers return their typed result or raise ParseError, nothing else."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.parsers.flags import server_config_from_container
from collectors.parsers.kube_events import event_from_object, parse_events_with_issues
from collectors.parsers.kube_objects import (
    autoscaler_from_object,
    load_yaml_documents,
    parse_deployment,
    parse_events,
    parse_hpa,
    parse_pods,
    pod_state_from_object,
    pods_from_objects,
    workload_from_object,
)
from runbooks.launch.argv import parse_command_line
from runbooks.model.evidence import Autoscaler, K8sEvent, PodState, ReadIssue, ServerConfig, Workload

DATA = Path(__file__).parent / "data" / "kube"
FUZZ = settings(max_examples=200, deadline=None)

KEYS = st.sampled_from([
    "kind", "metadata", "name", "spec", "template", "containers", "command", "args", "env", "value",
    "valueFrom", "image", "resources", "limits", "requests", "nvidia.com/gpu", "nvidia.com/mig-3g.40gb",
    "nvidia.com/gpumem", "livenessProbe", "startupProbe", "httpGet", "port", "volumes", "volumeMounts",
    "mountPath", "emptyDir", "sizeLimit", "status", "containerStatuses", "state", "lastState", "terminated",
    "metrics", "type", "resource", "pods", "metric", "items", "involvedObject", "series", "count",
    "startTime", "strategy", "rollingUpdate", "affinity", "nodeSelector",
]) | st.text(max_size=8)
SCALARS = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20)
    | st.sampled_from(["vllm", "serve", "--max-model-len", "8192", "$(X)", "sh", "-c", "Deployment", "Pod",
                       "2025-03-14T02:39:15Z", "RollingUpdate", "/dev/shm", "Memory"])
)
TREES = st.recursive(
    SCALARS, lambda children: st.lists(children, max_size=4) | st.dictionaries(KEYS, children, max_size=5),
    max_leaves=30,
)
SHELL_WORDS = st.sampled_from([
    "vllm", "serve", "M", "python3", "-m", "vllm.entrypoints.openai.api_server", "sglang.launch_server",
    "text-generation-launcher", "bash", "-c", "sh", "exec", "&&", ";", "|", "\\\n", "'", '"', "$(A)", "$B",
    "${C:-d}", "--tp", "-tp", "2", "--no-enable-prefix-caching", "--max_model_len=8k", "-1", "2>&1", "#",
    "export", "A=1", "--", "env", "tini", "=", "--host", "0.0.0.0",
])


def _recorded(name: str) -> list[dict[str, Any]]:
    return load_yaml_documents((DATA / name).read_text(), name)


RECORDED = {
    "deployment": [o for f in DATA.glob("*deploy*.yaml") for o in _recorded(f.name)]
    + _recorded("statefulset-sglang-multinode.yaml"),
    "pod": _recorded("pods.yaml"),
    "hpa": [o for f in DATA.glob("hpa-*.yaml") for o in _recorded(f.name)],
    "event": _recorded("events.yaml"),
}


def _paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    found = [prefix]
    if isinstance(tree, dict):
        for key, value in tree.items():
            found.extend(_paths(value, (*prefix, key)))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            found.extend(_paths(value, (*prefix, i)))
    return found


@st.composite
def mutated(draw: st.DrawFn, family: str) -> Any:
    """A recorded object with one subtree replaced by junk: reaches deep fields with bad shapes."""
    obj = copy.deepcopy(draw(st.sampled_from(RECORDED[family])))
    path = draw(st.sampled_from(_paths(obj)))
    junk = draw(TREES)
    if not path:
        return junk
    parent = obj
    for step in path[:-1]:
        parent = parent[step]
    parent[path[-1]] = junk
    return obj


def _ok_or_parse_error(call, *args, **kwargs) -> Any:
    try:
        return call(*args, **kwargs)
    except ParseError as e:
        assert e.source
        return None


# --------------------------------------------------------------- text loaders


@FUZZ
@given(st.text())
def test_arbitrary_text_to_every_loader_gives_typed_result_or_parse_error(text):
    objects = _ok_or_parse_error(load_yaml_documents, text, "any.yaml")
    assert objects is None or all(isinstance(o, dict) and isinstance(o["kind"], str) for o in objects)
    deployment = _ok_or_parse_error(parse_deployment, text, "deployment.yaml")
    assert deployment is None or isinstance(deployment[0], Workload)
    pods = _ok_or_parse_error(parse_pods, text, "pods.yaml")
    assert pods is None or all(isinstance(p, PodState) for p in pods)
    hpa = _ok_or_parse_error(parse_hpa, text, "hpa.yaml")
    assert hpa is None or isinstance(hpa, Autoscaler)
    events = _ok_or_parse_error(parse_events_with_issues, text, "events.txt")
    assert events is None or (
        all(isinstance(e, K8sEvent) for e in events[0]) and all(isinstance(i, ReadIssue) for i in events[1])
    )


@FUZZ
@given(st.lists(st.text(alphabet=" \tabcLASTEYPRONMGW/-()x0123456789:²٣", max_size=60), max_size=6))
def test_table_like_text_to_events_gives_events_or_parse_error(lines):
    text = "LAST SEEN   TYPE      REASON    OBJECT         MESSAGE\n" + "\n".join(lines)
    events, issues = parse_events_with_issues(text, "events.txt")
    assert all(isinstance(e, K8sEvent) and e.count >= 1 for e in events)
    assert all(i.line is not None and i.line >= 2 for i in issues)


@FUZZ
@given(TREES, st.sampled_from(["Deployment", "StatefulSet", "Pod", "List", "HorizontalPodAutoscaler", "Event"]))
def test_yaml_of_random_trees_to_every_loader(tree, kind):
    doc = {"kind": kind, "metadata": {"name": "x"}, "spec": tree, "status": tree, "items": tree}
    text = yaml.safe_dump(doc)
    for call in (parse_deployment, parse_pods, parse_hpa, parse_events):
        _ok_or_parse_error(call, text, "bundle.yaml")


# ----------------------------------------------------------- object functions


@FUZZ
@given(TREES, TREES)
def test_random_structures_to_server_config_give_config_none_or_parse_error(container, pod_spec):
    result = _ok_or_parse_error(server_config_from_container, container, pod_spec, "deployment.yaml")
    assert result is None or isinstance(result, ServerConfig)


@FUZZ
@given(TREES)
def test_random_structures_to_object_functions_give_typed_results_or_parse_error(tree):
    workload = _ok_or_parse_error(workload_from_object, tree, "deployment.yaml")
    assert workload is None or isinstance(workload[0], Workload)
    pod = _ok_or_parse_error(pod_state_from_object, tree, "pods.yaml")
    assert pod is None or isinstance(pod, PodState)
    hpa = _ok_or_parse_error(autoscaler_from_object, tree, "hpa.yaml")
    assert hpa is None or isinstance(hpa, Autoscaler)
    event = _ok_or_parse_error(event_from_object, tree, "events.yaml")
    assert event is None or isinstance(event, K8sEvent)
    _ok_or_parse_error(pods_from_objects, tree, "pods.yaml")


@FUZZ
@given(mutated("deployment"))
def test_mutated_recorded_deployments_give_workload_or_parse_error(obj):
    result = _ok_or_parse_error(workload_from_object, obj, "deployment.yaml")
    assert result is None or (isinstance(result[0], Workload) and (result[1] is None or isinstance(result[1], ServerConfig)))


@FUZZ
@given(mutated("pod"), mutated("hpa"), mutated("event"))
def test_mutated_recorded_pods_hpas_and_events_give_typed_results_or_parse_error(pod, hpa, event):
    state = _ok_or_parse_error(pod_state_from_object, pod, "pods.yaml")
    assert state is None or isinstance(state, PodState)
    result = _ok_or_parse_error(autoscaler_from_object, hpa, "hpa.yaml")
    assert result is None or isinstance(result, Autoscaler)
    found = _ok_or_parse_error(event_from_object, event, "events.yaml")
    assert found is None or isinstance(found, K8sEvent)


# ----------------------------------------------------------------- command lines


@FUZZ
@given(st.lists(SHELL_WORDS | st.text(max_size=12), max_size=16), st.dictionaries(st.text(max_size=6), st.text(max_size=6)))
def test_random_command_lines_give_config_or_none(argv, env):
    result = parse_command_line(argv, env)
    assert result is None or isinstance(result, ServerConfig)


@FUZZ
@given(st.lists(SHELL_WORDS | st.text(max_size=12), max_size=24).map(" ".join), st.sampled_from(
    [["/bin/sh", "-c"], ["bash", "-ec"], ["vllm serve"], []]), st.sampled_from(
    [None, "vllm/vllm-openai:v0.6.4", "ghcr.io/huggingface/text-generation-inference:2.4.1", "lmsysorg/sglang:v0.4.6"]))
def test_random_shell_strings_give_config_none_or_parse_error(script, command, image):
    container = {"command": command, "args": [script], "image": image,
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {}}]}
    result = _ok_or_parse_error(server_config_from_container, container)
    assert result is None or isinstance(result, ServerConfig)


PLACEMENT_KEYS = st.sampled_from([
    "spec", "template", "metadata", "name", "labels", "nodeSelector", "affinity", "nodeAffinity",
    "requiredDuringSchedulingIgnoredDuringExecution", "nodeSelectorTerms", "matchExpressions", "matchFields",
    "key", "operator", "values", "tolerations", "effect", "value", "taints", "unschedulable", "status",
    "conditions", "allocatable", "nvidia.com/gpu", "strategy", "rollingUpdate", "maxSurge", "maxUnavailable",
    "replicas", "selector", "matchLabels", "containers", "resources", "limits", "requests", "nodeName", "phase",
    "podAntiAffinity", "topologySpreadConstraints",
]) | st.text(max_size=8)
PLACEMENT_TREES = st.recursive(
    SCALARS | st.sampled_from(["In", "NotIn", "Exists", "Equal", "NoSchedule", "NoExecute", "25%", "1", "Ready"]),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(PLACEMENT_KEYS, children, max_size=5),
    max_leaves=30,
)


@FUZZ
@given(PLACEMENT_TREES)
def test_random_structures_to_the_plan_preview_readers_give_typed_results_or_parse_error(tree):
    from collectors.parsers.kube_placement import (
        node_gpus_from_object,
        placement_from_pod_spec,
        pod_gpus_from_object,
        rollout_from_object,
        selector_from_object,
        template_gpus,
    )
    from runbooks.remediation.preview import NodeGpus, Placement, PodGpus, Rollout

    placement = _ok_or_parse_error(placement_from_pod_spec, tree)
    assert placement is None or isinstance(placement, Placement)
    if placement is not None:  # whatever was read, matching it against a node never raises
        placement.allows("n", {"a": "b"})
        placement.tolerates(["a=b:NoSchedule", "x:NoExecute", ":NoSchedule"])
    node = _ok_or_parse_error(node_gpus_from_object, tree)
    assert node is None or isinstance(node, NodeGpus)
    pod = _ok_or_parse_error(pod_gpus_from_object, tree)
    assert pod is None or isinstance(pod, PodGpus)
    rollout = _ok_or_parse_error(rollout_from_object, tree)
    assert rollout is None or isinstance(rollout, Rollout)
    _ok_or_parse_error(selector_from_object, tree)
    _ok_or_parse_error(template_gpus, tree)
