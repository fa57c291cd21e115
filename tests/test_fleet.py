"""`gpumem fleet` against a real Prometheus loaded with a fleet's history (tests/support/prom_fleet.py).

31 services in 6 namespaces (vLLM V1 and V0 names, SGLang, TGI, a GPU pod with no engine;
kube-state-metrics and DCGM with and without honorLabels; Deployments and a StatefulSet),
and 3 in a second server: the same 8 queries for both, counted where Prometheus receives them
(a forwarding proxy in front of each server) and at the client.
"""

from __future__ import annotations

import json
import time
from datetime import timedelta

import pytest

from bot.config.environ import Environment
from bot.main import main
from bot.service.deps import Deps
from bot.service.fleet import fleet_view
from collectors.prometheus import fleet as collector
from collectors.prometheus.client import PrometheusClient
from tests.support import prom_fleet as f
from tests.support import words

#: the view's queries without --engine
ALL_QUERIES = len(collector.QUERY_COLUMNS)


def _end_s() -> int:
    return (int(time.time()) // 60) * 60 - 300


def _serve(tmp_path_factory, fleet, name):
    try:
        with f.run_fleet_prometheus(tmp_path_factory.mktemp(name), fleet, _end_s()) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    yield from _serve(tmp_path_factory, f.big_fleet(), "fleet-big")


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    yield from _serve(tmp_path_factory, f.small_fleet(), "fleet-small")


@pytest.fixture(scope="module")
def view(big):
    client = PrometheusClient(big.url, timeout_s=20)
    outcome = fleet_view(client, now=big.end)
    return outcome, client.queries_sent


def _rows(outcome):
    return {row.target: row for row in outcome.rows}


def _values(row):
    return {r.column: r.value for r in row.readings}


# ------------------------------------------------------------------ the number of queries


def test_the_same_queries_reach_prometheus_for_3_and_for_31_services(big, small):
    received, sent = {}, {}
    for server, expected in ((small, 3), (big, len(f.big_fleet().deps))):
        with f.BreakingProxy(server.url) as proxy:
            client = PrometheusClient(proxy.url, timeout_s=20)
            outcome = fleet_view(client, now=server.end)
        assert outcome.total == expected and not outcome.missing
        received[expected], sent[expected] = sorted(proxy.received), client.queries_sent
    assert {n: len(r) for n, r in received.items()} == {3: ALL_QUERIES, 31: ALL_QUERIES} == sent
    assert ALL_QUERIES == 8
    # not only as many: the very same PromQL, whatever the fleet's size (grouping is Prometheus' work)
    assert received[3] == received[31] == sorted(collector.queries().values())


def test_filters_change_what_is_read_not_how_many_queries(big):
    client = PrometheusClient(big.url, timeout_s=20)
    prod = fleet_view(client, now=big.end, namespaces=("prod", "batch"))
    assert client.queries_sent == ALL_QUERIES
    assert {r.namespace for r in prod.rows} == {"prod", "batch"} and prod.total == 10
    tgi = fleet_view(client, now=big.end, engines=("tgi",))
    # no GPU-memory query for engine-less pods, none for preemptions or TTFT (TGI exports neither)
    assert client.queries_sent == ALL_QUERIES + 5 == ALL_QUERIES + len(collector.queries(("tgi",)))
    assert {r.engines for r in tgi.rows} == {("tgi",)} and tgi.total == 7
    assert tgi.rows[0].target == "batch/summarize-tgi"


# ------------------------------------------------------------------ the ranking and the values


def test_every_service_is_found_once_and_decoys_never_show(view):
    outcome, _ = view
    assert sorted(r.target for r in outcome.rows) == sorted(d.target for d in f.big_fleet().deps)
    assert not any("nightly-report" in r.target for r in outcome.rows)


def test_services_are_ranked_closest_to_trouble_first(view):
    outcome, _ = view
    assert tuple(r.target for r in outcome.rows) == f.BIG_ORDER
    assert [r.rank for r in outcome.rows] == list(range(1, 32))
    top = outcome.rows[:6]
    assert [(r.score, r.at_line) for r in top] == [(2.0, 4), (2.0, 3), (1.9333, 3), (1.6667, 1), (1.0556, 2),
                                                   (1.021, 1)]
    assert [r.top for r in top] == ["preemptions", "preemptions", "long_jump", "queue", "kv_now", "gpu_used"]
    assert all(r.command == f"gpumem triage {r.target}" for r in outcome.rows)


def test_oom_kills_restarts_preemptions_and_the_kv_peak_of_the_window(view):
    v = _values(_rows(view[0])["prod/chat-70b"])
    assert v["oom_kills"] == 2 and v["restarts"] == 2  # through kube-state-metrics without honorLabels
    assert v["preemptions"] == pytest.approx(120, rel=0.02)  # 1 per 15 s per pod, 2 pods, 15 minutes
    assert v["kv_now"] == pytest.approx(0.8) and v["kv_max"] == pytest.approx(0.96)
    assert v["queue"] == 4
    assert "gpu_used" not in v  # vLLM preallocates: a full card says nothing (as GpumemGPUMemoryHigh)
    code = _values(_rows(view[0])["prod/code-34b"])  # V0 metric names
    assert code["kv_now"] == pytest.approx(0.99) and code["preemptions"] == pytest.approx(180, rel=0.02)
    assert code["oom_kills"] == 0 and code["restarts"] == 0


def test_ttft_p99_and_the_long_share_jump(view):
    v = _values(_rows(view[0])["prod/assist-8b"])
    assert v["ttft_p99"] == pytest.approx(f.TTFT_P99["slow"])
    assert v["long_share"] == pytest.approx(0.37) and v["long_jump"] == pytest.approx(0.29)
    calm = _values(_rows(view[0])["team-a/svc-00"])
    assert calm["ttft_p99"] == pytest.approx(f.TTFT_P99["fast"]) and calm["long_jump"] == pytest.approx(0)


def test_sglang_queue_counts_each_dp_rank_once_and_tgi_has_no_preemptions_or_ttft(view):
    rows = _rows(view[0])
    assert _values(rows["search/rag-sgl"])["queue"] == 20  # 2 pods x 10, not x 2 TP ranks
    tgi = rows["batch/summarize-tgi"]  # a StatefulSet: summarize-tgi-0
    assert tgi.engines == ("tgi",) and tgi.not_exported == ("preemptions", "ttft_p99")
    assert _values(tgi)["kv_now"] == pytest.approx(0.95) and _values(tgi)["queue"] == 6


def test_gpu_memory_counts_for_pods_that_run_no_engine(view):
    row = _rows(view[0])["ml/embedder"]
    dep = next(d for d in f.big_fleet().deps if d.name == "embedder")
    assert row.engines == () and _values(row) == {"gpu_used": pytest.approx(f.gpu_used_ratio(dep)),
                                                  "restarts": 0, "oom_kills": 0}


# ------------------------------------------------------------------ a query that fails


def test_a_query_answered_500_costs_its_columns_not_the_view(big):
    with f.BreakingProxy(big.url, "time_to_first_token") as proxy:
        client = PrometheusClient(proxy.url, timeout_s=20)
        outcome = fleet_view(client, now=big.end)
    assert client.queries_sent == ALL_QUERIES and len(proxy.broken) == 1
    assert [(m.query, m.columns, m.kind) for m in outcome.missing] == [("ttft_p99", ("ttft_p99",), "unreadable")]
    assert "HTTP 500" in words.en(outcome.missing[0].message)
    assert outcome.not_read == ("ttft_p99",) and outcome.total == 31
    assert all(r.reading("ttft_p99") is None for r in outcome.rows)
    assert tuple(r.target for r in outcome.rows) == f.BIG_ORDER  # TTFT was nobody's closest reading


def test_a_query_that_times_out_costs_its_columns(big):
    with f.BreakingProxy(big.url, 'reason="OOMKilled"', delay_s=3.0) as proxy:
        client = PrometheusClient(proxy.url, timeout_s=1.0)
        outcome = fleet_view(client, now=big.end)
    assert [(m.query, m.kind) for m in outcome.missing] == [("oom_kills", "timeout")]
    chat = _rows(outcome)["prod/chat-70b"]
    assert chat.reading("oom_kills") is None and chat.reading("restarts").value == 2
    assert chat.rank == 1


def test_a_bad_metric_name_is_a_bad_query_that_costs_its_columns(big, monkeypatch):
    real = collector.queries

    def with_a_typo(*args, **kwargs):
        out = real(*args, **kwargs)
        out["queue"] = out["queue"].replace('__name__=~"vllm:num_requests_waiting"', "vllm:num requests_waiting")
        return out

    monkeypatch.setattr(collector, "queries", with_a_typo)
    client = PrometheusClient(big.url, timeout_s=20)
    outcome = fleet_view(client, now=big.end)
    assert [(m.query, m.kind) for m in outcome.missing] == [("queue", "unreadable")]
    assert "bad_data" in words.en(outcome.missing[0].message)
    rows = _rows(outcome)
    assert rows["search/rag-sgl"].reading("queue") is None and outcome.total == 31
    # its queue was its closest reading: it drops to its KV usage, 60% (0.6667), below 13 calm services
    assert rows["search/rag-sgl"].rank == 19 and rows["search/rag-sgl"].top == "kv_now"


def test_nothing_read_when_prometheus_does_not_answer():
    client = PrometheusClient("http://127.0.0.1:9", timeout_s=1)
    from datetime import UTC, datetime

    outcome = fleet_view(client, now=datetime(2026, 1, 1, tzinfo=UTC))
    assert outcome.nothing_read and outcome.rows == () and client.queries_sent == ALL_QUERIES
    assert {m.kind for m in outcome.missing} == {"unreachable"}


# ------------------------------------------------------------------ the command line


def test_cli_text_lists_the_top_services_with_their_triage_command(big, capsys):
    code = main(["fleet", "--prometheus", big.url, "--at", big.end.isoformat(), "--top", "4"])
    out = capsys.readouterr().out
    assert code == 1  # services at or past a runbook line
    assert "4 of 31 services" in out
    for target in f.BIG_ORDER[:4]:
        assert f"gpumem triage {target}" in out
    assert "gpumem triage batch/summarize-tgi" not in out
    assert "4. search/rag-sgl: queue 20, line 12 (167% of it). Next: gpumem triage search/rag-sgl" in out


def test_cli_json_has_stable_keys_and_names_what_was_not_read(big, capsys):
    with f.BreakingProxy(big.url, "time_to_first_token") as proxy:
        code = main(["fleet", "--prometheus", proxy.url, "--at", big.end.isoformat(), "--json",
                     "-n", "prod", "--engine", "vllm"])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1
    # prod's calm services run TGI; the GPU-memory query of engine-less pods is not sent
    assert doc["services_total"] == 3 and len(doc["queries"]) == ALL_QUERIES - 1
    assert [s["deployment"] for s in doc["services"][:3]] == ["chat-70b", "code-34b", "assist-8b"]
    assert doc["not_read"][0]["query"] == "ttft_p99" and doc["not_read"][0]["columns"] == ["ttft_p99"]
    first = doc["services"][0]
    assert first["command"] == "gpumem triage prod/chat-70b" and first["readings"]["oom_kills"] == {
        "value": 2.0, "line": 1.0, "closeness": 2.0}
    assert doc["lines"]["kv_now"] == 0.9 and doc["lines"]["queue"] == 12


def test_cli_in_chinese_and_a_duration_back(big, capsys, monkeypatch):
    code = main(["fleet", "--prometheus", big.url, "--at", big.end.isoformat(), "--lang", "zh", "--top", "1",
                 "-n", "ml"])
    out = capsys.readouterr().out
    assert code == 1 and "下一步：gpumem triage ml/embedder" in out
    from bot.service import fleet as service

    args = type("A", (), {"at": timedelta(minutes=5), "config": None, "prometheus": big.url, "timeout": 5.0,
                          "engine": None, "namespace": ["ml"], "top": None})()
    later = big.end + timedelta(minutes=5)
    assert service.run_fleet(args, Deps(Environment(), now=lambda: later)).at == big.end


def test_cli_without_prometheus_says_what_to_give(capsys, monkeypatch):
    monkeypatch.delenv("GPUMEM_CONFIG", raising=False)
    monkeypatch.delenv("GPUMEM_PROMETHEUS_URL", raising=False)
    assert main(["fleet"]) == 2
    assert "--prometheus URL" in capsys.readouterr().err


def test_cli_when_nothing_answers_exits_3(capsys):
    assert main(["fleet", "--prometheus", "http://127.0.0.1:9", "--timeout", "1"]) == 3
    assert "No query answered" in capsys.readouterr().out
