"""The Alertmanager payload parser, the alert-to-target mapping, the routes, the token check and the
`alerts:` settings, without HTTP. The parser is fuzzed: any body is a Notification or a
PayloadError naming a field, never another exception."""

from __future__ import annotations

import base64
import copy
import json
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.config.settings import SettingsError, load_settings
from bot.service.alert_payload import Alert, Notification, PayloadError, parse_notification
from bot.service.alerts import place, webhook_token_matches
from runbooks.model.errors import TargetNotFound
from tests.support.alertmanager import alert, notification

#: Alertmanager's documented example of a webhook notification (docs/configuration.md), resolved and firing
DOC_SAMPLE = b"""{
  "receiver": "webhook",
  "status": "firing",
  "alerts": [
    {
      "status": "firing",
      "labels": {"alertname": "GpumemQueueDeep", "namespace": "llm", "deployment": "vllm-server",
                 "severity": "warning", "gpumem": "triage"},
      "annotations": {"summary": "queue above 12 for 10 minutes"},
      "startsAt": "2026-03-09T20:46:51.366Z",
      "endsAt": "0001-01-01T00:00:00Z",
      "generatorURL": "http://prometheus:9090/graph?g0.expr=sum+by",
      "fingerprint": "4b1e5c4fe1b5f6a8"
    },
    {
      "status": "resolved",
      "labels": {"alertname": "GpumemQueueDeep", "namespace": "llm", "deployment": "other", "severity": "warning"},
      "annotations": {},
      "startsAt": "2026-03-09T19:46:51+08:00",
      "endsAt": "2026-03-09T20:51:51.000000001Z",
      "generatorURL": "",
      "fingerprint": "9f2d7a1c3b4e5f60"
    }
  ],
  "groupLabels": {"alertname": "GpumemQueueDeep"},
  "commonLabels": {"alertname": "GpumemQueueDeep", "severity": "warning"},
  "commonAnnotations": {},
  "externalURL": "http://alertmanager:9093",
  "version": "4",
  "groupKey": "{}:{alertname=\\"GpumemQueueDeep\\"}",
  "truncatedAlerts": 0
}"""


def _settings(tmp_path, alerts: str = "", channels: str = "C0INC: {lang: en}", env: dict | None = None,
              clusters: str = ""):
    path = tmp_path / "gpumem.yaml"
    path.write_text(f"allowed_namespaces: ['*']\n{clusters}slack:\n  channels:\n    {channels}\n{alerts}")
    return load_settings(path, env or {})


# ----------------------------------------------------------------------------- the parser


def test_the_documented_notification_parses_with_times_in_utc():
    n = parse_notification(DOC_SAMPLE)
    assert (n.group_key, n.status, n.receiver, n.truncated_alerts) == ('{}:{alertname="GpumemQueueDeep"}', "firing",
                                                                       "webhook", 0)
    first, second = n.alerts
    assert (first.status, first.name, first.fingerprint, first.summary) == (
        "firing", "GpumemQueueDeep", "4b1e5c4fe1b5f6a8", "queue above 12 for 10 minutes")
    assert first.starts_at == datetime(2026, 3, 9, 20, 46, 51, 366000, tzinfo=UTC)
    assert first.ends_at is None  # Alertmanager's zero time: still firing
    assert second.starts_at == datetime(2026, 3, 9, 11, 46, 51, tzinfo=UTC)  # +08:00 read as such
    assert second.ends_at == datetime(2026, 3, 9, 20, 51, 51, tzinfo=UTC)  # nanoseconds cut to microseconds
    assert second.summary == "GpumemQueueDeep"  # no annotations: the alert's name
    assert n.common_labels == {"alertname": "GpumemQueueDeep", "severity": "warning"}


def test_an_alert_without_a_fingerprint_gets_a_stable_one_from_its_labels():
    doc = notification([alert()])
    del doc["alerts"][0]["fingerprint"]
    a = parse_notification(json.dumps(doc)).alerts[0]
    b = parse_notification(json.dumps(doc)).alerts[0]
    assert a.fingerprint == b.fingerprint and len(a.fingerprint) == 16
    doc["alerts"][0]["labels"]["pod"] = "x"
    assert parse_notification(json.dumps(doc)).alerts[0].fingerprint != a.fingerprint


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda d: d.pop("version"), "version"),
    (lambda d: d.update(version=4), "version"),
    (lambda d: d.update(groupKey=""), "groupKey"),
    (lambda d: d.update(truncatedAlerts=-1), "truncatedAlerts"),
    (lambda d: d.update(commonLabels=[]), "commonLabels"),
    (lambda d: d["alerts"][0].update(status="pending"), "alerts[0].status"),
    (lambda d: d["alerts"][0].update(startsAt="2026-02-30T00:00:00Z"), "alerts[0].startsAt"),
    (lambda d: d["alerts"][0].update(startsAt="0001-01-01T00:00:00Z"), "alerts[0].startsAt"),
    (lambda d: d["alerts"][0].update(endsAt="2026-03-09T21:00:00+25:00"), "alerts[0].endsAt"),
    (lambda d: d["alerts"][0].update(fingerprint="../../etc"), "alerts[0].fingerprint"),
    (lambda d: d["alerts"][0]["annotations"].update(summary=None), "alerts[0].annotations.summary"),
    (lambda d: d["alerts"].append("x"), "alerts[1]"),
    (lambda d: d.update(alerts=[d["alerts"][0]] * 10_001), "alerts"),
])
def test_each_malformed_field_is_named(mutate, field):
    doc = notification([alert()])
    mutate(doc)
    with pytest.raises(PayloadError) as e:
        parse_notification(json.dumps(doc).encode())
    assert e.value.field == field
    assert str(e.value).startswith(f"{field}: ")


