"""Every message the runbooks can emit has wording in English and in Chinese."""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from bot.render.i18n import LANGS, Catalog, MissingMessage, placeholders
from bot.render.wording import EVICTION_FORMS, engine_catalog, engine_words
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
    """The same values in every language; the engine's word for an eviction (`{evicted}`,
    `{eviction}`, ...) is filled by the renderer in whichever form the language's grammar takes."""
    en, other = Catalog.load("en"), Catalog.load(lang)
    for key, text in en.messages.items():
        assert placeholders(text) - set(EVICTION_FORMS) == placeholders(other.messages[key]) - set(EVICTION_FORMS), key


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


def _placeholders(text: str) -> set[str]:
    """The values a fact's message wants from the runbooks: the engine's own flag names
    (`--{length_flag}`) are the renderer's to fill (`bot.render.wording.engine_words`)."""
    return placeholders(text) - set(engine_words(None)) - set(EVICTION_FORMS)


@pytest.mark.parametrize("lang", LANGS)
def test_every_rule_out_message_gets_exactly_the_values_it_quotes(lang):
    from runbooks.triage.verdict import _RULE_OUT, _RULE_OUT_BY_FINDING

    cat = Catalog.load(lang)
    for finding, (key, names) in _RULE_OUT_BY_FINDING.items():
        assert _placeholders(cat.messages[f"fact.{key}"]) == set(names), (finding, key)
    for keys in _RULE_OUT.values():
        for key in keys:  # the general tests are emitted without values: none may be asked for
            assert _placeholders(cat.messages[f"fact.{key}"]) == set(), key


@pytest.mark.parametrize("lang", LANGS)
def test_every_fact_the_runbooks_build_supplies_the_placeholders_of_its_message(lang):
    """fact("key", source, name=...) with a literal key: its message asks only for names passed
    (a name not passed renders as "n/a")."""
    import ast

    cat = Catalog.load(lang)
    checked = 0
    for path in RUNBOOKS.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.Call) and getattr(node.func, "id", None) == "fact" and node.args
                    and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                continue
            passed = {k.arg for k in node.keywords}
            if None in passed:  # **params: checked by the rule-out test above
                continue
            wanted = _placeholders(cat.messages[f"fact.{node.args[0].value}"])
            assert wanted <= passed, (path.name, node.lineno, node.args[0].value, sorted(wanted - passed))
            checked += 1
    assert checked > 60


def test_a_count_chooses_its_noun_and_a_quoted_log_line_is_left_as_quoted():
    en = Catalog.load("en")
    quoted = "scanner: 1 lines over 64 KiB left out"
    one = en.t("fact.log_signal", signal="OOM", count=1, example=quoted)
    many = en.t("fact.log_signal", signal="OOM", count=6, example=quoted)
    assert one == 'OOM: 1 line in the log; e.g. "scanner: 1 lines over 64 KiB left out"'
    assert many == 'OOM: 6 lines in the log; e.g. "scanner: 1 lines over 64 KiB left out"'
    assert en.t("fact.restarts", count=1, pods=1, cuda_oom_lines=0) == (
        "1 restart across 1 pod; 0 CUDA OOM lines in the log")
    # the noun is the deployed engine's own word (`bot.render.wording.eviction_words`)
    assert engine_catalog("en", "vllm").t("fact.preemptions", count=12345) == "12,345 preemptions"
    assert engine_catalog("en", "sglang").t("fact.preemptions", count=1) == "1 retraction"


def test_every_counted_field_names_two_forms():
    for key, text in Catalog.load("en").messages.items():
        for _, f, _, _ in string.Formatter().parse(text):
            if f and "|" in f:
                name, one, other = ([*f.split("|"), "", ""])[:3]
                assert name.isidentifier() and one and other and one != other, (key, f)
