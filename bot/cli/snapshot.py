"""`gpumem snapshot`: GPU memory, utilisation and processes per GPU and MIG slice, from NVML.

Samples `--count` times, `--interval` seconds apart (the runbook's gpu_mem_snapshot), and
prints each sample as it is taken, so Ctrl-C keeps what was printed (JSON is closed into a
valid list). Without a GPU or driver it says so on stderr and exits 3.

    gpumem snapshot --count 30 --interval 2 --format csv > gpu-mem.csv
"""

from __future__ import annotations

import json
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, TextIO

from bot.grammar.requests import SnapshotRequest
from bot.render.gpus import csv_header, csv_rows, render_text, snapshot_json, unavailable_text
from bot.render.i18n import Catalog
from bot.service.exits import EXIT_NO_EVIDENCE, EXIT_OK
from bot.service.gpus import NvmlUnavailable, nvml_session

EXIT_INTERRUPTED = 130  # 128 + SIGINT, when Ctrl-C comes before the first sample


@dataclass
class Io:
    """Where a snapshot reads NVML, the time and the host name from, and where it writes."""

    nvml: Any = None
    now: Callable[[], datetime] = field(default=lambda: datetime.now(UTC))
    sleep: Callable[[float], None] = time.sleep
    host: Callable[[], str] = socket.gethostname
    out: TextIO | None = None
    err: TextIO | None = None


def run(request: SnapshotRequest, lang: str) -> int:
    return snapshot(request, lang, Io())


def snapshot(request: SnapshotRequest, lang: str, io: Io) -> int:
    cat = Catalog.load(lang)
    out, err = io.out or sys.stdout, io.err or sys.stderr
    fmt = "json" if request.json else (request.format or "text")
    writer = _Writer(fmt, out, cat)
    host = io.host()
    try:
        with nvml_session(io.nvml) as session:
            start = io.now()
            for n in range(request.count):
                if n:
                    wait = (start - io.now()).total_seconds() + n * request.interval
                    io.sleep(max(0.0, wait))
                taken = session.read(now=io.now())
                writer.sample(replace(taken, devices=tuple(replace(d, host=host) for d in taken.devices)))
    except NvmlUnavailable as e:
        writer.close()
        print(unavailable_text(cat, e), file=err)
        return EXIT_NO_EVIDENCE
    except KeyboardInterrupt:
        writer.close()
        print(cat.t("snapshot_cli.interrupted", count=writer.samples), file=err)
        return EXIT_OK if writer.samples else EXIT_INTERRUPTED
    writer.close()
    return EXIT_OK


class _Writer:
    """Streams samples: JSON opens a list at the first sample and closes it at the end."""

    def __init__(self, fmt: str, out: TextIO, cat):
        self.fmt, self.out, self.cat = fmt, out, cat
        self.samples = 0

    def sample(self, snap) -> None:
        if self.fmt == "json":
            body = json.dumps(snapshot_json(snap), ensure_ascii=False, indent=2)
            self.out.write(("[\n" if not self.samples else ",\n") + _indent(body))
        elif self.fmt == "csv":
            self.out.write((csv_header() if not self.samples else "") + csv_rows(snap))
        else:
            self.out.write(("\n" if self.samples else "") + render_text(snap, self.cat))
        self.samples += 1
        self.out.flush()

    def close(self) -> None:
        if self.fmt == "json" and self.samples:
            self.out.write("\n]\n")
            self.out.flush()


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.split("\n"))


