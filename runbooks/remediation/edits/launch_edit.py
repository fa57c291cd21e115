"""set_args: edit a server flag where the Deployment keeps it, and nothing else.

`edit_flags(workload, container, changes)` takes a Deployment or StatefulSet as the API returns
it (a dict) and `changes` mapping an engine flag's canonical name ("max-num-seqs",
"mem-fraction-static", "max-total-tokens", ...) to its new value: an int, float or str; True
for a switch; None to remove the flag so the engine default applies again. It returns an
`EditResult`: the edited object, the container fields that change, the exact JSON patch (with
`test` on every old value), a strategic merge patch, a diff line per flag and the inverse change.

Where the flag is kept is where it is edited, in the spelling and form the spec uses:

- a list element `--flag=value` or a pair `--flag`, `value` in `command`/`args` (any launch
  form the parser reads: `vllm serve`, `python -m ...`, args on the image's entrypoint);
- a word inside a `sh -c`/`bash -c` script or a whole command line in one `command` element:
  only that word's characters change, so quoting, continuations and other lines stay as written;
- an env var: `--flag=$(VAR)`, `--flag $VAR` in a script, or TGI's own MAX_TOTAL_TOKENS etc.;
- a flag that is absent goes after the last engine flag, joined or split like its neighbours
  (in a script, on the server's command line, on a new continuation line if the flags have
  their own); for TGI launched from env vars, as one more env var;
- a flag given twice: the last one is edited (argparse reads the last) and the diff says so;
  removing it removes every occurrence, and for TGI the env var too, so the default returns.

What cannot be edited safely is refused with `UsageError("flag_not_editable", reason=...)`
(a value computed by the shell, a script in a file, an env var from a Secret or shared with
another setting, ...), never guessed. Every edit is read back with the `ContainerReader` it is
handed (`runbooks.remediation.edits.reader`; bot.service hands it the parser triage uses), and
refused unless the reader reads exactly the requested flags changed and the rest as before.

The function is pure: no I/O, the input is not modified.

>>> from runbooks.launch.argv import parse_command_line
>>> class CommandLine:  # a reader of the container's command line alone (bot.service hands triage's)
...     def server_config(self, spec):
...         return parse_command_line([*spec.get("command", []), *spec.get("args", [])], image=spec.get("image"))
...     def server_container(self, pod_spec):
...         return 0
>>> reader = CommandLine()
>>> deploy = {"kind": "Deployment", "spec": {"template": {"spec": {"containers": [{
...     "name": "vllm", "image": "vllm/vllm-openai:v0.8.5", "command": ["vllm", "serve"],
...     "args": ["Qwen/Qwen2.5-7B-Instruct", "--max_num_seqs", "256", "--gpu-memory-utilization=0.95"]}]}}}}
>>> result = edit_flags(deploy, "vllm", {"max-num-seqs": 64, "gpu-memory-utilization": 0.9}, reader=reader)
>>> result.fields["args"]
['Qwen/Qwen2.5-7B-Instruct', '--max_num_seqs', '64', '--gpu-memory-utilization=0.9']
>>> result.diff()
['--max_num_seqs 256 -> 64 (args[2])', '--gpu-memory-utilization 0.95 -> 0.9 (args[3])']
>>> [(op["op"], op["path"].rsplit("/", 2)[-2:]) for op in result.json_patch]
[('test', ['args', '2']), ('replace', ['args', '2']), ('test', ['args', '3']), ('replace', ['args', '3'])]
>>> edit_flags(result.workload, "vllm", result.inverse, reader=reader).workload == deploy
True
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from runbooks.catalogs.engine_defaults import parse_version
from runbooks.catalogs.engine_flags import FLAGS, choose_spelling
from runbooks.catalogs.engine_flags_read import any_entry
from runbooks.launch.argv import canonical_flag
from runbooks.launch.flag_tables import (
    BOOLEAN_FLAGS,
    ENV_HINTS,
    FIELD_MAP,
    MODEL_FLAG,
    TGI_ENV_FLAGS,
    known_flags,
)
from runbooks.model.errors import StaleObject, UsageError
from runbooks.model.evidence import ServerConfig
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.launch_map import (
    LIST_FIELDS,
    ArgWord,
    LaunchMap,
    Loc,
    Occurrence,
    map_launch,
    refuse,
)
from runbooks.remediation.edits.patches import FIELDS, changed_fields, json_patch, strategic_merge_patch
from runbooks.remediation.edits.reader import ContainerReader, ContainerShapeError

POD_PATH = "/spec/template/spec"
JSON_PATCH = "application/json-patch+json"
#: settings an engine takes under two names (TGI's --max-input-tokens / --max-input-length),
#: from the engine flag table: each spelling, then the others; the one the spec already uses
#: is the one edited
SYNONYMS: dict[str, dict[str, tuple[str, ...]]] = {
    engine: {s.flag: (s.flag, *(o.flag for o in e.spellings if o.flag != s.flag))
             for e in table.values() if len(e.spellings) > 1 for s in e.spellings}
    for engine, table in FLAGS.items()
}
#: env var names an engine or its libraries read by themselves (never edited as a flag's value)
_ENGINE_ENV_PREFIXES = ("VLLM_", "SGLANG_", "SGL_", "HF_", "CUDA_", "NCCL_", "PYTORCH_", "TORCH_")
_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_SHELL_REF = re.compile(r"\$(?:([A-Za-z_][A-Za-z0-9_]*)|\{([A-Za-z_][A-Za-z0-9_]*)\})")
#: a word the shell reads as itself, unquoted
_SHELL_SAFE = re.compile(r"[A-Za-z0-9_.,:/@%+=~^-]+")
_SPECIAL = frozenset("$`\\'\"")
#: a number as text, as the engines' own parsers take it ("8192", "0.9", "16k", "-1", "1e-3")
_NUMBER_TEXT = re.compile(r"[+-]?[0-9][0-9A-Za-z._+-]*")
_QUOTES = "'\""


# ------------------------------------------------------------------ splices


@dataclass(frozen=True)
class TextSplice:
    """Characters `start:end` of string element `index` of `field` become `text`."""

    field: str
    index: int
    start: int
    end: int
    text: str
    order: int = 0


@dataclass(frozen=True)
class ListSplice:
    """Elements `start:end` of list `field` ("command", "args" or "env") become `items`."""

    field: str
    start: int
    end: int
    items: tuple[Any, ...]
    order: int = 0


Splice = TextSplice | ListSplice


@dataclass(frozen=True)
class Restore:
    """The inverse of an edit that added, removed or re-spelled a flag: the exact splices that
    put back what was there, valid only on the object that edit returned (`fingerprint`).

    `value` is what the engine read before (None: the flag was absent)."""

    value: str | None
    splices: tuple[Splice, ...]
    drop_fields: tuple[str, ...] = ()
    fingerprint: str = ""


# ------------------------------------------------------------------ result


@dataclass(frozen=True)
class FlagEdit:
    """One flag's change as a person reads it: `old`/`new` are the values the engine reads
    (None: the engine default), `written` the flag as the spec spells it."""

    flag: str
    written: str
    old: str | None
    new: str | None
    where: str
    #: text, or a phrase about the flag's spelling for the deployed version (`Choice.note`)
    notes: tuple[str | Phrase, ...] = ()

    def describe(self, word: Callable[[Any], str] = str) -> str:
        """'--max_num_seqs 256 -> 64 (args[2])', '--enforce-eager (default) -> true (after args[7])';
        `word` words the notes that are phrases (a catalog's `phrase`; default: their compact form)."""
        old = "(default)" if self.old is None else self.old
        new = "(default)" if self.new is None else self.new
        return f"{self.written} {old} -> {new} ({self.where})" + "".join(f"; {word(n)}" for n in self.notes)


@dataclass(frozen=True)
class EditResult:
    """What `edit_flags` did (see the module docstring).

    `fields` holds the new value of each container field that changes (`old_fields` the old
    one; absent: None). `json_patch` is the exact patch a plan sends (`patch_type`);
    `merge_patch` the strategic merge form of the same change. `old` maps each changed flag to
    the value the engine read before (None: absent). `inverse` is the `changes` that give the
    original object back from `workload`, byte for byte: the old value where a value was edited
    in place, a `Restore` where a flag was added, removed or re-spelled."""

    container: str
    container_index: int
    engine: str
    launch_form: str
    edits: tuple[FlagEdit, ...]
    fields: dict[str, Any]
    old_fields: dict[str, Any]
    json_patch: tuple[dict[str, Any], ...]
    merge_patch: dict[str, Any]
    old: dict[str, str | None]
    inverse: dict[str, Any]
    workload: dict[str, Any]
    before: ServerConfig
    after: ServerConfig
    patch_type: str = JSON_PATCH
    #: each flag of `changes` -> the spelling edited (the object's, else the deployed version's)
    spelled: dict[str, str] = field(default_factory=dict)

    @property
    def patch(self) -> tuple[dict[str, Any], ...]:
        """The exact patch: RFC 6902 operations, `test` on each old value before it changes."""
        return self.json_patch

    @property
    def container_path(self) -> str:
        return f"{POD_PATH}/containers/{self.container_index}"

    @property
    def changed(self) -> bool:
        return bool(self.json_patch)

    def diff(self, word: Callable[[Any], str] = str) -> list[str]:
        return [e.describe(word) for e in self.edits]

    def spelling_notes(self) -> tuple[Phrase, ...]:
        """What the edits say about a flag's spelling for the deployed version (`Choice.note`:
        "TGI version unknown: --max-input-length kept as the object spells it"), each once."""
        seen: list[Phrase] = []
        for e in self.edits:
            seen += [n for n in e.notes if isinstance(n, Phrase) and n not in seen]
        return tuple(seen)


# ------------------------------------------------------------------ entry point


def edit_flags(workload: dict[str, Any], container: str | None, changes: Mapping[str, Any],
               engine_version: str | None = None, *, reader: ContainerReader) -> EditResult:
    """Set, add or remove engine flags of one container of `workload` (see the module docstring).

    `container` None: the server container triage picks (`reader` reads the containers). Each flag is written in a spelling the
    deployed engine version accepts: the image tag's version, else `engine_version` (the log's
    version line), else only the spelling the object already uses (or one every version read
    accepts). Raises UsageError (`flag_not_editable`, `flag_unknown`, `flag_not_in_version`,
    `flag_value_invalid`, `flag_value_not_safe`, `container_not_found`, `workload_shape`) or
    StaleObject (a `Restore` applied to another object than the one it undoes).
    """
    containers = _containers(workload)
    index = _container_index(workload, containers, container, reader)
    spec = containers[index]
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError("workload_shape", path=f"{POD_PATH}/containers/{index}/name")
    before = _read(spec, reader)
    launch = map_launch(spec)
    planner = _Planner(spec, launch, before, engine_version)
    for order, (key, value) in enumerate(changes.items(), start=1):
        planner.change(str(key), value, order)
    splices = planner.finish()
    planner.edits = [replace(e, notes=(*e.notes, planner.version_notes[e.flag])) if e.flag in planner.version_notes
                     else e for e in planner.edits]
    new_spec = apply_splices(spec, splices, planner.drops)
    after = _read(new_spec, reader)
    _confirm(before, after, planner.expected)
    edited = copy.deepcopy(workload)
    edited["spec"]["template"]["spec"]["containers"][index] = new_spec
    prefix = f"{POD_PATH}/containers/{index}"
    touched = changed_fields(spec, new_spec)
    fingerprint = _fingerprint(new_spec)
    return EditResult(
        container=name,
        container_index=index,
        engine=launch.engine,
        launch_form=launch.form,
        edits=tuple(planner.edits),
        fields={f: copy.deepcopy(new_spec.get(f)) for f in touched},
        old_fields={f: copy.deepcopy(spec.get(f)) for f in touched},
        json_patch=tuple(json_patch(prefix, spec, new_spec)),
        merge_patch=strategic_merge_patch(spec, new_spec),
        old={e.flag: e.old for e in planner.edits if e.old != e.new},
        inverse=planner.inverse(spec, splices, fingerprint),
        workload=edited,
        before=before,
        after=after,
        spelled=dict(planner.spelled),
    )


def server_container(workload: dict[str, Any], container: str | None, *,
                     reader: ContainerReader) -> tuple[int, dict[str, Any], ServerConfig]:
    """(index, spec, server config) of the server container: `container` by name, else the one
    triage picks, as `reader` reads them. Raises UsageError container_not_found, workload_shape,
    or the refusal no_server."""
    containers = _containers(workload)
    index = _container_index(workload, containers, container, reader)
    spec = containers[index]
    return index, spec, _read(spec, reader)


def _containers(workload: Any) -> list[Any]:
    try:
        containers = workload["spec"]["template"]["spec"]["containers"]
    except (KeyError, TypeError) as e:
        raise UsageError("workload_shape", path=f"{POD_PATH}/containers") from e
    if not isinstance(containers, list) or not all(isinstance(c, dict) for c in containers):
        raise UsageError("workload_shape", path=f"{POD_PATH}/containers")
    return containers


def _container_index(workload: dict[str, Any], containers: list[dict[str, Any]], name: str | None,
                     reader: ContainerReader) -> int:
    if name is not None:
        for i, item in enumerate(containers):
            if item.get("name") == name:
                return i
        raise UsageError("container_not_found", container=name,
                         containers=[str(c.get("name")) for c in containers])
    try:
        index = reader.server_container(workload["spec"]["template"]["spec"])
    except ContainerShapeError as e:
        raise UsageError("workload_shape", detail=e.reason) from e
    if index is None:
        raise refuse("no_server")
    return index


def _read(spec: dict[str, Any], reader: ContainerReader) -> ServerConfig:
    try:
        config = reader.server_config(spec)
    except ContainerShapeError as e:
        raise UsageError("workload_shape", detail=e.reason) from e
    if config is None:
        raise refuse("no_server")
    return config


def _confirm(before: ServerConfig, after: ServerConfig, expected: dict[str, str]) -> None:
    """The reader must read the requested flags changed and everything else as before."""
    same = (after.engine, after.launch_form, after.model) == (before.engine, before.launch_form, before.model)
    if not same or after.flags != expected:
        raise refuse("not_confirmed_by_parser",
                     changed=sorted(k for k in set(after.flags) | set(expected) if after.flags.get(k) != expected.get(k)))


def _fingerprint(spec: dict[str, Any]) -> str:
    doc = {f: spec.get(f) for f in FIELDS if f in spec}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


# ------------------------------------------------------------------ values


def _kind(engine: str, flag: str) -> str:
    for name, _, kind in FIELD_MAP.get(engine, ()):
        if name == flag:
            return kind
    return "str"


def render_value(engine: str, flag: str, value: Any) -> str:
    """The text an engine reads for `value` of `flag`.

    >>> render_value("vllm", "max-num-seqs", 64.0), render_value("vllm", "gpu-memory-utilization", 0.85)
    ('64', '0.85')
    >>> render_value("vllm", "enforce-eager", True)
    'true'
    """
    switch = flag in BOOLEAN_FLAGS.get(engine, frozenset())
    if switch:
        if not isinstance(value, bool):
            raise UsageError("flag_value_invalid", flag=flag, value=repr(value)[:80], expected="bool")
        return "true" if value else "false"
    kind = _kind(engine, flag)
    if isinstance(value, bool):
        raise UsageError("flag_value_invalid", flag=flag, value=repr(value), expected=kind)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise UsageError("flag_value_invalid", flag=flag, value=repr(value), expected=kind)
        if kind == "int":
            if not value.is_integer():
                raise UsageError("flag_value_invalid", flag=flag, value=repr(value), expected=kind)
            return str(int(value))
        return repr(value)
    if isinstance(value, str) and value and value.strip() == value and value.isprintable() and (
            kind not in ("int", "float") or _NUMBER_TEXT.fullmatch(value)):
        return value
    raise UsageError("flag_value_invalid", flag=flag, value=repr(value)[:80], expected=kind)


@dataclass(frozen=True)
class _Literal:
    """A value written literally: chars start:end of string element `index` of `field`."""

    field: str
    index: int
    start: int
    end: int
    quote: str
    shell: bool
    text: str


@dataclass(frozen=True)
class _EnvRef:
    var: str
    shell: bool


def _unquote(text: str) -> tuple[str, str]:
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] == text[0] and text[0] not in text[1:-1]:
        return text[1:-1], text[0]
    return text, ""


