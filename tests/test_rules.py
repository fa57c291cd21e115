"""`gpumem rules`: what it writes per engine, the labels that route back to gpumem, the formats,
and bad input refused as usage naming the flag. Behaviour under Prometheus is
tests/test_rules_promtool.py."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from bot.main import main
from collectors.prometheus import promql
from runbooks.alerts import promql as q
from runbooks.alerts.engines import ENGINES, SERIES
from runbooks.alerts.rules import ALERTS, RESERVED_LABELS, build_rules

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: the alerts' page and the JSON reference the README points at
ALERTS_DOC = ROOT / "docs" / "alerts.md"
JSON_DOC = ROOT / "docs" / "json.md"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["rules", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def _usage(capsys, *argv: str) -> str:
    """Run an argument error: exit 2, one message, no traceback; the message."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["rules", *argv])
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert "Traceback" not in err
    return err


def _doc(capsys, *argv: str):
    code, out, err = _run(capsys, *argv)
    assert (code, err) == (0, "")
    return yaml.safe_load(out)


def _groups_of(doc) -> list[dict]:
    return doc["groups"] if "groups" in doc else doc["spec"]["groups"]


def _rules_of(doc) -> list[dict]:
    """The alerting rules (the fleet's recording rules apart)."""
    return [r for g in _groups_of(doc) for r in g["rules"] if "alert" in r]


# ---------------------------------------------------------------------- what is written


def test_default_is_a_prometheusrule_holding_the_same_groups_as_the_rule_file(capsys):
    obj = _doc(capsys)
    assert (obj["apiVersion"], obj["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert obj["metadata"] == {"name": "gpumem", "labels": {"app.kubernetes.io/name": "gpumem",
                                                            "app.kubernetes.io/component": "alert-rules"}}
    assert obj["spec"] == _doc(capsys, "-o", "rules")


def test_each_engine_gets_its_group_and_the_kubernetes_group_is_always_there(capsys):
    doc = _doc(capsys, "-o", "rules")
    names = {g["name"]: [r["alert"] for r in g["rules"]] for g in doc["groups"] if g["name"] != "gpumem-fleet"}
    assert names == {
        "gpumem-vllm": ["GpumemKVCacheHigh", "GpumemQueueDeep", "GpumemPreemptionsRising", "GpumemTTFTP99High",
                        "GpumemLongShareJump"],
        "gpumem-sglang": ["GpumemKVCacheHigh", "GpumemQueueDeep", "GpumemPreemptionsRising", "GpumemTTFTP99High",
                          "GpumemLongShareJump"],
        "gpumem-tgi": ["GpumemKVCacheHigh", "GpumemQueueDeep", "GpumemLongShareJump"],
        "gpumem-kubernetes": ["GpumemOOMKilled", "GpumemRestartBurst", "GpumemGPUMemoryHigh"],
    }
    tgi = _doc(capsys, "-o", "rules", "--engine", "tgi")
    assert [g["name"] for g in tgi["groups"]] == ["gpumem-tgi", "gpumem-kubernetes", "gpumem-fleet"]
    bare = _doc(capsys, "-o", "rules", "--engine", "tgi", "--no-recording-rules")
    assert [g["name"] for g in bare["groups"]] == ["gpumem-tgi", "gpumem-kubernetes"]


def test_the_fleets_recording_rules_follow_the_level_metric_operations_naming(capsys):
    (fleet,) = [g for g in _doc(capsys, "-o", "rules")["groups"] if g["name"] == "gpumem-fleet"]
    assert fleet["interval"] == "1m" and len(fleet["rules"]) == 27
    for rule in fleet["rules"]:
        assert set(rule) <= {"record", "expr", "labels"} and "alert" not in rule
        level, metric, operations = rule["record"].split(":")
        assert level == "namespace_deployment", rule["record"]
        assert metric.startswith(("gpumem_", "kube_pod_")) and operations
    per_engine = [r for r in fleet["rules"] if "labels" in r]
    assert {r["labels"]["engine"] for r in per_engine} == {"vllm", "sglang", "tgi"}
    assert all(f"gpumem_{r['labels']['engine']}_" in r["record"] for r in per_engine)
    # the fleet reads namespace and deployment, whatever labels the alerts are given
    relabelled = _doc(capsys, "-o", "rules", "--namespace-label", "team_ns", "--deployment-label", "workload")
    (again,) = [g for g in relabelled["groups"] if g["name"] == "gpumem-fleet"]
    assert again == fleet


