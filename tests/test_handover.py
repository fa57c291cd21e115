"""The shift handover: window, incidents, changes with approvers, stop-gaps confirmed against the
live object (the Kubernetes stand-in), notes, watch next, the runbook template, and the
Prometheus state read from a real Prometheus in a constant number of queries."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.writer import KubeWriter
from bot.main import main
from bot.render.chart_shift import shift_chart
from bot.render.handover import handover_json, handover_text, service_fields, watch_words
from bot.render.i18n import Catalog
from bot.service.handover import (
    PROM_QUERIES,
    build_handover,
    post_handover,
    prometheus_series,
    prometheus_state,
)
from bot.service.notes import add_note, record_triage
from bot.store.db import Store
from bot.store.notes import Journal
from runbooks.model.changes import Scale, SetArg
from runbooks.model.report import Report, Verdict
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support import prom_harness as h
from tests.support.kube_fixtures import running_scenario

T0 = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
NOW = T0 + timedelta(hours=6)


def _plan(plan_id: str, changes: tuple, name: str = "vllm-server", action: str = "lower_max_num_seqs",
          at: datetime = T0) -> Plan:
    return Plan(plan_id, PlanTarget(None, "llm", "Deployment", name), action, changes, "41", 3, (),
                "application/json-patch+json", "U1", at, at + timedelta(minutes=15), 1, "triage")


def _applied(store: Store, plan: Plan, at: datetime, approver: str = "U2") -> None:
    store.add_plan(plan, now=at)
    store.approve(plan.id, approver, plan.content_hash, now=at)
    store.move(plan.id, "applying", actor=approver, now=at)
    store.move(plan.id, "applied", actor=approver, now=at)


@pytest.fixture
def shift() -> Store:
    store = Store.memory()
    _applied(store, _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),)), T0)
    _applied(store, _plan("p-scale", (Scale(1, 2),), action="scale_out", at=T0 + timedelta(minutes=5)),
             T0 + timedelta(minutes=5))
    _applied(store, _plan("p-back", (SetArg("vllm", "max-model-len", 32768, 16384),), name="other",
                          at=T0 + timedelta(minutes=10)), T0 + timedelta(minutes=10))
    store.move("p-back", "rolled_back", actor="U2", now=T0 + timedelta(hours=1))
    store.add_plan(_plan("p-wait", (SetArg("vllm", "gpu-memory-utilization", 0.9, 0.85),), name="third",
                         at=NOW - timedelta(minutes=5)), now=NOW - timedelta(minutes=5))
    record_triage(store, Report(target="llm/vllm-server", model="Qwen2.5-72B", engine="vllm", gpu="H100 80GB",
                                verdict=Verdict("kv_cache_pressure", priority="highest")), actor="cli:ana", now=T0 - timedelta(minutes=2))
    add_note(store, "U042", "max-num-seqs lowered while the batch job runs", target="llm/vllm-server", channel="C1",
             now=T0 + timedelta(minutes=1))
    return store


def test_the_handover_lists_incidents_changes_stopgaps_notes_and_what_to_watch(shift):
    ho = build_handover(shift, channel="C1", since=T0 - timedelta(hours=1), now=NOW)
    assert ho.since_from == "since"
    assert [(i.target, i.verdict, i.priority) for i in ho.incidents] == [("llm/vllm-server", "kv_cache_pressure", "highest")]
    changes = {c.plan: c for c in ho.changes}
    assert {p: c.state for p, c in changes.items()} == {"p-seqs": "applied", "p-scale": "applied",
                                                        "p-back": "rolled_back", "p-wait": "proposed"}
    assert changes["p-seqs"].approvers == ("U2",) and changes["p-seqs"].changes == ("--max-num-seqs 128 -> 64",)
    temp = {m.what: m for m in ho.temporary}
    assert set(temp) == {"max-num-seqs", "replicas"}  # the rolled-back max-model-len is not in place
    assert (temp["max-num-seqs"].value, temp["max-num-seqs"].since, temp["max-num-seqs"].age_s) == (64, T0, 6 * 3600)
    assert all(m.live == "unconfirmed" for m in ho.temporary)
    assert [n.text for n in ho.notes] == ["max-num-seqs lowered while the batch job runs"]
    keys = [k for k, _v in ho.watch_items]
    assert keys == ["awaits_approval", "stopgap", "stopgap", "incident"]
    assert ho.watch_items[0][1] == {"plan": "p-wait", "target": "llm/third", "changes": ["--gpu-memory-utilization 0.9 -> 0.85"]}
    en, zh = watch_words(Catalog.load("en"), ho), watch_words(Catalog.load("zh"), ho)
    assert en[0] == "p-wait on llm/third awaits approval: --gpu-memory-utilization 0.9 -> 0.85"
    assert "llm/vllm-server: max-num-seqs 64 is a stop-gap for 6.0 h (not confirmed on the live object): " \
           "restore or make permanent" in en
    assert "llm/vllm-server：max-num-seqs 64 作为临时措施已 6.0 小时（未在线上对象确认）：恢复原值或转为长期配置" in zh
    assert ho.state is None  # no Prometheus configured
    text = handover_text(ho, "en")
    assert "llm/vllm-server: max-num-seqs 64 since 2026-12-01 02:14Z (6.0 h), set as a stop-gap: " \
           "restore or make permanent [not confirmed on the live object]" in text


def test_the_template_fills_what_is_stored_and_says_unknown_for_the_rest(shift):
    ho = build_handover(shift, since=T0 - timedelta(hours=1), now=NOW)
    services = {s.target: s for s in ho.services}
    vllm = services["llm/vllm-server"]
    assert vllm.field("model_precision") == (("model_precision", {"model": "Qwen2.5-72B", "precision": None}),)
    assert vllm.field("layer") == (("cause", {"cause": "kv_cache_pressure"}),)
    assert vllm.field("request_profile") == vllm.field("oom_rejects") == (("unknown", {}),)
    assert vllm.field("rollback_needed") == (("rollback_stopgap", {"items": [
        {"plan": "p-seqs", "what": "max-num-seqs"}, {"plan": "p-scale", "what": "replicas"}]}),)
    en = dict(service_fields(Catalog.load("en"), ho, vllm))
    assert en["model and precision"] == "Qwen2.5-72B (precision not known)"
    assert en["current pool"] == "vllm, H100 80GB" and en["static, KV cache or scheduling"] == "KV-cache pressure"
    assert en["request profile"] == en["OOM / reject state"] == "not known"
    assert en["flags changed"] == "--max-num-seqs 128 -> 64 (p-seqs, applied); replicas 1 -> 2 (p-scale, applied)"
    assert en["pools split"] == "not split"
    assert en["rollback needed"] == "if the stop-gap is not made permanent: p-seqs (max-num-seqs), p-scale (replicas)"
    assert en["temporary flags review"].startswith("max-num-seqs 64 since 02:14Z: restore or make permanent "
                                                   "[not confirmed on the live object]")
    zh = dict(service_fields(Catalog.load("zh"), ho, vllm))
    assert zh["是否需要回滚"] == "若临时措施不转为长期配置则需要：p-seqs（max-num-seqs）、p-scale（replicas）"
    assert zh["模型与精度"] == "Qwen2.5-72B（精度未知）"
    third = dict(service_fields(Catalog.load("en"), ho, services["llm/third"]))  # only a proposed plan, never triaged
    assert (third["model and precision"], third["current pool"], third["static, KV cache or scheduling"],
            third["rollback needed"]) == ("not known", "not known", "not known", "no: nothing applied")
    doc = handover_json(ho)  # the JSON keeps ids and says `unknown`
    third_json = next(s for s in doc["services"] if s["target"] == "llm/third")
    assert (third_json["model_precision"], third_json["layer"], third_json["rollback_needed"],
            third_json["flags_changed"]) == ("unknown", "unknown", "no: nothing applied", [])
    vllm_json = next(s for s in doc["services"] if s["target"] == "llm/vllm-server")
    assert vllm_json["layer"] == "kv_cache_pressure"
    assert vllm_json["flags_changed"] == ["--max-num-seqs 128 -> 64 (p-seqs, applied)",
                                          "replicas 1 -> 2 (p-scale, applied)"]


def test_stopgaps_are_confirmed_or_found_changed_against_the_live_object(shift, tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        ho = build_handover(shift, since=T0, now=NOW, read_object=KubeWriter(sc.api()).read)
    temp = {m.what: m for m in ho.temporary}
    assert (temp["replicas"].live, temp["replicas"].live_value) == ("confirmed", 2)  # live replicas: 2
    assert (temp["max-num-seqs"].live, temp["max-num-seqs"].live_value) == ("changed", "128")  # someone restored it

    def unreachable(kind, namespace, name):
        raise OSError("connection refused")

    assert {m.live for m in build_handover(shift, since=T0, now=NOW, read_object=unreachable).temporary} == {
        "unconfirmed"}


def test_the_window_starts_where_the_channels_last_handover_ended(shift):
    posted = []
    first = post_handover(shift, posted.append, channel="C1", now=T0 + timedelta(hours=3))
    assert first.since == T0 + timedelta(hours=3) - timedelta(hours=12) and len(posted) == 1
    second = build_handover(shift, channel="C1", now=NOW)
    assert (second.since, second.since_from) == (T0 + timedelta(hours=3), "previous")
    assert second.incidents == () and second.notes == ()  # both before the last handover
    assert [c.plan for c in second.changes] == ["p-wait"]  # still awaiting approval
    assert build_handover(shift, channel="C2", now=NOW).since_from == "default"
    body = Journal(shift).last_handover("C1").body
    assert body["since_from"] == "default"
    stopgap = body["watch_items"][0]  # recorded as keys and values, worded when shown
    assert stopgap["key"] == "stopgap" and (stopgap["values"]["what"], stopgap["values"]["review"]) == (
        "max-num-seqs", "restore_or_permanent")


def test_a_handover_stored_in_the_older_english_form_still_loads_and_starts_the_next_window(shift):
    """Handovers recorded before the record held keys (English `watch_next` and template
    strings) load as they were stored, and the channel's next window starts where they end."""
    old = {"channel": "C1", "since_from": "default", "watch_next": ["llm/vllm-server: 2 OOM kill(s) this shift"],
           "services": [{"target": "llm/vllm-server", "model_precision": "unknown", "rollback_needed": "no: nothing applied"}],
           "alerts": [{"alertname": "GpumemKVCacheHigh", "outcomes": "duplicate 1, triaged 1"}],
           "temporary": [{"plan": "p-seqs", "review": "restore or make permanent"}]}
    Journal(shift).add_handover("gpumem", old, since=T0 - timedelta(hours=12), until=T0 + timedelta(hours=4),
                                channel="C1", now=T0 + timedelta(hours=4))
    record = Journal(shift).last_handover("C1")
    assert record.body == old and record.until == T0 + timedelta(hours=4)
    nxt = build_handover(shift, channel="C1", now=NOW)
    assert (nxt.since, nxt.since_from) == (T0 + timedelta(hours=4), "previous")
    text = handover_text(nxt, "zh")
    assert "恢复原值或转为长期配置" in text and "restore or make permanent" not in text


