"""Verbs that Slack runs as they are in a terminal (`/gpumem budget ...`), through the same use
cases the CLI calls, in a worker process that a deadline can stop.

`run_verb(argv, lang)` parses with the one grammar (`bot.grammar.commands`) and runs the verb's
`worker` of the registry (`bot.verbs.VERBS`): its use case with its terminal text;
`WorkerVerbRunner` runs that in a fresh process from a fork server and kills it at the
deadline, so a runaway computation never holds a bot thread.

>>> out = run_verb(["budget", "--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct",
...                 "--gpu", "A100-80GB", "--max-model-len", "8192"], "en")
>>> out.returncode, "KV cache" in out.text, out.error
(0, True, '')
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import traceback
from dataclasses import dataclass, field
from typing import Protocol

from bot.config.environ import read_environment
from bot.grammar.commands import parse_argv
from bot.grammar.requests import BudgetRequest
from bot.render import budget as budget_render
from bot.render.errors import verb_error_line
from bot.render.i18n import Catalog
from bot.service.budget import run_budget
from bot.service.deps import Deps
from bot.service.exits import EXIT_USAGE, exit_code
from bot.verbs import VERBS
from runbooks.model.errors import GpumemError, UsageError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class VerbOutput:
    """A verb's answer: its exit code, the text it shows, one worded error line when it could not
    go on, and whether it ran past the deadline."""

    returncode: int
    text: str
    error: str = ""
    timed_out: bool = False
    #: a crash's traceback, for the log only (never posted)
    trace: str = field(default="", compare=False, repr=False)


class VerbRunner(Protocol):
    def __call__(self, argv: list[str], lang: str) -> VerbOutput: ...


def budget_text(request: BudgetRequest, lang: str, deps: Deps) -> VerbOutput:
    """`/gpumem budget`: the page `gpumem budget` prints, and its exit code."""
    try:
        outcome = run_budget(request, deps)
    except UsageError as e:
        raise budget_render.worded_error(e, lang) from None
    return VerbOutput(outcome.exit_code, budget_render.page_text(outcome.page, lang))


def run_verb(argv: list[str], lang: str) -> VerbOutput:
    """Run one verb here, in this process. Errors a person can act on come back worded."""
    verb = argv[0] if argv else ""
    entry = VERBS.get(verb)
    if entry is None or entry.worker is None:
        return VerbOutput(EXIT_USAGE, "", f"unknown verb {verb!r}")
    try:
        request = parse_argv(argv)
    except SystemExit:  # argparse has already said why on stderr; Slack parsed it first anyway
        return VerbOutput(EXIT_USAGE, "", f"usage: gpumem {verb} ...")
    deps = Deps.of(request, read_environment())  # a forked worker: the environment is the bot's
    try:
        return entry.worker(request, lang, deps)
    except GpumemError as e:
        return VerbOutput(exit_code(e), "", verb_error_line(Catalog.load(lang), e, entry.error_keys))


def _child(conn, argv: list[str], lang: str) -> None:
    try:
        out = run_verb(argv, lang)
    except BaseException as e:  # the parent logs it; the channel gets no exception text
        out = VerbOutput(-1, "", type(e).__name__, trace=traceback.format_exc())
    with contextlib.suppress(OSError, ValueError):
        conn.send(out)
    conn.close()


def _context() -> multiprocessing.context.BaseContext:
    """A fork server: each verb forks from a clean, single-threaded process that has already
    imported this module (a bot's threads are never forked)."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["bot.verbs.worker"])
        return ctx
    return multiprocessing.get_context("spawn")


class WorkerVerbRunner:
    """Run `run_verb` in a worker process with a deadline; past it the worker is killed."""

    def __init__(self, timeout_s: float):
        self.timeout_s = timeout_s
        self._ctx = _context()

    def __call__(self, argv: list[str], lang: str) -> VerbOutput:
        receive, send = self._ctx.Pipe(duplex=False)
        worker = self._ctx.Process(target=_child, args=(send, list(argv), lang), daemon=True)
        worker.start()
        send.close()
        try:
            out = receive.recv() if receive.poll(self.timeout_s) else VerbOutput(-1, "", timed_out=True)
        except EOFError:  # the worker died without an answer (killed, out of memory)
            out = VerbOutput(-1, "", "worker_died")
        finally:
            receive.close()
            if worker.is_alive():
                worker.kill()
            worker.join(5)
        if out.returncode == -1 and not out.timed_out:
            log.error("%s: the worker failed (%s, exit %s)%s", argv[0] if argv else "?", out.error, worker.exitcode,
                      "\n" + out.trace if out.trace else "")
        return out
