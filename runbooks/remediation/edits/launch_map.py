"""Where each word of the engine's command line stands in a container spec, and its flags.

`map_launch` reads a container the way `collectors.parsers.flags` does (the same
`runbooks.launch.forms.locate_launch`), then finds every word of the engine's own argv in the
spec: a list element of `command`/`args`, or a span of characters inside a `sh -c` script or a
whole command line packed into one `command` element. It only answers when its words, read as the parser reads
them, are exactly the parser's argv; anything else is refused (`UsageError("flag_not_editable")`)
rather than guessed.

>>> m = map_launch({"image": "vllm/vllm-openai:v0.8.5", "command": ["sh", "-c"],
...                 "args": ["vllm serve M --max-num-seqs 64 && echo done"]})
>>> m.form, [w.value for w in m.words], m.words[-1].where
('shell-string', ['M', '--max-num-seqs', '64'], 'args[0] line 1')
>>> [(o.name, o.style, o.value) for o in flag_occurrences("vllm", ["M", "--max_num_seqs=8", "--enforce-eager"])]
[('max-num-seqs', 'joined', '8'), ('enforce-eager', 'bare', 'true')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from runbooks.launch.argv import canonical_flag, parse_engine_args
from runbooks.launch.flag_tables import BOOLEAN_FLAGS, MULTI_VALUE_FLAGS, VALUE_FLAGS
from runbooks.launch.forms import (
    SHELLS,
    Launch,
    expand_k8s_refs,
    expand_shell_refs,
    find_server,
    locate_launch,
    split_words,
    strip_wrappers,
)
from runbooks.model.errors import UsageError
from runbooks.remediation.edits.script_words import (
    CONTINUATION,
    ScriptCommand,
    ScriptNotReadable,
    line_of,
    scan_commands,
)

LIST_FIELDS = ("command", "args")
_NUMBER_WORD = re.compile(r"-\d+(\.\d+)?")
_GAP = re.compile(r"(?:[ \t]|\\[ \t]*\r?\n)+")
_EXPORTS = frozenset({"export", "declare", "local", "readonly"})
_ASSIGNMENT = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=(.*)", re.DOTALL)


def refuse(reason: str, **params: Any) -> UsageError:
    """The typed refusal of an edit that cannot be made safely (the caller raises it)."""
    return UsageError("flag_not_editable", reason=reason, **params)


@dataclass(frozen=True)
class Loc:
    """A place in a container spec: element `index` of `field`, or chars `span` inside it."""

    field: str
    index: int
    span: tuple[int, int] | None = None


@dataclass(frozen=True)
class ArgWord:
    """One word of the engine's argv: where it is, what the spec holds there, what the engine gets.

    For a word inside a string, `prev_end`/`next_start` bound the blanks around it within its
    own simple command (None at the command's ends)."""

    loc: Loc
    raw: str
    value: str
    where: str
    prev_end: int | None = None
    next_start: int | None = None


@dataclass(frozen=True)
class Occurrence:
    """One flag as written: the argv index of its flag word and of its value words.

    `style`: "joined" (`--f=v`), "split" (`--f v`), "bare" (`--f`, a switch on) or "negated"
    (`--no-f`); `value` is what the engine reads ("true"/"false" for switches)."""

    name: str
    flag: int
    values: tuple[int, ...]
    style: str
    value: str

    @property
    def last(self) -> int:
        return self.values[-1] if self.values else self.flag


@dataclass
class LaunchMap:
    """A container's server launch, word by word (see the module docstring)."""

    engine: str
    form: str
    words: tuple[ArgWord, ...]
    #: where a flag goes when no argv word is left to follow: after this word, or at `head_index`
    head: ArgWord | None
    head_index: Loc | None
    #: the blanks that start a new continuation line in the server's script (None: one space)
    continuation: str | None
    #: the string element holding a script or a single-string command, if any
    script: Loc | None
    env: dict[str, str]
    launch: Launch
    occurrences: list[Occurrence] = field(default_factory=list)


def container_env(container: dict[str, Any]) -> dict[str, str]:
    """The container's env as Kubernetes resolves it (`$(VAR)` of earlier entries expanded);
    entries from a ConfigMap, Secret or field are not in it."""
    env: dict[str, str] = {}
    for entry in container.get("env") or []:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            continue
        if entry.get("valueFrom") is not None:
            env.pop(entry["name"], None)
            continue
        value = entry.get("value")
        env[entry["name"]] = expand_k8s_refs(value if isinstance(value, str) else "", env)
    return env


def map_launch(container: dict[str, Any]) -> LaunchMap:
    """The engine's argv of `container`, each word with its place in the spec. Raises the refusal
    `flag_not_editable` when the launch is not in the spec or reads differently than the parser."""
    env = container_env(container)
    raw = {f: _string_list(container, f) for f in LIST_FIELDS}
    expanded = {f: [expand_k8s_refs(w, env) for w in raw[f]] for f in LIST_FIELDS}
    image = container.get("image") if isinstance(container.get("image"), str) else None
    launch = locate_launch(expanded["command"], expanded["args"], image, dict(env))
    if launch is None or launch.engine is None:
        raise refuse("no_server")
    if launch.form is None:
        # e.g. `sh /scripts/start.sh`: the command line is in a file (a ConfigMap), not in the spec
        raise refuse("launch_form_unknown")
    tokens = [(Loc(f, i), raw[f][i], expanded[f][i]) for f in LIST_FIELDS for i in range(len(raw[f]))]
    if launch.form == "shell-string":
        mapped = _map_script(tokens, env, launch)
    elif launch.form == "single-string-command":
        mapped = _map_single_string(tokens, env, launch)
    else:
        mapped = _map_list(tokens, launch)
    mapped.occurrences = flag_occurrences(mapped.engine, [w.value for w in mapped.words])
    return mapped


def _string_list(container: dict[str, Any], name: str) -> list[str]:
    value = container.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(w, str) for w in value):
        raise refuse("not_a_string_list", field=name)
    return list(value)


