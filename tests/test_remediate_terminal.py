"""What `gpumem apply --yes` and `gpumem rollback` print, against the stand-in API server with a
rollout that progresses: on a terminal (a pseudo-terminal) one line redrawn in place, on a pipe
one stamped line per change, the summary first when the watch ends; what a rollback restored;
an unknown plan id refused before the API server is asked anything."""

from __future__ import annotations

import fcntl
import io
import os
import struct
import sys
import termios
import threading
import unicodedata
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.cli import remediate as cli
from bot.cli.watch_progress import is_live
from bot.config.environ import read_environment
from bot.grammar.commands import parse_argv
from bot.render.terminal import InertStream
from bot.service.deps import Deps
from bot.store.db import Store
from tests.support.kube_fixtures import manual_clock, run_cli, running_scenario

TARGET = "llm/vllm-server"
#: the wall clock at the watch's start (the pipe's stamps are this plus the stand-in's clock)
T0 = datetime(2026, 12, 1, 22, 40, tzinfo=UTC)
CLEAR = "\r\x1b[K"


@pytest.fixture
def cluster(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc:
        # the stand-in's rollout: one new pod at a time (maxSurge 1), each ready 30 s after it starts
        sc.clock = manual_clock(sc, ready_after_s=30.0)
        yield sc


class Pty:
    """A pseudo-terminal: `stream` writes to its terminal side (isatty() is True there), `read()`
    returns every byte that reached the other side. Output processing is off, so the bytes are
    exactly what gpumem wrote."""

    def __init__(self, columns: int | None = None):
        self.master, self.slave = os.openpty()
        attrs = termios.tcgetattr(self.slave)
        attrs[1] &= ~termios.OPOST  # no newline translation
        termios.tcsetattr(self.slave, termios.TCSANOW, attrs)
        if columns is not None:
            fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
        self.stream = io.TextIOWrapper(io.FileIO(self.slave, "w", closefd=False), encoding="utf-8",
                                       line_buffering=False, write_through=True)
        self._bytes = bytearray()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # the terminal side closed
                return
            if not chunk:
                return
            self._bytes += chunk

    def read(self) -> bytes:
        self.stream.flush()
        os.close(self.slave)
        self._reader.join(timeout=10)
        os.close(self.master)
        return bytes(self._bytes)


def _plan(capsys, sc, store: Path, *argv: str) -> str:
    rc, plan = run_cli(capsys, sc, store, "plan", TARGET, *argv, "--json")
    assert rc == 0, plan
    return plan["id"]


def _gpumem(sc, store: Path, err: Any, *argv: str, lang: str = "en") -> tuple[int, str]:
    """`gpumem ARGV` as `bot.main` runs it (stdout and stderr made inert), with the watch on the
    stand-in's clock: stderr goes to `err`; returns the exit code and stdout."""
    args = parse_argv([*argv, "--kubeconfig", str(sc.kubeconfig), "--context", "prod",
                                      "--store", str(store), "--lang", lang])
    out = io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = InertStream(out), InertStream(err)
    try:
        rc = cli.run(args, lang, Deps.of(args, read_environment()), clock=sc.clock, sleep=sc.clock.advance, now=lambda: T0 + timedelta(seconds=sc.clock()))
    finally:
        sys.stdout, sys.stderr = saved
    return rc, out.getvalue()


class Pipe(io.StringIO):
    def isatty(self) -> bool:
        return False


def _looks(sc) -> int:
    """How often the watch looked: each look reads the Deployment once (its status)."""
    return len([r for r in sc.kube.calls(verb="get", resource="deployments") if r.method == "GET"])


def _frames(text: str) -> Iterator[str]:
    assert text.startswith(CLEAR)
    return iter(text[len(CLEAR):].split(CLEAR))


# ------------------------------------------------------------------ on a terminal


def test_on_a_terminal_the_watch_is_one_line_redrawn_in_place(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    pty = Pty()
    assert is_live(pty.stream, {"TERM": "xterm-256color"})
    looks_before = _looks(cluster)
    rc, out = _gpumem(cluster, store, pty.stream, "apply", plan, "--yes", "--watch", "60")
    raw = pty.read()
    assert rc == 0
    text = raw.decode("utf-8")

    def rolling(s: int, updated: int) -> str:
        return f"watch 0:{s:02d} of 1:00: rolling out, {updated} of 2 updated, 2 available"

    # a look every 10 s; between looks the clock moves each second; the first new pod is ready at
    # 0:30 (the second starts, so 2 of 2 are updated), the second at 1:00 (rolled out)
    expected = ([rolling(s, 1) for s in range(31)] + [rolling(30, 2)] + [rolling(s, 2) for s in range(31, 60)]
                + ["watch 1:00 of 1:00: rolling out, 2 of 2 updated, 2 available",
                   "watch 1:00 of 1:00: rolled out, holding so far, 2 of 2 updated, 2 available",
                   ""])  # the line cleared: the summary takes its place
    assert list(_frames(text)) == expected
    assert raw.startswith(b"\r\x1b[Kwatch 0:00 of 1:00: rolling out, 1 of 2 updated, 2 available\r\x1b[Kwatch 0:01")
    assert raw.endswith(b"\r\x1b[K") and b"\n" not in raw
    # then the summary first (the judgement, what became of the plan), the detail after
    assert out.splitlines()[:3] == [
        f"Watch ended after 1:00 (window 1:00): held. Plan {plan}: watched.",
        "  watch: held: 2 of 2 updated and available, no restarts, no OOM in the new pods",
        f"Plan {plan}: watched"]
    # 7 looks (0:00 to 1:00, every 10 s), the managers read before the write and the apply's re-read; one write
    assert _looks(cluster) - looks_before == 7 + 2 and len(cluster.kube.writes(verb="patch")) == 1


def test_on_a_narrow_terminal_the_line_is_cut_to_its_width_in_chinese_too(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    pty = Pty(columns=30)
    rc, out = _gpumem(cluster, store, pty.stream, "apply", plan, "--yes", "--watch", "20", lang="zh")
    text = pty.read().decode("utf-8")
    assert rc == 1  # not rolled out within 20 s: not held
    frames = list(_frames(text))
    # 29 cells at most (a CJK character takes two): the line never wraps
    assert frames[0] == "观察 0:00 / 0:20：滚动更新..."
    assert all(sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in f) <= 29 for f in frames)
    assert frames[-2] == "观察 0:20 / 0:20：滚动更新..." and frames[-1] == "" and "\n" not in text
    assert out.splitlines()[0] == f"观察结束，用时 0:20（窗口 0:20）：失败。计划 {plan}：失败。"
    assert out.splitlines()[1] == "  观察：失败；可用 gpumem rollback 回滚（观察窗口内未完成滚动更新）"


def test_an_interrupted_watch_leaves_its_last_line_ended(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    pty = Pty()
    clock = cluster.clock

    def sleep(s: float) -> None:
        if clock() >= 3:
            raise KeyboardInterrupt
        clock.advance(s)

    args = parse_argv(["apply", plan, "--yes", "--kubeconfig", str(cluster.kubeconfig),
                                      "--context", "prod", "--store", str(store), "--lang", "en"])
    saved = sys.stderr
    sys.stderr = InertStream(pty.stream)
    try:
        with pytest.raises(KeyboardInterrupt):
            cli.run(args, "en", Deps.of(args, read_environment()), clock=clock, sleep=sleep)
    finally:
        sys.stderr = saved
    text = pty.read().decode("utf-8")
    assert text.endswith(f"{CLEAR}watch 0:03 of 10:00: rolling out, 1 of 2 updated, 2 available\n")


def test_a_terminal_that_cannot_redraw_gets_the_pipe_lines(cluster):
    pty = Pty()
    try:
        assert is_live(pty.stream, {"TERM": "xterm"}) and not is_live(pty.stream, {"TERM": "dumb"})
        assert not is_live(Pipe(), {"TERM": "xterm"})
    finally:
        pty.read()


# ------------------------------------------------------------------ on a pipe


@pytest.mark.parametrize(("lang", "lines", "summary"), [
    ("en", ["2026-12-01T22:40:00Z watch 0:00: rolling out, 1 of 2 updated, 2 available",
            "2026-12-01T22:40:30Z watch 0:30: rolling out, 2 of 2 updated, 2 available",
            "2026-12-01T22:41:00Z watch 1:00: rolled out, holding so far, 2 of 2 updated, 2 available"],
     "Watch ended after 10:00 (window 10:00): held. Plan {plan}: watched."),
    ("zh", ["2026-12-01T22:40:00Z 观察 0:00：滚动更新中，2 个中已更新 1 个、可用 2 个",
            "2026-12-01T22:40:30Z 观察 0:30：滚动更新中，2 个中已更新 2 个、可用 2 个",
            "2026-12-01T22:41:00Z 观察 1:00：已完成更新，目前稳定，2 个中已更新 2 个、可用 2 个"],
     "观察结束，用时 10:00（窗口 10:00）：已稳定。计划 {plan}：已观察。"),
])
def test_on_a_pipe_the_default_watch_prints_one_stamped_line_per_change(cluster, tmp_path, capsys, lang, lines,
                                                                        summary):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    looks_before = _looks(cluster)
    err = Pipe()
    rc, out = _gpumem(cluster, store, err, "apply", plan, "--yes", lang=lang)  # the default window, 600 s
    assert rc == 0
    assert err.getvalue() == "".join(line + "\n" for line in lines)
    # 3 lines for 61 looks (every 10 s for 10 minutes; the other reads are the managers read and the apply's re-read)
    assert _looks(cluster) - looks_before == 61 + 2
    assert out.splitlines()[0] == summary.format(plan=plan)
    assert Store.open(store).get(plan).state == "watched"


def test_on_a_pipe_a_crash_loop_ends_the_watch_early_and_says_why_first(cluster, tmp_path, capsys):
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    err = Pipe()
    rc, out = _gpumem(cluster, store, err, "apply", plan, "--yes")
    assert rc == 1
    lines = err.getvalue().splitlines()
    assert lines[0] == "2026-12-01T22:40:00Z watch 0:00: rolling out, 1 of 2 updated, 2 available"
    assert lines[-1].startswith("2026-12-01T22:40:") and ": failed, 1 of 2 updated, 2 available (" in lines[-1]
    assert len(lines) == len(set(line.partition(" ")[2].partition(": ")[2] for line in lines)), "no repeated line"
    first = out.splitlines()[0]
    assert first.startswith("Watch ended after 0:") and first.endswith(f"(window 10:00): failed. Plan {plan}: failed.")
    assert out.splitlines()[1].startswith("  watch: failed; roll back with gpumem rollback (")
    assert f"Roll back: gpumem rollback {plan} --yes" in out


def test_the_watch_json_says_how_long_it_watched(cluster, tmp_path, capsys):
    import json

    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    rc, out = _gpumem(cluster, store, Pipe(), "apply", plan, "--yes", "--watch", "90", "--json")
    doc = json.loads(out)
    assert rc == 0 and doc["state"] == "watched"
    assert (doc["watch"]["outcome"], doc["watch"]["elapsed_s"], doc["watch"]["window_s"]) == ("held", 90.0, 90)


# ------------------------------------------------------------------ rollback says what it restored


def test_rollback_prints_the_values_it_restored_not_the_forward_change(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-model-len=4096")
    assert run_cli(capsys, cluster, store, "apply", plan, "--yes", "--no-watch")[0] == 0
    rc, text = run_cli(capsys, cluster, store, "rollback", plan, "--yes")
    assert rc == 0
    assert text == (f"Plan {plan}: rolled back\n"
                    "  Restored on Deployment llm/vllm-server (cluster prod), the values as they are now:\n"
                    "    - --max-model-len 4096 -> 8192\n")
    vllm = next(c for c in cluster.kube.get("Deployment", "llm", "vllm-server")["spec"]["template"]["spec"]
                ["containers"] if c["name"] == "vllm")
    assert "--max-model-len=8192" in vllm["args"], "what it says it restored is on the object"


def test_rollback_json_gives_the_inverse_of_each_change(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--replicas", "3")
    assert run_cli(capsys, cluster, store, "apply", plan, "--yes", "--no-watch")[0] == 0
    rc, doc = run_cli(capsys, cluster, store, "rollback", plan, "--yes", "--json")
    assert (rc, doc["state"]) == (0, "rolled_back")
    # the HPA that scales the Deployment carried the change: its minReplicas and maxReplicas
    assert doc["restored"] == [
        {"kind": "scale", "container": None, "flag": "minReplicas", "from": 3, "to": 2,
         "diff": "HPA minReplicas 3 -> 2"},
        {"kind": "scale", "container": None, "flag": "maxReplicas", "from": 3, "to": 2,
         "diff": "HPA maxReplicas 3 -> 2"}]
    hpa = cluster.kube.get("HorizontalPodAutoscaler", "llm", "vllm-server-queue")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (2, 2)
    assert [c["diff"] for c in doc["changes"]] == ["HPA minReplicas 2 -> 3", "HPA maxReplicas 2 -> 3"]


def test_rollback_in_chinese_says_what_it_restored(cluster, tmp_path, capsys):
    from bot.main import main

    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    assert run_cli(capsys, cluster, store, "apply", plan, "--yes", "--no-watch")[0] == 0
    rc = main(["rollback", plan, "--yes", "--kubeconfig", str(cluster.kubeconfig), "--context", "prod",
               "--store", str(store), "--lang", "zh"])
    assert rc == 0
    assert capsys.readouterr().out == (f"计划 {plan}：已回滚\n"
                                       "  已在 Deployment llm/vllm-server（集群 prod）上恢复，现在的值如下：\n"
                                       "    - --max-num-seqs 64 -> 128\n")


# ------------------------------------------------------------------ an unknown plan id


@pytest.mark.parametrize("verb", ["apply", "rollback"])
@pytest.mark.parametrize("yes", [True, False])
def test_an_unknown_plan_id_is_refused_before_the_api_server_is_asked_anything(cluster, tmp_path, capsys, verb,
                                                                                 yes):
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    # a plan left applying would make `apply` read the cluster to settle it first
    db = Store.open(store)
    other = _plan(capsys, cluster, store, "--replicas", "3")
    db.approve(other, "cli:test", db.get(other).plan.content_hash)
    db.move(other, "applying", actor="cli:test", expect="approved")
    db.close()
    asked = len(cluster.kube.calls())
    typo = plan[:-1] + ("0" if plan[-1] != "0" else "1")
    rc, text = run_cli(capsys, cluster, store, verb, typo, *(["--yes"] if yes else []))
    assert rc == 2
    assert text == f"gpumem: no plan {typo} in the store; did you mean {plan}? `gpumem plans --all` lists them.\n"
    rc, text = run_cli(capsys, cluster, store, verb, "p-zzzzzzzz", *(["--yes"] if yes else []))
    assert (rc, text) == (2, "gpumem: no plan p-zzzzzzzz in the store. `gpumem plans --all` lists them.\n")
    assert len(cluster.kube.calls()) == asked, "no read, no write, no dry run"
    assert Store.open(store).get(other).state == "applying"


def test_an_unknown_plan_id_is_refused_before_the_kubeconfig_is_loaded(cluster, tmp_path, capsys):
    from bot.main import main

    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    rc = main(["apply", plan.upper(), "--yes", "--kubeconfig", str(tmp_path / "no-such-kubeconfig"),
               "--store", str(store), "--lang", "zh"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err == f"gpumem：存储中没有计划 {plan.upper()}；您是不是要找 {plan}？`gpumem plans --all` 可列出全部计划。\n"
    assert cluster.kube.writes() == [] and Store.open(store).get(plan).state == "proposed"


def test_a_watch_that_rolled_back_by_itself_says_so_and_what_it_restored(cluster, tmp_path, capsys):
    cluster.kube.rollout.outcome = "crashloop"
    cluster.kube.rollout.crash_after_s = 20
    config = tmp_path / "gpumem.yaml"
    config.write_text("remediation:\n  auto_rollback: true\n")
    store = tmp_path / "gpumem.db"
    plan = _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    rc, out = _gpumem(cluster, store, Pipe(), "apply", plan, "--yes", "--config", str(config))
    assert rc == 1
    lines = out.splitlines()
    assert lines[0] == f"Watch ended after 0:20 (window 10:00): failed. Plan {plan}: rolled back."
    assert lines[1].startswith("  watch: failed; rolled back by itself (remediation.auto_rollback) (1 restart")
    assert lines[2:4] == ["  Restored on Deployment llm/vllm-server (cluster prod), the values as they are now:",
                          "    - --max-num-seqs 64 -> 128"]
    vllm = next(c for c in cluster.kube.get("Deployment", "llm", "vllm-server")["spec"]["template"]["spec"]
                ["containers"] if c["name"] == "vllm")
    assert "--max-num-seqs=128" in vllm["args"]
    assert len(cluster.kube.writes(verb="patch")) == 2, "the change and its rollback"


def _plan_of(changes: tuple, patch_type: str = "application/json-patch+json", kind: str = "Deployment",
             name: str = "vllm-server"):
    from runbooks.remediation.plan import Plan, PlanTarget

    return Plan("p-1a2b3c4d", PlanTarget("prod", "llm", kind, name), "manual", changes, "1001", 14, (), patch_type,
                "cli:test", T0, T0 + timedelta(minutes=15))


@pytest.mark.parametrize(("change", "diff", "to"), [
    (("add_startup_probe", "vllm", "/health", None, 300), "startupProbe GET /health, 300 s to start -> (none)", None),
    (("add_startup_probe", "vllm", "/health", 30, 600), "startupProbe GET /health, 600 s to start -> 30 s to start",
     30),
    (("add_shm", "vllm", None, None, "16Gi"), "/dev/shm emptyDir Memory 16Gi -> (none)", None),
    (("add_shm", "vllm", None, "8Gi", "16Gi"), "/dev/shm emptyDir Memory 16Gi -> emptyDir Memory 8Gi", "8Gi"),
    (("raise_memory_limit", "vllm", "limits.memory", "48Gi", "64Gi"), "memory limit 64Gi -> 48Gi", "48Gi"),
    (("raise_memory_limit", "vllm", "requests.memory", "48Gi", "64Gi"), "memory request 64Gi -> 48Gi", "48Gi"),
    (("lower_max_surge", None, "maxSurge", 1, 0), "maxSurge 0 -> 1", 1),
    (("set_arg", "vllm", "enforce-eager", True, None), "--enforce-eager (default) -> True", True),
    (("set_arg", "vllm", "gpu-memory-utilization", None, 0.88), "--gpu-memory-utilization 0.88 -> (default)", None),
    (("scale", None, None, 2, 3), "replicas 3 -> 2", 2),
])
def test_each_kind_of_change_is_restored_in_its_own_words(change, diff, to):
    from bot.render.remediation_outcome import restored_json
    from runbooks.model.changes import change_of

    c = change_of(*change)
    assert restored_json(_plan_of((c,))) == [{"kind": change[0], "container": change[1], "flag": change[2],
                                              "from": c.new, "to": to, "diff": diff}]


def test_what_a_plan_created_is_restored_as_deleted():
    from bot.render.remediation_outcome import restored_lines
    from runbooks.model.changes import HpaOnQueueDepth, SplitPools
    from runbooks.remediation.split import CREATE_OBJECTS

    hpa = _plan_of((HpaOnQueueDepth("vllm:num_requests_waiting", None, 4),), "create",
                   "HorizontalPodAutoscaler")
    assert restored_lines(hpa, "en")[1:] == [
        "    - HorizontalPodAutoscaler llm/vllm-server: deleted (the plan had created it)"]
    split = _plan_of((SplitPools("vllm", "Deployment", None, "create Deployment/vllm-server-long"),
                      SplitPools(None, "Service", None, "create Service/vllm-server-long")), CREATE_OBJECTS)
    assert restored_lines(split, "zh")[1:] == ["    - Deployment llm/vllm-server-long：已删除（由该计划创建）",
                                               "    - Service llm/vllm-server-long：已删除（由该计划创建）"]


def test_a_pasted_line_for_a_plan_id_is_cut_and_shown_inert(cluster, tmp_path, capsys):
    store = tmp_path / "gpumem.db"
    _plan(capsys, cluster, store, "--set", "max-num-seqs=64")
    asked = len(cluster.kube.calls())
    rc, text = run_cli(capsys, cluster, store, "rollback", "p-\x1b[2J" + "x" * 200, "--yes")
    assert rc == 2
    assert text == f"gpumem: no plan p-\\u001b[2J{'x' * 34}... in the store. `gpumem plans --all` lists them.\n"
    assert len(cluster.kube.calls()) == asked
