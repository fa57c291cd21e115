"""The container reader the manifest edits are handed (`runbooks.remediation.edits.reader`):
collectors.parsers' reading of a server container, the one triage uses, so an edit is confirmed
by the same reading that found the problem.

>>> CONTAINER_READER.server_config({"image": "vllm/vllm-openai:v0.8.5", "args": ["M", "--max-num-seqs=8"]}).max_num_seqs
8
>>> CONTAINER_READER.server_container({"containers": [{"name": "proxy", "image": "envoy"},
...                                                   {"name": "vllm", "command": ["vllm", "serve", "M"]}]})
1
"""

from __future__ import annotations

from typing import Any

from collectors.errors import ParseError
from collectors.parsers.flags import server_config_from_container
from collectors.parsers.kube_pod_spec import pick_server_container
from runbooks.model.evidence import ServerConfig
from runbooks.remediation.edits.reader import ContainerShapeError


class ParsedContainers:
    """`ContainerReader` on collectors.parsers: a workload's containers, named "workload" in
    the messages of a ParseError (raised as ContainerShapeError)."""

    def server_config(self, spec: dict[str, Any]) -> ServerConfig | None:
        try:
            return server_config_from_container(spec, source="workload")
        except ParseError as e:
            raise ContainerShapeError(e.reason) from e

    def server_container(self, pod_spec: dict[str, Any]) -> int | None:
        try:
            index, config = pick_server_container(pod_spec, "spec.template.spec", "workload")
        except ParseError as e:
            raise ContainerShapeError(e.reason) from e
        return index if config is not None else None


#: the reader bot.service hands every edit (plans, the split's clones, the handover's live read)
CONTAINER_READER = ParsedContainers()
