"""Every remediation output says what it knows in words, and the Chinese ones are Chinese: the
watch's notes and the reasons a write, a dry run, a rollback or a reconcile failed or was refused
(`runbooks.model.phrases.Phrase`, worded by the catalogs under `phrase.`), in the plan status
messages, the terminal `gpumem plan`, `apply` and its watch, `rollback`, and a reconcile pass.

The checks are those of tests/test_every_output_words.py (its zh check: no English word outside
flags, metric names, commands, quoted lines and names); the terminal runs go against the stand-in
API server the other remediation tests use (tests/support/fake_kube.py).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.cli import remediate as cli
from bot.config.environ import read_environment
from bot.grammar.commands import parse_argv
from bot.main import main
from bot.render import remediation as render
from bot.render import slack_remediation as P
from bot.render.i18n import Catalog
from bot.render.terminal import InertStream
from bot.service.deps import Deps
from bot.service.reconcile import reconcile_applying
from bot.store.db import Store
from runbooks.model.phrases import Phrase, phrase_of
from tests.support.kube_fixtures import manual_clock, running_scenario
from tests.test_every_output_words import _COMMAND, _NAME, _RAW_IDS, _UNSAID, ZH_ALLOWED, _prose, _slack_texts
from tests.test_slack_remediation_render import _stored

ROOT = Path(__file__).resolve().parent.parent
EN, ZH = Catalog.load("en"), Catalog.load("zh")
#: Kubernetes terms the notes and reasons name as the manifests spell them (as ZH_ALLOWED keeps
#: RollingUpdate and resourceVersion): an update strategy, an object's uid
K8S_TERMS = {"OnDelete", "uid"}
TARGET = "llm/vllm-server"
WRITE = r"deployments/vllm-server\?fieldManager=gpumem$"


def english(text: str) -> list[str]:
    """The English words of a Chinese output that the zh check of test_every_output_words refuses."""
    out = []
    for line in text.splitlines():
        prose = _NAME.sub(" ", _COMMAND.sub(" ", _prose(line)))
        out += [w for w in re.findall(r"[A-Za-z][A-Za-z']*", prose) if w not in ZH_ALLOWED | K8S_TERMS]
    return out


def unsaid(text: str) -> list[str]:
    """Lines that leave a value unsaid (`?`, n/a, None) or show a raw id (`rolled_back`)."""
    return [line for line in text.splitlines() if _UNSAID.search(_prose(line)) or _RAW_IDS.search(_prose(line))]


def test_the_check_sees_an_english_note_left_in_a_chinese_line():
    assert english("失败：“1 restart in new pods”。") == []  # quoted: not ours to translate
    assert english("失败：1 restart in new pods。") == ["restart", "in", "new"]
    assert english("更新策略为 OnDelete：Pod 只有在被人删除后才会采用变更") == []


# ------------------------------------------------------------------ each note and reason kind

#: every watch note the catalogs word: the phrase, its English (as the watch wrote it before
#: notes were phrases), its Chinese
NOTES: list[tuple[Phrase, str, str]] = [
    (Phrase("watch.deadline"), "progress deadline exceeded", "滚动更新超过了进度期限"),
    (Phrase("watch.partition", {"partition": 2}), "partition 2: the pods below ordinal 2 keep the old template",
     "滚动分区为 2：序号低于 2 的 Pod 保留旧模板"),
    (Phrase("watch.on_delete"), "updateStrategy OnDelete: a pod takes the change only once someone deletes it",
     "更新策略为 OnDelete：Pod 只有在被人删除后才会采用变更"),
    (Phrase("watch.leader", {"note": Phrase("watch.partition", {"partition": 1})}),
     "leader StatefulSet: partition 1: the pods below ordinal 1 keep the old template",
     "领导者 StatefulSet：滚动分区为 1：序号低于 1 的 Pod 保留旧模板"),
    (Phrase("watch.restarts_new", {"count": 1}), "1 restart in new pods", "新 Pod 重启 1 次"),
    (Phrase("watch.restarts_since", {"count": 3}), "3 restarts in pods that ran before the change, since it",
     "变更前已在运行的 Pod 自变更以来重启 3 次"),
    (Phrase("watch.ooms_new", {"count": 2}), "2 CUDA OOM lines in new pods' logs", "新 Pod 的日志中有 2 行 CUDA OOM"),
    (Phrase("watch.ooms_since", {"count": 1}),
     "1 CUDA OOM line in the logs of pods that ran before the change, since it",
     "变更前已在运行的 Pod 的日志中自变更以来有 1 行 CUDA OOM"),
    (Phrase("watch.pressure_new", {"count": 12}), "12 preemption or reject lines in new pods' logs",
     "新 Pod 的日志中有 12 行抢占或拒绝记录"),
    (Phrase("watch.pressure_since", {"count": 1}),
     "1 preemption or reject line in the logs of pods that ran before the change, since it",
     "变更前已在运行的 Pod 的日志中自变更以来有 1 行抢占或拒绝记录"),
    (Phrase("watch.prometheus_unread", {"error": "ConnectionError: connection refused"}),
     "Prometheus not read: ConnectionError: connection refused",
     "未能读取 Prometheus（“ConnectionError: connection refused”）"),
    (Phrase("watch.kv_usage_high", {"usage": "97%", "high": "90%"}), "KV cache usage 97% (at or above 90%)",
     "KV cache 使用率 97%（达到或超过 90%）"),
    (Phrase("watch.preemptions", {"count": 57, "minutes": 2}), "57 preemptions in the last 2 min",
     "最近 2 分钟内抢占 57 次"),
    (Phrase("watch.retractions", {"count": 1, "minutes": 2}), "1 retraction in the last 2 min",
     "最近 2 分钟内撤回 1 次"),
    (Phrase("watch.not_rolled_out"), "not rolled out within the watch window", "观察窗口内未完成滚动更新"),
]

#: every failure reason the catalogs word, likewise
REASONS: list[tuple[Phrase, str, str]] = [
    (Phrase("reason.list", {"items": [Phrase("reason.split_absent", {"what": "Service/vllm-long"}), "HTTP 503"]}),
     "Service/vllm-long is not there; HTTP 503", "Service/vllm-long 不存在；HTTP 503"),
    (Phrase("reason.not_there", {"kind": "Deployment", "namespace": "llm", "name": "vllm"}),
     "Deployment llm/vllm is not there", "Deployment llm/vllm 不存在"),
    (Phrase("reason.object_gone", {"target": "prod:llm/deployment/vllm"}),
     "the object is not there: prod:llm/deployment/vllm", "对象不存在：prod:llm/deployment/vllm"),
    (Phrase("reason.still_there", {"what": "Deployment llm/vllm", "uid": "u-1"}),
     "Deployment llm/vllm is still there (uid u-1)", "Deployment llm/vllm 仍然存在（uid u-1）"),
    (Phrase("reason.annotation_absent", {"annotation": "gpumem.io/plan", "plan": "p-1"}),
     "the object's gpumem.io/plan annotation is absent, not p-1", "对象没有 gpumem.io/plan 注解（应为 p-1）"),
    (Phrase("reason.annotation_other", {"annotation": "gpumem.io/plan", "named": "p-2", "plan": "p-1"}),
     "the object's gpumem.io/plan annotation is p-2, not p-1", "对象的 gpumem.io/plan 注解为 p-2，而不是 p-1"),
    (Phrase("reason.still_written", {"paths": "/spec/replicas"}),
     "the values the plan wrote are still on the object: /spec/replicas", "计划写入的值仍在对象上：/spec/replicas"),
    (Phrase("reason.not_written", {"paths": "/spec/replicas"}),
     "the values the plan writes are not on the object: /spec/replicas", "计划要写入的值不在对象上：/spec/replicas"),
    (Phrase("reason.in_flight", {"why": Phrase("reason.not_written", {"paths": "/spec/replicas"}), "seconds": "60"}),
     "not there yet (the values the plan writes are not on the object: /spec/replicas); with no answer the API "
     "server may still be at work on the request: read again after 60 s",
     "尚未出现（计划要写入的值不在对象上：/spec/replicas）；由于没有响应，kube-apiserver 可能仍在处理该请求：请在 60 秒后重新读取"),
    (Phrase("reason.answer_not_json"), "the answer was not JSON", "响应不是 JSON"),
    (Phrase("reason.answer_not_object"), "the answer was not a JSON object", "响应不是 JSON 对象"),
    (Phrase("reason.of_object", {"what": "Service/vllm-long", "why": "HTTP 503"}), "Service/vllm-long: HTTP 503",
     "Service/vllm-long：HTTP 503"),
    (Phrase("reason.split_there", {"what": "Deployment/vllm-long", "annotation": "gpumem.io/plan"}),
     "Deployment/vllm-long is there with gpumem.io/plan naming the plan",
     "Deployment/vllm-long 已存在，其 gpumem.io/plan 注解指向本计划"),
    (Phrase("reason.split_absent", {"what": "Service/vllm-long"}), "Service/vllm-long is not there",
     "Service/vllm-long 不存在"),
    (Phrase("reason.split_not_ours", {"what": "Service/vllm-long", "annotation": "gpumem.io/plan", "named": "p-2",
                                      "plan": "p-1"}),
     "Service/vllm-long is there, but its gpumem.io/plan annotation is p-2, not p-1",
     "Service/vllm-long 已存在，但其 gpumem.io/plan 注解为 p-2，而不是 p-1"),
    (Phrase("reason.split_unannotated", {"what": "Service/vllm-long", "annotation": "gpumem.io/plan", "plan": "p-1"}),
     "Service/vllm-long is there, but its gpumem.io/plan annotation is absent, not p-1",
     "Service/vllm-long 已存在，但没有 gpumem.io/plan 注解（应为 p-1）"),
    (Phrase("reason.split_changed", {"what": "Deployment/vllm-long", "paths": "/spec/replicas"}),
     "Deployment/vllm-long reads differently at /spec/replicas", "Deployment/vllm-long 在 /spec/replicas 处与 gpumem 写入的不同"),
    (Phrase("reason.no_clone_sources"), "the plan names no Deployment and Service to clone",
     "计划没有指明要克隆的 Deployment 和 Service"),
    (Phrase("reason.created_still_there", {"objects": "Deployment/vllm-long"}), "still there: Deployment/vllm-long",
     "仍然存在：Deployment/vllm-long"),
    (Phrase("reason.created_object_still_there"), "the object gpumem created is still there", "gpumem 创建的对象仍然存在"),
    (Phrase("reason.neither", {"paths": "/spec/replicas"}),
     "the values are neither gpumem's nor the old ones at /spec/replicas", "/spec/replicas 处的值既不是 gpumem 写入的，也不是原来的"),
    (Phrase("reason.no_server_container"), "no inference server container", "没有推理服务容器"),
    (Phrase("reason.replicas_already", {"replicas": 2}), "replicas 2", "副本数已是 2"),
    (Phrase("reason.no_set_or_replicas"), "no --set or --replicas", "没有给出 --set 或 --replicas"),
    (Phrase("reason.no_set"), "no --set", "没有给出 --set"),
    (Phrase("reason.action_without_changes", {"action": "cap_max_model_len"}),
     "action cap_max_model_len carries no change", "操作 cap_max_model_len 不含任何变更"),
    (Phrase("reason.no_phase1"), "none", "无"),
    (Phrase("reason.no_template"), "no template", "没有记录模板"),
    (Phrase("reason.hpa_min_already", {"replicas": 2}), "HPA minReplicas 2", "HPA 的最小副本数已是 2"),
    (Phrase("reason.hpa_metrics_already", {"metric": "vllm:num_requests_waiting", "target": 8}),
     "HPA metrics already vllm:num_requests_waiting 8", "HPA 的指标已是 vllm:num_requests_waiting 8"),
    (Phrase("reason.startup_probe_already", {"container": "vllm", "seconds": 600}),
     "startupProbe of vllm already allows 600 s", "vllm 的 startupProbe 已允许 600 秒"),
    (Phrase("reason.shm_already", {"limit": "8Gi"}), "/dev/shm sizeLimit 8Gi", "/dev/shm 的 sizeLimit 已是 8Gi"),
    (Phrase("reason.max_surge_already", {"value": 0}), "maxSurge 0", "maxSurge 已是 0"),
    (Phrase("reason.flag_already", {"flag": "--max-model-len", "value": 4096}), "--max-model-len is 4096 already",
     "--max-model-len 已是 4096"),
    (Phrase("reason.not_a_list"), 'is not a list', '不是列表'),
    (Phrase("reason.several_hpas", {'kind': 'Deployment', 'name': 'vllm'}), 'several HPAs target Deployment vllm; fix that first', '有多个 HPA 指向 Deployment vllm；请先修正'),
    (Phrase("reason.hpa_min_one", {'hpa': 'vllm-queue'}), 'HPA vllm-queue scales this workload: its minReplicas must be at least 1', 'HPA vllm-queue 在伸缩此工作负载：其最小副本数至少为 1'),
    (Phrase("reason.metric_name"), 'a metric name without / or %', '应为不含 / 或 % 的指标名'),
    (Phrase("reason.hpa_exists", {'hpa': 'vllm-queue'}), 'HPA vllm-queue exists: change its maxReplicas with --replicas or by hand', 'HPA vllm-queue 已存在：请用 --replicas 或手工修改其最大副本数'),
    (Phrase("reason.hpa_max_low", {'low': 2}), 'must be at least the current replicas (2)', '不能小于当前副本数（2）'),
    (Phrase("reason.surge_format"), 'expected a whole number or a percentage like 25%', '应为整数或百分比，例如 25%'),
    (Phrase("reason.surge_rolling_only"), 'maxSurge applies to RollingUpdate only', 'maxSurge 只适用于 RollingUpdate'),
    (Phrase("reason.none_value"), '(none)', '（无）'),
    (Phrase("reason.no_memory_limit"), 'has no memory limit to raise: the container is not limited by one', '没有可提高的内存上限：该容器未设内存上限'),
    (Phrase("reason.limit_not_above", {'old': '48Gi'}), 'is not above the current limit 48Gi', '不高于当前上限 48Gi'),
    (Phrase("reason.memory_quantity"), 'expected a memory quantity like 16Gi or 64G', '应为内存数量，例如 16Gi 或 64G'),
    (Phrase("reason.whole_bytes"), 'is not a whole number of bytes', '不是整数字节'),
    (Phrase("reason.more_than_zero"), 'must be more than 0', '必须大于 0'),
    (Phrase("reason.not_memory_empty_dir"), 'not an emptyDir of medium Memory', '不是 medium 为 Memory 的 emptyDir'),
    (Phrase("reason.shm_other_volume"), '/dev/shm is mounted from another volume; change it by hand', '/dev/shm 挂载自其他卷；请手工修改'),
    (Phrase("reason.volume_exists"), 'a volume of that name exists already', '同名的卷已存在'),
]


def _emitted() -> set[str]:
    """The phrase keys bot/ and runbooks/ build: `Phrase("KEY"` literally, and the watch's computed counts."""
    keys: set[str] = set()
    for path in [*(ROOT / "bot").rglob("*.py"), *(ROOT / "runbooks").rglob("*.py")]:
        keys |= {k for k in re.findall(r'Phrase\(\s*"([a-z0-9_]+\.[a-z0-9_]+)"', path.read_text(encoding="utf-8"))
                 if k.startswith(("watch.", "reason."))}  # reads, flags, the grammar: tests/test_read_reasons.py
    watch = (ROOT / "bot" / "actuator" / "watch.py").read_text(encoding="utf-8")
    assert 'Phrase(f"watch.{what}_{where}"' in watch  # the one computed key: its parts below
    keys |= {f"watch.{what}_{where}" for what in ("restarts", "ooms", "pressure") for where in ("new", "since")}
    return keys


