"""A pool split in Slack, end to end with the Slack and Kubernetes stand-ins: the mixed-pool
diagnosis' Plan button -> phase 1 planned from the recorded triage's profile -> approved by a
second person -> exactly two creates -> watched -> "Routing confirmed" -> phase 2 planned in the
thread -> approved -> one patch -> rollbacks in order. Every refusal with the number of writes
the API server received; no env value of the Deployment ever reaches a Slack call."""

from __future__ import annotations

import dataclasses
import json

import tests.test_slack_remediation as R
from bot.actuator.writer import JSON_PATCH, KubeWriter
from bot.render import slack_remediation as P
from bot.render.slack_triage import diagnosis_message
from bot.service.approvals import plannable_actions
from bot.service.notes import record_triage
from bot.store.db import Store
from collectors.bundle import load_bundle
from collectors.parsers.flags import server_config_from_container
from runbooks.triage.runbook import triage
from tests.support.slack_kit import CHANNEL, EXAMPLES, NOW, USER

APPROVER, SECOND, STRANGER = R.APPROVER, R.SECOND, R.STRANGER
NS, NAME, LONG = "llm", "vllm-server", "vllm-server-long"
#: a secret-looking env value put into the Deployment before anything is planned
SECRET_ENV = "sk-live-0123456789abcdefSECRET"


def _writes(sc, verb: str | None = None) -> int:
    return len(sc.kube.writes(verb=verb) if verb else sc.kube.writes())


def _config(sc, name: str = NAME):
    obj = sc.kube.get("Deployment", NS, name)
    return server_config_from_container(next(c for c in obj["spec"]["template"]["spec"]["containers"]
                                             if c["name"] == "vllm"))


def _add_secret_env(sc) -> None:
    KubeWriter(sc.api("prod")).patch("Deployment", NS, NAME, [
        {"op": "add", "path": "/spec/template/spec/containers/0/env/-",
         "value": {"name": "OPENAI_API_KEY", "value": SECRET_ENV}}], JSON_PATCH)


def _mixed_pool_report():
    """The mixed-pool example's triage, about the stand-in's Deployment."""
    report = triage(load_bundle(EXAMPLES / "mixed-pool-vllm-v1"), now=NOW)
    assert report.verdict.primary == "mixed_pool"
    return dataclasses.replace(report, target=f"{NS}/{NAME}")


def _no_secret_in_slack(fake) -> None:
    everything = json.dumps([[c.method, c.args, getattr(c, "response", None)] for c in fake.calls],
                            ensure_ascii=False, default=str)
    assert SECRET_ENV not in everything and "hf_live_secret_value" not in everything


def _buttons(message: dict) -> list[dict]:
    return [e for b in message["blocks"] if b.get("type") == "actions" for e in b["elements"]]


def _posted_in_thread(fake, thread_ts: str, n: int) -> tuple[str, str]:
    """(plan id, ts) of the n-th plan message posted in the thread."""
    calls = fake.wait_for("chat.postMessage", n=n, where=lambda c: c.args.get("thread_ts") == thread_ts
                          and any(e.get("action_id") == P.APPROVE_ACTION for e in _buttons(c.args)), timeout=30)
    call = calls[n - 1]
    approve = next(e for e in _buttons(call.args) if e["action_id"] == P.APPROVE_ACTION)
    return approve["value"], call.response["ts"]


