"""One figure per fact: `gpumem triage` and `gpumem budget --profile` on the same bundle name the
same p95 request, the same cap on requests at once and the same answer to "does a full batch
fit", and where their pools differ (the engine's measured one against gpumem's computed one)
each says which it shows; inside one triage report each fact has one value."""

from __future__ import annotations

import json
from pathlib import Path

from bot.main import main

INCIDENT = Path(__file__).resolve().parent.parent / "examples" / "runbook-incident"


def _run(capsys, *argv: str) -> tuple[int, str]:
    rc = main([*argv])
    return rc, capsys.readouterr().out


def _fact(report: dict, key: str) -> dict:
    for check in report["checks"]:
        for finding in check["findings"]:
            for f in finding["facts"]:
                if f["key"] == key:
                    return f
    raise AssertionError(f"no {key} fact")


def test_triage_and_budget_profile_agree_on_the_same_bundle(capsys):
    rc, out = _run(capsys, "triage", "--bundle", str(INCIDENT), "--json")
    assert rc == 1  # a cause found
    report = json.loads(out)
    demand = _fact(report, "kv_demand")
    rc, out = _run(capsys, "budget", "--from-deployment", str(INCIDENT / "deployment.yaml"), "--profile",
                   str(INCIDENT / "access.log"), "--json")
    assert rc == 0  # starts and fits
    budget = json.loads(out)
    # the p95 request: the exact p95 of input + output (7902), never input p95 + output p95 (8031)
    assert demand["params"]["tokens_per_request"] == budget["plan"]["p95_tokens"] == 7902
    # requests at once: 142 running and waiting, but the engine runs at most --max-num-seqs 128
    assert demand["params"]["concurrent"] == budget["max_num_seqs"] == budget["concurrency"] == 128
    assert demand["params"]["admitted"] == "cap:--max-num-seqs 128"
    # the pools: triage takes the engine's own (measured), budget computes it from the flags
    # and says so; the two are within 2% of each other
    assert (demand["params"]["capacity_tokens"], demand["params"]["pool"]) == (1108880, "measured")
    assert report["memory"]["kv_cache_tokens"] == 1108880 and report["memory"]["kv_tokens_measured"] is True
    assert budget["kv_cache_tokens"] == 1120992
    assert abs(budget["kv_cache_tokens"] / demand["params"]["capacity_tokens"] - 1) < 0.02
    # and the same answer: a full batch of the mix fits, near the edge (triage: 91.2% of the pool)
    assert budget["buckets"]["status"] == "absorbs_all_long"
    assert demand["params"]["demand_pct"] == 91.2
    assert not any(f["id"] == "kv_demand_exceeds_capacity" for f in report["findings"])
    rc, text = _run(capsys, "budget", "--from-deployment", str(INCIDENT / "deployment.yaml"), "--profile",
                    str(INCIDENT / "access.log"))
    assert rc == 0
    assert "every figure here is computed by gpumem from the flags" in text


def test_a_triage_report_shows_each_fact_once(capsys):
    rc, text = _run(capsys, "triage", "--bundle", str(INCIDENT))
    assert rc == 1
    # the pool and the KV cache: the engine's measured figures, labelled; gpumem's computed ones
    # (1,120,992 tokens, 59.87 GiB) do not appear beside them
    assert "KV cache 59.22 GiB = 1,108,880 tokens · card 80 GiB · measured by the engine at start-up" in text
    assert "on the engine's measured pool of 1,108,880 tokens" in text
    for other in ("1,120,992", "59.87 GiB", "8031", "8,031", "14.19 GiB"):
        assert other not in text, other
    assert "(measured by the engine): 91.2%, computed by gpumem" in text
