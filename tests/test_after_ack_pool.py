"""The after-ack pool's threads run from the start: a burst's first acks do not start them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from bot.slack.app import started
from tests.support.slack_kit import running_bot


def test_started_runs_every_thread_before_it_returns():
    pool = started(ThreadPoolExecutor(max_workers=5, thread_name_prefix="t"), 5)
    try:
        assert len(pool._threads) == 5
        assert all(t.is_alive() for t in pool._threads)
        names = {t.name for t in threading.enumerate()}
        assert sum(name.startswith("t_") for name in names) == 5
        # a submit now finds an idle thread: no new one is started
        before = set(pool._threads)
        pool.submit(lambda: None).result(5)
        assert set(pool._threads) == before
    finally:
        pool.shutdown()


def test_the_bot_starts_with_all_its_after_ack_threads(tmp_path):
    with running_bot(tmp_path) as (_, bot):
        pool = bot.handlers.after_ack
        assert len(pool._threads) == bot.settings.workers.listener_threads > 1
