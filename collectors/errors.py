"""Typed errors of collectors. Each names where the problem is, so the report can say it."""

from __future__ import annotations


class CollectorError(Exception):
    """Base of every collector error.

    An error that a person reads as the answer (a workload that does not exist) is also a
    `runbooks.model.errors.GpumemError`, so the surfaces word it without knowing collectors.
    """


class ParseError(CollectorError):
    """A file or payload could not be read. `source` is the file name, `line` 1-based or None.

    >>> str(ParseError("metrics.txt", "bad sample value", line=12))
    'metrics.txt line 12: bad sample value'
    """

    def __init__(self, source: str, message: str, line: int | None = None):
        self.source = source
        self.message = message
        self.line = line
        where = f"{source} line {line}" if line is not None else source
        super().__init__(f"{where}: {message}")
