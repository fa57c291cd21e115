"""The inference server's memory flags, read from a Kubernetes container.

>>> cfg = server_config_from_container({
...     "image": "vllm/vllm-openai:v0.6.4",
...     "args": ["Qwen/Qwen2.5-7B-Instruct", "--max_model_len=8192", "-tp", "2"]})
>>> cfg.engine, cfg.engine_version, cfg.launch_form, cfg.max_model_len, cfg.tensor_parallel_size
('vllm', '0.6.4', 'vllm-entrypoint-args', 8192, 2)

The container's shape (command, args, env as Kubernetes resolves it) is read here; the engine's
command line inside it, as the engine reads it, is `runbooks.launch` (a process argv too:
`runbooks.launch.argv.parse_command_line`).
"""

from __future__ import annotations

from typing import Any

from collectors.errors import said
from collectors.parsers.kube_fields import as_list, as_mapping, as_str, fail
from runbooks.launch.argv import config_from_launch
from runbooks.launch.forms import expand_k8s_refs, locate_launch
from runbooks.model.evidence import ServerConfig


def server_config_from_container(
    container: dict[str, Any],
    pod_spec: dict[str, Any] | None = None,
    source: str = "deployment.yaml",
    *,
    path: str = "container",
) -> ServerConfig | None:
    """The server flags of one k8s container (YAML/JSON shape), None when it runs no known server.

    `pod_spec` is the enclosing pod spec when known; it is accepted so callers can pass the
    whole pod, and checked for shape only. `path` prefixes field paths in ParseError messages.
    Raises ParseError (naming `source`) when the container does not have the k8s shape.
    """
    spec = as_mapping(container, path, source)
    as_mapping(pod_spec, "podSpec", source)
    image = as_str(spec.get("image"), f"{path}.image", source)
    env, unresolved = _container_env(spec, path, source)
    command = [expand_k8s_refs(w, env) for w in _words(spec.get("command"), f"{path}.command", source)]
    args = [expand_k8s_refs(w, env) for w in _words(spec.get("args"), f"{path}.args", source)]
    launch = locate_launch(command, args, image, dict(env))
    if launch is None:
        return None
    return config_from_launch(launch, source, image, unresolved)


def _words(value: Any, path: str, source: str) -> list[str]:
    words = []
    for i, item in enumerate(as_list(value, path, source)):
        text = as_str(item, f"{path}[{i}]", source)
        words.append(text if text is not None else "")
    return words


def _container_env(spec: dict[str, Any], path: str, source: str) -> tuple[dict[str, str], frozenset[str]]:
    """Resolved env values (expanded in order, as k8s does) and names whose value is not in the spec."""
    env: dict[str, str] = {}
    unresolved: set[str] = set()
    for i, item in enumerate(as_list(spec.get("env"), f"{path}.env", source)):
        entry = as_mapping(item, f"{path}.env[{i}]", source)
        name = as_str(entry.get("name"), f"{path}.env[{i}].name", source)
        if not name:
            raise fail(source, f"{path}.env[{i}].name", said("missing"))
        if entry.get("valueFrom") is not None:
            as_mapping(entry["valueFrom"], f"{path}.env[{i}].valueFrom", source)
            unresolved.add(name)
            env.pop(name, None)
            continue
        value = as_str(entry.get("value"), f"{path}.env[{i}].value", source) or ""
        env[name] = expand_k8s_refs(value, env)
        unresolved.discard(name)
    as_list(spec.get("envFrom"), f"{path}.envFrom", source)
    return env, frozenset(unresolved)
