"""BundleSource: an evidence bundle (a folder of the files on-call already captures) as Evidence:
each file read by its parser (`collectors.parsers`), `access.log` by `collectors.access_logs`.

Every file is optional. A file that cannot be read becomes a ReadIssue naming the file and
line; the rest of the bundle is still used. `bundle.json` (what `gpumem collect` writes) gives
the target, the time, and parsed evidence for sources that have no raw file of their own
(Prometheus history, for one); a raw file present beside it wins over its parsed copy.
"""

from __future__ import annotations

import dataclasses
import json
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from collectors.errors import CollectorError, ParseError, field, internal_error, noun, os_error, quoted, said
from collectors.kube.managers import managers_of
from collectors.parsers.kube_objects import (
    parse_deployment,
    parse_events,
    parse_hpa,
    parse_pods,
    spec_owner_config,
)
from collectors.parsers.kube_tables import parse_kube_text, parse_pod_text
from collectors.parsers.kube_yaml import load_yaml_documents
from collectors.parsers.logs import read_server_log
from collectors.parsers.metrics import parse_metrics
from collectors.parsers.metrics_samples import MAX_LINE_CHARS, MAX_SERIES
from collectors.parsers.model_config import parse_model_config
from collectors.parsers.nvidia_smi import parse_nvidia_smi
from runbooks.model.evidence import Evidence, ReadIssue
from runbooks.model.serde import SerdeError, from_jsonable
from runbooks.model.units import MIB

#: files read whole are capped; logs and access logs stream and have no cap
MAX_WHOLE_FILE_BYTES = 64 * MIB

#: every file a bundle may hold, in the order they are read
BUNDLE_FILES = (
    "bundle.json", "nvidia-smi.txt", "metrics.txt", "deployment.yaml", "inferenceservice.yaml",
    "leaderworkerset.yaml", "pods.yaml", "pods.txt", "hpa.yaml", "events.yaml", "events.txt", "logs.txt",
    "access.log", "config.json",
)


#: the Evidence fields that hold evidence (not bookkeeping), in declaration order
EVIDENCE_FIELDS = tuple(f.name for f in dataclasses.fields(Evidence)
                        if f.name not in ("target", "collected_at", "sources", "issues"))


class BundleError(CollectorError):
    """The bundle as a whole cannot be used (not a folder, not readable)."""


@dataclass
class _Acc:
    fields: dict[str, Any]
    sources: list[str]
    issues: list[ReadIssue]


