"""The fleet view's pure parts: the scoring rule (runbooks.alerts.fleet), the parsing of answers
and the queries' shape (collectors.prometheus.fleet), the rendering (bot.render.fleet)."""

from __future__ import annotations

import gc
import threading
import time
from datetime import UTC, datetime

import pytest

from bot.render.fleet import fleet_json, fleet_text
from bot.service.outcomes import FleetOutcome, Missing
from collectors.prometheus.client import parse_query_response
from collectors.prometheus.fleet import QUERY_COLUMNS, parse_answers, queries, read_fleet
from runbooks.alerts.fleet import CAP, LINES, Service, rank, score
from runbooks.catalogs import thresholds as T


def test_lines_are_the_runbooks_numbers():
    assert LINES["kv_now"] == LINES["kv_max"] == T.KV_USAGE_HIGH_RATIO
    assert LINES["queue"] == T.QUEUE_DEPTH_ALERT and LINES["ttft_p99"] == T.TTFT_P99_SLOW_S
    assert LINES["gpu_used"] == T.GPU_MEM_ALERT_RATIO == 0.95
    assert (LINES["long_share"], LINES["long_jump"]) == (T.LONG_SHARE_HIGH, T.LONG_SHARE_SHIFT)
    assert LINES["restarts"] == 2 and LINES["oom_kills"] == LINES["preemptions"] == 1


def test_score_is_the_largest_closeness_capped_and_names_its_reading():
    r = score(Service("a", "b", ("vllm",), {"kv_now": 0.45, "queue": 6, "preemptions": 40}))
    assert (r.score, r.top, r.at_line) == (CAP, "preemptions", 1)
    assert r.reading("preemptions").closeness == 40.0 and r.reading("kv_now").closeness == 0.5


def test_ties_go_to_more_readings_at_the_line_then_the_sum_then_the_name():
    one = Service("ns", "one", ("vllm",), {"oom_kills": 3})  # 2.0 (capped), 1 at the line
    two = Service("ns", "two", ("vllm",), {"oom_kills": 2, "restarts": 2})  # 2.0, 2 at the line
    three = Service("ns", "three", ("vllm",), {"oom_kills": 2, "kv_now": 0.45})  # 2.0, 1, sum 2.5
    four = Service("ns", "four", ("vllm",), {"oom_kills": 2, "kv_now": 0.45})  # as three: by name
    assert [r.deployment for r in rank([one, two, three, four])] == ["two", "four", "three", "one"]


def test_a_falling_long_share_counts_zero_and_unexported_columns_take_no_part():
    r = score(Service("ns", "tgi", ("tgi",), {"long_jump": -0.2, "preemptions": 9, "ttft_p99": 30}))
    assert r.reading("long_jump").closeness == 0 and r.not_exported == ("preemptions", "ttft_p99")
    assert r.score == 0 and r.top == "long_jump"


def test_nothing_read_scores_zero_and_top_keeps_the_first():
    ranked = rank([Service("b", "x"), Service("a", "y", ("sglang",), {"queue": 1})], top=1)
    assert [(r.target, r.rank) for r in ranked] == [("a/y", 1)]
    assert score(Service("b", "x")).top is None


def _vector(*series):
    return parse_query_response({"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": labels, "value": [1700000000, str(v)]} for labels, v in series]}})


def test_parse_answers_merges_columns_per_deployment_and_computes_the_long_share():
    chat = {"namespace": "llm", "deployment": "chat"}
    answers = {
        "kv": _vector(({**chat, "engine": "vllm", "column": "kv_now"}, 0.8),
                      ({**chat, "engine": "vllm", "column": "kv_max"}, 0.96),
                      ({**chat, "engine": "vllm", "column": "queue"}, 99)),  # not a column of this query: ignored
        "queue": _vector(({**chat, "engine": "vllm"}, 3), ({**chat, "engine": "sglang"}, 2)),
        "restarts": _vector((chat, 1), ({"namespace": "llm"}, 7)),  # no deployment: ignored
        "long_share": _vector(*(({**chat, "engine": "vllm", "part": p, "count": c}, n) for p, c, n in (
            ("now", "short", 63), ("now", "total", 100), ("before", "short", 92), ("before", "total", 100)))),
    }
    (svc,) = parse_answers(answers)
    assert svc.engines == ("vllm", "sglang")
    assert svc.values == {"kv_now": 0.8, "kv_max": 0.96, "queue": 5.0, "restarts": 1.0, "long_share": 0.37, "long_jump": 0.29}


