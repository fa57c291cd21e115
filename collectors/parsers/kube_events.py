"""Kubernetes events from `kubectl get events` (YAML/JSON or the printed table) as K8sEvent.

Table layouts read by header position (messages contain spaces; the last column runs to the
end of the line): `LAST SEEN TYPE REASON OBJECT MESSAGE`, with `-A` (NAMESPACE first),
`-o wide` (… SUBOBJECT SOURCE MESSAGE FIRST SEEN COUNT NAME), the old
`LAST SEEN FIRST SEEN COUNT NAME KIND SUBOBJECT TYPE REASON SOURCE MESSAGE`, `kubectl events`
(`2m (x4 over 10m)` ages), and the "Events:" section of `kubectl describe`.
Relative ages ("3m12s") cannot become instants without the capture time, so they give None.

>>> [e.reason for e in parse_events(
...     "LAST SEEN   TYPE      REASON    OBJECT          MESSAGE\\n"
...     "2m          Warning   BackOff   pod/vllm-0      Back-off restarting failed container\\n")]
['BackOff']
"""

from __future__ import annotations

import dataclasses
import re
from datetime import datetime
from typing import Any

from collectors.errors import ParseError, noun, said
from collectors.parsers.kube_fields import as_int, as_list, as_mapping, as_str, as_time, parse_instant
from collectors.parsers.kube_yaml import load_yaml_documents
from runbooks.model.evidence import K8sEvent, ReadIssue

_HEADER_NAMES = frozenset({
    "NAMESPACE", "LAST SEEN", "FIRST SEEN", "COUNT", "NAME", "KIND", "SUBOBJECT", "TYPE", "REASON",
    "OBJECT", "SOURCE", "MESSAGE", "AGE", "FROM",
})
_AGE_COLUMNS = frozenset({"LAST SEEN", "FIRST SEEN", "AGE"})
#: columns that hold one word, so a row with collapsed spacing can still be split by words
_ONE_WORD = frozenset({"NAMESPACE", "COUNT", "NAME", "KIND", "TYPE", "REASON", "OBJECT"})
_CELL = re.compile(r"\S+(?: \S+)*")
_WORD = re.compile(r"\S+")
_AGE_WORDS = re.compile(r"\S+(?: \(x\d+ over [^)]*\))?")
_REPEATS = re.compile(r"\(x(\d+) over")
_NAME_LINE = re.compile(r"Name:\s+(\S+)")
_EVENT_TYPES = frozenset({"Normal", "Warning"})
_NOTHING = ("No resources found", "No events found")
#: a row of describe's Events section pasted without its header (`Type Reason Age From Message`):
#: the source may be "kubelet, node-1" in older clusters
_HEADERLESS_ROW = re.compile(
    r"^\s*(?P<type>Normal|Warning)\s+(?P<reason>[A-Z][A-Za-z]+)\s+(?P<age>\S+(?: \(x\d+ over [^)]*\))?)\s+"
    r"(?P<source>[a-z][\w.\-]*(?:, [\w.\-]+)?)\s+(?P<message>\S.*?)\s*$"
)
_OBJECT_KINDS = {
    k.lower(): k
    for k in (
        "Pod", "Deployment", "ReplicaSet", "StatefulSet", "DaemonSet", "Node", "Job", "CronJob",
        "Service", "Endpoints", "EndpointSlice", "HorizontalPodAutoscaler", "PersistentVolumeClaim",
        "PersistentVolume", "PodDisruptionBudget", "Ingress", "ConfigMap", "Namespace", "Lease",
        "LeaderWorkerSet", "ScaledObject", "InferenceService",
    )
}

Column = tuple[str, int]


def parse_events(text: str, source: str = "events.txt") -> tuple[K8sEvent, ...]:
    """Events from events.yaml / events.json or a printed events table (unreadable rows skipped)."""
    return parse_events_with_issues(text, source)[0]


def parse_events_with_issues(text: str, source: str = "events.txt") -> tuple[tuple[K8sEvent, ...], tuple[ReadIssue, ...]]:
    """Like `parse_events`, plus one ReadIssue per table row that could not be read."""
    if not isinstance(text, str):
        raise ParseError(source, said("expected", what=noun("text")))
    lines = text.splitlines()
    if any(_header(line) for line in lines):
        return _parse_table(lines, source)
    if any(_HEADERLESS_ROW.match(line) for line in lines):
        return _parse_headerless(lines, source)
    if not text.strip() or text.strip().startswith(_NOTHING):
        return (), ()
    return events_from_objects(load_yaml_documents(text, source), source), ()