def _value_site(word: ArgWord, joined: bool) -> _Literal | _EnvRef:
    """Where the value of a flag word (joined) or of a value word (split) is written."""
    loc = word.loc
    shell = loc.span is not None
    base = loc.span[0] if loc.span else 0
    inner, quote = _unquote(word.raw) if shell else (word.raw, "")
    offset = 1 if quote else 0
    if joined:
        name, eq, rest = inner.partition("=")
        if not eq or not _SHELL_SAFE.fullmatch(name):
            raise refuse("value_not_literal", where=word.where)
        offset += len(name) + 1
        inner = rest
    if shell and not quote:
        unquoted, quote = _unquote(inner)
        if quote:
            inner, offset = unquoted, offset + 1
    ref = _K8S_REF.fullmatch(inner)
    if ref:
        return _EnvRef(ref.group(1), shell)
    ref = _SHELL_REF.fullmatch(inner) if shell and quote != "'" else None
    if ref:
        return _EnvRef(ref.group(1) or ref.group(2), shell)
    if "$(" in inner or "${" in inner or "`" in inner:
        raise refuse("value_computed_by_shell" if shell else "value_not_literal", where=word.where)
    if _SPECIAL & set(inner) or (shell and not quote and not _SHELL_SAFE.fullmatch(inner)):
        raise refuse("value_not_literal", where=word.where)
    return _Literal(loc.field, loc.index, base + offset, base + offset + len(inner), quote, shell, inner)