def test_button_phase1_approval_two_creates_routing_confirmed_phase2_one_patch_and_rollbacks(tmp_path):
    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        _add_secret_env(sc)
        base = _writes(sc)
        db = tmp_path / "gpumem.db"
        report = _mixed_pool_report()
        store = Store.open(db)
        record_triage(store, report, actor=USER, channel=CHANNEL, cluster="prod")
        store.close()
        plannable = plannable_actions(report, bot.settings, f"{NS}/{NAME}", "prod")
        assert "split_pools" in plannable
        diagnosis = diagnosis_message(report, "en", target=f"{NS}/{NAME}", context="prod",
                                      plan_blocks=P.plan_buttons(report, "en", f"{NS}/{NAME}", "prod", plannable))
        ts = bot.poster.post(CHANNEL, diagnosis)
        button = R._plan_button(fake.messages[(CHANNEL, ts)], "split_pools")
        assert button["text"]["text"].startswith("Plan: ")

        R._click(bot, fake, button["action_id"], button["value"], ts, SECOND, n=1)
        first, first_ts = _posted_in_thread(fake, ts, 1)
        posted = json.dumps(fake.messages[(CHANNEL, first_ts)]["blocks"], ensure_ascii=False)
        for words in (f"Deployment llm/{LONG}: 1 replica, --max-model-len 27648, --max-num-seqs",
                      f"Service llm/{LONG}: ports 80-&gt;http, selector app={LONG}, gpumem.io/pool=long",
                      f"Requests with more than 2048 prompt tokens -&gt; Service llm/{LONG}:80",
                      "the profile's p99 of 27,433 tokens rounded up", "request profile: triage llm/vllm-server",
                      "*Pool split (runbook template)*", "*Routing rollback (runbook template)*"):
            assert words in posted, words
        assert _writes(sc) == base and sc.kube.dry_runs() == []

        # the one who asked cannot approve; a second person can: two creates, the original untouched
        before = json.dumps(sc.kube.get("Deployment", NS, NAME)["spec"], sort_keys=True)
        R._click(bot, fake, P.APPROVE_ACTION, first, first_ts, SECOND, thread_ts=ts, n=2)
        (own,) = R._respond(fake, 2)
        assert "four-eyes" in own["text"] and _writes(sc) == base
        R._click(bot, fake, P.APPROVE_ACTION, first, first_ts, APPROVER, thread_ts=ts, n=3)
        held = R._wait_edit(fake, first_ts, "Held:", timeout=60)
        assert "1 of 1 updated and available" in held
        assert [(r.verb, r.resource) for r in sc.kube.writes()][base:] == [("create", "deployments"),
                                                                           ("create", "services")]
        assert [r.resource for r in sc.kube.dry_runs()] == ["deployments", "services"]
        assert json.dumps(sc.kube.get("Deployment", NS, NAME)["spec"], sort_keys=True) == before
        assert _config(sc, LONG).max_model_len == 27648
        assert SECRET_ENV in json.dumps(sc.kube.get("Deployment", NS, LONG)), "the clone carries the env"
        buttons = [e["action_id"] for e in _buttons(fake.messages[(CHANNEL, first_ts)])]
        assert buttons == [P.ROUTING_ACTION, P.ROLLBACK_ACTION]
        routing = _buttons(fake.messages[(CHANNEL, first_ts)])[0]
        assert "2048" in routing["confirm"]["text"]["text"] and f"llm/{LONG}" in routing["confirm"]["text"]["text"]
        creates = _writes(sc)

        # the routing is confirmed by an approver only; phase 2 comes in the thread
        R._click(bot, fake, P.ROUTING_ACTION, first, first_ts, STRANGER, thread_ts=ts, n=4)
        (stranger,) = R._respond(fake, 4)
        assert "Only approvers for llm may confirm the routing" in stranger["text"]
        assert [p.plan.id for p in Store.open(db).plans()] == [first]
        R._click(bot, fake, P.ROUTING_ACTION, first, first_ts, SECOND, thread_ts=ts, n=5)
        second, second_ts = _posted_in_thread(fake, ts, 2)
        assert second != first
        text2 = json.dumps(fake.messages[(CHANNEL, second_ts)]["blocks"], ensure_ascii=False)
        assert f"Confirmed by <@{SECOND}>" in text2 and "`--max-model-len 8192 -&gt; " in text2
        audit = Store.open(db)
        confirmed = [r for r in audit.audit() if r.event == "routing_confirmed"]
        assert [(r.actor, r.plan_id, r.detail["phase1"], r.detail["threshold"]) for r in confirmed] == \
            [(SECOND, second, first, 2048)]
        short_len = audit.get(second).plan.changes[0].new
        audit.close()
        assert _writes(sc) == creates

        R._click(bot, fake, P.APPROVE_ACTION, second, second_ts, SECOND, thread_ts=ts, n=6)
        (four_eyes,) = R._respond(fake, 6)
        assert "four-eyes" in four_eyes["text"] and _writes(sc) == creates
        R._click(bot, fake, P.APPROVE_ACTION, second, second_ts, APPROVER, thread_ts=ts, n=7)
        R._wait_edit(fake, second_ts, "Held:", timeout=60)
        assert _writes(sc) == creates + 1 and len(sc.kube.writes(verb="patch")) == 2, "the env edit and phase 2"
        assert _config(sc).max_model_len == short_len < 8192
        assert [e["action_id"] for e in _buttons(fake.messages[(CHANNEL, second_ts)])] == [P.ROLLBACK_ACTION]

        # rollbacks: phase 1 refused while phase 2 is on the cluster, then phase 2, then phase 1
        R._click(bot, fake, P.ROLLBACK_ACTION, first, first_ts, APPROVER, thread_ts=ts, n=8)
        (refused,) = R._respond(fake, 8)
        assert f"plan {second} (phase 2, watched) still tightens the original" in refused["text"]
        assert sc.kube.writes(verb="delete") == [] and sc.kube.dry_runs(verb="delete") == []
        R._click(bot, fake, P.ROLLBACK_ACTION, second, second_ts, APPROVER, thread_ts=ts, n=9)
        R._wait_edit(fake, second_ts, "Rolled back by")
        assert (_config(sc).max_model_len, _config(sc).max_num_seqs) == (8192, 128)
        R._click(bot, fake, P.ROLLBACK_ACTION, first, first_ts, APPROVER, thread_ts=ts, n=10)
        back = R._wait_edit(fake, first_ts, "Rolled back by")
        assert f"Service/{LONG}, Deployment/{LONG} deleted" in back
        assert [(r.resource, r.status) for r in sc.kube.writes(verb="delete")] == [("services", 200),
                                                                                  ("deployments", 200)]
        assert sc.kube.get("Deployment", NS, LONG) is None and sc.kube.get("Service", NS, LONG) is None
        states = {p.plan.id: p.state for p in Store.open(db).plans(open_only=False)}
        assert states == {first: "rolled_back", second: "rolled_back"}
        _no_secret_in_slack(fake)


