"""How tests/data/crd_schemas/{inferenceservice-serving-v1beta1,leaderworkerset-leaderworkerset-v1,
application-argoproj-v1alpha1}.json were cut from the upstream CRDs: `git show TAG:PATH` of each
repository (named in SPECS and in each schema's x-gpumem-source) into ./isvc.yaml, ./lws.yaml, ./app.yaml,
then `python -m tests.support.crd_cut`. Only the fields gpumem reads or writes are kept, with their
upstream types, enums and required fields."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support import yaml_c

CONTAINER = ["name", "image", "args", "command", "env", "resources"]
def pod(prefix):
    return [prefix + ".metadata", prefix + ".spec.containers"] + [f"{prefix}.spec.containers[].{c}" for c in CONTAINER]
SPECS = {
 "isvc": ("serving.kserve.io", "v1beta1", "InferenceService", "kserve/kserve", "v0.20.0",
          "config/crd/full/serving.kserve.io_inferenceservices.yaml",
          ["spec.predictor.minReplicas", "spec.predictor.maxReplicas", "spec.predictor.model",
           "spec.predictor.model.modelFormat", "spec.predictor.model.runtime", "spec.predictor.model.storageUri",
           "spec.predictor.model.args", "spec.predictor.model.command", "spec.predictor.model.env",
           "spec.predictor.model.resources", "spec.predictor.model.name", "spec.predictor.model.image",
           "spec.predictor.containers"] + [f"spec.predictor.containers[].{c}" for c in CONTAINER],
          "inferenceservice-serving-v1beta1.json"),
 "lws": ("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet", "kubernetes-sigs/lws", "v0.9.0",
         "config/crd/bases/leaderworkerset.x-k8s.io_leaderworkersets.yaml",
         ["spec.replicas", "spec.startupPolicy", "spec.leaderWorkerTemplate.size", "spec.leaderWorkerTemplate.restartPolicy", *pod("spec.leaderWorkerTemplate.leaderTemplate"), *pod("spec.leaderWorkerTemplate.workerTemplate")],
         "leaderworkerset-leaderworkerset-v1.json"),
 "app": ("argoproj.io", "v1alpha1", "Application", "argoproj/argo-cd", "v3.5.1", "manifests/crds/application-crd.yaml",
         ["spec.project", "spec.destination.server", "spec.destination.name", "spec.destination.namespace",
          "spec.source.repoURL", "spec.source.path", "spec.source.targetRevision", "spec.source.chart",
          "spec.source.helm.valueFiles", "spec.source.helm.values", "spec.source.kustomize.patches",
          "spec.syncPolicy.automated.prune", "spec.syncPolicy.automated.selfHeal",
          "spec.syncPolicy.automated.allowEmpty", "spec.syncPolicy.syncOptions"],
         "application-argoproj-v1alpha1.json"),
}
SCALAR = ("type", "format", "enum", "pattern", "minimum", "maximum", "minLength", "maxLength", "minItems",
          "maxItems", "description")
def convert(node, path, keep, deep):
    out = {}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    for k in SCALAR:
        if k in node and k not in out:
            out[k] = node[k]
    if "description" in out:
        out["description"] = out["description"].split("\n")[0][:200]
    if deep:  # a kept leaf: its whole subtree in JSON Schema terms
        kids = {n: convert(c, f"{path}.{n}", keep, True) for n, c in node.get("properties", {}).items()}
    else:
        kids = {n: convert(c, f"{path}.{n}", keep, f"{path}.{n}".lstrip(".") in keep and _small(c))
                for n, c in node.get("properties", {}).items()
                if any(k == f"{path}.{n}".lstrip(".") or k.startswith(f"{path}.{n}".lstrip(".") + ".")
                       or k.startswith(f"{path}.{n}".lstrip(".") + "[]") for k in keep)}
    if kids:
        out["properties"] = kids
        req = [r for r in node.get("required", []) if r in kids or r in node.get("properties", {})]
        if req:
            out["required"] = req
            for r in req:  # a required field is kept, with its type
                if r not in kids:
                    out["properties"][r] = convert(node["properties"][r], f"{path}.{r}", keep, False)
    elif node.get("required"):
        out["required"] = node["required"]
        out["properties"] = {r: convert(node["properties"][r], f"{path}.{r}", keep, False) for r in node["required"]}
    if "items" in node:
        out["items"] = convert(node["items"], path + "[]", keep, deep)
    if isinstance(node.get("additionalProperties"), dict) and deep:
        out["additionalProperties"] = convert(node["additionalProperties"], path + ".*", keep, True)
    return out
def _small(c):
    return len(json.dumps(c)) < 6000
def main() -> None:
    for key, (group, version, kind, repo, tag, src, keep, out) in SPECS.items():
        d = yaml_c.safe_load(Path(f"{key}.yaml").read_text(encoding="utf-8"))
        v = next(v for v in d["spec"]["versions"] if v["name"] == version)
        s = v["schema"]["openAPIV3Schema"]
        spec = convert(s["properties"]["spec"], "spec", set(keep), False)
        schema = {
            "$schema": "https://json-schema.org/draft/2020-12/schema",
            "title": f"{kind} ({group}/{version})",
            "description": (f"The fields of the upstream CRD (openAPIV3Schema of {group}/{version}; {repo} {tag}, {src}) "
                            "that gpumem reads or writes and the stand-in API server validates writes against, with their "
                            "upstream types, enums and required fields. Fields not listed are not checked (the real API "
                            "server prunes unknown fields of a structural schema rather than refusing them)."),
            "x-gpumem-source": {"repo": repo, "tag": tag, "path": src},
            "type": "object",
            "required": ["apiVersion", "kind", "metadata", "spec"],
            "properties": {
                "apiVersion": {"const": f"{group}/{version}"},
                "kind": {"const": kind},
                "metadata": {"type": "object", "required": ["name"],
                             "properties": {"name": {"type": "string", "minLength": 1},
                                            "namespace": {"type": "string"}}},
                "spec": spec,
                "status": {"type": "object"},
            },
        }
        text = json.dumps(schema, indent=1, ensure_ascii=False) + "\n"
        (Path(__file__).parents[1] / "data" / "crd_schemas" / out).write_text(text, encoding="utf-8")
        print(out, len(text))


if __name__ == "__main__":
    main()