def _fits(text: str, site: _Literal) -> bool:
    """Whether `text` can stand where `site` is without quoting it differently."""
    if _SPECIAL & set(text):
        return False
    if site.shell and not site.quote:
        return bool(_SHELL_SAFE.fullmatch(text))
    return True


# ------------------------------------------------------------------ the planner


@dataclass
class _Target:
    key: str
    name: str
    switch: bool
    occurrences: list[Occurrence]
    env_index: int | None
    order: int


@dataclass
class _Intent:
    """What one change does: value splices now, removals and additions placed at the end."""

    target: _Target
    splices: list[Splice] = field(default_factory=list)
    remove_words: set[int] = field(default_factory=set)
    add_tokens: list[str] | None = None
    add_env: dict[str, str] | None = None
    plain_inverse: str | None = None
    restore: Restore | None = None
    old: str | None = None
    edit: int = -1


class _Planner:
    def __init__(self, spec: dict[str, Any], launch: LaunchMap, before: ServerConfig, version: str | None = None):
        self.spec = spec
        self.map = launch
        self.engine = launch.engine
        self.before = before
        self.expected = dict(before.flags)
        self.edits: list[FlagEdit] = []
        self.intents: list[_Intent] = []
        self.drops: list[str] = []
        self.env = spec.get("env") if isinstance(spec.get("env"), list) else []
        self.seen: set[str] = set()
        #: the engine version the flags are spelled for (image tag, else the caller's)
        self.version = before.engine_version or version
        #: flag -> what the plan says about its spelling and the version (engine_flags.Choice.note)
        self.version_notes: dict[str, Phrase] = {}
        #: each requested flag -> the spelling edited
        self.spelled: dict[str, str] = {}

    # -------------------------------------------------------------- one change

    def change(self, key: str, value: Any, order: int) -> None:
        target = self._target(key, order)
        if isinstance(value, Restore):
            self._restore(target, value)
            return
        if value is None:
            self._remove(target)
            return
        text = render_value(self.engine, target.name, value)
        if target.switch:
            self._switch(target, text)
        else:
            self._set(target, text)

    def _target(self, key: str, order: int) -> _Target:
        engine = self.engine
        name = canonical_flag(engine, key.lstrip("-"))
        if name == MODEL_FLAG.get(engine):
            raise refuse("model_flag", flag=name)
        if name not in known_flags(engine):
            raise UsageError("flag_unknown", flag=name, engine=engine)
        names = SYNONYMS.get(engine, {}).get(name, (name,))
        present = [n for n in names if any(o.name == n for o in self.map.occurrences) or self._tgi_env(n) is not None]
        if len(present) > 1:
            raise refuse("given_twice", flag=name, spellings=present)
        name = self._spelling(name, tuple(present))
        self.spelled[key] = name
        if self.seen & set(names) or name in self.seen:
            raise UsageError("flag_repeated", flag=name)
        self.seen.update({name, *names})
        occurrences = [o for o in self.map.occurrences if o.name == name]
        return _Target(key, name, name in BOOLEAN_FLAGS.get(engine, frozenset()), occurrences,
                       self._tgi_env(name), order)

    def _spelling(self, name: str, present: tuple[str, ...]) -> str:
        """The spelling the deployed version accepts (`runbooks.catalogs.engine_flags`): the
        object's own where it has one, else the version's; refused where that version (or, the
        version unknown, some version read) rejects every spelling."""
        choice = choose_spelling(self.engine, name, parse_version(self.version), present,
                                 entry=any_entry(self.engine, name))
        if choice.flag is None:
            raise UsageError("flag_not_in_version", flag=name, engine=self.engine, version=self.version or "unknown",
                             reason=choice.reason)
        if choice.note:
            self.version_notes[choice.flag] = choice.note
        return choice.flag

    def _tgi_env(self, name: str) -> int | None:
        """Index of the env entry TGI reads `name` from, if the spec has one."""
        if self.engine != "tgi":
            return None
        var = name.upper().replace("-", "_")
        found = [i for i, e in enumerate(self.env) if isinstance(e, dict) and e.get("name") == var]
        if not found:
            return None
        if var not in TGI_ENV_FLAGS:
            raise refuse("tgi_env_not_read", var=var)
        if len(found) > 1:
            raise refuse("env_var_repeated", var=var)
        return found[0]

    def _written(self, occurrence: Occurrence) -> str:
        word = self.map.words[occurrence.flag].value
        return word.partition("=")[0] if occurrence.style == "joined" else word

    def _duplicate_note(self, target: _Target) -> tuple[str, ...]:
        if len(target.occurrences) < 2:
            return ()
        last = self.map.words[target.occurrences[-1].flag].where
        others = ", ".join(self.map.words[o.flag].where for o in target.occurrences[:-1])
        return (f"given {len(target.occurrences)} times: the engine reads the last ({last}); {others} left as written",)

    def _record(self, intent: _Intent, edit: FlagEdit, expected: str | None) -> None:
        intent.edit = len(self.edits)
        self.intents.append(intent)
        self.edits.append(edit)
        if expected is None:
            self.expected.pop(intent.target.name, None)
        else:
            self.expected[intent.target.name] = expected

    # -------------------------------------------------------------- set a value

    def _set(self, target: _Target, text: str) -> None:
        if target.occurrences:
            if self.engine == "tgi" and len(target.occurrences) > 1:
                raise refuse("given_twice", flag=target.name)
            occurrence = target.occurrences[-1]
            if len(occurrence.values) > 1:
                raise refuse("multi_value", flag=target.name)
            joined = occurrence.style == "joined"
            word = self.map.words[occurrence.flag if joined else occurrence.last]
            if occurrence.style not in ("joined", "split"):
                raise refuse("value_not_literal", where=word.where)
            site = _value_site(word, joined)
            notes = self._duplicate_note(target)
            if self.engine == "tgi" and target.env_index is not None and not self._same_env(site, target):
                notes += (f"env {self.env[target.env_index]['name']} is shadowed by the command line; left as is",)
            self._set_at(target, site, occurrence.value, text, self._written(occurrence), notes)
        elif target.env_index is not None:
            entry = self.env[target.env_index]
            self._check_env_entry(entry, target)
            self._set_env(target, target.env_index, entry["value"], text, f"--{target.name}", ())
        else:
            self._add(target, text)

    def _same_env(self, site: _Literal | _EnvRef, target: _Target) -> bool:
        return isinstance(site, _EnvRef) and site.var == self.env[target.env_index].get("name")

    def _set_at(self, target: _Target, site: _Literal | _EnvRef, old: str, text: str, written: str,
                notes: tuple[str, ...]) -> None:
        if isinstance(site, _EnvRef):
            index = self._env_site(site, target)
            self._set_env(target, index, old, text, written, notes)
            return
        where = self._where_literal(site)
        if site.text != old:
            raise refuse("launch_read_differently", where=where)
        intent = _Intent(target, plain_inverse=old, old=old)
        if old != text:
            if not _fits(text, site):
                raise UsageError("flag_value_not_safe", flag=target.name, value=text, where=where)
            intent.splices.append(TextSplice(site.field, site.index, site.start, site.end, text, target.order))
        self._record(intent, FlagEdit(target.name, written, old, text, where, notes), text)

    def _where_literal(self, site: _Literal) -> str:
        for word in self.map.words:
            if (word.loc.field, word.loc.index) == (site.field, site.index) and (
                    word.loc.span is None or word.loc.span[0] <= site.start <= word.loc.span[1]):
                return word.where
        return f"{site.field}[{site.index}]"

    def _set_env(self, target: _Target, index: int, old: str, text: str, written: str,
                 notes: tuple[str, ...]) -> None:
        entry = self.env[index]
        if "$" in text:  # Kubernetes would expand it
            raise UsageError("flag_value_not_safe", flag=target.name, value=text, where=f"env {entry['name']}")
        intent = _Intent(target, plain_inverse=old, old=old)
        if old != text:
            new_entry = {**entry, "value": text}
            intent.splices.append(ListSplice("env", index, index + 1, (new_entry,), target.order))
        where = f"env {entry['name']}"
        self._record(intent, FlagEdit(target.name, written, old, text, where, notes), text)

    def _check_env_entry(self, entry: dict[str, Any], target: _Target) -> None:
        var = entry.get("name")
        if entry.get("valueFrom") is not None or not isinstance(entry.get("value"), str):
            raise refuse("value_from_secret_or_configmap", var=var)
        if "$" in entry["value"]:
            raise refuse("env_value_computed", var=var)
        if self._references(var) != 0:
            raise refuse("env_var_shared", var=var)

    def _references(self, var: str) -> int:
        """How many times `var` is referred to in command, args and the env's own values."""
        pattern = re.compile(rf"\$\$|\$\({var}\)|\$\{{{var}(?![A-Za-z0-9_])|\${var}(?![A-Za-z0-9_])")
        texts = [w for f in LIST_FIELDS for w in (self.spec.get(f) or []) if isinstance(w, str)]
        texts += [e.get("value") for e in self.env if isinstance(e, dict) and isinstance(e.get("value"), str)]
        return sum(1 for t in texts for m in pattern.finditer(t) if m.group(0) != "$$")

    def _env_site(self, ref: _EnvRef, target: _Target) -> int:
        """The env entry a `$(VAR)`/`$VAR` value comes from, when editing it there changes only this flag."""
        var = ref.var
        found = [i for i, e in enumerate(self.env) if isinstance(e, dict) and e.get("name") == var]
        if not found:
            raise refuse("value_computed_by_shell" if ref.shell else "value_from_undefined_variable", var=var)
        if len(found) > 1:
            raise refuse("env_var_repeated", var=var)
        entry = self.env[found[0]]
        if entry.get("valueFrom") is not None or not isinstance(entry.get("value"), str):
            raise refuse("value_from_secret_or_configmap", var=var)
        if "$" in entry["value"]:
            raise refuse("env_value_computed", var=var)
        if ref.shell and self.map.script is not None:
            script = self.spec[self.map.script.field][self.map.script.index]
            if re.search(rf"(?<![A-Za-z0-9_$]){var}=", script):
                raise refuse("value_set_in_script", var=var)
        if self.engine == "tgi" and var in TGI_ENV_FLAGS:
            # TGI reads it too: fine for this flag, not when it also sets another one
            other = TGI_ENV_FLAGS[var]
            if other != target.name and not any(o.name == other for o in self.map.occurrences):
                raise refuse("env_var_read_by_engine", var=var)
        elif var in ENV_HINTS or var.startswith(_ENGINE_ENV_PREFIXES):
            raise refuse("env_var_read_by_engine", var=var)
        if self._references(var) != 1:
            raise refuse("env_var_shared", var=var)
        return found[0]

    # -------------------------------------------------------------- switches

    def _switch(self, target: _Target, text: str) -> None:
        if not target.occurrences:
            if text == "false":
                raise refuse("switch_off_unsupported", flag=target.name)
            self._add(target, text)
            return
        occurrence = target.occurrences[-1]
        notes = self._duplicate_note(target)
        written = self._written(occurrence)
        word = self.map.words[occurrence.flag]
        if occurrence.style in ("joined", "split"):
            value_word = word if occurrence.style == "joined" else self.map.words[occurrence.last]
            self._set_at(target, _value_site(value_word, occurrence.style == "joined"), occurrence.value, text,
                         written, notes)
            return
        if occurrence.value == text:
            self._record(_Intent(target, plain_inverse=text, old=text),
                         FlagEdit(target.name, written, text, text, word.where, notes), text)
            return
        if occurrence.style == "bare":
            raise refuse("switch_off_unsupported", flag=target.name)
        # `--no-X` -> `--X`: drop the three characters "no-" of the word as written
        dashes = len(word.raw) - len(word.raw.lstrip("-"))
        if word.raw != word.value or word.raw[dashes:dashes + 3] not in ("no-", "no_"):
            raise refuse("value_not_literal", where=word.where)
        base = word.loc.span[0] if word.loc.span else 0
        splice = TextSplice(word.loc.field, word.loc.index, base + dashes, base + dashes + 3, "", target.order)
        intent = _Intent(target, splices=[splice], old="false")
        self._record(intent, FlagEdit(target.name, written, "false", "true", word.where, notes), "true")

    # -------------------------------------------------------------- remove

    def _remove(self, target: _Target) -> None:
        intent = _Intent(target)
        notes: list[str] = []
        if target.occurrences:
            last = target.occurrences[-1]
            intent.old = last.value
            written = self._written(last)
            where = self.map.words[last.flag].where
            for occurrence in target.occurrences:
                intent.remove_words.update(range(occurrence.flag, occurrence.last + 1))
            if len(target.occurrences) > 1:
                notes.append(f"given {len(target.occurrences)} times: all removed")
        elif target.env_index is not None:
            written, where = f"--{target.name}", f"env {self.env[target.env_index]['name']}"
        else:
            self._record(intent, FlagEdit(target.name, f"--{target.name}", None, None, "absent"), None)
            return
        if target.env_index is not None:
            entry = self.env[target.env_index]
            if intent.old is None:
                intent.old = entry.get("value") if isinstance(entry.get("value"), str) else None
            else:
                notes.append(f"env {entry['name']} removed too (TGI reads it)")
            if self._references(entry["name"]) > sum(
                    1 for o in target.occurrences for i in (o.flag, *o.values)
                    if f"$({entry['name']})" in self.map.words[i].raw):
                raise refuse("env_var_shared", var=entry["name"])
            intent.splices.append(ListSplice("env", target.env_index, target.env_index + 1, (), target.order))
        if intent.old is None:
            intent.old = self.before.flags.get(target.name)
        if isinstance(self.spec.get("envFrom"), list) and self.engine == "tgi":
            notes.append("envFrom may still set it")
        self._record(intent, FlagEdit(target.name, written, intent.old, None, where, tuple(notes)), None)

    # -------------------------------------------------------------- add

    def _add(self, target: _Target, text: str) -> None:
        intent = _Intent(target)
        if self.engine == "tgi" and self._tgi_uses_env():
            var = target.name.upper().replace("-", "_")
            if var not in TGI_ENV_FLAGS:
                raise refuse("tgi_no_env_var", flag=target.name)
            if "$" in text:
                raise UsageError("flag_value_not_safe", flag=target.name, value=text, where=f"env {var}")
            intent.add_env = {"name": var, "value": text}
            written, where = f"--{target.name}", f"env {var}, new"
        else:
            intent.add_tokens = self._tokens(target, text)
            written = intent.add_tokens[0].partition("=")[0]
            where = "added"
        self._record(intent, FlagEdit(target.name, written, None, text, where), text)

    def _tgi_uses_env(self) -> bool:
        if any(o.style in ("joined", "split") for o in self.map.occurrences):
            return False
        has_env_flags = any(isinstance(e, dict) and e.get("name") in TGI_ENV_FLAGS for e in self.env)
        return self.map.form == "tgi-env" or has_env_flags

    def _tokens(self, target: _Target, text: str) -> list[str]:
        valued = [o for o in self.map.occurrences if o.style in ("joined", "split")]
        spelled = [self._written(o).lstrip("-") for o in valued]
        multiword = [s for s in spelled if "-" in s or "_" in s]
        underscore = self.engine == "vllm" and bool(multiword) and all("_" in s and "-" not in s for s in multiword)
        flag = "--" + (target.name.replace("-", "_") if underscore else target.name)
        if target.switch:
            return [flag]
        if valued and valued[-1].style == "joined":
            return [f"{flag}={text}"]
        return [flag, text]

    # -------------------------------------------------------------- restore

    def _restore(self, target: _Target, restore: Restore) -> None:
        if restore.fingerprint != _fingerprint(self.spec):
            raise StaleObject("launch_changed_since_edit", flag=target.name)
        for splice in restore.splices:
            self._check_bounds(splice)
        current = self.before.flags.get(target.name)
        intent = _Intent(target, splices=list(restore.splices), old=current)
        created = tuple(dict.fromkeys(s.field for s in restore.splices
                                      if isinstance(s, ListSplice) and s.field not in self.spec))
        if created:
            intent.restore = Restore(None, (), created)
        self.drops.extend(restore.drop_fields)
        self._record(intent, FlagEdit(target.name, f"--{target.name}", current, restore.value, "restored"),
                     restore.value)

    def _check_bounds(self, splice: Splice) -> None:
        if isinstance(splice, ListSplice):
            items = self.spec.get(splice.field)
            size = len(items) if isinstance(items, list) else 0
            ok = 0 <= splice.start <= splice.end <= size
        else:
            items = self.spec.get(splice.field)
            ok = isinstance(items, list) and 0 <= splice.index < len(items) and isinstance(items[splice.index], str) \
                and 0 <= splice.start <= splice.end <= len(items[splice.index])
        if not ok:
            raise StaleObject("launch_changed_since_edit", field=splice.field)

    # -------------------------------------------------------------- placing removals and additions

    def finish(self) -> list[Splice]:
        removed = {i: intent for intent in self.intents for i in intent.remove_words}
        for field_, index, runs in self._runs(sorted(removed)):
            for run in runs:
                self._remove_run(field_, index, run, removed)
        adds = [i for i in self.intents if i.add_tokens is not None]
        if adds:
            self._place_adds(adds, set(removed))
        env_adds = [i for i in self.intents if i.add_env is not None]
        if env_adds:
            at = max((i + 1 for i, e in enumerate(self.env) if isinstance(e, dict) and e.get("name") in TGI_ENV_FLAGS),
                     default=len(self.env))
            for intent in env_adds:
                intent.splices.append(ListSplice("env", at, at, (intent.add_env,), intent.target.order))
                if "env" not in self.spec:
                    intent.restore = Restore(None, (), ("env",))
        splices = [s for intent in self.intents for s in intent.splices]
        _check_overlaps(splices)
        return splices

    def _runs(self, indices: list[int]) -> list[tuple[str, int | None, list[list[int]]]]:
        """Removed argv words grouped by where they live, in runs of neighbours."""
        groups: dict[tuple[str, int | None], list[list[int]]] = {}
        for i in indices:
            word = self.map.words[i]
            key = (word.loc.field, word.loc.index if word.loc.span is not None else None)
            runs = groups.setdefault(key, [])
            if runs and runs[-1][-1] == i - 1 and self._adjacent(self.map.words[i - 1], word):
                runs[-1].append(i)
            else:
                runs.append([i])
        return [(f, idx, runs) for (f, idx), runs in groups.items()]

    @staticmethod
    def _adjacent(a: ArgWord, b: ArgWord) -> bool:
        if a.loc.span is None or b.loc.span is None:
            return a.loc.span is None and b.loc.span is None and a.loc.field == b.loc.field \
                and a.loc.index + 1 == b.loc.index
        return a.next_start == b.loc.span[0]

    def _remove_run(self, field_: str, index: int | None, run: list[int], owner: dict[int, _Intent]) -> None:
        words = [self.map.words[i] for i in run]
        if index is None:
            # list elements: each owner deletes its own consecutive elements
            for group in _split_by_owner(run, owner):
                first, last = self.map.words[group[0]].loc.index, self.map.words[group[-1]].loc.index
                owner[group[0]].splices.append(ListSplice(field_, first, last + 1, (), owner[group[0]].target.order))
            return
        text = self.spec[field_][index]
        first, last = words[0], words[-1]
        assert first.loc.span is not None and last.loc.span is not None
        following = text[last.loc.span[1]:last.next_start] if last.next_start is not None else None
        preceding = text[first.prev_end:first.loc.span[0]] if first.prev_end is not None else None
        if following is not None and following.strip(" \t") == "":
            cuts = [self.map.words[i].loc.span[0] for i in run] + [last.next_start]  # type: ignore[index]
        elif preceding is not None and _blank_gap(preceding):
            cuts = [first.prev_end] + [self.map.words[i].loc.span[1] for i in run]  # type: ignore[index]
        else:
            raise refuse("no_room_to_remove", where=first.where)
        # split [cuts[0], cuts[-1]) among the owners at word boundaries
        start = 0
        for group in _split_by_owner(run, owner):
            end = start + len(group)
            owner[group[0]].splices.append(
                TextSplice(field_, index, cuts[start], cuts[end], "", owner[group[0]].target.order))  # type: ignore[arg-type]
            start = end

    def _place_adds(self, adds: list[_Intent], removed: set[int]) -> None:
        anchor = self._anchor(removed)
        for intent in adds:
            tokens = intent.add_tokens or []
            where = f"after {anchor.where}" if anchor is not None else f"{self._list_insert_at(None).field}, new"
            self.edits[intent.edit] = replace(self.edits[intent.edit], where=where)
            if anchor is not None and anchor.loc.span is not None:
                if not all(_SHELL_SAFE.fullmatch(t) for t in tokens):
                    raise UsageError("flag_value_not_safe", flag=intent.target.name, value=tokens[-1])
                gap = self.map.continuation or " "
                at = anchor.loc.span[1]
                intent.splices.append(TextSplice(anchor.loc.field, anchor.loc.index, at, at,
                                                 gap + " ".join(tokens), intent.target.order))
                continue
            if any("$" in t for t in tokens):
                raise UsageError("flag_value_not_safe", flag=intent.target.name, value=tokens[-1])
            loc = self._list_insert_at(anchor)
            intent.splices.append(ListSplice(loc.field, loc.index, loc.index, tuple(tokens), intent.target.order))
            if loc.field not in self.spec and loc.field not in self.drops:
                intent.restore = Restore(None, (), (loc.field,))

    def _anchor(self, removed: set[int]) -> ArgWord | None:
        """The word a new flag follows: the last flag (or its value) kept, else the last word kept,
        else the server command itself."""
        kept = [o for o in self.map.occurrences if o.flag not in removed]
        if kept:
            return self.map.words[kept[-1].last]
        words = [i for i in range(len(self.map.words)) if i not in removed]
        if words:
            return self.map.words[words[-1]]
        return self.map.head

    def _list_insert_at(self, anchor: ArgWord | None) -> Loc:
        if anchor is None:
            return self.map.head_index or Loc("args", 0)
        command = self.spec.get("command") or []
        if anchor is self.map.head and anchor.loc.field == "command" and anchor.loc.index == len(command) - 1 \
                and isinstance(self.spec.get("args"), list):
            return Loc("args", 0)
        return Loc(anchor.loc.field, anchor.loc.index + 1)

    # -------------------------------------------------------------- the inverse

    def inverse(self, spec: dict[str, Any], splices: list[Splice], fingerprint: str) -> dict[str, Any]:
        # inserts that land on one spot go back in the order their text had in `spec`
        rank = {id(s): i for i, s in enumerate(sorted(splices, key=lambda s: (s.start, s.end, s.order)))}
        out: dict[str, Any] = {}
        for intent in self.intents:
            if intent.plain_inverse is not None:
                if intent.splices:
                    out[intent.target.name] = intent.plain_inverse
                continue
            if not intent.splices:
                continue
            back = tuple(_inverse_splice(spec, s, splices, rank[id(s)]) for s in intent.splices)
            drops = intent.restore.drop_fields if intent.restore else ()
            out[intent.target.name] = Restore(intent.old, back, drops, fingerprint)
        return out