def test_slash_plan_split_refusals_write_nothing_and_phase2_needs_a_confirmed_routing(tmp_path):
    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        _add_secret_env(sc)
        base = _writes(sc)
        db = tmp_path / "gpumem.db"
        ack = R._command(bot, fake, "plan llm/vllm-server --split-pools --profile /var/log/access.log", n=20)
        assert ack["text"].startswith("--profile is not available in Slack")
        R._command(bot, fake, "plan llm/vllm-server --split-pools --phase 2 --routing-confirmed", user=APPROVER, n=21)
        (early,) = R._respond(fake, 21)
        assert "phase 2 needs the long pool first: the last phase-1 plan of llm/vllm-server is none" in early["text"]
        assert Store.open(db).plans() == [] and _writes(sc) == base

        R._command(bot, fake, "plan llm/vllm-server --split-pools --threshold 3000 --context prod", n=22)
        first, first_ts = R._top_level_plan(fake)
        posted = json.dumps(fake.messages[(CHANNEL, first_ts)]["blocks"], ensure_ascii=False)
        assert "Requests with more than 3000 prompt tokens" in posted
        assert "today's value: the last recorded triage of llm/vllm-server has no request profile" in posted
        assert _writes(sc) == base

        # phase 2 before phase 1 is applied: refused, nothing stored, nothing written
        R._command(bot, fake, "plan llm/vllm-server --split-pools --phase 2 --routing-confirmed", user=APPROVER, n=23)
        (proposed,) = R._respond(fake, 23)
        assert f"is proposed ({first})" in proposed["text"]
        R._click(bot, fake, P.APPROVE_ACTION, first, first_ts, SECOND, n=24)
        R._wait_edit(fake, first_ts, "Held:", timeout=60)
        assert _writes(sc, "create") == 2 and _writes(sc) == base + 2

        # no confirmation, a stranger's confirmation: refused, zero writes, no phase-2 plan
        R._command(bot, fake, "plan llm/vllm-server --split-pools --phase 2", user=APPROVER, n=25)
        (unconfirmed,) = R._respond(fake, 25)
        assert "first make the gateway send prompts over 3000 tokens to Service llm/vllm-server-long" in \
            unconfirmed["text"] and "Routing confirmed" in unconfirmed["text"]
        R._command(bot, fake, "plan llm/vllm-server --split-pools --phase 2 --routing-confirmed", user=STRANGER, n=26)
        (stranger,) = R._respond(fake, 26)
        assert "Only approvers for llm may confirm the routing" in stranger["text"]
        assert [p.plan.id for p in Store.open(db).plans()] == [first] and _writes(sc) == base + 2
        assert not [r for r in Store.open(db).audit() if r.event == "routing_confirmed"]

        R._command(bot, fake, "plan llm/vllm-server --split-pools --phase 2 --routing-confirmed", user=APPROVER, n=27)
        second, second_ts = R._plan_posted(fake, first_ts)  # in phase 1's own thread, the plan it acts on
        assert second != first
        R._click(bot, fake, P.APPROVE_ACTION, second, second_ts, SECOND, n=28)
        R._wait_edit(fake, second_ts, "Held:", timeout=60)
        assert _writes(sc, "patch") == 2 and _writes(sc) == base + 3, "the env edit before, then one patch"
        R._command(bot, fake, f"rollback {first}", user=APPROVER, n=29)
        (refused,) = R._respond(fake, 29)
        assert f"plan {second} (phase 2, watched) still tightens the original" in refused["text"]
        assert _writes(sc, "delete") == 0
        _no_secret_in_slack(fake)


