"""Benchmark: `gpumem profile` against mawk running the same bucketing, one access-log shape at a time.

For each shape (`SHAPES`: the runbook's key=value line, a logfmt gateway log with RFC 3339
times and quoted values, nginx's combined format with upstream variables, Envoy's default
format with the counts appended, key=value with Unix epochs, OpenAI-style JSON responses,
a gateway's JSON log with nested objects; and four with what gateways add: JSON with RFC 3339
times in µs or ms and zone offsets such as -05:00 and +05:30, logfmt with quoted values holding
spaces and escaped quotes, nginx and Envoy with request ids, upstream status, trace ids and
bytes between and after the counts) a deterministic file of `--size-mb` MiB is
written into a temporary folder (lognormal lengths, 50 requests a second), then timed,
alternating, `--runs` times each:

- mawk with a bucketing script for that shape: find the input and the output count with a
  regex each (`match()`, as written for the shape, quotes included), apply the runbook's
  bucket rule, count the buckets; one process, as awk is;
- `gpumem profile --access-log FILE --json` as a user runs it (a fresh Python process, imports
  included, the packages' bytecode compiled first as an install leaves it), which reads the counts and the times, builds exact percentiles, the shift and
  per-bucket detail, and splits the file across the CPUs it may use.

Prints, per shape, wall seconds (median), the ratio, CPU seconds (user + system, gpumem's
processes summed: on a shared machine the steadier figure), gpumem's peak memory (the resident
memory of all its processes summed, sampled every 10 ms) and whether the bucket counts of
the two agree. Each file is deleted after its shape.

    python -m benchmarks.bench_profile_vs_mawk [--size-mb 1024] [--runs 3] [--shapes a,b] [--workers N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from runbooks.model.units import MIB

ROOT = Path(__file__).resolve().parent.parent

#: the runbook's bucket rule in awk: the smallest bucket holding both input and output
AWK_BUCKETS = r"""
{
  if (!match($0, /IN_RE/)) { skipped++; next }
  i = substr($0, RSTART + IN_SKIP, RLENGTH - IN_SKIP) + 0
  if (!match($0, /OUT_RE/)) { skipped++; next }
  o = substr($0, RSTART + OUT_SKIP, RLENGTH - OUT_SKIP) + 0
  ci = (i <= 512) ? 0 : (i <= 2048) ? 1 : (i <= 8192) ? 2 : 3
  co = (o <= 128) ? 0 : (o <= 256) ? 1 : (o <= 512) ? 2 : 3
  c = (ci > co) ? ci : co
  n[c]++
}
END { printf "%d %d %d %d %d\n", n[0], n[1], n[2], n[3], skipped }
"""

_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
#: 2026-10-10T13:55:36Z, the first request's time in every shape but the runbook's
START_S = 1791640536

# a line from (request number k, input tokens, output tokens); 50 requests a second
Line = Callable[[int, int, int], str]


@dataclass(frozen=True)
class Shape:
    """One way gateways write an access log: a line maker and mawk's regexes for the counts
    (the digits start `skip` characters into the match)."""

    name: str
    title: str
    line: Line
    awk_in: str
    awk_in_skip: int
    awk_out: str
    awk_out_skip: int

    def awk_script(self) -> str:
        return (AWK_BUCKETS.replace("IN_RE", self.awk_in).replace("IN_SKIP", str(self.awk_in_skip))
                .replace("OUT_RE", self.awk_out).replace("OUT_SKIP", str(self.awk_out_skip)))


def _at(k: int) -> tuple[datetime, int]:
    """The time of request k (UTC) and its milliseconds."""
    return datetime.fromtimestamp(START_S + k // 50, UTC), (k * 37) % 1000


def _runbook(k: int, i: int, o: int) -> str:
    m = k // 3000  # the runbook's minute stamps
    return (f"time=2026-03-{9 + m // 1440:02d}T{m // 60 % 24:02d}{m % 60:02d}Z input_tokens={i} output_tokens={o} "
            "model=qwen2.5-7b")


def _logfmt(k: int, i: int, o: int) -> str:
    at, ms = _at(k)
    if k % 3 == 2:  # some writers log local time with its offset
        ts = f"{at + timedelta(hours=8):%Y-%m-%dT%H:%M:%S}.{ms:03d}+08:00"
    else:
        ts = f"{at:%Y-%m-%dT%H:%M:%S}.{ms:03d}" + ("Z" if k % 3 else "+00:00")
    if k % 2:
        return (f'level=info ts={ts} msg="request done" method=POST path=/v1/chat/completions model="qwen2.5 7b" '
                f'status=200 input_tokens="{i}" output_tokens="{o}" duration_ms={k % 997} request_id=req-{k:08x}')
    return (f'ts={ts} level=info request_id=req-{k:08x} output_tokens="{o}" model="qwen2.5 7b" input_tokens="{i}" '
            f'status=200 msg="request done" duration_ms={k % 997}')


def _nginx(k: int, i: int, o: int) -> str:
    at, ms = _at(k)
    # log_format llm '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    #   '"$http_referer" "$http_user_agent" rt=$request_time uct="$upstream_connect_time" '
    #   'urt="$upstream_response_time" ua=$upstream_addr input_tokens=$upstream_http_x_input_tokens '
    #   'output_tokens=$upstream_http_x_output_tokens';
    return (f'10.0.3.{k % 250} - - [{at.day:02d}/{_MONTHS[at.month - 1]}/{at.year}:{at:%H:%M:%S} +0000] '
            f'"POST /v1/chat/completions HTTP/1.1" 200 {1200 + k % 4000} "-" "python-httpx/0.27.0" '
            f'rt={ms / 1000:.3f} uct="0.000" urt="{ms / 1000:.3f}" ua=10.1.2.3:8000 input_tokens={i} output_tokens={o}')


def _envoy(k: int, i: int, o: int) -> str:
    at, ms = _at(k)
    # Envoy's default format, then input_tokens=%DYNAMIC_METADATA(...)% output_tokens=...
    return (f'[{at:%Y-%m-%dT%H:%M:%S}.{ms:03d}Z] "POST /v1/chat/completions HTTP/1.1" 200 - 512 {1200 + k % 4000} '
            f'{ms} {ms - 2 if ms > 2 else 0} "10.0.3.{k % 250}" "python-httpx/0.27.0" "{k:08x}-1f2e-4d3c-9b8a" '
            f'"llm.example" "10.1.2.3:8000" input_tokens={i} output_tokens={o}')


def _epoch(k: int, i: int, o: int) -> str:
    _, ms = _at(k)
    s = START_S + k // 50
    ts = f"{s}.{ms:03d}" if k % 2 else f"{s}{ms:03d}"  # seconds with a fraction, or milliseconds
    return f"ts={ts} method=POST path=/v1/chat/completions status=200 input_tokens={i} output_tokens={o} model=qwen2.5-7b"


def _openai(k: int, i: int, o: int) -> str:
    s = START_S + k // 50
    usage = (f'"usage":{{"prompt_tokens":{i},"completion_tokens":{o},"total_tokens":{i + o},'
             '"prompt_tokens_details":{"cached_tokens":0}}')
    choices = '"choices":[{"index":0,"finish_reason":"stop","logprobs":null}]'
    if k % 2:
        return (f'{{"id":"chatcmpl-{k:08x}","object":"chat.completion","created":{s},"model":"qwen2.5-7b",'
                f'{choices},{usage},"system_fingerprint":null}}')
    return f'{{{usage},"model":"qwen2.5-7b","id":"chatcmpl-{k:08x}",{choices},"object":"chat.completion","created":{s}}}'


def _gateway_json(k: int, i: int, o: int) -> str:
    at, ms = _at(k)
    ts = f"{at:%Y-%m-%dT%H:%M:%S}.{ms:03d}" + ("Z" if k % 3 else "+00:00")
    request = '"request": {"method": "POST", "path": "/v1/chat/completions", "model": "qwen2.5-7b"}'
    response = f'"response": {{"status": 200, "latency_ms": {k % 997}}}'
    usage = f'"usage": {{"completion_tokens": {o}, "prompt_tokens": {i}, "total_tokens": {i + o}}}'
    client = f'"client": {{"ip": "10.0.3.{k % 250}", "user_agent": "python-httpx/0.27.0"}}'
    if k % 2:
        return f'{{"time": "{ts}", "level": "info", {request}, {response}, {usage}, {client}}}'
    return f'{{"level": "info", {request}, {usage}, "time": "{ts}", {response}, {client}}}'


#: zone offsets some writers log local time with (hours, minutes); UTC first
_ZONES = ((0, 0), (8, 0), (-5, 0), (5, 30), (-3, -30), (1, 0))


def _zoned(k: int, micro: bool) -> str:
    """Request k's time as RFC 3339 in a local zone, with milliseconds or microseconds
    (`2026-10-10T21:55:36.123456+08:00`, `...-05:00`, `...Z`)."""
    at, ms = _at(k)
    zh, zm = _ZONES[k % len(_ZONES)]
    local = at + timedelta(hours=zh, minutes=zm)
    frac = f"{ms:03d}{(k * 7) % 1000:03d}" if micro else f"{ms:03d}"
    if zh == zm == 0:
        zone = "Z" if k % 2 else "+00:00"
    else:
        zone = f"{'-' if zh < 0 or zm < 0 else '+'}{abs(zh):02d}:{abs(zm):02d}"
    return f"{local:%Y-%m-%dT%H:%M:%S}.{frac}{zone}"


def _json_zones(k: int, i: int, o: int) -> str:
    ts = _zoned(k, micro=k % 4 < 2)
    request = (f'"request": {{"id": "req-{k:08x}", "method": "POST", "path": "/v1/chat/completions", '
               '"model": "qwen2.5-7b", "stream": true}')
    usage = (f'"usage": {{"prompt_tokens": {i}, "completion_tokens": {o}, "total_tokens": {i + o}, '
             '"prompt_tokens_details": {"cached_tokens": 0}}')
    response = f'"response": {{"status": 200, "latency_ms": {k % 997}.{k % 10}, "upstream": "10.1.2.3:8000"}}'
    trace = f'"trace_id": "{k * 2654435761 % (1 << 64):016x}{k:016x}", "span_id": "{k:016x}"'
    if k % 2:
        return f'{{"timestamp": "{ts}", "level": "info", {request}, {response}, {usage}, {trace}}}'
    return f'{{"level": "info", {trace}, {usage}, {request}, "timestamp": "{ts}", {response}}}'


_AGENTS = ('python-httpx/0.27.0', 'Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko)',
           'OpenAI/Python 1.40.0', 'curl/8.5.0')


def _logfmt_quoted(k: int, i: int, o: int) -> str:
    ts = _zoned(k, micro=k % 2 == 0)
    agent = _AGENTS[k % len(_AGENTS)]
    msg = 'upstream said \\"done\\" after retry' if k % 5 == 0 else "request done"
    if k % 2:
        return (f'ts={ts} level=info msg="{msg}" request_id=req-{k:08x} user_agent="{agent}" '
                f'input_tokens={i} route="chat completions" output_tokens={o} bytes={1200 + k % 4000} '
                f'trace_id={k:032x} duration={k % 997}.{k % 1000:03d}ms')
    return (f'level=info msg="{msg}" model="qwen2.5 7b" output_tokens={o} status=200 user_agent="{agent}" '
            f'input_tokens={i} ts={ts} upstream_status=200 request_id=req-{k:08x} error=""')


def _nginx_extra(k: int, i: int, o: int) -> str:
    at, ms = _at(k)
    agent = _AGENTS[k % len(_AGENTS)]
    # log_format llm '$remote_addr - $remote_user [$time_local] "$request" $status $body_bytes_sent '
    #   '"$http_referer" "$http_user_agent" rid=$request_id input_tokens=$upstream_http_x_input_tokens '
    #   'us=$upstream_status trace="$http_traceparent" output_tokens=$upstream_http_x_output_tokens '
    #   'bytes_in=$request_length rt=$request_time urt="$upstream_response_time" ua="$upstream_addr"';
    return (f'10.0.3.{k % 250} - - [{at.day:02d}/{_MONTHS[at.month - 1]}/{at.year}:{at:%H:%M:%S} +0000] '
            f'"POST /v1/chat/completions HTTP/1.1" 200 {1200 + k % 4000} "-" "{agent}" rid={k:032x} '
            f'input_tokens={i} us=200 trace="00-{k:032x}-{k:016x}-01" output_tokens={o} bytes_in={900 + k % 3000} '
            f'rt={ms / 1000:.3f} urt="{ms / 1000:.3f}" ua="10.1.2.3:8000"')


def _envoy_extra(k: int, i: int, o: int) -> str:
    at, ms = _at(k)
    agent = _AGENTS[k % len(_AGENTS)]
    # Envoy's default format with the counts among more operators: %UPSTREAM_HOST%, request id,
    # trace id, upstream status (`UPSTREAM_TRANSPORT_FAILURE_REASON`-style dashes), bytes
    return (f'[{at:%Y-%m-%dT%H:%M:%S}.{ms:03d}Z] "POST /v1/chat/completions HTTP/1.1" 200 - 512 {1200 + k % 4000} '
            f'{ms} {ms - 2 if ms > 2 else 0} "10.0.3.{k % 250}" "{agent}" "{k:08x}-1f2e-4d3c-9b8a" '
            f'"llm.example" "10.1.2.3:8000" input_tokens={i} x_request_id="{k:08x}-1f2e" upstream_status=200 '
            f'output_tokens={o} trace_id={k:032x} bytes_received=512 bytes_sent={1200 + k % 4000} '
            f'upstream_failure="-"')


SHAPES: dict[str, Shape] = {s.name: s for s in (
    Shape("runbook", "key=value, runbook (`time=2026-03-09T2011Z input_tokens=...`)", _runbook,
          "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
    Shape("logfmt", "logfmt: RFC 3339 ms + offset, quoted values, 2 key orders", _logfmt,
          'input_tokens="[0-9]+', 14, 'output_tokens="[0-9]+', 15),
    Shape("nginx", "nginx combined + upstream vars (`[10/Oct/2026:13:55:36 +0000]`)", _nginx,
          "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
    Shape("envoy", "Envoy default format + counts (`[2026-10-10T13:55:36.123Z]`)", _envoy,
          "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
    Shape("epoch", "key=value, Unix epoch s.ms / ms", _epoch,
          "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
    Shape("openai", "JSON, OpenAI responses: nested usage, 2 key orders", _openai,
          '"prompt_tokens":[0-9]+', 16, '"completion_tokens":[0-9]+', 20),
    Shape("gateway-json", "JSON gateway log: nested objects, ISO times, 2 key orders", _gateway_json,
          '"prompt_tokens": [0-9]+', 17, '"completion_tokens": [0-9]+', 21),
    Shape("json-zones", "JSON gateway log: RFC 3339 µs / ms + zone offsets, trace ids, 2 key orders", _json_zones,
          '"prompt_tokens": [0-9]+', 17, '"completion_tokens": [0-9]+', 21),
    Shape("logfmt-quoted", "logfmt: quoted values with spaces and escaped quotes, µs / ms + offsets, extra fields",
          _logfmt_quoted, "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
    Shape("nginx-extra", "nginx combined + request id, upstream status, trace id between and after the counts",
          _nginx_extra, "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
    Shape("envoy-extra", "Envoy default format + request id, trace id, bytes between and after the counts",
          _envoy_extra, "input_tokens=[0-9]+", 13, "output_tokens=[0-9]+", 14),
)}


def shape_lines(shape: Shape, k0: int, inputs: list[int], outputs: list[int]) -> list[str]:
    """Lines k0, k0 + 1, ... of a shape for these counts (without newlines)."""
    return [shape.line(k0 + j, i, o) for j, (i, o) in enumerate(zip(inputs, outputs, strict=True))]


def write_shape(path: Path, shape: Shape, size_mb: float, seed: int = 7) -> int:
    """About `size_mb` MiB of a shape's lines, the same bytes for the same seed. Returns lines."""
    rng = np.random.Generator(np.random.PCG64(seed))
    target = int(size_mb * MIB)
    written = lines = 0
    batch = 100_000
    with open(path, "w", encoding="ascii") as fh:
        while written < target:
            tin = np.floor(rng.lognormal(7.0, 1.1, batch)).astype(np.int64).tolist()
            tout = np.floor(rng.lognormal(5.0, 0.9, batch)).astype(np.int64).tolist()
            text = "\n".join(shape_lines(shape, lines, tin, tout)) + "\n"
            if written + len(text) > target:
                text = text[: text.rfind("\n", 0, target - written) + 1] or text[: text.find("\n") + 1]
            fh.write(text)
            written += len(text)
            lines += text.count("\n")
        # on disk before any run: the kernel's write-back of a GiB of dirty pages would
        # otherwise take CPU from the first runs
        fh.flush()
        os.fsync(fh.fileno())
    return lines


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and its descendants (KiB), from /proc."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            with open(f"/proc/{p}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    todo.extend(int(x) for x in fh.read().split())
        except (OSError, ValueError):
            continue
    return total


