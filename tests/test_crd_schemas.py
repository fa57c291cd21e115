"""The custom resources' schemas in tests/data/crd_schemas (cut from the upstream CRDs: KServe's
InferenceService, the LeaderWorkerSet, Argo CD's Application) accept a real object of each kind and
refuse what the real API server answers 422 to: a wrong type, a missing required field, a value
outside an enum."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

SCHEMAS = Path(__file__).parent / "data" / "crd_schemas"

CONTAINER = {"name": "kserve-container", "image": "vllm/vllm-openai:v0.8.5",
             "args": ["--model", "/mnt/models", "--max-num-seqs", "128"],
             "resources": {"limits": {"nvidia.com/gpu": "1"}}}
ISVC = {"apiVersion": "serving.kserve.io/v1beta1", "kind": "InferenceService",
        "metadata": {"name": "llama", "namespace": "llm"},
        "spec": {"predictor": {"minReplicas": 1,
                               "model": {"modelFormat": {"name": "huggingface"},
                                         "args": ["--max-num-seqs=128", "--gpu-memory-utilization=0.9"],
                                         "storageUri": "hf://meta-llama/Llama-3.1-8B-Instruct"}}}}
ISVC_CONTAINERS = {**ISVC, "spec": {"predictor": {"containers": [CONTAINER]}}}
POD = {"metadata": {"labels": {"role": "leader"}}, "spec": {"containers": [CONTAINER]}}
LWS = {"apiVersion": "leaderworkerset.x-k8s.io/v1", "kind": "LeaderWorkerSet",
       "metadata": {"name": "vllm", "namespace": "llm"},
       "spec": {"replicas": 1, "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {"size": 2, "restartPolicy": "RecreateGroupOnPodRestart",
                                         "leaderTemplate": copy.deepcopy(POD),
                                         "workerTemplate": copy.deepcopy(POD)}}}
APP = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
       "metadata": {"name": "llm-serving", "namespace": "argocd"},
       "spec": {"project": "default",
                "source": {"repoURL": "https://git.example/llm.git", "path": "serving", "targetRevision": "main"},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "llm"},
                "syncPolicy": {"automated": {"prune": True, "selfHeal": True}}}}


def _validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


ISVC_SCHEMA = "inferenceservice-serving-v1beta1.json"
LWS_SCHEMA = "leaderworkerset-leaderworkerset-v1.json"
APP_SCHEMA = "application-argoproj-v1alpha1.json"


@pytest.mark.parametrize(("name", "obj"), [(ISVC_SCHEMA, ISVC), (ISVC_SCHEMA, ISVC_CONTAINERS), (LWS_SCHEMA, LWS),
                                           (APP_SCHEMA, APP)])
def test_a_real_object_of_each_kind_is_accepted(name, obj):
    assert list(_validator(name).iter_errors(obj)) == []


def _with(obj: dict, path: str, value) -> dict:
    out = copy.deepcopy(obj)
    *parents, last = path.split(".")
    node = out
    for key in parents:
        node = node[int(key)] if key.isdigit() else node[key]
    if value is KeyError:
        del node[last]
    else:
        node[last] = value
    return out


@pytest.mark.parametrize(("name", "obj", "path", "value", "field"), [
    (ISVC_SCHEMA, ISVC, "spec.predictor.model.args", "--max-num-seqs=64", ["spec", "predictor", "model", "args"]),
    (ISVC_SCHEMA, ISVC, "spec.predictor.model.args", [64], ["spec", "predictor", "model", "args", 0]),
    (ISVC_SCHEMA, ISVC, "spec.predictor.minReplicas", "one", ["spec", "predictor", "minReplicas"]),
    (ISVC_SCHEMA, ISVC, "spec.predictor.model.modelFormat.name", KeyError,
     ["spec", "predictor", "model", "modelFormat"]),
    (ISVC_SCHEMA, ISVC, "spec.predictor", KeyError, ["spec"]),
    (ISVC_SCHEMA, ISVC_CONTAINERS, "spec.predictor.containers.0.name", KeyError,
     ["spec", "predictor", "containers", 0]),
    (LWS_SCHEMA, LWS, "spec.leaderWorkerTemplate.workerTemplate", KeyError, ["spec", "leaderWorkerTemplate"]),
    (LWS_SCHEMA, LWS, "spec.leaderWorkerTemplate.restartPolicy", "Always",
     ["spec", "leaderWorkerTemplate", "restartPolicy"]),
    (LWS_SCHEMA, LWS, "spec.leaderWorkerTemplate.workerTemplate.spec.containers.0.args", "--tp 8",
     ["spec", "leaderWorkerTemplate", "workerTemplate", "spec", "containers", 0, "args"]),
    (LWS_SCHEMA, LWS, "spec.startupPolicy", "Whenever", ["spec", "startupPolicy"]),
    (APP_SCHEMA, APP, "spec.syncPolicy.automated.selfHeal", "yes", ["spec", "syncPolicy", "automated", "selfHeal"]),
    (APP_SCHEMA, APP, "spec.project", KeyError, ["spec"]),
    (APP_SCHEMA, APP, "spec.source.repoURL", KeyError, ["spec", "source"]),
    (APP_SCHEMA, APP, "kind", "Deployment", ["kind"]),
])
def test_what_the_real_server_refuses_is_refused_at_the_field(name, obj, path, value, field):
    errors = list(_validator(name).iter_errors(_with(obj, path, value)))
    assert [list(e.absolute_path) for e in errors] == [field], [e.message for e in errors]


@pytest.mark.parametrize("name", [ISVC_SCHEMA, LWS_SCHEMA, APP_SCHEMA])
def test_each_schema_names_the_upstream_crd_it_was_cut_from(name):
    schema = json.loads((SCHEMAS / name).read_text(encoding="utf-8"))
    source = schema["x-gpumem-source"]
    assert source["repo"] in ("kserve/kserve", "kubernetes-sigs/lws", "argoproj/argo-cd")
    assert source["tag"].startswith("v") and source["path"].endswith(".yaml")
    assert schema["properties"]["apiVersion"]["const"].split("/")[0] in source["path"] or source["repo"] == (
        "argoproj/argo-cd")
