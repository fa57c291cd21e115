"""The words sweep of `tests/test_every_output_words.py` over the terminal outputs of `gpumem
fleet` (raw and recorded, against a real Prometheus loaded with the fleet's history; a query
that fails; nothing answering), `gpumem rules` (its header and every alert's summary and
description, as a PrometheusRule and as a rule file), `gpumem snapshot` (a fake NVML, with a
process whose name and memory the driver does not give) and `gpumem handover` (a shift with
every kind of item: stop-gaps, plans waiting, failed, reverted, drift, alerts, notes, the
Prometheus state with and without series), in English and in Chinese.

The same checks: no value left unsaid (`?`, `n/a`, `None`, a `<placeholder>`), no raw cause id
or plan state in prose, and a Chinese output Chinese but for flags, metric names, commands,
quoted lines, names and the words `ZH_ALLOWED` lists.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml

from bot.main import main
from bot.render.handover import handover_text
from bot.service.handover import STOPGAP_EVENT, ServiceState, build_handover
from bot.service.notes import add_note, record_triage
from bot.store.alerts import AlertLog
from bot.store.db import Store
from runbooks.model.changes import Scale, SetArg
from runbooks.model.report import Report, Verdict
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support import prom_fleet as f
from tests.test_every_output_words import _COMMAND, _NAME, _NOT_OURS, _RAW_IDS, _UNSAID, ZH_ALLOWED, _prose
from tests.test_snapshot_cli import node_fake, take

LANGS = ("en", "zh")
SURFACES = ("fleet", "rules", "snapshot", "handover")

#: names these outputs carry beyond `ZH_ALLOWED`, each a name and not a word to translate: the
#: alert names gpumem's rules define (and the Watchdog alert a page may carry), a Deployment's
#: `replicas` field (as a change says it), the Prometheus Operator and FlashInfer (products), the
#: interconnects (PCIe, NVLink)
ZH_NAMES = ZH_ALLOWED | {"Watchdog", "replicas", "Operator", "PCIe", "NVLink", "FlashInfer", "GFLOP", "TFLOP"}
#: alert names as the rules spell them
_ALERT = re.compile(r"\bGpumem[A-Z]\w+")
#: commands shown to run, as typed (`promtool` beside the shared ones)
_COMMANDS = re.compile(r"(?:promtool)\b[^；;，。（）]*")
#: Prometheus's own template code in an annotation ({{ $value | humanizePercentage }})
_TEMPLATE = re.compile(r"\{\{[^}]*\}\}")
#: a note in the terminal handover, left as its author wrote it ("2026-12-01 02:15Z  U042  llm/x: ...")
_NOTE_LINE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\dZ  [^\s:：]+(?:  [^\s:：]+/[^\s:：]+)?[:：]")


def _words(line: str) -> str:
    """A line's prose, less names, commands, quotes and template code."""
    text = _TEMPLATE.sub(" ", _ALERT.sub(" ", _prose(line)))
    return _NAME.sub(" ", _COMMAND.sub(" ", _COMMANDS.sub(" ", text)))


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(list(argv))
    return out.getvalue()


# ----------------------------------------------------------------------------- fleet


