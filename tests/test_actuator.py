"""The actuator writes only through its guards, and each guard refusing is counted at the API server:
re-read and precondition, dry run, the write's own resourceVersion, the rollback's three-way check."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from bot.actuator.apply import CAUSE_ANNOTATION, PLAN_ANNOTATION, apply_plan, rollback_plan
from bot.actuator.writer import JSON_PATCH, KubeWriter
from bot.service.container_reader import CONTAINER_READER
from collectors.parsers.flags import server_config_from_container
from runbooks.model.changes import Scale, SetArg
from runbooks.model.errors import ChangedAfterApply, ChangedSincePlanned, NotPermitted, UsageError
from runbooks.remediation.edits.launch_edit import edit_flags
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.kube_fixtures import running_scenario

NOW = datetime(2026, 12, 1, 2, 14, tzinfo=UTC)
NS, NAME = "llm", "vllm-server"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _scale_plan(obj: dict, to: int, plan_id: str = "p-scale") -> Plan:
    meta = obj["metadata"]
    old = obj["spec"]["replicas"]
    return Plan(plan_id, PlanTarget("prod", NS, "Deployment", NAME), "scale_out", (Scale(old, to),),
                meta["resourceVersion"], meta.get("generation"),
                ({"op": "test", "path": "/spec/replicas", "value": old},
                 {"op": "replace", "path": "/spec/replicas", "value": to}),
                JSON_PATCH, "U1", NOW, NOW + timedelta(minutes=15))


def _patches(sc) -> list:
    return sc.kube.writes(verb="patch", resource="deployments")


def test_a_plan_is_dry_run_then_written_once_with_its_annotations(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    written = apply_plan(writer, plan, "gpumem plan p-scale: scale out for KV pressure")
    stored = cluster.kube.get("Deployment", NS, NAME)
    assert stored["spec"]["replicas"] == 3 and written.generation == stored["metadata"]["generation"]
    assert stored["metadata"]["annotations"][PLAN_ANNOTATION] == "p-scale"
    assert stored["metadata"]["annotations"][CAUSE_ANNOTATION].startswith("gpumem plan p-scale")
    assert len(_patches(cluster)) == 1 and len(cluster.kube.dry_runs(verb="patch")) == 1
    assert writer.writes == 1


def test_an_object_changed_since_planned_is_refused_before_any_write(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    writer.patch("Deployment", NS, NAME, [{"op": "replace", "path": "/spec/replicas", "value": 4}], JSON_PATCH)
    before = len(_patches(cluster))
    with pytest.raises(ChangedSincePlanned) as e:
        apply_plan(writer, plan, "cause")
    assert e.value.code == "changed_since_planned"
    assert len(_patches(cluster)) == before and cluster.kube.get("Deployment", NS, NAME)["spec"]["replicas"] == 4


class _Racing(KubeWriter):
    """Someone else writes between the dry run and the write."""

    def __init__(self, api, other: KubeWriter, their_change: list):
        super().__init__(api)
        self.other, self.their_change = other, their_change

    def patch(self, kind, namespace, name, body, content_type, dry_run=False):
        result = super().patch(kind, namespace, name, body, content_type, dry_run)
        if dry_run:
            self.other.patch(kind, namespace, name, self.their_change, JSON_PATCH)
        return result


@pytest.mark.parametrize(("their_change", "status"), [
    ([{"op": "replace", "path": "/spec/replicas", "value": 5}], 422),  # the `test` on the old value fails
    ([{"op": "add", "path": "/metadata/labels/team", "value": "search"}], 409),  # the resourceVersion does
])
def test_a_change_racing_the_write_is_refused_not_a_lost_update(cluster, their_change, status):
    api = cluster.api("prod")
    writer = _Racing(api, KubeWriter(api), their_change)
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    with pytest.raises(ChangedSincePlanned) as e:
        apply_plan(writer, plan, "cause")
    assert e.value.code == "changed_since_planned"
    ours = [r for r in _patches(cluster) if "gpumem.io~1plan" in r.body]
    assert [r.status for r in ours] == [status]
    stored = cluster.kube.get("Deployment", NS, NAME)
    assert stored["spec"]["replicas"] == (5 if status == 422 else 2), "the other writer's change stands"
    assert PLAN_ANNOTATION not in (stored["metadata"].get("annotations") or {})


def test_a_dry_run_the_server_refuses_stops_before_the_write(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), -1)
    with pytest.raises(UsageError) as e:
        apply_plan(writer, plan, "cause")
    assert e.value.code == "invalid_change"
    assert _patches(cluster) == [] and len(cluster.kube.dry_runs(verb="patch")) == 1


def test_rollback_restores_what_gpumem_changed(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    apply_plan(writer, plan, "cause")
    rollback_plan(writer, plan, "gpumem rollback p-scale")
    assert cluster.kube.get("Deployment", NS, NAME)["spec"]["replicas"] == 2
    assert len(_patches(cluster)) == 2


def test_rollback_refuses_to_clobber_a_later_change_and_shows_three_values(cluster):
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    apply_plan(writer, plan, "cause")
    writer.patch("Deployment", NS, NAME, [{"op": "replace", "path": "/spec/replicas", "value": 6}], JSON_PATCH)
    with pytest.raises(ChangedAfterApply) as e:
        rollback_plan(writer, plan, "rollback")
    assert e.value.code == "changed_after_apply"
    assert e.value.params["differences"] == [{"path": "/spec/replicas", "before": 2, "gpumem": 3, "now": 6}]
    assert len(_patches(cluster)) == 2 and cluster.kube.get("Deployment", NS, NAME)["spec"]["replicas"] == 6


def test_a_writer_without_patch_rights_is_told_the_missing_verb(cluster):
    cluster.kube.grant([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}], namespace=NS)
    writer = KubeWriter(cluster.api("prod"))
    plan = _scale_plan(writer.read("Deployment", NS, NAME), 3)
    with pytest.raises(NotPermitted) as e:
        apply_plan(writer, plan, "cause")
    assert e.value.permission == "patch deployments.apps in namespace llm"
    assert [r.status for r in cluster.kube.calls(verb="patch")] == [403]


def test_a_flag_change_lands_where_the_deployment_keeps_it(cluster):
    writer = KubeWriter(cluster.api("prod"))
    obj = writer.read("Deployment", NS, NAME)
    edit = edit_flags(obj, None, {"max-num-seqs": 64}, reader=CONTAINER_READER)
    meta = obj["metadata"]
    plan = Plan("p-seqs", PlanTarget("prod", NS, "Deployment", NAME), "lower_max_num_seqs",
                (SetArg("vllm", "max-num-seqs", 128, 64),), meta["resourceVersion"], meta.get("generation"),
                tuple(edit.json_patch), JSON_PATCH, "U1", NOW, NOW + timedelta(minutes=15))
    apply_plan(writer, plan, "cause")
    stored = cluster.kube.get("Deployment", NS, NAME)
    container = next(c for c in stored["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    assert server_config_from_container(container).max_num_seqs == 64
    assert stored["metadata"]["generation"] == (meta.get("generation") or 1) + 1
    rollback_plan(writer, plan, "rollback")
    back = cluster.kube.get("Deployment", NS, NAME)
    vllm = next(c for c in back["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    original = next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")
    assert (vllm.get("command"), vllm.get("args"), vllm.get("env")) == (
        original.get("command"), original.get("args"), original.get("env"))