def test_every_phrase_bot_builds_has_wording_and_a_case_here_and_none_is_left_over():
    worded = {k.removeprefix("phrase.") for k in EN.messages if k.startswith(("phrase.watch.", "phrase.reason."))}
    cased = {p.key for p, _, _ in NOTES + REASONS}
    emitted = _emitted()  # the watch's notes and the writes' reasons
    assert len(emitted) >= 30  # the scan really found them
    assert emitted == worded == cased
    assert {k for k in ZH.messages if k.startswith("phrase.")} == {k for k in EN.messages if k.startswith("phrase.")}


@pytest.mark.parametrize(("phrase", "en", "zh"), NOTES + REASONS, ids=lambda v: v.key if isinstance(v, Phrase) else "")
def test_each_note_and_reason_reads_in_english_as_before_and_wholly_in_chinese(phrase: Phrase, en: str, zh: str):
    assert EN.phrase(phrase) == en
    assert ZH.phrase(phrase) == zh
    assert english(ZH.phrase(phrase)) == []
    assert unsaid(EN.phrase(phrase)) == unsaid(ZH.phrase(phrase)) == []
    # stored as JSON and read back, it is the same phrase and reads the same
    assert phrase_of(phrase.to_json()) == phrase
    assert ZH.phrase(phrase.to_json()) == zh


