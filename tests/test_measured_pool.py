"""What the engine measured wins over what gpumem computes: the KV pool, its usage, the card and
the values a launch already runs with.

The bundle is TGI 2.2.0 serving Llama 3.1 8B on one A10G with the launcher's defaults, whose
router printed 19,056 tokens of cache (the start-up `tgi-llama3-8b-class-a10g` in
tests/data/calibration, for which the budget computes 33,312: +75%, `tgi_kv_optimistic`),
with the cache full of reservations and requests refused.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.main import main
from collectors.bundle import load_bundle
from collectors.parsers.metrics import parse_metrics
from runbooks.catalogs.gpus import pinned_gpu_of_labels
from runbooks.catalogs.models import find_model
from runbooks.model.budget import BudgetInputs
from runbooks.model.lengths import RequestProfile
from runbooks.remediation.solver import solve_safe_flags
from runbooks.sizing.budget import compute_budget
from runbooks.sizing.capacity import MeasuredPool
from runbooks.triage.actions import safe_plan
from runbooks.triage.context import build_context
from runbooks.triage.runbook import triage

DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: llama31-8b-tgi, namespace: chat}
spec:
  replicas: 2
  selector: {matchLabels: {app: llama31-8b-tgi}}
  template:
    metadata: {labels: {app: llama31-8b-tgi}}
    spec:
      nodeSelector: {%(selector)s}
      containers:
        - name: tgi
          image: ghcr.io/huggingface/text-generation-inference:2.2.0
          args: ["--model-id", "meta-llama/Meta-Llama-3.1-8B-Instruct", "--max-batch-size", "64", "--port", "80"]
          resources:
            limits: {nvidia.com/gpu: "1"}
status: {replicas: 2, readyReplicas: 2}
"""
LOG = """\
2024-09-03T10:00:00.000000Z  INFO text_generation_launcher: Args { model_id: "meta-llama/Meta-Llama-3.1-8B-Instruct", max_batch_size: Some(64), port: 80, cuda_memory_fraction: 1.0 }
2024-09-03T10:00:00.100000Z  INFO text_generation_launcher: Default `max_input_tokens` to 4095
2024-09-03T10:00:00.100000Z  INFO text_generation_launcher: Default `max_total_tokens` to 4096
2024-09-03T10:00:00.100000Z  INFO text_generation_launcher: Default `max_batch_prefill_tokens` to 4145
2024-09-03T10:00:00.100000Z  INFO text_generation_launcher: Using default cuda graphs [1, 2, 4, 8, 16, 32]
2024-09-03T10:00:47.700000Z  INFO shard-manager: text_generation_launcher: Shard ready in 47.6s rank=0
2024-09-03T10:00:49.000000Z  INFO text_generation_router::server: router/src/server.rs:1599: Using scheduler V3
2024-09-03T10:00:49.100000Z  INFO text_generation_router::server: router/src/server.rs:1651: Setting max batch total tokens to 19056
2024-09-03T10:00:49.200000Z  INFO text_generation_router::server: router/src/server.rs:1889: Connected
"""
#: TGI 2.2's page: no tgi_batch_max_total_tokens (from 2.3.1), the batch reserving 18,900 tokens
METRICS = """\
# TYPE tgi_request_count counter
tgi_request_count 10234
# TYPE tgi_request_failure counter
tgi_request_failure{err="overloaded"} 312
tgi_request_failure{err="validation"} 47
# TYPE tgi_queue_size gauge
tgi_queue_size 26
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 5
# TYPE tgi_batch_current_max_tokens gauge
tgi_batch_current_max_tokens 18900
"""
MEASURED, COMPUTED = 19056, 33312


def _bundle(tmp_path: Path, selector: str = "nvidia.com/gpu.product: NVIDIA-A10G") -> Path:
    (tmp_path / "deployment.yaml").write_text(DEPLOYMENT % {"selector": selector})
    (tmp_path / "logs.txt").write_text(LOG)
    (tmp_path / "metrics.txt").write_text(METRICS)
    return tmp_path


