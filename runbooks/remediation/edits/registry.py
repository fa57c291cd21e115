"""The editor of each change kind that patches the workload itself, by its class.

An editor takes the workload as read now, the typed change, the container named by the
request (the change's own `container` first) and the `ContainerReader` that finds and reads it,
and returns a `KindEdit`. Server flags
(`SetArg`, edited together by `launch_edit.edit_flags`), replicas (`Scale`) and the HPA kinds
(`HpaOnQueueDepth`, a `Scale` an HPA would undo: another object, `hpa`) are planned by
`bot.service.remediate.build_plan` itself; a pool split (`SplitPools`) by
`bot.service.split_pools`. A new kind of workload edit is its dataclass in
`runbooks.model.changes`, its editor module here and one entry in `EDITORS`.

>>> from runbooks.model.changes import AddShm, SplitPools
>>> sorted(cls.__name__ for cls in EDITORS)
['AddShm', 'AddStartupProbe', 'LowerMaxSurge', 'RaiseMemoryLimit']
>>> edit_workload({}, SplitPools("vllm", "threshold", None, 2048), None, reader=None)
Traceback (most recent call last):
...
runbooks.model.errors.UsageError: not_applicable: {'action': 'split_pools', 'kinds': 'split_pools'}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runbooks.model.changes import AddShm, AddStartupProbe, Change, LowerMaxSurge, RaiseMemoryLimit
from runbooks.model.errors import UsageError
from runbooks.remediation.edits import max_surge, memory_limit, shm, startup_probe
from runbooks.remediation.edits.common import KindEdit
from runbooks.remediation.edits.reader import ContainerReader

Editor = Callable[[dict[str, Any], Any, "str | None", ContainerReader], KindEdit]

#: change class -> the editor that patches the workload for it
EDITORS: dict[type, Editor] = {
    AddStartupProbe: startup_probe.edit,
    LowerMaxSurge: max_surge.edit,
    AddShm: shm.edit,
    RaiseMemoryLimit: memory_limit.edit,
}


def edit_workload(workload: dict[str, Any], change: Change, container: str | None, *,
                  reader: ContainerReader) -> KindEdit:
    """The patch of one change of a workload kind, the containers read by `reader`; UsageError
    not_applicable for another kind."""
    editor = EDITORS.get(type(change))
    if editor is None:
        raise UsageError("not_applicable", action=change.kind, kinds=change.kind)
    return editor(workload, change, change.container or container, reader)
