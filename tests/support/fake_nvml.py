"""A stand-in for the `pynvml` module: the same function names, error classes and constants.

Devices hold plain numbers; the fake answers as NVML does, including its refusals:
NotSupported for utilisation on MIG slices and for the v2 memory call on old drivers,
NotFound for empty MIG slots and for process names outside this PID namespace,
LibraryNotFound / DriverNotLoaded from `nvmlInit` on a machine without a driver.

>>> nvml = FakeNvml([FakeGpu(used_bytes=1024, reserved_bytes=4096)])
>>> nvml.nvmlInit()
>>> gpu = nvml.nvmlDeviceGetHandleByIndex(0)
>>> nvml.nvmlDeviceGetMemoryInfo(gpu).used  # v1 counts the driver's reserve as used
5120
>>> nvml.nvmlDeviceGetMemoryInfo(gpu, version=nvml.nvmlMemory_v2).used
1024
>>> nvml.nvmlDeviceGetHandleByIndex(1)
Traceback (most recent call last):
...
tests.support.fake_nvml.NVMLError_NotFound: Not Found
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

from runbooks.model.units import GIB, MIB

nvmlMemory_v2 = 0x02000028
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1


class NVMLError(Exception):
    """Like pynvml.NVMLError: `value` is the NVML return code, str() its name."""

    value = 999
    text = "Unknown Error"

    def __init__(self, value: int | None = None):
        super().__init__()
        if value is not None:
            self.value = value

    def __str__(self) -> str:
        return self.text


def _error(name: str, value: int, text: str) -> type[NVMLError]:
    return type(name, (NVMLError,), {"value": value, "text": text})


NVMLError_Uninitialized = _error("NVMLError_Uninitialized", 1, "Uninitialized")
NVMLError_NotSupported = _error("NVMLError_NotSupported", 3, "Not Supported")
NVMLError_NoPermission = _error("NVMLError_NoPermission", 4, "Insufficient Permissions")
NVMLError_NotFound = _error("NVMLError_NotFound", 6, "Not Found")
NVMLError_DriverNotLoaded = _error("NVMLError_DriverNotLoaded", 9, "Driver Not Loaded")
NVMLError_LibraryNotFound = _error("NVMLError_LibraryNotFound", 12, "NVML Shared Library Not Found")
NVMLError_FunctionNotFound = _error("NVMLError_FunctionNotFound", 13, "Function Not Found")
NVMLError_GpuIsLost = _error("NVMLError_GpuIsLost", 15, "GPU is lost")
NVMLError_LibRmVersionMismatch = _error("NVMLError_LibRmVersionMismatch", 18,
                                        "RM has detected an NVML/RM version mismatch.")


@dataclass
class FakeProcess:
    pid: int
    #: None: NVML could not say (MIG without privileges, WDDM)
    used_bytes: int | None
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None


@dataclass
class FakeMig:
    gpu_instance_id: int
    profile: str = "3g.40gb"
    uuid: str = "MIG-00000000-0000-0000-0000-000000000000"
    used_bytes: int = 12 * MIB
    total_bytes: int = 40 * GIB
    reserved_bytes: int = 0
    compute_instance_id: int = 0
    processes: list[FakeProcess] = field(default_factory=list)
    #: the per-slice process call is refused (NoPermission), as for unprivileged callers
    processes_refused: bool = False


@dataclass
class FakeGpu:
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    used_bytes: int = 0
    total_bytes: int = 80 * GIB
    reserved_bytes: int = 512 * MIB
    util_gpu_pct: int | None = 0
    util_mem_pct: int | None = 0
    processes: list[FakeProcess] = field(default_factory=list)
    #: None: MIG not supported; a list (maybe empty): MIG enabled with these slices in slot order
    mig: list[FakeMig | None] | None = None
    max_mig_devices: int = 7
    #: False: an older driver without nvmlDeviceGetMemoryInfo_v2
    memory_v2: bool = True
    #: set: nvmlDeviceGetHandleByIndex raises it (a GPU this container may not open)
    handle_error: type[NVMLError] | None = None


@dataclass(frozen=True)
class _Handle:
    gpu: int
    slot: int | None = None


class FakeNvml:
    """The pynvml API over a list of FakeGpu. Counts init/shutdown/count calls for tests."""

    NVMLError = NVMLError
    NVMLError_Uninitialized = NVMLError_Uninitialized
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_NotFound = NVMLError_NotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_FunctionNotFound = NVMLError_FunctionNotFound
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_LibRmVersionMismatch = NVMLError_LibRmVersionMismatch
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE

    def __init__(self, gpus: list[FakeGpu], *, init_error: type[NVMLError] | None = None,
                 driver_version: str = "550.90.07", cuda_version: int = 12040,
                 process_names: dict[int, str] | None = None, memory_v2_constant: bool = True):
        self.gpus = gpus
        self.init_error = init_error
        self.driver_version = driver_version
        self.cuda_version = cuda_version
        #: pid -> name; other pids raise NotFound (outside this PID namespace)
        self.process_names = dict(process_names or {})
        self.nvmlMemory_v2 = nvmlMemory_v2 if memory_v2_constant else None
        self.init_calls = 0
        self.shutdown_calls = 0
        self.count_calls = 0
        self._initialised = False

    # ------------------------------------------------------------------ lifecycle

    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error()
        self._initialised = True

    def nvmlShutdown(self) -> None:
        self._check()
        self.shutdown_calls += 1
        self._initialised = False

    def _check(self) -> None:
        if not self._initialised:
            raise NVMLError_Uninitialized()

    # ----------------------------------------------------------------------- system

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check()
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._check()
        return self.cuda_version

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._check()
        if pid not in self.process_names:
            raise NVMLError_NotFound()
        return self.process_names[pid]

    # ---------------------------------------------------------------------- devices

    def nvmlDeviceGetCount(self) -> int:
        self._check()
        self.count_calls += 1
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._check()
        if not 0 <= index < len(self.gpus):
            raise NVMLError_NotFound()
        if self.gpus[index].handle_error is not None:
            raise self.gpus[index].handle_error()
        return _Handle(index)

    def _gpu(self, h: _Handle) -> FakeGpu:
        self._check()
        return self.gpus[h.gpu]

    def _mig(self, h: _Handle) -> FakeMig:
        mig = (self._gpu(h).mig or [])[h.slot or 0]
        assert mig is not None
        return mig

    def nvmlDeviceGetName(self, h: _Handle) -> str:
        gpu = self._gpu(h)
        return gpu.name if h.slot is None else f"{gpu.name} MIG {self._mig(h).profile}"

    def nvmlDeviceGetUUID(self, h: _Handle) -> str:
        return self._gpu(h).uuid if h.slot is None else self._mig(h).uuid

    def nvmlDeviceGetMemoryInfo(self, h: _Handle, version: int | None = None) -> SimpleNamespace:
        gpu = self._gpu(h)
        part = gpu if h.slot is None else self._mig(h)
        free = part.total_bytes - part.used_bytes - part.reserved_bytes
        if not version:
            # v1 counts the driver's reserve as used
            return SimpleNamespace(total=part.total_bytes, free=free, used=part.used_bytes + part.reserved_bytes)
        if version != nvmlMemory_v2:
            raise NVMLError(25)
        if not gpu.memory_v2:
            raise NVMLError_FunctionNotFound()
        return SimpleNamespace(version=version, total=part.total_bytes, reserved=part.reserved_bytes,
                               free=free, used=part.used_bytes)

    def nvmlDeviceGetUtilizationRates(self, h: _Handle) -> SimpleNamespace:
        gpu = self._gpu(h)
        if h.slot is not None or gpu.util_gpu_pct is None:
            raise NVMLError_NotSupported()
        return SimpleNamespace(gpu=gpu.util_gpu_pct, memory=gpu.util_mem_pct)

    def nvmlDeviceGetComputeRunningProcesses(self, h: _Handle) -> list[SimpleNamespace]:
        gpu = self._gpu(h)
        if h.slot is None:
            procs = list(gpu.processes)
            for mig in gpu.mig or []:
                if mig is not None:
                    procs += [FakeProcess(p.pid, p.used_bytes, mig.gpu_instance_id, mig.compute_instance_id)
                              for p in mig.processes]
        else:
            mig = self._mig(h)
            if mig.processes_refused:
                raise NVMLError_NoPermission()
            procs = list(mig.processes)
        return [SimpleNamespace(pid=p.pid, usedGpuMemory=p.used_bytes, gpuInstanceId=p.gpu_instance_id,
                                computeInstanceId=p.compute_instance_id) for p in procs]

    # -------------------------------------------------------------------------- MIG

    def nvmlDeviceGetMigMode(self, h: _Handle) -> list[int]:
        gpu = self._gpu(h)
        if gpu.mig is None:
            raise NVMLError_NotSupported()
        return [NVML_DEVICE_MIG_ENABLE, NVML_DEVICE_MIG_ENABLE]

    def nvmlDeviceGetMaxMigDeviceCount(self, h: _Handle) -> int:
        gpu = self._gpu(h)
        if gpu.mig is None:
            raise NVMLError_NotSupported()
        return gpu.max_mig_devices

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: _Handle, index: int) -> _Handle:
        gpu = self._gpu(h)
        slots = gpu.mig or []
        if index >= gpu.max_mig_devices:
            raise NVMLError(2)  # Invalid Argument
        if index >= len(slots) or slots[index] is None:
            raise NVMLError_NotFound()
        return _Handle(h.gpu, index)

    def nvmlDeviceGetGpuInstanceId(self, h: _Handle) -> int:
        if h.slot is None:
            raise NVMLError_NotSupported()
        return self._mig(h).gpu_instance_id

    def nvmlDeviceGetComputeInstanceId(self, h: _Handle) -> int:
        if h.slot is None:
            raise NVMLError_NotSupported()
        return self._mig(h).compute_instance_id
