"""Every query of every `gpumem dashboards` panel against a real Prometheus (promtool-loaded
history, tests/support/prom_dashboards.py): it parses, and it returns series on each engine's
recorded metrics, with the template variables set as Grafana sets them (All, or one value).
The variables' own queries (`label_values`) find the engine's namespaces, models and pods and
never another engine's or the decoy's."""

from __future__ import annotations

import time

import pytest
import requests

from runbooks.alerts.dashboards import RATE, build_dashboard
from runbooks.alerts.engines import ENGINES
from runbooks.alerts.promql import string
from tests.support import prom_dashboards as pd

#: Grafana's $__rate_interval on a 15 s scrape: four intervals
RATE_WINDOW = "1m"
SPACES = {ns.engine: ns for ns in pd.namespaces()}


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    end_s = (int(time.time()) // 60) * 60 - 120
    with pd.run_dashboard_prometheus(tmp_path_factory.mktemp("dashboards"), end_s) as server:
        yield server


def _expand(expr: str, values: dict[str, set[str]]) -> str:
    """The PromQL Grafana sends: each variable as the regex of its chosen values, `(a|b)`
    (All: every value its query lists). No name here needs regex escaping."""
    out = expr.replace(RATE, RATE_WINDOW)
    for name, chosen in values.items():
        out = out.replace(f"${name}", "(" + "|".join(sorted(chosen)) + ")")
    assert "$" not in out.replace("$1", "").replace("$2", "").replace("$3", ""), out
    return out


def _all(prom, engine: str, **chosen: set[str]) -> dict[str, set[str]]:
    """Each variable's values as Grafana lists them, one after the other (each query uses the
    ones before it), with `chosen` in place of All where given."""
    values: dict[str, set[str]] = {}
    for v in build_dashboard(engine).variables:
        if not v.selector:
            continue
        if v.name in chosen:
            values[v.name] = chosen[v.name]
            continue
        values[v.name] = _label_values(prom, v.label, _expand(v.selector, values))
    return values


def _query(prom, promql: str) -> list[dict]:
    resp = requests.post(f"{prom.url}/api/v1/query", data={"query": promql, "time": prom.end_s}, timeout=30)
    body = resp.json()
    assert resp.status_code == 200 and body["status"] == "success", (body.get("error"), promql)
    return body["data"]["result"]


def _targets(engine: str):
    for panel in build_dashboard(engine).panels():
        for target in panel.targets:
            yield pytest.param(engine, panel.id, target, id=f"{engine}-{panel.id}-{target.series}")


ALL_TARGETS = [p for e in ENGINES for p in _targets(e)]


def test_every_panel_but_the_missing_ones_has_queries():
    assert len(ALL_TARGETS) >= 3 * 28
    for e in ENGINES:
        for panel in build_dashboard(e).panels():
            assert bool(panel.targets) != bool(panel.missing), (e, panel.id)


@pytest.mark.parametrize(("engine", "panel", "target"), ALL_TARGETS)
def test_each_query_returns_series_for_its_engine_and_no_other(prom, engine, panel, target):
    result = _query(prom, _expand(target.expr, _all(prom, engine)))
    assert result, (panel, target.series)
    # All namespaces: the engine's own, and the decoy's for vLLM (it runs vLLM too); never
    # another engine's pods, even in panels of DCGM or kube-state-metrics series
    allowed = {SPACES[engine].namespace} | ({pd.DECOY_NS} if engine == "vllm" else set())
    seen = {series["metric"].get("namespace") for series in result}
    assert SPACES[engine].namespace in seen and seen <= allowed, (panel, seen)
    for series in result:
        float(series["value"][1])


@pytest.mark.parametrize(("engine", "panel", "target"), ALL_TARGETS)
def test_one_pod_chosen_keeps_its_pool_or_its_own_series(prom, engine, panel, target):
    space = SPACES[engine]
    # a Deployment's pod whose DCGM and kube-state-metrics come through exported_* labels; the
    # StatefulSet's pod for the StatefulSet's replicas (a pod of the Deployment has none)
    pod = space.pods[2] if target.series == "replicas_ready" else space.pods[1]
    chosen = _all(prom, engine, namespace={space.namespace}, pod={pod})
    result = _query(prom, _expand(target.expr, chosen))
    assert result, (panel, target.series)
    for series in result:
        labels = series["metric"]
        assert labels["namespace"] == space.namespace, labels
        assert labels.get("pod", pod) == pod, labels
        if target.series != "hpa_desired":  # an HPA is named for what it scales
            pool = space.statefulset if pod == space.pods[2] else space.deployment
            assert labels.get("deployment", pool) == pool, labels


def test_the_numbers_are_the_recorded_ones(prom):
    """A few panels read back what was recorded: bytes from MiB, the agent joined to the right pod."""
    space = SPACES["vllm"]
    panels = {p.id: p for p in build_dashboard("vllm").panels()}
    values = _all(prom, "vllm", namespace={space.namespace})

    def by_series(panel: str, series: str) -> dict[str, float]:
        (target,) = [t for t in panels[panel].targets if t.series == series]
        return {r["metric"].get("pod", r["metric"].get("deployment")): float(r["value"][1])
                for r in _query(prom, _expand(target.expr, values))}

    for i, pod in enumerate(space.pods):
        assert by_series("gpu_memory", "dcgm_used")[pod] == pd.used_mib(i) * 1048576
        assert by_series("gpu_memory", "agent_used")[pod] == pd.used_mib(i) * 1048576
        assert by_series("gpu_memory", "dcgm_total")[pod] == pd.TOTAL_MIB * 1048576
        assert by_series("gpu_temp", "dcgm")[pod] == 60 + i
    assert by_series("replicas", "replicas_wanted") == {space.deployment: 2}
    assert by_series("replicas", "replicas_ready") == {space.statefulset: 1}
    # 20 requests per 15 s per pod: 12 up to the 500 bound (S), 2 past 10000 (XL); two pods
    assert by_series("input_buckets", "bucket_S")[space.deployment] == pytest.approx(2 * 12 / 15)
    assert by_series("input_buckets", "bucket_XL")[space.deployment] == pytest.approx(2 * 2 / 15)
    # over 2048 input tokens: the 5000 bound's 2 and the 2 beyond, of 20
    assert by_series("long_share", "long_share")[space.deployment] == pytest.approx(4 / 20)
    assert by_series("oom_killed", "oom_killed") == {p: 1.0 for p in space.pods}


def _label_values(prom, label: str, selector: str) -> set[str]:
    resp = requests.get(f"{prom.url}/api/v1/label/{label}/values",
                        params={"match[]": selector, "start": prom.end_s - 600, "end": prom.end_s}, timeout=30)
    assert resp.status_code == 200, resp.text
    return set(resp.json()["data"])


@pytest.mark.parametrize("engine", ENGINES)
def test_the_variables_list_the_engines_namespaces_models_and_pods(prom, engine):
    space = SPACES[engine]
    found = _all(prom, engine, namespace={space.namespace})
    assert _all(prom, engine)["namespace"] == {space.namespace} | ({pd.DECOY_NS} if engine == "vllm" else set())
    assert found.pop("namespace") == {space.namespace}
    assert found.pop("pod") == set(space.pods)
    if engine != "tgi":
        assert found.pop("model_name") == {space.model}
    assert found == {}


def test_a_broken_query_would_fail_here(prom):
    with pytest.raises(AssertionError):
        _query(prom, "sum by (namespace (vllm:num_requests_waiting)")
    assert _query(prom, f"vllm:num_requests_waiting{{namespace={string(pd.DECOY_NS)}}}")