def test_the_recorded_long_share_is_each_parts_share_and_reads_as_the_counts_do():
    chat, code = {"namespace": "llm", "deployment": "chat"}, {"namespace": "llm", "deployment": "code"}
    counts = _vector(*(({**chat, "engine": e, "part": p, "count": c}, n) for e, p, c, n in (
        ("vllm", "now", "short", 40), ("vllm", "now", "total", 60), ("sglang", "now", "short", 23),
        ("sglang", "now", "total", 40), ("vllm", "before", "short", 90), ("vllm", "before", "total", 100))),
        ({**code, "engine": "vllm", "part": "now", "count": "short"}, 30),
        ({**code, "engine": "vllm", "part": "now", "total": "total"}, 33))  # no count label: ignored
    # what the recorded query answers for the same prompts: 1 - 63/100 now, 1 - 90/100 before
    shares = _vector(({**chat, "part": "now", "count": "long_share"}, 1 - 63 / 100),
                     ({**chat, "part": "before", "count": "long_share"}, 1 - 90 / 100),
                     ({**code, "part": "soon", "count": "long_share"}, 0.5))  # no such part: ignored
    (raw, _) = parse_answers({"long_share": counts})
    (rec, _) = parse_answers({"long_share": shares})
    assert raw.values == rec.values == {"long_share": 0.37, "long_jump": 0.27}
    assert raw.engines == ("vllm", "sglang") and rec.engines == ()


def test_queries_use_the_alert_rules_workload_and_both_label_variants():
    q = queries(namespaces=("llm", "a.b"))
    assert set(q) == set(QUERY_COLUMNS)
    for promql in q.values():
        assert 'label_replace(' in promql and '"deployment", "$1$2$3", "pod"' in promql
        assert 'namespace=~"a\\\\.b|llm"' in promql
    assert 'exported_namespace=~"a\\\\.b|llm"' in q["restarts"] and "exported_pod" in q["gpu_used"]
    assert "unless on (namespace, pod)" in q["gpu_used"]  # preallocating engines left out
    now, peak = q["kv"].split("\nor ")
    assert now.endswith('"column", "kv_now", "", "")') and peak.endswith('[1h:1m]), "column", "kv_max", "", "")')
    assert peak.startswith("label_replace(max_over_time((")
    assert len(q) == 8 and len(queries(("vllm",))) == 7 and len(queries(("tgi",))) == 5


def _outcome(missing=()):
    rows = rank([Service("llm", "chat", ("vllm",), {"kv_now": 0.95, "queue": 3}),
                 Service("llm", "embed", (), {"gpu_used": 0.5})])
    return FleetOutcome(rows=rows, total=2, missing=missing, queries={"kv_now": "x", "queue": "y"},
                        at=datetime(2026, 1, 1, tzinfo=UTC), window_s=3600)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_text_marks_readings_at_the_line_and_columns_not_read(lang):
    out = fleet_text(_outcome((Missing("ttft_p99", ("ttft_p99",), "timeout", "no answer within 1 s"),)), lang)
    chat = next(line for line in out.splitlines() if line.startswith("1  llm/chat"))
    unread, timed_out = {"en": ("unread", "timed out"), "zh": ("未读", "超时")}[lang]
    assert "95%!" in chat and f"  {unread}  " in chat and chat.endswith("gpumem triage llm/chat")
    assert "`ttft_p99`" in out and timed_out in out and "no answer within 1 s" in out


def test_json_carries_lines_readings_and_commands():
    doc = fleet_json(_outcome(), "en")
    assert doc["services"][0]["readings"]["kv_now"] == {"value": 0.95, "line": 0.9, "closeness": 1.0556}
    assert doc["services"][1]["command"] == "gpumem triage llm/embed" and doc["at"] == "2026-01-01T00:00:00Z"


class _SeesTheCollector:
    """A Prometheus without rules whose every query notes whether the cyclic collector is on."""

    def __init__(self, hold: threading.Event | None = None):
        self.seen: list[bool] = []
        self.hold = hold

    def recording_rules(self):
        return frozenset()

    def query(self, promql, at=None):
        self.seen.append(gc.isenabled())
        if self.hold is not None:
            self.hold.wait(5)
        return _vector(({"namespace": "llm", "deployment": "chat", "engine": "vllm", "column": "kv_now"}, 0.5))


def test_the_collector_is_off_while_the_answers_are_read_and_as_it_was_after():
    was = gc.isenabled()
    try:
        gc.enable()
        client = _SeesTheCollector()
        assert read_fleet(client, now=datetime(2026, 12, 1, tzinfo=UTC)).services[0].deployment == "chat"
        assert client.seen == [False] * len(QUERY_COLUMNS) and gc.isenabled()
        gc.disable()  # a caller that runs without it gets it back off
        read_fleet(_SeesTheCollector(), now=datetime(2026, 12, 1, tzinfo=UTC))
        assert not gc.isenabled()
        # two readers at once: the first to finish leaves it off for the other, the last turns it on
        gc.enable()
        hold = threading.Event()
        slow = _SeesTheCollector(hold)
        other = threading.Thread(target=read_fleet, args=(slow,), kwargs={"now": datetime(2026, 12, 1, tzinfo=UTC)})
        other.start()
        while len(slow.seen) < len(QUERY_COLUMNS):
            time.sleep(0.01)
        fast = _SeesTheCollector()
        read_fleet(fast, now=datetime(2026, 12, 1, tzinfo=UTC))
        assert fast.seen == [False] * len(QUERY_COLUMNS) and not gc.isenabled()
        hold.set()
        other.join(10)
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
