"""Pods and events from what kubectl prints: the `kubectl get pods` table, `kubectl describe
pod`, and events tables (`kubectl get events`, describe's Events: section).

On-call pastes these more often than YAML. The table gives each pod's readiness, status and
restarts (`5 (13s ago)` included); `describe` gives each container's state, the reason of its
last termination (OOMKilled, Error) and its restart count; an events table is read by the
events parser. All may sit inside other text (a log, shell prompts around them); lines that
are none of these are passed over.

>>> pods = parse_pod_text(
...     "NAME                        READY   STATUS             RESTARTS      AGE\\n"
...     "vllm-router-7bdd445bbd-7hvhm   0/1     CrashLoopBackOff   5 (13s ago)   3m42s\\n")
>>> pods[0].name, pods[0].restarts, pods[0].containers[0].state_reason
('vllm-router-7bdd445bbd-7hvhm', 5, 'CrashLoopBackOff')
"""

from __future__ import annotations

import re

from collectors.parsers.kube_events import is_event_header, parse_events
from runbooks.model.evidence import ContainerState, K8sEvent, PodState

_TABLE_HEADER = re.compile(r"^\s*(NAMESPACE\s+)?NAME\s+READY\s+STATUS\s+RESTARTS\b")
_ROW = re.compile(
    r"^\s*(?:(?P<ns>\S+)\s+)?(?:pods?/)?(?P<name>[a-z0-9][a-z0-9.\-]{0,252})\s+(?P<ready>\d+)/(?P<total>\d+)\s+"
    r"(?P<status>[A-Za-z:]+(?:\(\S+\))?)\s+(?P<restarts>\d+)(?:\s+\([^)]*\))?(?:\s+\S+)*\s*$"
)
#: STATUS words: container state, and whether the reason is the last termination's
_WAITING = frozenset({"CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "ContainerCreating", "Pending",
                      "PodInitializing", "CreateContainerConfigError", "CreateContainerError"})
_TERMINATED = frozenset({"OOMKilled", "Error", "Completed", "ContainerCannotRun", "Terminating", "Evicted"})

#: the pod phase a STATUS word implies (a crash-looping pod is still Running)
_PHASES = {"Pending": "Pending", "ContainerCreating": "Pending", "PodInitializing": "Pending",
           "ImagePullBackOff": "Pending", "ErrImagePull": "Pending", "Completed": "Succeeded", "Evicted": "Failed"}

_DESCRIBE_NAME = re.compile(r"^Name:\s+(\S+)\s*$")
_FIELD = re.compile(r"^(\s*)([A-Z][A-Za-z ]{1,30}):\s*(.*?)\s*$")
_CONTAINER = re.compile(r"^  ([a-z0-9][a-z0-9\-]{0,62}):\s*$")
#: rows an events table may run to before it is read (a paste never holds more)
_MAX_EVENT_ROWS = 2000


def _state_of(status: str) -> tuple[str | None, str | None, str | None]:
    """(state, state reason, last termination reason) a STATUS word implies."""
    if status == "Running":
        return "running", None, None
    if status in _WAITING:
        return "waiting", status, None
    if status in _TERMINATED:
        return "terminated", status, status if status in ("OOMKilled", "Error") else None
    return None, status, None