def events_from_objects(objects: list[Any], source: str = "events.yaml") -> tuple[K8sEvent, ...]:
    """Event objects (core v1 or events.k8s.io/v1 shape); objects of other kinds are skipped."""
    events = []
    for i, obj in enumerate(as_list(objects, "items", source)):
        item = as_mapping(obj, f"items[{i}]", source)
        if item.get("kind", "Event") == "Event":
            events.append(event_from_object(item, source, path=f"items[{i}]"))
    return tuple(events)


def event_from_object(obj: Any, source: str = "events.yaml", path: str = "") -> K8sEvent:
    """One Event: reason, message/note, type, involvedObject/regarding, count/series, times."""
    at = f"{path}." if path else ""
    event = as_mapping(obj, path, source)
    regarding_key = "involvedObject" if event.get("involvedObject") is not None else "regarding"
    regarding = as_mapping(event.get(regarding_key), f"{at}{regarding_key}", source)
    series = as_mapping(event.get("series"), f"{at}series", source)
    meta = as_mapping(event.get("metadata"), f"{at}metadata", source)

    def time_at(value: Any, field: str) -> datetime | None:
        return as_time(value, f"{at}{field}", source)

    counts = [
        as_int(event.get("count"), f"{at}count", source),
        as_int(series.get("count"), f"{at}series.count", source),
        as_int(event.get("deprecatedCount"), f"{at}deprecatedCount", source),
    ]
    event_time = time_at(event.get("eventTime"), "eventTime")
    first = (
        time_at(event.get("firstTimestamp"), "firstTimestamp")
        or time_at(event.get("deprecatedFirstTimestamp"), "deprecatedFirstTimestamp")
        or event_time
        or time_at(meta.get("creationTimestamp"), "metadata.creationTimestamp")
    )
    lasts = [
        t
        for t in (
            time_at(event.get("lastTimestamp"), "lastTimestamp"),
            time_at(series.get("lastObservedTime"), "series.lastObservedTime"),
            time_at(event.get("deprecatedLastTimestamp"), "deprecatedLastTimestamp"),
        )
        if t is not None
    ]
    message = as_str(event.get("message"), f"{at}message", source)
    if message is None:
        message = as_str(event.get("note"), f"{at}note", source)
    return K8sEvent(
        reason=as_str(event.get("reason"), f"{at}reason", source) or "",
        message=message or "",
        type=as_str(event.get("type"), f"{at}type", source) or "Normal",
        object_kind=as_str(regarding.get("kind"), f"{at}{regarding_key}.kind", source),
        object_name=as_str(regarding.get("name"), f"{at}{regarding_key}.name", source),
        count=max([c for c in counts if c] or [1]),
        first_at=first,
        last_at=max(lasts) if lasts else (event_time or first),
    )


# --------------------------------------------------------------------------- tables


def is_event_header(line: str) -> bool:
    """True for the header line of an events table (`kubectl get events`, describe's Events:).

    >>> is_event_header("LAST SEEN   TYPE      REASON    OBJECT          MESSAGE"), is_event_header("NAME READY")
    (True, False)
    """
    return "REASON" in line.upper() and _header(line) is not None


def _header(line: str) -> list[Column] | None:
    cells = [(m.group(0).upper(), m.start()) for m in _CELL.finditer(line)]
    names = [name for name, _ in cells]
    if "REASON" in names and "MESSAGE" in names and all(name in _HEADER_NAMES for name in names):
        return cells
    return None


def _parse_table(lines: list[str], source: str) -> tuple[tuple[K8sEvent, ...], tuple[ReadIssue, ...]]:
    events: list[K8sEvent] = []
    issues: list[ReadIssue] = []
    header: list[Column] | None = None
    indent = 0
    described: str | None = None  # the object a `kubectl describe` section is about
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        columns = _header(line)
        if columns is not None:
            header, indent = columns, len(line) - len(line.lstrip())
            continue
        if header is not None and indent and len(line) - len(line.lstrip()) < indent:
            header = None  # a describe section ended; the next object starts at column 0
        if header is None:
            name = _NAME_LINE.match(line)
            if name:
                described = name.group(1)
            continue
        if set(line.strip()) <= {"-", " "}:
            continue
        event = _row(line, header, described)
        if event is not None:
            events.append(event)
        elif events and _is_continuation(line, header):
            last = events[-1]
            events[-1] = dataclasses.replace(last, message=f"{last.message} {line.strip()}")
        else:
            issues.append(ReadIssue(source=source, message=said("bad_event_row"), line=number))
    return tuple(events), tuple(issues)


