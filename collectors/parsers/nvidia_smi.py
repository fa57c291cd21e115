"""`nvidia-smi` text as a GpuSnapshot: the full table, `--query-gpu` CSV, or `dmon -s mu`.

nvidia-smi prints memory in MiB (dmon labels it "MB" but means MiB); bytes = MiB x 2^20.
`utilization.memory` (dmon `mem`) is bandwidth busy time, not fullness.

>>> snap = parse_nvidia_smi("0, 87, 41, 71234, 81559\\n")
>>> (snap.devices[0].used_bytes, snap.devices[0].util_mem_bandwidth_pct)
(74694262784, 41.0)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace

from collectors.errors import ParseError, quoted, said
from runbooks.model.evidence import GpuDevice, GpuProcess, GpuSnapshot
from runbooks.model.units import GIB, MIB

#: `--query-gpu` field -> GpuDevice attribute (memory fields converted to bytes)
_QUERY_FIELDS = {
    "index": "index",
    "name": "name",
    "gpu_name": "name",
    "uuid": "uuid",
    "gpu_uuid": "uuid",
    "memory.used": "used_bytes",
    "memory.total": "total_bytes",
    "memory.reserved": "reserved_bytes",
    "memory.free": "free_bytes",
    "utilization.gpu": "util_gpu_pct",
    "utilization.memory": "util_mem_bandwidth_pct",
}
#: What a header-less query CSV of five columns is taken to be: the runbook's own command,
#: `--query-gpu=index,utilization.gpu,utilization.memory,memory.used,memory.total`.
_HEADERLESS_COLUMNS = ("index", "utilization.gpu", "utilization.memory", "memory.used", "memory.total")
#: dmon column -> GpuDevice attribute; `fb` is MiB, `sm` is what --query-gpu calls utilization.gpu
_DMON_FIELDS = {"gpu": "index", "fb": "used_bytes", "sm": "util_gpu_pct", "mem": "util_mem_bandwidth_pct"}
_UNIT_BYTES = {"b": 1, "kib": 2**10, "mib": MIB, "gib": GIB, "mb": MIB}

_HEADER_CELL = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*(?:\s*\[[^\]]*\])?$", re.IGNORECASE)
_VALUE = re.compile(r"^(-?\d+(?:\.\d+)?)\s*([A-Za-z%]*)$")
_MEMORY_CELL = re.compile(r"(\d{1,9})\s*MiB\s*/\s*(\d{1,9})\s*MiB")
_PERCENT_CELL = re.compile(r"^(\d+(?:\.\d+)?)\s*%")
_GPU_FIRST_CELL = re.compile(r"^(\d{1,4})\s+(.+?)(?:\s{2,}(?:On|Off|WDDM|TCC|N/A))?$")
_MIG_FIRST_CELL = re.compile(r"^(\d{1,4})\s+(\d{1,4})\s+(\d{1,4})\s+(\d{1,4})$")
_PROCESS_ROW = re.compile(
    r"^(\d{1,4})\s+(?:(\S+)\s+(\S+)\s+)?(\d{1,10})\s+(\S+)\s+(.+?)\s+(?:(\d{1,9})\s*MiB|N/A)$")
_LIST_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)")
_LIST_MIG = re.compile(r"^MIG (\S+)\s+Device\s+(\d+): \(UUID: ([^)]+)\)")
_DRIVER = re.compile(r"Driver Version:\s*(\S+)")
_CUDA = re.compile(r"CUDA Version:\s*(\S+)")
_FAILED = ("NVIDIA-SMI has failed", "couldn't communicate with the NVIDIA driver", "Failed to initialize NVML")


def parse_nvidia_smi(text: str, source: str = "nvidia-smi.txt") -> GpuSnapshot:
    """Read whichever nvidia-smi form `text` is; raise ParseError when it is none of them.

    Column meanings come from the table's layout, the CSV header or the dmon header line.
    `[N/A]`, `[Not Supported]` and `-` readings become None.
    """
    lines = [line.rstrip("\r") for line in text.removeprefix("\ufeff").split("\n")]
    if any("Memory-Usage" in line or ("NVIDIA-SMI" in line and "Driver Version" in line) for line in lines):
        return _Table(lines, source).snapshot()
    if any(line.lstrip().startswith("#") and "gpu" in line.lstrip("# \t").split() for line in lines):
        return _parse_dmon(lines, source)
    for number, line in enumerate(lines, start=1):
        if any(marker in line for marker in _FAILED):
            raise ParseError(source, said("nvidia_smi_failed", line=quoted(_clip(line.strip()))), number)
    if any(line.strip() == "No devices were found" for line in lines):
        return GpuSnapshot(source=source)
    first = next((line for line in lines if line.strip()), "")
    if "," in first and not _LIST_GPU.match(first.strip()):
        return _parse_query_csv(lines, source)
    listed = _parse_listing(lines, source)
    if listed is not None:
        return listed
    processes = _parse_process_table(lines, source)
    if processes is not None:
        return processes
    raise ParseError(source, said("not_nvidia_smi"))


def _parse_listing(lines: list[str], source: str) -> GpuSnapshot | None:
    """`nvidia-smi -L` alone: one device per GPU with its name and UUID, a MIG profile when a
    MIG device is listed under it (the sizes come from the GPU catalog, not this listing)."""
    devices: dict[str, GpuDevice] = {}
    parent: str | None = None
    for line in lines:
        text = line.strip()
        if m := _LIST_GPU.match(text):
            parent = m.group(1)
            devices[parent] = GpuDevice(parent, m.group(2).strip(), uuid=m.group(3))
        elif (m := _LIST_MIG.match(text)) and parent is not None:
            if devices[parent].mig_profile is None:
                devices[parent] = replace(devices[parent], mig_profile=m.group(1))
        elif text:
            return None  # another form: not a listing
    return GpuSnapshot(source=source, devices=tuple(devices.values())) if devices else None


def _parse_process_table(lines: list[str], source: str) -> GpuSnapshot | None:
    """The Processes table alone (or a row of it): devices known only by index, each with the
    processes it runs and their memory."""
    processes: dict[tuple[str, str | None], list[GpuProcess]] = {}
    rows = 0
    for line in lines:
        inner = line.strip().strip("|").strip()
        if _PROCESS_ROW.match(inner):
            rows += 1
            _Table._process_row(inner, processes)
    if not rows:
        return None
    by_gpu: dict[str, list[GpuProcess]] = {}
    for (gpu, _), procs in processes.items():
        by_gpu.setdefault(gpu, []).extend(procs)
    devices = tuple(GpuDevice(gpu, processes=tuple(procs)) for gpu, procs in by_gpu.items())
    return GpuSnapshot(source=source, devices=devices)


# --------------------------------------------------------------------- --query-gpu CSV


def _parse_query_csv(lines: list[str], source: str) -> GpuSnapshot:
    rows = [(n, [c.strip() for c in line.split(",")]) for n, line in enumerate(lines, 1) if line.strip()]
    first_number, first = rows[0]
    if _is_header(first):
        names = [c.split("[")[0].strip().lower() for c in first]
        units: list[str | None] = [c.split("[")[1].rstrip("]").strip() if "[" in c else None for c in first]
        body = [(n, cells) for n, cells in rows[1:] if cells != first]
        if not any(name in _QUERY_FIELDS for name in names):
            raise ParseError(source, said("csv_no_gpu_field"), first_number)
    elif len(first) == len(_HEADERLESS_COLUMNS):
        names, units, body = list(_HEADERLESS_COLUMNS), [None] * len(first), rows
    else:
        raise ParseError(source, said("csv_no_header", count=len(first)),
                         first_number)
    devices: dict[str, GpuDevice] = {}
    for number, cells in body:
        if len(cells) != len(names):
            raise ParseError(source, said("column_count", expected=len(names), found=len(cells)), number)
        values: dict[str, object] = {}
        for name, unit, cell in zip(names, units, cells, strict=True):
            attr = _QUERY_FIELDS.get(name)
            if attr is not None:
                values[attr] = _reading(attr, cell, unit, source, number)
        device = _device_from(values, fallback_index=str(len(devices)))
        devices[device.index] = device  # a looping capture (-l) repeats rows: the last wins
    return GpuSnapshot(source=source, devices=tuple(devices.values()))


def _is_header(cells: list[str]) -> bool:
    return all(_HEADER_CELL.match(c) for c in cells) and not any(_VALUE.match(c) for c in cells)


def _reading(attr: str, cell: str, unit: str | None, source: str, line: int) -> object:
    if _unavailable(cell):
        return None
    if attr in ("index", "name", "uuid"):
        return cell
    match = _VALUE.match(cell)
    if not match:
        raise ParseError(source, said("bad_value_for", value=quoted(_clip(repr(cell))), field=attr), line)
    number, cell_unit = float(match.group(1)), (match.group(2) or unit or "").lower()
    if not math.isfinite(number):
        raise ParseError(source, said("bad_value_for", value=quoted(_clip(repr(cell))), field=attr), line)
    if attr.endswith("_pct"):
        return number
    factor = _UNIT_BYTES.get(cell_unit or "mib")
    if factor is None:
        raise ParseError(source, said("unknown_unit", unit=quoted(_clip(repr(cell_unit)))), line)
    return round(number * factor)


def _unavailable(cell: str) -> bool:
    return cell in ("", "N/A", "-") or (cell.startswith("[") and cell.endswith("]"))


def _device_from(values: dict[str, object], fallback_index: str) -> GpuDevice:
    free = values.pop("free_bytes", None)
    index = values.pop("index", None) or fallback_index
    device = GpuDevice(index=str(index), **values)  # type: ignore[arg-type]
    if device.total_bytes is None and device.used_bytes is not None and isinstance(free, int):
        device = replace(device, total_bytes=device.used_bytes + free + (device.reserved_bytes or 0))
    return device


# ------------------------------------------------------------------------------ dmon


def _parse_dmon(lines: list[str], source: str) -> GpuSnapshot:
    columns: list[str] = []
    devices: dict[str, GpuDevice] = {}
    for number, line in enumerate(lines, start=1):
        tokens = line.lstrip("# \t").split()
        if line.lstrip().startswith("#"):
            if "gpu" in tokens:
                columns = [t.lower() for t in tokens]  # repeated every screenful; same columns
            continue
        if not tokens:
            continue
        if not columns or len(tokens) != len(columns):
            raise ParseError(source, said("dmon_row", values=len(tokens), columns=len(columns)), number)
        values: dict[str, object] = {}
        for column, token in zip(columns, tokens, strict=True):
            attr = _DMON_FIELDS.get(column)
            if attr is not None:
                values[attr] = _reading(attr, token, "mib", source, number)
        if not str(values.get("index", "")).isdigit():
            raise ParseError(source, said("bad_gpu_index", value=quoted(_clip(repr(values.get("index"))))), number)
        device = _device_from(values, fallback_index="")
        devices[device.index] = device  # dmon samples over time: the last row is the newest
    return GpuSnapshot(source=source, devices=tuple(devices.values()))


# ----------------------------------------------------------------------------- table


@dataclass
class _Row:
    index: str
    name: str | None = None
    used_bytes: int | None = None
    total_bytes: int | None = None
    util_gpu_pct: float | None = None
    mig_enabled: bool = False
    gpu_instance: str | None = None
    mig_device: str | None = None
    processes: list[GpuProcess] = field(default_factory=list)


class _Table:
    """The full `nvidia-smi` table: GPU rows, the MIG devices table, the Processes table.

    `nvidia-smi -L` lines next to it (GPU and MIG UUIDs, MIG profile names) are used when
    present; the table alone does not print MIG profile names.
    """

    def __init__(self, lines: list[str], source: str):
        self.lines, self.source = lines, source
        self.gpus: list[_Row] = []
        self.slices: list[_Row] = []
        self.listed: dict[tuple[str, str | None], tuple[str | None, str]] = {}
        self.driver_version: str | None = None
        self.cuda_version: str | None = None
        self._listed_parent = "0"

    def snapshot(self) -> GpuSnapshot:
        processes = self._read()
        if not self.gpus and not self.slices:
            raise ParseError(self.source, said("no_gpu_rows"))
        devices = [self._slice_device(s, processes) for s in self._unique_slices()]
        sliced = {s.index for s in self.slices}
        devices += [self._gpu_device(g, processes) for g in self.gpus if g.index not in sliced]
        devices.sort(key=lambda d: tuple(int(p) for p in d.index.split(":")))
        return GpuSnapshot(source=self.source, devices=tuple(devices),
                           driver_version=self.driver_version, cuda_version=self.cuda_version)

    def _read(self) -> dict[tuple[str, str | None], list[GpuProcess]]:
        processes: dict[tuple[str, str | None], list[GpuProcess]] = {}
        section, ruled, block_row, current_gpu = None, False, 0, None
        for number, raw in enumerate(self.lines, start=1):
            line = raw.strip()
            self._header(line)
            if self._listing(line):
                continue
            if "Memory-Usage" in line and "GPU-Util" in line:
                section, ruled, block_row = "gpus", False, 0
            elif "MIG devices:" in line:
                section, ruled, block_row = "mig", False, 0
            elif "Processes:" in line:
                section, ruled = "procs", False
            elif line.startswith("|="):
                ruled, block_row = True, 0
            elif line.startswith("+") or line.startswith("|-"):
                block_row = 0
            elif not line.startswith("|"):
                section = None
            elif ruled and section == "gpus":
                current_gpu = self._gpu_row(_cells(line), block_row, current_gpu, number)
                block_row += 1
            elif ruled and section == "mig":
                if block_row == 0:
                    self._mig_row(_cells(line), number)
                block_row += 1
            elif ruled and section == "procs":
                self._process_row(line.strip("|").strip(), processes)
        return processes

    def _header(self, line: str) -> None:
        if self.driver_version is None and (m := _DRIVER.search(line)):
            self.driver_version = m.group(1)
        if self.cuda_version is None and (m := _CUDA.search(line)):
            self.cuda_version = m.group(1)

    def _listing(self, line: str) -> bool:
        """`nvidia-smi -L` lines: a GPU, then its MIG devices indented under it."""
        if m := _LIST_GPU.match(line):
            self._listed_parent = m.group(1)
            self.listed[(m.group(1), None)] = (m.group(2), m.group(3))
            return True
        if m := _LIST_MIG.match(line):
            self.listed[(self._listed_parent, m.group(2))] = (m.group(1), m.group(3))
            return True
        return False

    def _gpu_row(self, cells: list[str], block_row: int, current: _Row | None, number: int) -> _Row:
        if block_row == 0 or current is None:
            match = _GPU_FIRST_CELL.match(cells[0])
            if not match:
                raise ParseError(self.source, said("unexpected_gpu_row", row=quoted(_clip(repr(cells[0])))), number)
            row = _Row(index=match.group(1), name=match.group(2).strip())
            self.gpus.append(row)
            return row
        for i, cell in enumerate(cells):
            if current.total_bytes is None and (m := _MEMORY_CELL.search(cell)):
                current.used_bytes, current.total_bytes = int(m.group(1)) * MIB, int(m.group(2)) * MIB
                if i + 1 < len(cells) and (p := _PERCENT_CELL.match(cells[i + 1])):
                    current.util_gpu_pct = float(p.group(1))
        if cells[-1] == "Enabled":
            current.mig_enabled = True
        return current

    def _mig_row(self, cells: list[str], number: int) -> None:
        if not cells[0][:1].isdigit():
            return  # "No MIG devices found"
        match = _MIG_FIRST_CELL.match(cells[0])
        if not match:
            raise ParseError(self.source, said("unexpected_mig_row", row=quoted(_clip(repr(cells[0])))), number)
        gpu, instance, _, device = match.groups()
        row = _Row(index=gpu, gpu_instance=instance, mig_device=device)
        memory = _MEMORY_CELL.search(cells[1]) if len(cells) > 1 else None
        if memory:
            row.used_bytes, row.total_bytes = int(memory.group(1)) * MIB, int(memory.group(2)) * MIB
        self.slices.append(row)

    @staticmethod
    def _process_row(inner: str, processes: dict[tuple[str, str | None], list[GpuProcess]]) -> None:
        match = _PROCESS_ROW.match(inner)
        if not match:
            return  # "No running processes found", or a layout this reader does not know
        gpu, instance, _, pid, _, name, mib = match.groups()
        instance = instance if instance and instance.isdigit() else None
        used = int(mib) * MIB if mib is not None else None
        processes.setdefault((gpu, instance), []).append(GpuProcess(pid=int(pid), name=name, used_bytes=used))

    def _unique_slices(self) -> list[_Row]:
        # One row per compute instance; memory belongs to the GPU instance, so keep one per GI.
        seen: dict[tuple[str, str | None], _Row] = {}
        for s in self.slices:
            seen.setdefault((s.index, s.gpu_instance), s)
        return list(seen.values())

    def _slice_device(self, s: _Row, processes: dict[tuple[str, str | None], list[GpuProcess]]) -> GpuDevice:
        parent = next((g for g in self.gpus if g.index == s.index), None)
        profile, uuid = self.listed.get((s.index, s.mig_device), (None, None))
        return GpuDevice(
            index=f"{s.index}:{s.gpu_instance}", name=parent.name if parent else None, uuid=uuid,
            mig_profile=profile, used_bytes=s.used_bytes, total_bytes=s.total_bytes,
            processes=tuple(processes.get((s.index, s.gpu_instance), ())))

    def _gpu_device(self, g: _Row, processes: dict[tuple[str, str | None], list[GpuProcess]]) -> GpuDevice:
        listed_name, uuid = self.listed.get((g.index, None), (None, None))
        owned = [p for (gpu, _), procs in processes.items() if gpu == g.index for p in procs]
        return GpuDevice(
            index=g.index, name=listed_name or g.name, uuid=uuid, used_bytes=g.used_bytes,
            total_bytes=g.total_bytes, util_gpu_pct=g.util_gpu_pct, processes=tuple(owned))


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner[1:] if inner.startswith("|") else inner
    inner = inner[:-1] if inner.endswith("|") else inner
    return [c.strip() for c in inner.split("|")]


def _clip(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
