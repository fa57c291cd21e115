"""Where each kind declares its pods (`runbooks.model.templates`) and the flag edit on it
(`runbooks.remediation.edits.owner_flags`): pointers on the object, LeaderWorkerSet templates kept
the same, and any object in is a value or a typed error, never a traceback (fuzzed)."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.service.container_reader import CONTAINER_READER
from collectors.errors import ParseError
from collectors.parsers.kube_objects import spec_owner_config, workload_from_object
from runbooks.model.errors import UsageError
from runbooks.model.templates import (
    HF_RUNTIME_READ_AS,
    TemplateShapeError,
    canonical_kind,
    container_pointer,
    deployment_view,
    pod_sites,
    to_object_pointer,
)
from runbooks.remediation.edits.owner_flags import edit_owner_flags
from tests.test_crd_schemas import ISVC, ISVC_CONTAINERS, LWS


def test_each_kind_names_its_pod_templates_as_pointers_on_the_object():
    assert [(s.role, s.pod_path) for s in pod_sites(LWS)] == [
        ("leader", "/spec/leaderWorkerTemplate/leaderTemplate/spec"),
        ("worker", "/spec/leaderWorkerTemplate/workerTemplate/spec")]
    assert [container_pointer(s, 0) for s in pod_sites(ISVC_CONTAINERS)] == ["/spec/predictor/containers/0"]
    (model,) = pod_sites(ISVC)
    assert (model.role, container_pointer(model, 0), model.runtime_read) == ("model", "/spec/predictor/model", True)
    assert model.pod_spec["containers"][0]["image"] == HF_RUNTIME_READ_AS
    no_leader = copy.deepcopy(LWS)
    del no_leader["spec"]["leaderWorkerTemplate"]["leaderTemplate"]
    assert [(s.role, s.shared) for s in pod_sites(no_leader)] == [("worker", True)]
    assert to_object_pointer(pod_sites(LWS)[1], "/spec/template/spec/containers/0/args/3") == \
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args/3"


def test_a_model_with_an_image_of_its_own_is_read_as_it_is():
    isvc = copy.deepcopy(ISVC)
    isvc["spec"]["predictor"]["model"]["image"] = "vllm/vllm-openai:v0.8.5"
    (model,) = pod_sites(isvc)
    assert not model.runtime_read and model.pod_spec["containers"][0]["image"] == "vllm/vllm-openai:v0.8.5"
    other = copy.deepcopy(ISVC)
    other["spec"]["predictor"]["model"]["modelFormat"] = {"name": "sklearn"}
    assert spec_owner_config(other) is None  # no known server: nothing guessed


def test_a_hugging_face_model_is_never_reported_with_the_image_it_was_read_as():
    workload, config = workload_from_object(ISVC)
    assert workload.image is None and config.engine == "vllm" and config.engine_version is None


def test_the_view_is_a_deployment_of_that_pod_template():
    view = deployment_view(ISVC, pod_sites(ISVC)[0])
    assert view["kind"] == "Deployment" and view["spec"]["replicas"] == 1
    assert view["spec"]["template"]["spec"]["containers"][0]["name"] == "kserve-container"


@pytest.mark.parametrize("word, kind", [("Deployment", "Deployment"), ("deploy", "Deployment"), ("STS", "StatefulSet"),
                                        ("isvc", "InferenceService"), ("LeaderWorkerSets", "LeaderWorkerSet"),
                                        ("daemonset", None), ("", None)])
def test_kind_words(word, kind):
    assert canonical_kind(word) == kind


def test_one_patch_changes_leader_and_worker_and_refuses_when_they_disagree():
    edit = edit_owner_flags(LWS, None, {"max-num-seqs": 64}, reader=CONTAINER_READER)
    assert [s.role for s, _ in edit.sites] == ["leader", "worker"]
    assert [op["path"] for op in edit.ops if op["op"] == "replace"] == [
        "/spec/leaderWorkerTemplate/leaderTemplate/spec/containers/0/args/3",
        "/spec/leaderWorkerTemplate/workerTemplate/spec/containers/0/args/3"]
    differ = copy.deepcopy(LWS)
    differ["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["args"][3] = "96"
    with pytest.raises(UsageError) as refused:
        edit_owner_flags(differ, None, {"max-num-seqs": 64}, reader=CONTAINER_READER)
    assert refused.value.code == "templates_differ"
    assert (refused.value.params["first"], refused.value.params["second"]) == ("leader: 128", "worker: 96")


def test_a_flag_the_model_lacks_is_added_to_its_args():
    edit = edit_owner_flags(ISVC, None, {"max-model-len": 8192}, reader=CONTAINER_READER)
    assert [(op["op"], op["path"]) for op in edit.ops] == [("add", "/spec/predictor/model/args/2")]


_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
_JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                     max_leaves=12)


def _mutated(base: dict, path: list[str], value) -> dict:
    out = copy.deepcopy(base)
    node = out
    for key in path[:-1]:
        node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            return out
    node[path[-1]] = value
    return out


_PATHS = st.sampled_from([["spec"], ["spec", "predictor"], ["spec", "predictor", "model"],
                          ["spec", "predictor", "model", "args"], ["spec", "leaderWorkerTemplate"],
                          ["spec", "leaderWorkerTemplate", "leaderTemplate"],
                          ["spec", "leaderWorkerTemplate", "workerTemplate", "spec"], ["kind"]])


@settings(max_examples=300, deadline=None)
@given(base=st.sampled_from([ISVC, ISVC_CONTAINERS, LWS]), path=_PATHS, value=_JSON)
def test_any_owner_object_is_read_or_refused_by_field(base, path, value):
    obj = _mutated(base, path, value)
    try:
        pod_sites(obj)
    except TemplateShapeError as e:
        assert e.field
    try:
        workload_from_object(obj, "obj.yaml")
    except ParseError as e:
        assert e.source == "obj.yaml"
    try:
        edit_owner_flags(obj, None, {"max-num-seqs": 8}, reader=CONTAINER_READER)
    except UsageError as e:
        assert e.code


def test_a_model_whose_args_are_null_gets_them_with_the_null_tested():
    """Found by the fuzz test above: `args: null` (a manifest may say so) crashed the splice."""
    isvc = copy.deepcopy(ISVC)
    isvc["spec"]["predictor"]["model"]["args"] = None
    edit = edit_owner_flags(isvc, None, {"max-num-seqs": 8}, reader=CONTAINER_READER)
    assert list(edit.ops) == [{"op": "test", "path": "/spec/predictor/model/args", "value": None},
                              {"op": "replace", "path": "/spec/predictor/model/args", "value": ["--max-num-seqs", "8"]}]
