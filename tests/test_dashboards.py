"""`gpumem dashboards`: Grafana dashboards per engine, valid as Grafana reads them, built from the
alerts' series tables, listed and written in English and Chinese, and shipped as the ConfigMaps
of deploy/components/dashboards (the committed files are what the builder writes today).
tests/test_dashboards_promql.py runs every query against a real Prometheus."""

from __future__ import annotations

import json
import re
from itertools import combinations
from pathlib import Path

import pytest
import yaml

from bot.cli import dashboards as cli
from bot.grammar.requests import DashboardsRequest
from bot.render import dashboards as render
from bot.render.i18n import Catalog
from bot.service.dashboards import dashboards
from runbooks.alerts import dashboards as d
from runbooks.alerts.engines import ENGINES, EXPORTERS, SERIES, EngineSeries
from runbooks.catalogs import thresholds as T
from runbooks.model.errors import UsageError
from tests.support import kustomize
from tests.support.deploy import COMPONENTS, DEPLOY
from tests.support.deploy import render as render_deploy

COMPONENT = DEPLOY / "components" / "dashboards"
LANGS = ("en", "zh")
CJK = re.compile(r"[\u4e00-\u9fff]")


def _json(engine: str, lang: str = "en") -> dict:
    return render.dashboard_json(d.build_dashboard(engine), lang)


def _table_names() -> set[str]:
    names: set[str] = set()
    for s in SERIES.values():
        for field_name in EngineSeries.__dataclass_fields__:
            value = getattr(s, field_name)
            for v in value if isinstance(value, tuple) else (value,):
                if isinstance(v, str) and re.fullmatch(r"[A-Za-z_:][\w:|]*", v):
                    names.update(v.split("|"))
    for value in vars(EXPORTERS).values():
        names.update(value.split("|"))
    return names


# ----------------------------------------------------------------------------- Grafana's model


