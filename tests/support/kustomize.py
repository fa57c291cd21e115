"""A small kustomize, for rendering deploy/ offline in the tests.

`build(directory)` renders a kustomization the way `kubectl kustomize DIRECTORY` (kustomize v5)
does, for the fields deploy/ uses and nothing more:

- `resources` (YAML files, or directories holding a kustomization) and `components`
  (directories holding a `kind: Component`, whose resources join the parent's and whose
  generators and transformers then act on everything the parent has so far);
- `configMapGenerator` (`files`, `literals`, `behavior` create, replace or merge, `namespace`,
  `options.labels`, `options.disableNameSuffixHash`), with kustomize's content hash appended to
  the name at the end of the build and the references in pod specs renamed to match;
- `patches`: a strategic-merge patch (its target from its own kind and name, or `target`) for
  the lists whose merge key is known here, or a JSON 6902 patch (add, replace, remove) on a
  `target`;
- `namespace` (namespaced kinds only; a RoleBinding or ClusterRoleBinding subject follows a
  ServiceAccount of this build that moved, and a subject named "default" moves with it);
- `labels` (`pairs`, `includeTemplates`; not `includeSelectors`);
- `images` (`newName`, `newTag`, `digest`) on containers and init containers.

Anything else in a kustomization, a patch directive (`$patch`), or a list without a known
merge key in a strategic-merge patch raises `Unsupported`: a new field in deploy/ fails the
tests until it is handled here, instead of rendering wrong. tests/test_deploy_kustomize.py
compares this renderer's output with `kubectl kustomize` on every overlay where kubectl is
installed.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support import yaml_c

KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
SUPPORTED_FIELDS = frozenset({"apiVersion", "kind", "namespace", "labels", "resources", "components",
                              "patches", "images", "configMapGenerator"})
#: kinds without a namespace (the ones that can appear in a gpumem install and their relatives)
CLUSTER_SCOPED = frozenset({
    "Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition", "PersistentVolume",
    "StorageClass", "PriorityClass", "RuntimeClass", "IngressClass", "APIService", "CSIDriver", "CSINode",
    "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration", "Node",
})
#: strategic-merge keys of the lists a patch may merge into, by field name
MERGE_KEYS = {
    "containers": "name", "initContainers": "name", "volumes": "name", "env": "name",
    "volumeMounts": "mountPath", "imagePullSecrets": "name",
}
POD_TEMPLATE_KINDS = frozenset({"Deployment", "DaemonSet", "StatefulSet", "ReplicaSet", "Job"})


class Unsupported(Exception):
    """A kustomization uses something this renderer does not implement."""


@dataclass
class Resource:
    obj: dict[str, Any]
    #: the name before the hash suffix (what references in pod specs use)
    base_name: str = ""
    #: a generated ConfigMap that gets a content hash appended at the end of the build
    hashed: bool = False
    origin: str = ""

    def __post_init__(self) -> None:
        self.base_name = self.base_name or self.name

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        return str(self.obj.get("metadata", {}).get("name", ""))

    @property
    def namespace(self) -> str | None:
        return self.obj.get("metadata", {}).get("namespace")

    @property
    def group(self) -> str:
        api = str(self.obj.get("apiVersion", ""))
        return api.rsplit("/", 1)[0] if "/" in api else ""

    @property
    def version(self) -> str:
        return str(self.obj.get("apiVersion", "")).rsplit("/", 1)[-1]


@dataclass
class _Build:
    resources: list[Resource] = field(default_factory=list)

    def add(self, res: Resource) -> None:
        key = (res.group, res.kind, res.namespace, res.base_name)
        for other in self.resources:
            if (other.group, other.kind, other.namespace, other.base_name) == key:
                raise ValueError(f"{res.origin}: {res.kind} {res.namespace}/{res.base_name} is already "
                                 f"in the build (from {other.origin})")
        self.resources.append(res)


def build(directory: str | Path) -> list[dict[str, Any]]:
    """The objects `kubectl kustomize DIRECTORY` prints, in the order they were accumulated."""
    acc = _Build()
    _accumulate(Path(directory), acc, component=False)
    _add_hashes(acc.resources)
    return [r.obj for r in acc.resources]


def load_kustomization(directory: Path) -> dict[str, Any]:
    for name in KUSTOMIZATION_FILES:
        path = directory / name
        if path.is_file():
            doc = yaml_c.safe_load(path.read_text(encoding="utf-8")) or {}
            unknown = set(doc) - SUPPORTED_FIELDS
            if unknown:
                raise Unsupported(f"{path}: {', '.join(sorted(unknown))}")
            return doc
    raise FileNotFoundError(f"no kustomization in {directory}")


def _accumulate(directory: Path, acc: _Build, component: bool) -> None:
    k = load_kustomization(directory)
    kind = k.get("kind", "Kustomization")
    if kind != ("Component" if component else "Kustomization"):
        raise ValueError(f"{directory}: a {kind} where a {'Component' if component else 'Kustomization'} belongs")
    # a kustomization's own transformers act on what it accumulated; a component's on its parent's
    own = acc if component else _Build()
    for entry in k.get("resources") or []:
        path = directory / entry
        if path.is_dir():
            _accumulate(path, own, component=False)
        else:
            for doc in yaml_c.safe_load_all(path.read_text(encoding="utf-8")):
                if doc:
                    own.add(Resource(doc, origin=str(path)))
    for entry in k.get("components") or []:
        _accumulate(directory / entry, own, component=True)
    for gen in k.get("configMapGenerator") or []:
        _config_map(directory, gen, own, k.get("namespace"))
    for patch in k.get("patches") or []:
        _patch(directory, patch, own.resources)
    if k.get("namespace"):
        _set_namespace(own.resources, k["namespace"])
    for spec in k.get("labels") or []:
        _labels(own.resources, spec)
    for image in k.get("images") or []:
        _image(own.resources, image)
    if not component:
        for res in own.resources:
            acc.add(res)


# ----------------------------------------------------------------------------- generators


def _config_map(directory: Path, gen: dict[str, Any], acc: _Build, namespace: str | None) -> None:
    unknown = set(gen) - {"name", "namespace", "behavior", "files", "literals", "options"}
    options = gen.get("options") or {}
    unknown |= set(options) - {"labels", "disableNameSuffixHash"}
    if unknown:
        raise Unsupported(f"configMapGenerator {gen.get('name')}: {', '.join(sorted(unknown))}")
    data: dict[str, str] = {}
    for entry in gen.get("files") or []:
        key, _, rel = entry.rpartition("=")
        path = directory / rel
        data[key or path.name] = path.read_text(encoding="utf-8")
    for entry in gen.get("literals") or []:
        key, _, value = entry.partition("=")
        data[key] = value
    behavior = gen.get("behavior", "create")
    ns = gen.get("namespace") or namespace
    if behavior == "create":
        meta: dict[str, Any] = {"name": gen["name"]}
        if ns:
            meta["namespace"] = ns
        if options.get("labels"):
            meta["labels"] = dict(options["labels"])
        acc.add(Resource({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data},
                         hashed=not options.get("disableNameSuffixHash"), origin=str(directory)))
        return
    if behavior not in ("replace", "merge"):
        raise Unsupported(f"configMapGenerator {gen['name']}: behavior {behavior}")
    found = [r for r in acc.resources if r.kind == "ConfigMap" and r.base_name == gen["name"] and r.namespace == ns]
    if len(found) != 1:
        raise ValueError(f"{directory}: configMapGenerator {gen['name']} ({behavior}) finds no ConfigMap "
                         f"{ns}/{gen['name']} to {behavior}")
    target = found[0].obj
    target["data"] = data if behavior == "replace" else {**(target.get("data") or {}), **data}
    if options.get("labels"):
        target["metadata"].setdefault("labels", {}).update(options["labels"])


def _hash(obj: dict[str, Any]) -> str:
    """kustomize's name suffix: sha256 of the ConfigMap's kind, data (and binaryData) as Go's
    json.Marshal writes them (its name is read from a path that never matches: always ""), the
    first 10 hex digits with 0 1 3 a e swapped for letters."""
    m: dict[str, Any] = {"kind": "ConfigMap", "name": "", "data": obj.get("data") or {}}
    if obj.get("binaryData"):
        m["binaryData"] = obj["binaryData"]
    text = json.dumps(m, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    for char, escaped in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"),
                          ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        text = text.replace(char, escaped)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:10].translate(str.maketrans("013ae", "ghkmt"))


def _add_hashes(resources: list[Resource]) -> None:
    for res in resources:
        if not res.hashed:
            continue
        new = f"{res.base_name}-{_hash(res.obj)}"
        res.obj["metadata"]["name"] = new
        for other in resources:
            if other.namespace == res.namespace:
                for pod in _pod_specs(other.obj):
                    _rename_config_map(pod, res.base_name, new)


def _rename_config_map(pod: dict[str, Any], old: str, new: str) -> None:
    def fix(ref: dict[str, Any] | None) -> None:
        if ref and ref.get("name") == old:
            ref["name"] = new

    for volume in pod.get("volumes") or []:
        fix(volume.get("configMap"))
        for source in (volume.get("projected") or {}).get("sources") or []:
            fix(source.get("configMap"))
    for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
        for env in container.get("env") or []:
            fix((env.get("valueFrom") or {}).get("configMapKeyRef"))
        for source in container.get("envFrom") or []:
            fix(source.get("configMapRef"))


def _pod_specs(obj: dict[str, Any]) -> list[dict[str, Any]]:
    kind, spec = obj.get("kind"), obj.get("spec") or {}
    if kind in POD_TEMPLATE_KINDS:
        return [spec.get("template", {}).get("spec") or {}]
    if kind == "CronJob":
        return [spec.get("jobTemplate", {}).get("spec", {}).get("template", {}).get("spec") or {}]
    if kind == "Pod":
        return [spec]
    return []


# ----------------------------------------------------------------------------- patches


def _patch(directory: Path, entry: dict[str, Any], resources: list[Resource]) -> None:
    unknown = set(entry) - {"path", "patch", "target"}
    if unknown:
        raise Unsupported(f"patches: {', '.join(sorted(unknown))}")
    text = (directory / entry["path"]).read_text(encoding="utf-8") if "path" in entry else entry["patch"]
    body = yaml_c.safe_load(text)
    target = entry.get("target")
    if isinstance(body, list):
        if not target:
            raise ValueError(f"{directory}: a JSON 6902 patch needs a target")
        matched = _matching(resources, target)
        for res in matched:
            for op in body:
                _json_patch_op(res.obj, op)
    else:
        if target is None:
            meta = body.get("metadata") or {}
            api = str(body.get("apiVersion", ""))
            target = {"kind": body["kind"], "name": meta["name"],
                      "group": api.rsplit("/", 1)[0] if "/" in api else "", "version": api.rsplit("/", 1)[-1]}
            if meta.get("namespace"):
                target["namespace"] = meta["namespace"]
        matched = _matching(resources, target)
        for res in matched:
            patch = copy.deepcopy(body)
            for key in ("apiVersion", "kind"):
                patch.pop(key, None)
            meta = patch.get("metadata") or {}
            meta.pop("name", None)
            meta.pop("namespace", None)
            _merge(res.obj, patch, "")
    if not matched:
        raise ValueError(f"{directory}: patch target {target} matches nothing")


def _matching(resources: list[Resource], target: dict[str, Any]) -> list[Resource]:
    unknown = set(target) - {"group", "version", "kind", "name", "namespace"}
    if unknown:
        raise Unsupported(f"patch target: {', '.join(sorted(unknown))}")
    found = []
    for res in resources:
        if "kind" in target and res.kind != target["kind"]:
            continue
        if "group" in target and res.group != target["group"]:
            continue
        if "version" in target and res.version != target["version"]:
            continue
        if "name" in target and not re.fullmatch(target["name"], res.base_name):
            continue
        if "namespace" in target and res.namespace != target["namespace"]:
            continue
        found.append(res)
    return found


def _merge(base: dict[str, Any], patch: dict[str, Any], where: str) -> None:
    """A strategic-merge patch: maps merge, null deletes, lists of scalars are replaced, lists of
    maps merge by their key (new entries first, as kustomize places them)."""
    for key, value in patch.items():
        at = f"{where}.{key}"
        if key.startswith("$"):
            raise Unsupported(f"patch directive {key} at {at}")
        if value is None:
            base.pop(key, None)
        elif isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value, at)
        elif isinstance(value, list) and isinstance(base.get(key), list) and any(isinstance(v, dict) for v in value):
            if key not in MERGE_KEYS:
                raise Unsupported(f"no merge key known for the list at {at}")
            merge_key = MERGE_KEYS[key]
            existing = {item.get(merge_key): item for item in base[key] if isinstance(item, dict)}
            added = []
            for item in value:
                if item.get(merge_key) in existing:
                    _merge(existing[item[merge_key]], {k: v for k, v in item.items() if k != merge_key}, at)
                else:
                    added.append(copy.deepcopy(item))
            base[key] = added + base[key]
        else:
            base[key] = copy.deepcopy(value)


def _json_patch_op(obj: dict[str, Any], op: dict[str, Any]) -> None:
    kind = op.get("op")
    if kind not in ("add", "replace", "remove"):
        raise Unsupported(f"JSON 6902 op {kind}")
    parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
    parent: Any = obj
    for part in parts[:-1]:
        parent = parent[int(part)] if isinstance(parent, list) else parent[part]
    last = parts[-1]
    if isinstance(parent, list):
        index = len(parent) if last == "-" else int(last)
        if kind == "add":
            parent.insert(index, copy.deepcopy(op["value"]))
        elif kind == "replace":
            parent[index] = copy.deepcopy(op["value"])
        else:
            del parent[index]
    elif kind == "remove":
        del parent[last]
    else:
        if kind == "replace" and last not in parent:
            raise ValueError(f"JSON 6902 replace: {op['path']} does not exist")
        parent[last] = copy.deepcopy(op["value"])


# ----------------------------------------------------------------------------- transformers


def _set_namespace(resources: list[Resource], namespace: str) -> None:
    moved = {(r.namespace, r.name) for r in resources if r.kind == "ServiceAccount"}
    for res in resources:
        if res.kind not in CLUSTER_SCOPED:
            res.obj.setdefault("metadata", {})["namespace"] = namespace
    for res in resources:
        if res.kind not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        for subject in res.obj.get("subjects") or []:
            if subject.get("kind") != "ServiceAccount":
                continue
            if subject.get("name") == "default" or (subject.get("namespace"), subject.get("name")) in moved:
                subject["namespace"] = namespace


def _labels(resources: list[Resource], spec: dict[str, Any]) -> None:
    unknown = set(spec) - {"pairs", "includeTemplates", "includeSelectors"}
    if unknown or spec.get("includeSelectors"):
        raise Unsupported(f"labels: {', '.join(sorted(unknown)) or 'includeSelectors'}")
    pairs = spec.get("pairs") or {}
    for res in resources:
        res.obj.setdefault("metadata", {}).setdefault("labels", {}).update(pairs)
        if spec.get("includeTemplates") and res.kind in POD_TEMPLATE_KINDS:
            template = res.obj["spec"]["template"].setdefault("metadata", {})
            template.setdefault("labels", {}).update(pairs)


def split_image(image: str) -> tuple[str, str | None, str | None]:
    """("registry:5000/gpumem", "0.1.0", None) from "registry:5000/gpumem:0.1.0"; a digest third."""
    name, _, digest = image.partition("@")
    tag = None
    colon = name.rfind(":")
    if colon > name.rfind("/"):
        name, tag = name[:colon], name[colon + 1:]
    return name, tag, digest or None


def _image(resources: list[Resource], entry: dict[str, Any]) -> None:
    unknown = set(entry) - {"name", "newName", "newTag", "digest"}
    if unknown:
        raise Unsupported(f"images: {', '.join(sorted(unknown))}")
    for res in resources:
        for pod in _pod_specs(res.obj):
            for container in (pod.get("containers") or []) + (pod.get("initContainers") or []):
                name, tag, digest = split_image(container.get("image", ""))
                if name != entry["name"]:
                    continue
                name = entry.get("newName", name)
                if "digest" in entry:
                    container["image"] = f"{name}@{entry['digest']}"
                    continue
                tag = entry.get("newTag", tag)
                container["image"] = name + (f":{tag}" if tag else "") + (f"@{digest}" if digest and "newTag" not in entry else "")