def test_every_alert_routes_back_to_gpumem_with_the_workload_labels(capsys):
    for rule in _rules_of(_doc(capsys, "-o", "rules")):
        assert rule["labels"]["gpumem"] == "triage"
        assert rule["labels"]["severity"] in ("warning", "critical")
        assert rule["expr"].split("\n")[0].startswith(("max by (namespace, deployment)", "sum by (namespace, deployment)",
                                                       "histogram_quantile(0.99, sum by (namespace, deployment, le)",
                                                       "(1 - max by (namespace, deployment)"))
        ann = rule["annotations"]
        assert set(ann) == {"summary", "description", "runbook_url"}
        assert "{{ $labels.namespace }}/{{ $labels.deployment }}" in ann["summary"]
        assert "gpumem triage {{ $labels.namespace }}/{{ $labels.deployment }}" in ann["description"]
        assert ann["runbook_url"] == f"README.md#{rule['alert'].lower()}"


def test_the_label_names_the_webhook_reads_are_configurable(capsys):
    rules = _rules_of(_doc(capsys, "-o", "rules", "--namespace-label", "team_ns", "--deployment-label", "workload"))
    for rule in rules:
        assert "by (team_ns, workload" in rule["expr"]
        assert '"workload", "$1$2$3", "pod"' in rule["expr"]
        assert "{{ $labels.team_ns }}/{{ $labels.workload }}" in rule["annotations"]["summary"]
        assert "deployment" not in rule["expr"]


def test_the_runbook_link_base_is_configurable(capsys):
    base = "https://git.example.com/ops/gpumem/-/blob/main/README.md"
    for rule in _rules_of(_doc(capsys, "-o", "rules", "--runbook-url", base)):
        assert rule["annotations"]["runbook_url"] == f"{base}#{rule['alert'].lower()}"


def _slugs(path: Path) -> set[str]:
    return {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}


def test_every_runbook_anchor_is_a_heading_of_the_page_it_links(capsys):
    links = {rule["annotations"]["runbook_url"] for rule in _rules_of(_doc(capsys, "-o", "rules"))}
    anchors = {name.lower() for name in ALERTS.values()}
    assert {link.partition("#")[2] for link in links} == anchors
    (page,) = {link.partition("#")[0] for link in links}  # the default base, a path in the repository
    assert anchors <= _slugs(ROOT / page)
    assert "alert-rules-gpumem-rules" in _slugs(README)
    # and the alerts' page holds each one's whole entry under the same heading
    assert {name.lower() for name in ALERTS.values()} <= _slugs(ALERTS_DOC)


def test_object_name_and_labels_go_on_the_prometheusrule(capsys):
    obj = _doc(capsys, "--name", "llm-gpu-memory", "--object-label", "release=kube-prometheus-stack",
               "--object-label", "prometheus.io/team=llm")
    assert obj["metadata"]["name"] == "llm-gpu-memory"
    assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert obj["metadata"]["labels"]["prometheus.io/team"] == "llm"


def test_the_header_says_what_is_left_out_and_how_to_check(capsys):
    _, out, _ = _run(capsys, "-o", "rules", "--engine", "tgi")
    head = [line for line in out.splitlines() if line.startswith("#")]
    assert head[0].startswith("# gpumem rules: the runbook's alerts for TGI.")
    assert any("Not written: TGI GpumemTTFTP99High: TGI exports no time-to-first-token histogram" in h for h in head)
    assert any("Not written: TGI GpumemPreemptionsRising" in h for h in head)
    assert any("Not written: TGI GpumemGPUMemoryHigh" in h for h in head)
    assert head[-1] == "# Check: promtool check rules FILE"


