"""Where each workload kind gpumem takes declares its server's pods: the pod templates it reads
the launch from and writes a flag to, as JSON pointers on the object itself.

- Deployment, StatefulSet: `spec.template` (`/spec/template/spec`).
- LeaderWorkerSet: `spec.leaderWorkerTemplate.leaderTemplate` (when set; else the worker
  template makes the leader too) and `spec.leaderWorkerTemplate.workerTemplate`.
- InferenceService (KServe v1beta1): `spec.predictor.containers` (a custom predictor), or
  `spec.predictor.model` (one container: its `args` are appended to the ServingRuntime's). A
  model of format `huggingface` that names no image and no command runs on KServe's Hugging
  Face runtime, whose backend is vLLM and which hands its args to vLLM's engine arguments: it
  is read as a vLLM launch of those args (`HF_RUNTIME_READ_AS`), and nothing else is assumed
  of that runtime (no version, no image).

`deployment_view(obj, site)` is the pod template as a Deployment-shaped object, so the readers
and editors of a Deployment read it unchanged; `container_pointer` maps a container of the view
back to where it lives on the object. Pure: a dict in, values out, never a traceback
(`TemplateShapeError` names the field).

>>> isvc = {"kind": "InferenceService", "spec": {"predictor": {"model": {"modelFormat": {"name": "huggingface"},
...         "args": ["--max-num-seqs=8"]}}}}
>>> [(s.role, container_pointer(s, 0)) for s in pod_sites(isvc)]
[('model', '/spec/predictor/model')]
>>> canonical_kind("ISVC"), canonical_kind("lws"), canonical_kind("sts")
('InferenceService', 'LeaderWorkerSet', 'StatefulSet')
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from runbooks.model.phrases import Phrase

#: the kinds a target may name, in the order usage lists them
TARGET_KINDS = ("Deployment", "StatefulSet", "InferenceService", "LeaderWorkerSet")
#: the kinds whose controllers write a Deployment or StatefulSet from their own spec
SPEC_OWNER_KINDS = ("InferenceService", "LeaderWorkerSet")
#: what a target may call each kind (case-insensitive): its name, plural and kubectl short names
KIND_NAMES = {
    "deployment": "Deployment", "deployments": "Deployment", "deploy": "Deployment",
    "statefulset": "StatefulSet", "statefulsets": "StatefulSet", "sts": "StatefulSet",
    "inferenceservice": "InferenceService", "inferenceservices": "InferenceService", "isvc": "InferenceService",
    "leaderworkerset": "LeaderWorkerSet", "leaderworkersets": "LeaderWorkerSet", "lws": "LeaderWorkerSet",
}
#: the kinds as a usage line names them
KINDS_USAGE = "deployment (deploy), statefulset (sts), inferenceservice (isvc), leaderworkerset (lws)"
#: the image a Hugging Face model without image or command is read as (never shown as the image)
HF_RUNTIME_READ_AS = "vllm/vllm-openai"
#: the container name KServe gives `spec.predictor.model`
KSERVE_CONTAINER = "kserve-container"


#: what a pod spec's containers must be (`phrase.read.*`)
_NOT_CONTAINERS = Phrase("read.expected", {"what": Phrase("read.a.container_list")})


class TemplateShapeError(ValueError):
    """The object does not have its kind's shape where pods are declared; the message names the field."""

    def __init__(self, field: str, why: Phrase):
        super().__init__(f"{field}: {why}")
        self.field = field
        self.why = why


def canonical_kind(word: str) -> str | None:
    """The kind a target's word names ("isvc" -> "InferenceService"), None when it names none."""
    return KIND_NAMES.get(str(word).strip().lower())


@dataclass(frozen=True)
class PodSite:
    """One place the object declares its server's pods.

    `role`: "template" (Deployment, StatefulSet), "leader" / "worker" (LeaderWorkerSet),
    "predictor" / "model" (InferenceService). `pod_path` is the pointer of the pod spec (for
    "model": of the predictor); `pod_spec` the pod spec as read (for "model": a pod spec of the
    one model container, named `kserve-container` when it has no name)."""

    role: str
    pod_path: str
    pod_spec: dict[str, Any]
    #: the worker template also makes the leader (a LeaderWorkerSet without leaderTemplate)
    shared: bool = False
    #: the model container was read as `HF_RUNTIME_READ_AS` (no image or command of its own)
    runtime_read: bool = False