def _boxes_overlap(a: dict, b: dict) -> bool:
    return a["x"] < b["x"] + b["w"] and b["x"] < a["x"] + a["w"] and a["y"] < b["y"] + b["h"] and b["y"] < a["y"] + a["h"]


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("engine", ENGINES)
def test_the_dashboard_is_grafanas_json_model_with_panels_that_do_not_overlap(engine, lang):
    dash = _json(engine, lang)
    assert dash["uid"] == f"gpumem-{engine}" and len(dash["uid"]) <= 40
    assert dash["schemaVersion"] == d.SCHEMA_VERSION >= 36
    assert json.loads(json.dumps(dash)) == dash
    panels = dash["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)) and all(isinstance(i, int) and i > 0 for i in ids)
    for p in panels:
        g = p["gridPos"]
        assert set(g) == {"h", "w", "x", "y"} and g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24
        assert p["type"] in ("row", "timeseries", "text") and p["title"]
    for a, b in combinations(panels, 2):
        assert not _boxes_overlap(a["gridPos"], b["gridPos"]), (a["title"], b["title"])
    rows = [p for p in panels if p["type"] == "row"]
    assert len(rows) == 4 and all(r["gridPos"]["w"] == 24 and r["gridPos"]["h"] == 1 for r in rows)
    # every panel sits below its row's header and above the next one
    tops = [r["gridPos"]["y"] for r in rows] + [10**6]
    for i, row in enumerate(rows):
        inside = [p for p in panels if p["type"] != "row" and tops[i] < p["gridPos"]["y"] < tops[i + 1]]
        assert inside, row["title"]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_query_names_only_defined_variables_and_the_datasource_variable(engine):
    dash = _json(engine)
    variables = {v["name"]: v for v in dash["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    expected = ["datasource", "namespace", "pod"] if engine == "tgi" else ["datasource", "namespace", "model_name", "pod"]
    assert list(variables) == expected
    for name in expected[1:]:
        v = variables[name]
        assert v["type"] == "query" and v["multi"] and v["includeAll"] and "allValue" not in v
        assert v["query"]["query"] == v["definition"] and v["definition"].startswith("label_values(")
        assert v["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    for p in dash["panels"]:
        if p["type"] != "timeseries":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert [t["refId"] for t in p["targets"]] == [chr(65 + i) for i in range(len(p["targets"]))]
        for t in p["targets"]:
            used = set(re.findall(r"\$(\w+)", t["expr"])) - {"1", "2", "3"}
            assert used <= set(variables) | {"__rate_interval"}, (p["title"], used)
            assert "$pod" in t["expr"] or "horizontalpodautoscaler" in t["expr"], p["title"]


@pytest.mark.parametrize("engine", ENGINES)
def test_every_metric_comes_from_the_series_tables(engine):
    known = _table_names()
    for panel in d.build_dashboard(engine).panels():
        for t in panel.targets:
            # every series is selected by name through promql.selector: no name written bare
            assert not re.search(r"[A-Za-z_:][\w:]*\{", t.expr.replace("by (", "").replace("on (", "")), t.expr
            for regex in re.findall(r'__name__=~"([^"]+)"', t.expr):
                assert set(regex.split("|")) <= known, (panel.id, regex)


def test_each_engine_reads_its_own_names_and_not_anothers():
    for engine in ENGINES:
        exprs = " ".join(t.expr for p in d.build_dashboard(engine).panels() for t in p.targets)
        s = SERIES[engine]
        for name in (s.queue, s.prompt_buckets, s.generation_buckets, s.rejects):
            assert name in exprs, (engine, name)
        prefixes = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_"}
        for other, prefix in prefixes.items():
            if other != engine:
                assert prefix not in exprs, (engine, other)


def test_the_lines_drawn_are_the_alert_rules_lines():
    lines = {p.id: p.line for p in d.build_dashboard("vllm").panels() if p.line is not None}
    assert lines == {"long_share": T.LONG_SHARE_HIGH, "queue": T.QUEUE_DEPTH_ALERT, "ttft": T.TTFT_P99_SLOW_S,
                     "kv_usage": T.KV_USAGE_HIGH_RATIO}
    panel = next(p for p in _json("vllm")["panels"] if p["title"] == "KV cache usage")
    assert panel["fieldConfig"]["defaults"]["thresholds"]["steps"][-1]["value"] == 0.9


def test_the_runbooks_four_rows_hold_its_panels():
    rows = {r.id: [p.id for p in r.panels] for r in d.build_dashboard("sglang").rows}
    assert rows == {"gpu": ["gpu_memory", "gpu_util", "gpu_temp", "gpu_power"],
                    "profile": ["input_buckets", "output_buckets", "long_share"],
                    "service": ["queue", "ttft", "kv_usage", "rejects"],
                    "platform": ["restarts", "oom_killed", "replicas", "routing"]}
    ttft = next(p for p in d.build_dashboard("sglang").panels() if p.id == "ttft")
    assert [t.series for t in ttft.targets] == ["p50", "p95", "p99"]
    assert [t.expr.split(",")[0] for t in ttft.targets] == [
        "histogram_quantile(0.5", "histogram_quantile(0.95", "histogram_quantile(0.99"]


def test_tgi_says_why_it_has_no_ttft_panel_in_its_place():
    dash = _json("tgi")
    (text,) = [p for p in dash["panels"] if p["type"] == "text"]
    assert text["options"]["content"] == Catalog.load("en").t("rules_cli.missing.tgi_no_ttft")
    assert "time-to-first-token" in text["options"]["content"]
    zh = [p for p in _json("tgi", "zh")["panels"] if p["type"] == "text"]
    assert CJK.search(zh[0]["options"]["content"])


def test_the_agents_metric_names_are_the_ones_it_serves():
    from bot.agent.server import _families

    served = {f.name for f in _families()}
    assert {EXPORTERS.agent_used, EXPORTERS.agent_total, EXPORTERS.agent_util} <= served


def test_an_unknown_engine_is_refused():
    with pytest.raises(ValueError):
        d.build_dashboard("trt")
    with pytest.raises(UsageError) as e:
        dashboards("trt")
    assert e.value.code == "unknown_engine"
    assert "vllm, sglang, tgi" in Catalog.load("en").t("dashboards.error.unknown_engine", e.value.params)


# ----------------------------------------------------------------------------- languages


def _titles(dash: dict) -> list[str]:
    return [p["title"] for p in dash["panels"]]


def _skeleton(obj):
    """`obj` without the words: titles, descriptions, legends, labels, text."""
    if isinstance(obj, dict):
        return {k: _skeleton(v) for k, v in obj.items()
                if k not in ("title", "description", "legendFormat", "label", "content")}
    if isinstance(obj, list):
        return [_skeleton(v) for v in obj]
    return obj


def test_titles_are_english_or_chinese_and_the_rest_is_the_same():
    for engine in ENGINES:
        en, zh = _json(engine, "en"), _json(engine, "zh")
        assert not any(CJK.search(t) for t in _titles(en))
        assert all(CJK.search(t) for t in _titles(zh) if t not in ("GPU",)), _titles(zh)
        assert CJK.search(zh["title"]) and CJK.search(zh["description"])
        assert _skeleton(en) == _skeleton(zh)


@pytest.mark.parametrize("lang", LANGS)
def test_the_listing_names_every_panel_what_it_reads_and_its_line(lang, capsys):
    cat = Catalog.load(lang)
    assert cli.run(DashboardsRequest(engine=None, json=False), lang, None) == 0
    out = capsys.readouterr().out
    for engine in ENGINES:
        assert f"gpumem-{engine}" in out
        for p in d.build_dashboard(engine).panels():
            assert cat.t(f"dashboards.panel.{p.id}.title") in out
    assert cat.t("rules_cli.missing.tgi_no_ttft") in out
    assert "vllm:num_requests_waiting" in out and "tgi_queue_size" in out
    if lang == "zh":
        assert "红线 90%" in out and "红线 2 秒" in out
    else:
        assert "(line at 90%)" in out and "(line at 2 s)" in out
    assert "None" not in out and "n/a" not in out


@pytest.mark.parametrize("lang", LANGS)
def test_json_is_the_one_dashboard_grafana_imports_or_all_three(lang, capsys):
    assert cli.run(DashboardsRequest(engine="tgi", json=True), lang, None) == 0
    one = json.loads(capsys.readouterr().out)
    assert one == _json("tgi", lang)
    assert cli.run(DashboardsRequest(engine=None, json=True), lang, None) == 0
    every = json.loads(capsys.readouterr().out)
    assert [x["uid"] for x in every] == ["gpumem-vllm", "gpumem-sglang", "gpumem-tgi"]


# ----------------------------------------------------------------------------- deploy


def test_the_committed_dashboard_files_are_the_builders_output():
    files = render.configmap_files(dashboards(None))
    assert sorted(files) == ["gpumem-sglang.json", "gpumem-tgi.json", "gpumem-vllm.json"]
    for name, text in files.items():
        assert (COMPONENT / name).read_text(encoding="utf-8") == text, (
            f"regenerate: gpumem dashboards --engine {name[7:-5]} --json > deploy/components/dashboards/{name}")
    assert sorted(p.name for p in COMPONENT.glob("*.json")) == sorted(files)


def test_the_component_ships_one_sidecar_configmap_per_engine_beside_the_bot():
    assert "dashboards" in COMPONENTS
    assert kustomize.load_kustomization(COMPONENT)["kind"] == "Component"
    maps = [o for o in render_deploy("read-only", ("dashboards",))
            if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("gpumem-dashboard-")]
    assert sorted(m["metadata"]["name"] for m in maps) == [f"gpumem-dashboard-{e}" for e in sorted(ENGINES)]
    for m in maps:
        engine = m["metadata"]["name"].removeprefix("gpumem-dashboard-")
        assert m["metadata"]["namespace"] == "gpumem"
        assert m["metadata"]["labels"][render.SIDECAR_LABEL[0]] == render.SIDECAR_LABEL[1]
        assert m["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gpumem"
        (key,) = m["data"]
        assert key == f"gpumem-{engine}.json" and json.loads(m["data"][key]) == _json(engine)
        # kubectl apply keeps the object in an annotation limited to 256 KiB
        assert len(json.dumps(m)) < 200_000


def test_the_kustomization_regenerates_from_the_command_it_names():
    text = (COMPONENT / "kustomization.yaml").read_text()
    assert "gpumem dashboards --engine <engine> --json" in text
    doc = yaml.safe_load(text)
    assert [g["files"] for g in doc["configMapGenerator"]] == [[f"gpumem-{e}.json"] for e in ENGINES]
    assert all(Path(COMPONENT / f).exists() for g in doc["configMapGenerator"] for f in g["files"])


def test_the_listing_in_the_docs_is_what_the_command_prints():
    page = (DEPLOY.parent / "docs" / "dashboards.md").read_text(encoding="utf-8")
    shown = page.split("`gpumem dashboards --engine vllm`:\n\n```\n", 1)[1].split("```", 1)[0]
    assert shown == render.dashboards_text(dashboards("vllm"), "en")


def test_the_dashboards_verb_runs_through_the_registry(capsys):
    from bot.main import main

    assert main(["dashboards", "--engine", "tgi", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["uid"] == "gpumem-tgi"
    assert main(["dashboards", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "gpumem-vllm" in out and "gpumem-sglang" in out and "gpumem-tgi" in out
    with pytest.raises(SystemExit) as exit_info:  # argparse refuses an engine it does not know
        main(["dashboards", "--engine", "lmdeploy"])
    assert exit_info.value.code == 2