def _end_s() -> int:
    return (int(time.time()) // 60) * 60 - 300


@pytest.fixture(scope="module")
def fleet_servers(tmp_path_factory):
    """The big fleet read raw, and the same fleet with gpumem's recording rules loaded."""
    end_s = _end_s()
    try:
        with f.run_fleet_prometheus(tmp_path_factory.mktemp("words-raw"), f.big_fleet(), end_s) as raw, \
                f.run_recorded_fleet_prometheus(tmp_path_factory.mktemp("words-rec"), f.big_fleet(), end_s) as rec:
            yield raw, rec
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


def _fleet(servers, lang: str) -> list[tuple[str, str]]:
    raw, rec = servers
    out = [(f"fleet raw {lang}", _cli("fleet", "--prometheus", raw.url, "--at", raw.end.isoformat(), "--lang", lang)),
           (f"fleet recorded {lang}", _cli("fleet", "--prometheus", rec.url, "--at", rec.end.isoformat(),
                                           "--lang", lang))]
    with f.BreakingProxy(raw.url, "time_to_first_token") as proxy:
        out.append((f"fleet not-read {lang}", _cli("fleet", "--prometheus", proxy.url, "--at", raw.end.isoformat(),
                                                   "--lang", lang, "--top", "3")))
    out.append((f"fleet nothing {lang}", _cli("fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "1",
                                              "--lang", lang)))
    return out


# ----------------------------------------------------------------------------- rules


def _rule_words(text: str) -> str:
    """A rules document's words: its header comments and each alert's summary and description
    (the rest is PromQL and YAML keys)."""
    lines = [line for line in text.splitlines() if line.startswith("#")]
    doc = yaml.safe_load(text)
    groups = doc["spec"]["groups"] if "spec" in doc else doc["groups"]
    for group in groups:
        for rule in group["rules"]:
            notes = rule.get("annotations") or {}
            lines += [notes[k] for k in ("summary", "description") if k in notes]
    return "\n".join(lines)


def _rules(lang: str) -> list[tuple[str, str]]:
    return [(f"rules prometheusrule {lang}", _rule_words(_cli("rules", "--lang", lang))),
            (f"rules file {lang}", _rule_words(_cli("rules", "-o", "rules", "--lang", lang))),
            (f"rules vllm {lang}", _rule_words(_cli("rules", "--engine", "vllm", "--no-recording-rules",
                                                    "--lang", lang)))]


# ----------------------------------------------------------------------------- snapshot


def _snapshot(lang: str) -> list[tuple[str, str]]:
    """A node whose driver names one process and not another, nor its memory; two samples."""
    return [(f"snapshot node {lang}", take([], lang, nvml=node_fake())[1]),
            (f"snapshot samples {lang}", take(["--count", "2", "--interval", "1"], lang)[1])]


# ----------------------------------------------------------------------------- handover

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
NOW = T0 + timedelta(hours=6)


def _plan(plan_id: str, changes: tuple, name: str = "vllm-server", action: str = "lower_max_num_seqs",
          at: datetime = T0) -> Plan:
    return Plan(plan_id, PlanTarget(None, "llm", "Deployment", name), action, changes, "41", 3, (),
                "application/json-patch+json", "U1", at, at + timedelta(minutes=15), 1, "triage")


def _applied(store: Store, plan: Plan, at: datetime) -> None:
    store.add_plan(plan, now=at)
    store.approve(plan.id, "U2", plan.content_hash, now=at)
    store.move(plan.id, "applying", actor="U2", now=at)
    store.move(plan.id, "applied", actor="U2", now=at)


def _shift() -> Store:
    """A shift with every kind of handover item."""
    store = Store.memory()
    _applied(store, _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),)), T0)
    _applied(store, _plan("p-scale", (Scale(1, 2),), action="scale_out", at=T0 + timedelta(minutes=5)),
             T0 + timedelta(minutes=5))
    _applied(store, _plan("p-fail", (SetArg("vllm", "max-model-len", 32768, 16384),), name="other",
                          at=T0 + timedelta(minutes=10)), T0 + timedelta(minutes=10))
    store.move("p-fail", "failed", actor="gpumem", now=T0 + timedelta(minutes=20))
    _applied(store, _plan("p-back", (SetArg("vllm", "max-model-len", 32768, 16384),), name="fourth",
                          at=T0 + timedelta(minutes=12)), T0 + timedelta(minutes=12))
    store.move("p-back", "rolled_back", actor="U2", now=T0 + timedelta(hours=1))
    store.add_plan(_plan("p-wait", (SetArg("vllm", "gpu-memory-utilization", 0.9, 0.85),), name="third",
                         at=NOW - timedelta(minutes=5)), now=NOW - timedelta(minutes=5))
    ok = _plan("p-ok", (SetArg("vllm", "max-num-seqs", 64, 48),), name="third", at=NOW - timedelta(minutes=4))
    store.add_plan(ok, now=NOW - timedelta(minutes=4))
    store.approve("p-ok", "U2", ok.content_hash, now=NOW - timedelta(minutes=3))
    argo = _plan("p-argo", (SetArg("vllm", "max-num-seqs", 128, 96),), name="argo", at=T0 + timedelta(hours=1))
    _applied(store, argo, T0 + timedelta(hours=1))
    store.move("p-argo", "reverted", actor="gpumem", now=T0 + timedelta(hours=2), detail={
        "outcome": "reverted", "notes": [], "reverted": [{
            "path": "/spec/template/spec/containers/0/args/3", "before": "--max-num-seqs=128",
            "gpumem": "--max-num-seqs=96", "now": "--max-num-seqs=128", "manager": "argocd-controller",
            "at": "2026-12-01T04:02:11Z", "seen_at": "2026-12-01T04:02:30Z", "operation": "Update"}]})
    gitops = _plan("p-git", (SetArg("vllm", "max-num-seqs", 256, 192),), name="gitops", at=T0 + timedelta(hours=1))
    _applied(store, gitops, T0 + timedelta(hours=1))
    store.record(STOPGAP_EVENT, actor="U2", now=T0 + timedelta(hours=1), detail={
        "plan": "p-git", "changes": ["--max-num-seqs 256 -> 192"],
        "managers": [{"kind": "argocd", "name": "llm-serving", "namespace": "argocd"},
                     {"kind": "helm", "name": "vllm-gitops"}]})
    record_triage(store, Report(target="llm/vllm-server", model="Qwen2.5-72B", engine="vllm", gpu="H100 80GB",
                                verdict=Verdict("kv_cache_pressure", priority="highest")), actor="cli:ana",
                  now=T0 - timedelta(minutes=2))
    record_triage(store, Report(target="llm/other", verdict=Verdict("weights_too_large", priority="high")),
                  actor="U3", now=T0 + timedelta(minutes=30))
    add_note(store, "U042", "max-num-seqs lowered while the batch job runs", target="llm/vllm-server",
             channel="C1", now=T0 + timedelta(minutes=1))
    rows = [{"fingerprint": f"fp{i}", "status": "firing", "alertname": "GpumemKVCacheHigh", "severity": "warning",
             "namespace": "llm", "name": "vllm-server", "channel": "C1", "outcome": outcome}
            for i, outcome in enumerate(("triaged", "duplicate", "busy"))]
    rows.append({"fingerprint": "wd", "status": "resolved", "alertname": "Watchdog", "outcome": "no_target"})
    AlertLog(store).add(rows, now=T0 + timedelta(hours=2))
    return store