def _map(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TemplateShapeError(field, Phrase("read.missing") if value is None else Phrase(
            "read.expected_got", {"what": Phrase("read.a.mapping"), "got": Phrase("read.quoted", {"text": type(value).__name__})}))
    return value


def _pod_spec(template: Any, field: str) -> dict[str, Any]:
    spec = _map(_map(template, field).get("spec"), f"{field}.spec")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        raise TemplateShapeError(f"{field}.spec.containers", _NOT_CONTAINERS)
    return spec


def pod_sites(obj: Any) -> tuple[PodSite, ...]:
    """Where `obj` (a Kubernetes object as JSON) declares its pods, in the order they are read
    (a LeaderWorkerSet's leader first). Raises TemplateShapeError naming the field."""
    obj = _map(obj, "object")
    kind = obj.get("kind") or "Deployment"
    spec = _map(obj.get("spec"), "spec")
    if kind in ("Deployment", "StatefulSet"):
        return (PodSite("template", "/spec/template/spec", _pod_spec(spec.get("template"), "spec.template")),)
    if kind == "LeaderWorkerSet":
        lwt = _map(spec.get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
        worker = _pod_spec(lwt.get("workerTemplate"), "spec.leaderWorkerTemplate.workerTemplate")
        worker_site = PodSite("worker", "/spec/leaderWorkerTemplate/workerTemplate/spec", worker,
                              shared=lwt.get("leaderTemplate") is None)
        if lwt.get("leaderTemplate") is None:
            return (worker_site,)
        leader = _pod_spec(lwt.get("leaderTemplate"), "spec.leaderWorkerTemplate.leaderTemplate")
        return PodSite("leader", "/spec/leaderWorkerTemplate/leaderTemplate/spec", leader), worker_site
    if kind == "InferenceService":
        predictor = _map(spec.get("predictor"), "spec.predictor")
        if predictor.get("containers") is not None:
            containers = predictor.get("containers")
            if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
                raise TemplateShapeError("spec.predictor.containers", _NOT_CONTAINERS)
            return (PodSite("predictor", "/spec/predictor", predictor),)
        model = _map(predictor.get("model"), "spec.predictor.model")
        container = copy.deepcopy(model)
        container.setdefault("name", KSERVE_CONTAINER)
        read_as = False
        fmt = model.get("modelFormat")
        if not model.get("image") and not model.get("command") and isinstance(fmt, dict) \
                and str(fmt.get("name") or "").lower() == "huggingface":
            container["image"] = HF_RUNTIME_READ_AS
            read_as = True
        return (PodSite("model", "/spec/predictor", {"containers": [container]}, runtime_read=read_as),)
    raise TemplateShapeError("kind", Phrase("read.one_of", {"choices": ", ".join(TARGET_KINDS),
                                                            "got": Phrase("read.quoted", {"text": repr(kind)})}))


def container_pointer(site: PodSite, index: int) -> str:
    """The JSON pointer of container `index` of `site` on the object itself."""
    if site.role == "model":
        return "/spec/predictor/model"
    return f"{site.pod_path}/containers/{index}"


def deployment_view(obj: dict[str, Any], site: PodSite) -> dict[str, Any]:
    """`site`'s pods as a Deployment-shaped object (kind, metadata and replicas of `obj`), for
    the readers and editors that take a Deployment's `spec.template.spec`."""
    spec = obj.get("spec") if isinstance(obj.get("spec"), dict) else {}
    replicas = spec.get("replicas")
    if obj.get("kind") == "InferenceService":
        replicas = (spec.get("predictor") or {}).get("minReplicas")
    view_spec: dict[str, Any] = {"template": {"spec": copy.deepcopy(site.pod_spec)}}
    if isinstance(replicas, int) and not isinstance(replicas, bool):
        view_spec["replicas"] = replicas
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": copy.deepcopy(obj.get("metadata") or {}),
            "spec": view_spec}


VIEW_CONTAINERS = "/spec/template/spec/containers/"


def to_object_pointer(site: PodSite, pointer: str) -> str:
    """A pointer on the view (`/spec/template/spec/containers/0/args/3`) as one on the object."""
    if not pointer.startswith(VIEW_CONTAINERS):
        raise TemplateShapeError(pointer, Phrase("read.not_in_container"))
    index, _, rest = pointer[len(VIEW_CONTAINERS):].partition("/")
    return container_pointer(site, int(index)) + (f"/{rest}" if rest else "")
