"""Message catalogs (bot/render/locales/<lang>.yaml) and the formatting of their values.

All wording lives in the catalogs; code passes keys and values.

>>> en = Catalog.load("en")
>>> en.t("priority.high")
'high: requests are being rejected or pods keep restarting'
>>> en.t("section.coverage", pct=97)
'Evidence coverage 97%'
>>> en.t("fact.kv_usage", usage_pct=None)
'KV-cache usage n/a%'
>>> en.t("fact.restarts", count=1, pods=2, cuda_oom_lines=1)
'1 restart across 2 pods; 1 CUDA OOM line in the log'
>>> Catalog("en", {"k": "{n|$one|$many}"}).t("k", n=3, one="retraction", many="retractions")
'3 retractions'
"""

from __future__ import annotations

import string
from functools import cache
from importlib import resources
from typing import Any

from runbooks.model.phrases import Phrase, phrase_of

LANGS = ("en", "zh")


class MissingMessage(KeyError):
    """A key has no wording in a catalog (a test keeps every emitted key covered)."""


class _Formatter(string.Formatter):
    def format_field(self, value: Any, format_spec: str) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float) and not format_spec:
            # thousands separated from 10,000 on, as integers are (a port, a year or a token
            # count such as 4096 reads as written; 7,603 beside 7902 would not)
            sep = "," if abs(value) >= 10000 else ""
            return f"{value:{sep}.2f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:,.0f}"
        if isinstance(value, int) and not isinstance(value, bool) and not format_spec and abs(value) >= 10000:
            return f"{value:,}"
        return super().format_field(value, format_spec)

    def get_value(self, key, args, kwargs):
        if isinstance(key, str):
            name, bar, forms = key.partition("|")
            if bar:
                # a form "$word" is the value `word` (the deployed engine's own noun, e.g. its
                # "preemption" or "retraction", `bot.render.wording.engine_catalog`)
                one, other = (str(kwargs.get(f[1:], f)) if f.startswith("$") else f
                              for f in forms.partition("|")[::2])
                return _Counted(kwargs.get(name), one, other)
            return kwargs.get(key)
        return super().get_value(key, args, kwargs)

    def get_field(self, field_name, args, kwargs):
        # "{count|line|lines}": the whole field is one name (no attribute or index lookups)
        if "|" in field_name:
            return self.get_value(field_name, args, kwargs), field_name
        return super().get_field(field_name, args, kwargs)

    def convert_field(self, value, conversion):
        if isinstance(value, _Counted):
            return value.worded(self)
        return super().convert_field(value, conversion)


class _Counted:
    """A count with its noun, from a catalog field `{count|line|lines}`: "1 line", "6 lines".

    The form is chosen from the count itself, where the message is worded, so nothing else
    in the text (a quoted log line, a name) is ever rewritten."""

    def __init__(self, count: Any, one: str, other: str):
        self.count, self.one, self.other = count, one, other or one

    def worded(self, fmt: _Formatter) -> str:
        is_one = (self.count == 1 and not isinstance(self.count, bool)) or self.count == "1"
        return f"{fmt.format_field(self.count, '')} {self.one if is_one else self.other}"


_FMT = _Formatter()


def _loader() -> Any:
    """PyYAML's libyaml safe loader where it has one: it reads the 130 kB catalogs in 25 ms where
    the pure-Python loader takes 340 ms. PyYAML is imported here, when a catalog is first read:
    a command that answers in JSON reads none, and its import is about 13 ms of every start."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _flatten(tree: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in tree.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(_flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


class Catalog:
    def __init__(self, lang: str, messages: dict[str, str], defaults: dict[str, Any] | None = None):
        self.lang = lang
        self.messages = messages
        #: values every message may ask for without its caller passing them (the deployed
        #: engine's own flag names, `bot.render.wording.engine_words`); a passed value wins
        self.defaults = dict(defaults or {})

    def with_values(self, **defaults: Any) -> Catalog:
        """This catalog, with `defaults` filled into every message that asks for them."""
        return Catalog(self.lang, self.messages, {**self.defaults, **defaults})

    @classmethod
    @cache
    def load(cls, lang: str) -> Catalog:
        if lang not in LANGS:
            raise ValueError(f"unknown language {lang!r}; use one of {', '.join(LANGS)}")
        text = resources.files("bot.render").joinpath("locales", f"{lang}.yaml").read_text(encoding="utf-8")
        import yaml  # when a catalog is first read (_loader says why)

        return cls(lang, _flatten(yaml.load(text, Loader=_loader())))

    def join(self, items: Any) -> str:
        """A list of people or items in this language's way: "a, b" in English, "a、b" in Chinese."""
        return self.messages.get("list.sep", ", ").join(str(x) for x in items)

    def has(self, key: str) -> bool:
        return key in self.messages

    def t(self, key: str, params: dict[str, Any] | None = None, **more: Any) -> str:
        """The wording for `key` with `{name}` placeholders filled; None shows as n/a."""
        try:
            template = self.messages[key]
        except KeyError:
            raise MissingMessage(f"{self.lang}: no message for {key!r}") from None
        values = {**self.defaults, **(params or {})}
        values.update(more)
        return _FMT.vformat(template, (), {k: self._worded(v) for k, v in values.items()})

    def _worded(self, value: Any) -> Any:
        """A value a message is filled with: a `Phrase` (or its stored JSON) worded in this
        language, a list of them joined; anything else as it is."""
        if isinstance(value, Phrase) or (isinstance(value, dict) and isinstance(value.get("phrase"), str)):
            return self.phrase(value)
        if isinstance(value, list | tuple) and any(
                isinstance(v, Phrase) or (isinstance(v, dict) and "phrase" in v) for v in value):
            return self.phrases(value)
        return value

    def phrase(self, value: Any) -> str:
        """A `runbooks.model.phrases.Phrase` in this language (`phrase.<key>`; its values worded
        too); its stored JSON alike; text stored before phrases existed as it was.

        >>> Catalog.load("en").phrase(Phrase("watch.restarts_new", {"count": 2}))
        '2 restarts in new pods'
        >>> Catalog.load("zh").phrase({"phrase": "watch.restarts_new", "params": {"count": 1}})
        '新 Pod 重启 1 次'
        >>> Catalog.load("zh").phrase("2 restarts in new pods")
        '2 restarts in new pods'
        """
        found = phrase_of(value)
        if not isinstance(found, Phrase):
            return "" if found is None else str(found)
        return self.t(f"phrase.{found.key}", dict(found.params))

    def phrases(self, values: Any) -> str:
        """Several phrases in a row, in this language's way ("a; b", "a；b")."""
        return self.messages.get("phrase.sep", "; ").join(self.phrase(v) for v in values or ())

    def t_or(self, key: str, fallback: str, params: dict[str, Any] | None = None) -> str:
        return self.t(key, params) if key in self.messages else fallback


def shift_label(cat: Catalog, label: object) -> object:
    """Profile shift labels ("first part", "baseline", ...) are keys too."""
    if isinstance(label, str):
        key = "shift." + label.replace(" ", "_")
        if cat.has(key):
            return cat.t(key)
    return label


def placeholders(text: str) -> set[str]:
    """The value names a message asks for; `{count|line|lines}` asks for `count`."""
    return {f.partition("|")[0] for _, f, _, _ in _FMT.parse(text) if f}
