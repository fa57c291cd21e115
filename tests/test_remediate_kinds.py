"""The change kinds beyond flags and replicas, end to end against the stand-in API server: for each,
`gpumem plan` writes nothing, `gpumem apply` dry-runs first and then writes exactly once, the object
re-read holds the intended values and nothing else changed, and `gpumem rollback` restores the prior
spec exactly (or deletes the HPA gpumem created)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.support import fake_kube_rules as rules
from tests.support.fake_kube import ManualClock
from tests.support.kube_fixtures import run_cli, running_scenario

POD = "/spec/template/spec"
#: fields the API server or the controllers move on any write, and the annotations the write adds
_BOOKKEEPING = ("/metadata/resourceVersion", "/metadata/generation", "/metadata/annotations/gpumem.io~1plan",
                "/metadata/annotations/kubernetes.io~1change-cause",
                "/metadata/annotations/deployment.kubernetes.io~1revision", "/status")


_run = run_cli


def _leaves(obj: Any, at: str = "") -> dict[str, Any]:
    """Every leaf of a JSON document by its JSON pointer (empty objects and lists are leaves)."""
    if isinstance(obj, dict) and obj:
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(_leaves(v, f"{at}/{k.replace('~', '~0').replace('/', '~1')}"))
        return out
    if isinstance(obj, list) and obj:
        out = {}
        for i, v in enumerate(obj):
            out.update(_leaves(v, f"{at}/{i}"))
        return out
    return {at: obj}


def _stored(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as etcd holds it after any write: defaulted (a scenario file is not)."""
    out = copy.deepcopy(obj)
    rules.apply_defaults(out["kind"], out)
    return out


def _changed_paths(before: dict[str, Any], after: dict[str, Any]) -> set[str]:
    a, b = _leaves(_stored(before)), _leaves(after)
    return {p for p in a.keys() | b.keys() if a.get(p, "<absent>") != b.get(p, "<absent>")
            and not p.startswith(_BOOKKEEPING)}


def _under(paths: set[str], prefixes: tuple[str, ...]) -> set[str]:
    return {p for p in paths if not any(p == q or p.startswith(q + "/") for q in prefixes)}


