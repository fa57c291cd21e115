"""Message catalogs (bot/render/locales/<lang>.yaml) and the formatting of their values.

All wording lives in the catalogs; code passes keys and values.

>>> en = Catalog.load("en")
>>> en.t("priority.high")
'high: requests are being rejected or pods keep restarting'
>>> en.t("section.coverage", pct=97)
'Evidence coverage 97%'
>>> en.t("fact.kv_usage", usage_pct=None)
'KV-cache usage n/a%'
"""

from __future__ import annotations

import re
import string
from functools import cache
from importlib import resources
from typing import Any

import yaml

try:  # libyaml reads the 130 kB catalogs in 25 ms where the pure-Python loader takes 340 ms
    from yaml import CSafeLoader as _Loader
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml import SafeLoader as _Loader  # type: ignore[assignment]

LANGS = ("en", "zh")


class MissingMessage(KeyError):
    """A key has no wording in a catalog (a test keeps every emitted key covered)."""


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float) and not format_spec:
            return f"{value:,.2f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:,.0f}"
        if isinstance(value, int) and not isinstance(value, bool) and not format_spec and abs(value) >= 10000:
            return f"{value:,}"
        return super().format_field(value, format_spec)

    def get_value(self, key, args, kwargs):
        if isinstance(key, str):
            return kwargs.get(key)
        return super().get_value(key, args, kwargs)


_FMT = _Formatter()


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


#: English nouns the catalogs count ("{count} lines"): "1 lines" reads "1 line"
_NOUNS = ("lines", "pods", "restarts", "requests", "preemptions", "nodes", "approvals", "replicas", "GPUs",
          "minutes", "changes", "stop-gaps", "rejects", "plans", "alerts", "notes", "incidents", "services", "errors",
          "containers", "kills", "times", "files", "buckets", "seconds", "hours", "days")
_ONE = re.compile(r"(?<![\d.,])1 ((?:[A-Z]{2,}\w* ){0,2})(" + "|".join(_NOUNS) + r")\b")
_PAREN_ONE = re.compile(r"(?<![\d.,])1 (extra )?(\w+)\(s\)")
_PAREN_MANY = re.compile(r"(\d[\d,]*) (extra )?(\w+)\(s\)")


def plural_en(text: str) -> str:
    """Counted English nouns agree with their number: "1 lines" -> "1 line", "1 approval(s)" ->
    "1 approval", "2 approval(s)" -> "2 approvals".

    >>> plural_en("1 lines in the log; 5 restarts across 1 pods; 0.1 lines; 21 pods; 1 CUDA OOM lines")
    '1 line in the log; 5 restarts across 1 pod; 0.1 lines; 21 pods; 1 CUDA OOM line'
    >>> plural_en("Waiting for 1 approval(s); 2 extra pod(s)")
    'Waiting for 1 approval; 2 extra pods'
    """
    text = _ONE.sub(lambda m: f"1 {m.group(1)}{m.group(2)[:-1]}", text)
    text = _PAREN_ONE.sub(lambda m: f"1 {m.group(1) or ''}{m.group(2)}", text)
    return _PAREN_MANY.sub(lambda m: f"{m.group(1)} {m.group(2) or ''}{m.group(3)}s", text)


class Catalog:
    def __init__(self, lang: str, messages: dict[str, str]):
        self.lang = lang
        self.messages = messages

    @classmethod
    @cache
    def load(cls, lang: str) -> Catalog:
        if lang not in LANGS:
            raise ValueError(f"unknown language {lang!r}; use one of {', '.join(LANGS)}")
        text = resources.files("bot.render").joinpath("locales", f"{lang}.yaml").read_text(encoding="utf-8")
        return cls(lang, _flatten(yaml.load(text, Loader=_Loader)))

    def has(self, key: str) -> bool:
        return key in self.messages

    def t(self, key: str, params: dict[str, Any] | None = None, **more: Any) -> str:
        """The wording for `key` with `{name}` placeholders filled; None shows as n/a."""
        try:
            template = self.messages[key]
        except KeyError:
            raise MissingMessage(f"{self.lang}: no message for {key!r}") from None
        values = dict(params or {})
        values.update(more)
        text = _FMT.vformat(template, (), values)
        return plural_en(text) if self.lang == "en" else text

    def t_or(self, key: str, fallback: str, params: dict[str, Any] | None = None) -> str:
        return self.t(key, params) if key in self.messages else fallback
