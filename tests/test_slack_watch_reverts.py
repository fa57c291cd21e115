"""A revert in Slack, end to end: a second person approves, gpumem writes once, and a controller
that owns the args puts them back during the watch; the plan message ends "The change did not
hold: reverted by kserve-controller at TIME", with no Roll back button, and nothing more is
written (auto_rollback on)."""

from __future__ import annotations

from bot.render import slack_remediation as P
from bot.store.db import Store
from tests.support.fake_kube import Reverter
from tests.support.slack_kit import CHANNEL
from tests.test_slack_remediation import (
    APPROVER,
    NAME,
    NS,
    _click,
    _diagnosis,
    _patches,
    _plan,
    _wait_edit,
    remediation_bot,
)

ARGS = ("spec", "template", "spec", "containers", 0, "args")


def test_a_controller_revert_during_the_watch_is_said_with_its_manager_and_not_rolled_back(tmp_path):
    with remediation_bot(tmp_path, extra="  auto_rollback: true\n") as (sc, fake, bot):
        sc.kube.managed_fields = True
        original = list(sc.kube.get("Deployment", NS, NAME)["spec"]["template"]["spec"]["containers"][0]["args"])
        kserve = Reverter("Deployment", NS, NAME, ARGS, original, "kserve-controller", after_s=20)
        sc.kube.reverters.append(kserve)
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=11)
        text = _wait_edit(fake, plan_ts, "The change did not hold")
        assert "reverted by kserve-controller at " in text and " UTC" in text and "symptoms" not in text
        final = fake.messages[(CHANNEL, plan_ts)]
        assert [e["action_id"] for b in final["blocks"] if b.get("type") == "actions" for e in b["elements"]] == []
        assert _patches(sc) == 1 and len(sc.kube.dry_runs(verb="patch")) == 1 and kserve.reverts == 1
        store = Store.open(tmp_path / "gpumem.db")
        assert store.get(plan_id).state == "reverted"
        row = store.plan_audit(plan_id)[-1]
        assert (row.event, row.actor, row.detail["reverted"][0]["manager"]) == ("reverted", "gpumem",
                                                                                "kserve-controller")