def _blank_gap(text: str) -> bool:
    return bool(re.fullmatch(r"(?:[ \t]|\\[ \t]*\r?\n)+", text))


def _split_by_owner(run: list[int], owner: dict[int, _Intent]) -> list[list[int]]:
    groups: list[list[int]] = []
    for i in run:
        if groups and owner[groups[-1][-1]] is owner[i]:
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


# ------------------------------------------------------------------ applying splices


def _before(m: Splice, k: Splice) -> bool:
    """Whether splice `m` lands before splice `k` in the edited text (same string or list)."""
    if m.end > k.start:
        return False
    both_inserts = m.start == m.end == k.start == k.end
    return not both_inserts or m.order < k.order


def _same_target(a: Splice, b: Splice) -> bool:
    if isinstance(a, TextSplice) and isinstance(b, TextSplice):
        return (a.field, a.index) == (b.field, b.index)
    return isinstance(a, ListSplice) and isinstance(b, ListSplice) and a.field == b.field


def _check_overlaps(splices: list[Splice]) -> None:
    for i, a in enumerate(splices):
        for b in splices[i + 1:]:
            if _same_target(a, b) and a.start < b.end and b.start < a.end:
                raise refuse("edits_overlap", field=a.field)
    texts = {(s.field, s.index) for s in splices if isinstance(s, TextSplice)}
    for s in splices:
        if isinstance(s, ListSplice) and any(f == s.field and s.start <= i < s.end for f, i in texts):
            raise refuse("edits_overlap", field=s.field)


