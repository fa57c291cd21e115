"""The engine metric table (runbooks.catalogs.engine_metrics) is the one place engine series are
named, every entry says where the engine defines it, and a /metrics page of any covered version,
holding only the names that version exports, is read for every fact the table has for it."""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

import pytest

from collectors.parsers.metrics import parse_metrics
from runbooks.alerts.engines import SERIES
from runbooks.catalogs.engine_flags import COVERED
from runbooks.catalogs.engine_metrics import COUNTER_SUFFIX, METRICS, PREFIX, MetricEntry, names, samples

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "runbooks" / "catalogs" / "engine_metrics.py"
_REF = re.compile(r"(?:[\w./]+\.(?:py|rs))?:\d+@v?(\d+)\.(\d+)\.(\d+)")


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the string nodes that are docstrings (they may show a name in an example)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _named_by_hand(root: Path = ROOT) -> list[str]:
    known = {m.family for m in METRICS} | {m.sample for m in METRICS}
    tgi = sorted(n for n in known if n.startswith(PREFIX["tgi"]))
    pattern = re.compile(r"\b(?:vllm|sglang):[a-z_]{3,}|\b(?:" + "|".join(tgi) + r")\b")
    found = []
    for package in ("bot", "collectors", "runbooks"):
        for path in sorted((root / package).rglob("*.py")):
            if path == TABLE:
                continue
            text = path.read_text()
            if not pattern.search(text):  # most modules name none: parse only those that might
                continue
            tree = ast.parse(text, str(path))
            skip = _docstrings(tree)
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
                    for hit in pattern.findall(node.value):
                        found.append(f"{path.relative_to(root)}:{node.lineno}: {hit}")
    return found


def test_no_module_but_the_table_names_an_engine_series():
    assert _named_by_hand() == []


def test_the_scan_finds_a_name_written_by_hand_and_passes_a_docstring_example(tmp_path):
    (tmp_path / "collectors").mkdir()
    (tmp_path / "collectors" / "x.py").write_text(
        '"""Reads vllm:num_requests_waiting."""\n'
        'def f():\n    """tgi_queue_size, as an example"""\n    return ("tgi_queue_size", f"sglang:token_usage{1}")\n')
    assert _named_by_hand(tmp_path) == ["collectors/x.py:4: tgi_queue_size", "collectors/x.py:4: sglang:token_usage"]


@pytest.mark.parametrize("entry", METRICS, ids=lambda m: f"{m.engine}-{m.fact}-{m.name}")
def test_every_entry_says_where_the_engine_defines_it_at_its_first_and_newest_version(entry: MetricEntry):
    refs = [tuple(map(int, v)) for v in _REF.findall(entry.source)]
    assert len(refs) >= 2, entry.source
    oldest, newest = COVERED[entry.engine]
    assert refs[0] == entry.since, f"{entry.source}: the first reference is not the first version {entry.since}"
    assert refs[-1] == (entry.until or newest), f"{entry.source}: the last reference is not the last version"
    assert oldest <= entry.since <= newest
    assert entry.until is None or entry.since <= entry.until <= newest
    assert entry.name.startswith(PREFIX[entry.engine])
    assert entry.kind in {"gauge", "counter", "histogram"}


def test_a_rename_chain_leaves_no_version_without_a_name_but_the_gap_the_engine_has():
    gaps = {}
    for engine, fact in {(m.engine, m.fact) for m in METRICS}:
        chain = sorted((m for m in METRICS if (m.engine, m.fact) == (engine, fact)), key=lambda m: m.since)
        for older, newer in itertools.pairwise(chain):
            assert older.until is not None, (engine, fact, older.name)
            if older.until < newer.since:
                gaps[(engine, fact)] = (older.until, newer.since)
    # SGLang 0.5.3-0.5.6 keep no running total of retractions, only the per-interval gauge
    assert gaps == {("sglang", "retractions_total"): ((0, 5, 2), (0, 5, 7))}


def test_samples_are_named_as_each_exporter_names_them():
    assert samples("vllm", "preemptions_total") == "vllm:num_preemptions_total"
    assert samples("tgi", "requests_finished") == "tgi_request_count"  # metrics-exporter-prometheus: no suffix
    assert samples("sglang", "ttft") == "sglang:time_to_first_token_seconds_bucket"
    assert set(COUNTER_SUFFIX) == set(PREFIX) == set(SERIES)
    with pytest.raises(KeyError):
        samples("tgi", "kv_usage")


# ------------------------------------------------------------------ each version's own page

