"""`gpumem snapshot`: exact text/CSV/JSON for a fixed fake NVML, sampling, Ctrl-C, no driver."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from bot.cli.snapshot import Io, snapshot
from bot.grammar.commands import parse_argv
from bot.main import main
from collectors.nvml.reader import parse_snapshot_json
from runbooks.model.units import MIB
from tests.support import fake_nvml
from tests.support.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

START = datetime(2026, 7, 14, 11, 2, 9, tzinfo=UTC)


class Clock:
    """Wall time that moves only when someone sleeps (or a test moves it)."""

    def __init__(self):
        self.t = START
        self.sleeps: list[float] = []

    def now(self) -> datetime:
        return self.t

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.t += timedelta(seconds=seconds)


def node_fake() -> FakeNvml:
    return FakeNvml([
        FakeGpu(name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", used_bytes=71234 * MIB, total_bytes=81559 * MIB,
                reserved_bytes=325 * MIB, util_gpu_pct=87, util_mem_pct=41,
                processes=[FakeProcess(4242, 70000 * MIB), FakeProcess(4343, None)]),
        FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-bbbb", mig=[
            FakeMig(2, "3g.40gb", "MIG-1111", used_bytes=35210 * MIB, total_bytes=40192 * MIB,
                    processes=[FakeProcess(3891245, 35184 * MIB)])]),
    ], process_names={4242: "python3"})


def take(argv: list[str], lang: str = "en", nvml: FakeNvml | None = None, clock: Clock | None = None):
    clock = clock or Clock()
    out, err = io.StringIO(), io.StringIO()
    args = parse_argv(["snapshot", *argv])
    rc = snapshot(args, lang, Io(nvml=nvml or node_fake(), now=clock.now, sleep=clock.sleep,
                                 host=lambda: "gpu-node-1", out=out, err=err))
    return rc, out.getvalue(), err.getvalue()


TEXT_EN = """\
2026-07-14 11:02:09 UTC · driver 550.90.07 · CUDA 12.4 · host gpu-node-1
GPU  Name                   MIG      Used MiB  Total MiB  Reserved MiB  Used %  Util %  Mem BW %  Procs
0    NVIDIA H100 80GB HBM3  -           71234      81559           325    87.3      87        41      2
    pid 4242  python3  70000 MiB
    pid 4343  name not reported  memory not reported
1:2  NVIDIA A100-SXM4-80GB  3g.40gb     35210      40192             0    87.6       -         -      1
    pid 3891245  name not reported  35184 MiB
