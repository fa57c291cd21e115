"""Which GPUs each launch in a log was given: `docker run --gpus`, CUDA_VISIBLE_DEVICES, a device.

A paste often holds more than one launch (two `docker run` for two models, the same command
twice with different ports), and the devices each one gets decide two things the flags alone
cannot: whether two engines were started on one card (a shared GPU), and how many GPUs an
engine could see while its tensor parallel size was left at 1.

Read per launch: `--gpus all`, `--gpus 2`, `--gpus device=0,1` and its quoted forms
(`--gpus '"device=0"'`, `--gpus='"device=1"'`), `-e`/`--env` `CUDA_VISIBLE_DEVICES=` or
`NVIDIA_VISIBLE_DEVICES=`, an environment prefix (`CUDA_VISIBLE_DEVICES=0,1 python -m ...`),
and a Python call's `device="cuda:7"`. Lines ending in `\\` are joined first; a launch cut
mid-line keeps what it shows.

>>> s = DeviceScanner()
>>> s.feed("docker run --gpus '\\"device=0\\"' vllm/vllm-openai:v0.8.5 --model m --port 8900")
>>> s.feed("CUDA_VISIBLE_DEVICES=0,1 vllm serve m")
>>> [(x.host_devices, x.visible_count) for x in s.result()]
[(('0',), 1), (('0', '1'), 2)]
"""

from __future__ import annotations

import re

from runbooks.model.evidence import LaunchDevices

EXAMPLE_CHARS = 200
MAX_LAUNCHES = 16
_MAX_CONTINUATION = 60

_LAUNCH = re.compile(
    r"\b(?:docker|podman)\s+run\b|\bvllm\s+serve\b|vllm\.entrypoints\.|sglang\.launch_server|\bsglang\s+serve\b"
    r"|text-generation-launcher|\bLLM\(|EngineArgs\(|\bCUDA_VISIBLE_DEVICES="
)
_GPUS = re.compile(r"--gpus(?:=|\s+)(['\"]{0,2})([^\s'\"]+)\1?")
_VISIBLE = re.compile(r"\b(CUDA_VISIBLE_DEVICES|NVIDIA_VISIBLE_DEVICES)=['\"]?([\w,\-]*)")
_DEVICE_ARG = re.compile(r"\bdevice\s*=\s*['\"]cuda:(\d{1,3})['\"]")
_DOCKER = re.compile(r"\b(?:docker|podman)\s+run\b")


def _ids(value: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in value.split(",") if x.strip())


def launch_devices(text: str, line: int | None = None) -> LaunchDevices | None:
    """The devices one launch's text names, or None when it names none."""
    host: tuple[str, ...] = ()
    visible: tuple[str, ...] = ()
    all_gpus = False
    count: int | None = None
    docker = bool(_DOCKER.search(text))
    m = _GPUS.search(text)
    if m:
        value = m.group(2).strip("'\"")
        if value == "all":
            all_gpus = True
        elif value.isdigit():
            count = int(value)
        elif value.startswith("device="):
            host = _ids(value[len("device="):])
    for name, value in _VISIBLE.findall(text):
        ids = _ids(value)
        if not ids:
            continue
        if name == "NVIDIA_VISIBLE_DEVICES":
            if value == "all":
                all_gpus = True
            else:
                host = host or ids
        else:
            visible = ids
    d = _DEVICE_ARG.search(text)
    if d and not visible:
        visible = (d.group(1),)
    if not docker and visible and not host:
        host = visible  # outside a container the visible ids are the host's
    if not (host or visible or all_gpus or count):
        return None
    n = len(visible) or len(host) or count
    return LaunchDevices(host_devices=host, visible_count=n, all_gpus=all_gpus and not visible, line=line,
                         example=" ".join(text.split())[:EXAMPLE_CHARS])


class DeviceScanner:
    """Feeds on raw log lines; `result()` lists the launches that named their GPUs."""

    def __init__(self) -> None:
        self._line = 0
        self._pending: list[str] | None = None
        self._start = 0
        self._out: list[LaunchDevices] = []

    def feed(self, line: str) -> None:
        self._line += 1
        if self._pending is not None:
            self._pending.append(line)
            if not line.rstrip().endswith("\\") or len(self._pending) > _MAX_CONTINUATION:
                self._take(" ".join(x.rstrip().rstrip("\\") for x in self._pending), self._start)
                self._pending = None
            return
        if "File \"" in line or not _LAUNCH.search(line):
            return
        if line.rstrip().endswith("\\"):
            self._pending, self._start = [line], self._line
        else:
            self._take(line, self._line)

    def _take(self, text: str, line: int) -> None:
        found = launch_devices(text, line)
        if found is not None and len(self._out) < MAX_LAUNCHES:
            self._out.append(found)

    def result(self) -> tuple[LaunchDevices, ...]:
        if self._pending is not None:
            self._take(" ".join(x.rstrip().rstrip("\\") for x in self._pending), self._start)
            self._pending = None
        return tuple(self._out)
