"""`gpumem serve` runs the handover scheduler: built from the config (the Lease in a cluster, a
file lock on a laptop), started with the bot and stopped first in its drain, releasing its
leadership. The process tests start the real `python -m bot serve --http` against FakeSlack and
the Kubernetes stand-in, with a schedule whose slot is the current minute and a stop-gap whose
review is due, and count the posts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from bot.config.settings import SettingsError, load_settings
from bot.scheduler.leader import FileLockElector, LeaderElector, parse_time
from bot.scheduler.setup import make_elector, scheduler_from_settings
from bot.slack.limits import ServeLimits
from bot.store.db import Store
from bot.store.notes import Journal
from runbooks.model.changes import Scale
from runbooks.remediation.plan import Plan, PlanTarget
from tests.support.fake_slack import FakeSlack
from tests.support.kube_fixtures import running_scenario
from tests.support.slack_kit import CHANNEL, ROOT, ServeProcess, env_for

# ----------------------------------------------------------------------------- settings


def _load(tmp_path: Path, text: str, environ: dict[str, str] | None = None):
    config = tmp_path / "gpumem.yaml"
    config.write_text(text)
    return load_settings(config, environ or {})


def test_election_is_the_lease_in_a_cluster_and_a_file_lock_elsewhere(tmp_path):
    sched = 'schedules:\n  - {channel: C1, cron: "0 9 * * *"}\n'
    laptop = _load(tmp_path, sched).scheduler
    assert (laptop.election, laptop.uses_lease(), laptop.review_after_s, laptop.review_channel) == (
        "auto", False, 43200.0, None)
    pod = _load(tmp_path, sched, {"POD_NAMESPACE": "gpumem", "KUBERNETES_SERVICE_HOST": "10.0.0.1"}).scheduler
    assert (pod.uses_lease(), pod.lease_namespace, pod.in_cluster) == (True, "gpumem", True)
    forced = _load(tmp_path, sched + "scheduler: {election: file, lock_path: run/s.lock, review_after_s: 600,"
                   " review_channel: C9}\n", {"POD_NAMESPACE": "gpumem"}).scheduler
    assert (forced.uses_lease(), forced.lock_path, forced.review_after_s, forced.review_channel) == (
        False, str(tmp_path / "run/s.lock"), 600.0, "C9")


@pytest.mark.parametrize(("scheduler", "message"), [
    ("{election: raft}", "scheduler.election: 'raft' is not one of auto, lease, file"),
    ("{election: lease}", "scheduler.election: the Lease needs a namespace"),
    ("{review_after_s: 0}", "scheduler.review_after_s"),
    ("{review_channel: general}", "scheduler.review_channel: 'general' is not a Slack channel id"),
    ("{lease_duration_s: soon}", "scheduler.lease_duration_s"),
])
def test_a_bad_scheduler_setting_is_named_by_its_field(tmp_path, scheduler, message):
    with pytest.raises(SettingsError) as e:
        _load(tmp_path, f"scheduler: {scheduler}\n")
    assert message in str(e.value) and "gpumem.yaml" in str(e.value)


def test_no_schedules_no_scheduler_and_schedules_without_a_store_are_refused(tmp_path):
    assert scheduler_from_settings(_load(tmp_path, "default_namespace: llm\n"), lambda *a: None) is None
    with pytest.raises(SettingsError, match=r"^scheduler.lock_path: the file lock needs a path"):
        make_elector(_load(tmp_path, "default_namespace: llm\n"), "laptop_1")
    with pytest.raises(SettingsError, match=r"^store.path: schedules need the bot's store"):
        scheduler_from_settings(_load(tmp_path, 'schedules:\n  - {channel: C1, cron: "0 9 * * *"}\n'),
                                lambda *a: None)


def test_the_lease_needs_a_reachable_api_and_says_which(tmp_path):
    settings = _load(tmp_path, f"""\
store: {{path: {tmp_path / 'gpumem.db'}}}
default_context: prod
clusters:
  - {{name: prod, context: prod, kubeconfig: {tmp_path / 'missing-kubeconfig'}}}
schedules:
  - {{channel: C1, cron: "0 9 * * *"}}
