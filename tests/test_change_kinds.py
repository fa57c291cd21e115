"""Typed changes: one frozen dataclass per kind, stored in the shape plans always had, so a plan
stored before the kinds were typed loads, hashes and approves as it did."""

from __future__ import annotations

import json
import sqlite3
from datetime import UTC, datetime, timedelta

import pytest

from bot.service.container_reader import CONTAINER_READER
from bot.store.db import Store
from runbooks.model.changes import (
    CHANGE_KINDS,
    AddShm,
    AddStartupProbe,
    HpaOnQueueDepth,
    LowerMaxSurge,
    RaiseMemoryLimit,
    Scale,
    SetArg,
    SplitPools,
    change_of,
    from_stored,
)
from runbooks.model.serde import SerdeError, from_jsonable, to_jsonable
from runbooks.remediation.plan import Plan, PlanTarget

T0 = datetime(2026, 12, 1, tzinfo=UTC)

#: one change of each kind, as a plan stored them before they were typed (kind, container, flag, old, new)
OLD_ROWS = [
    {"kind": "set_arg", "container": "vllm", "flag": "max-num-seqs", "old": 256, "new": 112},
    {"kind": "scale", "container": None, "flag": "minReplicas", "old": 2, "new": 3},
    {"kind": "scale", "container": None, "flag": None, "old": 2, "new": 3},
    {"kind": "add_startup_probe", "container": "vllm", "flag": "/health", "old": None, "new": 600},
    {"kind": "hpa_on_queue_depth", "container": None, "flag": "vllm:num_requests_waiting", "old": "Resource:cpu",
     "new": 4},
    {"kind": "lower_max_surge", "container": None, "flag": "maxUnavailable", "old": 0, "new": 1},
    {"kind": "add_shm", "container": "vllm", "flag": None, "old": None, "new": "16Gi"},
    {"kind": "raise_memory_limit", "container": "vllm", "flag": "requests.memory", "old": "48Gi", "new": "64Gi"},
    {"kind": "split_pools", "container": None, "flag": "routing", "old": None, "new": "confirmed by U1"},
]
#: the typed change each old row is
TYPED = [
    SetArg("vllm", "max-num-seqs", 256, 112),
    Scale(2, 3, "minReplicas"),
    Scale(2, 3),
    AddStartupProbe("vllm", "/health", None, 600),
    HpaOnQueueDepth("vllm:num_requests_waiting", "Resource:cpu", 4),
    LowerMaxSurge("maxUnavailable", 0, 1),
    AddShm("vllm", None, "16Gi"),
    RaiseMemoryLimit("vllm", "requests.memory", "48Gi", "64Gi"),
    SplitPools(None, "routing", None, "confirmed by U1"),
]
#: a plan body as the store kept it before the kinds were typed, and its content hash then
OLD_BODY = {
    "action_id": "manual", "approvals_needed": 1, "changes": OLD_ROWS,
    "created_at": "2026-12-01T00:00:00+00:00", "expires_at": "2026-12-01T00:15:00+00:00", "generation": 7,
    "id": "p-0ld5hape", "origin": "cli",
    "patch": [{"op": "test", "path": "/spec/replicas", "value": 2},
              {"op": "replace", "path": "/spec/replicas", "value": 3}],
    "patch_type": "application/json-patch+json", "preview": None, "requested_by": "cli:test",
    "resource_version": "41", "target": {"cluster": "prod", "kind": "Deployment", "name": "vllm", "namespace": "llm"},
    "workload": None,
}
OLD_HASH = "8934c00555c764d2cb22756ac2af4770096ebce04457b9ebfb65f04d4bc13ece"


@pytest.mark.parametrize(("row", "typed"), list(zip(OLD_ROWS, TYPED, strict=True)))
def test_a_stored_change_reads_as_its_own_kind_and_is_stored_back_the_same(row, typed):
    assert from_stored(row) == typed
    assert typed.to_stored() == row
    assert to_jsonable(typed) == row


def test_every_kind_has_a_class_and_each_class_says_its_kind():
    assert set(CHANGE_KINDS) == {type(c).kind for c in TYPED}
    assert [type(c).__name__ for c in TYPED if c.kind == "scale"] == ["Scale", "Scale"]


def test_the_field_each_kind_has_is_named_for_what_it_holds():
    assert TYPED[1].hpa_field == "minReplicas" and TYPED[1].container is None
    assert TYPED[3].health_path == "/health"
    assert TYPED[4].metric == "vllm:num_requests_waiting"
    assert TYPED[5].rollout_field == "maxUnavailable"
    assert TYPED[7].memory_field == "requests.memory"
    assert TYPED[8].part == "routing"
    assert [c.slot for c in TYPED] == [r["flag"] for r in OLD_ROWS]


