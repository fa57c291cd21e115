"""Prometheus answers without a server: recorded payloads, PromQL text, HTTP failures, fuzzing."""

from __future__ import annotations

import base64
import contextlib
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar
from urllib.parse import parse_qs, urlsplit

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.prometheus import promql as q
from collectors.prometheus.client import (
    PrometheusClient,
    PrometheusError,
    PromSeries,
    QueryResult,
    _series,
    load_response_text,
    parse_query_response,
)
from collectors.prometheus.history import engine_of, memory_from, restarts_from, service_from
from collectors.prometheus.lengths import histograms_from, profile_from_lengths
from runbooks.model.units import MIB
from tests.support import words

DATA = Path(__file__).parent / "data" / "prometheus"


def _load(name: str) -> QueryResult:
    return load_response_text((DATA / name).read_text(), source=name)


# ----------------------------------------------------------- recorded payloads


def test_recorded_memory_vector_has_used_free_and_reserved_per_device_with_one_hostname_label():
    r = _load("vector_memory.json")
    assert r.result_type == "vector"
    names = sorted(s.name for s in r.series)
    assert names.count("DCGM_FI_DEV_FB_USED") == 3 and names.count("DCGM_FI_DEV_FB_RESERVED") == 2
    # the lower-case hostname of the newer exporter was copied into Hostname by the query
    assert {s.labels["Hostname"] for s in r.series} == {"gpu-node-1", "gpu-node-2"}
    used = {s.labels["pod"]: s.points[0][1] for s in r.series if s.name == "DCGM_FI_DEV_FB_USED"}
    assert used == {"vllm-server-7d9f8-abcde": 73400.0, "vllm-server-7d9f8-fghij": 74000.0,
                    "vllm-server.canary-0": 30000.0}


def test_recorded_memory_vector_becomes_one_series_per_device():
    r = _load("vector_memory.json")
    mem = memory_from(r, start=None, end=None)  # type: ignore[arg-type]
    totals = {s.label: s.points[0].total_bytes for s in mem.series}
    assert totals == {"gpu-node-1/gpu0": 81559 * MIB, "gpu-node-2/gpu3": 81559 * MIB,
                      "gpu-node-1/gpu1/3g.40gb#2": 40192 * MIB}


def test_recorded_queue_matrix_has_one_point_per_step():
    r = _load("matrix_queue.json")
    assert r.result_type == "matrix"
    [series] = r.series
    assert series.name == "vllm:num_requests_waiting"
    assert len(series.points) == 9
    assert series.points[1][0] - series.points[0][0] == 15


def test_recorded_restarts_give_the_exact_termination_second_and_oomkilled():
    r = _load("matrix_restarts.json")
    restarts, ooms = restarts_from(r)
    term = next(s for s in r.series if s.name.endswith("last_terminated_timestamp")).points[0][1]
    assert [t.timestamp() for t in restarts] == [term]
    assert ooms == restarts


def test_recorded_length_histograms_give_the_8_to_37_percent_shift():
    r = _load("matrix_lengths.json")
    by_time = histograms_from(r)
    assert len(by_time) == 2
    prof = profile_from_lengths(r)
    assert prof.shift.long_share_before == pytest.approx(0.08, abs=1e-3)
    assert prof.shift.long_share_after == pytest.approx(0.37, abs=1e-3)
    assert prof.estimated and prof.total > 0


def test_recorded_scalar_is_one_unlabelled_point():
    r = _load("scalar.json")
    assert r.result_type == "scalar"
    assert r.series[0].labels == {} and r.series[0].points[0][1] == 504.0


def test_recorded_empty_vector_has_no_series():
    r = _load("vector_empty.json")
    assert r.series == ()
    assert memory_from(r, start=None, end=None) is None  # type: ignore[arg-type]


@pytest.mark.parametrize(("name", "kind", "text"), [
    ("error_bad_data.json", "bad_query", "parse error"),
    ("error_execution.json", "bad_query", "duplicate series"),
])
def test_recorded_error_bodies_are_typed_errors(name, kind, text):
    with pytest.raises(PrometheusError) as err:
        _load(name)
    assert err.value.kind == kind and text in words.message(err.value)
    issue = err.value.issue("memory")
    assert (issue.source, issue.kind) == ("prometheus", "unreadable")
    assert words.message(issue).startswith("memory: query refused: ")
    assert words.message(issue, "zh").startswith("`memory`：查询被拒绝：")


