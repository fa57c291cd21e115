"""Alertmanager's webhook, end to end over HTTP: POST /alertmanager on `gpumem serve`'s HTTP face,
FakeSlack for Slack, the example bundles (and the stand-in API server for pods) for evidence.

Firing alerts start triages under the alert's summary; a resolved alert edits that message;
repeats are duplicates; a target is triaged once per interval (later alerts reply in its
thread); storms are acknowledged at once and start no more triages than allowed; every alert
is recorded and shows in the handover."""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import requests

from bot.render.handover import handover_json, handover_text
from bot.service.handover import build_handover
from bot.store.alerts import AlertLog
from bot.store.notes import Journal
from tests.support.alertmanager import STARTS, TOKEN, alert, notification, serving
from tests.support.fake_slack import block_errors
from tests.support.kube_fixtures import INCIDENT_POD_B, INCIDENT_REPLICASET, running_scenario
from tests.support.slack_kit import CHANNEL, ZH_CHANNEL, ExampleRunner, is_diagnosis


@contextmanager
def _released(gate: threading.Event):
    """Open the runner's gate on the way out, whatever happened (a held triage would stall the drain)."""
    try:
        yield
    finally:
        gate.set()


def _eventually(fn, timeout: float = 30.0):
    deadline = time.monotonic() + timeout
    while not (value := fn()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


def _outcomes(records) -> dict[str, int]:
    out: dict[str, int] = {}
    for r in records:
        out[r.outcome] = out.get(r.outcome, 0) + 1
    return out


# ----------------------------------------------------------------------------- firing, resolved


def test_a_firing_alert_starts_a_triage_under_its_summary_and_resolving_edits_it(tmp_path):
    with serving(tmp_path, runner=ExampleRunner(charts=True)) as s:
        with s.desk_held():  # answered before any of the work it starts: nothing recorded yet
            r = s.post(notification([alert(severity="critical")]))
            assert r.status_code == 200 and r.json() == {"status": "accepted", "alerts": 1}
            assert s.records() == [] and s.parents() == []
        final = s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)[0]
        s.settle()
        parent = s.parents(CHANNEL)[0]
        # the parent starts with the alert's head, then the triage as a typed command shows it
        first = parent.args["blocks"][0]["text"]["text"]
        assert first.startswith(":rotating_light: *Alert GpumemKVCacheHigh (critical) firing since 2026-03-09 20:50Z*")
        assert "> KV cache of llm/vllm-server above 90% for 10 minutes" in first
        assert "gpumem triage · llm/vllm-server" in parent.args["text"]
        assert final.args["ts"] == parent.response["ts"]
        assert final.args["text"].startswith("Alert GpumemKVCacheHigh (critical) firing since 2026-03-09 20:50Z · ")
        assert "llm/vllm-server" in final.args["text"]
        assert final.args["blocks"][0] == parent.args["blocks"][0]
        assert any(b["type"] == "actions" for b in final.args["blocks"])  # the diagnosis's "Run again"
        assert block_errors(final.args["blocks"]) == []
        # the diagnosis's detail in the thread, as for /gpumem triage
        s.fake.wait_for("chat.postMessage", where=lambda c: c.args.get("thread_ts") == parent.response["ts"])
        # ... and its charts, uploaded into the same thread
        uploads = s.fake.wait_for("files.completeUploadExternal", timeout=60)
        names = [f["name"] for u in uploads for f in u.response["files"]]
        assert any(n.endswith(".png") for n in names), names
        assert {u.args.get("thread_ts") for u in uploads} == {parent.response["ts"]}
        records = s.records()
        assert [(r.outcome, r.target, r.cluster, r.channel, r.thread_ts, r.alertname, r.severity)
                for r in records] == [("triaged", "llm/vllm-server", "prod", CHANNEL, parent.response["ts"],
                                       "GpumemKVCacheHigh", "critical")]

        def triages():
            with s.bot.store.use() as store:
                return Journal(store).triages()

        assert _eventually(triages)
        assert [(t.actor, t.namespace, t.name, t.channel) for t in triages()] == [
            ("alertmanager", "llm", "vllm-server", CHANNEL)]
        assert [r.outcome for r in s.records()] == ["triaged"]

        updates_before = len(s.fake.calls_to("chat.update"))
        r = s.post(notification([alert(status="resolved", severity="critical")]))
        assert r.status_code == 200
        s.settle()
        edits = s.fake.calls_to("chat.update")[updates_before:]
        assert len(edits) == 1
        edit = edits[0]
        assert edit.args["ts"] == parent.response["ts"]
        assert edit.args["text"].startswith("Resolved at 2026-03-09 21:20Z: GpumemKVCacheHigh · ")
        assert edit.args["blocks"][0]["text"]["text"].startswith(":white_check_mark: *Resolved at 2026-03-09 21:20Z")
        assert edit.args["blocks"][2:] == final.args["blocks"][2:]  # the diagnosis stays under it
        assert [r.outcome for r in s.records()] == ["triaged", "resolved"]
        assert s.records()[1].thread_ts == parent.response["ts"]


