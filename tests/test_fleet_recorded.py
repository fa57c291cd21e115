"""`gpumem fleet` from gpumem's recording rules: a real Prometheus with the rules loaded and their
history backfilled by `promtool tsdb create-blocks-from rules`, against the same fleet read raw.

The recorded view must rank the same services in the same order with the same readings as the
raw one, in as many queries, and fall back to the raw series, saying why, whenever the rules
cannot serve it (not loaded, another window, a rules API that does not answer).
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bot.main import main
from bot.service.fleet import fleet_view
from collectors.prometheus import fleet as collector
from collectors.prometheus.client import PrometheusClient, PrometheusError, read_recording_rules
from runbooks.alerts.fleet_queries import needed_records, recorded_queries, recording_rules
from tests.support import prom_fleet as f
from tests.support import words

pytestmark = pytest.mark.real_services


def _end_s() -> int:
    return (int(time.time()) // 60) * 60 - 300


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    try:
        with f.run_fleet_prometheus(tmp_path_factory.mktemp("fleet-raw"), f.big_fleet(), _end_s()) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory, raw):
    try:
        with f.run_recorded_fleet_prometheus(tmp_path_factory.mktemp("fleet-rec"), f.big_fleet(), raw.end_s) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def vllm_only(tmp_path_factory):
    try:
        with f.run_recorded_fleet_prometheus(tmp_path_factory.mktemp("fleet-vllm"), f.small_fleet(), _end_s(),
                                             backfill_s=900, engines=("vllm",)) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


def _values(outcome):
    return {row.target: {r.column: r.value for r in row.readings} for row in outcome.rows}


def test_with_the_rules_loaded_the_view_reads_them_in_as_many_queries(recorded):
    with f.BreakingProxy(recorded.url) as proxy:
        client = PrometheusClient(proxy.url, timeout_s=20)
        outcome = fleet_view(client, now=recorded.end)
    assert (outcome.read_from, outcome.read_from_reason, outcome.missing) == ("recorded", "loaded", ())
    assert sorted(proxy.received) == sorted(recorded_queries().values())
    assert len(proxy.received) == len(collector.QUERY_COLUMNS) == client.queries_sent == 8
    assert proxy.other == ["/api/v1/rules"] and client.rules_reads == 1
    # every recorded query reads the rules' series only: no raw engine series, no pod-name matching
    for promql in proxy.received:
        assert '"pod"' not in promql and "vllm:" not in promql and "DCGM" not in promql, promql


def _last_evaluation(server) -> datetime:
    """When the rules were last evaluated before the server's end (Prometheus, and promtool
    backfilling, offset a group's evaluations within the minute)."""
    client = PrometheusClient(server.url, timeout_s=20)
    got = client.query("max(timestamp(namespace_deployment:gpumem_vllm_kv_usage:max))", at=server.end)
    return datetime.fromtimestamp(got.series[0].points[-1][1], UTC)


def test_the_recorded_view_ranks_and_reads_as_the_raw_one(recorded, raw):
    # a recorded reading is as of the rules' last evaluation: compare both views at that instant
    at = _last_evaluation(recorded)
    assert timedelta(0) <= recorded.end - at < timedelta(seconds=60)
    rec = fleet_view(PrometheusClient(recorded.url, timeout_s=20), now=at)
    direct = fleet_view(PrometheusClient(raw.url, timeout_s=20), now=at)
    assert direct.read_from == "raw" and rec.read_from == "recorded"
    assert [r.target for r in rec.rows] == [r.target for r in direct.rows] == list(f.BIG_ORDER)
    got, want = _values(rec), _values(direct)
    assert got.keys() == want.keys()
    for target, columns in want.items():
        assert got[target].keys() == columns.keys(), target
        for column, value in columns.items():
            assert got[target][column] == pytest.approx(value, rel=0.03, abs=0.01), (target, column)
    assert [(r.score, r.at_line, r.top) for r in rec.rows] == [(r.score, r.at_line, r.top) for r in direct.rows]


def test_an_engine_subset_and_namespaces_filter_the_recorded_series(recorded):
    client = PrometheusClient(recorded.url, timeout_s=20)
    tgi = fleet_view(client, now=recorded.end, engines=("tgi",))
    assert tgi.read_from == "recorded"
    assert {r.engines for r in tgi.rows} == {("tgi",)} and tgi.total == 7
    assert tgi.rows[0].target == "batch/summarize-tgi"
    assert len(tgi.queries) == 5  # no preemptions, TTFT or engine-less GPU query for TGI
    prod = fleet_view(client, now=recorded.end, namespaces=("prod", "batch"))
    assert {r.namespace for r in prod.rows} == {"prod", "batch"} and prod.total == 10