def _list_word(loc: Loc, raw: str, value: str) -> ArgWord:
    return ArgWord(loc, raw, value, f"{loc.field}[{loc.index}]")


def _check_argv(words: list[ArgWord], launch: Launch) -> None:
    if [w.value for w in words] != launch.argv:
        raise refuse("launch_read_differently")


def _map_list(tokens: list[tuple[Loc, str, str]], launch: Launch) -> LaunchMap:
    n = len(launch.argv)
    tail = tokens[len(tokens) - n:] if n else []
    words = [_list_word(loc, r, v) for loc, r, v in tail]
    _check_argv(words, launch)
    head = _list_word(*tokens[len(tokens) - n - 1]) if len(tokens) > n else None
    return LaunchMap(launch.engine or "", launch.form or "", tuple(words), head, None if head else Loc("args", 0),
                     None, None, launch.env, launch)


def _shell_script_index(words: list[str], env: dict[str, str]) -> int:
    """Index in `words` of the script a `sh -c SCRIPT` runs (as runbooks.launch.forms finds it)."""
    rest = strip_wrappers(list(words), dict(env))
    skip = len(words) - len(rest)
    if not rest or rest[0].rsplit("/", 1)[-1] not in SHELLS:
        raise refuse("launch_read_differently")
    for i, word in enumerate(rest[1:], start=1):
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            if skip + i + 1 < len(words):
                return skip + i + 1
            break
        if not word.startswith("-"):
            break
    raise refuse("launch_read_differently")


def _cook(raw: str, env: dict[str, str]) -> str | None:
    """The word the parser reads for one span of a string (None: it reads more than one word)."""
    words = split_words(expand_k8s_refs(raw, env))
    return words[0] if len(words) == 1 else None


def _span_words(command: ScriptCommand, loc: Loc, script: str, cooked: list[str | None]) -> list[ArgWord]:
    out = []
    words = command.words
    for i, word in enumerate(words):
        out.append(ArgWord(
            Loc(loc.field, loc.index, (word.start, word.end)), word.text, cooked[i] if cooked[i] is not None else "",
            f"{loc.field}[{loc.index}] line {line_of(script, word.start)}",
            words[i - 1].end if i > 0 else None, words[i + 1].start if i + 1 < len(words) else None))
    return out


def _continuation_gap(command: ScriptCommand, script: str) -> str | None:
    gaps = [script[a.end:b.start] for a, b in zip(command.words, command.words[1:], strict=False)]
    for gap in reversed(gaps):
        if CONTINUATION.search(gap):
            return gap if _GAP.fullmatch(gap) else None
    return None