def test_a_deeply_nested_body_is_a_payload_error():
    with pytest.raises(PayloadError) as e:
        parse_notification(b"[" * 200_000 + b"]" * 200_000)
    assert e.value.field == "body"


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner,
                                                                                  max_size=4), max_leaves=12)


def _check(body: bytes | str) -> None:
    try:
        n = parse_notification(body)
    except PayloadError as e:
        assert e.field and e.problem and str(e) == f"{e.field}: {e.problem}"
    else:
        assert isinstance(n, Notification) and n.group_key and n.status in ("firing", "resolved")
        for a in n.alerts:
            assert isinstance(a, Alert) and a.status in ("firing", "resolved") and a.fingerprint
            assert a.starts_at.tzinfo is UTC and all(isinstance(v, str) for v in a.labels.values())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_any_bytes_parse_or_raise_a_payload_error(body):
    _check(body)


@settings(max_examples=300, deadline=None)
@given(_JSON)
def test_any_json_parses_or_raises_a_payload_error(doc):
    _check(json.dumps(doc))


_PATHS = st.sampled_from([(), ("version",), ("groupKey",), ("status",), ("alerts",), ("truncatedAlerts",),
                          ("groupLabels",), ("commonLabels",), ("alerts", 0), ("alerts", 0, "labels"),
                          ("alerts", 0, "labels", "namespace"), ("alerts", 0, "startsAt"), ("alerts", 0, "endsAt"),
                          ("alerts", 0, "status"), ("alerts", 0, "fingerprint"), ("alerts", 0, "annotations"),
                          ("alerts", 1, "annotations", "summary"), ("alerts", 1, "generatorURL")])
_TIMES = st.one_of(st.text(max_size=40), st.datetimes().map(lambda d: d.isoformat() + "Z"),
                   st.from_regex(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,12})?"
                                 r"(Z|[+-][0-9]{2}:[0-9]{2})", fullmatch=True))


@settings(max_examples=500, deadline=None)
@given(path=_PATHS, value=st.one_of(_JSON, _TIMES))
def test_a_real_notification_with_any_field_replaced_parses_or_names_the_field(path, value):
    doc = copy.deepcopy(notification([alert(), alert(status="resolved", name="B")]))
    node = doc
    for part in path[:-1]:
        node = node[part]
    if path:
        node[path[-1]] = value
    else:
        doc = value
    _check(json.dumps(doc))


# ----------------------------------------------------------------------------- the token


TOKEN = "s3cret-token-0123456789"


@pytest.mark.parametrize(("header", "ok"), [
    (f"Bearer {TOKEN}", True),
    (f"bearer  {TOKEN} ", True),
    ("Basic " + base64.b64encode(f"alertmanager:{TOKEN}".encode()).decode(), True),
    ("Basic " + base64.b64encode(f":{TOKEN}".encode()).decode(), True),
    (None, False),
    ("", False),
    (f"Bearer {TOKEN[:-1]}", False),
    (f"Bearer {TOKEN}x", False),
    (f"Bearer {TOKEN.upper()}", False),
    (TOKEN, False),
    ("Basic " + base64.b64encode(TOKEN.encode()).decode(), False),  # no user:password
    ("Basic " + base64.b64encode(f"{TOKEN}:wrong".encode()).decode(), False),
    ("Basic not-base64!", False),
    ("Basic ÿÿ", False),
    ("Bearer ✓✓✓", False),
    (f"Digest {TOKEN}", False),
])
def test_the_token_is_a_bearer_or_a_basic_password(header, ok):
    assert webhook_token_matches(header, TOKEN) is ok


def test_an_empty_token_matches_nothing():
    assert webhook_token_matches("Bearer ", "") is False


# ----------------------------------------------------------------------------- settings


def test_the_alerts_settings_read_routes_labels_and_the_token_file(tmp_path):
    secret = tmp_path / "token"
    secret.write_text(TOKEN + "\n")
    s = _settings(tmp_path, channels="C0INC: {lang: en}\n    C0PAGE: {lang: zh}", env={
        "GPUMEM_WEBHOOK_TOKEN_FILE": str(secret)}, alerts="""alerts:
  labels: {deployment: workload, cluster: k8s_cluster}
  routes:
    - {namespace: [llm, search], severity: critical, channel: C0PAGE}
    - {cluster: prod-b, channel: C0PAGE}
  default_channel: C0INC
  triage_interval_s: 900
  max_triages: 3
""")
    a = s.alerts
    assert a.token.reveal() == TOKEN and a.token.source == "GPUMEM_WEBHOOK_TOKEN_FILE"
    assert TOKEN not in repr(s)
    assert (a.labels.deployment, a.labels.cluster, a.labels.namespace) == ("workload", "k8s_cluster", "namespace")
    assert (a.triage_interval_s, a.max_triages, a.queue_length) == (900.0, 3, 256)
    assert a.channel_for("llm", None, "critical") == "C0PAGE"
    assert a.channel_for("llm", None, "warning") == "C0INC"
    assert a.channel_for("other", "prod-b", "warning") == "C0PAGE"
    assert a.channel_for(None, None, None) == "C0INC"


