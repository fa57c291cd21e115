"""Where a triage gets its evidence, injected so surfaces, tests and deployments choose.

`TriageRunner`: `(target, context, on_step) -> TriageOutcome`. Live triage
(`bot.service.triage.run_live_triage`) fits it through `live_runner(settings)`; `BundleRunner`
reads evidence bundles from disk (staging, drills, tests). Either draws the triage's charts with
the `bot.service.triage.Charts` it is given (`bot.render.triage_charts.CHARTS`), none without.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import queue
import shutil
import sys
import tarfile
import tempfile
import threading
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from datetime import UTC, datetime
from multiprocessing.reduction import ForkingPickler
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from bot.service.redact import install
from bot.service.triage import Charts, TriageOutcome
from collectors.bundle import load_bundle
from runbooks.model import errors
from runbooks.model.secrets import redact_evidence
from runbooks.model.units import MIB
from runbooks.triage.runbook import triage

log = logging.getLogger("gpumem.runners")

Progress = Callable[[int, int, str], None]

#: an evidence bundle larger than this is not uploaded (the thread says so)
MAX_BUNDLE_UPLOAD_BYTES = 200 * MIB


class TriageRunner(Protocol):
    def __call__(self, target: str, context: str | None, on_step: Progress) -> Any:
        """Gather evidence for `target` ("namespace/name") and triage it; returns a TriageOutcome."""


class BundleRunner:
    """Triage from evidence bundles on disk: "namespace/name" -> bundle folder.

    >>> run = BundleRunner({"llm/vllm-server": "examples/runbook-incident"})
    >>> out = run("llm/vllm-server", None, print)
    1 7 evidence
    2 7 static
    3 7 kv_cache
    4 7 concurrency
    5 7 parallelism
    6 7 platform
    7 7 verdict
    >>> out.report.verdict.primary, out.bundle_dir
    ('kv_cache_pressure', 'examples/runbook-incident')
    >>> run("llm/unknown", None, print)
    Traceback (most recent call last):
    ...
    runbooks.model.errors.TargetNotFound: llm/unknown
    """

    def __init__(self, bundles: Mapping[str, str | os.PathLike[str]], charts: Charts | None = None,
                 now: Callable[[], datetime] | None = None, lang: str = "en"):
        self.bundles = {k: Path(v) for k, v in bundles.items()}
        self.charts = charts
        self.now = now or _utc_now  # a module function, so the runner pickles to a worker process
        self.lang = lang

    def warm(self) -> None:
        """Pay what the first triage would: (with charts) matplotlib and its fonts, and one triage
        of the first bundle (the parsers and the runbook are imported with this module)."""
        if self.charts is not None:
            self.charts.warm(self.lang)
        for target in list(self.bundles)[:1]:
            try:
                self(target, None, lambda *_: None)
            except Exception as e:  # a broken bundle is reported by its own triage, not here
                log.warning("warm-up triage of %s failed: %s", target, type(e).__name__)

    def __call__(self, target: str, context: str | None, on_step: Progress) -> TriageOutcome:
        folder = self.bundles.get(target)
        if folder is None:
            raise errors.TargetNotFound.no_source(target)
        if not os.path.isdir(folder):  # moved or removed since the config was read: an answer, not a crash
            raise errors.UsageError("bundle_folder_missing", target=target, path=str(folder))
        evidence = redact_evidence(load_bundle(folder))  # as triage_bundle: a bundle may carry credentials
        report = triage(evidence, now=self.now(), on_step=on_step)
        memory_png = profile_png = None
        if self.charts is not None:
            memory_png, profile_png = self.charts.of_report(report, evidence, self.lang)
        return TriageOutcome(report, evidence, str(folder), memory_png, profile_png)


def _utc_now() -> datetime:
    return datetime.now(UTC)


def live_runner(settings: Any, charts: Charts | None = None) -> TriageRunner | None:
    """`bot.service.triage.run_live_triage` as a TriageRunner, or None when this build has no live triage.

    Each run writes its bundle, with the `charts`, to a fresh temporary folder, uploaded to the
    thread and then removed, so a long-running bot does not fill its disk.
    """
    try:
        live = importlib.import_module("bot.service.triage")
    except ModuleNotFoundError as e:
        if e.name != "bot.service.triage":
            raise
        return None

    def runner(target: str, context: str | None, on_step: Progress) -> TriageOutcome:
        options = live.options_from_settings(settings, context)
        folder = tempfile.mkdtemp(prefix="gpumem-slack-")
        try:
            result = live.run_live_triage(target, options, lang=settings.slack.default_lang, on_step=on_step,
                                          bundle_dir=folder, default_namespace=settings.default_namespace,
                                          charts=charts)
        except BaseException:
            shutil.rmtree(folder, ignore_errors=True)
            raise
        return replace(result, discard_bundle=True)

    return runner


def bundle_archive(bundle_dir: str | os.PathLike[str], name: str) -> bytes | None:
    """The bundle folder as a .tar.gz in memory; None when it is missing or too large to upload."""
    root = Path(bundle_dir)
    if not root.is_dir():
        return None
    files = [p for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    if sum(p.stat().st_size for p in files) > MAX_BUNDLE_UPLOAD_BYTES * 8:
        return None  # compresses to more than the cap even at 8:1
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for path in files:
            tar.add(path, arcname=f"{name}/{path.relative_to(root)}", recursive=False)
    data = buf.getvalue()
    return data if len(data) <= MAX_BUNDLE_UPLOAD_BYTES else None


# ---------------------------------------------------------------------- triage in worker processes

#: how much lower the worker processes' CPU priority is than the main process's (POSIX nice)
WORKER_NICENESS = 10

#: the state of one worker process: the runner it was given and the progress queue
_WORKER: dict[str, Any] = {}


def _mappingproxy(items: dict[Any, Any]) -> MappingProxyType:
    return MappingProxyType(items)


def _reduce_mappingproxy(proxy: MappingProxyType) -> tuple[Any, tuple[dict[Any, Any]]]:
    return _mappingproxy, (dict(proxy),)


# settings hold read-only mappings; multiprocessing's pickler (only it) sends them as copies
ForkingPickler.register(MappingProxyType, _reduce_mappingproxy)


def _worker_init(runner: TriageRunner, progress: Any, ready: Any, secrets: tuple[str, ...], log_level: int) -> None:
    """In each worker process, once: logging as the bot's (tokens masked), then the warm-up."""
    if WORKER_NICENESS and hasattr(os, "nice"):
        # triage is background work: on a small machine the main process's acks come first
        with contextlib.suppress(OSError):
            os.nice(WORKER_NICENESS)
    logging.basicConfig(level=log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s[worker %(process)d]: %(message)s")
    install(secrets)
    _exit_with_parent()
    _WORKER["runner"] = runner
    _WORKER["progress"] = progress
    _WORKER["ready"] = ready
    warm = getattr(runner, "warm", None)
    if warm is not None:
        warm()


def _exit_with_parent() -> None:
    """End this worker when the bot that started it is gone, however it ended.

    A pool worker waits on a queue whose both ends it holds, so it never sees its parent die;
    after a SIGKILL (an OOM kill outside a container's cgroup, a test's kill) the workers, and
    the forkserver they keep open, stayed behind. The parent's sentinel (the pipe the bot
    started this process through) becomes readable when the bot is gone.
    """
    parent = multiprocessing.parent_process()
    if parent is None or parent.sentinel is None:
        return

    def watch(sentinel: Any) -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(0)

    threading.Thread(target=watch, args=(parent.sentinel,), name="gpumem-parent-watch", daemon=True).start()


def _worker_ready() -> int:
    """Each of `workers` calls waits for the others, so each runs in its own (warmed) process."""
    _WORKER["ready"].wait(timeout=300)
    return os.getpid()


def _worker_run(task: int, target: str, context: str | None) -> tuple[str, Any, int]:
    """One triage in a worker: ("ok", outcome) or ("raised", exception) or ("crashed", traceback)."""
    progress = _WORKER["progress"]

    def on_step(i: int, total: int, step: str) -> None:
        progress.put((task, i, total, step))

    try:
        return _worker_call(task, target, context, on_step)
    finally:
        progress.put((task, None))  # written before the result: the caller has every step


def _worker_call(task: int, target: str, context: str | None, on_step: Progress) -> tuple[str, Any, int]:
    try:
        return "ok", _WORKER["runner"](target, context, on_step), os.getpid()
    except Exception as e:
        # the exception's class and state, rebuilt without its __init__ (some take other
        # arguments than their args); its trace when even that cannot make the trip
        state = (type(e), e.args, dict(vars(e)))
        try:
            pickle.dumps(state)
            return "raised", state, os.getpid()
        except Exception:
            return "crashed", traceback.format_exc(), os.getpid()


def _rebuilt(state: tuple[type[BaseException], tuple[Any, ...], dict[str, Any]]) -> BaseException:
    cls, args, attrs = state
    error = cls.__new__(cls, *args)
    error.args = args
    error.__dict__.update(attrs)
    return error


class WorkerCrashed(RuntimeError):
    """A triage in a worker process failed in a way that could not come back as itself."""


_DONE = object()  # the future ended
_END = object()  # the worker sent its last step


class ProcessRunner:
    """A TriageRunner that runs another one (picklable) in a pool of warmed worker processes.

    Evidence parsing, the runbook and the charts are CPU work that would hold the GIL against
    Bolt's ack threads; here they run in `workers` processes (forkserver, else spawn), started
    and warmed by `start()` before the bot takes commands. The calling thread stays in the main
    process: it relays the worker's progress steps to `on_step` while it waits, and gets the
    outcome (or the exception) back. A dead worker breaks the pool; the next call gets a new one.
    """

    def __init__(self, runner: TriageRunner, workers: int, secrets: tuple[str, ...] = (),
                 log_level: int | None = None):
        self.runner = runner
        self.workers = max(1, workers)
        self.secrets = tuple(secrets)
        self.log_level = logging.getLogger().getEffectiveLevel() if log_level is None else log_level
        self._ctx = _mp_context()
        self._progress = self._ctx.SimpleQueue()
        self._ready = self._ctx.Barrier(self.workers)
        self._lock = threading.Lock()
        self._tasks = itertools.count(1)
        self._listeners: dict[int, queue.SimpleQueue[Any]] = {}
        self._executor: ProcessPoolExecutor | None = None
        self._closed = False
        self._relay = threading.Thread(target=self._relay_progress, name="gpumem-progress", daemon=True)
        self._relay.start()

    def _new_executor(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(self.workers, mp_context=self._ctx, initializer=_worker_init,
                                   initargs=(self.runner, self._progress, self._ready, self.secrets, self.log_level))

    def start(self) -> list[int]:
        """Start every worker and wait for its warm-up; returns their process ids."""
        with self._lock:
            if self._executor is None:
                self._executor = self._new_executor()
            executor = self._executor
        futures = [executor.submit(_worker_ready) for _ in range(self.workers)]
        return sorted({f.result() for f in futures})

    def __call__(self, target: str, context: str | None, on_step: Progress) -> Any:
        task = next(self._tasks)
        steps: queue.SimpleQueue[Any] = queue.SimpleQueue()
        with self._lock:
            if self._closed:
                raise RuntimeError("the triage workers are shut down")
            if self._executor is None:
                self._executor = self._new_executor()
            executor = self._executor
            self._listeners[task] = steps
        try:
            try:
                future = executor.submit(_worker_run, task, target, context)
            except BrokenProcessPool:
                future = self._replace(executor).submit(_worker_run, task, target, context)
            future.add_done_callback(lambda _: steps.put(_DONE))
            done = False
            while True:
                try:  # once the future is done, its last steps are in the pipe: wait a little for them
                    item = steps.get(timeout=1.0 if done else None)
                except queue.Empty:
                    break
                if item is _END:
                    break
                if item is _DONE:
                    done = True
                    continue
                on_step(*item)
            try:
                status, value, _ = future.result()
            except BrokenProcessPool:
                self._replace(executor)
                raise
        finally:
            with self._lock:
                self._listeners.pop(task, None)
        if status == "ok":
            return value
        if status == "raised":
            raise _rebuilt(value)
        raise WorkerCrashed(value)

    def _replace(self, broken: ProcessPoolExecutor) -> ProcessPoolExecutor:
        """A new pool in place of a broken one (a worker was killed); once, whoever sees it first."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the triage workers are shut down")
            if self._executor is broken:
                log.warning("a triage worker died; starting new workers")
                broken.shutdown(wait=False, cancel_futures=True)
                self._executor = self._new_executor()
            assert self._executor is not None
            return self._executor

    def _relay_progress(self) -> None:
        while True:
            item = self._progress.get()
            if item is None:
                return
            with self._lock:
                steps = self._listeners.get(item[0])
            if steps is not None:
                steps.put(_END if item[1] is None else item[1:])

    def pids(self) -> list[int]:
        executor = self._executor
        processes = getattr(executor, "_processes", None) or {}
        return sorted(processes)

    def close(self) -> None:
        """Stop the workers (a triage still running is abandoned: its job already ended)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            executor, self._executor = self._executor, None
        if executor is not None:
            processes = list((getattr(executor, "_processes", None) or {}).values())
            executor.shutdown(wait=False, cancel_futures=True)
            for process in processes:
                with contextlib.suppress(Exception):
                    process.terminate()
        self._progress.put(None)


def _mp_context() -> multiprocessing.context.BaseContext:
    """forkserver where the platform has it (no threads or locks copied), else spawn."""
    if "forkserver" in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("forkserver")
    return multiprocessing.get_context("spawn")
