"""The long pool's objects, cloned from the original Deployment and Service with the long-context
flags set in the Deployment's own launch form. The plan builds them this way, and the apply again
from the objects as read then (`bot.actuator.split_apply`)."""

from __future__ import annotations

from typing import Any

from runbooks.remediation import split
from runbooks.remediation.edits.launch_edit import edit_flags
from runbooks.remediation.edits.reader import ContainerReader


def build_clones(original: dict[str, Any], service: dict[str, Any], *, replicas: int, container: str | None,
                 flags: list[tuple[str, Any]], reader: ContainerReader) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The long pool's Deployment and Service cloned from `original` and `service` (credentials
    and all, as they will be sent), with `flags` set on `container` in the Deployment's own
    launch form (read and confirmed by `reader`); and the container's name."""
    clone = split.clone_deployment(original, service, replicas=replicas)
    edit = edit_flags(clone, container, dict(flags), reader=reader)
    return edit.workload, split.clone_service(service, edit.workload), edit.container