def test_slash_plan_action_split_pools_plans_phase1_from_the_recorded_triage(tmp_path):
    with R.remediation_bot(tmp_path) as (sc, fake, bot):
        R._command(bot, fake, "plan llm/vllm-server --action split_pools", n=40)
        (none,) = R._respond(fake, 40)
        assert "no triage of llm/vllm-server recorded action split_pools" in none["text"]
        store = Store.open(tmp_path / "gpumem.db")
        record_triage(store, _mixed_pool_report(), actor=USER, channel=CHANNEL, cluster="prod")
        store.close()
        R._command(bot, fake, "plan llm/vllm-server --action split_pools", n=41)
        plan_id, _ = R._top_level_plan(fake)
        stored = Store.open(tmp_path / "gpumem.db").get(plan_id)
        assert (stored.plan.action_id, stored.plan.requested_by, stored.state) == ("split_pools", USER, "proposed")
        assert stored.plan.origin.endswith("action split_pools of the last triage, split_pools phase 1")
        assert [op["kind"] for op in stored.plan.patch] == ["Deployment", "Service"]
        assert _config_of(stored.plan.patch[0]["value"]).max_model_len == 27648
        assert sc.kube.writes() == [] and sc.kube.dry_runs() == []


def _config_of(obj: dict):
    return server_config_from_container(next(c for c in obj["spec"]["template"]["spec"]["containers"]
                                             if c["name"] == "vllm"))


def test_the_cli_points_a_recorded_split_action_at_split_pools():
    import pytest

    from bot.service.remediate import request_from_changes
    from runbooks.model.changes import SplitPools
    from runbooks.model.errors import UsageError

    with pytest.raises(UsageError) as e:
        request_from_changes("llm", "vllm-server", None, "split_pools",
                             (SplitPools("vllm", "threshold", None, 2048),), requested_by="cli:x",
                             origin="cli")
    assert (e.value.code, e.value.params) == ("split_use_option", {"target": "llm/vllm-server"})
