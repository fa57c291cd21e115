"""An unexpected error after the change was applied (here: in the watch) leaves the plan message
at a true stage: applied, the watch stopped with the error's id, Roll back offered; never
"nothing was written", never stuck at "Watching". Roll back from that message still restores."""

from __future__ import annotations

import logging

from bot.render import slack_remediation as P
from bot.store.db import Store
from tests.test_plan_expiry import _buttons, _message_recorded
from tests.test_slack_remediation import (
    APPROVER,
    _click,
    _diagnosis,
    _edits,
    _max_model_len,
    _patches,
    _plan,
    _wait_edit,
    remediation_bot,
)


class _WatchBroke(Exception):
    pass


def _sleep_that_breaks(seconds: float) -> None:
    raise _WatchBroke("the watch's clock failed")


def test_an_error_in_the_watch_says_applied_and_the_watch_stopped_with_its_error_id(tmp_path, caplog):
    with remediation_bot(tmp_path, ready_after_s=300.0) as (sc, fake, bot):
        bot.handlers.remediation.watch_sleep = _sleep_that_breaks
        ts, diagnosis = _diagnosis(bot, fake)
        plan_id, plan_ts = _plan(bot, fake, ts, diagnosis)
        store = Store.open(tmp_path / "gpumem.db")
        _message_recorded(store, plan_id)
        with caplog.at_level(logging.ERROR, logger="gpumem.slack.remediation"):
            _click(bot, fake, P.APPROVE_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=90)
            text = _wait_edit(fake, plan_ts, "the watch stopped")
        assert _patches(sc) == 1 and _max_model_len(sc) == 4096  # the change is on the cluster
        (logged,) = [r for r in caplog.records if "applying plan" in r.getMessage()]
        error_id = logged.getMessage().rsplit("[error ", 1)[1].rstrip("]")
        assert (f"Applied; the watch stopped: internal error {error_id}. The change is on the cluster and its "
                "rollout was not judged: check it; Roll back restores --max-model-len 4096 -> 8192.") in text
        assert "nothing was written" not in " ".join(_edits(fake, plan_ts))
        assert _edits(fake, plan_ts)[-1] == text  # the last edit: not left at "Watching"
        assert _buttons(fake, plan_ts) == [(P.ROLLBACK_ACTION, plan_id)]
        assert store.get(plan_id).state == "applied"
        stopped = [r for r in store.plan_audit(plan_id) if r.event == "watch_stopped"]
        assert [(r.actor, r.detail["error_id"]) for r in stopped] == [("gpumem", error_id)]
        # Roll back on that message restores, once
        _click(bot, fake, P.ROLLBACK_ACTION, plan_id, plan_ts, APPROVER, thread_ts=ts, n=91)
        _wait_edit(fake, plan_ts, "Rolled back by")
        assert _patches(sc) == 2 and _max_model_len(sc) == 8192
        store.close()
