"""parse_nvidia_smi: the table, --query-gpu CSV and dmon, paired with the devices they describe."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.parsers.nvidia_smi import parse_nvidia_smi
from runbooks.model.evidence import GpuProcess, GpuSnapshot
from runbooks.model.serde import from_jsonable, to_jsonable
from runbooks.model.units import MIB
from tests.support import words

DATA = Path(__file__).parent / "data" / "nvidia_smi"


def _load(name: str) -> GpuSnapshot:
    return parse_nvidia_smi((DATA / name).read_text())


# Each recorded capture with (index, used MiB, total MiB, GPU util %, bandwidth util %) per device.
EXPECTED = {
    "a100_80gb_single.txt": [("0", 73341, 81920, 38.0, None)],
    "h100_8x.txt": [(str(i), used, 81559, util, None) for i, (used, util) in enumerate(zip(
        [75433, 75401, 75401, 75401, 75401, 75401, 75401, 75398], [92, 91, 93, 90, 92, 91, 92, 89], strict=True))],
    "a100_mig.txt": [("0:2", 35210, 40192, None, None), ("0:9", 9101, 9728, None, None),
                     ("0:10", 2210, 9728, None, None)],
    "query_units_header.csv": [("0", 75433, 81559, 92.0, None), ("1", 75401, 81559, 91.0, None),
                               ("2", 4, 81559, 0.0, None), ("3", 4, 81559, 0.0, None)],
    "query_nounits_noheader.csv": [("0", 71234, 81559, 87.0, 41.0), ("1", 71230, 81559, 85.0, 40.0)],
    "query_mig_not_supported.csv": [("0", 46559, 46559 + 34836, None, None), ("1", 4, 4 + 80987, None, None)],
    "dmon_mu.txt": [("0", 73341, None, 93.0, 47.0), ("1", 71002, None, None, None)],
    "dmon_mu_old_driver.txt": [("0", 15840, None, 98.0, 61.0)],
}


def _mib(value: int | None) -> int | None:
    return None if value is None else value * MIB


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_capture_gives_expected_devices(name):
    snapshot = _load(name)
    assert snapshot.source == "nvidia-smi.txt"
    got = [(d.index, d.used_bytes, d.total_bytes, d.util_gpu_pct, d.util_mem_bandwidth_pct) for d in snapshot.devices]
    want = [(i, _mib(used), _mib(total), util, bw) for i, used, total, util, bw in EXPECTED[name]]
    assert got == want


def test_table_reads_driver_cuda_name_and_processes():
    snapshot = _load("a100_80gb_single.txt")
    assert (snapshot.driver_version, snapshot.cuda_version) == ("535.161.08", "12.2")
    (gpu,) = snapshot.devices
    assert gpu.name == "NVIDIA A100-SXM4-80GB"
    assert gpu.used_ratio == pytest.approx(73341 / 81920)
    assert gpu.processes == (GpuProcess(pid=2718403, name="python3", used_bytes=73328 * MIB),)


def test_eight_gpu_table_gives_one_process_per_gpu():
    snapshot = _load("h100_8x.txt")
    assert (snapshot.driver_version, snapshot.cuda_version) == ("550.90.07", "12.4")
    assert {d.name for d in snapshot.devices} == {"NVIDIA H100 80GB HBM3"}
    assert [len(d.processes) for d in snapshot.devices] == [1] * 8
    assert snapshot.devices[0].processes[0].name == "/usr/bin/python3"
    assert snapshot.devices[7].processes[0] == GpuProcess(pid=1184269, name="ray::RayWorkerWrapper",
                                                           used_bytes=75385 * MIB)


def test_mig_table_gives_slices_not_the_parent_and_processes_by_instance():
    snapshot = _load("a100_mig.txt")
    assert [d.index for d in snapshot.devices] == ["0:2", "0:9", "0:10"]
    assert {d.name for d in snapshot.devices} == {"NVIDIA A100-SXM4-80GB"}
    assert [[p.pid for p in d.processes] for d in snapshot.devices] == [[3891245], [3902217], [3910050]]
    # the table alone does not print profile names
    assert {d.mig_profile for d in snapshot.devices} == {None}


def test_mig_profiles_and_uuids_come_from_a_gpu_listing_beside_the_table():
    snapshot = _load("a100_mig_with_list.txt")
    assert [(d.index, d.mig_profile) for d in snapshot.devices] == [
        ("0:2", "3g.40gb"), ("0:9", "1g.10gb"), ("0:10", "1g.10gb")]
    assert snapshot.devices[0].uuid == "MIG-4f5e6d7c-8b9a-5c0d-9e1f-2a3b4c5d6e7f"
    assert snapshot.devices[0].total_bytes == 40192 * MIB


def test_mig_enabled_without_instances_keeps_the_gpu():
    lines = (DATA / "a100_mig.txt").read_text().split("\n")
    start = next(i for i, line in enumerate(lines) if line.startswith("|==================+"))
    lines[start + 1:start + 10] = [
        "|  No MIG devices found                                                                 |",
        "+---------------------------------------------------------------------------------------+"]
    cut = next(i for i, line in enumerate(lines) if "Processes:" in line)
    (gpu,) = parse_nvidia_smi("\n".join(lines[:cut])).devices
    assert (gpu.index, gpu.used_bytes, gpu.total_bytes, gpu.util_gpu_pct) == ("0", 46559 * MIB, 81920 * MIB, None)


def test_query_csv_reads_reserved_and_not_available_values():
    devices = _load("query_units_header.csv").devices
    assert [d.reserved_bytes for d in devices] == [529 * MIB, 529 * MIB, 529 * MIB, None]
    assert devices[0].name == "NVIDIA H100 80GB HBM3"
    mig = _load("query_mig_not_supported.csv").devices
    assert mig[1].uuid == "GPU-8f7e6d5c-4b3a-4291-8e7f-6a5b4c3d2e1f"


def test_query_csv_with_units_and_no_header_uses_the_runbook_column_order():
    snapshot = parse_nvidia_smi("0, 87 %, 41 %, 71234 MiB, 81559 MiB\n")
    (gpu,) = snapshot.devices
    assert (gpu.util_gpu_pct, gpu.util_mem_bandwidth_pct, gpu.used_bytes, gpu.total_bytes) == (
        87.0, 41.0, 71234 * MIB, 81559 * MIB)


def test_query_csv_looping_capture_keeps_the_last_row_per_gpu():
    text = ("index, memory.used [MiB], memory.total [MiB]\n0, 100 MiB, 81559 MiB\n1, 5 MiB, 81559 MiB\n"
            "0, 70000 MiB, 81559 MiB\n")
    assert [(d.index, d.used_bytes) for d in parse_nvidia_smi(text).devices] == [("0", 70000 * MIB), ("1", 5 * MIB)]


def test_crlf_line_endings_are_accepted():
    text = (DATA / "a100_80gb_single.txt").read_text().replace("\n", "\r\n")
    assert parse_nvidia_smi(text) == _load("a100_80gb_single.txt")


def test_byte_order_mark_before_a_csv_header_is_ignored():
    text = "\ufeff" + (DATA / "query_units_header.csv").read_text()
    assert parse_nvidia_smi(text) == _load("query_units_header.csv")


def test_old_process_table_without_instance_columns():
    table = "\n".join([
        "+-----------------------------------------------------------------------------+",
        "| NVIDIA-SMI 418.87.01    Driver Version: 418.87.01    CUDA Version: 10.1     |",
        "|-------------------------------+----------------------+----------------------+",
        "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |",
        "| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |",
        "|===============================+======================+======================|",
        "|   0  Tesla V100-SXM2...  On   | 00000000:00:1E.0 Off |                    0 |",
        "| N/A   45C    P0   181W / 300W |  15417MiB / 16130MiB |     97%      Default |",
        "+-------------------------------+----------------------+----------------------+",
        "",
        "+-----------------------------------------------------------------------------+",
        "| Processes:                                                       GPU Memory |",
        "|  GPU       PID   Type   Process name                             Usage      |",
        "|=============================================================================|",
        "|    0     31337      C   python                                     15406MiB |",
        "|    0     31400      G   Xorg                                           N/A  |",
        "+-----------------------------------------------------------------------------+",
    ])
    (gpu,) = parse_nvidia_smi(table).devices
    assert (gpu.name, gpu.used_bytes, gpu.total_bytes, gpu.util_gpu_pct) == (
        "Tesla V100-SXM2...", 15417 * MIB, 16130 * MIB, 97.0)
    assert gpu.processes == (GpuProcess(pid=31337, name="python", used_bytes=15406 * MIB),
                             GpuProcess(pid=31400, name="Xorg", used_bytes=None))


def test_dmon_with_date_and_time_columns():
    text = ("#Date       Time        gpu     fb   bar1     sm    mem    enc    dec\n"
            "#YYYYMMDD   HH:MM:SS    Idx     MB     MB      %      %      %      %\n"
            " 20260309   20:17:04      0  73341      4     93     47      0      0\n")
    (gpu,) = parse_nvidia_smi(text).devices
    assert (gpu.index, gpu.used_bytes, gpu.util_gpu_pct) == ("0", 73341 * MIB, 93.0)


def test_no_devices_found_is_an_empty_snapshot():
    assert parse_nvidia_smi("No devices were found\n").devices == ()


def test_source_names_the_file_in_snapshot_and_errors():
    assert parse_nvidia_smi("0, 1, 2, 3, 4\n", source="node-7/nvidia-smi.txt").source == "node-7/nvidia-smi.txt"
    with pytest.raises(ParseError) as caught:
        parse_nvidia_smi("hello\n", source="node-7/nvidia-smi.txt")
    assert caught.value.source == "node-7/nvidia-smi.txt"


# Text that is not nvidia-smi output or is malformed, with the line ParseError must name (None: no line).
INVALID = [
    ("", None, "not recognised"),
    ("hello world\n", None, "not recognised"),
    ("0, 87, 41\n", 1, "column order unknown"),
    ("index, memory.used [MiB]\n0, 10 MiB\n1, 10 MiB, 3\n", 3, "expected 2 columns"),
    ("index, memory.used [MiB]\n0, lots\n", 2, "bad value"),
    ("index, memory.used [MiB]\n0, 10 furlongs\n", 2, "unknown memory unit"),
    ("fruit, colour\napple, red\n", 1, "names no GPU field"),
    ("# gpu fb sm mem\n# Idx MB % %\n 0 100 5\n", 3, "dmon row"),
    ("# gpu fb sm mem\n x 100 5 5\n", 2, "bad gpu index"),
    ("# gpu fb sm mem\n 0 lots 5 5\n", 2, "bad value"),
    ("| GPU  Name | Memory-Usage | GPU-Util |\n|====|\n| oops | 1MiB / 2MiB | 0% |\n", 3, "unexpected GPU row"),
    ("| MIG devices: |\n| GPU GI CI MIG | Memory-Usage |\n|====|\n|  0  2  x  |  1MiB / 2MiB |\n", 4,
     "unexpected MIG row"),
    ("| Memory-Usage |\n", None, "no GPU rows"),
    ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.\n", 1, "nvidia-smi failed"),
]


def test_invalid_text_raises_parse_error_naming_the_line():
    for text, line, fragment in INVALID:
        with pytest.raises(ParseError) as caught:
            parse_nvidia_smi(text)
        assert caught.value.line == line, text
        assert fragment in words.message(caught.value), text


def test_snapshot_round_trips_through_json():
    snapshot = _load("a100_mig_with_list.txt")
    assert from_jsonable(GpuSnapshot, to_jsonable(snapshot)) == snapshot


_TABLE_LINES = (DATA / "a100_mig.txt").read_text().split("\n") + (DATA / "h100_8x.txt").read_text().split("\n")
_TABLE_LINE = st.sampled_from([line for line in _TABLE_LINES if line])
_MUTATED_LINE = st.builds(lambda line, cut, junk: line[:cut] + junk + line[cut:], _TABLE_LINE,
                          st.integers(0, 100), st.text(max_size=8))


@settings(max_examples=200, deadline=None)
@given(st.one_of(
    st.text(),
    st.lists(st.one_of(_TABLE_LINE, _MUTATED_LINE, st.text(max_size=40)), max_size=30).map("\n".join),
    st.lists(st.lists(st.sampled_from(["0", "87 %", "[N/A]", "71234 MiB", "x", "", "-1.5", "1e999"]),
                      min_size=1, max_size=6).map(", ".join), max_size=5).map("\n".join),
))
def test_any_text_gives_a_snapshot_or_parse_error(text):
    try:
        snapshot = parse_nvidia_smi(text)
    except ParseError:
        return
    assert isinstance(snapshot, GpuSnapshot)
    assert all(isinstance(d.index, str) for d in snapshot.devices)