def test_a_route_sends_the_alert_to_its_channel_in_its_language(tmp_path):
    with serving(tmp_path) as s:
        assert s.post(notification([alert(namespace="search", deployment="qwen-14b")])).status_code == 200
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        assert s.parents(CHANNEL) == []
        parent = s.parents(ZH_CHANNEL)[0]
        assert parent.args["text"].startswith("告警 GpumemKVCacheHigh（warning）自 2026-03-09 20:50Z 起触发")
        s.post(notification([alert(status="resolved", namespace="search", deployment="qwen-14b")]))
        s.settle()
        assert s.fake.calls_to("chat.update")[-1].args["text"].startswith("已于 2026-03-09 21:20Z 恢复：GpumemKVCacheHigh")
        # severity=page routes to the same channel even for another namespace (the second route)
        s.post(notification([alert(name="GpumemOOMKilled", severity="page", deployment="qwen-7b-sglang")]))
        s.settle()
        assert [p.args["channel"] for p in s.parents()] == [ZH_CHANNEL, ZH_CHANNEL]


def test_a_grouped_notification_starts_one_triage_per_target(tmp_path):
    alerts = [alert(name="GpumemKVCacheHigh"), alert(name="GpumemQueueDeep", summary="queue above 12"),
              alert(name="GpumemKVCacheHigh", namespace="search", deployment="qwen-14b")]
    with serving(tmp_path) as s:
        r = s.post(notification(alerts, group="gpumem"))
        assert r.json() == {"status": "accepted", "alerts": 3}
        s.fake.wait_for("chat.update", 2, where=is_diagnosis, timeout=60)
        s.settle()
        assert s.runner.started._value == 2
        en, zh = s.parents(CHANNEL), s.parents(ZH_CHANNEL)
        assert len(en) == 1 and len(zh) == 1
        assert en[0].args["text"].startswith("2 alerts firing for llm/vllm-server, first GpumemKVCacheHigh (warning)")
        records = s.records()
        assert sorted((r.alertname, r.target, r.outcome) for r in records) == [
            ("GpumemKVCacheHigh", "llm/vllm-server", "triaged"), ("GpumemKVCacheHigh", "search/qwen-14b", "triaged"),
            ("GpumemQueueDeep", "llm/vllm-server", "joined")]
        assert {r.group_key for r in records} == {'{}/{gpumem="triage"}:{alertname="gpumem"}'}
        # the vLLM triage resolves only when both of its alerts have
        s.post(notification([alerts[0] | {"status": "resolved", "endsAt": "2026-03-09T21:20:00Z"}]))
        s.settle()
        assert not any(c.args["text"].startswith("Resolved") for c in s.fake.calls_to("chat.update"))
        s.post(notification([alerts[1] | {"status": "resolved", "endsAt": "2026-03-09T21:25:00Z"}]))
        s.settle()
        last = s.fake.calls_to("chat.update")[-1]
        assert last.args["ts"] == en[0].response["ts"]
        assert last.args["text"].startswith("Resolved at 2026-03-09 21:25Z: all 2 alerts for llm/vllm-server")


