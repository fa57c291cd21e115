"""gather_history against a real Prometheus loaded with a known history (see tests/support/prom_harness.py)."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from collectors.prometheus import history as history_module
from collectors.prometheus.client import PrometheusClient, PrometheusError
from collectors.prometheus.history import QUERY_KEYS, gather_history
from runbooks.model.evidence import Evidence
from runbooks.model.serde import from_jsonable, to_jsonable
from runbooks.model.units import MIB
from tests.support import prom_harness as h
from tests.support import words


@pytest.fixture(scope="module")
def client(prom):
    return PrometheusClient(prom.url, timeout_s=10)


@pytest.fixture(scope="module")
def hist(prom, client):
    return gather_history(client, h.NS, h.PODS, now=prom.end)


def _by_label(history):
    return {s.label: s for s in history.memory.series}


def _at(prom, before_s):
    return prom.end - timedelta(seconds=before_s)


def _value_at(series, when):
    return dict(series)[when]


# ------------------------------------------------------------------ GPU memory


def test_every_device_of_the_pods_is_found_whatever_its_label_variant(hist):
    # A: exported_pod + Hostname/UUID; B: pod + hostname/uuid; C: a MIG slice, a dot in the pod name
    assert set(_by_label(hist)) == {h.DEVICE_A, h.DEVICE_B, h.DEVICE_C}
    assert hist.issues == ()


def test_peak_gpu_memory_of_each_device_is_the_generated_peak(hist):
    peaks = {label: max(p.used_bytes for p in s.points) for label, s in _by_label(hist).items()}
    assert peaks == {h.DEVICE_A: h.PEAK_A_MIB * MIB, h.DEVICE_B: h.PEAK_B_MIB * MIB, h.DEVICE_C: h.USED_C_MIB * MIB}


def test_total_is_used_plus_free_plus_reserved_and_mig_slices_go_without_reserved(hist):
    totals = {label: {p.total_bytes for p in s.points} for label, s in _by_label(hist).items()}
    assert totals == {h.DEVICE_A: {h.TOTAL_MIB * MIB}, h.DEVICE_B: {h.TOTAL_MIB * MIB},
                      h.DEVICE_C: {h.MIG_TOTAL_MIB * MIB}}


def test_memory_points_cover_the_window_at_the_default_step(prom, hist):
    points = _by_label(hist)[h.DEVICE_A].points
    assert points[0].at == _at(prom, h.WINDOW_S) and points[-1].at == prom.end
    assert len(points) == h.WINDOW_S // h.STEP_S + 1
    drop = next(p for p in points if p.at == _at(prom, h.OOM1_BEFORE_S))
    assert drop.used_bytes == 0


def test_decoy_pods_never_leak_into_the_readings(hist):
    # decoys hold 11111 MiB and a queue of 500; nothing of theirs may show
    used = {p.used_bytes for s in hist.memory.series for p in s.points}
    assert h.DECOY_MIB * MIB not in used
    assert max(v for _, v in hist.service.queue_depth) < 500


# -------------------------------------------------------------------- restarts


def test_restart_instants_are_exact_with_termination_times_and_within_a_step_without(prom, hist):
    restarts = hist.memory.restarts_at
    assert len(restarts) == 3
    b, oom1, oom2 = restarts
    # pod B: counter only, sampled off the grid: the restart shows at the first step after it
    true_b = _at(prom, h.RESTART_B_BEFORE_S)
    assert timedelta(0) <= b - true_b < timedelta(seconds=h.STEP_S)
    # pod A: kube-state-metrics' last_terminated_timestamp gives the second
    assert oom1 == _at(prom, h.OOM1_BEFORE_S + h.TERMINATED_EARLY_S)
    assert oom2 == _at(prom, h.OOM2_BEFORE_S + h.TERMINATED_EARLY_S)
    assert hist.restarts_at == restarts


def test_only_oomkilled_restarts_are_marked_oom(hist):
    assert hist.memory.oom_killed_at == hist.memory.restarts_at[1:]
    assert hist.oom_killed == (f"{h.POD_A}/vllm",)


# --------------------------------------------------------------------- service


def test_queue_depth_is_summed_over_engines_and_pods(prom, hist):
    assert max(v for _, v in hist.service.queue_depth) == h.QUEUE_PEAK
    assert _value_at(hist.service.queue_depth, _at(prom, 600)) == h.QUEUE_PEAK
    assert _value_at(hist.service.queue_depth, _at(prom, 3000)) == 2 + 1 + 1 + 0


def test_kv_usage_is_the_fullest_engine(prom, hist):
    usage = hist.service.kv_cache_usage_ratio
    assert max(v for _, v in usage) == pytest.approx(h.KV_USAGE_PEAK)
    assert _value_at(usage, _at(prom, 3000)) == pytest.approx(0.8)  # pod B leads early


def test_preemption_rate_is_the_counter_slope(prom, hist):
    rates = hist.service.preemptions_per_s
    # a counter growing linearly: rate() is its slope exactly, whatever its extrapolation
    assert _value_at(rates, prom.end) == pytest.approx(h.PREEMPTIONS_PER_S, rel=1e-6)
    assert _value_at(rates, _at(prom, 3000)) == 0


def test_ttft_p99_moves_from_under_a_second_into_the_2_5_to_5_s_bucket(prom, hist):
    ttft = hist.service.ttft_p99_s
    assert 0.5 < _value_at(ttft, _at(prom, 3000)) <= 0.75
    assert 2.5 < _value_at(ttft, prom.end) <= 5.0


def test_long_request_share_shifts_from_8_to_37_percent(hist):
    prof = hist.service.requests
    assert prof is not None and prof.estimated
    # every bucket series has the same samples, so increase()'s extrapolation scales all buckets
    # by one factor and the shares come out exact; the short (<=200) and long (5000-10000)
    # requests sit in buckets that straddle no runbook limit. The margin is float noise only.
    assert prof.shift.long_share_before == pytest.approx(h.LONG_SHARE_EARLY, abs=1e-3)
    assert prof.shift.long_share_after == pytest.approx(h.LONG_SHARE_LATE, abs=1e-3)
    assert prof.share("L", "XL") == pytest.approx(h.LONG_SHARE_LATE, abs=1e-3)
    assert (prof.shift.before_label, prof.shift.after_label) == ("first part", "last part")


def test_engine_is_vllm_v1_by_its_usage_gauge(hist):
    assert (hist.service.engine, hist.service.flavor) == ("vllm", "vllm-v1")


@pytest.mark.parametrize(("ns", "pod", "engine", "flavor", "queue", "usage"), [
    (h.V0_NS, h.V0_POD, "vllm", "vllm-v0", h.V0_QUEUE, h.V0_USAGE),
    (h.TGI_NS, h.TGI_POD, "tgi", None, h.TGI_QUEUE, h.TGI_USAGE),
    (h.SGL_NS, h.SGL_POD, "sglang", None, h.SGL_QUEUE, h.SGL_USAGE),
])
def test_v0_tgi_and_sglang_series_give_queue_and_usage(prom, client, ns, pod, engine, flavor, queue, usage):
    got = gather_history(client, ns, [pod], now=prom.end)
    assert (got.service.engine, got.service.flavor) == (engine, flavor)
    assert {v for _, v in got.service.queue_depth} == {queue}
    assert {round(v, 6) for _, v in got.service.kv_cache_usage_ratio} == {usage}
    # none of them has DCGM series here: said as missing, not as an empty chart
    assert got.memory is None
    assert [i.kind for i in got.issues] == ["missing"]


# ------------------------------------------------------------ queries and errors


def test_the_number_of_queries_does_not_depend_on_the_number_of_pods(prom):
    one, eight = PrometheusClient(prom.url), PrometheusClient(prom.url)
    gather_history(one, h.NS, [h.POD_A], now=prom.end)
    gather_history(eight, h.NS, [*h.PODS, *(f"vllm-server-7d9f8-x{i}" for i in range(5))], now=prom.end)
    assert one.queries_sent == eight.queries_sent == len(QUERY_KEYS)


def test_fewer_pods_give_fewer_devices_from_the_same_queries(prom, client):
    got = gather_history(client, h.NS, [h.POD_B], now=prom.end)
    assert [s.label for s in got.memory.series] == [h.DEVICE_B]


def test_bad_promql_is_a_bad_query_error(prom, client):
    with pytest.raises(PrometheusError) as err:
        client.query("sum by (pod (up)", at=prom.end)
    assert err.value.kind == "bad_query"
    assert "parse error" in words.message(err.value)


def test_a_rejected_query_leaves_an_issue_and_the_others_still_count(prom, client, monkeypatch):
    monkeypatch.setattr(history_module.q, "ttft_p99_query", lambda sel, rate_s: "histogram_quantile(0.99,")
    got = gather_history(client, h.NS, h.PODS, now=prom.end)
    assert [(i.source, i.kind) for i in got.issues] == [("prometheus", "unreadable")]
    assert words.message(got.issues[0]).startswith("ttft_p99: query refused: bad_data")
    assert got.service.ttft_p99_s == ()
    assert max(v for _, v in got.service.queue_depth) == h.QUEUE_PEAK
    assert len(got.memory.series) == 3


def test_pods_without_any_series_are_said_missing_not_read_as_zero(prom, client):
    got = gather_history(client, h.NS, ["no-such-pod-0"], now=prom.end)
    assert got.memory is None and got.service is None and got.restarts_at == ()
    assert [(i.kind, words.message(i).split(":")[0]) for i in got.issues] == [("missing", "memory"), ("missing", "queue")]


def test_a_server_that_is_down_gives_one_unreachable_issue(prom):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        got = gather_history(PrometheusClient(f"http://127.0.0.1:{port}", timeout_s=2), h.NS, h.PODS, now=prom.end)
    assert [(i.source, i.kind) for i in got.issues] == [("prometheus", "unreachable")]
    assert got.memory is None and got.service is None and got.evidence_fields() == {}


def test_history_becomes_evidence_that_round_trips_through_json(hist):
    ev = Evidence(target="llm/vllm-server", **hist.evidence_fields())
    assert ev.memory_history is hist.memory and ev.requests is hist.service.requests
    back = from_jsonable(Evidence, to_jsonable(ev))
    assert back == ev