# (scenario, target, plan options, the object written, its name, the paths that change, JSON pointer -> value after)
CASES = {
    "startup_probe_added": (
        "tgi-probes", "support-bot/mistral-7b-tgi", ["--startup-probe", "600"], "Deployment", "mistral-7b-tgi",
        (f"{POD}/containers/0/startupProbe",),
        {f"{POD}/containers/0/startupProbe": {"httpGet": {"path": "/health", "port": 80, "scheme": "HTTP"},
                                              "periodSeconds": 10, "failureThreshold": 60, "timeoutSeconds": 1,
                                              "successThreshold": 1}}),
    "startup_probe_default_replaces": (
        "vllm-incident", "llm/vllm-server", ["--startup-probe"], "Deployment", "vllm-server",
        (f"{POD}/containers/0/startupProbe",),
        {f"{POD}/containers/0/startupProbe": {"httpGet": {"path": "/health", "port": 8000, "scheme": "HTTP"},
                                              "periodSeconds": 10, "failureThreshold": 30, "timeoutSeconds": 1,
                                              "successThreshold": 1}}),
    "max_surge": (
        "tgi-probes", "support-bot/mistral-7b-tgi", ["--max-surge", "0"], "Deployment", "mistral-7b-tgi",
        ("/spec/strategy/rollingUpdate",),
        {"/spec/strategy/rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}}),
    "shm_added": (
        "tgi-probes", "support-bot/mistral-7b-tgi", ["--shm-size", "16384Mi"], "Deployment", "mistral-7b-tgi",
        (f"{POD}/volumes", f"{POD}/containers/0/volumeMounts"),
        {f"{POD}/volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}],
         f"{POD}/containers/0/volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}),
    "shm_resized": (
        "vllm-incident", "llm/vllm-server", ["--shm-size", "16Gi"], "Deployment", "vllm-server",
        (f"{POD}/volumes/0/emptyDir/sizeLimit",),
        {f"{POD}/volumes/0": {"name": "shm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}}}),
    "memory_limit_and_request": (
        "vllm-incident", "llm/vllm-server", ["--memory-limit", "64Gi"], "Deployment", "vllm-server",
        (f"{POD}/containers/0/resources/limits/memory", f"{POD}/containers/0/resources/requests/memory"),
        {f"{POD}/containers/0/resources": {"limits": {"nvidia.com/gpu": "1", "memory": "64Gi"},
                                           "requests": {"nvidia.com/gpu": "1", "cpu": "8", "memory": "64Gi"}}}),
    "memory_limit_only": (
        "tgi-probes", "support-bot/mistral-7b-tgi", ["--memory-limit", "48Gi"], "Deployment", "mistral-7b-tgi",
        (f"{POD}/containers/0/resources/limits/memory",),
        {f"{POD}/containers/0/resources": {"limits": {"nvidia.com/gpu": "1", "memory": "48Gi"}}}),
    "hpa_queue_patched": (
        "vllm-incident", "llm/vllm-server", ["--queue-target", "4"], "HorizontalPodAutoscaler", "vllm-server-queue",
        ("/spec/metrics",),
        {"/spec/metrics": [{"type": "Pods", "pods": {"metric": {"name": "vllm:num_requests_waiting"},
                                                     "target": {"type": "AverageValue", "averageValue": "4"}}}]}),
    "scale_via_hpa": (
        "vllm-incident", "llm/vllm-server", ["--replicas", "3"], "HorizontalPodAutoscaler", "vllm-server-queue",
        ("/spec/minReplicas", "/spec/maxReplicas"), {"/spec/minReplicas": 3, "/spec/maxReplicas": 3}),
    "scale_without_hpa": (
        "tgi-probes", "support-bot/mistral-7b-tgi", ["--replicas", "3"], "Deployment", "mistral-7b-tgi",
        ("/spec/replicas",), {"/spec/replicas": 3}),
}


def _pointer(obj: Any, path: str) -> Any:
    for raw in path.lstrip("/").split("/"):
        key = raw.replace("~1", "/").replace("~0", "~")
        obj = obj[int(key)] if isinstance(obj, list) else obj[key]
    return obj


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_kind_patches_only_its_fields_once_and_rolls_back_exactly(case, tmp_path, capsys):
    scenario, target, options, kind, name, intended, values = CASES[case]
    store = tmp_path / "gpumem.db"
    with running_scenario(scenario, tmp_path) as sc:
        before = sc.kube.get(kind, target.split("/")[0], name)
        rc, plan = _run(capsys, sc, store, "plan", target, *options, "--json")
        assert rc == 0, plan
        assert (plan["target"]["kind"], plan["target"]["name"]) == (kind, name)
        assert plan["workload"] == (None if kind == "Deployment" else
                                    {"namespace": "llm", "kind": "Deployment", "name": "vllm-server"})
        assert plan["patch_type"] == "application/json-patch+json"
        assert sc.kube.calls(method="PATCH") == [] and sc.kube.calls(method="POST") == []
        rc, applied = _run(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
        assert (rc, applied["state"]) == (0, "applied"), applied
        mutating = [r for r in sc.kube.calls() if r.mutating]
        assert [(r.method, r.dry_run) for r in mutating] == [("PATCH", True), ("PATCH", False)], "dry run, then one write"
        assert mutating[1].resource == {"Deployment": "deployments", "HorizontalPodAutoscaler":
                                        "horizontalpodautoscalers"}[kind]
        after = sc.kube.get(kind, target.split("/")[0], name)
        for path, value in values.items():
            assert _pointer(after, path) == value, path
        changed = _changed_paths(before, after)
        assert changed and not _under(changed, intended), f"changed outside {intended}: {_under(changed, intended)}"
        rc, back = _run(capsys, sc, store, "rollback", plan["id"], "--yes", "--json")
        assert (rc, back["state"]) == (0, "rolled_back"), back
        assert len(sc.kube.writes()) == 2, "one write each way"
        restored = sc.kube.get(kind, target.split("/")[0], name)
        assert restored["spec"] == _stored(before)["spec"], "the prior spec, exactly"


def test_a_queue_hpa_is_created_where_none_scales_the_workload_and_its_rollback_deletes_it(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("tgi-probes", tmp_path) as sc:
        deployment = sc.kube.get("Deployment", "support-bot", "mistral-7b-tgi")
        rc, plan = _run(capsys, sc, store, "plan", "support-bot/mistral-7b-tgi", "--queue-target", "4", "--hpa-max", "5",
                        "--json")
        assert rc == 0, plan
        assert plan["patch_type"] == "create" and plan["target"]["kind"] == "HorizontalPodAutoscaler"
        assert [c["diff"] for c in plan["changes"]] == ["HPA metrics (none) -> Pods tgi_queue_size average 4"]
        assert sc.kube.calls(method="POST") == []
        rc, applied = _run(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
        assert (rc, applied["state"]) == (0, "applied"), applied
        assert [(r.method, r.dry_run) for r in sc.kube.calls() if r.mutating] == [("POST", True), ("POST", False)]
        hpa = sc.kube.get("HorizontalPodAutoscaler", "support-bot", "mistral-7b-tgi")
        assert hpa["spec"] == {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "mistral-7b-tgi"},
            "minReplicas": 2, "maxReplicas": 5,
            "metrics": [{"type": "Pods", "pods": {"metric": {"name": "tgi_queue_size"},
                                                  "target": {"type": "AverageValue", "averageValue": "4"}}}]}
        assert hpa["metadata"]["annotations"]["gpumem.io/plan"] == plan["id"]
        assert sc.kube.get("Deployment", "support-bot", "mistral-7b-tgi") == deployment, "the workload is not touched"
        rc, back = _run(capsys, sc, store, "rollback", plan["id"], "--yes", "--json")
        assert (rc, back["state"]) == (0, "rolled_back"), back
        deletes = [r for r in sc.kube.calls(method="DELETE")]
        assert [(r.dry_run, r.status) for r in deletes] == [(True, 200), (False, 200)]
        assert deletes[1].json()["preconditions"]["uid"] == hpa["metadata"]["uid"]
        assert sc.kube.get("HorizontalPodAutoscaler", "support-bot", "mistral-7b-tgi") is None
        assert len(sc.kube.writes()) == 2


def test_the_rollback_of_a_created_hpa_refuses_when_someone_changed_it(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("tgi-probes", tmp_path) as sc:
        _, plan = _run(capsys, sc, store, "plan", "support-bot/mistral-7b-tgi", "--queue-target", "4", "--json")
        assert _run(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
        hpa = sc.kube.get("HorizontalPodAutoscaler", "support-bot", "mistral-7b-tgi")
        hpa["spec"]["maxReplicas"] = 9
        sc.kube.add(hpa)  # someone raised maxReplicas by hand
        rc, text = _run(capsys, sc, store, "rollback", plan["id"], "--yes")
        assert rc == 2 and "/spec/maxReplicas: None / 4 / 9" in text
        assert sc.kube.calls(method="DELETE") == []
        assert sc.kube.get("HorizontalPodAutoscaler", "support-bot", "mistral-7b-tgi")["spec"]["maxReplicas"] == 9


def test_a_replica_change_goes_to_the_hpa_which_then_scales_the_deployment(tmp_path, capsys):
    """The HPA keeps vllm-server at 2..2: a plan for 3 replicas raises its minReplicas (and its
    maxReplicas with it) and the HPA controller scales the Deployment; the Deployment's own
    replicas are not written."""
    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        clock = ManualClock()
        sc.kube.clock = clock
        rc, plan = _run(capsys, sc, store, "plan", "llm/vllm-server", "--replicas", "3", "--json")
        assert rc == 0
        assert [c["diff"] for c in plan["changes"]] == ["HPA minReplicas 2 -> 3", "HPA maxReplicas 2 -> 3"]
        assert plan["patch"] == [{"op": "test", "path": "/spec/minReplicas", "value": 2},
                                 {"op": "replace", "path": "/spec/minReplicas", "value": 3},
                                 {"op": "test", "path": "/spec/maxReplicas", "value": 2},
                                 {"op": "replace", "path": "/spec/maxReplicas", "value": 3}]
        hpa_rv = sc.kube.get("HorizontalPodAutoscaler", "llm", "vllm-server-queue")["metadata"]["resourceVersion"]
        assert plan["resource_version"] == hpa_rv
        assert _run(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
        body = sc.kube.writes()[0].json()
        assert body[0] == {"op": "replace", "path": "/metadata/resourceVersion", "value": hpa_rv}
        assert sc.kube.writes(resource="deployments") == []
        clock.advance(20)  # past the HPA controller's sync
        assert sc.kube.get("Deployment", "llm", "vllm-server")["spec"]["replicas"] == 3


def test_a_plan_touching_the_hpa_and_the_deployment_is_refused(tmp_path, capsys):
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc, text = _run(capsys, sc, tmp_path / "s.db", "plan", "llm/vllm-server", "--replicas", "3",
                        "--set", "max-num-seqs=64")
        assert rc == 2 and "plan them one at a time" in text and "HorizontalPodAutoscaler vllm-server-queue" in text
        assert [r for r in sc.kube.calls() if r.mutating] == []


@pytest.mark.parametrize(("options", "words"), [
    (["--memory-limit", "32Gi"], "--memory-limit = 32Gi: is not above the current limit 48Gi"),
    (["--memory-limit", "lots"], "--memory-limit = lots: expected a memory quantity"),
    (["--shm-size", "0.5"], "--shm-size = 0.5: is not a whole number of bytes"),
    (["--max-surge", "150%"], "--max-surge = 150%: expected a whole number or a percentage"),
    (["--replicas", "0"], "--replicas = 0: HPA vllm-server-queue scales this workload"),
])
def test_bad_values_are_refused_naming_the_field(options, words, tmp_path, capsys):
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc, text = _run(capsys, sc, tmp_path / "s.db", "plan", "llm/vllm-server", *options)
        assert rc == 2 and words in text and "Traceback" not in text
        assert [r for r in sc.kube.calls() if r.mutating] == []


def test_escalate_tier_actions_have_no_apply_path(tmp_path, capsys):
    with running_scenario("vllm-incident", tmp_path) as sc:
        for action in ("quantize_weights", "bigger_gpu_or_tp", "review_tp"):
            rc, text = _run(capsys, sc, tmp_path / "s.db", "plan", "llm/vllm-server", "--action", action)
            assert rc == 2, text
            assert f"{action} is an escalate-tier action" in text and "never applies it" in text
        assert [r for r in sc.kube.calls() if r.mutating] == []


def test_the_watch_after_an_hpa_plan_follows_the_workload_it_scales(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        settled = sc.kube.get("Deployment", "llm", "vllm-server")  # as a controller leaves it (the file omits it)
        settled["status"].update(observedGeneration=settled["metadata"]["generation"], availableReplicas=2)
        sc.kube.add(settled)
        _, plan = _run(capsys, sc, store, "plan", "llm/vllm-server", "--queue-target", "4", "--json")
        rc, applied = _run(capsys, sc, store, "apply", plan["id"], "--yes", "--watch", "1", "--json")
        # the watch looked at vllm-server's rollout and pods; their restart and CUDA OOM lines
        # (the incident's) came before the write, against the pods recorded right before it, so
        # they do not count: held
        assert (rc, applied["state"]) == (0, "watched"), applied
        assert (applied["watch"]["observed_generation"], applied["watch"]["replicas"]) == (14, 2)
        assert (applied["watch"]["restarts"], applied["watch"]["oom_lines"]) == (0, 0)
        reads = {r.name for r in sc.kube.calls(verb="get", resource="deployments")}
        assert reads == {"vllm-server"}