def test_alerts_without_the_labels_are_recorded_not_triaged(tmp_path):
    watchdog = alert(name="Watchdog", labels={"alertname": "Watchdog", "severity": "none"})
    no_workload = alert(name="GpumemGPUMemoryHigh", deployment=None)
    bad_name = alert(deployment="Not_A_Name")
    with serving(tmp_path) as s:
        assert s.post(notification([watchdog, no_workload, bad_name], group="misc")).status_code == 200
        s.settle()
        assert s.fake.calls_to("chat.postMessage") == []
        assert s.runner.started._value == 0
        records = {r.alertname + "/" + r.outcome: r for r in s.records()}
        assert set(records) == {"Watchdog/no_target", "GpumemGPUMemoryHigh/no_target", "GpumemKVCacheHigh/bad_target"}
        assert records["Watchdog/no_target"].detail == "no namespace label"
        assert records["GpumemGPUMemoryHigh/no_target"].detail == "no deployment or pod label"
        assert records["GpumemKVCacheHigh/bad_target"].detail.startswith("not a Kubernetes name: llm/Not_A_Name")


def test_the_label_names_are_configurable(tmp_path):
    extra = "  labels: {namespace: exported_namespace, deployment: workload}\n"
    custom = alert(labels={"alertname": "Custom", "exported_namespace": "llm", "workload": "vllm-server",
                           "severity": "warning"})
    with serving(tmp_path, extra=extra) as s:
        s.post(notification([custom, alert(name="Ignored")]))
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        assert sorted((r.alertname, r.outcome) for r in s.records()) == [("Custom", "triaged"),
                                                                          ("Ignored", "no_target")]