def _read_text(path: Path) -> str:
    size = path.stat().st_size
    if size > MAX_WHOLE_FILE_BYTES:
        raise ParseError(path.name, said("file_too_big", mib=size // MIB, limit=MAX_WHOLE_FILE_BYTES // MIB))
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


def _load_bundle_json(path: Path, acc: _Acc) -> tuple[str | None, datetime | None]:
    text = _read_text(path)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ParseError(path.name, said("not_json", detail=quoted(e.msg)), line=e.lineno) from e
    if not isinstance(doc, dict):
        raise ParseError(path.name, said("expected", what=noun("bundle_json")))
    target = doc.get("target") if isinstance(doc.get("target"), str) else None
    when = None
    if isinstance(doc.get("collected_at"), str):
        try:
            when = datetime.fromisoformat(doc["collected_at"])
        except ValueError as e:
            raise ParseError(path.name, field("collected_at", quoted(e))) from e
    if isinstance(doc.get("evidence"), dict):
        try:
            ev = from_jsonable(Evidence, doc["evidence"])
        except SerdeError as e:
            raise ParseError(path.name, field("evidence", quoted(e))) from e
        for name in EVIDENCE_FIELDS:
            value = getattr(ev, name)
            if value not in (None, ()):
                acc.fields[name] = value
        acc.issues.extend(ev.issues)
    return target, when


def load_bundle(directory: str | os.PathLike[str]) -> Evidence:
    """Read every known file of a bundle folder into Evidence.

    >>> load_bundle("examples/runbook-incident").target
    'llm/vllm-server'
    """
    root = Path(directory)
    if not root.is_dir():
        raise BundleError(f"{root}: not a folder; pass the folder that holds nvidia-smi.txt, logs.txt, ...")
    acc = _Acc({}, [], [])
    target: str | None = None
    collected_at: datetime | None = None
    if _readable(root, "bundle.json", acc.issues):
        try:
            target, collected_at = _load_bundle_json(root / "bundle.json", acc)
            acc.sources.append("bundle.json")
        except (ParseError, OSError) as e:
            acc.issues.append(_issue("bundle.json", e))
        except RecursionError:
            acc.issues.append(ReadIssue("bundle.json", _TOO_DEEP))
    year = (collected_at or _mtime(root)).year

    def one(name: str, read: Callable[[Path], dict[str, Any]]) -> None:
        if not _readable(root, name, acc.issues):
            return
        path = root / name
        try:
            acc.fields.update(read(path))
            acc.sources.append(name)
        except (ParseError, OSError) as e:
            acc.issues.append(_issue(name, e))
        except RecursionError:
            acc.issues.append(ReadIssue(name, _TOO_DEEP))
        except Exception as e:  # a parser bug must not cost the rest of the bundle
            acc.issues.append(ReadIssue(name, internal_error(e)))

    one("nvidia-smi.txt", lambda p: {"gpus": parse_nvidia_smi(_read_text(p), source=p.name)})
    one("metrics.txt", lambda p: {"server_metrics": parse_metrics(_read_text(p), source=p.name)})
    _said_what_was_left_out(acc)
    one("deployment.yaml", _deployment)
    for owner_file in ("inferenceservice.yaml", "leaderworkerset.yaml"):  # a NAMESPACE/KIND/NAME triage's
        one(owner_file, lambda p: _spec_owner(p, acc.fields))
    one("pods.yaml", lambda p: {"pods": parse_pods(_read_text(p), source=p.name)})
    if not acc.fields.get("pods"):
        one("pods.txt", _pod_text)
    one("hpa.yaml", lambda p: {"hpa": parse_hpa(_read_text(p), source=p.name)})
    one("events.yaml", lambda p: {"events": parse_events(_read_text(p), source=p.name)})
    if "events" not in acc.fields:
        one("events.txt", lambda p: _events_text(p, acc.fields))
    one("logs.txt", lambda p: {"logs": read_server_log(p, source=p.name, year=year)})
    one("access.log", _access_log)
    one("config.json", lambda p: {"model": parse_model_config(_read_text(p), source=p.name)})
    _facts_from_logs(acc.fields)

    wl = acc.fields.get("workload")
    if target is None and wl is not None:
        target = f"{wl.namespace}/{wl.name}" if wl.namespace else wl.name
    return Evidence(target=target, collected_at=collected_at, sources=tuple(acc.sources),
                    issues=tuple(acc.issues), **acc.fields)


def _pod_text(path: Path) -> dict[str, Any]:
    """`kubectl get pods` / `kubectl describe pod` output, as printed (describe's Events too)."""
    pods, events = parse_kube_text(_read_text(path))
    if not pods:
        raise ParseError(path.name, said("no_pod_text"))
    # describe's Events: stand in only when no events file gives any (see _facts_from_logs)
    return {"pods": pods, "_described_events": events}


def _events_text(path: Path, fields: dict[str, Any]) -> dict[str, Any]:
    """Events, and the pods of any pods table or describe output pasted with them."""
    text = _read_text(path)
    out: dict[str, Any] = {"events": parse_events(text, source=path.name)}
    pods = parse_pod_text(text)
    if pods and not fields.get("pods"):
        out["pods"] = pods
    return out


def _facts_from_logs(fields: dict[str, Any]) -> None:
    """A fact counts wherever it was read: the launch the log shows is the server config when
    no Deployment gives one, and kubectl output pasted into pods.txt or the log gives the pods
    and events no file of their own gave."""
    described = fields.pop("_described_events", ())
    if not fields.get("events") and described:
        fields["events"] = described
    logs = fields.get("logs")
    if logs is None:
        return
    if fields.get("server_config") is None and logs.server_config is not None:
        fields["server_config"] = logs.server_config
    if not fields.get("pods") and logs.pods:
        fields["pods"] = logs.pods
    if not fields.get("events") and logs.events:
        fields["events"] = logs.events


def _deployment(path: Path) -> dict[str, Any]:
    text = _read_text(path)
    workload, config = parse_deployment(text, source=path.name)
    # who manages it, from the same object (its ownerReferences, labels, annotations)
    obj = next((o for o in load_yaml_documents(text, path.name) if o.get("kind") == workload.kind
                and (o.get("metadata") or {}).get("name") == workload.name), None)
    if obj is not None:
        workload = dataclasses.replace(workload, managers=managers_of(obj))
    out: dict[str, Any] = {"workload": workload}
    if config is not None:
        out["server_config"] = config
    return out


def _spec_owner(path: Path, fields: dict[str, Any]) -> dict[str, Any]:
    """The InferenceService or LeaderWorkerSet a triage named: the server flags as it declares
    them (they win over deployment.yaml's, as in the live triage), and its own managers after
    the workload's."""
    text = _read_text(path)
    obj = next(iter(load_yaml_documents(text, path.name)), None)
    out: dict[str, Any] = {}
    config = spec_owner_config(obj, path.name)
    if config is not None:
        out["server_config"] = config
    workload = fields.get("workload")
    if workload is not None and isinstance(obj, dict):
        seen = {(m.kind, m.name) for m in workload.managers or ()}
        extra = tuple(m for m in managers_of(obj) if (m.kind, m.name) not in seen)
        if extra:
            out["workload"] = dataclasses.replace(workload, managers=(*(workload.managers or ()), *extra))
    return out


def _access_log(path: Path) -> dict[str, Any]:
    # the scanner and numpy are imported here, with an access log to read: 0.1-0.2 s (-X importtime)
    # that a live triage (this module's other readers, no file) and a bundle without one never pay
    from collectors.access_logs.fast import scan_access_log

    return {"requests": scan_access_log(path, source=path.name, detail=True).profile}


def _said_what_was_left_out(acc: _Acc) -> None:
    """A metrics file read only in part says so, with the line where reading stopped."""
    m = acc.fields.get("server_metrics")
    if m is None:
        return
    if m.long_lines_skipped:
        acc.issues.append(ReadIssue(m.source, said("long_lines_left_out", count=m.long_lines_skipped,
                                                   kib=MAX_LINE_CHARS // 1024), kind="skipped"))
    if m.stopped_at_line is not None:
        acc.issues.append(ReadIssue(m.source, said("series_left_out", limit=f"{MAX_SERIES:,}"),
                                    line=m.stopped_at_line, kind="skipped"))


_TOO_DEEP = said("nested_too_deeply")


def _readable(root: Path, name: str, issues: list[ReadIssue]) -> bool:
    """Whether `root/name` is a regular file to read. A link that leads out of the bundle folder
    is unreadable (its content never reaches a report); a FIFO, device or socket is skipped, so
    reading it can neither hang nor stream forever. Both are named in the report."""
    path = root / name
    try:
        if not os.path.lexists(path):
            return False
        if path.is_symlink():
            target = path.resolve(strict=False)
            if not target.is_relative_to(root.resolve()):
                issues.append(ReadIssue(name, said("link_outside_bundle"), kind="unreadable"))
                return False
        mode = path.stat().st_mode
    except OSError as e:
        issues.append(_issue(name, e))
        return False
    if stat.S_ISDIR(mode):
        issues.append(ReadIssue(name, said("a_folder"), kind="skipped"))
        return False
    if not stat.S_ISREG(mode):
        what = noun("fifo") if stat.S_ISFIFO(mode) else noun("device_or_socket")
        issues.append(ReadIssue(name, said("not_a_regular_file", what=what), kind="skipped"))
        return False
    return True


def _issue(name: str, e: Exception) -> ReadIssue:
    if isinstance(e, ParseError):
        return ReadIssue(e.source or name, e.message, e.line)
    if isinstance(e, PermissionError):
        return ReadIssue(name, said("permission_denied"), kind="forbidden")
    return ReadIssue(name, os_error(e))


def _mtime(root: Path) -> datetime:
    return datetime.fromtimestamp(root.stat().st_mtime, tz=UTC)


def has_evidence(ev: Evidence) -> bool:
    """True when at least one piece of evidence was read (exit code 3 otherwise)."""
    return any(getattr(ev, n) not in (None, ()) for n in EVIDENCE_FIELDS)
