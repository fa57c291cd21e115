"""Slack's `/gpumem budget` runs the same use case as `gpumem budget`, in a worker a deadline can stop."""

from __future__ import annotations

import multiprocessing

from bot.main import main
from bot.verbs.worker import VerbOutput, WorkerVerbRunner, run_verb

BUDGET = ["budget", "--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB",
          "--max-model-len", "8192", "--max-num-seqs", "128", "--gpu-memory-utilization", "0.95"]


def test_the_verb_answers_what_the_terminal_prints(capsys):
    rc = main([*BUDGET, "--lang", "zh"])
    printed = capsys.readouterr().out
    out = run_verb(BUDGET, "zh")
    assert (out.returncode, out.text, out.error, out.timed_out) == (rc, printed, "", False)
    assert "KV" in out.text


def test_a_worker_process_gives_the_same_answer():
    out = WorkerVerbRunner(timeout_s=60)(BUDGET, "en")
    assert out == run_verb(BUDGET, "en")
    assert not multiprocessing.active_children()


def test_a_bad_flag_value_comes_back_worded_with_exit_2():
    out = WorkerVerbRunner(timeout_s=60)(["budget", "--engine", "vllm", "--model", "Qwen9-nope", "--gpu", "A100-80GB"], "en")
    assert out.returncode == 2 and out.text == ""
    assert "Qwen9-nope" in out.error and "Traceback" not in out.error


def test_past_the_deadline_the_worker_is_killed_and_the_answer_says_so():
    out = WorkerVerbRunner(timeout_s=0.001)(BUDGET, "en")
    assert out == VerbOutput(-1, "", timed_out=True)
    assert not multiprocessing.active_children()


def test_only_the_verbs_slack_may_run_here_are_run():
    out = run_verb(["collect", "llm/x", "--out", "/tmp/x"], "en")
    assert out.returncode == 2 and out.text == "" and "collect" in out.error


def test_a_crashing_verb_sends_its_traceback_to_the_log_only(monkeypatch, caplog):
    import bot.verbs.worker as verbs

    def boom(conn, argv, lang):  # what _child does when the use case raises
        try:
            raise RuntimeError("secret-free but internal detail")
        except RuntimeError as e:
            conn.send(verbs.VerbOutput(-1, "", type(e).__name__, trace=verbs.traceback.format_exc()))
        conn.close()

    monkeypatch.setattr(verbs, "_child", boom)
    runner = WorkerVerbRunner(timeout_s=60)
    runner._ctx = multiprocessing.get_context("fork")
    with caplog.at_level("ERROR", logger="bot.verbs.worker"):
        out = runner(BUDGET, "en")
    assert (out.returncode, out.error) == (-1, "RuntimeError") and "internal detail" not in repr(out)
    assert "Traceback" in caplog.text and "internal detail" in caplog.text
