"""The bundle loader: every file optional, bad files reported by name and line, bundle.json round trip."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from bot.service.bundle_out import write_bundle_json
from collectors.bundle import BundleError, has_evidence, load_bundle
from runbooks.model.evidence import Evidence, MemoryHistory, MemoryPoint, MemorySeries
from runbooks.triage.runbook import triage
from tests.support import words

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_not_a_folder_is_a_bundle_error(tmp_path):
    with pytest.raises(BundleError, match="not a folder"):
        load_bundle(tmp_path / "missing")


def test_empty_folder_has_no_evidence(tmp_path):
    ev = load_bundle(tmp_path)
    assert not has_evidence(ev)
    assert ev.sources == () and ev.issues == ()


def test_each_example_file_lands_in_its_evidence_field():
    ev = load_bundle(EXAMPLES / "runbook-incident")
    assert ev.target == "llm/vllm-server"
    assert ev.gpus.devices[0].used_bytes == 73341 * 1024 * 1024
    assert ev.server_metrics.queue_depth == 18
    assert ev.server_config.max_num_seqs == 128 and ev.server_config.memory_fraction == 0.95
    assert len(ev.pods) == 2
    assert ev.logs.startup.kv_cache_gib == 59.22
    assert ev.requests.total == 2400
    assert set(ev.sources) == {"nvidia-smi.txt", "metrics.txt", "deployment.yaml", "pods.yaml", "events.txt",
                               "logs.txt", "access.log"}


def test_one_unreadable_file_costs_only_itself(tmp_path):
    shutil.copytree(EXAMPLES / "runbook-incident", tmp_path / "b")
    (tmp_path / "b" / "pods.yaml").write_text("items:\n  - {bad: [\n")
    ev = load_bundle(tmp_path / "b")
    assert ev.pods == ()
    assert [(i.source, i.line is not None) for i in ev.issues] == [("pods.yaml", True)]
    assert ev.server_metrics is not None and ev.requests is not None


def test_binary_garbage_is_reported_not_raised(tmp_path):
    (tmp_path / "metrics.txt").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "nvidia-smi.txt").write_bytes(b"\xff\xfe\x00garbage\n")
    ev = load_bundle(tmp_path)
    assert {i.source for i in ev.issues} == {"metrics.txt", "nvidia-smi.txt"}


def test_bundle_json_round_trips_to_the_same_verdict(tmp_path):
    ev = load_bundle(EXAMPLES / "runbook-incident")
    when = datetime(2026, 3, 9, 20, 20, tzinfo=UTC)
    history = MemoryHistory("prometheus", (MemorySeries("gpu0", (MemoryPoint(when, 7.0e10, 8.5e10),)),),
                            restarts_at=(when,))
    ev = Evidence(**{**ev.__dict__, "collected_at": when, "memory_history": history})
    out = tmp_path / "only-json"
    out.mkdir()
    write_bundle_json(out, ev)
    back = load_bundle(out)
    assert back.memory_history == history
    assert back.requests == ev.requests and back.server_config == ev.server_config
    assert triage(back).verdict == triage(ev).verdict
    assert not (out / ".bundle.json.tmp").exists()


def test_raw_file_wins_over_its_parsed_copy_in_bundle_json(tmp_path):
    ev = load_bundle(EXAMPLES / "healthy-vllm-v1")
    shutil.copytree(EXAMPLES / "runbook-incident", tmp_path / "b")
    write_bundle_json(tmp_path / "b", ev)
    back = load_bundle(tmp_path / "b")
    assert back.server_config.max_num_seqs == 128  # from deployment.yaml, not the healthy bundle.json
    assert back.target == "assist/qwen3-8b"  # the target is bundle.json's


def test_malformed_bundle_json_names_its_line(tmp_path):
    (tmp_path / "bundle.json").write_text('{\n "target": "a/b",\n oops\n}')
    ev = load_bundle(tmp_path)
    assert ev.issues[0].source == "bundle.json" and ev.issues[0].line == 3


def test_bundle_json_with_wrong_shapes_is_reported(tmp_path):
    (tmp_path / "bundle.json").write_text(json.dumps({"target": "a/b", "evidence": {"pods": "nope"}}))
    ev = load_bundle(tmp_path)
    assert ev.issues[0].source == "bundle.json"
    assert "pods" in words.message(ev.issues[0])
