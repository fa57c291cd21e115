"""`RaiseMemoryLimit`: the container's memory limit (host RAM), and its request when it equals the limit."""

from __future__ import annotations

from typing import Any

from runbooks.model.changes import RaiseMemoryLimit
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.common import KindEdit, invalid, set_op
from runbooks.remediation.edits.launch_edit import POD_PATH, server_container
from runbooks.remediation.edits.quantities import canonical_quantity, quantity_bytes
from runbooks.remediation.edits.reader import ContainerReader

#: without a value, a memory limit is raised by half, rounded up to a whole GiB
MEMORY_RAISE = 1.5


def memory_limit(workload: dict[str, Any], container: str | None, limit: Any, *, reader: ContainerReader) -> KindEdit:
    """The server container's memory limit to `limit` (a raise), and its memory request with it
    when the request equals the limit (Guaranteed QoS stays Guaranteed)."""
    new = canonical_quantity(limit, "--memory-limit")
    index, spec, _config = server_container(workload, container, reader=reader)
    resources = spec.get("resources") if isinstance(spec.get("resources"), dict) else {}
    limits = resources.get("limits") if isinstance(resources.get("limits"), dict) else {}
    requests = resources.get("requests") if isinstance(resources.get("requests"), dict) else {}
    old = limits.get("memory")
    where = f"containers[{spec.get('name')}].resources.limits.memory"
    if old is None:
        raise invalid(where, Phrase("reason.none_value"), Phrase("reason.no_memory_limit"))
    old_bytes = quantity_bytes(old, where)
    if quantity_bytes(new, "--memory-limit") <= old_bytes:
        raise invalid("--memory-limit", new, Phrase("reason.limit_not_above", {"old": old}))
    base = f"{POD_PATH}/containers/{index}/resources"
    changes = [RaiseMemoryLimit(spec.get("name"), "limits.memory", old, new)]
    ops = set_op(f"{base}/limits/memory", True, old, new)
    request = requests.get("memory")
    if request is not None and quantity_bytes(request, "resources.requests.memory") == old_bytes:
        changes.append(RaiseMemoryLimit(spec.get("name"), "requests.memory", request, new))
        ops += set_op(f"{base}/requests/memory", True, request, new)
    return KindEdit(tuple(changes), tuple(ops))


def raised_limit(workload: dict[str, Any], container: str | None, *, reader: ContainerReader) -> str:
    """The current memory limit times MEMORY_RAISE, rounded up to a whole Gi."""
    _index, spec, _config = server_container(workload, container, reader=reader)
    old = ((spec.get("resources") or {}).get("limits") or {}).get("memory")
    if old is None:
        raise invalid(f"containers[{spec.get('name')}].resources.limits.memory", Phrase("reason.none_value"),
                      Phrase("reason.no_memory_limit"))
    raised = quantity_bytes(old, "resources.limits.memory") * MEMORY_RAISE
    return f"{-(-int(raised) // 2**30)}Gi"


def edit(workload: dict[str, Any], change: RaiseMemoryLimit, container: str | None, reader: ContainerReader) -> KindEdit:
    """The registry's entry: the change's limit, or the current one raised by half without it."""
    return memory_limit(workload, container, change.new if change.new is not None
                        else raised_limit(workload, container, reader=reader), reader=reader)
