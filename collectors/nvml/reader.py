"""GPU memory from NVML (the `pynvml` module of nvidia-ml-py) on the machine this runs on.

`read_gpus()` opens NVML, reads every GPU (or, on a MIG-enabled GPU, every MIG slice), and
closes it again. `NvmlSession` keeps NVML open across several readings (sampling loops).
The library object is a parameter so tests pass a fake with the same API.

Devices use the indexes of `collectors.parsers.nvidia_smi`: "0" for a whole GPU, "0:<gpu instance id>"
for a MIG slice, whose `name` is the parent GPU's and whose `mig_profile` is "3g.40gb".
A MIG-enabled GPU with slices is represented by its slices alone (as in nvidia-smi's table).

Memory comes from the v2 call where the driver has it: `used_bytes` then excludes the
driver-reserved memory (what nvidia-smi prints as memory.used), `reserved_bytes` holds it.
With the v1 call, `used_bytes` includes that reserve and `reserved_bytes` is None.

>>> snapshot = read_gpus()  # doctest: +SKIP
>>> [(d.index, d.mig_profile, d.used_bytes) for d in snapshot.devices]  # doctest: +SKIP
[('0:1', '3g.40gb', 23068672), ('0:2', '3g.40gb', 40894464000)]
"""

from __future__ import annotations

import contextlib
import json
import re
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from collectors.errors import CollectorError, ParseError, quoted, said
from runbooks.model.evidence import GpuDevice, GpuProcess, GpuSnapshot
from runbooks.model.serde import SerdeError, from_jsonable

SOURCE = "nvml"

#: NvmlUnavailable reasons (stable keys; renderers word them) and the plain English for logs
REASONS: dict[str, str] = {
    "module_missing": "the pynvml module is not installed (pip install nvidia-ml-py)",
    "library_not_found": "no NVIDIA driver or GPU on this machine (libnvidia-ml.so not found)",
    "driver_not_loaded": "the NVIDIA kernel driver is not loaded (NVML: Driver Not Loaded)",
    "no_permission": "no permission to use NVML (the /dev/nvidia* device files are not accessible)",
    "version_mismatch": "NVML library and kernel driver versions differ (reload the driver or reboot)",
    "no_devices": "the NVIDIA driver is loaded but reports no GPUs",
    "init_failed": "NVML could not start",
}

#: pynvml error class name -> reason, for failures of nvmlInit / nvmlDeviceGetCount
_INIT_ERRORS = (
    ("NVMLError_LibraryNotFound", "library_not_found"),
    ("NVMLError_DriverNotLoaded", "driver_not_loaded"),
    ("NVMLError_NoPermission", "no_permission"),
    ("NVMLError_LibRmVersionMismatch", "version_mismatch"),
)

#: "NVIDIA A100-SXM4-80GB MIG 3g.40gb", "NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", "... MIG 1c.3g.40gb"
_MIG_NAME = re.compile(r"^(?P<parent>.*?)\s*\bMIG\s+(?P<profile>\S+)$")
_NOT_AVAILABLE = 2**64 - 1  # NVML_VALUE_NOT_AVAILABLE in an unsigned long long
_MIG_ENABLED = 1  # NVML_DEVICE_MIG_ENABLE


class NvmlUnavailable(CollectorError):
    """NVML cannot be used on this machine. `reason` is one of `REASONS`; `detail` the library's text.

    >>> str(NvmlUnavailable("library_not_found"))
    'no NVIDIA driver or GPU on this machine (libnvidia-ml.so not found)'
    """

    def __init__(self, reason: str, detail: str = ""):
        self.reason = reason
        self.detail = detail
        text = REASONS.get(reason, reason)
        super().__init__(f"{text}: {detail}" if detail and reason == "init_failed" else text)


def read_gpus(nvml: Any = None, *, now: datetime | None = None) -> GpuSnapshot:
    """One reading of every GPU and MIG slice; NVML is shut down again whatever happens.

    Raises NvmlUnavailable when there is no library, driver, permission or GPU.
    """
    with NvmlSession(nvml) as session:
        return session.read(now=now)


