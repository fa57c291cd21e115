"""A change's notation ("--max-num-seqs (default) -> 64") in the reader's language: the English
words plans store are the catalog's English, and the Chinese has no English of gpumem's own."""

from __future__ import annotations

import re

import pytest

from bot.render.i18n import Catalog
from bot.render.records import plans_text
from bot.render.wording import change_text, change_words, restored_text
from runbooks.model import changes as C

EN, ZH = Catalog.load("en"), Catalog.load("zh")

SAMPLES = [
    C.SetArg("vllm", "max-num-seqs", None, 64),
    C.SetArg("vllm", "enforce-eager", True, None),
    C.Scale(None, 3),
    C.Scale(2, 3, "minReplicas"),
    C.AddStartupProbe("vllm", "/health", None, 600),
    C.AddStartupProbe("vllm", None, 300, 900),
    C.HpaOnQueueDepth(None, None, 5),
    C.HpaOnQueueDepth("vllm:num_requests_waiting", "Resource cpu 80%", 8),
    C.LowerMaxSurge("maxSurge", None, 0),
    C.AddShm("vllm", None, "16Gi"),
    C.RaiseMemoryLimit("vllm", "limits.memory", None, "96Gi"),
    C.RaiseMemoryLimit("vllm", "requests.memory", "64Gi", "96Gi"),
    C.SplitPools("vllm", "threshold", None, 2048),
    C.SplitPools("vllm", "Deployment", None, "create Deployment/vllm-server-long"),
    C.SplitPools(None, "routing", None, "confirmed by U0SRE: prompt tokens > 2048 -> Service/vllm-server-long"),
]

#: what the Chinese notation keeps: Kubernetes fields and objects, flags, metric names, values
KEPT = re.compile(r"--[\w-]+|vllm:\w+|startupProbe|emptyDir Memory|maxSurge|minReplicas|HPA|Pods|GET|/health|"
                  r"/dev/shm|Resource cpu|\d+Gi|True|token|Deployment/vllm-server-long|Service/vllm-server-long|U0SRE")


def test_the_english_catalog_words_the_notation_as_plans_store_it():
    assert {k.removeprefix("change_notation.") for k in EN.messages if k.startswith("change_notation.")} == set(C.WORDS)
    assert {k for k in ZH.messages if k.startswith("change_notation.")} == {f"change_notation.{k}" for k in C.WORDS}
    for change in SAMPLES:
        assert change_text(EN, change) == change.describe()
        assert restored_text(EN, change) == change.restored()


@pytest.mark.parametrize("change", SAMPLES, ids=lambda c: f"{c.kind}-{c.slot}")
def test_the_chinese_notation_has_no_english_of_its_own(change):
    texts = [change_text(ZH, change), restored_text(ZH, change)]
    if change.slot == "routing":  # a confirmed routing is not written back
        assert texts.pop() is None
    for text in texts:
        assert text and "None" not in text and "split_pools" not in text
        assert re.findall(r"[A-Za-z]{2,}", KEPT.sub(" ", text)) == [], text
        assert "(" not in text and ")" not in text


def test_no_change_reads_none_or_a_raw_kind_in_english():
    assert C.SetArg("vllm", "enforce-eager", True, None).describe() == "--enforce-eager True -> (default)"
    assert C.SplitPools("vllm", "threshold", None, 2048).restored() == (
        "one pool again: prompts over 2048 tokens no longer go to a long pool")
    assert C.SplitPools("vllm", "Deployment", None, "create Deployment/x-long").describe() == "create Deployment/x-long"
    assert C.SplitPools("vllm", "Deployment", None, "create Deployment/x-long").restored() == "delete Deployment/x-long"
    assert C.SplitPools(None, "routing", None, "confirmed by U1: prompt tokens > 2048 -> Service/x-long").describe() == (
        "routing confirmed by U1: prompts over 2048 tokens to Service/x-long")


def test_a_plans_default_and_absent_values_read_in_chinese():
    assert C.SetArg(None, "max-num-seqs", None, 64).describe(change_words(ZH)) == "--max-num-seqs （默认） -> 64"
    assert change_text(ZH, C.AddShm("vllm", None, "16Gi")) == "/dev/shm （无） -> emptyDir Memory 16Gi"
    assert change_text(ZH, C.Scale(2, 3)) == "副本数 2 -> 3"
    # a stored change (plans and the handover keep them as dicts) reads the same
    assert change_text(ZH, C.SetArg(None, "max-num-seqs", None, 64).to_stored()) == "--max-num-seqs （默认） -> 64"


def test_gpumem_plans_in_chinese_words_a_default(tmp_path):
    from datetime import UTC, datetime

    from bot.actuator.writer import KubeWriter
    from bot.service import remediate
    from bot.store.db import Store
    from runbooks.remediation.policy import ApprovalPolicy
    from tests.support.kube_fixtures import running_scenario

    with running_scenario("vllm-incident", tmp_path) as sc:
        store = Store.open(tmp_path / "gpumem.db")
        request = remediate.PlanRequest("llm", "vllm-server", flags=(("max-num-batched-tokens", 4096),),
                                        requested_by="cli:oncall")
        remediate.make_plan(store, KubeWriter(sc.api("prod")), request, ApprovalPolicy(), now=datetime.now(UTC))
        plans = store.plans()
    zh, en = plans_text(plans, "zh"), plans_text(plans, "en")
    assert "--max-num-batched-tokens （默认） -> 4096" in zh and "(default)" not in zh
    assert "--max-num-batched-tokens (default) -> 4096" in en
