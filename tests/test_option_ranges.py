"""The plan options that are not engine flags are range-checked like the flags
(`runbooks.remediation.value_ranges.OPTIONS`, `MEMORY_BYTES`): a value outside is refused naming
the option, the value and the range, exit 2, before anything is planned, with zero writes and
zero dry runs at the stand-in API server; from the terminal, from Slack, and for a recorded
triage's change."""

from __future__ import annotations

import pytest

import tests.test_slack_remediation as R
from bot.store.db import Store
from runbooks.model.errors import UsageError
from runbooks.remediation.edits.hpa import hpa_queue
from runbooks.remediation.value_ranges import OPTIONS, check_option
from tests.support.kube_fixtures import run_cli, running_scenario

TARGET = "llm/vllm-server"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        yield sc


@pytest.mark.parametrize(("argv", "refusal"), [
    (["--queue-target", "0"], "--queue-target 0 is out of range: gpumem plans 1..10000"),
    (["--queue-target", "10001"], "--queue-target 10001 is out of range: gpumem plans 1..10000"),
    (["--queue-target", "2.5"], "--queue-target 2.5 is out of range: gpumem plans 1..10000"),
    (["--queue-target", "9" * 5000],
     "--queue-target 99999999999999999999999999999999... (5000 characters) is out of range: gpumem plans 1..10000"),
    (["--queue-target", "4", "--hpa-max", "0"], "--hpa-max 0 is out of range: gpumem plans 1..1000"),
    (["--queue-target", "4", "--hpa-max", "5000"], "--hpa-max 5000 is out of range: gpumem plans 1..1000"),
    (["--hpa-max", "-3"], "--hpa-max -3 is out of range: gpumem plans 1..1000"),
    (["--startup-probe", "5"], "--startup-probe 5 is out of range: gpumem plans 10..7200"),
    (["--startup-probe", "86400"], "--startup-probe 86400 is out of range: gpumem plans 10..7200"),
    (["--max-surge", "5000"], "--max-surge 5000 is out of range: gpumem plans 0..1000"),
    (["--shm-size", "1Ki"], "--shm-size 1Ki is out of range: gpumem plans 1Mi..64Ti"),
    (["--memory-limit", "100Pi"], "--memory-limit 100Pi is out of range: gpumem plans 1Mi..64Ti"),
    (["--split-pools", "--threshold", "0"], "--threshold 0 is out of range: gpumem plans 1..10000000"),
    (["--split-pools", "--threshold", "20000000"], "--threshold 20000000 is out of range: gpumem plans 1..10000000"),
    (["--split-pools", "--long-replicas", "0"], "--long-replicas 0 is out of range: gpumem plans 1..1000"),
    (["--split-pools", "--long-replicas", "1001"], "--long-replicas 1001 is out of range: gpumem plans 1..1000"),
])
def test_an_option_out_of_range_is_refused_naming_it_with_zero_writes(cluster, tmp_path, capsys, argv, refusal):
    store = tmp_path / "gpumem.db"
    rc, text = run_cli(capsys, cluster, store, "plan", TARGET, *argv)
    assert rc == 2 and f"gpumem plan: {refusal}. Nothing was planned or written." in text, text
    assert "Traceback" not in text
    assert cluster.kube.writes() == [] and cluster.kube.dry_runs() == []
    assert Store.open(store).plans(open_only=False) == []


def test_the_bounds_themselves_are_planned(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--queue-target", "10000", "--json")
    assert rc == 0, plan
    (metrics,) = [op["value"] for op in plan["patch"] if op["path"] == "/spec/metrics" and op["op"] != "test"]
    assert metrics[0]["pods"]["target"]["averageValue"] == "10000"
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--startup-probe", "7200", "--json")
    assert rc == 0 and plan["changes"][0]["new"] == 7200
    rc, plan = run_cli(capsys, cluster, store, "plan", TARGET, "--split-pools", "--long-replicas", "1000", "--json")
    assert rc == 0 and plan["split_pools"]["long"]["replicas"] == 1000
    assert cluster.kube.writes() == []


def test_a_recorded_queue_target_out_of_range_is_refused_by_the_same_table():
    workload = {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "namespace": "n"},
                "spec": {"replicas": 2}}
    with pytest.raises(UsageError) as e:
        hpa_queue(workload, None, "vllm:num_requests_waiting", 0)
    assert (e.value.code, e.value.params) == ("flag_value_out_of_range",
                                              {"flag": "--queue-target", "value": "0", "range": "1..10000"})
    with pytest.raises(UsageError) as e:
        hpa_queue(workload, None, "vllm:num_requests_waiting", 4, 10_001)
    assert e.value.params == {"flag": "--hpa-max", "value": "10001", "range": "1..1000"}
    assert hpa_queue(workload, None, "vllm:num_requests_waiting", "4", "1000").create["spec"]["maxReplicas"] == 1000


@pytest.mark.parametrize("option", sorted(OPTIONS))
def test_each_option_refuses_a_bool_and_a_value_past_its_top(option):
    top = int(OPTIONS[option].high)
    assert check_option(option, str(top)) == top
    for bad in (True, top + 1, "ten"):
        with pytest.raises(UsageError) as e:
            check_option(option, bad)
        assert e.value.params["flag"] == option and e.value.params["range"] == OPTIONS[option].words()


def test_slack_refuses_an_option_out_of_range_ephemerally_with_zero_writes(tmp_path):
    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        R._command(bot, fake, "plan llm/vllm-server --queue-target 4 --hpa-max 5000 --context prod", n=50)
        (reply,) = R._respond(fake, 50)
        assert "--hpa-max 5000 is out of range: gpumem plans 1..1000. Nothing was planned or written." in reply["text"]
        assert sc.kube.writes() == [] and sc.kube.dry_runs() == []
        assert Store.open(tmp_path / "gpumem.db").plans(open_only=False) == []