def test_nan_and_infinite_values_are_dropped_and_warnings_kept():
    doc = {"status": "success", "warnings": ["partial"], "data": {"resultType": "matrix", "result": [
        {"metric": {}, "values": [[20, "NaN"], [10, "0.5"], [30, "+Inf"], [40, "0.75"]]}]}}
    r = parse_query_response(doc)
    assert r.series[0].points == ((10.0, 0.5), (40.0, 0.75))
    assert r.warnings == ("partial",)


@pytest.mark.parametrize(("doc", "where"), [
    ([], "expected a JSON object"),
    ({"status": "pending"}, "status"),
    ({"status": "success"}, "data"),
    ({"status": "success", "data": {"resultType": "table", "result": []}}, "resultType"),
    ({"status": "success", "data": {"resultType": "vector", "result": {}}}, "expected a list"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"a": 1}, "value": [1, "2"]}]}},
     "metric"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1, 2]}]}},
     "expected a string"),
    ({"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": ["x", "2"]}]}},
     "time is not a number"),
    ({"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "zz"]]}]}},
     "bad value"),
])
def test_documents_not_in_the_api_shape_are_parse_errors_naming_the_place(doc, where):
    with pytest.raises(ParseError) as err:
        parse_query_response(doc, source="answer.json")
    assert err.value.source == "answer.json" and where in words.message(err.value)


def test_bad_json_text_is_a_parse_error_with_its_line():
    with pytest.raises(ParseError) as err:
        load_response_text('{\n "status": "success",\n oops}', source="answer.json")
    assert err.value.line == 3


# ----------------------------------------------------------------------- PromQL


def test_pod_regex_escapes_dots_and_anchoring_keeps_prefixes_apart():
    assert q.pod_regex(["vllm.b", "vllm-a", "vllm-a"]) == "vllm-a|vllm\\.b"
    assert q.promql_string(q.pod_regex(["vllm.b"])) == '"vllm\\\\.b"'


def test_every_query_matches_pod_and_exported_pod():
    sel = q.Selectors("llm", ["a", "b"])
    for expr in (q.memory_query(sel), q.restarts_query(sel), q.queue_query(sel), q.usage_query(sel),
                 q.preemption_query(sel, 300), q.ttft_p99_query(sel, 300), q.lengths_query(sel, 900)):
        assert 'pod=~"a|b"' in expr and 'exported_pod=~"a|b"' in expr
        assert 'namespace="llm"' in expr and 'exported_namespace="llm"' in expr


def test_query_text_does_not_grow_with_the_number_of_queries_only_with_names():
    few = q.memory_query(q.Selectors("llm", ["pod-0"]))
    many = q.memory_query(q.Selectors("llm", [f"pod-{i}" for i in range(8)]))
    assert many.count(" or ") == few.count(" or ")