def test_chinese_wording_keeps_the_prometheus_templates(capsys):
    rule = _rules_of(_doc(capsys, "-o", "rules", "--lang", "zh"))[0]
    assert "KV cache 超过 90%" in rule["annotations"]["summary"]
    assert "{{ $value | humanizePercentage }}" in rule["annotations"]["description"]


def test_gpu_memory_leaves_out_every_engine_that_preallocates(capsys):
    gpu = next(r for r in _rules_of(_doc(capsys, "-o", "rules", "--engine", "vllm"))
               if r["alert"] == "GpumemGPUMemoryHigh")
    names = re.search(r'unless on \(namespace, pod\) \{__name__=~"([^"]+)"\}', gpu["expr"]).group(1).split("|")
    for engine in ENGINES:
        assert SERIES[engine].preallocates
        assert set(SERIES[engine].presence.split("|")) <= set(names)
    assert gpu["expr"].rstrip().endswith("> 0.95")


# ---------------------------------------------------------------------- JSON


JSON_KEYS = {"schema_version", "output", "lang", "engines", "namespace_label", "deployment_label", "runbook_url",
             "rules", "recording_rules", "not_written", "version_limited", "document"}


def test_json_has_the_documented_keys(capsys):
    code, out, _ = _run(capsys, "--json", "--engine", "vllm,tgi")
    data = json.loads(out)
    assert code == 0
    assert set(data) == JSON_KEYS
    assert data["engines"] == ["vllm", "tgi"]
    assert data["document"]["kind"] == "PrometheusRule"
    assert {"id", "alert", "group", "engine", "severity", "for_s"} == set(data["rules"][0])
    assert {"engine", "alert", "reason", "text"} == set(data["not_written"][0])
    assert {r["reason"] for r in data["not_written"]} == {"preallocates", "tgi_no_preemption", "tgi_no_ttft"}
    section = JSON_DOC.read_text().split("\n## rules\n", 1)[1].split("\n## ", 1)[0]
    for key in JSON_KEYS:
        assert f"`{key}`" in section, key


# ---------------------------------------------------------------------- bad input


@pytest.mark.parametrize("argv,flag", [
    (["--engine", "trt"], "--engine"),
    (["--engine", "vllm,"], "--engine"),
    (["--namespace-label", "app.kubernetes.io/name"], "--namespace-label"),
    (["--deployment-label", "__name__"], "--deployment-label"),
    (["--deployment-label", "pod"], "--deployment-label"),
    (["--namespace-label", "9ns"], "--namespace-label"),
    (["--runbook-url", "https://x/README.md#top"], "--runbook-url"),
    (["--runbook-url", "{{ evil }}"], "--runbook-url"),
    (["--object-label", "release"], "--object-label"),
    (["--object-label", "bad key=x"], "--object-label"),
    (["--name", "Gpumem_Rules"], "--name"),
    (["-o", "yaml"], "-o/--output"),
])
def test_bad_values_are_usage_errors_naming_the_flag(capsys, argv, flag):
    err = _usage(capsys, *argv)
    assert f"argument {flag}:" in err


def test_the_same_label_twice_is_a_usage_error(capsys):
    code, out, err = _run(capsys, "--namespace-label", "app", "--deployment-label", "app")
    assert (code, out) == (2, "")
    assert err.strip() == ("gpumem rules: --namespace-label and --deployment-label are both 'app'; "
                           "the webhook needs two labels.")


@pytest.mark.parametrize("flag", [["--name", "x"], ["--object-label", "a=b"]])
def test_object_flags_without_a_prometheusrule_are_a_usage_error(capsys, flag):
    code, out, err = _run(capsys, "-o", "rules", *flag)
    assert (code, out) == (2, "")
    assert f"{flag[0]} names the PrometheusRule object" in err


def test_build_rules_refuses_labels_it_reads_or_sets():
    for label in RESERVED_LABELS:
        with pytest.raises(ValueError):
            build_rules(("vllm",), deployment_label=label)
    with pytest.raises(ValueError):
        build_rules(("trt",))


# ---------------------------------------------------------------------- the series they read


