"""The writer identity's Role grants what the actuator calls and nothing more: a test fails if the
actuator makes a call deploy/overlays/remediation/rbac-writer.yaml does not grant, and a missing verb is named."""

from __future__ import annotations

import json

import yaml

from bot.main import main
from tests.support import words
from tests.support.fake_kube_rules import rule_allows
from tests.support.kube_fixtures import WRITER_MANIFEST as MANIFEST
from tests.support.kube_fixtures import rbac_rules, running_scenario

RULES = rbac_rules("Role", MANIFEST)


def _granted() -> set[tuple[str, str, str]]:
    return {(v, g, res) for r in RULES for v in r["verbs"] for g in r["apiGroups"] for res in r["resources"]}


def test_the_role_grants_no_update_and_deletes_only_what_gpumem_creates():
    verbs = {v for r in RULES for v in r["verbs"]}
    assert verbs == {"get", "list", "patch", "create", "delete"}
    deletable = {(g, res) for v, g, res in _granted() if v == "delete"}
    assert deletable == {("apps", "deployments"), ("", "services"), ("autoscaling", "horizontalpodautoscalers")}, (
        "delete only what a pool split or an HPA on queue depth creates")
    resources = {(g, res) for r in RULES for g in r["apiGroups"] for res in r["resources"]}
    assert resources == {("apps", "deployments"), ("apps", "statefulsets"), ("autoscaling", "horizontalpodautoscalers"),
                         ("", "services"), ("serving.kserve.io", "inferenceservices"),
                         ("leaderworkerset.x-k8s.io", "leaderworkersets")}
    assert {v for v, g, res in _granted() if res in ("inferenceservices", "leaderworkersets")} == {"get", "patch"}
    assert {(g, res) for v, g, res in _granted() if v == "list"} == {
        ("autoscaling", "horizontalpodautoscalers")}, "list: only to find the HPA that scales a workload"
    kinds = [d["kind"] for d in yaml.safe_load_all(MANIFEST.read_text()) if d]
    assert kinds == ["ServiceAccount", "Role", "RoleBinding"]


def _preview_read(r) -> bool:
    """A plan preview's read of nodes or pods, cluster-wide (the reader's, not the actuator's)."""
    return r.verb == "list" and r.resource in ("nodes", "pods") and r.namespace is None


def test_every_call_of_plan_apply_rollback_is_granted(tmp_path, capsys):
    """The operator's CLI identity here holds the writer's Role and the reader's rules: every
    write is one the writer's Role grants; the reads of pods and logs right before the write
    (the watch's baseline) are the reader's, which the bot makes with the reader identity."""
    store = tmp_path / "gpumem.db"
    reader = rbac_rules()
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(RULES, namespace="llm")
        sc.kube.grant(reader)
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--set", "max-num-seqs=64", "--json", *common]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert main(["apply", doc["id"], "--yes", "--no-watch", *common]) == 0
        assert main(["rollback", doc["id"], "--yes", *common]) == 0
        calls = sc.kube.calls()
    assert calls and all(r.status != 403 for r in calls)
    for r in calls:
        by_writer = any(rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
                        for rule in RULES)
        by_reader = r.resource in ("pods", "nodes") and r.verb in ("list", "get") and any(
            rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name) for rule in reader)
        assert by_writer or by_reader, (r.method, r.path)
    assert {r.verb for r in calls if r.resource not in ("pods", "nodes")} == {"get", "patch"}
    # the watch's baseline (pods and their logs in the namespace) and the preview (nodes and
    # pods cluster-wide) read with the reader's rules
    assert {(r.verb, r.resource, r.subresource) for r in calls if r.resource in ("pods", "nodes")} == {
        ("list", "pods", None), ("get", "pods", "log"), ("list", "nodes", None)}
    assert sorted(r.resource for r in calls if _preview_read(r)) == ["nodes", "pods"]
    assert doc["preview"]["blast_radius"]["outcome"] == "fits"