@pytest.mark.parametrize(("alerts", "env", "message"), [
    ("alerts:\n  routes:\n    - {namespace: llm, channel: C0ELSEWHERE}\n", {},
     "alerts.routes.0.channel: the channel is not in slack.channels: gpumem may not post there"),
    ("alerts:\n  default_channel: '#oncall'\n", {}, "alerts.default_channel: '#oncall' is not a Slack channel id"),
    ("alerts:\n  routes:\n    - {namespace: llm}\n", {}, "alerts.routes.0: each route needs a channel"),
    ("alerts:\n  routes:\n    - {team: x, channel: C0INC}\n", {}, "alerts.routes.0.team: unknown field"),
    ("alerts:\n  routes:\n    - {namespace: [], channel: C0INC}\n", {}, "alerts.routes.0.namespace: empty"),
    ("alerts:\n  labels: {pod: 'a-b'}\n", {}, "alerts.labels.pod: 'a-b' is not a Prometheus label name"),
    ("alerts:\n  token: abc\n", {}, "alerts.token: the webhook's token does not belong in the config file"),
    ("alerts:\n  triage_interval_s: 0\n", {}, "alerts.triage_interval_s: must be more than 0"),
    ("", {"GPUMEM_WEBHOOK_TOKEN": "short"}, "GPUMEM_WEBHOOK_TOKEN: the webhook token must be at least 16"),
    ("", {"GPUMEM_WEBHOOK_TOKEN": TOKEN, "GPUMEM_WEBHOOK_TOKEN_FILE": "/x"}, "both GPUMEM_WEBHOOK_TOKEN and"),
])
def test_a_wrong_alerts_setting_names_its_field(tmp_path, alerts, env, message):
    with pytest.raises(SettingsError) as e:
        _settings(tmp_path, alerts=alerts, env=env)
    assert message in str(e.value)


# ----------------------------------------------------------------------------- placing an alert


def _alert(**labels: str) -> Alert:
    return Alert("firing", {"alertname": "X", **labels}, {}, datetime(2026, 3, 9, tzinfo=UTC), None, "f1")


def test_an_alert_is_placed_by_its_labels_and_the_first_matching_route(tmp_path):
    s = _settings(tmp_path, channels="C0INC: {lang: en}\n    C0PAGE: {lang: en, namespaces: [llm]}",
                  clusters="clusters:\n  - {name: prod, context: prod-ctx}\n", alerts="""alerts:
  routes:
    - {severity: critical, channel: C0PAGE}
  default_channel: C0INC
""")
    p = place(_alert(namespace="llm", deployment="vllm", severity="critical", cluster="prod-ctx"), s, None)
    assert (p.outcome, str(p.target), p.cluster, p.channel, p.key) == ("ok", "llm/vllm", "prod", "C0PAGE",
                                                                       ("prod", "llm", "vllm"))
    p = place(_alert(namespace="search", deployment="q", severity="critical"), s, None)
    assert (p.outcome, p.channel) == ("namespace_not_allowed", "C0PAGE")
    assert p.detail == "C0PAGE may ask about llm, not search"
    assert place(_alert(namespace="search", deployment="q"), s, None).channel == "C0INC"
    calls = []

    def resolve(context, namespace, pod):
        calls.append((context, namespace, pod))
        if pod == "gone-0":
            raise TargetNotFound("Pod", namespace, pod)
        return "vllm"

    p = place(_alert(namespace="llm", pod="vllm-7d9c8b6f4-2xkqp"), s, resolve)
    assert (p.outcome, str(p.target), p.pod) == ("ok", "llm/vllm", "vllm-7d9c8b6f4-2xkqp")
    p = place(_alert(namespace="llm", pod="gone-0"), s, resolve)
    assert p.outcome == "pod_unresolved" and "gone-0" in p.detail
    assert calls == [(None, "llm", "vllm-7d9c8b6f4-2xkqp"), (None, "llm", "gone-0")]
    assert place(_alert(namespace="llm", pod="x-0"), s, None).outcome == "pod_unresolved"
    assert place(_alert(namespace="llm", deployment="v", cluster="nope"), s, None).outcome == "unknown_cluster"


def test_without_a_route_or_default_channel_an_alert_is_only_recorded(tmp_path):
    s = _settings(tmp_path)
    p = place(_alert(namespace="llm", deployment="vllm"), s, None)
    assert (p.outcome, str(p.target), p.channel) == ("no_route", "llm/vllm", None)