def _known_to_triage() -> set[str]:
    """The series names in the live triage's own queries, as sent."""
    sel = promql.Selectors("ns", ["p"])
    sent = [promql.queue_query(sel), promql.usage_query(sel), promql.preemption_query(sel, 60),
            promql.ttft_p99_query(sel, 60), promql.lengths_query(sel, 600), promql.restarts_query(sel),
            promql.memory_query(sel)]
    return {n for q in sent for r in re.findall(r'__name__=~"([^"]+)"', q) for n in r.split("|")}


def test_the_rules_read_the_series_gpumem_triage_reads():
    known = _known_to_triage()
    assert {"vllm:num_requests_waiting", "tgi_queue_size", "sglang:num_queue_reqs", "DCGM_FI_DEV_FB_USED",
            "kube_pod_container_status_last_terminated_timestamp"} <= known  # the scan really found them
    # the one name the rules read that triage does not: SGLang's older per-interval retraction gauge
    extra = {"sglang:num_retracted_reqs"}
    for s in SERIES.values():
        names = [s.queue, s.prompt_buckets, *(s.kv_usage or "").split("|")]
        names += [n for n in (s.preemptions, s.ttft_buckets) if n]
        assert {n for n in names if n} <= known | extra, s.engine
        if s.kv_ratio:
            assert all(n in promql.usage_query(promql.Selectors("ns", ["p"])) for n in s.kv_ratio)
    assert extra <= {SERIES["sglang"].preemptions_gauge}


# ---------------------------------------------------------------------- the PromQL pieces


@given(st.integers(0, 200_000), st.sampled_from(["{}", "{}.0", "{}.5", "{}.25"]))
def test_le_at_most_matches_exactly_the_bounds_at_or_below_the_limit(value, shape):
    text = shape.format(value)
    assert bool(re.fullmatch(q.le_at_most(2048), text)) == (float(text) <= 2048)


@pytest.mark.parametrize("text", ["+Inf", "NaN", "-1", "1e+06", "2048.01", "02047"])
def test_le_at_most_never_matches_other_shapes(text):
    assert not re.fullmatch(q.le_at_most(2048), text)


_SAFE = "bcdfghjklmnpqrstvwxz2456789"


def _pod_template_hash(value: int) -> str:
    # Kubernetes: rand.SafeEncodeString(fmt.Sprint(hasher.Sum32()))
    return "".join(_SAFE[ord(c) % len(_SAFE)] for c in str(value))


@given(st.from_regex(r"[a-z]([-a-z0-9]{0,30}[a-z0-9])?", fullmatch=True), st.integers(0, 2**32 - 1),
       st.text(_SAFE, min_size=5, max_size=5), st.integers(0, 500))
def test_a_pod_name_gives_back_its_deployment_or_statefulset(name, hash_value, suffix, ordinal):
    def workload(pod: str) -> str:
        return "".join(g or "" for g in re.fullmatch(q.WORKLOAD_RE, pod).groups())

    assert workload(f"{name}-{_pod_template_hash(hash_value)}-{suffix}") == name
    assert workload(f"{name}-{ordinal}") == name


def test_label_names_follow_prometheus():
    assert q.is_label_name("gpumem_namespace")
    assert not q.is_label_name("__meta") and not q.is_label_name("a-b") and not q.is_label_name("")


def test_rules_that_fire_only_from_some_engine_version_say_so(capsys):
    """tgi_batch_max_total_tokens is exported from TGI 2.3.1 and SGLang's retraction series from
    0.5.2 (runbooks.catalogs.engine_metrics): the rule is written and the output says where it
    cannot fire."""
    code, out, _ = _run(capsys, "--json", "--engine", "sglang,tgi")
    data = json.loads(out)
    assert code == 0
    limited = {(v["engine"], v["alert"]): v["reason"] for v in data["version_limited"]}
    assert limited == {("sglang", "GpumemPreemptionsRising"): "sglang_retractions_from_0_5_2",
                       ("tgi", "GpumemKVCacheHigh"): "tgi_kv_budget_from_2_3_1"}
    assert all("never fires" in v["text"] for v in data["version_limited"])
    code, out, _ = _run(capsys, "--json", "--engine", "vllm")
    assert json.loads(out)["version_limited"] == []
