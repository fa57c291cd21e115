"""The "Run again" button's double-click guard lives in the store when there is one: two bot
replicas (or a bot after a restart) sharing the store file run one triage for one button, however
many of them get a click. Without a store the guard stays in process memory."""

from __future__ import annotations

import json

from bot.render.slack_triage import RERUN_ACTION
from bot.slack.app import build_bot
from bot.slack.jobs import Claims, StoreClaims
from bot.store.db import Store
from tests.support.fake_slack import FakeSlack
from tests.support.slack_kit import ExampleRunner, dispatch_action, drain, is_diagnosis, make_settings

TARGET = "llm/qwen-7b-sglang"
BUTTON_TS = "1700000000.000100"
CLAIMED = "Already running again: one click is enough."


def _runs(*runners: ExampleRunner) -> int:
    count = 0
    for runner in runners:
        while runner.started.acquire(blocking=False):
            count += 1
    return count


def _started(fake) -> int:
    """Triages started: each posts its parent message first."""
    return sum(1 for c in fake.calls_to("chat.postMessage") if str(c.args.get("text", "")).endswith(": starting"))


def _finished(fake, count: int) -> None:
    fake.wait_for("chat.update", count, where=is_diagnosis, timeout=30)


def _told(fake, n: int) -> list[str]:
    return [c.args.get("text", "") for c in fake.calls if c.method == "respond" and c.args.get("_url") == str(n)]


def test_two_bots_sharing_a_store_run_one_triage_for_one_click_each(tmp_path):
    db = tmp_path / "gpumem.db"
    value = json.dumps({"target": TARGET, "context": None})
    with FakeSlack() as fake:
        settings = make_settings(tmp_path, fake, extra=f"store: {{path: {db}}}\n")
        runners = [ExampleRunner(charts=False) for _ in range(3)]
        first, second = build_bot(settings, runners[0]), build_bot(settings, runners[1])
        try:
            assert isinstance(first.handlers.claims, StoreClaims)
            assert dispatch_action(first, fake, RERUN_ACTION, value, BUTTON_TS, n=91).status == 200
            assert dispatch_action(second, fake, RERUN_ACTION, value, BUTTON_TS, n=92).status == 200
            _finished(fake, 1)
        finally:
            drain(first)
            drain(second)
        # a restart within the claim's minute: the new process finds the claim in the store
        third = build_bot(settings, runners[2])
        try:
            assert dispatch_action(third, fake, RERUN_ACTION, value, BUTTON_TS, n=93).status == 200
            # another button is another key: it runs
            assert dispatch_action(third, fake, RERUN_ACTION, value, "1700000000.000200", n=94).status == 200
            _finished(fake, 2)
        finally:
            drain(third)
        assert _runs(*runners[:2]) == 1 and _runs(runners[2]) == 1 and _started(fake) == 2
        # the two clicks race on their bots' after-ack threads: either may win, the other is told
        assert sorted([_told(fake, 91), _told(fake, 92)]) == [[], [CLAIMED]]
        assert _told(fake, 93) == [CLAIMED]
    store = Store.open(db)
    rows = store.db.execute("SELECT key FROM claims WHERE key LIKE 'rerun:%' ORDER BY key").fetchall()
    assert [r[0] for r in rows] == [f"rerun:C0INCIDENT:{BUTTON_TS}:{RERUN_ACTION}",
                                    f"rerun:C0INCIDENT:1700000000.000200:{RERUN_ACTION}"]


def test_without_a_store_the_guard_is_in_memory_one_per_process(tmp_path):
    value = json.dumps({"target": TARGET, "context": None})
    with FakeSlack() as fake:
        settings = make_settings(tmp_path, fake)
        runners = [ExampleRunner(charts=False) for _ in range(2)]
        first, second = build_bot(settings, runners[0]), build_bot(settings, runners[1])
        try:
            assert type(first.handlers.claims) is Claims
            for n in (95, 96):
                dispatch_action(first, fake, RERUN_ACTION, value, BUTTON_TS, n=n)
            dispatch_action(second, fake, RERUN_ACTION, value, BUTTON_TS, n=97)
            _finished(fake, 2)
        finally:
            drain(first)
            drain(second)
        assert _runs(runners[0]) == 1 and _runs(runners[1]) == 1 and _started(fake) == 2
        assert _told(fake, 96) == [CLAIMED] and _told(fake, 97) == []