def _parse_headerless(lines: list[str], source: str) -> tuple[tuple[K8sEvent, ...], tuple[ReadIssue, ...]]:
    """Rows of describe's Events section pasted without the header (a paste cut above it):
    each row is `Type Reason Age From Message`; other lines are reported, not guessed at.

    >>> [(e.reason, e.count) for e in _parse_headerless(
    ...     ["  Warning  Unhealthy  25m (x3 over 25m)  kubelet  Liveness probe failed: HTTP probe failed"], "e")[0]]
    [('Unhealthy', 3)]
    """
    events: list[K8sEvent] = []
    issues: list[ReadIssue] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        m = _HEADERLESS_ROW.match(line)
        if m is None:
            issues.append(ReadIssue(source=source, message=said("bad_event_row"), line=number))
            continue
        events.append(_event({"TYPE": m.group("type"), "REASON": m.group("reason"), "AGE": m.group("age"),
                              "MESSAGE": m.group("message")}, None))
    return tuple(events), tuple(issues)


def _is_continuation(line: str, header: list[Column]) -> bool:
    message_start = dict(header).get("MESSAGE", 0)
    return len(line) - len(line.lstrip()) >= message_start > 0


def _row(line: str, header: list[Column], described: str | None) -> K8sEvent | None:
    cells = _cells_by_position(line, header)
    if cells is None or not _plausible(cells):
        cells = _cells_by_words(line, header)
    if cells is None or not _plausible(cells):
        return None
    return _event(cells, described)


def _plausible(cells: dict[str, str]) -> bool:
    return bool(cells.get("REASON")) and ("TYPE" not in cells or cells["TYPE"] in _EVENT_TYPES)


def _cells_by_position(line: str, header: list[Column]) -> dict[str, str] | None:
    cells = {}
    for i, (name, start) in enumerate(header):
        end = header[i + 1][1] if i + 1 < len(header) else len(line)
        if 0 < start < len(line) and not line[start - 1].isspace():
            return None  # a cell ran into this column: spacing was not preserved
        cells[name] = line[start:end].strip()
    return cells


def _cells_by_words(line: str, header: list[Column]) -> dict[str, str] | None:
    """Split a row whose spacing was lost: every column before MESSAGE holds one word (ages may
    carry "(x4 over 10m)"), and MESSAGE is the rest of the line."""
    names = [name for name, _ in header]
    if names[-1] != "MESSAGE" or any(n not in _ONE_WORD | _AGE_COLUMNS for n in names[:-1]):
        return None
    rest = line.strip()
    cells = {}
    for name in names[:-1]:
        match = (_AGE_WORDS if name in _AGE_COLUMNS else _WORD).match(rest)
        if match is None:
            return None
        cells[name] = match.group(0)
        rest = rest[match.end() :].lstrip()
    cells["MESSAGE"] = rest
    return cells


def _event(cells: dict[str, str], described: str | None) -> K8sEvent:
    kind, name = _object(cells)
    if name is None and described is not None:
        name = described
    age = cells.get("LAST SEEN") or cells.get("AGE") or ""
    repeats = _REPEATS.search(age)
    count_text = cells.get("COUNT", "")
    if re.fullmatch(r"[0-9]{1,9}", count_text):
        count = int(count_text)
    else:
        count = int(repeats.group(1)[:9]) if repeats else 1
    return K8sEvent(
        reason=cells["REASON"],
        message=cells.get("MESSAGE", ""),
        type=cells.get("TYPE") or "Normal",
        object_kind=kind,
        object_name=name,
        count=max(count, 1),
        first_at=parse_instant(cells.get("FIRST SEEN", "")),
        last_at=parse_instant(age),
    )


def _object(cells: dict[str, str]) -> tuple[str | None, str | None]:
    if cells.get("OBJECT"):
        kind, _, name = cells["OBJECT"].partition("/")
        if not name:
            return None, kind
        return _kind_name(kind), name
    if cells.get("KIND") or cells.get("NAME"):
        return (_kind_name(cells["KIND"]) if cells.get("KIND") else None), cells.get("NAME") or None
    return None, None


def _kind_name(written: str) -> str:
    """`pod` → Pod, `deployment.apps` → Deployment, `horizontalpodautoscaler.autoscaling` → HPA kind."""
    base = written.split(".", 1)[0]
    return _OBJECT_KINDS.get(base.lower(), base[:1].upper() + base[1:])