#: the ServerMetrics field each fact is read into
FIELD = {
    "queue_waiting": "queue_depth", "running": "running_requests", "kv_usage": "kv_cache_usage_ratio",
    "kv_capacity_tokens": "kv_cache_capacity_tokens", "kv_used_tokens": "kv_cache_used_tokens",
    "preemptions_total": "preemptions_total", "retractions_total": "preemptions_total",
    "requests_finished": "requests_total", "finished_error": "failed_requests_total",
    "ttft": "ttft_seconds", "prompt_tokens": "prompt_tokens", "generation_tokens": "generation_tokens",
    "cache_config": "kv_cache_capacity_tokens", "request_failure": "failed_requests_total",
    "disagg_bootstrap_failed": "failed_requests_total", "disagg_transfer_failed": "failed_requests_total",
    "kv_batch_tokens": "kv_cache_used_tokens",
}
#: facts the parser reads only to tell things apart, or that the alert rules read alone
NOT_A_FIELD = {"v0_cpu_kv_usage", "v0_swapped", "retractions_last_interval", "aborted"}


def test_every_fact_of_the_table_is_read_into_a_field_or_listed_as_not_one():
    facts = {m.fact for m in METRICS}
    assert facts == set(FIELD) | NOT_A_FIELD
    assert not set(FIELD) & NOT_A_FIELD


def _page(entries: list[MetricEntry]) -> str:
    lines = []
    for m in entries:
        labels = '{model_name="m"}'
        if m.kind == "gauge":
            if m.fact == "cache_config":
                labels = '{block_size="16",num_gpu_blocks="1000",gpu_memory_utilization="0.9"}'
            value = "0.5" if m.fact == "kv_usage" else "4096"
            lines += [f"# TYPE {m.family} gauge", f"{m.family}{labels} {value}"]
        elif m.kind == "counter":
            if "{" in m.name:  # a matcher names the one label value the fact is
                labels = "{" + m.name.partition("{")[2]
            lines += [f"# TYPE {m.family} counter", f"{m.sample}{labels} 3"]
        else:
            lines += [f"# TYPE {m.family} histogram", f'{m.family}_bucket{{le="1.0"}} 1',
                      f'{m.family}_bucket{{le="+Inf"}} 2', f"{m.family}_count 2", f"{m.family}_sum 1.5"]
    return "\n".join(lines) + "\n"


def _boundaries(engine: str) -> list[tuple[int, int, int]]:
    points = set(COVERED[engine])
    for m in METRICS:
        if m.engine == engine:
            points.add(m.since)
            if m.until:
                points.add(m.until)
                points.add((m.until[0], m.until[1], m.until[2] + 1))
    return sorted(p for p in points if COVERED[engine][0] <= p <= COVERED[engine][1])


_CASES = [(e, v) for e in sorted(PREFIX) for v in _boundaries(e)]


@pytest.mark.parametrize(("engine", "version"), _CASES, ids=lambda x: ".".join(map(str, x)) if isinstance(x, tuple) else x)
def test_a_page_of_each_version_is_read_for_every_fact_it_exports(engine, version):
    exported = [m for m in METRICS if m.engine == engine and m.exported_by(version)]
    if not exported:  # SGLang before its first metrics: nothing to read
        assert engine == "sglang" and version < (0, 3, 6)
        return
    # the matcher form of a counter shares its family with the plain one: one of them on a page
    families: dict[str, MetricEntry] = {}
    for m in exported:
        families.setdefault(m.family if "{" not in m.name else m.name, m)
    read = parse_metrics(_page(list(families.values())), source=f"{engine}-{version}")
    assert read.engine == engine
    for m in exported:
        if m.fact in NOT_A_FIELD:
            continue
        assert getattr(read, FIELD[m.fact]) is not None, (m.name, FIELD[m.fact])
    if engine == "vllm" and version <= (0, 9, 0):  # V0's own names on the page
        assert read.flavor == "vllm-v0"
    elif engine == "vllm" and version >= (0, 9, 2):  # V1's usage gauge
        assert read.flavor == "vllm-v1"


def test_facts_read_from_names_a_version_does_not_export_stay_unknown():
    # SGLang 0.5.5 has no pool-size gauge; TGI 2.3.0 no KV budget; vLLM 0.12 no error finish
    for engine, version, field in (("sglang", (0, 5, 5), "kv_cache_capacity_tokens"),
                                   ("tgi", (2, 3, 0), "kv_cache_capacity_tokens"),
                                   ("vllm", (0, 12, 0), "failed_requests_total")):
        exported = [m for m in METRICS if m.engine == engine and m.exported_by(version)]
        assert getattr(parse_metrics(_page(exported)), field) is None, (engine, version, field)


def test_every_fact_the_parser_reads_is_in_the_table_for_each_engine():
    for engine in PREFIX:
        for fact in ("queue_waiting", "running", "requests_finished", "prompt_tokens", "generation_tokens"):
            assert names(engine, fact), (engine, fact)