def test_text_stored_before_phrases_reads_as_it_was():
    old = "1 restart in new pods"
    assert EN.phrase(old) == ZH.phrase(old) == old
    assert ZH.phrases([old, Phrase("watch.ooms_new", {"count": 2})]) == "1 restart in new pods；新 Pod 的日志中有 2 行 CUDA OOM"
    msg = P.plan_message(_stored("failed", ("U0APPROVER",)), "zh", "failed", notes=(old,), replicas=2)
    assert "失败：1 restart in new pods。" in _slack_texts(msg)[0]


def test_a_phrase_in_an_audit_row_is_stored_as_json_and_read_back(tmp_path):
    store = Store.open(tmp_path / "gpumem.db")
    reason = Phrase("reason.list", {"items": [Phrase("reason.split_absent", {"what": "Service/x"}), "HTTP 503"]})
    store.record("reconcile", actor="gpumem", detail={"plan": "p-1", "reason": reason, "old": "as it was"})
    (row,) = store.audit()
    assert row.detail["reason"] == {"phrase": "reason.list", "params": {
        "items": [{"phrase": "reason.split_absent", "params": {"what": "Service/x"}}, "HTTP 503"]}}
    assert phrase_of(row.detail["reason"]) == reason and row.detail["old"] == "as it was"
    assert ZH.t("slack_plan.stage.reconciled_failed", reason=row.detail["reason"]).startswith(
        "失败；重新读取对象核对：写入未生效（Service/x 不存在；HTTP 503）")


