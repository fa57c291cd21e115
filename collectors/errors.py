"""Typed errors of collectors. Each names where the problem is, so the report can say it.

What went wrong is said as a `runbooks.model.phrases.Phrase` under `read.` (worded in the
reader's language by the catalogs, `phrase.read.*`), never as gpumem's own English: a Chinese
triage says 第 3 行 and 缺失, not "line 3" and "missing". Text that comes from elsewhere (a YAML
library's complaint, an API server's Status message) rides along quoted (`quoted`).
"""

from __future__ import annotations

from typing import Any

from runbooks.model.phrases import Phrase


def said(key: str, **params: Any) -> Phrase:
    """A reason under `phrase.read.`: `said("missing")`, `said("field", field="kind", message=...)`."""
    return Phrase("read." + key, params)


def noun(name: str) -> Phrase:
    """What a field should have been ("a list"), under `phrase.read.a.`."""
    return Phrase("read.a." + name)


def quoted(text: object, limit: int = 200) -> Phrase:
    """Words from outside gpumem (a library's or a server's message), quoted as they came."""
    return Phrase("read.quoted", {"text": str(text)[:limit]})


def kind_of(value: object) -> Phrase:
    """What a value found in a document is, as a noun: "a number", "a list"... (a type of
    its own is named as Python calls it, quoted)."""
    if value is None:
        return noun("null_value")
    if isinstance(value, bool):
        return noun("boolean")
    if isinstance(value, int | float):
        return noun("number")
    if isinstance(value, str):
        return noun("string")
    if isinstance(value, list):
        return noun("list")
    if isinstance(value, dict):
        return noun("mapping")
    return quoted(type(value).__name__)


def field(path: str | Phrase, message: Phrase) -> Phrase:
    """`message` about the field at `path` ("spec.replicas: expected an integer"); the bare
    message where there is no path."""
    return said("field", field=path, message=message) if path else message


def internal_error(error: BaseException) -> Phrase:
    """A reading that failed on gpumem's own fault (a parser bug): said, and the rest read on."""
    return said("internal_error", error=quoted(f"{type(error).__name__}: {str(error)[:200]}"))


def os_error(error: BaseException) -> Phrase:
    """A file the system would not hand over, with the system's own words."""
    return said("cannot_read", detail=quoted(getattr(error, "strerror", None) or error, 300))


class CollectorError(Exception):
    """Base of every collector error.

    An error that a person reads as the answer (a workload that does not exist) is also a
    `runbooks.model.errors.GpumemError`, so the surfaces word it without knowing collectors.
    """


class ParseError(CollectorError):
    """A file or payload could not be read. `source` is the file name, `line` 1-based or None;
    `message` a Phrase under `read.` (text is taken as words from outside, quoted).

    >>> e = ParseError("metrics.txt", said("missing"), line=12)
    >>> str(e), e.reason
    ('metrics.txt line 12: read.missing', Phrase(key='read.where_line', params={'source': 'metrics.txt', 'line': 12, 'message': Phrase(key='read.missing', params={})}))
    """

    def __init__(self, source: str, message: Phrase | str, line: int | None = None):
        self.source = source
        self.message = message if isinstance(message, Phrase) else quoted(message, 300)
        self.line = line
        where = f"{source} line {line}" if line is not None else source
        super().__init__(f"{where}: {self.message}")

    @property
    def reason(self) -> Phrase:
        """The whole error as one phrase: the file, the line where there is one, and why."""
        if self.line is not None:
            return said("where_line", source=self.source, line=self.line, message=self.message)
        return said("where", source=self.source, message=self.message)
