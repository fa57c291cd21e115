"""A pool split's phase 1 never stores a credential: the plan keeps the clones masked, with the
originals' identity and resourceVersion and what rebuilds the clones; apply re-reads the
originals and rebuilds the clones from them, so the long pool carries the original's key
(the service still works) while the SQLite file, `plan` text and `--json`, `plans --json`,
the refusals and the logs never hold it. Each refusal counts the writes the stand-in API
server received."""

from __future__ import annotations

import json
import logging

import pytest

from bot.actuator.writer import JSON_PATCH, KubeWriter
from bot.store.db import Store
from tests.support.kube_fixtures import run_cli, running_scenario
from tests.test_plan_secrets import HF, SECRETS, _store_bytes, _with_key

TARGET = "llm/vllm-server"
NS, NAME, LONG = "llm", "vllm-server", "vllm-server-long"
#: a literal credential in the original's env, under a name that says secret
ENV_KEY = "sk-live-0123456789abcdefENVSECRET"
#: a credential put in after the plan was made (a rotation)
ROTATED = "sk-proj-Rotated000111222333444555"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


def _vllm(obj: dict) -> dict:
    return next(c for c in obj["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")


def _plant(sc, form: str, secret: str) -> None:
    """The original with an `--api-key` in `form` and a literal OPENAI_API_KEY in its env."""
    _with_key(sc, form, secret)
    obj = sc.kube.get("Deployment", NS, NAME)
    _vllm(obj).setdefault("env", []).append({"name": "OPENAI_API_KEY", "value": ENV_KEY})
    sc.kube.add(obj)


def _absent(*texts: object, secrets: tuple[str, ...]) -> None:
    for text in texts:
        shown = text if isinstance(text, (str, bytes)) else json.dumps(text)
        for value in (*secrets, ENV_KEY, HF):
            assert (value.encode() if isinstance(shown, bytes) else value) not in shown, value


@pytest.mark.parametrize("form", ["split", "joined"])
def test_the_store_keeps_no_key_and_the_applied_clone_carries_the_originals(cluster, tmp_path, capsys, caplog, form):
    caplog.set_level(logging.DEBUG)
    secret = SECRETS[0]
    _plant(cluster, form, secret)
    original = cluster.kube.get("Deployment", NS, NAME)
    service = cluster.kube.get("Service", NS, NAME)
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    assert rc == 0, plan
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools")
    assert rc == 0 and "vllm-server-long" in text
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")  # the one applied
    rc, listed = run_cli(capsys, cluster, store, "plans", "--all", "--json")
    _absent(plan, text, listed, _store_bytes(store), secrets=(secret,))

    # what rebuilds the clone: the sources' identity and version, the replicas, the flags
    stored = Store.open(store).get(plan["id"]).plan
    deployment_op, service_op = stored.patch
    assert deployment_op["source"] == {"kind": "Deployment", "name": NAME, "uid": original["metadata"]["uid"],
                                       "resourceVersion": original["metadata"]["resourceVersion"]}
    assert service_op["source"] == {"kind": "Service", "name": NAME, "uid": service["metadata"]["uid"],
                                    "resourceVersion": service["metadata"]["resourceVersion"]}
    seqs = plan["split_pools"]["long"]["max_num_seqs"]
    assert deployment_op["build"] == {"replicas": 1, "container": "vllm",
                                      "flags": [["max-model-len", 8192], ["max-num-seqs", seqs]]}
    kept = _vllm(deployment_op["value"])
    masked_key = ["--api-key", "<redacted>"] if form == "split" else ["--api-key=<redacted>"]
    assert kept["args"][1:1 + len(masked_key)] == masked_key, "the flag is kept, its value masked"
    assert {"name": "OPENAI_API_KEY", "value": "<redacted>"} in kept["env"]

    rc, applied = run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
    assert (rc, applied["state"]) == (0, "applied"), applied
    assert [(r.verb, r.resource, r.status) for r in cluster.kube.writes()] == [("create", "deployments", 201),
                                                                                ("create", "services", 201)]
    long = _vllm(cluster.kube.get("Deployment", NS, LONG))
    key = ["--api-key", secret] if form == "split" else [f"--api-key={secret}"]
    assert long["args"][1:1 + len(key)] == key, "the long pool serves with the original's key"
    assert {"name": "OPENAI_API_KEY", "value": ENV_KEY} in long["env"]
    assert {"name": "HF_TOKEN", "value": HF} in long["env"]
    assert [a for a in long["args"] if a not in _vllm(original)["args"]] == [f"--max-num-seqs={seqs}"]

    rc, back = run_cli(capsys, cluster, store, "rollback", plan["id"], "--yes", "--json")
    assert (rc, back["state"]) == (0, "rolled_back"), back
    assert [r.resource for r in cluster.kube.writes(verb="delete")] == ["services", "deployments"]
    rc, listed = run_cli(capsys, cluster, store, "plans", "--all", "--json")
    _absent(applied, back, listed, _store_bytes(store), caplog.text, secrets=(secret,))


def test_an_original_changed_since_planned_is_refused_with_zero_writes(cluster, tmp_path, capsys):
    _plant(cluster, "split", SECRETS[0])
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    assert rc == 0
    (at,) = [i for i, a in enumerate(_vllm(cluster.kube.get("Deployment", NS, NAME))["args"]) if a == SECRETS[0]]
    KubeWriter(cluster.api("prod")).patch("Deployment", NS, NAME, [
        {"op": "replace", "path": f"/spec/template/spec/containers/0/args/{at}", "value": ROTATED}], JSON_PATCH)
    base = len(cluster.kube.writes())
    rc, text = run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 2 and f"the object changed since plan {plan['id']} was made" in text and "nothing was written" in text
    assert len(cluster.kube.writes()) == base and cluster.kube.dry_runs() == []
    assert cluster.kube.get("Deployment", NS, LONG) is None and cluster.kube.get("Service", NS, LONG) is None
    assert Store.open(store).get(plan["id"]).state == "failed"
    _absent(text, _store_bytes(store), secrets=(SECRETS[0], ROTATED))


def test_a_service_changed_since_planned_is_refused_with_zero_writes(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    assert rc == 0
    planned = cluster.kube.get("Service", NS, NAME)["metadata"]["resourceVersion"]
    labels = cluster.kube.get("Service", NS, NAME)["metadata"].get("labels") or {}
    KubeWriter(cluster.api("prod")).patch("Service", NS, NAME, [
        {"op": "add", "path": "/metadata/labels", "value": {**labels, "team": "serving"}}], JSON_PATCH)
    now = cluster.kube.get("Service", NS, NAME)["metadata"]["resourceVersion"]
    base = len(cluster.kube.writes())
    rc, text = run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 2 and f"(resourceVersion {planned} -> {now}); nothing was written" in text, text
    assert len(cluster.kube.writes()) == base and cluster.kube.dry_runs() == []
    assert cluster.kube.get("Deployment", NS, LONG) is None


def test_a_clone_whose_credential_parts_no_longer_match_is_refused_with_zero_writes(cluster, tmp_path, capsys):
    """The original's key moved from `--api-key KEY` to `--api-key=KEY` under the same
    resourceVersion (the stand-in keeps it when an object is put back as read): the rebuilt
    clone masks differently from the stored one, so nothing is sent."""
    _plant(cluster, "split", SECRETS[0])
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    assert rc == 0
    obj = cluster.kube.get("Deployment", NS, NAME)
    rv = obj["metadata"]["resourceVersion"]
    args = _vllm(obj)["args"]
    at = args.index("--api-key")
    args[at:at + 2] = [f"--api-key={SECRETS[0]}"]
    cluster.kube.add(obj)
    assert cluster.kube.get("Deployment", NS, NAME)["metadata"]["resourceVersion"] == rv
    rc, text = run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")
    assert rc == 2, text
    assert (f"Deployment/{LONG} rebuilt from the original as it reads now does not match the clone plan "
            f"{plan['id']} stores (at /spec/template/spec/containers/0/args") in text and "nothing was written" in text
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    failed = [r for r in Store.open(store).audit() if r.to_state == "failed"]
    assert [r.detail["error"] for r in failed] == ["split_clone_mismatch"]
    _absent(text, _store_bytes(store), secrets=(SECRETS[0],))


def test_a_rollback_refusal_after_a_key_rotation_in_the_long_pool_quotes_neither_key(cluster, tmp_path, capsys):
    _plant(cluster, "joined", SECRETS[0])
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--json")
    assert run_cli(capsys, cluster, store, "apply", plan["id"], "--yes", "--no-watch")[0] == 0
    long = cluster.kube.get("Deployment", NS, LONG)
    at = _vllm(long)["args"].index(f"--api-key={SECRETS[0]}")
    KubeWriter(cluster.api("prod")).patch("Deployment", NS, LONG, [
        {"op": "replace", "path": f"/spec/template/spec/containers/0/args/{at}", "value": f"--api-key={ROTATED}"}],
        JSON_PATCH)
    rc, text = run_cli(capsys, cluster, store, "rollback", plan["id"], "--yes")
    assert rc == 2 and "nothing was deleted" in text
    assert "'path': '/metadata/generation', 'gpumem': 1, 'now': 2" in text, "the spec changed since the create"
    assert "/args" not in text, "the keys compare masked: the rotation is no value difference"
    assert cluster.kube.writes(verb="delete") == [] and cluster.kube.dry_runs(verb="delete") == []
    _absent(text, _store_bytes(store), secrets=(SECRETS[0], ROTATED))



def test_a_key_inside_the_sh_c_script_a_split_edits_is_refused_with_nothing_stored(cluster, tmp_path, capsys):
    """The long pool's flags would be edited inside the one word that also holds the key: refused
    as any flag edit of such a word is, before a plan exists."""
    _plant(cluster, "shell", SECRETS[1])
    store = tmp_path / "gpumem.db"
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools")
    assert rc == 2 and "args[0] also carries a credential" in text and "nothing was planned or written" in text
    assert Store.open(store).plans(open_only=False) == []
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    _absent(text, _store_bytes(store), secrets=(SECRETS[1],))