def test_the_budget_computes_more_cache_than_this_engine_printed():
    """The premise: on this release the budget's figure is not the engine's (docs/accuracy.md)."""
    inputs = BudgetInputs(engine="tgi", gpu_total_gib=22.07, engine_version="2.2.0", max_num_seqs=64)
    assert compute_budget(find_model("meta-llama/Llama-3.1-8B-Instruct"), inputs).kv_cache_tokens == COMPUTED


def test_the_safe_flags_size_on_the_pool_the_engine_printed_plus_the_computed_change():
    model = find_model("meta-llama/Llama-3.1-8B-Instruct")
    # the flags the printed start-up ran with: the launcher's defaults, 64 at a time
    running = BudgetInputs(engine="tgi", gpu_total_gib=22.07, engine_version="2.2.0", max_num_seqs=64)
    profile = RequestProfile(source="access.log", total=1000, p95_input_tokens=1500, p95_output_tokens=500,
                             p99_input_tokens=3000, p99_output_tokens=900)
    computed = solve_safe_flags(model, running, profile)
    anchored = solve_safe_flags(model, running, profile, measured=MeasuredPool(MEASURED, "logs.txt"))
    assert (computed.kv_pool_basis, anchored.kv_pool_basis) == ("budget", "engine_anchored")
    # the same new flags; the pool moves by exactly what the engine printed below the budget
    assert (anchored.max_model_len, anchored.max_input_tokens) == (computed.max_model_len, computed.max_input_tokens)
    at_running = compute_budget(model, running).kv_cache_tokens
    assert anchored.kv_cache_tokens == MEASURED + computed.kv_cache_tokens - at_running
    assert anchored.kv_cache_tokens < computed.kv_cache_tokens
    # 90% of the pool over the p95 request's 2,000 tokens (2,000 in whole 16-token blocks)
    assert anchored.max_num_seqs == int(0.9 * anchored.kv_cache_tokens // 2000)
    assert computed.max_num_seqs == int(0.9 * computed.kv_cache_tokens // 2000)
    assert anchored.max_num_seqs < computed.max_num_seqs
    reason = next(r for r in anchored.reasons if r.id == "pool_from_engine")
    assert reason.params == {"measured": MEASURED, "source": "logs.txt", "computed_running": at_running,
                             "computed_new": computed.kv_cache_tokens, "kv_tokens": anchored.kv_cache_tokens}


def test_triage_reads_the_card_the_node_selector_pins_and_sizes_on_the_engines_pool(tmp_path):
    ctx = build_context(load_bundle(_bundle(tmp_path)))
    assert ctx.gpu_name == "A10G"
    assert ctx.budget is not None and ctx.budget.kv_cache_tokens == COMPUTED
    assert (ctx.kv_capacity_tokens.value, ctx.kv_capacity_tokens.source) == (MEASURED, "logs.txt")
    plan = safe_plan(ctx)
    assert plan.kv_pool_basis == "engine_anchored"
    # the template's 4096-token requests: 4 fit 90% of the printed 19,056; the budget's 33,312 holds 7
    assert plan.max_num_seqs == 4
    report = triage(load_bundle(tmp_path))
    lower = next(a for a in report.actions if a.id == "lower_max_num_seqs")
    assert (lower.params["current"], lower.params["target"]) == (64, 4)


def test_the_memory_split_shows_the_cache_the_engine_reported_not_the_budgets(tmp_path):
    mem = triage(load_bundle(_bundle(tmp_path))).memory
    assert (mem.basis, mem.kv_cache_tokens, mem.kv_tokens_measured) == ("budget", MEASURED, True)
    assert mem.dynamic_gib == round(MEASURED * 131072 / 2**30, 2) == 2.33


def test_tgi_kv_usage_before_2_3_1_is_the_reservation_over_the_capacity_the_router_printed(tmp_path):
    ctx = build_context(load_bundle(_bundle(tmp_path)))
    assert ctx.kv_usage_ratio.value == pytest.approx(18900 / 19056)
    assert ctx.kv_usage_ratio.source == "metrics.txt, logs.txt"
    report = triage(load_bundle(tmp_path))
    assert report.verdict.primary == "kv_cache_pressure"
    # 99.2% of the budget reserved: the usage finding, critical, for KV-cache pressure
    usage = next(f for f in report.findings if f.id == "kv_usage_high")
    assert (usage.severity, usage.supports) == ("critical", ("kv_cache_pressure",))


def test_without_the_log_the_page_alone_gives_no_usage(tmp_path):
    _bundle(tmp_path)
    (tmp_path / "logs.txt").unlink()
    assert build_context(load_bundle(tmp_path)).kv_usage_ratio is None
    assert parse_metrics(METRICS).kv_cache_usage_ratio is None


def test_a_value_the_launch_printed_is_the_current_one_and_is_not_set_again(tmp_path):
    """TGI printed 4095 / 4096 as the limits it chose: a plan setting them to those changes nothing."""
    report = triage(load_bundle(_bundle(tmp_path)))
    for action in report.actions:
        for change in action.changes:
            assert (getattr(change, "flag", None), change.new) not in {("max-input-tokens", 4095), ("max-total-tokens", 4096)}, action
    # the safe flags move only the batch size: the title names only what the action moves
    safe = next(a for a in report.actions if a.id == "set_safe_flags")
    assert [(c.flag, c.old, c.new) for c in safe.changes] == [("max-batch-size", 64, 4)]
    assert safe.params["args"] == "--max-batch-size=4"


def test_flags_at_the_edge_on_load_alone_name_no_failure(tmp_path):
    report = triage(load_bundle(_bundle(tmp_path)))
    assert report.flags_at_edge and {e.reason for e in report.flags_at_edge} == {"edge_by_load"}


@pytest.mark.parametrize(("selector", "gpu"), [
    ("nvidia.com/gpu.product: NVIDIA-A10G", "A10G"),
    ("cloud.google.com/gke-accelerator: nvidia-l4", "L4"),
    # several cards, or one the catalog does not know: the pod may land on another
    ('cloud.google.com/gke-accelerator: "nvidia-l4,nvidia-tesla-t4"', None),
    ("nvidia.com/gpu.product: NVIDIA-Some-Future-Card", None),
    ("kubernetes.io/os: linux", None),
])
def test_the_card_comes_from_the_node_selector_only_where_it_pins_one(tmp_path, selector, gpu):
    ctx = build_context(load_bundle(_bundle(tmp_path, selector)))
    assert ctx.gpu_name == gpu
    assert (ctx.budget is not None) == (gpu is not None)


def test_pinned_gpu_of_labels_joins_both_labels():
    assert pinned_gpu_of_labels({"nvidia.com/gpu.product": "NVIDIA-L4",
                                 "cloud.google.com/gke-accelerator": "nvidia-l4"}).name == "L4"
    assert pinned_gpu_of_labels({"nvidia.com/gpu.product": "NVIDIA-L4",
                                 "cloud.google.com/gke-accelerator": "nvidia-tesla-t4"}) is None


def _budget_json(capsys, argv: list[str]) -> tuple[int, dict | str]:
    rc = main(argv)
    out = capsys.readouterr()
    try:
        return rc, json.loads(out.out)
    except json.JSONDecodeError:
        return rc, out.out + out.err


def test_budget_sizes_the_safe_flags_on_the_capacity_it_is_told_the_engine_reported(tmp_path, capsys):
    access = tmp_path / "access.log"
    access.write_text("".join(f"prompt_tokens={1000 + i % 500} completion_tokens={200 + i % 300}\n"
                              for i in range(400)))
    base = ["budget", "--engine", "tgi", "--engine-version", "2.2.0", "--model", "meta-llama/Llama-3.1-8B-Instruct",
            "--gpu", "A10G", "--max-num-seqs", "64", "--profile", str(access), "--json"]
    _, computed = _budget_json(capsys, base)
    _, anchored = _budget_json(capsys, [*base, "--reported-kv-tokens", str(MEASURED)])
    assert (computed["plan"]["kv_pool_basis"], anchored["plan"]["kv_pool_basis"]) == ("budget", "engine_anchored")
    assert anchored["plan"]["kv_cache_tokens"] < computed["plan"]["kv_cache_tokens"]
    assert anchored["plan"]["max_num_seqs"] < computed["plan"]["max_num_seqs"]
    reason = next(r for r in anchored["plan"]["reasons"] if r["id"] == "pool_from_engine")
    assert reason["params"]["measured"] == MEASURED and reason["params"]["computed_running"] == COMPUTED
    assert f"the {MEASURED:,} the engine reported at the running flags (--reported-kv-tokens)" in reason["text"]
    # the page's prediction is that pool's, one figure for the cache and the requests it holds
    main([*base[:-1], "--reported-kv-tokens", str(MEASURED)])
    text = capsys.readouterr().out
    pool = anchored["plan"]["kv_cache_tokens"]
    assert f"Predicted with these flags: KV cache {round(pool * 131072 / 2**30, 2)} GiB = {pool:,} tokens;" in text
    assert f"{pool // anchored['plan']['max_model_len']} requests at once" in text


def test_reported_kv_tokens_without_a_profile_is_refused_with_what_to_add(capsys):
    rc = main(["budget", "--engine", "tgi", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "A10G",
               "--reported-kv-tokens", "19056"])
    err = capsys.readouterr()
    assert rc == 2
    assert "--reported-kv-tokens needs --profile" in err.out + err.err


@pytest.mark.parametrize(("engine", "version", "key"), [
    ("tgi", "2.2.0", "computed_unmatched"), ("tgi", "2.0.4", "computed"), ("vllm", "0.10.1", "computed")])
def test_the_budget_page_says_how_far_its_figure_is_from_the_engines_for_that_version(capsys, engine, version, key):
    from bot.render.i18n import Catalog

    main(["budget", "--engine", engine, "--engine-version", version, "--model", "meta-llama/Llama-3.1-8B-Instruct",
          "--gpu", "A10G"])
    out = capsys.readouterr().out
    en = Catalog.load("en")
    assert en.t(f"budget_cli.{key}") in out
    other = "computed" if key == "computed_unmatched" else "computed_unmatched"
    assert en.t(f"budget_cli.{other}") not in out


V1_DEPLOYMENT = """\
apiVersion: apps/v1
kind: Deployment
metadata: {name: qwen-chat, namespace: ml}
spec:
  replicas: 3
  selector: {matchLabels: {app: qwen-chat}}
  template:
    metadata: {labels: {app: qwen-chat}}
    spec:
      nodeSelector: {cloud.google.com/gke-accelerator: nvidia-l4}
      containers:
        - name: vllm
          image: vllm/vllm-openai:v0.10.1
          args: ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "32768"]
          resources: {limits: {nvidia.com/gpu: "1"}}
"""
V1_METRICS = """\
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 9
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 31
vllm:kv_cache_usage_perc{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 0.97
vllm:num_preemptions_total{engine="0",model_name="Qwen/Qwen2.5-7B-Instruct"} 412
"""


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_context_cap_without_measured_lengths_says_it_is_the_template_not_a_p99(tmp_path, capsys, lang):
    (tmp_path / "deployment.yaml").write_text(V1_DEPLOYMENT)
    (tmp_path / "metrics.txt").write_text(V1_METRICS)
    report = triage(load_bundle(tmp_path))
    cap = next(a for a in report.actions if a.id == "cap_max_model_len")
    assert (cap.params["current"], cap.params["target"], cap.params["variant"]) == (32768, 4096, "template")
    main(["triage", "--bundle", str(tmp_path), "--lang", lang])
    out = capsys.readouterr().out
    from bot.render.i18n import Catalog

    cat = Catalog.load(lang)
    assert cat.t("action.cap_max_model_len.title_template", flag="max-model-len", current="32,768",
                 target=4096) in out
    p99 = cat.t("action.cap_max_model_len.title", flag="max-model-len", current="32,768", target=4096)
    assert p99 not in out


def test_a_context_cap_from_measured_lengths_keeps_the_p99_title(tmp_path):
    (tmp_path / "deployment.yaml").write_text(V1_DEPLOYMENT)
    (tmp_path / "metrics.txt").write_text(V1_METRICS)
    (tmp_path / "access.log").write_text("".join(f"prompt_tokens={800 + i % 900} completion_tokens={100 + i % 200}\n"
                                                 for i in range(500)))
    report = triage(load_bundle(tmp_path))
    cap = next(a for a in report.actions if a.id == "cap_max_model_len")
    assert "variant" not in cap.params and cap.params["target"] < 32768


def test_a_budget_warning_is_worded_and_counts_only_for_the_cause_it_is_about(tmp_path):
    from bot.render.i18n import Catalog
    from bot.render.wording import fact_text
    from runbooks.triage.checks.parallelism import _budget_warning

    report = triage(load_bundle(_bundle(tmp_path)))
    note = next(f for f in report.findings if f.facts and f.facts[0].params.get("warning") == "tgi_kv_optimistic")
    # a limit of the budget's own figures: said, at info, for no cause (it used to be counted
    # as a contradiction in the flags for parallelism_misconfig, worded as its key)
    assert (note.id, note.severity, note.supports) == ("budget_note", "info", ())
    for lang in ("en", "zh"):
        cat = Catalog.load(lang)
        assert fact_text(cat, note.facts[0]) == cat.t("budget_cli.warning.tgi_kv_optimistic")
    assert _budget_warning("tp_exceeds_kv_heads_replicated").supports == ("parallelism_misconfig",)
    assert _budget_warning("headroom_negative").supports == ("params_near_edge",)
    assert _budget_warning("bf16_unsupported_on_gpu").supports == ()


def test_every_budget_warning_has_words_in_both_languages():
    import yaml

    root = Path(__file__).resolve().parent.parent / "bot" / "render" / "locales"
    sizing = Path(__file__).resolve().parent.parent / "runbooks" / "sizing"
    import re

    keys = {m for p in sizing.glob("*.py") for m in re.findall(r'notes\.warn\("([a-z0-9_]+)"', p.read_text())}
    assert "tgi_kv_optimistic" in keys
    for lang in ("en", "zh"):
        words = yaml.safe_load((root / f"{lang}.yaml").read_text())["budget_cli"]["warning"]
        assert keys <= set(words), (lang, sorted(keys - set(words)))


def test_not_checked_names_what_is_missing_and_asks_tgi_for_nothing_it_does_not_print():
    """tgi-1599 (a docker command for TGI 1.4 serving Mixtral, tests/data/real): the model is known,
    the card is not; TGI prints no stats lines, so its log is not asked for them."""
    from runbooks.triage.health import capture_next

    evidence = load_bundle(Path(__file__).parent / "data" / "real" / "tgi-1599-l40s-saturates-preallocated")
    report = triage(evidence)
    missing = {f.key for f in report.not_checked}
    assert "missing_static_no_gpu" in missing and "missing_static" not in missing
    assert "missing_kv_usage_tgi" in missing and "missing_kv_usage" not in missing
    asked = {f.key for f in capture_next(build_context(evidence))}
    assert "capture_logs" not in asked and "capture_logs_tgi" not in asked
    assert {"capture_metrics", "capture_nvidia_smi"} <= asked
