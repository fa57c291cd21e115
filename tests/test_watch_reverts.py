"""The watch notices a revert: a field the plan changed put back by another manager during the
window is "reverted by MANAGER at TIME" (manager and time from the object's managedFields), a
plan state of its own, never "symptoms remain" and never rolled back; over HTTP with the real
kubernetes client against the stand-in: a controller that puts back the args it owns, Argo CD's
self-heal re-applying its manifest on a timer (`tests.support.gitops_timer`), and no revert."""

from __future__ import annotations

import copy
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.actuator.watch import Reverted, field_owner, reverted_fields
from bot.actuator.writer import KubeWriter
from bot.service import remediate
from bot.store.db import Store
from runbooks.remediation.policy import ApprovalPolicy
from tests.support.fake_kube import Reverter
from tests.support.gitops_timer import GitOpsTimer
from tests.support.kube_fixtures import INCIDENT_DEPLOYMENT as NAME
from tests.support.kube_fixtures import INCIDENT_NS as NS
from tests.support.kube_fixtures import manual_clock, running_scenario

ARGS = ("spec", "template", "spec", "containers", 0, "args")
TRACKING = {"argocd.argoproj.io/tracking-id": "llm-serving:apps/Deployment:llm/vllm-server"}
APP = {"apiVersion": "argoproj.io/v1alpha1", "kind": "Application",
       "metadata": {"name": "llm-serving", "namespace": "argocd"},
       "spec": {"project": "default",
                "source": {"repoURL": "https://git.example/llm.git", "path": "serving", "targetRevision": "main"},
                "destination": {"server": "https://kubernetes.default.svc", "namespace": "llm"},
                "syncPolicy": {"automated": {"prune": True, "selfHeal": True}}}}


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _plan_apply_watch(cluster, tmp_path, stopgap: tuple[str, ...] = (), window: float = 600):
    clock = manual_clock(cluster, ready_after_s=20.0)
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, flags=(("max-num-seqs", 64),), requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall", stopgap_on_gitops=stopgap)
    looks = []
    final, seen = remediate.watch_after(store, writer, stored.plan.id, window, auto_rollback=True, poll_s=30,
                                        clock=clock, sleep=clock.advance, on_look=looks.append)
    return store, stored.plan.id, final, seen, looks, clock


def _written_at(cluster, manager: str) -> str:
    """The time `manager`'s managedFields entry carries on the stored object (the stand-in stamps
    a controller's write with the clock reading its next request brought it to)."""
    entries = cluster.kube.get("Deployment", NS, NAME)["metadata"]["managedFields"]
    (time,) = [e["time"] for e in entries if e["manager"] == manager]
    return time


def _args(cluster) -> list[str]:
    return cluster.kube.get("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"][0]["args"]


def test_a_controller_putting_back_the_args_it_owns_is_reverted_by_it_not_symptoms(cluster, tmp_path):
    # the controller owns the args (managedFields, operation Update) without a controller
    # ownerReference the guard would refuse on: the write lands, and the watch is what sees it go
    cluster.kube.managed_fields = True
    original = list(_args(cluster))
    kserve = Reverter("Deployment", NS, NAME, ARGS, original, "kserve-controller", after_s=15)
    cluster.kube.reverters.append(kserve)
    store, plan_id, final, seen, looks, clock = _plan_apply_watch(cluster, tmp_path)
    assert seen.outcome == "reverted" and final.state == "reverted"
    (r,) = seen.reverted
    assert r.manager == "kserve-controller" and r.operation == "Update"
    assert r.at == _written_at(cluster, "kserve-controller") != _written_at(cluster, "gpumem")
    assert r.path.startswith("/spec/template/spec/containers/0/args/")
    assert (r.before, r.gpumem, r.now, r.put_back) == ("--max-num-seqs=128", "--max-num-seqs=64",
                                                       "--max-num-seqs=128", True)
    assert clock() < 600, "a revert ends the watch at the look that sees it"
    assert [lk.outcome for lk in looks][-1] == "reverted" and kserve.reverts == 1
    # exactly one write (the patch) and its dry run; no rollback, even with auto_rollback on
    assert len(cluster.kube.writes()) == 1 and len(cluster.kube.dry_runs()) == 1
    assert _args(cluster) == original
    row = [e for e in store.plan_audit(plan_id) if e.to_state == "reverted"][-1]
    assert row.actor == "gpumem" and row.detail["outcome"] == "reverted"
    assert row.detail["reverted"][0]["manager"] == "kserve-controller"
    assert "rolled_back" not in [e.to_state for e in store.plan_audit(plan_id)]