def test_the_handover_json_has_stable_keys(shift, tmp_path, capsys):
    db = tmp_path / "s.db"
    store = Store.open(db)
    now = datetime.now(UTC)
    _applied(store, _plan("p-seqs", (SetArg("vllm", "max-num-seqs", 128, 64),), at=now), now)
    store.close()
    assert main(["handover", "--since", "1h", "--store", str(db), "--offline", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert set(doc) == {"channel", "since", "until", "since_from", "late", "incidents", "changes", "temporary",
                        "notes", "watch_next", "services", "state", "state_issue", "alerts", "watched", "drift",
                        "reverted"}
    assert set(doc["temporary"][0]) == {"plan", "target", "what", "old", "value", "since", "age_s", "live",
                                        "live_value", "review"}
    assert set(doc["changes"][0]) == {"plan", "target", "state", "action", "changes", "requested_by", "approvers",
                                      "at"}
    assert set(doc["services"][0]) == {"target", "model_precision", "pool", "oom_rejects", "request_profile",
                                       "layer", "flags_changed", "pools_split", "rollback_needed",
                                       "temporary_review", "last_triage"}
    assert main(["handover", "--store", str(db), "--offline", "--lang", "zh"]) == 0
    assert "仍在生效的临时措施（1）" in capsys.readouterr().out


def test_prometheus_state_for_all_services_in_a_constant_number_of_queries(prom):
    from collectors.prometheus.client import PrometheusClient

    client = PrometheusClient(prom.url, timeout_s=10)
    targets = ["llm/vllm-server", f"{h.TGI_NS}/tgi", "staging/vllm-server", f"{h.SGL_NS}/sgl"]
    states = prometheus_state(client, targets, prom.end - timedelta(hours=1), prom.end)
    assert client.queries_sent == len(PROM_QUERIES) == 7
    by = {s.target: s for s in states}
    vllm = by["llm/vllm-server"]
    assert vllm.kv_usage_peak == pytest.approx(h.KV_USAGE_PEAK) and vllm.queue_peak == h.QUEUE_PEAK
    assert vllm.queue_now == 4 and vllm.oom_kills == pytest.approx(2)
    # two OOM kills of pod A and one restart of pod B (read through exported_* labels); the
    # restarting pod of another team's namespace never counts
    assert vllm.restarts == pytest.approx(3, rel=0.1)
    assert vllm.preemptions == pytest.approx(h.PREEMPTIONS_PER_S * 900, rel=0.05)
    assert by[f"{h.TGI_NS}/tgi"].queue_now == h.TGI_QUEUE
    assert by[f"{h.SGL_NS}/sgl"].kv_usage_now == pytest.approx(h.SGL_USAGE)
    # each count carries its engine's word: vLLM preempts, SGLang retracts (4 steps a minute
    # over the hour), TGI never does (0, said as such, not "not measured")
    assert vllm.eviction == "preemption"
    sgl = by[f"{h.SGL_NS}/sgl"]
    assert sgl.eviction == "retraction" and sgl.preemptions == pytest.approx(60 * 4 * h.SGL_RETRACTIONS_PER_STEP, rel=0.05)
    assert (by[f"{h.TGI_NS}/tgi"].eviction, by[f"{h.TGI_NS}/tgi"].preemptions) == ("none", 0)
    assert by["staging/vllm-server"].eviction is None and by["staging/vllm-server"].preemptions is None
    en = handover_text(replace(build_handover(Store.memory(), since=prom.end - timedelta(hours=1), now=prom.end), state=tuple(states)), "en")
    assert f"{round(sgl.preemptions)} retractions" in en and "no preemption (the engine queues requests instead)" in en
    assert "preemptions (retractions on SGLang) not measured" in en  # staging: no series of its own
    zh = handover_text(replace(build_handover(Store.memory(), since=prom.end - timedelta(hours=1), now=prom.end), state=tuple(states)), "zh")
    assert f"撤回 {round(sgl.preemptions)} 次" in zh and "引擎不抢占" in zh
    # the same Deployment name in another namespace is its own service, never mixed into llm's
    assert (by["staging/vllm-server"].kv_usage_peak, by["staging/vllm-server"].queue_now) == (1.0, 500)
    store = Store.memory()
    record_triage(store, Report(target="llm/vllm-server", verdict=Verdict("kv_cache_pressure")), actor="t",
                  now=prom.end - timedelta(minutes=5))
    add_note(store, "U1", "sglang fine", target=f"{h.SGL_NS}/sgl", now=prom.end - timedelta(minutes=4))
    ho = build_handover(store, since=prom.end - timedelta(hours=1), now=prom.end,
                        read_state=lambda t, s, u: prometheus_state(client, t, s, u))
    assert [s.target for s in ho.state] == ["llm/vllm-server", f"{h.SGL_NS}/sgl"]  # closest to trouble first
    assert ("oom", {"target": "llm/vllm-server", "count": 2}) in ho.watch_items
    assert "llm/vllm-server: 2 OOM kills this shift" in handover_json(ho)["watch_next"]
    assert "llm/vllm-server：本班 OOM 终止 2 次" in handover_text(ho, "zh")


def test_a_channels_watch_list_picks_the_services_and_their_shift_chart(prom):
    from collectors.prometheus.client import PrometheusClient

    client = PrometheusClient(prom.url, timeout_s=10)
    store = Store.memory()
    # the shift triaged SGLang only; the channel watches vLLM (and a service with no series)
    record_triage(store, Report(target=f"{h.SGL_NS}/sgl", verdict=Verdict("kv_cache_pressure")), actor="t",
                  now=prom.end - timedelta(minutes=5))
    watch = ("llm/vllm-server", "llm/not-deployed")
    ho = build_handover(store, since=prom.end - timedelta(hours=1), now=prom.end, watch=watch,
                        read_state=lambda t, s, u: prometheus_state(client, t, s, u),
                        read_series=lambda t, s, u: prometheus_series(client, t, s, u))
    assert client.queries_sent == len(PROM_QUERIES) + 1  # the chart's series: one range query
    assert [s.target for s in ho.state] == ["llm/vllm-server", "llm/not-deployed"]  # the watched ones, not sgl
    assert ho.state[1].kv_usage_now is None and ho.state[1].restarts is None
    assert {s.target for s in ho.services} == {f"{h.SGL_NS}/sgl", *watch}
    assert handover_json(ho)["watched"] == list(watch)
    (series,) = ho.shift  # the service with no series draws no line
    assert series.target == "llm/vllm-server" and 100 <= len(series.points) <= 125
    values = [v for _, v in series.points]
    # the most used engine of the service at each step: pod B's 0.8 until pod A's engine 0 peaks
    assert values[0] == pytest.approx(0.8) and values[-1] == pytest.approx(h.KV_USAGE_PEAK)
    assert series.points[0][0] == prom.end - timedelta(hours=1)
    for lang in ("en", "zh"):
        png = shift_chart(ho.shift, ho.since, ho.until, lang)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and int.from_bytes(png[16:20], "big") == 1100
    # without a watch list the services the shift touched are watched
    touched = build_handover(store, since=prom.end - timedelta(hours=1), now=prom.end,
                             read_state=lambda t, s, u: prometheus_state(client, t, s, u))
    assert [s.target for s in touched.state] == [f"{h.SGL_NS}/sgl"] and touched.shift == ()


# ----------------------------------------------------------------------------- words, not ids

import re  # noqa: E402

from bot.service.handover import ServiceState  # noqa: E402

#: ids a reader should never see in prose: plan states and cause ids
RAW_IDS = ("rolled_back", "kv_cache_pressure", "(highest)", "n/a", "None", "proposed", "applied", "unconfirmed")


def _with_state(ho, restarts=1, preemptions=None):
    from dataclasses import replace
    st = ServiceState("llm/vllm-server", kv_usage_peak=None, kv_usage_now=0.5, queue_peak=4.0,
                      queue_now=0.0, preemptions=preemptions, oom_kills=2.0, restarts=restarts)
    return replace(ho, state=(st,))


def test_the_english_handover_says_states_causes_and_counts_in_words(shift):
    ho = _with_state(build_handover(shift, channel="C1", since=T0 - timedelta(hours=1), now=NOW))
    text = handover_text(ho, "en")
    assert "p-back  rolled back  llm/other" in text and "rolled_back" not in text
    assert "KV-cache pressure (highest priority)" in text and "kv_cache_pressure" not in text
    assert "p-wait  proposed  llm/third" in text
    assert "1 restart," not in text and text.rstrip().endswith("1 restart")
    assert "2 OOM kills" in text and "preemptions (retractions on SGLang) not measured" in text and "KV peak not measured (now 50%, headroom at the peak not measured)" in text
    assert "n/a" not in text and "None" not in text
    assert "2 restarts" in handover_text(_with_state(ho, restarts=2), "en")


#: ASCII a zh handover may carry: flags, metric-like names with _, workload names and ids,
#: numbers with units, times, the people's ids, and the engine/model/GPU names the evidence gave
_ZH_ALLOWED = re.compile(r"--[\w-]+|[a-z]+_[\w]+|[\w.-]+/[\w.-]+|\d[\d.,:]*(?:Z|GiB|GB|h|%)?|p-\w+|U\w+|C\w+"
                         r"|max-[\w-]+|replicas|Prometheus|OOM|KV|cache|p50|p95|token|GitOps|vllm|H100|80GB|Qwen2\.5-72B"
                         r"|gpumem|cli:\w+")


def test_the_chinese_handover_is_chinese_but_for_flags_metrics_and_names(shift):
    from bot.render.slack_handover import handover_parent, handover_thread
    ho = _with_state(build_handover(shift, channel="C1", since=T0 - timedelta(hours=1), now=NOW))
    zh_notes = tuple(n for n in ho.notes if False)  # notes are the people's own words, left as written
    from dataclasses import replace
    ho = replace(ho, notes=zh_notes)
    thread, _ = handover_thread(ho, "zh")
    texts = [handover_text(ho, "zh"), json.dumps([handover_parent(ho, "zh"), *thread], ensure_ascii=False)]
    slack = texts[1]
    # the Block Kit around the words is not prose: keep only the "text" values
    texts[1] = " ".join(re.findall(r'"text": "((?:[^"\\]|\\.)*)"', slack))
    for text in texts:
        for raw in RAW_IDS:
            assert raw not in text, raw
        prose = re.sub(r"&\w+;|[`*~<>@:]|mrkdwn|plain_text", " ", _ZH_ALLOWED.sub(" ", text))
        words = re.findall(r"[A-Za-z]{2,}", prose)
        assert not words, sorted(set(words))
    assert "已回滚" in texts[1] and "重启 1 次" in texts[1]
    assert "已回滚" in texts[0] and "KV cache 压力（优先级：最高）" in texts[0] and "重启 1 次" in texts[0]


def test_alerts_in_the_handover_say_severity_and_outcomes_in_words():
    from dataclasses import replace

    from bot.render.handover import alert_line
    from bot.render.i18n import Catalog
    from bot.render.slack_handover import handover_parent
    from bot.service.handover import AlertItem, Handover
    a = AlertItem("GpumemKVCacheHigh", "llm/vllm-server", "warning", 3, 3, 0, T0, NOW, "triaged 1, duplicate 2")
    assert alert_line(Catalog.load("en"), a).endswith("warning  x3  firing 3, resolved 0  (1 triaged, 2 seen before)")
    zh = alert_line(Catalog.load("zh"), a)
    assert "警告" in zh and "已分诊 1 条、重复 2 条" in zh and "triaged" not in zh and "warning" not in zh
    ho = replace(Handover("C1", T0, NOW, "since"), alerts=(a,))
    parent = json.dumps(handover_parent(ho, "zh")["blocks"], ensure_ascii=False)
    assert "已分诊 1 条、重复 2 条" in parent and "firing" not in parent and "warning" not in parent


def test_a_prometheus_that_cannot_be_reached_is_said_in_the_handovers_language(shift):
    from collectors.prometheus.client import PrometheusClient

    client = PrometheusClient(f"http://127.0.0.1:{h.free_port()}", timeout_s=1.0)
    ho = build_handover(shift, since=T0 - timedelta(hours=1), now=NOW, watch=("llm/vllm-server",),
                        read_state=lambda t, s, u: prometheus_state(client, t, s, u))
    assert ho.state == () and ho.state_issue is not None
    en, zh = handover_text(ho, "en"), handover_text(ho, "zh")
    assert re.search(r"Prometheus could not be read: http://127\.0\.0\.1:\d+/api/v1/query: cannot connect", en)
    assert re.search(r"无法读取 Prometheus：http://127\.0\.0\.1:\d+/api/v1/query：无法建立连接", zh)
    doc = handover_json(ho)
    assert doc["state_issue"].endswith("/api/v1/query: cannot connect")
    assert json.loads(json.dumps(doc))["state_issue"] == doc["state_issue"]
    assert all("read." not in text for text in (en, zh, doc["state_issue"]))  # never the compact form