"""

TEXT_ZH_HEAD = """\
2026-07-14 11:02:09 UTC · 驱动 550.90.07 · CUDA 12.4 · 主机 gpu-node-1
GPU  型号                   MIG      已用 MiB  总量 MiB  预留 MiB  已用 %  利用率 %  显存带宽 %  进程数
0    NVIDIA H100 80GB HBM3  -           71234     81559       325    87.3        87          41       2
"""

CSV_TWO_SAMPLES = """\
timestamp,host,gpu,uuid,name,mig_profile,used_mib,total_mib,reserved_mib,used_pct,util_gpu_pct,util_mem_bandwidth_pct,process_count,process_used_mib
2026-07-14T11:02:09+00:00,gpu-node-1,0,GPU-aaaa,NVIDIA H100 80GB HBM3,,71234,81559,325,87.3,87,41,2,4242=70000;4343=
2026-07-14T11:02:09+00:00,gpu-node-1,1:2,MIG-1111,NVIDIA A100-SXM4-80GB,3g.40gb,35210,40192,0,87.6,,,1,3891245=35184
2026-07-14T11:02:11+00:00,gpu-node-1,0,GPU-aaaa,NVIDIA H100 80GB HBM3,,71234,81559,325,87.3,87,41,2,4242=70000;4343=
2026-07-14T11:02:11+00:00,gpu-node-1,1:2,MIG-1111,NVIDIA A100-SXM4-80GB,3g.40gb,35210,40192,0,87.6,,,1,3891245=35184
"""

SAMPLE_KEYS = ["schema_version", "source", "devices", "taken_at", "driver_version", "cuda_version"]
DEVICE_KEYS = ["index", "name", "uuid", "mig_profile", "used_bytes", "total_bytes", "reserved_bytes", "util_gpu_pct",
               "util_mem_bandwidth_pct", "host", "pod", "namespace", "processes"]


def test_text_table_is_exact_for_a_fixed_node():
    rc, out, err = take([])
    assert (rc, err) == (0, "")
    assert out == TEXT_EN


def test_text_table_in_chinese_keeps_columns_aligned_by_display_width():
    rc, out, _ = take(["--lang", "zh"], lang="zh")
    assert rc == 0
    assert out.startswith(TEXT_ZH_HEAD)
    assert "    进程 4343  名称未上报  显存未上报\n" in out  # what the driver did not say, said in words


def test_csv_has_units_in_the_header_and_one_row_per_device_per_sample():
    rc, out, _ = take(["--count", "2", "--interval", "2", "--format", "csv"])
    assert rc == 0
    assert out == CSV_TWO_SAMPLES


def test_json_is_a_list_of_samples_with_the_documented_keys():
    rc, out, _ = take(["--count", "2", "--format", "json"])
    doc = json.loads(out)
    assert rc == 0 and len(doc) == 2
    assert list(doc[0]) == SAMPLE_KEYS
    assert list(doc[0]["devices"][0]) == DEVICE_KEYS
    assert list(doc[0]["devices"][0]["processes"][0]) == ["pid", "name", "used_bytes"]
    first = doc[0]["devices"]
    assert [d["index"] for d in first] == ["0", "1:2"]
    assert first[0]["used_bytes"] == 71234 * MIB and first[0]["reserved_bytes"] == 325 * MIB
    assert first[0]["processes"][1] == {"pid": 4343, "name": None, "used_bytes": None}
    assert first[1]["mig_profile"] == "3g.40gb" and first[1]["util_gpu_pct"] is None
    assert [s["taken_at"] for s in doc] == ["2026-07-14T11:02:09+00:00", "2026-07-14T11:02:11+00:00"]
    assert {d["host"] for s in doc for d in s["devices"]} == {"gpu-node-1"}


def test_json_output_loads_back_as_evidence():
    _, out, _ = take(["--count", "2", "--format", "json"])
    samples = parse_snapshot_json(out, source="snapshot.json")
    assert [s.devices[1].index for s in samples] == ["1:2", "1:2"]
    assert samples[0].devices[0].processes[0].name == "python3"


def test_json_flag_is_the_same_as_format_json():
    assert take(["--json"])[1] == take(["--format", "json"])[1]


def test_samples_are_spaced_by_the_interval_minus_the_time_a_reading_took():
    clock = Clock()
    nvml = node_fake()
    count = nvml.nvmlDeviceGetCount

    def slow_count():  # each reading takes 0.25 s of wall time
        clock.t += timedelta(seconds=0.25)
        return count()

    nvml.nvmlDeviceGetCount = slow_count
    rc, out, _ = take(["--count", "3", "--interval", "1", "--format", "csv"], nvml=nvml, clock=clock)
    assert rc == 0
    assert clock.sleeps == [0.75, 0.75]
    assert out.count("\n") == 1 + 3 * 2
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_ctrl_c_mid_sampling_keeps_what_was_printed_as_valid_json():
    clock = Clock()
    calls = []

    def sleep(seconds: float) -> None:
        calls.append(seconds)
        if len(calls) == 2:
            raise KeyboardInterrupt
        clock.sleep(seconds)

    nvml = node_fake()
    out, err = io.StringIO(), io.StringIO()
    args = parse_argv(["snapshot", "--count", "10", "--format", "json"])
    rc = snapshot(args, "en", Io(nvml=nvml, now=clock.now, sleep=sleep, host=lambda: "n", out=out, err=err))
    assert rc == 0
    assert len(json.loads(out.getvalue())) == 2
    assert err.getvalue() == "Stopped after 2 samples.\n"
    assert nvml.shutdown_calls == 1


def test_ctrl_c_before_the_first_sample_exits_130_with_nothing_on_stdout():
    nvml = node_fake()

    def interrupted():
        raise KeyboardInterrupt

    nvml.nvmlDeviceGetCount = interrupted
    rc, out, err = take(["--format", "json"], nvml=nvml)
    assert (rc, out) == (130, "")
    assert "0 sample" in err


@pytest.mark.parametrize(("lang", "text"), [
    ("en", "No NVIDIA driver or GPU on this machine (libnvidia-ml.so not found)."),
    ("zh", "本机没有 NVIDIA 驱动或 GPU（找不到 libnvidia-ml.so）。"),
])
def test_no_driver_says_so_on_stderr_in_the_chosen_language_and_exits_3(lang, text):
    nvml = FakeNvml([], init_error=fake_nvml.NVMLError_LibraryNotFound)
    rc, out, err = take(["--count", "5"], lang=lang, nvml=nvml)
    assert (rc, out) == (3, "")
    assert err.startswith(text)


def test_driver_not_loaded_is_worded_apart_from_no_library():
    rc, _, err = take([], nvml=FakeNvml([], init_error=fake_nvml.NVMLError_DriverNotLoaded))
    assert rc == 3
    assert err.startswith("The NVIDIA driver is installed but not loaded")


def test_unknown_init_failure_shows_the_library_words():
    rc, _, err = take([], nvml=FakeNvml([], init_error=fake_nvml.NVMLError_Uninitialized))
    assert rc == 3
    assert err == "NVML could not start on this machine. (Uninitialized)\n"


@pytest.mark.parametrize("argv", [["--count", "0"], ["--count", "x"], ["--interval", "-1"], ["--format", "xml"]])
def test_bad_sampling_arguments_are_usage_errors(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(["snapshot", *argv])
    assert e.value.code == 2


def test_snapshot_and_agent_are_registered_verbs(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "snapshot" in out and "agent" in out