@pytest.mark.parametrize(("names", "expected"), [
    ({"vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}, ("vllm", "vllm-v1")),
    ({"vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc"}, ("vllm", "vllm-v0")),
    ({"vllm:num_requests_waiting"}, ("vllm", None)),
    ({"tgi_queue_size", "tgi_kv_budget_ratio"}, ("tgi", None)),
    ({"sglang:num_queue_reqs"}, ("sglang", None)),
    (set(), (None, None)),
])
def test_engine_is_told_by_the_series_names(names, expected):
    assert engine_of(names) == expected


def test_overflowing_counts_are_ignored_not_raised():
    huge = QueryResult("matrix", (
        PromSeries({"__name__": "kube_pod_container_status_restarts_total"}, ((1.0, -1e308), (2.0, 1e308))),
        PromSeries({"hist": "prompt", "le": "+Inf"}, ((1.0, 1e308),)),
        PromSeries({"hist": "prompt", "le": "+inf"}, ((1.0, 1e308),)),
    ))
    assert restarts_from(huge) == ((), ())
    assert profile_from_lengths(huge) is None


def test_usage_given_in_percent_is_read_as_a_fraction():
    usage = QueryResult("matrix", (PromSeries({"__name__": "sglang:token_usage"}, ((10.0, 66.0), (25.0, 0.5))),))
    svc = service_from({"kv_usage": usage}, None, None, 15)  # type: ignore[arg-type]
    assert [v for _, v in svc.kv_cache_usage_ratio] == [0.66, 0.5]


# -------------------------------------------------------------- HTTP failures


class _Stub(BaseHTTPRequestHandler):
    """Answers by the first path segment, the base URL prefix each test picks."""

    seen: ClassVar[list[tuple[str, str, dict[str, str], dict[str, list[str]]]]] = []
    OK = (DATA / "scalar.json").read_bytes()
    ROUTES: ClassVar[dict[str, tuple[int, str, bytes]]] = {
        "forbidden": (403, "text/plain", b"Forbidden"),
        "unauth": (401, "text/plain", b"Unauthorized"),
        "nope": (404, "text/plain", b"404 page not found"),
        "gateway": (502, "text/html", b"<html>Bad Gateway</html>"),
        "boom": (500, "text/plain", b"oops"),
        "login": (200, "text/html", b"<html><form>Sign in</form></html>"),
        "busy": (503, "application/json",
                 b'{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}'),
        "ok": (200, "application/json", OK),
    }

    def _answer(self, body_params: dict[str, list[str]]) -> None:
        route = urlsplit(self.path).path.split("/")[1]
        _Stub.seen.append((self.command, route, dict(self.headers), body_params))
        if route == "slow":
            time.sleep(1.5)
            route = "ok"
        status, ctype, body = self.ROUTES[route]
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._answer(parse_qs(urlsplit(self.path).query))

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        self._answer(parse_qs(self.rfile.read(length).decode()))

    def log_message(self, *args):
        pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # the timeout test hangs up on purpose; the broken pipe is expected


@pytest.fixture(scope="module")
def stub():
    server = _QuietServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("route", "kind"), [
    ("forbidden", "forbidden"), ("unauth", "forbidden"), ("nope", "not_found"), ("gateway", "unreachable"),
    ("boom", "unreadable"), ("login", "unreadable"), ("busy", "timeout"),
])
def test_http_failures_become_typed_errors(stub, route, kind):
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(f"{stub}/{route}").query("up")
    assert err.value.kind == kind


def test_a_server_that_answers_too_late_is_a_timeout(stub):
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(f"{stub}/slow", timeout_s=0.3).query("up")
    assert err.value.kind == "timeout"


def test_bearer_token_is_sent_and_never_shown(stub):
    client = PrometheusClient(f"{stub}/ok", bearer_token="tok-s3cret")
    assert client.query("up").series[0].points[0][1] == 504.0
    assert _Stub.seen[-1][2]["Authorization"] == "Bearer tok-s3cret"
    assert "s3cret" not in repr(client)


def test_basic_auth_is_sent_and_credentials_in_the_url_stay_out_of_messages(stub):
    client = PrometheusClient(f"{stub}/ok", basic_auth=("ops", "pa55"))
    client.query("up")
    expected = "Basic " + base64.b64encode(b"ops:pa55").decode()
    assert _Stub.seen[-1][2]["Authorization"] == expected
    with pytest.raises(PrometheusError) as err:
        PrometheusClient(stub.replace("http://", "http://ops:pa55@") + "/forbidden").query("up")
    assert "pa55" not in str(err.value) and "pa55" not in words.message(err.value.issue())


def test_range_query_sends_start_end_and_step_and_long_queries_go_as_post(stub):
    client = PrometheusClient(f"{stub}/ok")
    client.query_range("up", 1000.0, 1600.0, 15)
    method, _, _, params = _Stub.seen[-1]
    assert method == "GET" and params["start"] == ["1000.000"] and params["step"] == ["15"]
    long_query = q.memory_query(q.Selectors("llm", [f"vllm-server-7d9f8-{i:05d}" for i in range(120)]))
    client.query(long_query)
    method, _, _, params = _Stub.seen[-1]
    assert method == "POST" and params["query"] == [long_query]
    assert client.queries_sent == 2


# --------------------------------------------------------------------- fuzzing

_scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12)
_json = st.recursive(_scalars, lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids,
                                                                                          max_size=4), max_leaves=25)
