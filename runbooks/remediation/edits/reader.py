"""What the manifest edits read a container with: a `ContainerReader` they are handed.

An edit reads the server's flags before it changes them and again after, and is refused unless
the reading after is exactly the one asked for. The reading is triage's own (the parser that
found the problem; `bot.service.container_reader` hands it to the edits), so an edit is
confirmed by the same reading that will judge it. The edits never import it: they stay pure.
"""

from __future__ import annotations

from typing import Any, Protocol

from runbooks.model.evidence import ServerConfig


class ContainerShapeError(ValueError):
    """The container or pod spec does not have the Kubernetes shape; `reason` (text, or a
    `runbooks.model.phrases.Phrase` the renderers word) says where."""

    def __init__(self, reason: Any):
        super().__init__(str(reason))
        self.reason = reason


class ContainerReader(Protocol):
    """Reads a Kubernetes container (a dict, as the API returns it) the way triage reads it."""

    def server_config(self, spec: dict[str, Any]) -> ServerConfig | None:
        """The server flags of container `spec`, None when it runs no known server. Raises
        ContainerShapeError."""
        ...

    def server_container(self, pod_spec: dict[str, Any]) -> int | None:
        """The index of the container triage picks as the server in `pod_spec` (a Deployment's
        `spec.template.spec`), None when none runs a known server. Raises ContainerShapeError."""
        ...
