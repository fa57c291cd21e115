"""Every sentence names the deployed engine's own flags and metrics: SGLang's `--context-length`,
TGI's `--max-total-tokens` and `tgi_queue_size`, never vLLM's on another engine.

Every catalog message is rendered for each engine (the engine's flag names filled in as the
renderer fills them, `bot.render.wording.engine_words`) and may name no flag or metric of
another engine. A message that belongs to one engine (its key names the engine, or it is
listed in `ONE_ENGINE` with why) is rendered for that engine only.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest

from bot.render.i18n import LANGS, placeholders
from bot.render.text import render_text
from bot.render.wording import ENGINE_WORDS, engine_catalog, engine_words
from bot.service import triage as triage_service
from runbooks.catalogs.engine_flags import FLAGS, ROLES
from runbooks.catalogs.engine_metrics import METRICS

ENGINES = tuple(FLAGS)
#: every spelling of every flag gpumem writes, per engine (no dashes)
FLAG_NAMES = {e: {s.flag for entry in table.values() for s in entry.spellings} for e, table in FLAGS.items()}
#: metric names by engine: the engine table's, and each engine's own prefix
METRIC_PREFIX = {"vllm": r"vllm:\w+", "sglang": r"sglang:\w+", "tgi": r"tgi_[a-z]\w+"}
METRIC_NAMES = {e: {m.name.split("{")[0] for m in METRICS if m.engine == e} for e in ENGINES}

#: messages about one engine's own flag or line, emitted only for it (the reason beside each)
ONE_ENGINE = {
    "fact.oom_while_sampler_warmup": "vllm",  # vLLM's sampler warm-up line
    "budget_cli.conflict.kv_cache_memory_overrides_utilization": "vllm",  # --kv-cache-memory is vLLM's
    "action.unset_batch_total_tokens.title": "tgi",
    "action.unset_batch_total_tokens.rollback": "tgi",
    "action.lower_batch_prefill_tokens.title": "tgi",
    "action.lower_batch_prefill_tokens.rollback": "tgi",
}
#: command-line syntax examples, worded before any engine is known (what a --what-if or a
#: --set looks like)
SYNTAX_EXAMPLES = {"budget_cli.error.what_if_empty", "budget_cli.error.what_if_syntax", "remediate_cli.error.bad_set",
                   "slack_plan.error.bad_set",
                   # a metrics file of no known engine: each engine's names, each beside its engine
                   "profile_cli.error.no_histograms"}


def _owner(key: str) -> str | None:
    if key in ONE_ENGINE:
        return ONE_ENGINE[key]
    found = [e for e in ENGINES if re.search(rf"(?:^|[._]){e}(?:[._]|$)", key)]
    return found[0] if len(found) == 1 else None


@cache
def _flag_pattern(engine: str) -> re.Pattern[str]:
    """One alternation of the engine's flags, longest first (built once: the sweep asks ~60,000 times)."""
    flags = sorted(FLAG_NAMES[engine], key=len, reverse=True)
    return re.compile(r"(?<![\w-])(?:--)?(" + "|".join(map(re.escape, flags)) + r")(?![\w-])")


def _names_in(text: str, engine: str) -> set[str]:
    """The flags and metrics of `engine` that `text` names."""
    found = set(_flag_pattern(engine).findall(text))
    found |= set(re.findall(METRIC_PREFIX[engine], text)) | {m for m in METRIC_NAMES[engine] if m in text}
    return found


def _foreign(text: str, engine: str) -> set[str]:
    """What `text` names of another engine that `engine` does not also have."""
    own = _names_in(text, engine)
    return {n for other in ENGINES if other != engine for n in _names_in(text, other)} - own - FLAG_NAMES[engine]


def _rendered(lang: str, engine: str) -> dict[str, str]:
    cat = engine_catalog(lang, engine)
    out = {}
    for key, template in cat.messages.items():
        dummy = {name: "X" for name in placeholders(template) if name not in engine_words(engine)}
        out[key] = cat.t(key, dummy)
    return out


def test_the_engine_words_are_the_engine_tables_roles():
    for engine in ENGINES:
        words = engine_words(engine)
        for placeholder, role in ENGINE_WORDS.items():
            assert words[placeholder] == ROLES[engine][role], (engine, placeholder)
    assert engine_words("sglang")["length_flag"] == "context-length"
    assert engine_words("tgi")["length_flag"] == "max-total-tokens"
    assert engine_words("tgi")["seqs_flag"] == "max-batch-size"
    assert engine_words("sglang")["fraction_flag"] == "mem-fraction-static"


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("engine", ENGINES)
def test_no_message_names_another_engines_flag_or_metric(engine: str, lang: str):
    checked = 0
    bad = {}
    for key, text in _rendered(lang, engine).items():
        if key in SYNTAX_EXAMPLES:
            continue
        owner = _owner(key)
        if owner is not None and owner != engine:
            continue
        checked += 1
        if _foreign(text, engine):
            bad[key] = (sorted(_foreign(text, engine)), text)
    assert bad == {}
    assert checked > 1000


def test_the_check_catches_a_vllm_flag_on_sglang_and_a_vllm_metric_on_tgi():
    assert _foreign("lower --max-model-len to 4096", "sglang") == {"max-model-len"}
    assert _foreign("queue from vllm:num_requests_waiting", "tgi") == {"vllm:num_requests_waiting"}
    assert _foreign("lower --context-length to 4096", "sglang") == set()
    assert _foreign("queue from tgi_queue_size", "tgi") == set()