class NvmlSession:
    """NVML held open for several readings: `with NvmlSession() as s: s.read(); s.read()`."""

    def __init__(self, nvml: Any = None):
        self._nvml = nvml
        self._open = False

    def __enter__(self) -> NvmlSession:
        nvml = self._nvml if self._nvml is not None else _import_pynvml()
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise _unavailable(nvml, e) from e
        self._open = True
        return self

    def __exit__(self, *exc: object) -> None:
        if self._open:
            self._open = False
            # nothing useful to do about a failed teardown; the reading stands
            with contextlib.suppress(self._nvml.NVMLError):
                self._nvml.nvmlShutdown()

    def read(self, now: datetime | None = None) -> GpuSnapshot:
        nvml = self._nvml
        if not self._open:
            raise RuntimeError("NvmlSession.read outside `with`")
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            raise _unavailable(nvml, e) from e
        if count <= 0:
            raise NvmlUnavailable("no_devices")
        devices: list[GpuDevice] = []
        refused: list[str] = []
        for i in range(count):
            try:
                devices.extend(_Reader(nvml).gpu(i))
            except nvml.NVMLError as e:
                # A GPU this container may not open (device cgroup) or one fallen off the bus.
                refused.append(f"GPU {i}: {e}")
        if not devices:
            raise NvmlUnavailable("no_permission", "; ".join(refused))
        devices.sort(key=_index_key)
        return GpuSnapshot(
            source=SOURCE, devices=tuple(devices), taken_at=now or datetime.now(UTC),
            driver_version=_text(_call(nvml, "nvmlSystemGetDriverVersion")),
            cuda_version=_cuda_version(nvml))


def mig_name_parts(name: str | None) -> tuple[str | None, str | None]:
    """A MIG device name split into (parent GPU name, profile); (name, None) when not MIG.

    >>> mig_name_parts("NVIDIA A100-SXM4-80GB MIG 3g.40gb")
    ('NVIDIA A100-SXM4-80GB', '3g.40gb')
    >>> mig_name_parts("NVIDIA H100 80GB HBM3")
    ('NVIDIA H100 80GB HBM3', None)
    """
    if not name:
        return None, None
    match = _MIG_NAME.match(name.strip())
    if not match:
        return name.strip(), None
    return match.group("parent").strip() or None, match.group("profile")


def parse_snapshot_json(text: str, source: str = "snapshot.json") -> tuple[GpuSnapshot, ...]:
    """Samples printed by `gpumem snapshot --format json` (a list) or served by the agent (one).

    Raises ParseError naming `source` when the text is not such JSON.
    """
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise ParseError(source, said("not_json", detail=quoted(e))) from None
    items = doc if isinstance(doc, list) else [doc]
    samples = []
    for n, item in enumerate(items):
        if not isinstance(item, dict) or not isinstance(item.get("devices"), list):
            raise ParseError(source, said("sample_no_devices", sample=n))
        try:
            snap = from_jsonable(GpuSnapshot, item, f"$[{n}]")
        except (SerdeError, TypeError, ValueError, RecursionError) as e:
            raise ParseError(source, quoted(e)) from None
        if not all(isinstance(d, GpuDevice) and isinstance(d.index, str) for d in snap.devices):
            raise ParseError(source, said("sample_device_no_index", sample=n))
        samples.append(snap)
    return tuple(samples)


# ------------------------------------------------------------------------------ reading


