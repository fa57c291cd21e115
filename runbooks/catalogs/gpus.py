"""GPUs and their memory as CUDA reports it to a process (GiB), with aliases and MIG slices.

`total_gib` is `cudaMemGetInfo` total (what vLLM prints as total_gpu_memory), a little less
than nvidia-smi's figure (the driver keeps ~0.4-0.9 GiB). Figures seen in real start-up logs
(`shared calibration`) are used where there are any; the rest are the marketed size less
the usual driver reserve. MIG profiles map to the memory one slice reports.

>>> find_gpu("NVIDIA A100-SXM4-80GB").total_gib
79.15
>>> find_gpu("A100-80GB MIG 3g.40gb").total_gib
39.25
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field, replace


class UnknownGpu(ValueError):
    """No GPU of that name in the catalog; `nearest` holds the closest known names."""

    def __init__(self, name: str, nearest: tuple[str, ...] = ()):
        self.name = name
        self.nearest = nearest
        super().__init__(f"unknown GPU {name!r}" + (f"; nearest: {', '.join(nearest)}" if nearest else ""))


@dataclass(frozen=True)
class GpuSpec:
    """One GPU model (or one MIG slice of it)."""

    name: str
    total_gib: float
    compute_capability: tuple[int, int] | None = None
    supports_fp8: bool = False
    supports_bf16: bool = True
    #: MIG profile -> memory one slice reports (GiB)
    mig_profiles: dict[str, float] = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    #: GPUs of a node talk over NVLink/xGMI (SXM/OAM parts) rather than PCIe only
    nvlink: bool = False
    vendor: str = "nvidia"
    #: set on a MIG pseudo-GPU: the profile it stands for
    mig_profile: str | None = None


def _nv(name: str, total: float, cc: tuple[int, int], aliases: tuple[str, ...] = (), *,
        nvlink: bool = False, mig: dict[str, float] | None = None) -> GpuSpec:
    return GpuSpec(name=name, total_gib=total, compute_capability=cc, supports_fp8=cc >= (8, 9),
                   supports_bf16=cc >= (8, 0), mig_profiles=dict(mig or {}), aliases=aliases, nvlink=nvlink)


_MIG_A100_80 = {"1g.10gb": 9.5, "1g.20gb": 19.5, "2g.20gb": 19.5, "3g.40gb": 39.25, "4g.40gb": 39.25,
                "7g.80gb": 79.15}
_MIG_A100_40 = {"1g.5gb": 4.75, "1g.10gb": 9.62, "2g.10gb": 9.62, "3g.20gb": 19.5, "4g.20gb": 19.5,
                "7g.40gb": 39.39}
_MIG_H100_80 = {"1g.10gb": 9.75, "1g.20gb": 19.62, "2g.20gb": 19.62, "3g.40gb": 39.38, "4g.40gb": 39.38,
                "7g.80gb": 79.19}
_MIG_H200 = {"1g.18gb": 16.5, "1g.35gb": 32.62, "2g.35gb": 32.62, "3g.71gb": 69.5, "4g.71gb": 69.5,
             "7g.141gb": 139.8}
_MIG_H20 = {"1g.12gb": 11.38, "1g.24gb": 22.88, "2g.24gb": 22.88, "3g.48gb": 46.38, "4g.48gb": 46.38,
            "7g.96gb": 95.08}
_MIG_B200 = {"1g.23gb": 21.5, "1g.45gb": 43.5, "2g.45gb": 43.5, "3g.90gb": 88.0, "4g.90gb": 88.0,
             "7g.180gb": 178.35}
_MIG_A30 = {"1g.6gb": 5.62, "2g.12gb": 11.5, "4g.24gb": 23.5}

GPUS: tuple[GpuSpec, ...] = (
    _nv("A100-SXM4-80GB", 79.15, (8, 0), ("a100", "a100-80g", "a100 80gb", "a100-pcie-80gb", "a800",
                                            "a800-80gb", "a100 80g"), nvlink=True, mig=_MIG_A100_80),
    _nv("A100-SXM4-40GB", 39.39, (8, 0), ("a100-40g", "a100 40gb", "a100 40g"), nvlink=True, mig=_MIG_A100_40),
    _nv("A100-PCIE-40GB", 39.5, (8, 0), ("a100-pcie-40g",), mig=_MIG_A100_40),
    _nv("H100-SXM5-80GB", 79.19, (9, 0), ("h100", "h100-80g", "h100 80gb hbm3", "h100-sxm", "h800",
                                           "h100 80gb"), nvlink=True, mig=_MIG_H100_80),
    _nv("H100-PCIE-80GB", 79.19, (9, 0), ("h100-pcie", "h100 pcie"), mig=_MIG_H100_80),
    _nv("H100-NVL-94GB", 93.1, (9, 0), ("h100 nvl", "h100-nvl"), nvlink=True),
    _nv("H200", 139.8, (9, 0), ("h200-141g", "h200 141gb", "h200 nvl", "gh200"), nvlink=True, mig=_MIG_H200),
    _nv("H20", 95.08, (9, 0), ("h20-96g", "h20 96gb"), nvlink=True, mig=_MIG_H20),
    _nv("B200", 178.35, (10, 0), ("b200-180g", "b200 180gb", "hgx b200"), nvlink=True, mig=_MIG_B200),
    _nv("L40S", 44.42, (8, 9), ("l40s-48g", "l40s 48gb")),
    _nv("L40", 44.42, (8, 9), ("l40-48g",)),
    _nv("L4", 22.06, (8, 9), ("l4-24g", "l4 24gb")),
    _nv("A10G", 22.07, (8, 6), ("a10g-24g", "a10g 24gb")),
    _nv("A10", 22.07, (8, 6), ("a10-24g", "a10 24gb")),
    _nv("A30", 23.5, (8, 0), ("a30-24g",), nvlink=True, mig=_MIG_A30),
    _nv("A40", 44.55, (8, 6), ("a40-48g",)),
    _nv("T4", 14.56, (7, 5), ("tesla t4", "t4-16g", "t4 16gb")),
    _nv("V100-SXM2-16GB", 15.77, (7, 0), ("v100", "v100-16g", "tesla v100"), nvlink=True),
    _nv("V100-SXM2-32GB", 31.74, (7, 0), ("v100-32g", "v100 32gb"), nvlink=True),
    _nv("RTX 3090", 23.58, (8, 6), ("geforce rtx 3090", "3090", "rtx3090")),
    _nv("RTX 4090", 23.55, (8, 9), ("geforce rtx 4090", "4090", "rtx4090")),
    _nv("RTX 5090", 31.36, (12, 0), ("geforce rtx 5090", "5090", "rtx5090")),
    _nv("RTX A5000", 23.57, (8, 6), ("a5000",)),
    _nv("RTX A6000", 47.54, (8, 6), ("a6000", "rtx a6000 48gb")),
    _nv("RTX 6000 Ada", 47.5, (8, 9), ("rtx 6000 ada generation", "6000 ada")),
    GpuSpec(name="MI300X", total_gib=191.98, compute_capability=None, supports_fp8=True, supports_bf16=True,
            aliases=("amd instinct mi300x", "mi300x-192g", "mi300"), nvlink=True, vendor="amd"),
    GpuSpec(name="MI325X", total_gib=255.98, compute_capability=None, supports_fp8=True, supports_bf16=True,
            aliases=("amd instinct mi325x",), nvlink=True, vendor="amd"),
)

#: the product name nvidia-smi prints for each NVIDIA entry (`--query-gpu=gpu_name`), which
#: engines that key on it read (TGI 3's launcher: `engine_defaults.tgi_card`). Entries that
#: fold several parts into one (the A100 80GB covers its PCIe card, "NVIDIA A100 80GB PCIe")
#: give the first; a raw name in the evidence is used as it is.
SMI_NAMES: dict[str, str] = {
    "A100-SXM4-80GB": "NVIDIA A100-SXM4-80GB", "A100-SXM4-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-PCIE-40GB": "NVIDIA A100-PCIE-40GB", "H100-SXM5-80GB": "NVIDIA H100 80GB HBM3",
    "H100-PCIE-80GB": "NVIDIA H100 PCIe", "H100-NVL-94GB": "NVIDIA H100 NVL", "H200": "NVIDIA H200",
    "H20": "NVIDIA H20", "B200": "NVIDIA B200", "L40S": "NVIDIA L40S", "L40": "NVIDIA L40", "L4": "NVIDIA L4",
    "A10G": "NVIDIA A10G", "A10": "NVIDIA A10", "A30": "NVIDIA A30", "A40": "NVIDIA A40", "T4": "Tesla T4",
    "V100-SXM2-16GB": "Tesla V100-SXM2-16GB", "V100-SXM2-32GB": "Tesla V100-SXM2-32GB",
    "RTX 3090": "NVIDIA GeForce RTX 3090", "RTX 4090": "NVIDIA GeForce RTX 4090",
    "RTX 5090": "NVIDIA GeForce RTX 5090", "RTX A5000": "NVIDIA RTX A5000", "RTX A6000": "NVIDIA RTX A6000",
    "RTX 6000 Ada": "NVIDIA RTX 6000 Ada Generation",
}

_VENDOR_WORDS = ("nvidia", "geforce", "tesla", "amd", "instinct", "hgx")
_FORM_WORDS = ("sxm5", "sxm4", "sxm2", "sxm", "pcie", "hbm3e", "hbm3", "hbm2e", "hbm2")
_MIG_RE = re.compile(r"(?:^|[\s_\-])(?:mig[\s_\-]*)?(\d+g\.\d+gb)\b", re.IGNORECASE)


def _key(text: str) -> str:
    t = text.lower()
    for word in _VENDOR_WORDS:
        t = re.sub(rf"\b{word}\b", " ", t)
    t = re.sub(r"(\d+)\s*gb\b", r"\1g", t)
    return re.sub(r"[^a-z0-9]", "", t)


def _strip_form(key: str) -> str:
    for word in _FORM_WORDS:
        key = key.replace(word, "")
    return key


def _index() -> dict[str, GpuSpec]:
    index: dict[str, GpuSpec] = {}
    for gpu in GPUS:
        for label in (gpu.name, *gpu.aliases):
            index.setdefault(_key(label), gpu)
            index.setdefault(_strip_form(_key(label)), gpu)
    return index


_INDEX = _index()


def gpu_names() -> tuple[str, ...]:
    return tuple(g.name for g in GPUS)


def find_gpu(name: str) -> GpuSpec:
    """The catalog GPU for a product name, an nvidia-smi/DCGM name, or an alias.

    A MIG profile in the name ("A100-80GB MIG 3g.40gb", "nvidia.com/mig-3g.40gb" with a base
    GPU) returns a pseudo-GPU whose `total_gib` is the slice's memory.
    Raises UnknownGpu (a ValueError) with the nearest names.
    """
    text = (name or "").strip()
    profile = None
    match = _MIG_RE.search(text)
    if match:
        profile = match.group(1).lower()
        text = (text[: match.start()] + " " + text[match.end():]).replace("MIG", " ").replace("mig", " ")
    key = _key(text)
    gpu = _INDEX.get(key) or _INDEX.get(_strip_form(key))
    if gpu is None:
        nearest = tuple(difflib.get_close_matches(name, [g.name for g in GPUS], n=3, cutoff=0.3))
        raise UnknownGpu(name, nearest)
    if profile is None:
        return gpu
    if profile not in gpu.mig_profiles:
        raise UnknownGpu(name, tuple(f"{gpu.name} MIG {p}" for p in gpu.mig_profiles))
    return replace(gpu, name=f"{gpu.name} MIG {profile}", total_gib=gpu.mig_profiles[profile],
                   mig_profiles={}, aliases=(), nvlink=False, mig_profile=profile)


#: node labels whose value names the card a pod lands on (NVIDIA's GPU feature discovery, GKE)
GPU_MODEL_LABELS = ("nvidia.com/gpu.product", "cloud.google.com/gke-accelerator")


def pinned_gpu_of_labels(selector: dict[str, str]) -> GpuSpec | None:
    """The one card a pod's node selector pins (`GPU_MODEL_LABELS`); None where it names no card
    the catalog knows, or several different ones (the pod may land on any of them).

    >>> pinned_gpu_of_labels({"nvidia.com/gpu.product": "NVIDIA-A10G"}).name
    'A10G'
    >>> pinned_gpu_of_labels({"cloud.google.com/gke-accelerator": "nvidia-l4,nvidia-tesla-t4"}) is None
    True
    """
    found = set()
    for label in GPU_MODEL_LABELS:
        for value in (selector.get(label) or "").split(","):
            if not value.strip():
                continue
            try:
                found.add(find_gpu(value.strip()).name)
            except UnknownGpu:
                return None  # a value the catalog does not know could be where the pod lands
    return find_gpu(found.pop()) if len(found) == 1 else None


def weakest_gpu_of_labels(selector: dict[str, str]) -> GpuSpec | None:
    """The card a pod's node selector pins (`GPU_MODEL_LABELS`, several values joined by ","),
    the one of lowest compute capability where it allows several; None where no value is a
    card the catalog knows.

    >>> weakest_gpu_of_labels({"cloud.google.com/gke-accelerator": "nvidia-l4,nvidia-tesla-t4"}).name
    'T4'
    >>> weakest_gpu_of_labels({"kubernetes.io/os": "linux"}) is None
    True
    """
    found = []
    for label in GPU_MODEL_LABELS:
        for value in (selector.get(label) or "").split(","):
            try:
                found.append(find_gpu(value.strip()))
            except UnknownGpu:
                continue
    known = [g for g in found if g.compute_capability is not None]
    return min(known, key=lambda g: g.compute_capability) if known else (found[0] if found else None)
