"""What a person reads of a reason: a phrase (`runbooks.model.phrases.Phrase`, its stored
JSON, a ParseError, a ReadIssue) worded by a catalog, so tests assert on the sentence.

>>> from collectors.errors import ParseError, said
>>> en(ParseError("a.yaml", said("missing"), line=3))
'a.yaml line 3: missing'
>>> zh(said("missing"))
'缺失'
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

import pytest

from bot.render.i18n import Catalog
from bot.render.wording import issue_text
from collectors.errors import ParseError
from runbooks.model.evidence import ReadIssue


def words(value: Any, lang: str = "en") -> Any:
    """`value` in `lang`'s words; a list, tuple or set item by item; None stays None."""
    cat = Catalog.load(lang)
    if value is None:
        return None
    if isinstance(value, ParseError):
        return cat.phrase(value.reason)
    if isinstance(value, ReadIssue):
        return issue_text(cat, value)
    if isinstance(value, (list, tuple)):
        return type(value)(words(v, lang) for v in value)
    if isinstance(value, (set, frozenset)):
        return {words(v, lang) for v in value}
    return cat.phrase(value)


def en(value: Any) -> Any:
    return words(value, "en")


def zh(value: Any) -> Any:
    return words(value, "zh")


def message(issue: ReadIssue | ParseError, lang: str = "en") -> str:
    """The reason alone (no source, no line), as `issue.message` read before it was a phrase."""
    return Catalog.load(lang).phrase(issue.message)


@contextlib.contextmanager
def raises(kind: type[BaseException], match: str | None = None) -> Iterator[Any]:
    """`pytest.raises`, with `match` searched in the error as a person reads it in English
    (a ParseError's str() is its phrase's compact form, for logs)."""
    with pytest.raises(kind) as caught:
        yield caught
    if match is not None:
        text = en(caught.value) if isinstance(caught.value, ParseError) else str(caught.value)
        assert re.search(match, text), f"{match!r} not found in {text!r}"