class _Reader:
    """Reads one GPU: the whole card, or its MIG slices (one per GPU instance)."""

    def __init__(self, nvml: Any):
        self.nvml = nvml

    def gpu(self, i: int) -> list[GpuDevice]:
        nvml = self.nvml
        handle = nvml.nvmlDeviceGetHandleByIndex(i)
        name = _text(_call(nvml, "nvmlDeviceGetName", handle))
        if self._mig_enabled(handle):
            slices = self._slices(handle, str(i), name)
            if slices:
                return slices
        return [self._device(handle, str(i), name, None, self._processes(handle))]

    def _mig_enabled(self, handle: Any) -> bool:
        mode = _call(self.nvml, "nvmlDeviceGetMigMode", handle)
        return bool(mode) and mode[0] == _MIG_ENABLED

    def _slices(self, parent: Any, gpu: str, parent_name: str | None) -> list[GpuDevice]:
        nvml = self.nvml
        parent_processes: list[Any] | None = None
        by_instance: dict[str, GpuDevice] = {}
        for slot in range(_call(nvml, "nvmlDeviceGetMaxMigDeviceCount", parent) or 0):
            mig = _call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", parent, slot)
            if mig is None:
                continue  # NVML_ERROR_NOT_FOUND: an empty slot
            instance = _call(nvml, "nvmlDeviceGetGpuInstanceId", mig)
            index = f"{gpu}:{instance if instance is not None else slot}"
            own_name, profile = mig_name_parts(_text(_call(nvml, "nvmlDeviceGetName", mig)))
            raw = _call(nvml, "nvmlDeviceGetComputeRunningProcesses", mig)
            if raw is None:
                # Per-slice process lists can be refused (permissions); the parent's list
                # carries each process's GPU instance instead.
                if parent_processes is None:
                    parent_processes = _call(nvml, "nvmlDeviceGetComputeRunningProcesses", parent) or []
                raw = [p for p in parent_processes if getattr(p, "gpuInstanceId", None) == instance]
            processes = self._process_list(raw)
            if index in by_instance:
                # Several compute instances share one GPU instance and its memory: one device.
                seen = by_instance[index]
                known = {q.pid for q in seen.processes}
                by_instance[index] = replace(seen, processes=seen.processes + tuple(
                    p for p in processes if p.pid not in known))
                continue
            by_instance[index] = self._device(mig, index, parent_name or own_name, profile, processes)
        return list(by_instance.values())

    def _device(self, handle: Any, index: str, name: str | None, profile: str | None,
                processes: tuple[GpuProcess, ...]) -> GpuDevice:
        nvml = self.nvml
        used, total, reserved = self._memory(handle)
        util = _call(nvml, "nvmlDeviceGetUtilizationRates", handle)
        if profile is None:
            name, profile = mig_name_parts(name)
        return GpuDevice(
            index=index, name=name, uuid=_text(_call(nvml, "nvmlDeviceGetUUID", handle)), mig_profile=profile,
            used_bytes=used, total_bytes=total, reserved_bytes=reserved,
            util_gpu_pct=_pct(getattr(util, "gpu", None)), util_mem_bandwidth_pct=_pct(getattr(util, "memory", None)),
            processes=processes)

    def _memory(self, handle: Any) -> tuple[int | None, int | None, int | None]:
        nvml = self.nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if version is not None:
            try:
                info = nvml.nvmlDeviceGetMemoryInfo(handle, version=version)
                return _bytes(info.used), _bytes(info.total), _bytes(getattr(info, "reserved", None))
            except (nvml.NVMLError, TypeError):
                pass  # older driver (FunctionNotFound, NotSupported) or an older pynvml: v1 below
        info = _call(nvml, "nvmlDeviceGetMemoryInfo", handle)
        if info is None:
            return None, None, None
        return _bytes(info.used), _bytes(info.total), None

    def _processes(self, handle: Any) -> tuple[GpuProcess, ...]:
        return self._process_list(_call(self.nvml, "nvmlDeviceGetComputeRunningProcesses", handle) or [])

    def _process_list(self, raw: list[Any]) -> tuple[GpuProcess, ...]:
        out: dict[int | None, GpuProcess] = {}
        for p in raw:
            pid = getattr(p, "pid", None)
            # NVML PIDs live in the host's PID namespace: without hostPID the name lookup fails.
            name = _text(_call(self.nvml, "nvmlSystemGetProcessName", pid)) if pid is not None else None
            out.setdefault(pid, GpuProcess(pid=pid, name=name or None, used_bytes=_bytes(getattr(p, "usedGpuMemory", None))))
        return tuple(out.values())


# ------------------------------------------------------------------------------ helpers


def _import_pynvml() -> Any:
    # imported here, not at the top: pynvml is optional (an install without it reads as
    # module_missing) and takes 14 ms to import (python -X importtime), which only the NVML
    # paths (`gpumem agent`, `gpumem snapshot`) pay
    try:
        import pynvml
    except ImportError as e:
        raise NvmlUnavailable("module_missing", str(e)) from e
    return pynvml


def _unavailable(nvml: Any, error: Exception) -> NvmlUnavailable:
    for class_name, reason in _INIT_ERRORS:
        cls = getattr(nvml, class_name, None)
        if isinstance(cls, type) and isinstance(error, cls):
            return NvmlUnavailable(reason, str(error))
    return NvmlUnavailable("init_failed", str(error))


def _call(nvml: Any, function: str, *args: Any) -> Any:
    """One NVML query; None when the device does not support it or refuses (NotSupported,
    NoPermission, NotFound ...), or when this pynvml is too old to have the function."""
    fn = getattr(nvml, function, None)
    if fn is None:
        return None
    try:
        return fn(*args)
    except nvml.NVMLError:
        return None


def _cuda_version(nvml: Any) -> str | None:
    """NVML gives the CUDA driver API version as 1000*major + 10*minor (12040 -> "12.4")."""
    value = _call(nvml, "nvmlSystemGetCudaDriverVersion_v2")
    if value is None:
        value = _call(nvml, "nvmlSystemGetCudaDriverVersion")
    if not isinstance(value, int) or value <= 0:
        return None
    return f"{value // 1000}.{value % 1000 // 10}"


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, bytes):  # pynvml before 11.5 returned bytes
        value = value.decode("utf-8", "replace")
    value = str(value).strip()
    return value or None


def _bytes(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and 0 <= value < _NOT_AVAILABLE else None


def _pct(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and 0 <= value <= 100 else None


def _index_key(device: GpuDevice) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in device.index.split(":"))

