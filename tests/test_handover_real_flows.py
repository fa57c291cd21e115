"""The handover of a shift made by the real flows, not by writing the store directly: a live
`gpumem triage` against the Kubernetes stand-in, plans applied, rolled back and left waiting
through `gpumem plan` / `apply` / `rollback`, a note, then `gpumem handover --json` with a real
Prometheus holding the shift's history and the live object read back for the stop-gap."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from bot.main import main
from tests.support import prom_harness as h
from tests.support.kube_fixtures import running_scenario

TARGET = "llm/vllm-server"


@pytest.fixture
def shift(tmp_path, capsys):
    (tmp_path / "prometheus").mkdir()
    try:
        with h.run_prometheus(tmp_path / "prometheus") as prom, running_scenario("vllm-incident", tmp_path) as sc:
            config = tmp_path / "gpumem.yaml"
            config.write_text(f"store:\n  path: {tmp_path / 'gpumem.db'}\nclusters:\n  - context: prod\n    kubeconfig: {sc.kubeconfig}\n"
                              f"prometheus:\n  url: {prom.url}\n  timeout_s: 20\n")
            yield tmp_path, config, sc
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


def _run(capsys, config, db, *argv: str) -> tuple[int, dict | str]:
    rc = main([*argv, "--config", str(config), "--lang", "en"])  # the store: the config's store.path
    out = capsys.readouterr()
    try:
        return rc, json.loads(out.out)
    except ValueError:
        return rc, out.out + out.err


def test_a_shift_of_real_flows_hands_over_what_happened_and_what_is_still_in_place(shift, capsys):
    tmp_path, config, sc = shift
    db = tmp_path / "gpumem.db"
    rc, report = _run(capsys, config, db, "triage", TARGET, "--context", "prod", "--json")
    assert rc in (0, 1) and report["target"] == TARGET
    verdict = report["verdict"]["primary"]
    _, seqs = _run(capsys, config, db, "plan", TARGET, "--context", "prod", "--set", "max-num-seqs=64", "--json")
    assert _run(capsys, config, db, "apply", seqs["id"], "--context", "prod", "--yes", "--no-watch")[0] == 0
    _, scale = _run(capsys, config, db, "plan", TARGET, "--context", "prod", "--replicas", "3", "--json")
    assert _run(capsys, config, db, "apply", scale["id"], "--context", "prod", "--yes", "--no-watch")[0] == 0
    assert _run(capsys, config, db, "rollback", scale["id"], "--context", "prod", "--yes")[0] == 0
    _, waiting = _run(capsys, config, db, "plan", TARGET, "--context", "prod", "--set", "max-model-len=8192", "--json")
    assert _run(capsys, config, db, "note", TARGET, "max-num-seqs 64 until the batch job ends")[0] == 0
    writes = len(sc.kube.writes())

    rc, ho = _run(capsys, config, db, "handover", "--since", "1h", "--context", "prod", "--json")
    assert rc == 0, ho
    assert len(sc.kube.writes()) == writes, "a handover only reads"
    assert [(i["target"], i["verdict"]) for i in ho["incidents"]] == [(TARGET, verdict)]
    states = {c["plan"]: c["state"] for c in ho["changes"]}
    assert states == {seqs["id"]: "applied", scale["id"]: "rolled_back", waiting["id"]: "proposed"}
    (stopgap,) = ho["temporary"]  # the rolled-back replica change is no longer in place
    assert (stopgap["plan"], stopgap["what"], stopgap["old"], stopgap["value"]) == (seqs["id"], "max-num-seqs", "128", 64)
    assert stopgap["live"] == "confirmed" and stopgap["live_value"] == 64  # read back from the API server
    assert [n["text"] for n in ho["notes"]] == ["max-num-seqs 64 until the batch job ends"]
    (state,) = ho["state"]
    assert state["target"] == TARGET and state["kv_usage_peak"] == pytest.approx(h.KV_USAGE_PEAK)
    assert state["oom_kills"] == pytest.approx(2, rel=0.05) and state["restarts"] == pytest.approx(3, rel=0.1)
    watch = "\n".join(ho["watch_next"])
    assert f"{waiting['id']} on {TARGET} awaits approval" in watch
    assert "max-num-seqs 64 is a stop-gap" in watch and "2 OOM kills this shift" in watch
    (service,) = ho["services"]
    assert service["target"] == TARGET and any("max-num-seqs" in f for f in service["flags_changed"])


def test_a_stopgap_is_confirmed_on_the_cluster_its_plan_changed(tmp_path, capsys):
    from bot.config.settings import load_settings
    from bot.service.handover import build_handover, live_object_reader
    from bot.store.db import Store

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    with running_scenario("vllm-incident", tmp_path / "a", context="prod-a") as a, \
            running_scenario("vllm-incident", tmp_path / "b", context="prod-b") as b:
        config = tmp_path / "gpumem.yaml"
        config.write_text(f"store:\n  path: {tmp_path / 'gpumem.db'}\ndefault_context: prod-a\nclusters:\n"
                          f"  - {{context: prod-a, kubeconfig: {a.kubeconfig}}}\n"
                          f"  - {{context: prod-b, kubeconfig: {b.kubeconfig}}}\n")
        db = tmp_path / "gpumem.db"
        _, plan = _run(capsys, config, db, "plan", TARGET, "--context", "prod-b", "--set", "max-num-seqs=64", "--json")
        assert _run(capsys, config, db, "apply", plan["id"], "--context", "prod-b", "--yes", "--no-watch")[0] == 0
        assert (len(a.kube.writes()), len(b.kube.writes())) == (0, 1)
        settings = load_settings(str(config), {})
        store = Store.open(db)
        try:
            (measure,) = build_handover(store, since=timedelta(hours=1), read_object=live_object_reader(settings)).temporary
        finally:
            store.close()
    # read on prod-b, where the plan wrote; the default cluster (prod-a, still 128) would say "changed"
    assert (measure.live, measure.live_value) == ("confirmed", 64)
