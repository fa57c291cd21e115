"""The two patch documents for a container whose `command`, `args` or `env` changed.

`json_patch` is the exact one (RFC 6902): each changed field is `test`ed at its old value before
it is replaced, so a field someone else changed since it was read fails the whole patch instead
of being overwritten; `bot.actuator.apply.inverse_ops` turns it around for a rollback.
`strategic_merge_patch` says the same as a `kubectl patch --type strategic` document (the
container by name, `env` merged by name, `command`/`args` replaced whole).

>>> old = {"name": "vllm", "args": ["--max-num-seqs", "128"]}
>>> new = {"name": "vllm", "args": ["--max-num-seqs", "64"]}
>>> json_patch("/spec/template/spec/containers/0", old, new)
[{'op': 'test', 'path': '/spec/template/spec/containers/0/args', 'value': ['--max-num-seqs', '128']}, \
{'op': 'replace', 'path': '/spec/template/spec/containers/0/args', 'value': ['--max-num-seqs', '64']}]
>>> strategic_merge_patch(old, new)
{'spec': {'template': {'spec': {'containers': [{'name': 'vllm', 'args': ['--max-num-seqs', '64']}]}}}}
"""

from __future__ import annotations

import copy
from typing import Any

#: the container fields a flag edit may change, in the order their operations are written
FIELDS = ("command", "args", "env")


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The fields of FIELDS whose presence or value differs between the two container specs."""
    return [f for f in FIELDS if (f in old) != (f in new) or old.get(f) != new.get(f)]


def json_patch(prefix: str, old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations turning container `old` (at JSON pointer `prefix`) into `new`."""
    ops: list[dict[str, Any]] = []
    for name in changed_fields(old, new):
        path = f"{prefix}/{name}"
        if name in old:
            ops.append({"op": "test", "path": path, "value": copy.deepcopy(old[name])})
            if name in new:
                ops.append({"op": "replace", "path": path, "value": copy.deepcopy(new[name])})
            else:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": copy.deepcopy(new[name])})
    return ops


def strategic_merge_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """A strategic merge patch of the pod template turning container `old` into `new`."""
    container: dict[str, Any] = {"name": new.get("name")}
    for name in changed_fields(old, new):
        if name not in new:
            container[name] = None
        elif name == "env" and isinstance(old.get("env"), list):
            container.update(_env_merge(old["env"], new["env"]))
        else:
            container[name] = copy.deepcopy(new[name])
    return {"spec": {"template": {"spec": {"containers": [container]}}}}


def _env_merge(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> dict[str, Any]:
    before = {e["name"]: e for e in old}
    after_names = [e["name"] for e in new]
    entries: list[dict[str, Any]] = [copy.deepcopy(e) for e in new if before.get(e["name"]) != e]
    entries += [{"name": n, "$patch": "delete"} for n in before if n not in after_names]
    return {"env": entries, "$setElementOrder/env": [{"name": n} for n in after_names]}
