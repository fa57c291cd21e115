"""TGI's --cuda-memory-fraction is a cap on torch (`torch.cuda.set_per_process_memory_fraction`),
and its KV cache is sized inside that cap: a lower fraction shrinks the cache and gives
activations no more room. What triage offers for it: a raised cap where torch was refused under
it while starting and the card had room; TGI_WIGGLE_ROOM (from 2.3.0) as the margin while
serving; never a lowered fraction "for activations"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from bot.render.i18n import Catalog
from bot.render.wording import action_text
from collectors.bundle import load_bundle
from collectors.parsers.flags import server_config_from_container
from collectors.parsers.logs import parse_server_log
from runbooks.catalogs.models import find_model
from runbooks.catalogs.torch_oom import render
from runbooks.model.changes import SetArg
from runbooks.model.evidence import Evidence
from runbooks.sizing.budget import compute_budget, inputs_from_config
from runbooks.triage.runbook import triage

REAL = Path(__file__).parent / "data" / "real"
#: torch 2.1's wording (it printed "capacty"), under a 0.75 cap of a 79.15 GiB card: 59.25 GiB
#: held and asked for, 59.36 allowed, 14 GiB free on the card
SIZES = {"tried": "1.25 GiB", "new.total": "79.15 GiB", "new.total_misspelt": "79.15 GiB", "new.free": "14.00 GiB",
         "new.this_process": "62.00 GiB", "new.allowed": "59.36 GiB", "new.allocated": "57.00 GiB",
         "new.unallocated": "1.00 GiB"}
LAUNCH = "text-generation-launcher --model-id meta-llama/Llama-2-13b-hf --cuda-memory-fraction 0.75 --port 80\n"
PHASE_LINES = {"warmup": "INFO text_generation_router: router/src/main.rs:210: Warming up model\n",
               "serving": "ERROR batch{batch_size=1}:prefill:prefill{id=12 size=1}: text_generation_client\n"}


def _ids(report) -> list[str]:
    return [a.id for a in report.actions]


def _tgi_oom(phase: str, **sizes: str):
    text = LAUNCH + PHASE_LINES[phase] + render((2, 1, 0), "caching", {**SIZES, **sizes}) + "\n"
    logs = parse_server_log(text)
    return triage(Evidence(logs=logs, server_config=logs.server_config))


def test_a_warm_up_refused_under_the_cap_raises_the_cap_to_what_it_needed():
    report = _tgi_oom("warmup")
    action = next(a for a in report.actions if a.id == "raise_process_fraction")
    # 59.25 GiB needed is 0.749 of the card; with 0.05 of the card beside it, 0.80
    assert (action.params["current"], action.params["target"], action.params["need_gib"]) == (0.75, 0.8, 59.25)
    assert action.changes == (SetArg(None, "cuda-memory-fraction", 0.75, 0.8),)
    # the start-up fix stands alone: no stop-the-bleeding flags or margin beside it
    assert not {"set_safe_flags", "add_memory_margin", "lower_memory_fraction"} & set(_ids(report))
    en, zh = (action_text(Catalog.load(lang), action)["title"] for lang in ("en", "zh"))
    assert "from 0.75 to 0.8" in en and "59.36 GiB" in en and "59.25 GiB" in en
    assert "0.75" in zh and "0.8" in zh and "59.36 GiB" in zh


def test_no_raise_where_the_card_has_not_the_room():
    # 0.80 x 79.15 - 59.36 = 3.96 GiB more is needed; 2 GiB free (the request, 1.25, still fits)
    assert "raise_process_fraction" not in _ids(_tgi_oom("warmup", **{"new.free": "2.00 GiB"}))
    assert "raise_process_fraction" in _ids(_tgi_oom("warmup", **{"new.free": "4.00 GiB"}))


def test_no_raise_while_serving():
    """A serving TGI sized its KV cache inside the cap at warm-up: the raised cap would go to a
    cache sized again at the next start, not to the OOM's activations."""
    report = _tgi_oom("serving")
    assert "raise_process_fraction" not in _ids(report)
    assert "add_memory_margin" not in _ids(report)


@pytest.mark.parametrize(("case", "version", "wiggle"), [
    ("tgi-653-llama2-7b-a10g-k8s-prefill-oom", None, "check_tgi_version_for_wiggle"),
    ("tgi-1356-out-of-cache-blocks-process-79g", None, "check_tgi_version_for_wiggle"),
    # its router's source lines (router/src/infer.rs:608 and others) are 1.3.3's and 1.3.4's only,
    # as the thread's "~1.3" has it: a release without TGI_WIGGLE_ROOM
    ("tgi-1374-a100-40g-oom-after-warmup", "1.3.3-1.3.4", "upgrade_tgi_for_wiggle_room"),
])
def test_real_tgi_ooms_are_not_told_a_lower_fraction_frees_room(case, version, wiggle):
    """Each thread's card was full at a fraction of 1.0 (tgi-653: 22.20 GiB allowed of 22.20):
    no cap refused it. Where the paste does not bound the version, what to check is the version."""
    ev = load_bundle(REAL / case)
    assert ev.logs.engine_version == version
    report = triage(ev)
    ids = _ids(report)
    assert not {"add_memory_margin", "lower_memory_fraction", "lower_memory_fraction_to",
                "raise_process_fraction"} & set(ids)
    assert wiggle in ids
    for action in report.actions:
        assert not any(getattr(c, "flag", None) == "cuda-memory-fraction" for c in action.changes)


