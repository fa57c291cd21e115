"""Every message the runbooks can emit has wording in English and in Chinese."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from bot.render.i18n import LANGS, Catalog, MissingMessage
from runbooks.model.report import VERDICT_IDS

RUNBOOKS = Path(__file__).resolve().parent.parent / "runbooks"


def _emitted_keys() -> set[str]:
    keys: set[str] = set()
    for path in RUNBOOKS.rglob("*.py"):
        src = path.read_text()
        keys |= {f"finding.{k}" for k in re.findall(r'Finding\(\s*"([a-z0-9_]+)"', src)}
        keys |= {f"fact.{k}" for k in re.findall(r'\bfact\(\s*"([a-z0-9_]+)"\s*[,)]', src)}
        keys |= {f"fact.missing_{k}" for k in re.findall(r'\bmissing\(\s*"([a-z0-9_]+)"', src)}
        keys |= {f"misjudgement.{k}" for k in re.findall(r'Misjudgement\(\s*"([a-z0-9_]+)"', src)}
        keys |= {f"action.{k}.title" for k in re.findall(r'\badd\(\s*"([a-z0-9_]+)"', src)}
        keys |= {f"edge.{k}" for k in re.findall(r'"(edge_[a-z_]+)"', src)}
        keys |= {f"fact.{k}" for k in re.findall(r'"(rule_out_[a-z_]+)"', src)}
    # computed finding ids
    keys |= {"finding.memory_pinned", "finding.memory_pinned_preallocated"}
    keys |= {f"verdict.{v}" for v in VERDICT_IDS}
    return keys


def test_catalogs_have_the_same_keys_in_every_language():
    en = set(Catalog.load("en").messages)
    for lang in LANGS:
        assert set(Catalog.load(lang).messages) == en, lang


@pytest.mark.parametrize("lang", LANGS)
def test_every_emitted_key_has_wording(lang):
    cat = Catalog.load(lang)
    missing = sorted(k for k in _emitted_keys() if not cat.has(k))
    assert missing == []
    assert len(_emitted_keys()) > 60  # the scan really found the runbooks' keys


@pytest.mark.parametrize("lang", LANGS)
def test_placeholders_agree_between_languages(lang):
    en, other = Catalog.load("en"), Catalog.load(lang)
    fields = string.Formatter()
    for key, text in en.messages.items():
        a = {f for _, f, _, _ in fields.parse(text) if f}
        b = {f for _, f, _, _ in fields.parse(other.messages[key]) if f}
        assert a == b, key


def test_every_action_the_runbooks_recommend_has_risk_and_rollback():
    actions = {k.split(".")[1] for k in _emitted_keys() if k.startswith("action.")}
    assert len(actions) >= 15
    for lang in LANGS:
        cat = Catalog.load(lang)
        for a in actions:
            assert cat.has(f"action.{a}.risk") and cat.has(f"action.{a}.rollback"), (lang, a)


def test_missing_key_raises_a_named_error():
    with pytest.raises(MissingMessage, match=r"no\.such\.key"):
        Catalog.load("en").t("no.such.key")


def test_none_values_render_as_not_available():
    assert Catalog.load("en").t("fact.queue_and_rejects", queue=None, rejected=12) == "queue depth n/a, rejected 12"