def test_a_pod_label_is_resolved_to_its_deployment_through_owner_references(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        with serving(tmp_path, kubeconfig=sc.kubeconfig) as s:
            s.post(notification([alert(deployment=None, pod=INCIDENT_POD_B, extra={"cluster": "prod"}),
                                 alert(name="GpumemOOMKilled", deployment=None, pod="vllm-server-gone-abcde")]))
            s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
            s.settle()
            records = {r.alertname: r for r in s.records()}
        paths = [c.path for c in sc.kube.calls()]
    kv = records["GpumemKVCacheHigh"]
    assert (kv.outcome, kv.target, kv.pod, kv.cluster) == ("triaged", "llm/vllm-server", INCIDENT_POD_B, "prod")
    assert f"/api/v1/namespaces/llm/pods/{INCIDENT_POD_B}" in paths
    assert f"/apis/apps/v1/namespaces/llm/replicasets/{INCIDENT_REPLICASET}" in paths
    gone = records["GpumemOOMKilled"]
    assert gone.outcome == "pod_unresolved" and "vllm-server-gone-abcde" in gone.detail
    assert "not found" in gone.detail


def test_an_unknown_cluster_or_a_namespace_the_channel_may_not_see_is_refused(tmp_path):
    with serving(tmp_path) as s:
        s.post(notification([alert(extra={"cluster": "prod-z"}),
                             alert(name="Other", namespace="inference", deployment="llama-8b-chat", severity="page")]))
        s.settle()
        assert s.fake.calls_to("chat.postMessage") == []
        records = {r.alertname: r for r in s.records()}
        assert records["GpumemKVCacheHigh"].outcome == "unknown_cluster"
        assert records["GpumemKVCacheHigh"].detail == "cluster='prod-z' is not a configured cluster"
        assert records["Other"].outcome == "namespace_not_allowed"
        assert records["Other"].channel == ZH_CHANNEL


# ----------------------------------------------------------------------------- authentication, bad bodies


def test_anything_but_the_token_is_401_and_the_token_is_never_logged(tmp_path, caplog):
    caplog.set_level(logging.DEBUG)
    body = notification([alert()])
    with serving(tmp_path) as s:
        def basic(user: str, password: str) -> dict[str, str]:
            return {"Authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}

        refused = [s.post(body, token=None), s.post(body, token="wrong"), s.post(body, token=TOKEN + "x"),
                   s.post(body, token=TOKEN[:-1]), s.post(body, token=None, headers=basic("alertmanager", "nope")),
                   s.post(body, token=None, headers={"Authorization": f"Token {TOKEN}"}),
                   s.post(body, token=None, headers={"Authorization": "Basic %%%"}),
                   s.post(body, token=None, headers=basic(TOKEN, ""))]
        assert [r.status_code for r in refused] == [401] * len(refused)
        assert all(r.json() == {"error": "unauthorized"} for r in refused)
        assert refused[0].headers["WWW-Authenticate"] == 'Bearer realm="gpumem"'
        s.settle()
        assert s.records() == [] and s.fake.calls_to("chat.postMessage") == []
        ok = s.post(body, token=None, headers=basic("alertmanager", TOKEN))
        assert ok.status_code == 200
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        metrics = requests.get(s.url + "/metrics", timeout=5).text
        assert 'gpumem_http_refused_total{reason="webhook_unauthorized"} 8.0' in metrics
        assert 'gpumem_alerts_total{outcome="triaged",status="firing"} 1.0' in metrics \
            or 'gpumem_alerts_total{status="firing",outcome="triaged"} 1.0' in metrics
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "refused POST /alertmanager: webhook_unauthorized" in logged
    assert TOKEN not in logged and TOKEN[:12] not in logged


@pytest.mark.parametrize(("raw", "field", "problem"), [
    (b"", "body", "empty: expected Alertmanager's JSON notification"),
    (b"{not json", "body", None),
    (b"[1, 2]", "body", "expected a JSON object"),
    (b'{"version": "3", "alerts": []}', "version", "expected \"4\" (Alertmanager's webhook payload version), got '3'"),
    (b'{"version": "4", "status": "firing", "alerts": []}', "groupKey", "missing"),
    (b'{"version": "4", "groupKey": "g", "status": "burning", "alerts": []}', "status",
     "expected firing or resolved, got 'burning'"),
    (b'{"version": "4", "groupKey": "g", "status": "firing", "alerts": {}}', "alerts", "expected a list"),
    (b'{"version": "4", "groupKey": "g", "status": "firing", "alerts": [{"status": "firing", '
     b'"startsAt": "2026-03-09T21:00:00Z"}]}', "alerts[0].labels", "missing"),
    (b'{"version": "4", "groupKey": "g", "status": "firing", "alerts": [{"status": "firing", '
     b'"labels": {"namespace": 7}, "startsAt": "2026-03-09T21:00:00Z"}]}', "alerts[0].labels.namespace",
     "expected a string, got 7"),
    (b'{"version": "4", "groupKey": "g", "status": "firing", "alerts": [{"status": "firing", '
     b'"labels": {}, "startsAt": "yesterday"}]}', "alerts[0].startsAt", None),
    (b"\xff\xfe", "body", "not UTF-8 text"),
])
def test_a_malformed_body_is_400_naming_the_field(tmp_path, raw, field, problem):
    with serving(tmp_path) as s:
        r = s.post(None, raw=raw)
        assert r.status_code == 400
        doc = r.json()
        assert doc["error"] == "not an Alertmanager webhook notification (payload version 4)"
        assert doc["field"] == field
        if problem is not None:
            assert doc["problem"] == problem
        assert s.bot.alerts.wait_idle(5) and s.records() == []


def test_only_post_and_a_body_within_the_limit(tmp_path):
    with serving(tmp_path) as s:
        r = requests.get(s.url + "/alertmanager", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=5)
        assert r.status_code == 405 and r.headers["Allow"] == "POST"
        big = json.dumps(notification([alert(summary="x" * 2_000_000)])).encode()
        assert s.post(None, raw=big).status_code == 413


def test_without_a_token_the_endpoint_is_refused_and_the_start_says_so(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    with serving(tmp_path, token=None) as s:
        r = s.post(notification([alert()]), token="anything-at-all-here")
        assert r.status_code == 403
        assert r.json()["error"] == "the Alertmanager webhook is off: GPUMEM_WEBHOOK_TOKEN (or _FILE) is not set"
        assert s.bot.alerts is None
        time.sleep(0.2)
        assert s.fake.calls_to("chat.postMessage") == []
    assert any("Alertmanager webhook refused (fail closed): neither GPUMEM_WEBHOOK_TOKEN nor "
               "GPUMEM_WEBHOOK_TOKEN_FILE is set" in r.getMessage() for r in caplog.records)


def test_socket_mode_serves_the_webhook_beside_health(tmp_path):
    with serving(tmp_path, events=False) as s:
        assert requests.post(s.url + "/slack/events", data=b"{}", timeout=5).status_code == 404
        assert s.post(notification([alert()])).status_code == 200
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)


# ----------------------------------------------------------------------------- dedupe, interval


def test_a_repeated_notification_is_deduplicated(tmp_path):
    body = notification([alert(), alert(name="GpumemQueueDeep")])
    with serving(tmp_path) as s:
        for _ in range(3):  # Alertmanager's repeat_interval sends the same group again
            assert s.post(body).status_code == 200
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        assert s.runner.started._value == 1
        assert len(s.parents()) == 1
        parent_ts = s.parents()[0].response["ts"]
        assert not any("more alert" in c.args["text"] for c in s.fake.thread(CHANNEL, parent_ts))
        assert _outcomes(s.records()) == {"triaged": 1, "joined": 1, "duplicate": 4}
        # a new firing of the same alert (a new startsAt) is not a duplicate: it joins the thread
        s.post(notification([alert(starts="2026-03-09T22:00:00Z")]))
        s.settle()
        assert _outcomes(s.records())["joined"] == 2
        replies = [c for c in s.fake.thread(CHANNEL, parent_ts) if "more alert" in c.args["text"]]
        assert [c.args["text"].split(";")[0] for c in replies] == ["1 more alert for llm/vllm-server"]


def test_a_target_is_triaged_once_per_interval_and_later_alerts_reply_in_its_thread(tmp_path):
    with serving(tmp_path, interval=1.5) as s:
        s.post(notification([alert()]))
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        parent_ts = s.parents()[0].response["ts"]
        s.post(notification([alert(name="GpumemQueueDeep", summary="queue above 12 for 10 minutes"),
                             alert(name="GpumemPreemptionsRising", summary="preemptions rising")], group="g2"))
        s.settle()
        assert s.runner.started._value == 1
        replies = [c for c in s.fake.thread(CHANNEL, parent_ts) if c.args["text"].startswith("2 more alerts")]
        assert len(replies) == 1
        reply = replies[0].args
        assert reply["text"].startswith("2 more alerts for llm/vllm-server; it was triaged at ")
        listed = json.dumps(reply["blocks"])
        assert "GpumemQueueDeep" in listed and "preemptions rising" in listed
        assert _outcomes(s.records()) == {"triaged": 1, "joined": 2}
        time.sleep(1.6)  # past the interval: the target is triaged again, in a new thread
        s.post(notification([alert(name="GpumemOOMKilled", severity="critical")], group="g3"))
        s.fake.wait_for("chat.update", 2, where=is_diagnosis, timeout=60)
        s.settle()
        assert s.runner.started._value == 2
        assert len(s.parents()) == 2


def test_the_interval_survives_a_restart_through_the_store(tmp_path):
    with serving(tmp_path) as s:
        s.post(notification([alert()]))
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        parent_ts = s.parents()[0].response["ts"]
    with serving(tmp_path) as s:  # same store file, a fresh process state
        s.post(notification([alert(name="GpumemQueueDeep")]))
        s.settle()
        assert s.runner.started._value == 0
        replies = s.fake.calls_to("chat.postMessage")
        assert [(c.args["channel"], c.args.get("thread_ts")) for c in replies] == [(CHANNEL, parent_ts)]
        # its resolution cannot edit the old process's message: it replies in the thread
        s.post(notification([alert(name="GpumemQueueDeep", status="resolved")]))
        s.settle()
        last = s.fake.calls_to("chat.postMessage")[-1]
        assert last.args.get("thread_ts") == parent_ts
        assert last.args["text"] == "Resolved at 2026-03-09 21:20Z: ? (llm/vllm-server)"


# ----------------------------------------------------------------------------- storms


def test_500_alerts_in_one_request_are_acked_at_once_and_start_only_the_allowed_triages(tmp_path):
    gate = threading.Event()
    runner = ExampleRunner(charts=False, gate=gate)
    names = ["vllm-server", "qwen-7b-sglang"] + [f"svc-{i:02d}" for i in range(48)]
    alerts = [alert(name=f"GpumemAlert{i % 10}", deployment=names[i // 10], starts=STARTS) for i in range(500)]
    body = notification(alerts, group="storm")
    with serving(tmp_path, runner=runner, max_triages=2, pool=4, queue=16) as s, _released(gate):
        with s.desk_held():  # acknowledged without waiting for any of the 500 to be handled
            r = s.post(body)
            assert r.status_code == 200 and r.json() == {"status": "accepted", "alerts": 500}
            assert s.records() == [] and s.parents() == []
        s.settle()
        assert s.bot.alerts.slots_taken == 2
        parents = s.parents(CHANNEL)
        triage_parents = [p for p in parents if p.args["text"].startswith("10 alerts firing for")]
        busy = [p for p in parents if "not triaged now" in p.args["text"]]
        assert len(triage_parents) == 2 and len(busy) == 1 and len(parents) == 3
        assert busy[0].args["text"].startswith("480 alerts not triaged now: gpumem's alert triages are all taken "
                                               "(2 at once). Targets: llm/svc-00, llm/svc-01")
        assert _outcomes(s.records()) == {"triaged": 2, "joined": 18, "busy": 480}
        assert len(s.records()) == 500
        gate.set()
        s.fake.wait_for("chat.update", 2, where=is_diagnosis, timeout=60)
        assert runner.started._value == 2
        assert len(s.parents()) == 3  # nothing else was posted as a new message


def test_50_requests_in_a_second_are_acked_and_start_no_more_triages_than_allowed(tmp_path):
    gate = threading.Event()
    runner = ExampleRunner(charts=False, gate=gate)
    bodies = [notification([alert(name=f"A{i}", deployment=f"svc-{i % 10}")], group=f"g{i}") for i in range(50)]
    with serving(tmp_path, runner=runner, max_triages=3, pool=4, queue=16) as s, _released(gate):
        with s.desk_held(), ThreadPoolExecutor(50) as ex:  # all answered while none is handled
            codes = list(ex.map(lambda body: s.post(body).status_code, bodies))
            assert codes == [200] * 50 and s.records() == [] and s.parents() == []
        s.settle()
        assert s.bot.alerts.slots_taken == 3
        triage_parents = [p for p in s.parents() if p.args["text"].startswith("Alert A")]
        notes = [p for p in s.parents() if "not triaged now" in p.args["text"]]
        assert len(triage_parents) == 3 and len(notes) == 1
        outcomes = _outcomes(s.records())
        assert outcomes["triaged"] == 3 and sum(outcomes.values()) == 50
        assert outcomes["busy"] == 35  # 7 targets of 5 alerts each found no free triage
        assert outcomes["joined"] == 12  # the 3 triaged targets' other 4 alerts, in their threads
        gate.set()
        # the stand-in services have no evidence: each triage ends as a typed /gpumem triage of them would
        ended = s.fake.wait_for("chat.update", 3, timeout=60,
                                where=lambda c: "no evidence source knows llm/svc-" in c.args["text"])
        assert all(c.args["text"].startswith("Alert A") for c in ended)
        assert runner.started._value == 3


def test_a_full_queue_answers_503_so_alertmanager_retries(tmp_path):
    with serving(tmp_path, extra="  queue_length: 1\n") as s:
        desk = s.bot.alerts
        hold, working = threading.Event(), threading.Event()
        original = desk.handle

        def slow(n):
            working.set()
            hold.wait(10)
            original(n)

        desk.handle = slow
        # the first is being worked on (not queued) before the others come: one fills the queue
        codes = [s.post(notification([alert(name="Q0")], group="q0")).status_code]
        assert working.wait(10)
        codes += [s.post(notification([alert(name=f"Q{i}")], group=f"q{i}")).status_code for i in (1, 2)]
        assert codes == [200, 200, 503]
        r = s.post(notification([alert(name="Q9")], group="q9"))
        assert r.status_code == 503 and r.headers["Retry-After"] == "5"
        hold.set()
        s.settle()
        assert len(s.records()) == codes.count(200)


# ----------------------------------------------------------------------------- the store and the handover


def test_every_alert_is_recorded_and_shows_in_the_handover(tmp_path):
    with serving(tmp_path) as s:
        s.post(notification([alert(), alert(name="GpumemQueueDeep"), alert(name="Watchdog", namespace=None)]))
        s.post(notification([alert()]))  # a repeat
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        with s.bot.store.use() as store:
            log = AlertLog(store)
            assert len(log.alerts()) == 4
            ho = build_handover(store, channel=CHANNEL, since=timedelta(hours=1), now=datetime.now(UTC))
        items = {(a.alertname, a.target): a for a in ho.alerts}
        kv = items[("GpumemKVCacheHigh", "llm/vllm-server")]
        assert (kv.count, kv.firing, kv.resolved, kv.outcomes) == (2, 2, 0, (("duplicate", 1), ("triaged", 1)))
        assert kv.thread_ts == s.parents()[0].response["ts"] and kv.channel == CHANNEL
        assert items[("Watchdog", None)].outcomes == (("no_target", 1),)
        assert ("alert", {"target": "llm/vllm-server", "alertname": "GpumemKVCacheHigh", "count": 2}) in ho.watch_items
        text = handover_text(ho, "en")
        assert "Alerts received (3):" in text
        assert "GpumemKVCacheHigh  llm/vllm-server  warning  x2  firing 2, resolved 0  (1 seen before, 1 triaged)" in text
        assert "收到的告警（3）：" in handover_text(ho, "zh")
        doc = handover_json(ho)
        assert "llm/vllm-server: alert GpumemKVCacheHigh fired 2 times and has not resolved" in doc["watch_next"]
        assert next(a for a in doc["alerts"] if a["alertname"] == "Watchdog")["outcomes"] == "no_target 1"
        assert {a["alertname"] for a in doc["alerts"]} == {"GpumemKVCacheHigh", "GpumemQueueDeep", "Watchdog"}
        from bot.render.slack_handover import handover_parent, handover_thread

        parent = handover_parent(ho, "en")
        assert "GpumemKVCacheHigh" in json.dumps(parent["blocks"])
        thread, _ = handover_thread(ho, "en")
        assert "Alerts received (3):" in json.dumps([m["blocks"] for m in thread])
        assert block_errors(parent["blocks"]) == []


def test_a_drain_records_queued_notifications_without_triaging_them(tmp_path):
    with serving(tmp_path) as s:
        desk = s.bot.alerts
        hold = threading.Event()
        original = desk.handle
        desk.handle = lambda n: (hold.wait(10), original(n))
        s.post(notification([alert(name="First")], group="a"))
        time.sleep(0.2)
        s.post(notification([alert(name="Second"), alert(name="Third")], group="b"))
        threading.Timer(0.5, hold.set).start()
        desk.shutdown(timeout_s=5)
        assert s.post(notification([alert(name="Late")], group="c")).status_code == 503
        outcomes = {r.alertname: r.outcome for r in s.records()}
        assert outcomes["Second"] == outcomes["Third"] == "shutdown"
        assert outcomes["First"] == "triaged"


def test_an_alert_firing_again_on_a_resolved_triage_takes_back_its_resolved_head(tmp_path):
    with serving(tmp_path, runner=ExampleRunner(charts=False)) as s:
        s.post(notification([alert(severity="critical")]))
        s.fake.wait_for("chat.update", where=is_diagnosis, timeout=60)
        s.settle()
        parent_ts = s.parents(CHANNEL)[0].response["ts"]
        s.post(notification([alert(status="resolved", severity="critical")]))
        s.settle()

        def head() -> str:
            edits = [c for c in s.fake.calls_to("chat.update") if c.args["ts"] == parent_ts]
            return edits[-1].args["blocks"][0]["text"]["text"]

        assert head().startswith(":white_check_mark: *Resolved at")
        # the same alert fires again within the interval: a reply in the thread, and the head
        # no longer tells the channel it is resolved
        s.post(notification([alert(severity="critical", starts="2026-03-09T21:40:00Z")]))
        s.settle()
        assert s.runner.started._value == 1  # within the interval: joined, not triaged again
        assert head().startswith(":rotating_light: *Alert GpumemKVCacheHigh (critical) firing since")
        assert any(c.args["text"].startswith("1 more alert for llm/vllm-server")
                   for c in s.fake.thread(CHANNEL, parent_ts))
        assert _outcomes(s.records()) == {"triaged": 1, "resolved": 1, "joined": 1}