def _tgi653(tag: str, env: dict[str, str] | None = None):
    ev = load_bundle(REAL / "tgi-653-llama2-7b-a10g-k8s-prefill-oom")
    cfg = server_config_from_container({
        "name": "tgi", "image": f"ghcr.io/huggingface/text-generation-inference:{tag}",
        "args": ["--model-id", "meta-llama/Llama-2-7b-hf", "--cuda-memory-fraction", "0.99"],
        "env": [{"name": k, "value": v} for k, v in (env or {}).items()]})
    return triage(replace(ev, server_config=cfg))


@pytest.mark.parametrize(("tag", "env", "current", "target"), [
    ("2.4.1", None, 0.9, 0.85),            # 2.4's default
    ("3.1.0", None, 0.93, 0.88),           # 3.1-3.2's
    ("3.3.7", {"TGI_WIGGLE_ROOM": "0.97"}, 0.97, 0.92),  # the container's own value
    ("2.3.0", {"TGI_WIGGLE_ROOM": "1.5"}, 0.95, 0.9),    # TGI asserts 0 < w < 1: not a value it runs
])
def test_from_2_3_0_the_serving_margin_is_the_wiggle_room(tag, env, current, target):
    report = _tgi653(tag, env)
    action = next(a for a in report.actions if a.id == "lower_wiggle_room")
    assert (action.params["current"], action.params["target"]) == (current, target)
    # up to the step's share of the capped card: 0.05 x 0.99 x 22.2 GiB
    assert action.params["gain_gib"] == 1.1
    assert "TGI_WIGGLE_ROOM=" + f"{target:g}" in action_text(Catalog.load("en"), action)["title"]
    assert "check_tgi_version_for_wiggle" not in _ids(report)


@pytest.mark.parametrize(("tag", "share"), [("1.4.0", 1.0), ("2.0.4", 0.95), ("2.2.0", 0.95)])
def test_before_2_3_0_the_share_is_fixed_and_only_an_upgrade_moves_it(tag, share):
    report = _tgi653(tag, {"TGI_WIGGLE_ROOM": "0.8"})  # not read before 2.3.0
    ids = _ids(report)
    assert "lower_wiggle_room" not in ids
    action = next(a for a in report.actions if a.id == "upgrade_tgi_for_wiggle_room")
    assert (action.params["share"], action.tier) == (share, "escalate")


def test_another_engine_refused_under_a_cap_is_told_to_find_who_set_it():
    """vLLM and SGLang set no per-process cap: the refusal came from code beside them."""
    text = ("vllm serve meta-llama/Llama-2-13b-hf --gpu-memory-utilization 0.9\n"
            "INFO 01-01 00:00:00 model_runner.py:1: Loading model weights took 24.3 GiB\n"
            + render((2, 1, 0), "caching", SIZES) + "\n")
    logs = parse_server_log(text)
    report = triage(Evidence(logs=logs, server_config=logs.server_config))
    action = next(a for a in report.actions if a.id == "find_memory_cap")
    assert (action.params["allowed_gib"], action.params["total_gib"], action.changes) == (59.36, 79.15, ())
    assert "raise_process_fraction" not in _ids(report)
    assert "set_per_process_memory_fraction" in action_text(Catalog.load("zh"), action)["title"]


def test_the_budget_reads_the_containers_wiggle_room_from_2_3_0():
    model = find_model("meta-llama/Llama-2-7b-hf")

    def kv(tag: str, env: dict[str, str]) -> float:
        cfg = server_config_from_container({
            "name": "tgi", "image": f"ghcr.io/huggingface/text-generation-inference:{tag}",
            "args": ["--model-id", "meta-llama/Llama-2-7b-hf"], "env": [{"name": k, "value": v} for k, v in env.items()]})
        return compute_budget(model, inputs_from_config(cfg, 79.15)).kv_cache_gib

    # TGI 3.x: free - (1 - wiggle) x total, so 0.05 less wiggle is 0.05 x 79.15 GiB less cache
    assert kv("3.3.7", {}) - kv("3.3.7", {"TGI_WIGGLE_ROOM": "0.85"}) == pytest.approx(0.05 * 79.15, abs=0.05)
    # 2.2.0 reads no such variable
    assert kv("2.2.0", {"TGI_WIGGLE_ROOM": "0.5"}) == kv("2.2.0", {})
