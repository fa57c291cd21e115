"""GPU snapshots (`gpumem snapshot`, the agent's /snapshot) as JSON, CSV and terminal text.

JSON is the evidence itself: `runbooks.model.serde.to_jsonable(GpuSnapshot)` plus `schema_version`,
so a sample loads back with `collectors.nvml.reader.parse_snapshot_json`. CSV has one row per
device per sample, units in the column names. Text is a table per sample, worded through
the catalog.

>>> from runbooks.model.evidence import GpuSnapshot
>>> snapshot_json(GpuSnapshot(source="nvml"))["schema_version"]
1
"""

from __future__ import annotations

import csv
import io
from typing import Any

from bot.render.i18n import Catalog
from bot.render.terminal import cells as _width
from runbooks.model.evidence import GpuDevice, GpuSnapshot
from runbooks.model.serde import to_jsonable
from runbooks.model.units import MIB, pct

SCHEMA_VERSION = 1

#: CSV header, stable: units in the names, MiB rounded to whole numbers like nvidia-smi
CSV_COLUMNS = (
    "timestamp", "host", "gpu", "uuid", "name", "mig_profile", "used_mib", "total_mib", "reserved_mib",
    "used_pct", "util_gpu_pct", "util_mem_bandwidth_pct", "process_count", "process_used_mib",
)

_TEXT_COLUMNS = ("gpu", "name", "mig", "used_mib", "total_mib", "reserved_mib", "used_pct", "util_gpu_pct",
                 "util_mem_bw_pct", "processes")
_RIGHT = {"used_mib", "total_mib", "reserved_mib", "used_pct", "util_gpu_pct", "util_mem_bw_pct", "processes"}


def snapshot_json(snapshot: GpuSnapshot) -> dict[str, Any]:
    """One sample: schema_version, source, devices[], taken_at, driver_version, cuda_version."""
    return {"schema_version": SCHEMA_VERSION, **to_jsonable(snapshot)}


def csv_header() -> str:
    return _csv_line(CSV_COLUMNS)


def csv_rows(snapshot: GpuSnapshot) -> str:
    """One CSV line per device; empty cells where NVML could not say."""
    at = snapshot.taken_at.isoformat() if snapshot.taken_at else ""
    return "".join(_csv_line((
        at, d.host, d.index, d.uuid, d.name, d.mig_profile, _mib(d.used_bytes), _mib(d.total_bytes),
        _mib(d.reserved_bytes), pct(d.used_ratio), _num(d.util_gpu_pct), _num(d.util_mem_bandwidth_pct),
        len(d.processes), ";".join(f"{p.pid}={_mib(p.used_bytes) if p.used_bytes is not None else ''}"
                                   for p in d.processes),
    )) for d in snapshot.devices)


def render_text(snapshot: GpuSnapshot, cat: Catalog) -> str:
    """A header line, a table of devices, and each device's processes under it."""
    at = snapshot.taken_at.strftime("%Y-%m-%d %H:%M:%S %Z").strip() if snapshot.taken_at else None
    hosts = sorted({d.host for d in snapshot.devices if d.host})
    lines = [cat.t("snapshot_cli.header", at=at, driver=snapshot.driver_version, cuda=snapshot.cuda_version,
                   host=cat.join(hosts) or None)]
    rows: list[tuple[list[str], GpuDevice | None]] = [([cat.t(f"snapshot_cli.col.{c}") for c in _TEXT_COLUMNS], None)]
    rows += [(_text_cells(cat, d), d) for d in snapshot.devices]
    widths = [max(_width(cells[i]) for cells, _ in rows) for i in range(len(_TEXT_COLUMNS))]
    for cells, device in rows:
        padded = [_pad(c, w, right=name in _RIGHT) for c, w, name in zip(cells, widths, _TEXT_COLUMNS, strict=True)]
        lines.append("  ".join(padded).rstrip())
        for p in device.processes if device else ():
            # as strings: the catalog would group a PID's digits like an amount (3,891,245)
            name = p.name or cat.t("snapshot_cli.name_unknown")
            if p.used_bytes is None:
                lines.append("    " + cat.t("snapshot_cli.process_unmeasured", pid=_dash(p.pid), name=name))
            else:
                lines.append("    " + cat.t("snapshot_cli.process", pid=_dash(p.pid), name=name,
                                            used_mib=str(_mib(p.used_bytes))))
    return "\n".join(lines) + "\n"


def _text_cells(cat: Catalog, d: GpuDevice) -> list[str]:
    return [d.index, d.name or cat.t("snapshot_cli.name_unknown"), d.mig_profile or "-", _dash(_mib(d.used_bytes)), _dash(_mib(d.total_bytes)),
            _dash(_mib(d.reserved_bytes)), _dash(pct(d.used_ratio)), _dash(_num(d.util_gpu_pct)),
            _dash(_num(d.util_mem_bandwidth_pct)), str(len(d.processes))]


def _csv_line(cells: Any) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(["" if c is None else c for c in cells])
    return buf.getvalue()


def _mib(value: int | None) -> int | None:
    return None if value is None else round(value / MIB)


def _num(value: float | None) -> int | float | None:
    if value is None:
        return None
    return int(value) if float(value).is_integer() else round(value, 1)


def _dash(value: object) -> str:
    return "-" if value is None else str(value)


def _pad(text: str, width: int, right: bool) -> str:
    space = " " * (width - _width(text))
    return space + text if right else text + space


def unavailable_text(cat, error) -> str:
    """The catalog's wording of an NvmlUnavailable, with the library's own words when useful."""
    text = cat.t_or(f"snapshot_cli.unavailable.{error.reason}", str(error))
    if error.detail and error.reason in ("init_failed", "no_permission", "module_missing"):
        text = cat.t("snapshot_cli.unavailable_detail", text=text, detail=error.detail)
    return text