@pytest.mark.parametrize("lang", LANGS)
def test_a_message_written_for_one_engine_names_only_its_flags(lang: str):
    for engine in ENGINES:
        rendered = _rendered(lang, engine)
        for key, text in rendered.items():
            if _owner(key) == engine:
                assert not _foreign(text, engine), (key, text)


def test_the_queue_action_names_the_deployed_engines_queue_metric():
    key = "action.hpa_on_queue_depth.title"
    assert "tgi_queue_size" in _rendered("en", "tgi")[key] and "vllm:" not in _rendered("en", "tgi")[key]
    assert "sglang:num_queue_reqs" in _rendered("zh", "sglang")[key]
    assert "vllm:num_requests_waiting" in _rendered("en", "vllm")[key]


def test_the_fraction_action_names_the_deployed_engines_flag_only():
    key = "action.add_memory_margin_any.title"
    sgl = _rendered("en", "sglang")[key]
    assert "--mem-fraction-static" in sgl and "gpu-memory-utilization" not in sgl and "cuda-memory" not in sgl
    assert "--cuda-memory-fraction" in _rendered("en", "tgi")[key]


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("bundle", sorted(p for p in (ROOT / "examples").iterdir() if p.is_dir())
                         + sorted(p for p in (ROOT / "tests" / "data" / "real").iterdir() if p.is_dir()),
                         ids=lambda p: p.name)
def test_a_triage_report_names_only_its_engines_flags_outside_quoted_lines(bundle: Path, lang: str):
    report = triage_service.triage_bundle(str(bundle)).report
    engine = (report.engine or "").lower()
    if engine not in ENGINES:
        pytest.skip("the engine is not known: vLLM's names are the default")
    for line in render_text(report, lang).splitlines():
        prose = re.sub(r'"[^"]*"', "", line)  # quoted log lines are the engine's own words
        assert not _foreign(prose, engine), line
        assert not _foreign_word(prose, engine), line  # SGLang retracts, vLLM preempts, TGI neither


# ----------------------------------------------------------------------------- the engine's own word

#: the catalog sections a triage report is worded from (terminal, JSON titles, Slack) and the
#: budget's capacity lines it shares
TRIAGE_SECTIONS = ("verdict.", "priority", "check.", "section.", "memory.", "concurrency.", "budget.", "profile.",
                   "edge.", "finding.", "error_kind.", "fact.", "signal.", "warning.", "undo.", "action.",
                   "misjudgement.", "issue.", "slack.", "budget_cli.long.")
#: each engine's word for putting a running request back for lack of KV cache, and the words
#: of the others it must not use (TGI does neither)
OWN_WORD = {"vllm": r"preempt|抢占", "sglang": r"retract|撤回", "tgi": None}
#: a triage message that names another engine's word on purpose, and why
OTHER_WORD_OK = {
    # TGI's capacity line: it queues where the others preempt or retract
    "budget_cli.long.no_seq_limit": "tgi",
}


def _foreign_word(text: str, engine: str) -> list[str]:
    words = [w for e, w in OWN_WORD.items() if e != engine and w is not None]
    return re.findall("|".join(words), text, flags=re.IGNORECASE)


def test_the_eviction_word_is_the_engine_tables():
    assert engine_catalog("en", "sglang").t("fact.preemptions", count=3) == "3 retractions"
    assert engine_catalog("en", "vllm").t("fact.preemptions", count=1) == "1 preemption"
    assert engine_catalog("zh", "sglang").t("finding.preemptions_seen") == "因 KV cache 不足出现撤回"
    # TGI never evicts a running request: a rule-out does not ask for "no preemptions"
    assert engine_catalog("en", "tgi").t("fact.rule_out_kv") == "KV usage stays below 90% at peak, and the L+XL share is flat"
    assert _foreign_word("Requests are being preempted", "sglang") == ["preempt"]
    assert _foreign_word("3 次撤回", "vllm") == ["撤回"]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("engine", ENGINES)
def test_no_triage_message_uses_another_engines_word_for_eviction(engine: str, lang: str):
    bad, checked = {}, 0
    for key, text in _rendered(lang, engine).items():
        if not key.startswith(TRIAGE_SECTIONS) or key.startswith("eviction."):
            continue
        owner = _owner(key) or OTHER_WORD_OK.get(key)
        if owner is not None and owner != engine:
            continue
        checked += 1
        if _foreign_word(text, engine) and OTHER_WORD_OK.get(key) != engine:
            bad[key] = text
    assert bad == {}
    assert checked > 500


def _sglang_retracting(tmp_path: Path) -> Path:
    bundle = tmp_path / "sglang-retracting"
    bundle.mkdir()
    (bundle / "logs.txt").write_text("\n".join([
        "python3 -m sglang.launch_server --model-path Qwen/Qwen2.5-7B-Instruct --mem-fraction-static 0.88",
        *[f"[2025-03-01 12:0{i}:00 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 4, "
          "#new_token_ratio: 0.3397 -> 0.3530" for i in range(5)],
    ]) + "\n", encoding="utf-8")
    return bundle


@pytest.mark.parametrize("lang", LANGS)
def test_an_sglang_triage_says_retraction_never_preemption(tmp_path: Path, lang: str):
    report = triage_service.triage_bundle(str(_sglang_retracting(tmp_path))).report
    assert report.engine == "sglang"
    assert any(f.id == "preemptions_seen" for f in report.findings)
    text = render_text(report, lang)
    prose = "\n".join(re.sub(r'"[^"]*"', "", line) for line in text.splitlines())
    assert re.search(r"retract|撤回", prose, flags=re.IGNORECASE), text
    assert not _foreign_word(prose, "sglang"), text