# ------------------------------------------------------------------ plan status messages (Slack)

_STAGES: list[tuple[str, str, dict[str, Any], str]] = [
    ("failed", "failed", {"notes": (Phrase("watch.restarts_new", {"count": 1}), Phrase("watch.ooms_new", {"count": 2})),
                          "replicas": 2}, "失败：新 Pod 重启 1 次；新 Pod 的日志中有 2 行 CUDA OOM。"),
    ("watched", "symptoms_remain", {"notes": (Phrase("watch.kv_usage_high", {"usage": "97%", "high": "90%"}),
                                              Phrase("watch.preemptions", {"count": 57, "minutes": 2})), "replicas": 2},
     "已滚动完成，但症状仍在：KV cache 使用率 97%（达到或超过 90%）；最近 2 分钟内抢占 57 次。"),
    ("rolled_back", "failed_rolled_back", {"notes": (Phrase("watch.not_rolled_out"),), "replicas": 2},
     "失败：观察窗口内未完成滚动更新。已自动回滚"),
    ("failed", "reconciled_failed", {"reason": Phrase("reason.not_written", {"paths": "/spec/replicas"})},
     "写入未生效（计划要写入的值不在对象上：/spec/replicas）"),
    ("applied", "rollback_not_applied", {"reason": Phrase("reason.still_written", {"paths": "/spec/replicas"})},
     "重新读取后对象仍带有该变更（计划写入的值仍在对象上：/spec/replicas）"),
    ("failed", "partly_applied", {"reason": Phrase("reason.list", {"items": [
        Phrase("reason.split_there", {"what": "Deployment/vllm-long", "annotation": "gpumem.io/plan"}),
        Phrase("reason.split_absent", {"what": "Service/vllm-long"})]})},
     "重新读取后：Deployment/vllm-long 已存在，其 gpumem.io/plan 注解指向本计划；Service/vllm-long 不存在。"),
]