def _map_script(tokens: list[tuple[Loc, str, str]], env: dict[str, str], launch: Launch) -> LaunchMap:
    at = _shell_script_index([v for _, _, v in tokens], env)
    loc, script, _ = tokens[at]
    try:
        commands = scan_commands(script)
    except ScriptNotReadable as e:
        raise refuse("script_not_readable", detail=str(e)) from e
    shell_env = dict(env)
    for command in commands:
        cooked_raw = [_cook(w.text, env) for w in command.words]
        if any(c is None for c in cooked_raw):
            # a word the shell computes ($((a + b)), $(cmd args)): refused if it is the server's
            guess = [c if c is not None else w.text for c, w in zip(cooked_raw, command.words, strict=True)]
            if find_server(guess, dict(shell_env), 1) is not None:
                raise refuse("value_computed_by_shell",
                             where=f"{loc.field}[{loc.index}] line {line_of(script, command.words[0].start)}")
            continue
        cooked = [expand_shell_refs(c or "", shell_env) for c in cooked_raw]
        if cooked[0] in _EXPORTS:
            for word in cooked[1:]:
                assignment = _ASSIGNMENT.fullmatch(word)
                if assignment:
                    shell_env[assignment.group(1)] = assignment.group(2)
            continue
        rest = strip_wrappers(list(cooked), dict(shell_env))
        found = find_server(cooked, shell_env, 1)  # as runbooks.launch.forms: `A=b` words stay in the env after
        if found is None:
            continue
        if rest and rest[0].rsplit("/", 1)[-1] in SHELLS:
            raise refuse("nested_shell")
        n = len(found[2])
        if n and cooked[-n:] != found[2]:
            raise refuse("launch_read_differently")
        all_words = _span_words(command, loc, script, [c for c in cooked])
        words = all_words[len(all_words) - n:] if n else []
        _check_argv(words, launch)
        head = all_words[len(all_words) - n - 1]
        return LaunchMap(launch.engine or "", launch.form or "", tuple(words), head, None,
                         _continuation_gap(command, script), loc, launch.env, launch)
    raise refuse("launch_read_differently")


def _map_single_string(tokens: list[tuple[Loc, str, str]], env: dict[str, str], launch: Launch) -> LaunchMap:
    loc, text, _ = tokens[0]
    try:
        commands = scan_commands(text)
    except ScriptNotReadable as e:
        raise refuse("script_not_readable", detail=str(e)) from e
    words: list[ArgWord] = []
    for command in commands:
        cooked = [_cook(w.text, env) for w in command.words]
        if any(c is None for c in cooked):
            raise refuse("launch_read_differently")
        words += _span_words(command, loc, text, cooked)
    words += [_list_word(loc_, r, v) for loc_, r, v in tokens[1:]]
    rest = strip_wrappers([w.value for w in words], dict(env))
    if rest and rest[0].rsplit("/", 1)[-1] in SHELLS:
        raise refuse("nested_shell")
    n = len(launch.argv)
    argv = words[len(words) - n:] if n else []
    _check_argv(argv, launch)
    head = words[len(words) - n - 1] if len(words) > n else None
    return LaunchMap(launch.engine or "", launch.form or "", tuple(argv), head, None, None, loc, launch.env, launch)


def _is_flag(word: str) -> bool:
    return word.startswith("-") and len(word) > 1 and not _NUMBER_WORD.fullmatch(word)


def flag_occurrences(engine: str, argv: list[str]) -> list[Occurrence]:
    """Every flag in `argv` as the engine reads it (the walk of `parse_engine_args`, keeping places).

    Raises the refusal `launch_read_differently` when the flags it finds are not the parser's."""
    booleans = BOOLEAN_FLAGS.get(engine, frozenset())
    valued = VALUE_FLAGS.get(engine, frozenset())
    found: list[Occurrence] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        at = i
        i += 1
        if word == "--":
            break
        if not _is_flag(word):
            continue
        raw_name, has_value, value = word.lstrip("-").partition("=")
        name = canonical_flag(engine, raw_name)
        if not has_value and name.startswith("no-") and canonical_flag(engine, name[3:]) in booleans:
            found.append(Occurrence(canonical_flag(engine, name[3:]), at, (), "negated", "false"))
        elif has_value:
            found.append(Occurrence(name, at, (), "joined", value))
        elif name in booleans:
            if i < len(argv) and argv[i].lower() in ("true", "false"):
                found.append(Occurrence(name, at, (i,), "split", argv[i].lower()))
                i += 1
            else:
                found.append(Occurrence(name, at, (), "bare", "true"))
        elif i < len(argv) and not _is_flag(argv[i]):
            values = [i]
            i += 1
            while name in MULTI_VALUE_FLAGS and i < len(argv) and not _is_flag(argv[i]):
                values.append(i)
                i += 1
            found.append(Occurrence(name, at, tuple(values), "split", " ".join(argv[v] for v in values)))
        else:
            # a flag read with a value, none given, is not on (`parse_engine_args`)
            found.append(Occurrence(name, at, (), "bare", "" if name in valued else "true"))
    if {o.name: o.value for o in found} != parse_engine_args(engine, argv)[0]:
        raise refuse("launch_read_differently")
    return found