def _children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's waited-for children and theirs."""
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(cmd: list[str], sample: bool = False) -> tuple[float, str, int, float]:
    """(wall seconds, stdout, peak RSS of the process and its children summed, KiB (0 unless
    `sample`), CPU seconds of the process and its children)."""
    peak = [0]
    cpu0 = _children_cpu_s()
    done = threading.Event()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    if sample:
        watcher.start()
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    done.set()
    if sample:
        watcher.join()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {err.strip()[:500]}")
    return seconds, out, peak[0], _children_cpu_s() - cpu0


def _gpumem_cmd(path: Path, workers: int | None) -> list[str]:
    cmd = [sys.executable, "-m", "bot", "profile", "--access-log", str(path), "--json", "--lang", "en"]
    if workers is not None:
        cmd += ["--workers", str(workers)]
    return cmd


@dataclass(frozen=True)
class Row:
    shape: Shape
    mib: float
    lines: int
    gpumem_s: float
    mawk_s: float
    gpumem_cpu_s: float
    mawk_cpu_s: float
    peak_mib: float
    workers: int
    agree: bool


def run_shape(shape: Shape, tmp: Path, mawk: str, size_mb: float, runs: int, workers: int | None, seed: int) -> Row:
    path = tmp / f"{shape.name}.log"
    lines = write_shape(path, shape, size_mb, seed)
    script = tmp / f"{shape.name}.awk"
    script.write_text(shape.awk_script())
    with open(path, "rb") as fh:  # into the page cache, so no tool pays the first read
        while fh.read(64 * MIB):
            pass
    awk = [mawk, "-f", str(script), str(path)]
    gp = _gpumem_cmd(path, workers)
    t_awk, t_gp, c_awk, c_gp, peaks = [], [], [], [], []
    out_awk = out_gp = ""
    for _ in range(max(1, runs)):
        s, out_awk, _, cpu = timed(awk)
        t_awk.append(s)
        c_awk.append(cpu)
        s, out_gp, peak, cpu = timed(gp, sample=True)
        t_gp.append(s)
        c_gp.append(cpu)
        peaks.append(peak)
    mib = path.stat().st_size / MIB
    path.unlink()
    doc = json.loads(out_gp)
    counts = [b["count"] for b in doc["buckets"]]
    awk_counts = [int(x) for x in out_awk.split()[:4]]
    return Row(shape, mib, lines, statistics.median(t_gp), statistics.median(t_awk), statistics.median(c_gp),
               statistics.median(c_awk), max(peaks) / 1024,
               doc.get("workers", 0), counts == awk_counts)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=1024.0, help="access log size in MiB (default 1024)")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each tool per shape (default 3)")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma-separated, of {', '.join(SHAPES)}")
    parser.add_argument("--workers", type=int, default=None, help="gpumem processes (default: the CPUs it may use)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    mawk = shutil.which("mawk")
    if mawk is None:
        raise SystemExit("mawk is not installed (Debian: apt-get install mawk)")
    names = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in names if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shapes: {', '.join(unknown)} (known: {', '.join(SHAPES)})")
    from collectors.access_logs.fast import available_cpus

    # gpumem as installed: `pip install` writes the packages' bytecode; an editable install
    # where PYTHONDONTWRITEBYTECODE is set would otherwise compile every module on every run
    compileall = [sys.executable, "-m", "compileall", "-q", "bot", "collectors", "runbooks"]
    subprocess.run(compileall, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            row = run_shape(SHAPES[name], Path(tmp), mawk, args.size_mb, args.runs, args.workers, args.seed)
            print(f"{name}: gpumem {row.gpumem_s:.2f} s ({row.gpumem_cpu_s:.2f} s CPU), mawk {row.mawk_s:.2f} s "
                  f"({row.mawk_cpu_s:.2f} s CPU), {row.mawk_s / row.gpumem_s:.2f}x, peak {row.peak_mib:.0f} MiB", flush=True)
            rows.append(row)
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    print(f"\n{args.size_mb:,.0f} MiB per shape; {available_cpus()} CPUs; medians of {args.runs} runs, alternating; "
          f"load average at the end {load}")
    print("| shape | lines | gpumem s | mawk s | mawk / gpumem | gpumem CPU s | mawk CPU s | gpumem peak MiB "
          "| buckets agree |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r.shape.title} | {r.lines:,} | {r.gpumem_s:.2f} | {r.mawk_s:.2f} | {r.mawk_s / r.gpumem_s:.2f}x | "
              f"{r.gpumem_cpu_s:.2f} | {r.mawk_cpu_s:.2f} | {r.peak_mib:.0f} | {'yes' if r.agree else 'NO'} |")
    print(f"\ngpumem used {rows[0].workers if rows else 0} processes; mawk runs in one.")


if __name__ == "__main__":
    main()