scheduler: {{election: lease, lease_namespace: gpumem}}
""")
    with pytest.raises(SettingsError) as e:
        make_elector(settings, "pod-a")
    assert str(e.value).startswith("scheduler.election: the Lease needs a Kubernetes API through the default "
                                   "cluster") and "missing-kubeconfig" in str(e.value)


def test_the_file_lock_has_one_holder_and_frees_when_its_process_dies(tmp_path):
    lock = tmp_path / "gpumem.db.lock"
    a, b = FileLockElector(lock, "host_1"), FileLockElector(lock, "host_2")
    assert a.step() and not b.step() and a.holder() == "host_1"
    assert a.step() and a.release() and not a.leader
    assert b.step() and b.holder() == "host_2" and not a.step()
    b.release()
    # a process holding it is killed (no release): the kernel frees the lock
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; from bot.scheduler.leader import FileLockElector; "
        f"e = FileLockElector({str(lock)!r}, 'child'); print(e.step(), flush=True); time.sleep(60)")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "True"
        assert not a.step() and a.holder() == "child"
        child.kill()
        child.wait(10)
        assert a.step() and a.holder() == "host_1"
    finally:
        child.kill()
        a.release()


def test_serve_composes_the_scheduler_with_a_file_lock_next_to_the_store(tmp_path):
    settings = _load(tmp_path, f"store: {{path: {tmp_path / 'gpumem.db'}}}\n"
                               'schedules:\n  - {channel: C1, cron: "0 9 * * *"}\n')
    sched = scheduler_from_settings(settings, lambda *a: None, lambda r: None, identity="laptop_1")
    try:
        assert isinstance(sched.elector, FileLockElector)
        assert sched.elector.path == Path(f"{tmp_path / 'gpumem.db'}.lock")
        assert sched.tick(datetime(2026, 12, 1, 7, tzinfo=UTC)) == [] and sched.leader
        assert not FileLockElector(sched.elector.path, "other").step()
    finally:
        sched.shutdown()
    assert FileLockElector(sched.elector.path, "other").step(), "shutdown let go of the lock"
    with pytest.raises(Exception, match="closed"):
        sched.store.db.execute("SELECT 1")


# ----------------------------------------------------------------------------- the real serve path

T_APPLIED = datetime.now(UTC) - timedelta(hours=13)


def _stopgap_store(path: Path) -> None:
    """A replica stop-gap applied 13 h ago from the channel: its review (12 h) is due."""
    store = Store.open(path)
    plan = Plan("p-scale", PlanTarget(None, "llm", "Deployment", "vllm-server"), "scale_out", (Scale(1, 2),),
                "41", 3, (), "application/json-patch+json", "U1", T_APPLIED, T_APPLIED + timedelta(minutes=15), 1,
                "triage")
    store.add_plan(plan, channel=CHANNEL, now=T_APPLIED)
    store.approve(plan.id, "U2", plan.content_hash, now=T_APPLIED)
    store.move(plan.id, "applying", actor="U2", now=T_APPLIED)
    store.move(plan.id, "applied", actor="U2", now=T_APPLIED)
    store.close()


def _config(tmp_path: Path, kubeconfig: Path, scheduler: str) -> tuple[Path, Path]:
    now = datetime.now(UTC)
    db = tmp_path / "gpumem.db"
    config = tmp_path / "gpumem.yaml"
    config.write_text(f"""\
default_namespace: llm
allowed_namespaces: [llm]
default_context: prod
clusters:
  - {{name: prod, context: prod, kubeconfig: {kubeconfig}}}
slack:
  default_lang: en
  channels:
    {CHANNEL}: {{lang: en}}
store: {{path: {db}}}
workers: {{pool_size: 1, queue_length: 8}}
schedules:
  - {{channel: {CHANNEL}, cron: "{now.minute} {now.hour} * * *", timezone: UTC, grace_s: 3600}}