def test_the_writer_role_alone_plans_and_its_preview_names_what_it_could_not_read(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(RULES, namespace="llm")
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--set", "max-num-seqs=64", "--json", *common]) == 0
        doc = json.loads(capsys.readouterr().out)
        calls = sc.kube.calls()
    actuator = [r for r in calls if not _preview_read(r)]
    assert actuator and all(r.status != 403 for r in actuator)
    assert {r.verb for r in actuator} == {"get"}
    # the preview reads nodes and pods with the reader's ClusterRole; this identity has only the
    # writer's Role, so both are refused and the plan says which permission it lacked
    reads = [r for r in calls if _preview_read(r)]
    assert sorted((r.resource, r.status) for r in reads) == [("nodes", 403), ("pods", 403)]
    reader_rules = rbac_rules("ClusterRole")
    assert all(any(rule_allows(rule, r.verb, "", r.resource, None, None) for rule in reader_rules) for r in reads)
    blast = doc["preview"]["blast_radius"]
    assert blast["outcome"] == "not_checked" and blast["restart_pods"] == []
    assert [words.en(n["params"]["issue"]) for n in doc["preview"]["notes"]] == [
        "missing RBAC: list nodes cluster-wide", "missing RBAC: list pods cluster-wide"]


def test_a_writer_that_may_not_list_pods_still_writes_and_the_audit_says_why_no_baseline(tmp_path, capsys):
    from bot.store.db import Store

    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(RULES, namespace="llm")
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--replicas", "3", "--json", *common]) == 0
        plan = json.loads(capsys.readouterr().out)["id"]
        assert main(["apply", plan, "--yes", "--no-watch", *common]) == 0
        patches = sc.kube.writes(verb="patch")
        refused = [(r.verb, r.resource) for r in sc.kube.calls() if r.status == 403 and not _preview_read(r)]
    assert len(patches) == 1 and patches[0].status == 200
    assert refused == [("list", "pods")]  # the baseline's, in the namespace (the preview's are its own notes)
    applied = next(e.detail for e in Store.open(store).plan_audit(plan) if e.to_state == "applied")
    assert "baseline" not in applied and "list pods" in applied["baseline_error"]


#: plan, apply and roll back every change kind; (scenario, target, plan options)
_EVERY_KIND = [
    ("vllm-incident", "llm/vllm-server", ["--set", "max-num-seqs=64"]),
    ("vllm-incident", "llm/vllm-server", ["--replicas", "3"]),
    ("vllm-incident", "llm/vllm-server", ["--queue-target", "4"]),
    ("vllm-incident", "llm/vllm-server", ["--startup-probe", "900"]),
    ("vllm-incident", "llm/vllm-server", ["--max-surge", "0"]),
    ("vllm-incident", "llm/vllm-server", ["--shm-size", "16Gi"]),
    ("vllm-incident", "llm/vllm-server", ["--memory-limit", "64Gi"]),
    ("tgi-probes", "support-bot/mistral-7b-tgi", ["--queue-target", "4"]),
    ("tgi-probes", "support-bot/mistral-7b-tgi", ["--replicas", "3"]),
]


def test_every_kind_uses_only_granted_calls_and_all_of_the_hpa_grant(tmp_path, capsys):
    """Every call of plan, apply and rollback of every kind is granted, and what the change kinds
    use is exactly what the Role grants (but `create` of Deployments and Services, the pool
    split's, and StatefulSets, which these scenarios do not have)."""
    used: set[tuple[str, str, str]] = set()
    for i, (scenario, target, options) in enumerate(_EVERY_KIND):
        store = tmp_path / f"k{i}.db"
        with running_scenario(scenario, tmp_path) as sc:
            sc.kube.grant(RULES, namespace=target.split("/")[0])
            sc.kube.grant(rbac_rules())  # the reader's: the pods read right before a write (the watch's baseline)
            common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
            capsys.readouterr()
            assert main(["plan", target, *options, "--json", *common]) == 0, options
            plan = json.loads(capsys.readouterr().out)["id"]
            assert main(["apply", plan, "--yes", "--no-watch", *common]) == 0, options
            assert main(["rollback", plan, "--yes", *common]) == 0, options
            calls = sc.kube.calls()
        assert calls and all(r.status != 403 for r in calls), options
        used |= {(r.verb, r.api_group or "", r.resource or "") for r in calls if r.resource not in ("pods", "nodes")}
    pool_split = {("create", "apps", "deployments"), ("create", "", "services"), ("delete", "apps", "deployments"),
                  ("delete", "", "services"), ("get", "", "services")}
    # StatefulSets get the same get and patch as Deployments (`gpumem plan --kind StatefulSet`)
    statefulsets = {("get", "apps", "statefulsets"), ("patch", "apps", "statefulsets")}
    # the custom resources' get and patch: `test_every_call_of_plan_apply_rollback_on_an_owner_is_granted`
    owners = {(v, g, res) for v, g, res in _granted() if res in ("inferenceservices", "leaderworkersets")}
    assert used == _granted() - pool_split - statefulsets - owners


def test_a_writer_without_the_role_is_told_the_missing_verb(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    read_only = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(read_only, namespace="llm")
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--set", "max-num-seqs=64", "--json", *common]) == 0
        plan = json.loads(capsys.readouterr().out)["id"]
        assert main(["apply", plan, "--yes", "--no-watch", *common]) == 2
        err = capsys.readouterr().err
        refused = [r for r in sc.kube.calls(verb="patch")]
    assert "patch deployments.apps in namespace llm" in err
    assert [r.status for r in refused] == [403], "the dry run was refused; no write was attempted"


def test_every_call_of_a_pool_split_and_its_rollback_is_granted(tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(RULES, namespace="llm")
        sc.kube.grant(rbac_rules())  # the reader's: the pods read right before a write (the watch's baseline)
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--split-pools", "--json", *common]) == 0
        first = json.loads(capsys.readouterr().out)["id"]
        assert main(["apply", first, "--yes", "--no-watch", *common]) == 0
        capsys.readouterr()
        assert main(["plan", "llm/vllm-server", "--split-pools", "--phase", "2", "--routing-confirmed", "--json",
                     *common]) == 0
        second = json.loads(capsys.readouterr().out)["id"]
        assert main(["apply", second, "--yes", "--no-watch", *common]) == 0
        assert main(["rollback", second, "--yes", *common]) == 0
        assert main(["rollback", first, "--yes", *common]) == 0
        calls = sc.kube.calls()
    assert calls and all(r.status != 403 for r in calls)
    writes = [r for r in calls if r.resource != "pods"]
    for r in writes:
        assert any(rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
                   for rule in RULES), (r.method, r.path)
    assert {r.verb for r in writes} == {"get", "patch", "create", "delete"}


def test_a_writer_that_cannot_list_hpas_makes_no_replica_plan(tmp_path, capsys):
    """Whether an HPA would undo a replica change cannot be known: no plan (fail closed)."""
    read_only = [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get"]}]
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.kube.grant(read_only, namespace="llm")
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(tmp_path / "s.db"), "--lang", "en"]
        assert main(["plan", "llm/vllm-server", "--replicas", "3", *common]) == 2
        assert "list horizontalpodautoscalers.autoscaling in namespace llm" in capsys.readouterr().err
        assert [r for r in sc.kube.calls() if r.mutating] == []


def test_every_call_of_plan_apply_rollback_on_an_owner_is_granted(tmp_path, capsys):
    """An InferenceService's model args and a LeaderWorkerSet's templates: every call the writer
    makes is one its Role grants (get and patch on the custom resource), the list of Deployments
    that finds the one the InferenceService owns is the reader's."""
    import copy

    from tests.test_crd_schemas import ISVC, LWS

    store = tmp_path / "gpumem.db"
    reader = rbac_rules()
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(copy.deepcopy(ISVC), copy.deepcopy(LWS))
        sc.kube.grant(RULES, namespace="llm")
        sc.kube.grant(reader)
        common = ["--kubeconfig", str(sc.kubeconfig), "--store", str(store), "--lang", "en"]
        for target in ("llm/isvc/llama", "llm/lws/vllm"):
            capsys.readouterr()
            rc = main(["plan", target, "--set", "max-num-seqs=64", "--json", *common])
            out = capsys.readouterr()
            assert rc == 0, out.err
            doc = json.loads(out.out)
            assert main(["apply", doc["id"], "--yes", "--no-watch", *common]) == 0
            assert main(["rollback", doc["id"], "--yes", *common]) == 0
        calls = sc.kube.calls()
    assert calls and all(r.status != 403 for r in calls)
    writes = [(r.verb, r.resource) for r in calls if r.verb == "patch"]
    assert writes == [("patch", "inferenceservices")] * 4 + [("patch", "leaderworkersets")] * 4  # dry run + write, x2
    for r in calls:
        by_writer = any(rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name)
                        for rule in RULES)
        by_reader = r.verb in ("list", "get") and any(
            rule_allows(rule, r.verb, r.api_group or "", r.resource or "", r.subresource, r.name) for rule in reader)
        assert by_writer or by_reader, (r.method, r.path)