class PodTextReader:
    """Feeds on lines; `result()` is every pod a pods table or a describe output showed."""

    def __init__(self) -> None:
        self._events: list[K8sEvent] = []
        self._event_block: list[str] | None = None
        self._last_name: str | None = None
        self._table = False
        self._table_ns = False
        self._pods: dict[tuple[str | None, str], PodState] = {}
        self._describe: dict | None = None
        self._container: dict | None = None
        self._section: str | None = None

    def feed(self, line: str) -> None:
        if self._event_block is not None:
            if line.strip() and len(self._event_block) < _MAX_EVENT_ROWS:
                self._event_block.append(line)
                return
            self._close_events()
        if is_event_header(line):
            self._event_block = [self._last_name, line] if self._last_name else [line]
            return
        if line.startswith("Name:"):
            self._last_name = line
        if _TABLE_HEADER.match(line):
            self._close_describe()
            self._table, self._table_ns = True, line.lstrip().startswith("NAMESPACE")
            return
        if self._table:
            if self._row(line):
                return
            self._table = False
        name = _DESCRIBE_NAME.match(line)
        if name:
            self._close_describe()
            self._describe = {"name": name.group(1), "containers": []}
            return
        if self._describe is not None:
            self._describe_line(line)

    # ------------------------------------------------------------------ table

    def _row(self, line: str) -> bool:
        m = _ROW.match(line)
        if m is None or (m.group("ns") is not None) != self._table_ns:
            return False
        state, reason, last = _state_of(m.group("status"))
        restarts = int(m.group("restarts"))
        container = ContainerState(name=m.group("name"), restart_count=restarts,
                                   ready=int(m.group("ready")) >= int(m.group("total")) > 0,
                                   state=state, state_reason=reason, last_termination_reason=last)
        phase = _PHASES.get(m.group("status"), "Running" if state else None)
        self._add(PodState(name=m.group("name"), namespace=m.group("ns"), phase=phase, containers=(container,)))
        return True

    def _add(self, pod: PodState) -> None:
        self._pods[(pod.namespace, pod.name)] = pod

    # --------------------------------------------------------------- describe

    def _describe_line(self, line: str) -> None:
        pod = self._describe
        assert pod is not None
        if line.startswith("Events:") or (line and not line[0].isspace() and not _FIELD.match(line)):
            self._close_describe()
            return
        container = _CONTAINER.match(line)
        if container and self._section in ("Containers", "Init Containers"):
            self._container = {"name": container.group(1)}
            if self._section == "Containers":
                pod["containers"].append(self._container)
            return
        field = _FIELD.match(line)
        if field is None:
            return
        indent, key, value = len(field.group(1)), field.group(2), field.group(3)
        if indent == 0:
            self._section = key
            self._container = None
            if key in ("Namespace", "Node", "Status"):
                pod[key] = value.split("/")[0] if key == "Node" else value
            return
        c = self._container
        if c is None:
            return
        if key == "State":
            c["state"], c["_in"] = value.lower() or None, "state"
        elif key == "Last State":
            c["_in"] = "last"
        elif key == "Reason":
            c["last_reason" if c.get("_in") == "last" else "reason"] = value
        elif key == "Exit Code" and c.get("_in") == "last" and value.isdigit():
            c["exit_code"] = int(value)
        elif key == "Ready":
            c["ready"] = value == "True"
        elif key == "Restart Count" and value.isdigit():
            c["restarts"] = int(value)

    def _close_describe(self) -> None:
        pod, self._describe, self._container, self._section = self._describe, None, None, None
        if pod is None:
            return
        containers = tuple(
            ContainerState(name=c["name"], restart_count=c.get("restarts", 0), ready=c.get("ready"),
                           state=c.get("state"), state_reason=c.get("reason"),
                           last_termination_reason=c.get("last_reason"), last_exit_code=c.get("exit_code"))
            for c in pod["containers"]
        )
        self._add(PodState(name=pod["name"], namespace=pod.get("Namespace"), node=pod.get("Node"),
                           phase=pod.get("Status"), containers=containers))

    def _close_events(self) -> None:
        block, self._event_block = self._event_block, None
        if block:
            self._events.extend(parse_events("\n".join(block)))

    def result(self) -> tuple[PodState, ...]:
        self._close_describe()
        return tuple(self._pods.values())

    def events(self) -> tuple[K8sEvent, ...]:
        self._close_events()
        return tuple(self._events)


def parse_pod_text(text: str) -> tuple[PodState, ...]:
    """Pods from kubectl's printed output (tables and describe); () when there is none."""
    reader = PodTextReader()
    for line in text.splitlines():
        reader.feed(line)
    return reader.result()


def parse_kube_text(text: str) -> tuple[tuple[PodState, ...], tuple[K8sEvent, ...]]:
    """Pods and events from kubectl's printed output; empty tuples when there is none."""
    reader = PodTextReader()
    for line in text.splitlines():
        reader.feed(line)
    return reader.result(), reader.events()
