"""`LowerMaxSurge`: strategy.rollingUpdate maxSurge (0: a rollout needs no spare GPU) with
maxUnavailable 1 so it can still move.

>>> surge_value("25%"), surge_value(0)
('25%', 0)
"""

from __future__ import annotations

import re
from typing import Any

from runbooks.model.changes import LowerMaxSurge
from runbooks.model.errors import UsageError
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.common import KindEdit, get_in, invalid, set_op
from runbooks.remediation.edits.reader import ContainerReader
from runbooks.remediation.value_ranges import check_option, shown

_SURGE = re.compile(r"^(\d+)(%?)$")


def surge_value(text: Any, field: str = "--max-surge") -> int | str:
    """A maxSurge/maxUnavailable value: a whole number or a percentage ("25%")."""
    m = _SURGE.match(str(text).strip())
    if m is None or (m.group(2) and (len(m.group(1)) > 3 or int(m.group(1)) > 100)):
        raise invalid(field, shown(text), Phrase("reason.surge_format"))
    return f"{int(m.group(1))}%" if m.group(2) else check_option("--max-surge", m.group(1))


def max_surge(workload: dict[str, Any], surge: Any) -> KindEdit:
    """strategy.rollingUpdate.maxSurge to `surge`; with 0, maxUnavailable to 1 (a rollout that may
    neither add a pod nor take one away cannot move)."""
    new_surge = surge_value(surge)
    strategy = get_in(workload, "spec", "strategy") or {}
    if strategy.get("type", "RollingUpdate") != "RollingUpdate":
        raise invalid("spec.strategy.type", strategy.get("type"), Phrase("reason.surge_rolling_only"))
    rolling = strategy.get("rollingUpdate")
    changes, ops = [], []
    if rolling is None:  # the API server defaults it; an object from a file may lack it
        rolling = {}
        if "strategy" in (workload.get("spec") or {}):
            ops.append({"op": "add", "path": "/spec/strategy/rollingUpdate", "value": {}})
        else:
            ops.append({"op": "add", "path": "/spec/strategy", "value": {"type": "RollingUpdate", "rollingUpdate": {}}})
    wanted = [("maxSurge", new_surge)]
    if new_surge in (0, "0%"):
        wanted.append(("maxUnavailable", 1))
    for field, value in wanted:
        old = rolling.get(field)
        if old == value:
            continue
        changes.append(LowerMaxSurge(field, old, value))
        ops += set_op(f"/spec/strategy/rollingUpdate/{field}", field in rolling, old, value)
    if not changes:
        raise UsageError("nothing_to_change", what=Phrase("reason.max_surge_already", {"value": new_surge}))
    return KindEdit(tuple(changes), tuple(ops))


def edit(workload: dict[str, Any], change: LowerMaxSurge, container: str | None, reader: ContainerReader) -> KindEdit:
    """The registry's entry: the change's maxSurge, 0 without one (the rollout is the
    workload's own: no container is read)."""
    return max_surge(workload, 0 if change.new is None else change.new)