def test_argo_cd_self_heal_reapplies_its_manifest_and_the_watch_names_it(cluster, tmp_path):
    from bot.render.handover import handover_json, handover_text
    from bot.service.handover import build_handover

    cluster.kube.managed_fields = True
    obj = cluster.kube.get("Deployment", NS, NAME)
    obj["metadata"].setdefault("annotations", {}).update(TRACKING)
    cluster.kube.add(obj)
    cluster.kube.add(copy.deepcopy(APP))
    manifest = {"spec": copy.deepcopy(obj["spec"]), "metadata": {"annotations": dict(TRACKING)}}
    argocd = GitOpsTimer("Deployment", NS, NAME, manifest, interval_s=180, application=("argocd", "llm-serving"))
    cluster.kube.timers.append(argocd)
    store, plan_id, final, seen, _looks, clock = _plan_apply_watch(cluster, tmp_path, stopgap=("llm",))
    stored = store.get(plan_id)
    assert [(m.kind, m.name, m.self_heal) for m in stored.plan.managers] == [("argocd", "llm-serving", True)]
    assert seen.outcome == "reverted" and final.state == "reverted"
    (r,) = seen.reverted
    assert (r.manager, r.put_back) == ("argocd-controller", True)
    assert r.at == _written_at(cluster, "argocd-controller") and 180 <= clock() < 600
    assert argocd.writes == 1  # the sync before the write changed nothing, and wrote nothing
    assert len(cluster.kube.writes()) == 1 and len(cluster.kube.dry_runs()) == 1  # one stop-gap, no rollback
    h = build_handover(store)
    (item,) = h.reverted
    assert (item.plan, item.target, item.manager, item.at) == (plan_id, "llm/vllm-server", "argocd-controller",
                                                               r.at)
    assert h.drift == ()  # the live object is back to its source of truth: no drift, a change to fold back
    text = handover_text(h, "en")
    assert f"reverted by argocd-controller at {r.at[11:16]} UTC: fold the change into the source of truth" in text
    assert "argocd-controller" in handover_text(h, "zh") and "真实来源" in handover_text(h, "zh")
    assert handover_json(h)["reverted"][0]["manager"] == "argocd-controller"


def test_self_heal_off_in_the_application_leaves_the_stop_gap_in_place(cluster, tmp_path):
    obj = cluster.kube.get("Deployment", NS, NAME)
    obj["metadata"].setdefault("annotations", {}).update(TRACKING)
    cluster.kube.add(obj)
    app = copy.deepcopy(APP)
    app["spec"]["syncPolicy"]["automated"]["selfHeal"] = False
    cluster.kube.add(app)
    argocd = GitOpsTimer("Deployment", NS, NAME, {"spec": copy.deepcopy(obj["spec"])}, interval_s=180,
                         application=("argocd", "llm-serving"))
    cluster.kube.timers.append(argocd)
    _store, _plan, final, seen, _looks, _clock = _plan_apply_watch(cluster, tmp_path, stopgap=("llm",))
    assert seen.outcome == "held" and final.state == "watched" and seen.reverted == ()
    assert argocd.syncs >= 3 and argocd.writes == 0


def test_no_revert_gives_the_usual_outcome_with_one_write(cluster, tmp_path):
    cluster.kube.managed_fields = True
    store, plan_id, final, seen, looks, clock = _plan_apply_watch(cluster, tmp_path)
    assert seen.outcome == "held" and final.state == "watched" and seen.reverted == ()
    assert clock() >= 600 and all(lk.outcome != "reverted" for lk in looks)
    assert len(cluster.kube.writes()) == 1 and len(cluster.kube.dry_runs()) == 1
    assert "reverted" not in store.plan_audit(plan_id)[-1].detail
    assert store.plan_audit(plan_id)[-1].to_state == "watched"


