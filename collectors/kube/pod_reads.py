"""What to read from each pod, and how to keep what is read free of secrets.

- `metrics_ports`: where the server serves /metrics;
- `restarted` / `started`: whether a previous and a current log exist to ask for;
- `scrub`: drop managedFields and last-applied copies, redact secret-looking env values;
- `trim_pod`: keep only what co-location needs of another team's pod.

>>> metrics_ports({"ports": [{"containerPort": 8000}]}, None)
[8000]
"""

from __future__ import annotations

import copy
import re
from typing import Any

from collectors.errors import ParseError
from collectors.parsers.kube_pod_spec import pick_server_container
from runbooks.model.evidence import ServerConfig

#: where each engine serves HTTP (and /metrics) in its pod unless told otherwise
ENGINE_PORTS = {"vllm": 8000, "tgi": 80, "sglang": 30000}
#: TGI 3.3+ also serves /metrics on a dedicated Prometheus port
TGI_PROMETHEUS_PORT = 9000
REDACTED = "<redacted>"
#: whole words of a variable name, so MAX_TOTAL_TOKENS (a server flag) is kept and HF_TOKEN is not
_SECRET_NAME = re.compile(
    r"(?:^|_)(?:TOKEN|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|SECRET_?KEY|PRIVATE_?KEY|CREDENTIALS?|AUTH)"
    r"(?:_|$)", re.IGNORECASE)
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
    """A copy without managedFields and last-applied annotations, with the values of
    secret-looking environment variables (HF_TOKEN, DB_PASSWORD, OPENAI_API_KEY, ...) redacted.

    >>> scrub({"env": [{"name": "HF_TOKEN", "value": "hf_abc"}]})["env"][0]["value"]
    '<redacted>'
    """
    out = copy.deepcopy(obj)
    meta = out.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict):
            for key in _DROPPED_ANNOTATIONS:
                annotations.pop(key, None)
    _redact_env(out)
    return out


def _redact_env(value: Any) -> None:
    if isinstance(value, dict):
        env = value.get("env")
        if isinstance(env, list):
            for var in env:
                if isinstance(var, dict) and "value" in var and _SECRET_NAME.search(str(var.get("name", ""))):
                    var["value"] = REDACTED
        for item in value.values():
            _redact_env(item)
    elif isinstance(value, list):
        for item in value:
            _redact_env(item)


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