@pytest.mark.parametrize(("state", "stage", "params", "zh"), _STAGES, ids=[s[1] for s in _STAGES])
def test_a_chinese_plan_status_with_notes_or_a_reason_has_no_english_sentence(state, stage, params, zh):
    msg = P.plan_message(_stored(state, ("U0APPROVER",)), "zh", stage, **params)
    texts = "\n".join(_slack_texts(msg))
    assert zh in texts
    assert english(texts) == [] and unsaid(texts) == []
    en = "\n".join(_slack_texts(P.plan_message(_stored(state, ("U0APPROVER",)), "en", stage, **params)))
    assert unsaid(en) == []


def test_a_refusal_for_a_plan_in_another_state_names_the_state_in_words():
    zh = _slack_texts(P.refusal_message("zh", "moved", plan="p-1", state="rolled_back"))[0]
    en = _slack_texts(P.refusal_message("en", "moved", plan="p-1", state="rolled_back"))[0]
    assert "计划 p-1 已处于“已回滚”状态" in zh and english(zh) == []
    assert "Plan p-1 is rolled back already" in en and unsaid(en) == []


# ------------------------------------------------------------------ the terminal, against the stand-in API server


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.clock = manual_clock(sc, ready_after_s=30.0)
        yield sc


def _main(sc, store: Path, *argv: str, lang: str) -> tuple[int, str]:
    """`gpumem ARGV` as `bot.main` runs it, errors worded as the CLI words them: the exit code
    and stdout with stderr after it."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main([*argv, "--kubeconfig", str(sc.kubeconfig), "--context", "prod", "--store", str(store),
                   "--lang", lang])
    return rc, out.getvalue() + err.getvalue()


def _plan(sc, store: Path, lang: str) -> tuple[str, str]:
    rc, text = _main(sc, store, "plan", TARGET, "--set", "max-num-seqs=64", lang=lang)
    assert rc == 0, text
    return re.search(r"\bp-[0-9a-f]{8}\b", text).group(0), text


def _apply_watched(sc, store: Path, plan: str, lang: str, window: int = 120, *more: str) -> tuple[int, str]:
    """`gpumem apply PLAN --yes --watch WINDOW` on the stand-in's clock, its watch on a pipe:
    the exit code and stdout with stderr (the watch's lines) after it."""
    args = parse_argv(["apply", plan, "--yes", "--watch", str(window), *more, "--kubeconfig", str(sc.kubeconfig),
                       "--context", "prod", "--store", str(store), "--lang", lang])
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = InertStream(out), InertStream(err)
    try:
        rc = cli.run(args, lang, Deps.of(args, read_environment()), clock=sc.clock, sleep=sc.clock.advance,
                     now=lambda: datetime(2026, 12, 1, 22, 40, tzinfo=UTC) + timedelta(seconds=sc.clock()))
    finally:
        sys.stdout, sys.stderr = saved
    return rc, out.getvalue() + err.getvalue()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_gpumem_plan_says_every_value_and_in_chinese_is_chinese(cluster, tmp_path, lang):
    plan, text = _plan(cluster, tmp_path / "gpumem.db", lang)
    assert plan in text and unsaid(text) == []
    if lang == "zh":
        assert english(text) == [] and f"计划 {plan}：已提议" in text


#: (the stand-in's rollout, the exit code, the watch's Chinese note, its English)
_WATCHES = {
    "held": ("ready", 0, "已稳定：2 个全部更新且可用", "watch: held: 2 of 2 updated and available"),
    "crashloop": ("crashloop", 1, "（新 Pod 重启 1 次；新 Pod 的日志中有 ", "(1 restart in new pods; "),
    "never_ready": ("slow", 1, "（观察窗口内未完成滚动更新）", "(not rolled out within the watch window)"),
}


@pytest.mark.parametrize("case", list(_WATCHES))
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_gpumem_apply_and_its_watch_say_why_in_the_language_asked(cluster, tmp_path, case, lang):
    rollout, code, zh, en = _WATCHES[case]
    if rollout == "crashloop":
        cluster.kube.rollout.outcome = "crashloop"
        cluster.kube.rollout.crash_after_s = 20
    elif rollout == "slow":
        cluster.kube.rollout.ready_after_s = 10_000.0
    store = tmp_path / "gpumem.db"
    plan, _ = _plan(cluster, store, lang)
    rc, text = _apply_watched(cluster, store, plan, lang)
    assert rc == code, text
    assert (zh if lang == "zh" else en) in text
    assert unsaid(text) == []
    if lang == "zh":
        assert english(text) == []
    if case == "crashloop":  # the counts are the watch's own: its JSON says the same in English
        line = next(x for x in text.splitlines() if "CUDA OOM" in x and "watch" not in x.split()[0])
        assert re.search(r"(\d+) (?:行 CUDA OOM|CUDA OOM lines?)", line)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_write_answered_503_and_not_stored_says_how_that_is_known(cluster, tmp_path, lang):
    store = tmp_path / "gpumem.db"
    plan, _ = _plan(cluster, store, lang)
    cluster.kube.fail(WRITE, 503)
    rc, text = _main(cluster, store, "apply", plan, "--yes", "--no-watch", lang=lang)
    assert rc == 3
    if lang == "zh":
        assert f"重新读取后对象不带有该变更（对象没有 gpumem.io/plan 注解（应为 {plan}））" in text
        assert english(text) == []
    else:
        assert f"the object does not carry the change (the object's gpumem.io/plan annotation is absent, not {plan})" in text
    assert unsaid(text) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_rollback_answered_503_and_a_plan_moved_say_why_in_the_language_asked(cluster, tmp_path, lang):
    store = tmp_path / "gpumem.db"
    plan, _ = _plan(cluster, store, lang)
    assert _main(cluster, store, "apply", plan, "--yes", "--no-watch", lang=lang)[0] == 0
    rc, moved = _main(cluster, store, "apply", plan, "--yes", "--no-watch", lang=lang)
    assert rc == 2
    cluster.kube.fail(WRITE, 503)
    rc, text = _main(cluster, store, "rollback", plan, "--yes", lang=lang)
    assert rc == 3
    path = "/spec/template/spec/containers/0/args/3"
    if lang == "zh":
        assert f"计划 {plan} 已处于“已执行”状态，不能再变为“执行中”" in moved
        assert f"重新读取后对象仍带有该变更（计划写入的值仍在对象上：{path}）" in text
        assert english(moved + text) == []
    else:
        assert f"plan {plan} is applied already; it cannot become applying" in moved
        assert f"the object still carries the change (the values the plan wrote are still on the object: {path})" in text
    assert unsaid(moved + text) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_reconcile_pass_says_why_a_write_did_not_land(cluster, tmp_path, lang):
    store_path = tmp_path / "gpumem.db"
    plan, _ = _plan(cluster, store_path, lang)
    cluster.kube.fail(WRITE, "drop")  # no answer, nothing stored: the outcome stays unknown a while
    rc, text = _main(cluster, store_path, "apply", plan, "--yes", "--no-watch", lang=lang)
    assert rc == 3, text
    waited = ("尚未出现（对象没有 gpumem.io/plan 注解（应为 {plan}））" if lang == "zh"
              else "not there yet (the object's gpumem.io/plan annotation is absent, not {plan})")
    assert waited.format(plan=plan) in text and unsaid(text) == []
    store = Store.open(store_path)
    later = datetime.now(UTC) + timedelta(minutes=10)  # past the time the write could still land
    from bot.actuator.writer import KubeWriter

    (done,) = reconcile_applying(store, lambda _cluster: KubeWriter(cluster.api("prod")), now=later)
    assert done.outcome == "failed"
    assert done.reason == Phrase("reason.annotation_absent", {"annotation": "gpumem.io/plan", "plan": plan})
    line = render.reconciled_text([done], lang)
    if lang == "zh":
        assert f"变更不在对象上（对象没有 gpumem.io/plan 注解（应为 {plan}））：现为失败" in line
        assert english(line) == []
    else:
        assert f"its change is not on the object (the object's gpumem.io/plan annotation is absent, not {plan})" in line
    assert unsaid(line) == []


def test_the_watch_json_gives_each_note_its_id_values_and_english_text():
    from bot.actuator.watch import Look

    look = Look("failed", 3, 2, 1, 1, 1, notes=(Phrase("watch.restarts_new", {"count": 2}),
                                                 Phrase("watch.leader", {"note": Phrase("watch.on_delete")}),
                                                 "progress deadline exceeded"))
    assert render.look_json(look)["notes"] == [
        {"id": "restarts_new", "params": {"count": 2}, "text": "2 restarts in new pods"},
        {"id": "leader", "params": {"note": {"phrase": "watch.on_delete", "params": {}}},
         "text": "leader StatefulSet: updateStrategy OnDelete: a pod takes the change only once someone deletes it"},
        {"id": None, "params": {}, "text": "progress deadline exceeded"}]  # stored before notes had ids
    assert json.loads(json.dumps(render.look_json(look)))["notes"][1]["params"]["note"]["phrase"] == "watch.on_delete"
    assert render.look_text(look, "zh").splitlines()[0].endswith(
        "（新 Pod 重启 2 次；领导者 StatefulSet：更新策略为 OnDelete：Pod 只有在被人删除后才会采用变更；progress deadline exceeded）")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_plan_with_nothing_to_change_says_what_in_the_language_asked(cluster, tmp_path, lang):
    rc, text = _main(cluster, tmp_path / "gpumem.db", "plan", TARGET, "--replicas", "2", lang=lang)
    assert rc == 2
    if lang == "zh":
        assert "gpumem plan：没有要改的内容（HPA 的最小副本数已是 2）。" in text and english(text) == []
    else:
        assert "gpumem plan: nothing to change (HPA minReplicas 2)." in text
    assert unsaid(text) == []


def test_every_chinese_remediation_message_is_chinese_but_for_its_values():
    """The catalog's own words, each value left out (the checks above see them filled; a name
    beside Chinese text would hide an English word from them: the zh check reads a run without
    spaces as one name once it holds a slash or a dot)."""
    leaks = {}
    for key, text in ZH.messages.items():
        if key.startswith(("remediate_cli.", "slack_plan.", "slack_plan_notice.", "phrase.", "managers.")):
            words = english(re.sub(r"\{[^}]*\}", " ", text))
            if words:
                leaks[key] = words
    assert leaks == {}


def test_gpumem_apply_json_gives_the_watch_notes_as_ids_with_their_values(cluster, tmp_path):
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    store = tmp_path / "gpumem.db"
    plan, _ = _plan(cluster, store, "en")
    rc, text = _apply_watched(cluster, store, plan, "zh", 120, "--json")
    assert rc == 1
    doc = json.loads(text[:text.rindex("}") + 1])
    notes = doc["watch"]["notes"]
    assert [n["id"] for n in notes] == ["restarts_new", "ooms_new"]
    assert notes[0]["params"] == {"count": doc["watch"]["restarts"]} and doc["watch"]["restarts"] >= 1
    assert notes[1]["params"] == {"count": doc["watch"]["oom_lines"]} and doc["watch"]["oom_lines"] >= 1
    assert notes[0]["text"] == EN.phrase(Phrase("watch.restarts_new", notes[0]["params"]))
    audit = [r for r in Store.open(store).plan_audit(plan) if r.to_state == "failed"][-1]
    assert [phrase_of(n) for n in audit.detail["notes"]] == [Phrase(f"watch.{n['id']}", n["params"]) for n in notes]