def test_a_revert_the_managed_fields_do_not_name_is_said_as_not_recorded(cluster, tmp_path):
    original = list(_args(cluster))  # managedFields off: the stand-in keeps none
    cluster.kube.reverters.append(Reverter("Deployment", NS, NAME, ARGS, original, "kserve-controller", after_s=15))
    _store, _plan, final, seen, _looks, _clock = _plan_apply_watch(cluster, tmp_path)
    (r,) = seen.reverted
    assert final.state == "reverted" and (r.manager, r.at) == (None, None)
    assert r.seen_at.endswith("Z") and datetime.fromisoformat(r.seen_at).year >= 2026


def test_a_rollout_that_fails_before_the_revert_is_failed_and_rolled_back_as_before(cluster, tmp_path):
    cluster.kube.managed_fields = True
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 5
    original = list(_args(cluster))
    cluster.kube.reverters.append(Reverter("Deployment", NS, NAME, ARGS, original, "kserve-controller", after_s=40))
    _store, _plan, final, seen, _looks, _clock = _plan_apply_watch(cluster, tmp_path)
    # the crash loop fails the watch first (it ends at a failure), and auto_rollback rolls back:
    # a revert is judged only while gpumem's values are still the ones to roll back
    assert seen.outcome == "failed" and final.state == "rolled_back"


# ------------------------------------------------------------------ the managedFields reader


DEPLOYMENT = {"metadata": {"managedFields": [
    {"manager": "gpumem", "operation": "Update", "time": "2026-03-09T21:00:00Z",
     "fieldsV1": {"f:metadata": {"f:annotations": {"f:gpumem.io/plan": {}}}}},
    {"manager": "argocd-controller", "operation": "Apply", "time": "2026-03-09T21:03:00Z",
     "fieldsV1": {"f:spec": {"f:replicas": {}, "f:template": {"f:spec": {"f:containers": {
         'k:{"name":"vllm"}': {".": {}, "f:args": {}, "f:env": {'k:{"name":"HF_HOME"}': {".": {}, "f:value": {}}}}}}}}}},
    {"manager": "kube-controller-manager", "operation": "Update", "subresource": "status",
     "time": "2026-03-09T21:04:00Z", "fieldsV1": {"f:status": {"f:replicas": {}}}}]},
    "spec": {"replicas": 2, "template": {"spec": {"containers": [
        {"name": "vllm", "args": ["--max-num-seqs=128"], "env": [{"name": "HF_HOME", "value": "/models"}]}]}}}}


@pytest.mark.parametrize("pointer, owner", [
    ("/spec/template/spec/containers/0/args/0", "argocd-controller"),
    ("/spec/template/spec/containers/0/args", "argocd-controller"),
    ("/spec/template/spec/containers/0/env/0/value", "argocd-controller"),
    ("/spec/replicas", "argocd-controller"),
    ("/metadata/annotations/gpumem.io~1plan", "gpumem"),
    ("/status/replicas", "kube-controller-manager"),
    ("/spec/template/spec/containers/1/args/0", None),  # no such element
    ("/spec/paused", None),
])
def test_field_owner_walks_real_managed_fields(pointer, owner):
    found = field_owner(DEPLOYMENT, pointer)
    assert (found[0] if found else None) == owner


def test_a_field_only_gpumem_owns_is_not_named_as_the_reverter():
    obj = copy.deepcopy(DEPLOYMENT)
    obj["metadata"]["managedFields"][0]["fieldsV1"] = {"f:spec": {"f:replicas": {}}}
    obj["metadata"]["managedFields"][1]["fieldsV1"] = {"f:spec": {"f:template": {}}}
    rows = [{"path": "/spec/replicas", "before": 2, "gpumem": 3, "now": 2}]
    (r,) = reverted_fields(obj, lambda _obj: rows, "2026-03-09T21:05:00Z")
    assert (r.manager, r.at, r.seen_at) == (None, None, "2026-03-09T21:05:00Z")
    assert reverted_fields(obj, lambda _obj: [{"path": "/spec/replicas", "gpumem": 3, "now": 3}], "x") == ()


def test_a_revert_round_trips_through_the_audit_json():
    r = Reverted("/spec/replicas", 2, 3, 5, "hpa-controller", "2026-03-09T21:05:00Z", "2026-03-09T21:05:30Z",
                 "Update")
    assert Reverted.from_json(r.to_json()) == r and not r.put_back
    assert Reverted.from_json({"path": 3}) is None and Reverted.from_json(None) is None


