"""Server flags edited on the object that declares the pods (`runbooks.model.templates`): a
Deployment's or StatefulSet's template, an InferenceService's predictor containers or model, a
LeaderWorkerSet's leader and worker templates.

Each place is read as a Deployment (`deployment_view`) and edited by the one flag editor
(`launch_edit.edit_flags`), and its operations are moved to where that container lives on the
object. A LeaderWorkerSet's templates that run a server are edited together, in one patch; they
must read the same value of every flag changed before the edit (else UsageError
`templates_differ`, naming both values: gpumem does not pick one), and read the same after it.
A template that runs no known server (a Ray worker waiting for its head) is left as it is.

>>> from runbooks.remediation.edits.owner_flags import site_pointer_ops
>>> from runbooks.model.templates import PodSite
>>> site_pointer_ops(PodSite("model", "/spec/predictor", {}), [{"op": "test",
...     "path": "/spec/template/spec/containers/0/args/0", "value": "--max-num-seqs=8"}])
[{'op': 'test', 'path': '/spec/predictor/model/args/0', 'value': '--max-num-seqs=8'}]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from runbooks.model.errors import UsageError
from runbooks.model.templates import (
    PodSite,
    TemplateShapeError,
    deployment_view,
    pod_sites,
    to_object_pointer,
)
from runbooks.remediation.edits.launch_edit import EditResult, edit_flags, server_container
from runbooks.remediation.edits.reader import ContainerReader


@dataclass(frozen=True)
class OwnerEdit:
    """Each edited place with its edit, and the operations on the object itself."""

    sites: tuple[tuple[PodSite, EditResult], ...]
    ops: tuple[dict[str, Any], ...]


def site_pointer_ops(site: PodSite, ops: list[dict[str, Any]] | tuple[dict[str, Any], ...]) -> list[dict[str, Any]]:
    """The view's operations at their place on the object."""
    return [{**op, "path": to_object_pointer(site, op["path"])} for op in ops]


def sites_of(obj: dict[str, Any]) -> tuple[PodSite, ...]:
    try:
        return pod_sites(obj)
    except TemplateShapeError as e:
        raise UsageError("workload_shape", path=e.field, detail=e.why) from None


def serving_sites(obj: dict[str, Any], container: str | None, *, reader: ContainerReader) -> tuple[PodSite, ...]:
    """The places of `obj` whose pods run a known server (by `container` when named). Raises the
    editor's refusal (no_server, container_not_found) when none does."""
    sites = sites_of(obj)
    found: list[PodSite] = []
    first_error: UsageError | None = None
    for site in sites:
        try:
            server_container(deployment_view(obj, site), container, reader=reader)
        except UsageError as e:
            first_error = first_error or e
            continue
        found.append(site)
    if not found:
        assert first_error is not None
        raise first_error
    return tuple(found)


def edit_owner_flags(obj: dict[str, Any], container: str | None, changes: Mapping[str, Any],
                     engine_version: str | None = None, *, reader: ContainerReader) -> OwnerEdit:
    """Set, add or remove engine flags wherever `obj` declares its server (see the module
    docstring). Raises the editor's UsageErrors, and `templates_differ` for a LeaderWorkerSet
    whose templates disagree on a changed flag before the edit or after it."""
    sites = serving_sites(obj, container, reader=reader)
    edits = [(site, edit_flags(deployment_view(obj, site), container, changes, engine_version, reader=reader))
             for site in sites]
    if len(edits) > 1:
        _same_across(edits, changes)
    ops: list[dict[str, Any]] = []
    for site, edit in edits:
        ops += site_pointer_ops(site, edit.json_patch)
    return OwnerEdit(tuple(edits), tuple(ops))


def _same_across(edits: list[tuple[PodSite, EditResult]], changes: Mapping[str, Any]) -> None:
    (first_site, first), *rest = edits
    for flag in changes:
        for site, edit in rest:
            for when, a, b in (("before", first.before, edit.before), ("after", first.after, edit.after)):
                key = str(flag).lstrip("-")
                va, vb = _flag_value(a, key, first), _flag_value(b, key, edit)
                if va != vb:
                    raise UsageError("templates_differ", flag=key, when=when,
                                     first=f"{first_site.role}: {va if va is not None else '(default)'}",
                                     second=f"{site.role}: {vb if vb is not None else '(default)'}")


def _flag_value(config: Any, flag: str, edit: EditResult) -> str | None:
    flags = getattr(config, "flags", {}) or {}
    spelled = edit.spelled.get(flag, flag).lstrip("-")
    for name in (spelled, flag, flag.replace("_", "-"), flag.replace("-", "_")):
        if name in flags:
            return flags[name]
    return None
