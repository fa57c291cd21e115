"""Typed reads of loaded Kubernetes objects (YAML/JSON dicts), failing with the field's path.

Objects come from `kubectl get -o yaml` files or from the `kubernetes` client turned into
plain data with `ApiClient().sanitize_for_serialization(obj)`: camelCase keys, timestamps as
ISO strings (or datetimes, when YAML resolved an unquoted one). Every reader takes the
dotted path of the value so a malformed object is reported where it is wrong:

>>> as_list(5, "spec.template.spec.containers[0].args", "deployment.yaml")
Traceback (most recent call last):
...
collectors.errors.ParseError: deployment.yaml: read.field(field=spec.template.spec.containers[0].args, message=read.expected(what=read.a.list))

(a person reads it worded in their language: "...args: expected a list", "...args：应为列表")
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, time
from typing import Any

from collectors.errors import ParseError, field, kind_of, noun, quoted, said
from runbooks.model.phrases import Phrase

_INT_TEXT = re.compile(r"[+-]?\d{1,18}")


def fail(source: str, path: str, message: Phrase) -> ParseError:
    """The ParseError for `path` (built, not raised, so callers can `raise fail(...)`)."""
    return ParseError(source, field(path, message))


def expected(what: str, got: Any = None) -> Phrase:
    """"expected a list", or "expected an integer, got 'x'" where the value found is worth naming
    (a Phrase noun such as `kind_of(value)`, or the value itself, quoted)."""
    if got is None:
        return said("expected", what=noun(what))
    return said("expected_got", what=noun(what), got=got if isinstance(got, Phrase) else quoted(repr(got)))


def as_mapping(value: Any, path: str, source: str) -> dict[str, Any]:
    """A mapping, or {} when absent (None). Keys become strings (YAML may give ints/bools)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(source, path, expected("mapping", kind_of(value)))
    return {str(k): v for k, v in value.items()}


def as_list(value: Any, path: str, source: str) -> list[Any]:
    """A list, or [] when absent (None)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise fail(source, path, expected("list"))
    return value


def as_str(value: Any, path: str, source: str) -> str | None:
    """A string; scalars YAML resolved to numbers or booleans come back as text."""
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    raise fail(source, path, expected("string", kind_of(value)))


def as_int(value: Any, path: str, source: str) -> int | None:
    """An integer (ints, integral floats, or digit strings such as `"1"`)."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise fail(source, path, expected("integer", noun("boolean")))
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and _INT_TEXT.fullmatch(value.strip()):
        return int(value.strip())
    raise fail(source, path, expected("integer", value))


def as_bool(value: Any, path: str, source: str) -> bool | None:
    if value is None:
        return None
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise fail(source, path, expected("boolean"))


def as_time(value: Any, path: str, source: str) -> datetime | None:
    """A timezone-aware instant from an RFC 3339 string or a YAML-resolved datetime (naive = UTC)."""
    if value is None or value == "":
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, date):
        return datetime.combine(value, time(), tzinfo=UTC)
    if isinstance(value, str):
        parsed = parse_instant(value)
        if parsed is not None:
            return parsed
    raise fail(source, path, expected("timestamp", value))


def parse_instant(text: str) -> datetime | None:
    """RFC 3339 text to an aware datetime, None when it is not one.

    >>> parse_instant("2024-05-01T10:00:00Z").isoformat()
    '2024-05-01T10:00:00+00:00'
    """
    text = text.strip()
    if len(text) < 10 or not text[:4].isdigit():
        return None
    # Kubernetes MicroTime has 6 fractional digits; other writers may print up to 9.
    text = re.sub(r"(\.\d{6})\d+", r"\1", text)
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def str_map(value: Any, path: str, source: str) -> dict[str, str]:
    """A string-to-string mapping such as labels or nodeSelector (None values are dropped)."""
    out: dict[str, str] = {}
    for key, item in as_mapping(value, path, source).items():
        text = as_str(item, f"{path}.{key}", source)
        if text is not None:
            out[key] = text
    return out


def dig(obj: dict[str, Any], dotted: str, source: str, base: str = "") -> Any:
    """The value at a dotted path of nested mappings, None when any step is absent.

    >>> dig({"spec": {"template": {"spec": {}}}}, "spec.template.spec", "x.yaml")
    {}
    """
    value: Any = obj
    walked = base
    for step in dotted.split("."):
        value = as_mapping(value, walked, source).get(step)
        walked = f"{walked}.{step}" if walked else step
        if value is None:
            return None
    return value