# ------------------------------------------------------------------ managedFields are outside input

_LEAF = st.none() | st.booleans() | st.integers() | st.text(max_size=6)
_FIELD_KEYS = st.sampled_from(["f:spec", "f:template", "f:containers", "f:args", "f:replicas", ".", "f:metadata",
                               'k:{"name":"vllm"}', 'k:{"name":', "v:\"x\"", "v:[", "i:0", "f:0"]) | st.text(max_size=6)
_TREES = st.recursive(_LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_FIELD_KEYS, inner,
                                                                                          max_size=4), max_leaves=20)
_POINTERS = st.lists(st.sampled_from(["spec", "template", "containers", "0", "1", "args", "3", "²", "٣", "~1", ""])
                     | st.text(max_size=4), max_size=8).map(lambda steps: "/" + "/".join(steps))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["manager", "operation", "time", "fieldsV1", "subresource"]), _TREES,
                                max_size=5) | _TREES, max_size=4), _TREES, _POINTERS)
def test_field_owner_reads_any_managed_fields_without_a_traceback(entries, spec, pointer):
    obj = {"metadata": {"managedFields": entries}, "spec": spec}
    found = field_owner(obj, pointer)
    assert found is None or (isinstance(found[0], str) and all(x is None or isinstance(x, str) for x in found[1:]))
    rows = [{"path": pointer, "before": 1, "gpumem": 2, "now": spec}]
    for r in reverted_fields(obj, lambda _obj: rows, "2026-03-09T21:00:00Z"):
        assert r.manager is None or isinstance(r.manager, str)


@settings(max_examples=200, deadline=None)
@given(_TREES)
def test_a_revert_read_back_from_any_audit_json_is_one_or_none(doc):
    r = Reverted.from_json(doc)
    assert r is None or isinstance(r, Reverted)


def test_a_scale_plan_whose_hpa_minimum_is_put_back_is_reverted_by_that_manager(cluster, tmp_path):
    # the plan raises the HPA's minReplicas (and maxReplicas); a sync puts the minimum back
    clock = manual_clock(cluster, ready_after_s=20.0)
    cluster.kube.managed_fields = True
    cluster.kube.reverters.append(Reverter("HorizontalPodAutoscaler", NS, "vllm-server-queue", ("spec", "minReplicas"),
                                           2, "argocd-controller", after_s=15))
    store = Store.open(tmp_path / "gpumem.db")
    writer = KubeWriter(cluster.api("prod"))
    request = remediate.PlanRequest(NS, NAME, replicas=3, requested_by="cli:oncall")
    stored = remediate.make_plan(store, writer, request, ApprovalPolicy(), now=datetime.now(UTC))
    assert stored.plan.target.kind == "HorizontalPodAutoscaler"
    remediate.apply_now(store, writer, stored.plan.id, "cli:oncall")
    final, seen = remediate.watch_after(store, writer, stored.plan.id, 600, auto_rollback=True, poll_s=30,
                                        clock=clock, sleep=clock.advance)
    assert seen.outcome == "reverted" and final.state == "reverted"
    (r,) = seen.reverted
    assert (r.path, r.before, r.gpumem, r.now, r.manager) == ("/spec/minReplicas", 2, 3, 2, "argocd-controller")
    assert len(cluster.kube.writes()) == 1  # the HPA patch; no rollback


def test_a_value_shown_masked_is_compared_unmasked():
    # the row shows the element masked in its context; the object holds exactly what gpumem wrote
    obj = {"spec": {"args": ["--api-key", "<written>"]}}
    rows = [{"path": "/spec/args/1", "before": "old", "gpumem": "<written>", "now": "<redacted>"}]
    ops = ({"op": "test", "path": "/spec/args/1", "value": "old"},
           {"op": "replace", "path": "/spec/args/1", "value": "<written>"})
    assert reverted_fields(obj, lambda _obj: rows, "t", ops) == ()
    assert len(reverted_fields({"spec": {"args": ["--api-key", "old"]}}, lambda _obj: rows, "t", ops)) == 1