def test_a_plan_stored_before_the_kinds_were_typed_loads_hashes_and_approves_as_then(tmp_path):
    path = tmp_path / "gpumem.db"
    store = Store.open(path)
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(
            "INSERT INTO plans (id, created_at, updated_at, state, content_hash, cluster, namespace, kind, name, "
            "action_id, requested_by, channel, thread_ts, expires_at, approvals_needed, body) "
            "VALUES (?, ?, ?, 'proposed', ?, 'prod', 'llm', 'Deployment', 'vllm', 'manual', 'cli:test', NULL, NULL, "
            "?, 1, ?)",
            ("p-0ld5hape", T0.isoformat(), T0.isoformat(), OLD_HASH, (T0 + timedelta(minutes=15)).isoformat(),
             json.dumps(OLD_BODY, sort_keys=True)))
    conn.close()
    stored = store.get("p-0ld5hape")
    assert stored.plan.changes == tuple(TYPED)
    assert stored.plan.content_hash == OLD_HASH
    assert [c.describe() for c in stored.plan.changes] == [
        "--max-num-seqs 256 -> 112", "HPA minReplicas 2 -> 3", "replicas 2 -> 3",
        "startupProbe (none) -> GET /health, 600 s to start",
        "HPA metrics Resource:cpu -> Pods vllm:num_requests_waiting average 4", "maxUnavailable 0 -> 1",
        "/dev/shm (none) -> emptyDir Memory 16Gi", "memory request 48Gi -> 64Gi",
        "pool split routing: confirmed by U1"]
    moved = store.approve("p-0ld5hape", "U2", OLD_HASH, now=T0)
    assert moved.state == "approved"


def test_a_new_plan_stores_its_changes_in_the_old_shape(tmp_path):
    plan = Plan("p-1", PlanTarget("prod", "llm", "Deployment", "vllm"), "manual", tuple(TYPED), "41", 7,
                tuple(OLD_BODY["patch"]), "application/json-patch+json", "cli:test", T0, T0 + timedelta(minutes=15))
    assert plan.content_hash == OLD_HASH
    assert to_jsonable(plan)["changes"] == OLD_ROWS
    assert from_jsonable(Plan, to_jsonable(plan)) == plan


def test_a_change_of_a_kind_gpumem_does_not_know_is_refused_by_name():
    with pytest.raises(ValueError, match="unknown change kind 'resize_disk'"):
        change_of("resize_disk", "vllm", None, None, "1Ti")
    with pytest.raises(SerdeError, match="resize_disk"):
        from_jsonable(Plan, {**OLD_BODY, "changes": [{"kind": "resize_disk", "new": "1Ti"}]})


@pytest.mark.parametrize(("change", "restored"), [
    (SetArg("vllm", "max-model-len", 8192, 4096), "--max-model-len 4096 -> 8192"),
    (Scale(2, 3, "minReplicas"), "HPA minReplicas 3 -> 2"),
    (LowerMaxSurge(None, None, 0), "maxSurge 0 -> (none)"),
    (SplitPools("vllm", "threshold", None, 2048), "one pool again: prompts over 2048 tokens no longer go to a long pool"),
    (SplitPools(None, "routing", None, "confirmed"), None),
])
def test_each_change_words_its_own_undoing(change, restored):
    assert change.restored() == restored


def test_every_kind_is_planned_in_exactly_one_place():
    """A workload kind has its editor in the registry; flags, replicas and the HPA kinds are
    planned by build_plan itself, a pool split by its own use case: none is left out, none twice."""
    from runbooks.model.changes import KINDS
    from runbooks.remediation.edits.registry import EDITORS

    by_build_plan = {SetArg, Scale, HpaOnQueueDepth}
    by_split_pools = {SplitPools}
    assert set(KINDS.values()) == set(EDITORS) | by_build_plan | by_split_pools
    assert not set(EDITORS) & (by_build_plan | by_split_pools)


def test_the_registry_hands_each_change_to_its_kinds_editor_with_the_changes_container():
    from runbooks.remediation.edits.registry import edit_workload
    from runbooks.remediation.edits.shm import shm

    workload = {"kind": "Deployment", "metadata": {"name": "vllm", "namespace": "llm"},
                "spec": {"template": {"spec": {"containers": [
                    {"name": "sidecar", "image": "busybox"},
                    {"name": "vllm", "image": "vllm/vllm-openai:v0.8.5", "args": ["--model", "m"]}]}}}}
    edit = edit_workload(workload, AddShm("vllm", None, "16Gi"), None, reader=CONTAINER_READER)
    assert edit == shm(workload, "vllm", "16Gi", reader=CONTAINER_READER)
    assert edit.changes == (AddShm("vllm", None, "16Gi"),)
    assert [op["path"] for op in edit.ops] == ["/spec/template/spec/volumes", "/spec/template/spec/containers/1/volumeMounts"]


def test_a_recorded_action_of_a_kind_this_gpumem_does_not_know_is_not_applicable_not_a_crash():
    from bot.service.remediate import action_changes
    from bot.store.notes import Journal
    from runbooks.model.errors import UsageError

    store = Store.memory()
    Journal(store).add_triage("cli:test", {"verdict": "kv_cache_pressure", "action_changes": {
        "resize": [["resize_disk", "vllm", None, None, "1Ti"], ["set_arg", "vllm", "max-num-seqs", 256, 64]],
        "lower_max_num_seqs": [["set_arg", "vllm", "max-num-seqs", 256, 64]]}},
        namespace="llm", name="vllm", now=T0)
    with pytest.raises(UsageError) as e:
        action_changes(store, "llm", "vllm", "resize")
    assert (e.value.code, e.value.params) == ("not_applicable", {"action": "resize", "kinds": "resize_disk"})
    assert action_changes(store, "llm", "vllm", "lower_max_num_seqs") == (SetArg("vllm", "max-num-seqs", 256, 64),)
