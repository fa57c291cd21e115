"""The words of a shell script with where each one stands in the text, so a word can be edited in place.

Splits the way `runbooks.launch.forms.split_shell_commands` reads a script
(continuations `\\` + newline join lines, newlines and `;` `&` `|` end a command, `#` starts a
comment, redirections are not words, quotes and `$(...)` / backticks stay inside their word),
but keeps each word's span in the original text instead of its unquoted value. The caller
checks the words against the parser's reading before relying on them.

>>> [c.texts for c in scan_commands("set -e\\nvllm serve M \\\\\\n  --port 8000 2>&1 | tee log")]
[('set', '-e'), ('vllm', 'serve', 'M', '--port', '8000'), ('tee', 'log')]
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: what runbooks.launch.forms replaces by one space before splitting lines
CONTINUATION = re.compile(r"\\[ \t]*\r?\n")
#: a redirection at the start of a word (runbooks.launch.forms drops these before splitting words)
_REDIRECTION = re.compile(r"\d*(?:&>>?|>>?&?|<&?)[ \t]*[^\s;&|]+")
#: the characters str.splitlines() ends a line at
_LINE_ENDS = frozenset("\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029")
_BLANKS = frozenset(" \t")
_OPERATORS = frozenset(";&|")


class ScriptNotReadable(ValueError):
    """The script has a construct the scanner cannot place (an unclosed quote or substitution)."""


@dataclass(frozen=True)
class Word:
    """One word of a script: `text[start:end]`, quotes and all."""

    start: int
    end: int
    text: str


@dataclass(frozen=True)
class ScriptCommand:
    """One simple command of a script: its words in order."""

    words: tuple[Word, ...]

    @property
    def texts(self) -> tuple[str, ...]:
        return tuple(w.text for w in self.words)


def scan_commands(script: str) -> list[ScriptCommand]:
    """The simple commands of `script`, each word with its span. Raises ScriptNotReadable."""
    commands: list[ScriptCommand] = []
    current: list[Word] = []
    i, n = 0, len(script)
    line_start = True

    def finish() -> None:
        if current:
            commands.append(ScriptCommand(tuple(current)))
            current.clear()

    while i < n:
        ch = script[i]
        continuation = CONTINUATION.match(script, i)
        if continuation:
            i = continuation.end()
            line_start = False
        elif ch in _BLANKS:
            i += 1
        elif ch in _LINE_ENDS:
            finish()
            i += 1
            line_start = True
        elif ch == "#":
            while i < n and script[i] not in _LINE_ENDS:
                i += 1
        elif ch in _OPERATORS:
            finish()
            while i < n and script[i] in _OPERATORS:
                i += 1
            line_start = False
        else:
            redirect = _REDIRECTION.match(script, i)
            blank_before = line_start or script[i - 1] in _BLANKS or script[i - 1] == "\n"
            if redirect and blank_before:
                i = redirect.end()
                continue
            end = _word_end(script, i)
            current.append(Word(i, end, script[i:end]))
            i = end
            line_start = False
    finish()
    return commands


def _word_end(script: str, i: int) -> int:
    n = len(script)
    while i < n:
        ch = script[i]
        if ch in _BLANKS or ch in _LINE_ENDS or ch in _OPERATORS or ch == "#":
            return i
        if ch == "'":
            close = script.find("'", i + 1)
            if close < 0:
                raise ScriptNotReadable("unclosed single quote")
            i = close + 1
        elif ch == '"':
            i = _double_quote_end(script, i + 1)
        elif ch == "\\":
            if CONTINUATION.match(script, i):
                return i
            i += 2
        elif script.startswith("$(", i):
            i = _paren_end(script, i + 2)
        elif ch == "`":
            close = script.find("`", i + 1)
            if close < 0:
                raise ScriptNotReadable("unclosed backtick")
            i = close + 1
        else:
            i += 1
    return min(i, n)


def _double_quote_end(script: str, i: int) -> int:
    while i < len(script):
        if script[i] == "\\":
            i += 2
        elif script[i] == '"':
            return i + 1
        else:
            i += 1
    raise ScriptNotReadable("unclosed double quote")


def _paren_end(script: str, i: int) -> int:
    depth = 1
    while i < len(script):
        if script[i] == "(":
            depth += 1
        elif script[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise ScriptNotReadable("unclosed $(")


def line_of(script: str, offset: int) -> int:
    """1-based line number of `offset` in `script`.

    >>> line_of("a\\nb c", 4)
    2
    """
    return script.count("\n", 0, offset) + 1