STATE = [ServiceState("llm/vllm-server", kv_usage_peak=0.97, kv_usage_now=0.81, queue_peak=18, queue_now=4,
                      preemptions=57, oom_kills=2, restarts=3, eviction="preemption"),
         ServiceState("llm/third", kv_usage_peak=0.93, kv_usage_now=0.5, queue_peak=1, queue_now=0, preemptions=1, eviction="preemption",
                      oom_kills=0, restarts=1),
         ServiceState("llm/not-deployed")]


def _handover(lang: str, tmp_path) -> list[tuple[str, str]]:
    store = _shift()
    with_state = build_handover(store, channel="C1", since=T0 - timedelta(hours=1), now=NOW,
                                read_state=lambda targets, since, until: STATE,
                                watch=("llm/vllm-server", "llm/third", "llm/not-deployed"))

    def down(targets, since, until):
        raise OSError("connection refused")

    no_prom = build_handover(store, since=T0 - timedelta(hours=1), now=NOW, read_state=down)
    db = tmp_path / f"shift-{lang}.db"
    on_disk = Store.open(db)
    on_disk.close()
    cli = _cli("handover", "--store", str(db), "--offline", "--lang", lang)
    return [(f"handover state {lang}", handover_text(with_state, lang)),
            (f"handover prometheus-down {lang}", handover_text(no_prom, lang)),
            (f"handover empty-cli {lang}", cli)]


# ----------------------------------------------------------------------------- the sweep