def test_rules_loaded_for_some_engines_only_fall_back_to_raw_and_say_how_many_are_missing(vllm_only):
    client = PrometheusClient(vllm_only.url, timeout_s=20)
    outcome = fleet_view(client, now=vllm_only.end)
    assert (outcome.read_from, outcome.read_from_reason) == ("raw", "not_loaded")
    # the SGLang and TGI rules: 8 and 6
    assert outcome.missing_records == len(needed_records() - {r.record for r in recording_rules(("vllm",))}) == 14
    assert sorted(outcome.queries.values()) == sorted(collector.queries().values())
    vllm = fleet_view(client, now=vllm_only.end, engines=("vllm",))
    assert (vllm.read_from, vllm.read_from_reason) == ("recorded", "loaded")
    assert sorted(r.target for r in vllm.rows) == sorted(r.target for r in outcome.rows if r.engines == ("vllm",))


def test_another_window_than_the_rules_hour_reads_raw(recorded):
    outcome = fleet_view(PrometheusClient(recorded.url, timeout_s=20), now=recorded.end, window_s=1800)
    assert (outcome.read_from, outcome.read_from_reason) == ("raw", "window")
    assert sorted(outcome.queries.values()) == sorted(collector.queries(window_s=1800).values())


def test_the_cli_says_where_it_read_from(recorded, raw, capsys):
    assert main(["fleet", "--prometheus", recorded.url, "--at", recorded.end.isoformat(), "--top", "2"]) == 1
    assert "Read from gpumem's recording rules" in capsys.readouterr().out
    assert main(["fleet", "--prometheus", raw.url, "--at", raw.end.isoformat(), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert (doc["read_from"], doc["read_from_reason"]) == ("raw", "not_loaded")
    assert main(["fleet", "--prometheus", raw.url, "--at", raw.end.isoformat(), "--lang", "zh", "--top", "1"]) == 1
    out = capsys.readouterr().out
    assert f"有 {len(needed_records())} 条未在 Prometheus 中加载" in out


# ------------------------------------------------------------------ the rules API's answer, read


def _doc(*rules, status="success"):
    return json.dumps({"status": status, "data": {"groups": [{"name": "g", "rules": list(rules)}]}}).encode()


def test_only_healthy_recording_rules_count_as_loaded():
    body = _doc({"type": "recording", "name": "a:b:c", "health": "ok"},
                {"type": "recording", "name": "d:e:f", "health": "unknown"},
                {"type": "recording", "name": "g:h:i", "health": "err"},
                {"type": "alerting", "name": "GpumemKVCacheHigh", "health": "ok"})
    assert read_recording_rules(body, "http://127.0.0.1:9/api/v1/rules") == {"a:b:c", "d:e:f"}


@pytest.mark.parametrize(("body", "status", "kind"), [
    (b"404 page not found", 404, "not_found"),
    (b"forbidden", 403, "forbidden"),
    (b'{"status":"error","errorType":"unavailable","error":"rule manager not ready"}', 503, "unreachable"),
    (b'{"status":"success","data":{"groups":{}}}', 200, "unreadable"),
    (b'{"status":"success","data":{"groups":[{"rules":7}]}}', 200, "unreadable"),
    (b"<html>gateway</html>", 200, "unreadable"),
])
def test_a_rules_answer_that_says_nothing_is_a_typed_error(body, status, kind):
    with pytest.raises(PrometheusError) as e:
        read_recording_rules(body, "http://127.0.0.1:9/api/v1/rules", status)
    assert e.value.kind == kind and "127.0.0.1:9/api/v1/rules" in words.message(e.value)


@given(st.binary(max_size=300) | st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(
        ["status", "data", "groups", "rules", "type", "name", "health"]), inner, max_size=4),
    max_leaves=12).map(lambda d: json.dumps(d).encode()), st.sampled_from([200, 404, 500]))
def test_any_rules_answer_gives_names_or_a_typed_error(body, status):
    try:
        names = read_recording_rules(body, "http://127.0.0.1:9/api/v1/rules", status)
    except PrometheusError as e:
        assert e.kind in {"not_found", "forbidden", "unreachable", "unreadable", "bad_query", "timeout"}
    else:
        assert all(isinstance(n, str) for n in names)


def test_a_rules_api_that_does_not_answer_reads_raw_and_names_why():
    class NoRules:
        queries_sent = 0

        def recording_rules(self):
            raise PrometheusError("not_found", "http://127.0.0.1:9/api/v1/rules: HTTP 404")

        def query(self, promql, at=None):
            raise PrometheusError("unreachable", "http://127.0.0.1:9/api/v1/query: cannot connect")

    readings = collector.read_fleet(NoRules(), now=datetime(2026, 12, 1, tzinfo=UTC))
    assert (readings.recorded, readings.recorded_reason) == (False, "unread")
    assert readings.rules_issue is not None and readings.rules_issue.kind == "not_found"
    assert sorted(readings.queries.values()) == sorted(collector.queries().values())