scheduler: {scheduler}
""")
    return config, db


class Served(ServeProcess):
    """The bot as a serving process, outside any pod (no POD_NAMESPACE: no Lease unless asked)."""

    def __init__(self, config: Path, fake: FakeSlack):
        super().__init__(config, fake, drop=("POD_NAMESPACE", "KUBERNETES_SERVICE_HOST"), GPUMEM_DRAIN_S="5",
                         GPUMEM_EXIT_GRACE_S="2")

    @property
    def identity(self) -> str:
        return f"{os.uname().nodename}_{self.proc.pid}"


#: how long `serve` may take from SIGTERM to its end (the drain and the grace after it), and a
#: margin for a loaded machine: the tests wait that long for the exit, and check its status
STOP_WAIT_S = ServeLimits().stop_s + 15


def _wait(what, timeout: float = 30.0, every: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = what()
        if found:
            return found
        time.sleep(every)
    return what()


def _posts(fake: FakeSlack) -> tuple[list, list]:
    parents = [c for c in fake.calls_to("chat.postMessage", ok_only=True) if not c.args.get("thread_ts")]
    return ([c for c in parents if c.args["text"].startswith("Shift handover")],
            [c for c in parents if c.args["text"].startswith("Review due")])


def test_serve_on_a_laptop_posts_the_slot_and_the_review_once_and_frees_the_lock_on_sigterm(tmp_path):
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        config, db = _config(tmp_path, sc.kubeconfig, "{interval_s: 1}")
        _stopgap_store(db)
        served = Served(config, fake)
        try:
            assert _wait(lambda: all(_posts(fake)), timeout=30), served.log()
            time.sleep(3)  # three more rounds: nothing more is posted
            lock = FileLockElector(f"{db}.lock", "test")
            assert not lock.step() and lock.holder() == served.identity
            served.proc.send_signal(signal.SIGTERM)
            rc = served.proc.wait(STOP_WAIT_S)
        finally:
            served.stop()
        assert rc == 0, served.log()
        assert lock.step(), "the drain let go of the lock"
        lock.release()
        handovers, reviews = _posts(fake)
        assert len(handovers) == 1 and len(reviews) == 1, served.log()
        assert "replicas 1 → 2 (plan p-scale)" in reviews[0].args["text"]
        assert "(confirmed live)" in reviews[0].args["text"]  # the stand-in's Deployment runs 2 replicas
        # the handover's stop-gap was read live too
        thread = json.dumps([c.args.get("blocks") for c in fake.thread(CHANNEL, handovers[0].response["ts"])])
        assert "confirmed live" in thread and "unconfirmed" not in thread
        store = Store.open(db)
        try:
            slots = Journal(store).slots(CHANNEL)
        finally:
            store.close()
        assert sorted(s.key.split(":")[0] for s in slots) == ["handover", "review"]
        assert {s.state for s in slots} == {"posted"} and {s.holder for s in slots} == {served.identity}
        assert fake.token not in served.log()


def test_two_instances_on_one_lease_post_once_and_the_standby_takes_over_from_a_killed_holder(tmp_path):
    duration = 3
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        config, db = _config(tmp_path, sc.kubeconfig, "{election: lease, lease_namespace: gpumem, "
                                                      f"lease_duration_s: {duration}, interval_s: 1}}")
        _stopgap_store(db)

        def lease() -> dict:
            found = sc.kube.get("Lease", "gpumem", "gpumem-scheduler")
            return (found or {}).get("spec") or {}

        a = Served(config, fake)
        b = None
        try:
            assert _wait(lambda: lease().get("holderIdentity") == a.identity), a.log()
            b = Served(config, fake)
            assert _wait(lambda: all(_posts(fake)), timeout=30), a.log() + b.log()
            time.sleep(2)  # b runs its rounds as a follower
            assert lease()["holderIdentity"] == a.identity
            handovers, reviews = _posts(fake)
            assert len(handovers) == 1 and len(reviews) == 1
            # the holder dies without releasing
            last_renewal = parse_time(lease()["renewTime"])
            a.proc.kill()
            a.proc.wait(10)
            killed = time.monotonic()
            assert _wait(lambda: lease().get("holderIdentity") == b.identity, timeout=duration + 10), b.log()
            took = time.monotonic() - killed
            spec = lease()
            taken = parse_time(spec["acquireTime"])
            time.sleep(3)  # b leads for three rounds: the slot and the reminder are done
            handovers, reviews = _posts(fake)
            assert len(handovers) == 1 and len(reviews) == 1, b.log()
            b.proc.send_signal(signal.SIGTERM)
            rc = b.proc.wait(STOP_WAIT_S)
        finally:
            a.stop()
            if b is not None:
                b.stop()
        assert rc == 0, b.log()
        renew_s = LeaderElector(None, "x", "y", duration).renew_s
        # not before the duration after the holder's last renewal, and within one round after it
        assert timedelta(seconds=duration) <= taken - last_renewal <= timedelta(seconds=duration + renew_s + 1.5)
        assert took <= duration + renew_s + 1.5
        assert spec["leaseTransitions"] == 1
        assert lease().get("holderIdentity") is None, "the drain released the Lease"
        store = Store.open(db)
        try:
            slots = Journal(store).slots(CHANNEL)
        finally:
            store.close()
        assert [(s.key.split(":")[0], s.state, s.holder) for s in slots] == [
            ("review", "posted", a.identity), ("handover", "posted", a.identity)]


def test_serve_with_schedules_but_no_store_stops_with_the_field_named_not_a_traceback(tmp_path, monkeypatch, capsys):
    from bot.main import main

    config = tmp_path / "gpumem.yaml"
    config.write_text(f'workers: {{pool_size: 1}}\nschedules:\n  - {{channel: {CHANNEL}, cron: "0 9 * * *"}}\n')
    with FakeSlack() as fake:
        for name, value in env_for(fake).items():
            monkeypatch.setenv(name, value)
        rc = main(["serve", "--http", "--host", "127.0.0.1", "--port", "0", "--config", str(config), "--lang", "en"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "store.path: schedules need the bot's store" in err and "Traceback" not in err
    assert "listening" not in err
