"""`gpumem apply --yes` when another writer puts the change back during the watch: on a pipe the
last stamped line says reverted, stdout leads with "reverted by another writer", then per field
the three values and who put it back (managedFields), then what to do; exit 1; `--json` has
`watch.reverted[]`; Chinese says it in Chinese."""

from __future__ import annotations

import json

import pytest

from tests.support.fake_kube import Reverter
from tests.support.kube_fixtures import manual_clock, running_scenario
from tests.test_remediate_terminal import Pipe, _gpumem, _plan

ARGS = ("spec", "template", "spec", "containers", 0, "args")


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        sc.clock = manual_clock(sc, ready_after_s=30.0)
        sc.kube.managed_fields = True
        original = list(sc.kube.get("Deployment", "llm", "vllm-server")["spec"]["template"]["spec"]["containers"][0]
                        ["args"])
        sc.kube.reverters.append(Reverter("Deployment", "llm", "vllm-server", ARGS, original, "kserve-controller",
                                          after_s=25))
        yield sc


def test_on_a_pipe_a_revert_ends_the_watch_and_says_who(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    err = Pipe()
    rc, out = _gpumem(cluster, store, err, "apply", plan, "--yes")
    assert rc == 1
    lines = err.getvalue().splitlines()
    assert ": reverted by another writer, " in lines[-1]
    first, second, third, fourth = out.splitlines()[:4]
    assert first.startswith("Watch ended after 0:") and first.endswith(
        f"(window 10:00): reverted by another writer. Plan {plan}: reverted.")
    assert second.startswith("  watch: reverted: another writer put back what the plan changed")
    assert third.startswith("  /spec/template/spec/containers/0/args/") and third.endswith(" UTC")
    assert "--max-num-seqs=128 / --max-num-seqs=64 / --max-num-seqs=128" in third
    assert "reverted by kserve-controller at 2026-" not in third and "reverted by kserve-controller at " in third
    assert fourth.startswith("  Next: fold the change into the source of truth (gpumem plan --out FILE")
    assert "gpumem rollback" not in out
    assert len(cluster.kube.writes()) == 1


def test_the_json_and_chinese_say_reverted(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    rc, out = _gpumem(cluster, store, Pipe(), "apply", plan, "--yes", "--json")
    doc = json.loads(out)
    assert rc == 1 and doc["state"] == "reverted" and doc["watch"]["outcome"] == "reverted"
    (r,) = doc["watch"]["reverted"]
    assert (r["manager"], r["operation"], r["put_back"]) == ("kserve-controller", "Update", True)
    assert r["at"].startswith("2026-03-09T21:00:") and r["seen_at"].endswith("Z")


def test_in_chinese(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    rc, out = _gpumem(cluster, store, Pipe(), "apply", plan, "--yes", lang="zh")
    assert rc == 1
    assert out.splitlines()[0].endswith(f"：已被其他写入者改回。计划 {plan}：已被改回。")
    assert "已被 kserve-controller 于 " in out and "真实来源" in out
