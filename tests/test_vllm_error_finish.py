"""vLLM's `error` finish reason arrives in 0.13 (runbooks/catalogs/engine_metrics.py): before
it, a missing error series says nothing about errors (unknown), never "no errors"."""

from __future__ import annotations

from bot.render import dashboards as render
from collectors.parsers.metrics import parse_metrics
from runbooks.alerts.dashboards import build_dashboard
from runbooks.alerts.engines import SERIES
from runbooks.catalogs.engine_metrics import first_version

_RUNNING = "vllm:num_requests_running{model_name=\"m\"} 3\nvllm:kv_cache_usage_perc{model_name=\"m\"} 0.5\n"
#: V1 before 0.13: stop, length and abort only (vllm/v1/engine/__init__.py:21@0.11.0)
_V0_12 = _RUNNING + "".join(f'vllm:request_success_total{{model_name="m",finished_reason="{r}"}} 5\n'
                            for r in ("stop", "length", "abort"))
#: 0.13 on: the error reason is exported too, 0 until one happens
_V0_13 = _V0_12 + 'vllm:request_success_total{model_name="m",finished_reason="error"} {n}\n'


def test_the_table_says_0_13():
    assert first_version("vllm", "finished_error") == (0, 13, 0)
    assert SERIES["vllm"].errors_counted_since == (0, 13, 0)


def test_before_0_13_errors_are_unknown_not_zero():
    m = parse_metrics(_V0_12)
    assert m.engine == "vllm"
    assert m.failed_requests_total is None


def test_from_0_13_an_error_series_is_read_zero_or_not():
    assert parse_metrics(_V0_13.replace("{n}", "0")).failed_requests_total == 0.0
    assert parse_metrics(_V0_13.replace("{n}", "4")).failed_requests_total == 4.0


def _rejects_panel(engine: str, lang: str = "en") -> dict:
    board = render.dashboard_json(build_dashboard(engine), lang)
    panels = [p for row in board["panels"] for p in (row, *row.get("panels", []))]
    return next(p for p in panels if p.get("targets") and any("finished_reason" in t["expr"] or "aborted" in t["expr"]
                                                              for t in p["targets"]))


def test_the_vllm_rejects_panel_says_errors_are_unknown_before_0_13():
    panel = _rejects_panel("vllm")
    assert "before 0.13" in panel["description"] and "unknown, not zero" in panel["description"]
    assert "0.13.0 之前" in _rejects_panel("vllm", "zh")["description"]
    # SGLang's aborted counter has no such gap: no note
    assert "unknown, not zero" not in _rejects_panel("sglang")["description"]
