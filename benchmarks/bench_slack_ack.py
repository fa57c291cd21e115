"""Load test: the first triage after start, then 50 concurrent signed `/gpumem triage` commands.

A real `gpumem serve --http` child process, pointed at FakeSlack (a stand-in Web API on a
loopback port) and at the example bundles, is timed twice:

- first command after start: one triage, from the POST to its final diagnosis in the channel,
  then `--next` more one after the other (the first must not pay for warming anything);
- a burst: N slash commands written at once by `benchmarks.load_client` (one thread, in its own
  process, so the client's GIL is not measured as the server's). For each it records the ack
  latency (the HTTP round trip Slack waits on, 3 s at most) and whether the final diagnosis was
  posted; it prints ack p50/p99/max and the time until the last diagnosis.

    python -m benchmarks.bench_slack_ack [--commands 50] [--workers 4] [--next 4]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.fake_slack import FakeSlack, signed_headers, slash_body  # noqa: E402

SECRET = "bench-signing-secret"
TARGET = "llm/vllm-server"
SLACK_ACK_DEADLINE_S = 3.0


def _config(folder: Path, workers: int, queue: int) -> Path:
    bundle = ROOT / "examples" / "runbook-incident"
    path = folder / "gpumem.yaml"
    path.write_text(
        "default_namespace: llm\nallowed_namespaces: ['*']\n"
        "slack:\n  channels:\n    C0BENCH: {lang: en}\n"
        f"workers:\n  pool_size: {workers}\n  queue_length: {queue}\n"
        "deadlines:\n  progress_interval_s: 1.0\n"
        f"bundles:\n  {TARGET}: {bundle}\n")
    return path


def _start_server(config: Path, fake: FakeSlack) -> tuple[subprocess.Popen, str]:
    env = {**os.environ, "SLACK_BOT_TOKEN": fake.token, "SLACK_SIGNING_SECRET": SECRET,
           "GPUMEM_SLACK_API_URL": fake.api_url, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "bot", "serve", "--http", "--host", "127.0.0.1",
                             "--port", "0", "--config", str(config), "--log-level", "WARNING", "--lang", "en"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        m = re.search(r"listening on (http://\S+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, m.group(1)
        if not line and proc.poll() is not None:
            break
    proc.kill()
    raise RuntimeError("gpumem serve did not start")


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def _is_final(call) -> bool:
    return any(b.get("type") == "actions" for b in call.args.get("blocks") or [])


def _one_triage(url: str, fake: FakeSlack, n: int, done_before: int) -> float:
    """POST one triage; seconds until its final diagnosis replaced the parent message."""
    body = slash_body(f"triage {TARGET}", fake.response_url(n), channel="C0BENCH")
    started = time.perf_counter()
    requests.post(url + "/slack/events", data=body, headers=signed_headers(SECRET, body), timeout=10).raise_for_status()
    fake.wait_for("chat.update", done_before + 1, timeout=120, where=_is_final)
    return time.perf_counter() - started


def run(commands: int, workers: int, next_runs: int = 4) -> dict[str, float]:
    with FakeSlack() as fake, tempfile.TemporaryDirectory() as tmp:
        proc, url = _start_server(_config(Path(tmp), workers, max(commands, 64)), fake)
        try:
            requests.get(url + "/health", timeout=5).raise_for_status()
            first = _one_triage(url, fake, 0, 0)
            nexts = [_one_triage(url, fake, k, k) for k in range(1, next_runs + 1)]
            done = next_runs + 1
            prepared = []
            for n in range(commands):
                body = slash_body(f"triage {TARGET}", fake.response_url(1000 + n), channel="C0BENCH")
                prepared.append((body, signed_headers(SECRET, body)))
            t0 = time.perf_counter()
            out = subprocess.run([sys.executable, "-m", "benchmarks.load_client"], cwd=ROOT, check=True,
                                 input=json.dumps({"url": url + "/slack/events", "requests": prepared}),
                                 capture_output=True, text=True)
            results = json.loads(out.stdout)
            finals = fake.wait_for("chat.update", done + commands, timeout=600, where=_is_final)
            last_s = time.perf_counter() - t0
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    acks = [r["seconds"] for r in results]
    acked = sum(1 for r in results if r["status"] == 200 and r["text"].startswith("On it"))
    return {"commands": commands, "workers": workers, "acked": acked,
            "within_3s": sum(1 for a in acks if a < SLACK_ACK_DEADLINE_S),
            "answered": len({f.args["ts"] for f in finals}) - done,
            "ack_p50_ms": statistics.median(acks) * 1000, "ack_p99_ms": _percentile(acks, 0.99) * 1000,
            "ack_max_ms": max(acks) * 1000, "last_diagnosis_s": last_s,
            "first_s": first, "next_s": statistics.median(nexts) if nexts else float("nan")}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--commands", type=int, default=50)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--next", type=int, default=4, help="triages timed one by one after the first")
    args = p.parse_args(argv)
    r = run(args.commands, args.workers, args.next)
    print(f"first triage after start: {r['first_s']:.2f} s to its diagnosis; the next {args.next}: "
          f"{r['next_s']:.2f} s (median)")
    print(f"{'commands':>8} {'workers':>7} {'acked':>5} {'<3 s':>5} {'answered':>8} "
          f"{'ack p50':>9} {'ack p99':>9} {'ack max':>9} {'last diagnosis':>14}")
    print(f"{r['commands']:>8} {r['workers']:>7} {r['acked']:>5} {r['within_3s']:>5} {r['answered']:>8} "
          f"{r['ack_p50_ms']:>6.0f} ms {r['ack_p99_ms']:>6.0f} ms {r['ack_max_ms']:>6.0f} ms "
          f"{r['last_diagnosis_s']:>12.1f} s")


if __name__ == "__main__":
    main()