@pytest.fixture(scope="module")
def outputs(fleet_servers, tmp_path_factory) -> dict[str, list[tuple[str, str]]]:
    tmp = tmp_path_factory.mktemp("words-handover")
    return {lang: _fleet(fleet_servers, lang) + _rules(lang) + _snapshot(lang) + _handover(lang, tmp)
            for lang in LANGS}


@pytest.mark.parametrize("lang", LANGS)
def test_the_sweep_covers_every_surface_with_words_in_it(outputs, lang):
    kinds = {where.split()[0] for where, _ in outputs[lang]}
    assert kinds == set(SURFACES)
    texts = dict(outputs[lang])
    # each output says something: the fleet ranks 31 services, the handover lists what it found
    assert texts[f"fleet raw {lang}"].count("gpumem triage ") >= 10
    assert texts[f"fleet recorded {lang}"].count("gpumem triage ") >= 10
    assert "p-argo" in texts[f"handover state {lang}"] and "argocd-controller" in texts[f"handover state {lang}"]
    assert "llm-serving" in texts[f"handover state {lang}"] and "p-git" in texts[f"handover state {lang}"]
    loaded = {"en": "Read from gpumem's recording rules", "zh": "读取自 gpumem 的记录规则"}[lang]
    assert loaded in texts[f"fleet recorded {lang}"] and loaded not in texts[f"fleet raw {lang}"]
    assert "GpumemKVCacheHigh" in texts[f"rules file {lang}"]


@pytest.mark.parametrize("lang", LANGS)
def test_no_output_leaves_a_value_unsaid_or_an_id_raw(outputs, lang):
    bad = []
    for where, text in outputs[lang]:
        for line in text.splitlines():
            prose = _prose(line)
            if _UNSAID.search(prose) or _RAW_IDS.search(prose):
                bad.append((where, line.strip()[:200]))
    assert bad == []


@pytest.mark.parametrize("surface", SURFACES)
def test_every_chinese_output_is_chinese(outputs, surface):
    leaks: dict[str, tuple[str, str]] = {}
    for where, text in outputs["zh"]:
        if where.split()[0] != surface:
            continue
        for line in text.splitlines():
            if _NOT_OURS.search(line.strip()) or _NOTE_LINE.search(line.strip()):
                continue
            for word in re.findall(r"[A-Za-z][A-Za-z']*", _words(line)):
                if word not in ZH_NAMES:
                    leaks.setdefault(word, (where, line.strip()[:160]))
    assert leaks == {}


@pytest.mark.parametrize("surface", SURFACES)
def test_a_chinese_output_lists_with_the_chinese_separator(outputs, surface):
    """Names listed in Chinese prose are joined with "、", not an English comma."""
    listed = re.compile(r"[A-Za-z][\w.-]*, [A-Za-z]")
    bad = []
    for where, text in outputs["zh"]:
        if where.split()[0] != surface:
            continue
        bad += [(where, line.strip()[:160]) for line in text.splitlines()
                if re.search(r"[\u4e00-\u9fff]", line) and listed.search(_TEMPLATE.sub(" ", _prose(line)))]
    assert bad == []


def test_only_a_note_is_left_as_written():
    assert _NOTE_LINE.search("2026-12-01 02:15Z  U042  llm/vllm-server：max-num-seqs lowered")
    assert _NOTE_LINE.search("2026-12-01 02:15Z  U042: lowered while the batch job runs")
    assert not _NOTE_LINE.search("2026-12-01 02:12Z  llm/vllm-server  KV cache 压力（优先级：最高）  cli:ana")


def test_the_english_handover_counts_agree_with_their_nouns(outputs):
    text = dict(outputs["en"])["handover state en"]
    assert "llm/vllm-server: 2 OOM kills this shift" in text
    assert "alert GpumemKVCacheHigh fired 3 times and has not resolved" in text
    assert "57 preemptions, 2 OOM kills, 3 restarts" in text
    assert "1 preemption, 0 OOM kills, 1 restart" in text
    assert "(s)" not in text
    zh = dict(outputs["zh"])["handover state zh"]
    assert "llm/vllm-server：本班 OOM 终止 2 次" in zh and "告警 GpumemKVCacheHigh 触发 3 次，尚未恢复" in zh


