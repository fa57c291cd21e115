"""GPU devices from metrics text: DCGM exporter series, or the runbook's generic byte gauges.

DCGM reports framebuffer memory in MiB; one device per `gpu` label, or per MIG instance
(`GPU_I_ID`) when the GPU is partitioned, since the `gpu` index then repeats.

>>> from collectors.parsers.metrics_samples import read_samples
>>> devices_from_samples(read_samples('DCGM_FI_DEV_FB_USED{gpu="0"} 1024\\nDCGM_FI_DEV_FB_FREE{gpu="0"} 1024\\n'))[0].total_bytes
2147483648
"""

from __future__ import annotations

from collectors.parsers.metrics_samples import Labels, Samples, Series, natural_key
from runbooks.model.evidence import GpuDevice
from runbooks.model.units import MIB

#: device field -> metric names, current DCGM name first, then the 1.x compatibility name (-o)
_DCGM_FIELDS: dict[str, tuple[str, ...]] = {
    "used_mib": ("DCGM_FI_DEV_FB_USED", "dcgm_fb_used"),
    "free_mib": ("DCGM_FI_DEV_FB_FREE", "dcgm_fb_free"),
    "reserved_mib": ("DCGM_FI_DEV_FB_RESERVED",),
    "util_gpu_pct": ("DCGM_FI_DEV_GPU_UTIL", "dcgm_gpu_utilization"),
    "util_mem_bandwidth_pct": ("DCGM_FI_DEV_MEM_COPY_UTIL", "dcgm_mem_copy_utilization"),
}

#: (used, total) byte gauges: the runbook's own names, and the byte names its alert rule uses
_BYTE_GAUGES = (
    ("gpu_memory_used_bytes", "gpu_memory_total_bytes"),
    ("dcgm_fb_used_bytes", "dcgm_fb_total_bytes"),
)

_Key = tuple[str | None, str | None, str | None, str | None]


def devices_from_samples(samples: Samples) -> tuple[GpuDevice, ...]:
    """DCGM devices when any DCGM memory or utilisation series is present, else byte gauges."""
    devices = _dcgm_devices(samples)
    return devices if devices else _byte_gauge_devices(samples)


def _dcgm_devices(samples: Samples) -> tuple[GpuDevice, ...]:
    labels_of: dict[_Key, Labels] = {}
    values: dict[_Key, dict[str, float]] = {}
    for field, names in _DCGM_FIELDS.items():
        for labels, value in samples.first(*names):
            key = _dcgm_key(labels)
            labels_of.setdefault(key, labels)
            values.setdefault(key, {}).setdefault(field, value)
    devices = [_dcgm_device(labels_of[key], values[key], n) for n, key in enumerate(labels_of)]
    return tuple(sorted(devices, key=_order))


def _dcgm_key(labels: Labels) -> _Key:
    return (_host(labels), labels.get("gpu"), labels.get("UUID") or labels.get("uuid"),
            labels.get("GPU_I_ID"))


def _dcgm_device(labels: Labels, values: dict[str, float], position: int) -> GpuDevice:
    gpu = labels.get("gpu") or labels.get("UUID") or labels.get("uuid") or str(position)
    instance = labels.get("GPU_I_ID")
    used, free, reserved = (values.get(f) for f in ("used_mib", "free_mib", "reserved_mib"))
    total = None
    if used is not None and free is not None:
        total = used + free + (reserved or 0.0)
    return GpuDevice(
        index=f"{gpu}:{instance}" if instance is not None else gpu,
        name=labels.get("modelName"),
        uuid=labels.get("UUID") or labels.get("uuid"),
        mig_profile=labels.get("GPU_I_PROFILE") if instance is not None else None,
        used_bytes=_bytes(used, MIB),
        total_bytes=_bytes(total, MIB),
        reserved_bytes=_bytes(reserved, MIB),
        util_gpu_pct=values.get("util_gpu_pct"),
        util_mem_bandwidth_pct=values.get("util_mem_bandwidth_pct"),
        host=_host(labels),
        pod=_pod_label(labels, "pod"),
        namespace=_pod_label(labels, "namespace"),
    )


def _byte_gauge_devices(samples: Samples) -> tuple[GpuDevice, ...]:
    for used_name, total_name in _BYTE_GAUGES:
        used = samples.series(used_name)
        if not used:
            continue
        totals = {_identity(labels): value for labels, value in samples.series(total_name)}
        return tuple(_byte_device(series, totals, n) for n, series in enumerate(used))
    return ()


def _byte_device(series: Series, totals: dict[tuple[tuple[str, str], ...], float],
                 position: int) -> GpuDevice:
    labels, used = series
    index = labels.get("gpu") or labels.get("index") or labels.get("device") or str(position)
    return GpuDevice(
        index=index,
        name=labels.get("modelName") or labels.get("name"),
        uuid=labels.get("UUID") or labels.get("uuid"),
        used_bytes=_bytes(used, 1),
        total_bytes=_bytes(totals.get(_identity(labels)), 1),
        host=_host(labels),
        pod=_pod_label(labels, "pod"),
        namespace=_pod_label(labels, "namespace"),
    )


def _identity(labels: Labels) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(labels.items()))


def _host(labels: Labels) -> str | None:
    # DCGM exporter releases say `Hostname`; its main branch renamed it to `hostname`.
    return labels.get("Hostname") or labels.get("hostname")


def _pod_label(labels: Labels, name: str) -> str | None:
    # Scraped without honorLabels, the exporter's own pod/namespace labels are renamed
    # exported_*; the plain label then names the exporter pod, not the workload.
    return labels.get(f"exported_{name}") or labels.get(name)


def _bytes(value: float | None, unit: int) -> int | None:
    if value is None:
        return None
    try:
        return round(value * unit)
    except (OverflowError, ValueError):
        return None


def _order(device: GpuDevice) -> tuple[str, tuple[tuple[int, float, str], ...]]:
    return (device.host or "", tuple(natural_key(part) for part in device.index.split(":")))
