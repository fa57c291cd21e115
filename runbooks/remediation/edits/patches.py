"""The two patch documents for a container whose `command`, `args` or `env` changed.

`json_patch` is the exact one (RFC 6902), and it names only the list elements the change
touches: each changed element is `test`ed at its old value before it is replaced or removed, and
an added element goes at its explicit index (never `/-`), so a field someone else changed since
it was read fails the whole patch instead of being overwritten, and the patch never carries the
rest of the list (a credential in the next element stays out of the plan, the store and every
surface). `bot.actuator.apply.inverse_ops` turns it around for a rollback: the inverse, too,
names only those elements. An element that would have to be written and also carries a
credential (a `sh -c` script with `--api-key sk-...` in it) is refused (UsageError `secret_in_edited_word`),
never written into a plan.
`strategic_merge_patch` says the same as a `kubectl patch --type strategic` document (the
container by name, `env` merged by name, `command`/`args` replaced whole); it is never stored.

>>> old = {"name": "vllm", "args": ["--api-key", "abc123", "--max-num-seqs", "128"]}
>>> new = {"name": "vllm", "args": ["--api-key", "abc123", "--max-num-seqs", "64"]}
>>> json_patch("/spec/template/spec/containers/0", old, new)
[{'op': 'test', 'path': '/spec/template/spec/containers/0/args/3', 'value': '128'}, \
{'op': 'replace', 'path': '/spec/template/spec/containers/0/args/3', 'value': '64'}]
>>> strategic_merge_patch(old, new)["spec"]["template"]["spec"]["containers"][0]["name"]
'vllm'
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from typing import Any

from runbooks.model.errors import UsageError
from runbooks.model.secrets import REDACTED, redact_argv, redact_text, secret_name

#: the container fields a flag edit may change, in the order their operations are written
FIELDS = ("command", "args", "env")
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def changed_fields(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """The fields of FIELDS whose presence or value differs between the two container specs."""
    return [f for f in FIELDS if (f in old) != (f in new) or old.get(f) != new.get(f)]


def json_patch(prefix: str, old: dict[str, Any], new: dict[str, Any]) -> list[dict[str, Any]]:
    """RFC 6902 operations turning container `old` (at JSON pointer `prefix`) into `new`, element
    by element. Raises UsageError secret_in_edited_word when an element the patch must carry
    holds a credential."""
    ops: list[dict[str, Any]] = []
    for name in changed_fields(old, new):
        path = f"{prefix}/{name}"
        before, after = old.get(name), new.get(name)
        if name in old and name in new and isinstance(before, list) and isinstance(after, list):
            ops += _list_ops(path, name, before, after)
            continue
        # a whole field appears or goes (an edit that made `args`, its rollback): it holds only
        # what gpumem wrote, and is checked like any element
        for value in (before, after):
            if isinstance(value, list):
                _no_secret(name, value, range(len(value)))
        if name in old:
            ops.append({"op": "test", "path": path, "value": copy.deepcopy(before)})
            if name in new:
                ops.append({"op": "replace", "path": path, "value": copy.deepcopy(after)})
            else:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": copy.deepcopy(after)})
    return ops


def _key(item: Any) -> str:
    return json.dumps(item, sort_keys=True)


def _list_ops(path: str, name: str, old: list[Any], new: list[Any]) -> list[dict[str, Any]]:
    """Element operations turning list `old` into `new`, in order: each block of differing
    elements is written at its place in the result (`new`'s index), so after the patch every
    replaced or added element sits at the index its operation names."""
    matcher = difflib.SequenceMatcher(a=[_key(x) for x in old], b=[_key(x) for x in new], autojunk=False)
    ops: list[dict[str, Any]] = []
    old_touched: list[int] = []
    new_touched: list[int] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        common = min(i2 - i1, j2 - j1)
        for k in range(common):
            at = f"{path}/{j1 + k}"
            ops += [{"op": "test", "path": at, "value": copy.deepcopy(old[i1 + k])},
                    {"op": "replace", "path": at, "value": copy.deepcopy(new[j1 + k])}]
        for j in range(j1 + common, j2):
            ops.append({"op": "add", "path": f"{path}/{j}", "value": copy.deepcopy(new[j])})
        for i in reversed(range(i1 + common, i2)):  # the highest first: the indices below stay put
            at = f"{path}/{j1 + common + (i - i1 - common)}"
            ops += [{"op": "test", "path": at, "value": copy.deepcopy(old[i])}, {"op": "remove", "path": at}]
        if i2 - i1 > j2 - j1:
            ops += _anchor(path, name, new, j1 + common)
        old_touched += range(i1, i2)
        new_touched += range(j1, j2)
    _no_secret(name, old, old_touched)
    _no_secret(name, new, new_touched)
    if apply_list_ops(old, path, ops) != new:  # the patch must say exactly the change, or nothing is planned
        raise UsageError("flag_not_editable", reason="patch_not_exact", field=name)
    return ops


def element_shown(name: str, items: list[Any], index: int) -> Any:
    """Element `index` of container field `name` (`command`, `args`, `env`) as gpumem may show or
    keep it: masked when it carries a credential in its context (a rollback's refusal quotes
    what is there now, and someone may have moved a key to the place gpumem wrote).

    >>> element_shown("args", ["--api-key", "abc123"], 1), element_shown("args", ["--n", "8"], 1)
    ('<redacted>', '8')
    """
    masked = redact_argv(items) if name in ("command", "args") else [_masked_env(e) for e in items]
    if masked[index] != items[index] and not _a_number_masked(items[index], masked[index]):
        return masked[index]
    return items[index]


def _anchor(path: str, name: str, new: list[Any], at: int) -> list[dict[str, Any]]:
    """After a removal, a `test` of the element that now stands next to the gap (the one after
    it, else the one before), so the rollback's re-insertion (the inverse, in reverse order)
    lands between the same neighbours or fails; none when that element carries a credential."""
    for index in (at, at - 1):
        if 0 <= index < len(new):
            try:
                _no_secret(name, new, [index])
            except UsageError:
                return []
            return [{"op": "test", "path": f"{path}/{index}", "value": copy.deepcopy(new[index])}]
    return []


def _no_secret(name: str, items: list[Any], touched: Any) -> None:
    """Refuse when an element the patch carries holds a credential, read in its context (the
    value after `--api-key` is secret only because of the word before it)."""
    masked = redact_argv(items) if name in ("command", "args") else [_masked_env(e) for e in items]
    for i in touched:
        if masked[i] != items[i] and not _a_number_masked(items[i], masked[i]):
            raise UsageError("secret_in_edited_word", where=f"{name}[{i}]")


def _a_number_masked(word: Any, masked: Any) -> bool:
    """Whether the mask hid only a number (`--max-num-batched-token=16384`: an abbreviation
    whose last word reads "token"): a number is never a credential."""
    if not isinstance(word, str) or not isinstance(masked, str):
        return False
    head, _, tail = masked.partition(REDACTED)
    if not word.startswith(head) or not word.endswith(tail) or REDACTED in tail:
        return False
    hidden = word[len(head):len(word) - len(tail)]
    return bool(_NUMBER.fullmatch(hidden))


def _masked_env(entry: Any) -> Any:
    if not isinstance(entry, dict):
        return entry
    value = entry.get("value")
    if isinstance(value, str) and value and (secret_name(str(entry.get("name") or ""))
                                             or redact_text(value) != value):
        return {**entry, "value": REDACTED}
    return entry


def apply_list_ops(old: list[Any], path: str, ops: list[dict[str, Any]]) -> list[Any]:
    """`old` (the list at `path`) as element operations on it leave it; a failed `test` or an
    index out of range raises UsageError patch_not_exact.

    >>> apply_list_ops(["a", "b"], "/x", [{"op": "add", "path": "/x/1", "value": "c"}])
    ['a', 'c', 'b']
    """
    items = copy.deepcopy(old)
    for op in ops:
        index_text = op["path"][len(path) + 1:]
        if not op["path"].startswith(path + "/") or not index_text.isdigit():
            raise UsageError("flag_not_editable", reason="patch_not_exact", field=path)
        index = int(index_text)
        limit = len(items) + 1 if op["op"] == "add" else len(items)
        if index >= limit or (op["op"] == "test" and items[index] != op["value"]):
            raise UsageError("flag_not_editable", reason="patch_not_exact", field=path)
        if op["op"] == "add":
            items.insert(index, copy.deepcopy(op["value"]))
        elif op["op"] == "remove":
            del items[index]
        elif op["op"] == "replace":
            items[index] = copy.deepcopy(op["value"])
    return items


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