def apply_splices(spec: dict[str, Any], splices: list[Splice], drops: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """A copy of container `spec` with `splices` (all in `spec`'s coordinates) applied; the fields
    in `drops` are removed afterwards when left empty."""
    new = copy.deepcopy(spec)
    order = sorted(splices, key=lambda s: (s.start, s.end, s.order), reverse=True)
    for s in order:
        if isinstance(s, TextSplice):
            text = new[s.field][s.index]
            new[s.field][s.index] = text[:s.start] + s.text + text[s.end:]
    for s in order:
        if isinstance(s, ListSplice):
            items = new.get(s.field)
            if items is None:  # absent, or `args: null` as a manifest may say
                items = new[s.field] = []
            items[s.start:s.end] = [copy.deepcopy(x) for x in s.items]
    for name in drops:
        if new.get(name) == []:
            del new[name]
    return new


def _inverse_splice(spec: dict[str, Any], k: Splice, splices: list[Splice], order: int) -> Splice:
    """The splice, in the edited object's coordinates, that undoes `k` (`order`: its rank in `spec`)."""
    if isinstance(k, ListSplice):
        start = k.start + sum(len(m.items) - (m.end - m.start) for m in splices
                              if m is not k and isinstance(m, ListSplice) and m.field == k.field and _before(m, k))
        old = tuple(copy.deepcopy((spec.get(k.field) or [])[k.start:k.end]))
        return ListSplice(k.field, start, start + len(k.items), old, order)
    index = k.index + sum(len(m.items) - (m.end - m.start) for m in splices
                          if isinstance(m, ListSplice) and m.field == k.field and m.end <= k.index)
    start = k.start + sum(len(m.text) - (m.end - m.start) for m in splices
                          if m is not k and isinstance(m, TextSplice) and _same_target(m, k) and _before(m, k))
    old = spec[k.field][k.index][k.start:k.end]
    return TextSplice(k.field, index, start, start + len(k.text), old, order)