_value = st.one_of(st.sampled_from(["1", "NaN", "+Inf", "-Inf", "1e308", "x", ""]), _scalars)
_point = st.one_of(st.lists(st.one_of(st.floats(), st.integers(), st.text(max_size=4)), max_size=3),
                   st.tuples(st.floats(), _value).map(list))
_labels = st.dictionaries(st.sampled_from(["__name__", "le", "hist", "pod", "gpu", "Hostname", "reason"]),
                          st.one_of(st.text(max_size=8), st.sampled_from(["+Inf", "2000.0", "prompt", "OOMKilled",
                                                                          "DCGM_FI_DEV_FB_USED", "-Inf", "nan"])),
                          max_size=5)
_item = st.fixed_dictionaries({"metric": st.one_of(_labels, _json)},
                              optional={"value": _point, "values": st.lists(_point, max_size=4)})
_shaped = st.fixed_dictionaries({
    "status": st.sampled_from(["success", "error", "other"]),
    "data": st.fixed_dictionaries({"resultType": st.sampled_from(["vector", "matrix", "scalar", "string", "x"]),
                                   "result": st.one_of(st.lists(_item, max_size=4), _point, _json)}),
}, optional={"errorType": _json, "error": _json, "warnings": _json})


@settings(max_examples=200, deadline=None)
@given(st.one_of(_json, _shaped))
def test_fuzzed_documents_give_a_result_or_a_typed_error(doc):
    try:
        result = parse_query_response(doc, source="fuzz.json")
    except (ParseError, PrometheusError):
        return
    assert isinstance(result, QueryResult)
    # and what parses, the converters take without raising
    memory_from(result, None, None)  # type: ignore[arg-type]
    restarts_from(result)
    profile_from_lengths(result)
    service_from({"queue": result, "kv_usage": result, "lengths": result}, None, None, 15)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=200) | _shaped.map(json.dumps))
def test_fuzzed_response_text_gives_a_result_or_a_typed_error(text):
    with contextlib.suppress(ParseError, PrometheusError):
        assert isinstance(load_response_text(text, source="fuzz.json"), QueryResult)


_vector_item = st.one_of(_item, st.fixed_dictionaries({"metric": _labels, "value": _point}), _json)


@settings(max_examples=300, deadline=None)
@given(st.lists(_vector_item, max_size=5))
def test_an_instant_vector_read_inline_is_what_the_series_reader_gives(items):
    # the inline reading of the usual shape must give the same series, or the same error, as `_series`
    doc = {"status": "success", "data": {"resultType": "vector", "result": items}}
    try:
        want = tuple(_series(item, False, "fuzz.json", f"data.result[{i}]") for i, item in enumerate(items))
    except ParseError as e:
        with pytest.raises(ParseError) as got:
            parse_query_response(doc, source="fuzz.json")
        assert got.value.message == e.message
        return
    assert parse_query_response(doc, source="fuzz.json").series == want


def test_an_instant_vector_keeps_labels_and_drops_what_is_no_reading():
    doc = {"status": "success", "data": {"resultType": "vector", "result": [
        {"metric": {"namespace": "llm", "deployment": "chat"}, "value": [1700000000, "0.5"]},
        {"metric": {"namespace": "llm"}, "value": [1700000000.5, "NaN"]},
        {"metric": {}, "value": [1700000000, "+Inf"], "histogram": [1, {}]},
    ]}}
    got = parse_query_response(doc).series
    assert [(s.labels, s.points) for s in got] == [
        ({"namespace": "llm", "deployment": "chat"}, ((1700000000.0, 0.5),)), ({"namespace": "llm"}, ()), ({}, ())]
    assert doc["data"]["result"][0]["metric"] is not got[0].labels  # the answer's dict is not shared
    for bad, where in (([1700000000, 2], "value: expected a string"), ([True, "1"], "time is not a number"),
                       ([1e12, "1"], "time out of range"), ([1700000000, "zz"], "bad value")):
        doc["data"]["result"][0]["value"] = bad
        with words.raises(ParseError, match=where):
            parse_query_response(doc, source="answer.json")
