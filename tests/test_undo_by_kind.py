"""The undo command a triage gives matches the kind of its target: `kubectl rollout undo`
takes a Deployment or a StatefulSet by its own resource name, never an InferenceService or a
LeaderWorkerSet (no rollout history kubectl can undo): those are rolled back by gpumem's plan."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from bot.render.i18n import LANGS
from bot.render.text import render_text
from bot.render.view import view
from bot.service import triage as triage_service
from runbooks.model.report import Action, Report, Verdict

ROOT = Path(__file__).resolve().parent.parent


def _rollback(kind: str | None, lang: str = "en", target: str = "llm/qwen", kubernetes: bool = True) -> str:
    report = Report(target=target, target_kind=kind, verdict=Verdict("params_near_edge", kubernetes=kubernetes),
                    actions=(Action("set_safe_flags", {"args": "--max-num-seqs 64"}),))
    return view(report, lang).actions[0].rollback


@pytest.mark.parametrize("lang", LANGS)
def test_a_deployment_and_a_statefulset_are_undone_by_their_own_resource(lang: str):
    assert "kubectl -n llm rollout undo deployment/qwen" in _rollback("Deployment", lang)
    sts = _rollback("StatefulSet", lang)
    assert "kubectl -n llm rollout undo statefulset/qwen" in sts and "deployment/" not in sts


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("kind", ["InferenceService", "LeaderWorkerSet"])
def test_a_kind_kubectl_cannot_roll_back_is_undone_by_the_plan(kind: str, lang: str):
    text = _rollback(kind, lang, target=f"llm/{kind.lower()}/qwen")
    assert not re.search(r"rollout undo \S+/", text)  # no resource given to rollout undo
    assert "gpumem rollback PLAN --yes" in text
    assert f"kubectl -n llm edit {kind.lower()} qwen" in text and kind in text


def test_a_kind_not_read_names_both_ways_and_no_kubernetes_says_it_in_words():
    unknown = _rollback(None)
    assert "rollout undo deployment/qwen" in unknown and "statefulset/qwen" in unknown
    assert "gpumem rollback PLAN --yes" in unknown
    assert "kubectl" not in _rollback("Deployment", kubernetes=False)


def _bundle_as(tmp_path: Path, kind: str) -> Path:
    bundle = tmp_path / kind
    shutil.copytree(ROOT / "examples" / "params-edge-sglang", bundle)
    manifest = bundle / "deployment.yaml"
    text = manifest.read_text(encoding="utf-8")
    assert "kind: Deployment\n" in text
    manifest.write_text(text.replace("kind: Deployment\n", f"kind: {kind}\n", 1), encoding="utf-8")
    return bundle


@pytest.mark.parametrize("lang", LANGS)
def test_a_statefulset_bundles_triage_undoes_the_statefulset(tmp_path: Path, lang: str):
    report = triage_service.triage_bundle(str(_bundle_as(tmp_path, "StatefulSet"))).report
    assert report.target_kind == "StatefulSet"
    text = render_text(report, lang)
    assert "rollout undo statefulset/qwen-7b-sglang" in text and "deployment/qwen-7b-sglang" not in text
    plain = triage_service.triage_bundle(str(ROOT / "examples" / "params-edge-sglang")).report
    assert plain.target_kind == "Deployment"
    assert "rollout undo deployment/qwen-7b-sglang" in render_text(plain, lang)