def test_the_json_of_the_sweeps_handover_stays_english_with_its_ids():
    from bot.render.handover import handover_json

    doc = json.loads(json.dumps(handover_json(build_handover(_shift(), since=T0 - timedelta(hours=1), now=NOW))))
    assert "p-ok on llm/third is approved and awaits apply: --max-num-seqs 64 -> 48" in doc["watch_next"]
    assert next(s for s in doc["services"] if s["target"] == "llm/other")["layer"] == "weights_too_large"


# ----------------------------------------------------------------------------- the budget's assumptions

#: launches whose budgets between them take every reason a default can have
_LAUNCHES = [
    dict(engine="vllm", gpu_total_gib=79.15, gpu_name="A100-SXM4-80GB"),  # newest vLLM, the A100 exception
    dict(engine="vllm", gpu_total_gib=79.15, gpu_name="H100 80GB", engine_version="0.8.5", tp=2),
    dict(engine="vllm", gpu_total_gib=178.0, gpu_name="B200", engine_version="0.28.0"),
    dict(engine="vllm", gpu_total_gib=22.05, gpu_name="L4", engine_version="0.6.6", enable_lora=True),
    dict(engine="vllm", gpu_total_gib=14.58, gpu_name="T4", engine_version="0.9.2"),
    dict(engine="vllm", gpu_total_gib=39.25, engine_version="0.9.2", tp=2),  # a GPU the catalog does not know
    dict(engine="vllm", gpu_total_gib=79.15, gpu_name="A100-SXM4-80GB", engine_version="0.7.3", use_v1=True),
    dict(engine="sglang", gpu_total_gib=79.15, gpu_name="A100-SXM4-80GB"),
    dict(engine="sglang", gpu_total_gib=139.8, gpu_name="H200", engine_version="0.4.6", tp=8),
    dict(engine="sglang", gpu_total_gib=79.15, gpu_name="A100-SXM4-80GB", engine_version="0.5.0"),
    dict(engine="tgi", gpu_total_gib=22.05, gpu_name="A10G", engine_version="1.4.0"),
    dict(engine="tgi", gpu_total_gib=22.05, gpu_name="A10G", engine_version="2.2.0"),
    dict(engine="tgi", gpu_total_gib=79.15, gpu_name="A100-SXM4-80GB"),
    dict(engine="tgi", gpu_total_gib=22.05, gpu_name="A10G", engine_version="0.9.3"),
]


def test_every_assumed_default_is_worded_in_both_languages_and_chinese_in_zh():
    from bot.render.budget import assumed_line
    from bot.render.i18n import Catalog
    from runbooks.catalogs.models import find_model
    from runbooks.model.budget import BudgetInputs
    from runbooks.sizing.budget import compute_budget

    model = find_model("meta-llama/Llama-3.1-8B-Instruct")
    en, zh = Catalog.load("en"), Catalog.load("zh")
    reasons: set[str] = set()
    leaks = []
    for launch in _LAUNCHES:
        budget = compute_budget(model, BudgetInputs(**launch))
        for name, a in budget.assumptions:
            reasons.add(a.why)
            english, chinese = assumed_line(en, name, a), assumed_line(zh, name, a)
            assert english.startswith(f"{name} = ") and "(" in english, english
            assert re.search(r"[\u4e00-\u9fff]", chinese), chinese
            said = chinese.split(" = ", 1)[1]  # the setting's name is its JSON key
            leaks += [(w, chinese) for w in re.findall(r"[A-Za-z][A-Za-z']*", _words(said)) if w not in ZH_NAMES]
    assert sorted(set(leaks)) == []
    # the launches reach reasons of every engine and of the shared resolution
    assert {"newest_known", "engine_default", "checkpoint_dtype", "vllm_v1_excepted_gpu", "vllm_v1_160_gib",
            "vllm_lora_default", "sglang_activation_reserve", "sglang_tp_default_raised", "tgi_1_default",
            "tgi_2_default", "tgi_paged_attention", "tgi_flashinfer_attention"} <= reasons, sorted(reasons)
