"""What to read from each pod, and how to keep what is read free of secrets.

- `metrics_ports`: where the server serves /metrics;
- `restarted` / `started`: whether a previous and a current log exist to ask for;
- `scrub`: drop managedFields and last-applied copies, mask credentials (`runbooks.model.secrets`):
  environment variables by name and by value shape, secret server flags in commands and args
  (lists, `--flag=value`, `--flag value`, `sh -c` scripts), credential shapes in every other string;
- `trim_pod`: keep only what co-location needs of another team's pod.

>>> metrics_ports({"ports": [{"containerPort": 8000}]}, None)
[8000]
"""

from __future__ import annotations

import copy
from typing import Any

from collectors.errors import ParseError
from collectors.parsers.kube_pod_spec import pick_server_container
from runbooks.model.evidence import ServerConfig
from runbooks.model.secrets import REDACTED, redact_argv, redact_text, secret_name, secret_value

#: where each engine serves HTTP (and /metrics) in its pod unless told otherwise
ENGINE_PORTS = {"vllm": 8000, "tgi": 80, "sglang": 30000}
#: TGI 3.3+ also serves /metrics on a dedicated Prometheus port
TGI_PROMETHEUS_PORT = 9000
_DROPPED_ANNOTATIONS = ("kubectl.kubernetes.io/last-applied-configuration",)


def metrics_ports(container: dict[str, Any], config: ServerConfig | None, override: int | None = None) -> list[int]:
    """Ports to try for /metrics, best first: a port named "metrics", the server's --port (else
    the first declared port, else the engine's default); for TGI then its Prometheus port."""
    if override:
        return [override]
    declared = [p for p in container.get("ports") or [] if isinstance(p, dict)]
    ports: list[Any] = [p.get("containerPort") for p in declared if p.get("name") in ("metrics", "prometheus")]
    engine = config.engine if config is not None else None
    if config is not None and config.port:
        ports.append(config.port)
    elif declared:
        ports.append(declared[0].get("containerPort"))
    elif engine in ENGINE_PORTS:
        ports.append(ENGINE_PORTS[engine])
    if engine == "tgi":
        flag = (config.flags if config is not None else {}).get("prometheus-port", "")
        ports.append(int(flag) if flag.isdigit() else TGI_PROMETHEUS_PORT)
    out: list[int] = []
    for port in ports:
        if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536 and port not in out:
            out.append(port)
    return out


def server_container(pod: dict[str, Any]) -> tuple[int | None, ServerConfig | None]:
    """(index, flags) of the pod's server container; the first container when the spec is odd."""
    spec = pod.get("spec") or {}
    try:
        return pick_server_container(spec, "spec", "kube:pods")
    except ParseError:
        return (0, None) if spec.get("containers") else (None, None)


def container_status(pod: dict[str, Any], container: str | None) -> dict[str, Any]:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if isinstance(status, dict) and status.get("name") == container:
            return status
    return {}


def restarted(status: dict[str, Any]) -> bool:
    """A previous run exists: the container restarted or has a last termination."""
    last = (status.get("lastState") or {}).get("terminated")
    return bool(status.get("restartCount")) or last is not None


def started(status: dict[str, Any]) -> bool:
    """A current log exists: the container has run (a first start still waiting has none)."""
    state = status.get("state") or {}
    return bool(status) and not (state.get("waiting") is not None and not status.get("restartCount"))


def scrub(obj: dict[str, Any]) -> dict[str, Any]:
    """A copy without managedFields and last-applied annotations, with credentials masked:
    the values of secret-named environment variables (HF_TOKEN, DB_PASSWORD, WANDB_KEY, ...)
    and of credential-shaped ones (sk-..., hf_..., a JWT, ...), the values of secret server
    flags (--api-key, --hf-token, ...) in every command and args list and `sh -c` script, and
    credential shapes in every other string. Flags triage reads (--max-num-batched-tokens,
    --kv-cache-dtype, ...) are left as they are. Scrubbing a scrubbed object changes nothing.

    >>> scrub({"env": [{"name": "HF_TOKEN", "value": "hf_abc"}]})["env"][0]["value"]
    '<redacted>'
    >>> scrub({"args": ["--api-key", "abc", "--max-num-batched-tokens", "8192"]})["args"]
    ['--api-key', '<redacted>', '--max-num-batched-tokens', '8192']
    """
    out = copy.deepcopy(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in _DROPPED_ANNOTATIONS:
                annotations.pop(key, None)
    _mask(out)
    return out


def _mask(value: Any) -> None:
    """Mask credentials in a decoded object, in place."""
    if isinstance(value, dict):
        done = _mask_launch(value) | _mask_env(value)
        for key, item in value.items():
            if key in done:
                continue
            if isinstance(item, str):
                value[key] = redact_text(item)
            else:
                _mask(item)
    elif isinstance(value, list):
        for i, item in enumerate(value):
            if isinstance(item, str):
                value[i] = redact_text(item)
            else:
                _mask(item)


def _mask_launch(obj: dict[str, Any]) -> set[str]:
    """A container's (or an exec probe's) command and args, read as one command line so a flag
    at the end of `command` and its value at the start of `args` are seen together."""
    command, args = obj.get("command"), obj.get("args")
    lists = {k: v for k, v in (("command", command), ("args", args)) if isinstance(v, list)}
    if not lists:
        return set()
    words = redact_argv([*lists.get("command", []), *lists.get("args", [])])
    if "command" in lists:
        obj["command"], words = words[: len(lists["command"])], words[len(lists["command"]):]
    if "args" in lists:
        obj["args"] = words
    return set(lists)


def _mask_env(obj: dict[str, Any]) -> set[str]:
    env = obj.get("env")
    if not isinstance(env, list):
        return set()
    for var in env:
        if not isinstance(var, dict):
            continue
        value = var.get("value")
        if isinstance(value, str) and value:
            named = secret_name(str(var.get("name", "")))
            var["value"] = REDACTED if named or secret_value(value) else redact_text(value)
        for key, item in var.items():
            if key in ("name", "value"):
                continue
            if isinstance(item, str):
                var[key] = redact_text(item)
            else:
                _mask(item)
    return {"env"}


def trim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """Only what co-location needs of someone else's pod: no env, no commands, no volumes."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}

    def slim(containers: Any) -> list[dict[str, Any]]:
        return [{"name": c.get("name"), "resources": c.get("resources") or {}}
                for c in containers or [] if isinstance(c, dict)]

    out: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {k: meta[k] for k in ("name", "namespace", "ownerReferences") if k in meta},
        "spec": {"nodeName": spec.get("nodeName"), "containers": slim(spec.get("containers"))},
        "status": {"phase": (pod.get("status") or {}).get("phase")},
    }
    if spec.get("initContainers"):
        out["spec"]["initContainers"] = slim(spec["initContainers"])
    return out
