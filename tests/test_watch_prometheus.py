"""The watch with Prometheus: each look reads the target's KV cache usage, queue and recent
preemptions from a real Prometheus (promtool-loaded history), and the result tells "held" from
"rolled out, but the symptoms remain". The Kubernetes side is the stand-in's simulated rollout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.writer import KubeWriter
from bot.config.settings import ClusterSettings, PrometheusSettings, Settings
from bot.render import remediation as render
from bot.render import slack_remediation as P
from bot.render.i18n import Catalog
from bot.service import remediate
from bot.service.watch_metrics import symptoms_reader
from bot.store.db import Store
from runbooks.model.phrases import Phrase
from runbooks.remediation.policy import ApprovalPolicy
from tests.support import prom_harness as h
from tests.support.kube_fixtures import manual_clock, running_scenario

NS, NAME = h.NS, "vllm-server"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _watch(cluster, tmp_path, settings: Settings, start: datetime, window_s: float = 600):
    """Apply a flag change and watch it for `window_s`, Prometheus read at `start` + the watch's time."""
    clock = manual_clock(cluster, ready_after_s=30.0)
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, flags=(("max-num-seqs", 64),), requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    symptoms = symptoms_reader(settings, None, NS, NAME, now=lambda: start + timedelta(seconds=clock()))
    assert symptoms is not None
    looks = []
    final, seen = remediate.watch_after(store, writer, stored.plan.id, window_s, poll_s=60, clock=clock,
                                        sleep=clock.advance, on_look=looks.append, symptoms=symptoms)
    return store, final, seen, looks


def test_rolled_out_with_kv_usage_high_and_preemptions_rising_is_symptoms_remain(prom, cluster, tmp_path):
    settings = Settings(prometheus=PrometheusSettings(prom.url))
    # the window ends with the history: pod A's engine at 97% KV cache, 0.1 preemptions/s
    store, final, seen, looks = _watch(cluster, tmp_path, settings, prom.end - timedelta(seconds=600))
    assert seen.outcome == "symptoms_remain" and final.state == "watched"
    assert seen.restarts == 0 and seen.oom_lines == 0 and seen.pressure_lines == 0
    s = seen.symptoms
    assert s.error is None and s.kv_usage == pytest.approx(h.KV_USAGE_PEAK)
    assert s.queue == 4  # 2 + 1 (pod A's engines) + 1 (pod B); the canary and the decoys do not match
    assert s.preemptions == pytest.approx(h.PREEMPTIONS_PER_S * 120, rel=0.15)
    assert seen.notes[0] == Phrase("watch.kv_usage_high", {"usage": "97%", "high": "90%"})
    assert seen.notes[1] == Phrase("watch.preemptions", {"count": round(s.preemptions), "minutes": 2})
    assert Catalog.load("en").phrase(seen.notes[0]) == "KV cache usage 97% (at or above 90%)"
    assert Catalog.load("en").phrase(seen.notes[1]).endswith("preemptions in the last 2 min")
    assert all(look.symptoms is not None for look in looks) and looks[0].outcome == "rolling_out"
    watched = next(e for e in store.plan_audit(final.plan.id) if e.to_state == "watched")
    assert watched.detail["outcome"] == "symptoms_remain"
    assert watched.detail["prometheus"]["kv_usage"] == pytest.approx(h.KV_USAGE_PEAK)
    text = render.look_text(seen, "en")
    assert "watch: rolled out, but the symptoms remain" in text
    assert f"Prometheus: KV cache usage 97%, queue 4, {s.preemptions:.0f} preemptions in the last 2 min" in text
    assert render.look_json(seen)["prometheus"]["queue"] == 4
    assert render.look_json(seen)["prometheus"]["eviction"] == s.eviction == "preemption"
    msg = P.plan_message(final, "en", "symptoms_remain", notes=seen.notes, replicas=seen.replicas, symptoms=s)
    contexts = [e["text"] for b in msg["blocks"] if b["type"] == "context" for e in b["elements"]]
    assert any(c.startswith("Prometheus at the last look: KV cache usage 97%, queue 4") for c in contexts)


def test_rolled_out_with_kv_usage_below_90_and_no_preemptions_is_held(prom, cluster, tmp_path):
    # the plan's cluster has the Prometheus (the top level has none)
    settings = Settings(clusters=(ClusterSettings("prod", prometheus=PrometheusSettings(prom.url)),),
                        default_context="prod")
    # 30 to 20 minutes before the end of the history: usage at most 80% (pod B), no preemptions
    _, final, seen, _ = _watch(cluster, tmp_path, settings, prom.end - timedelta(seconds=1800))
    assert seen.outcome == "held" and final.state == "watched" and seen.notes == ()
    s = seen.symptoms
    assert s.kv_usage == pytest.approx(0.8) and s.queue == 4 and s.preemptions == 0
    assert "Prometheus: KV cache usage 80%, queue 4, 0 preemptions in the last 2 min" in render.look_text(seen, "en")


def test_a_prometheus_that_does_not_answer_leaves_the_watch_to_kubernetes_and_says_so(cluster, tmp_path):
    settings = Settings(prometheus=PrometheusSettings(f"http://127.0.0.1:{h.free_port()}", timeout_s=1.0))
    _, final, seen, _ = _watch(cluster, tmp_path, settings, datetime.now(UTC), window_s=120)
    assert seen.outcome == "held" and final.state == "watched"
    assert seen.symptoms.error and seen.notes[0] == Phrase("watch.prometheus_unread", {"error": seen.symptoms.error})
    assert Catalog.load("en").phrase(seen.notes[0]).startswith("Prometheus not read: http://127.0.0.1:")
    assert Catalog.load("en").phrase(seen.notes[0]).endswith("/api/v1/query: cannot connect")
    assert Catalog.load("zh").phrase(seen.notes[0]).endswith("/api/v1/query：无法建立连接”）")
    assert render.look_text(seen, "en").splitlines()[-1].startswith("  Prometheus: not read (")


def test_no_prometheus_configured_means_no_reading():
    assert symptoms_reader(Settings(), None, NS, NAME) is None


def test_an_sglang_targets_reading_counts_retractions_and_a_tgi_targets_says_it_never_evicts(prom):
    from bot.actuator.watch import symptom_notes
    from bot.service.watch_metrics import target_symptoms
    from collectors.prometheus.client import PrometheusClient

    client = PrometheusClient(prom.url, timeout_s=10)
    sgl = target_symptoms(client, h.SGL_NS, "sgl", prom.end)
    # SGLang's retraction counter rises one per 15 s step: 8 over the 2-minute window
    assert sgl.eviction == "retraction" and sgl.preemptions == pytest.approx(8 * h.SGL_RETRACTIONS_PER_STEP, rel=0.15)
    assert symptom_notes(sgl) == (
        Phrase("watch.retractions", {"count": round(sgl.preemptions), "minutes": 2}),)
    line = render.symptoms_values(Catalog.load("en"), sgl)["evictions"]
    assert line == f"{round(sgl.preemptions)} retractions"
    assert render.symptoms_values(Catalog.load("zh"), sgl)["evictions"] == f"撤回 {round(sgl.preemptions)} 次"
    tgi = target_symptoms(client, h.TGI_NS, "tgi", prom.end)
    assert (tgi.eviction, tgi.preemptions) == ("none", 0) and symptom_notes(tgi) == ()
    assert render.symptoms_values(Catalog.load("en"), tgi)["evictions"] == "no preemption (the engine queues requests instead)"
