"""NVML readings through a fake pynvml: whole GPUs, MIG slices, refusals, no driver."""

from __future__ import annotations

import inspect
import json
from datetime import UTC, datetime
from pathlib import Path

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.errors import ParseError
from collectors.nvml.reader import (
    NvmlSession,
    NvmlUnavailable,
    _unavailable,
    mig_name_parts,
    parse_snapshot_json,
    read_gpus,
)
from collectors.parsers.nvidia_smi import parse_nvidia_smi
from runbooks.model.evidence import GpuDevice, GpuSnapshot
from runbooks.model.serde import to_jsonable
from runbooks.model.units import GIB, MIB
from tests.support import fake_nvml
from tests.support.fake_nvml import FakeGpu, FakeMig, FakeNvml, FakeProcess

DATA = Path(__file__).resolve().parent / "data" / "nvidia_smi"
AT = datetime(2026, 7, 14, 11, 2, 9, tzinfo=UTC)


def _h100(**kw) -> FakeGpu:
    base = dict(name="NVIDIA H100 80GB HBM3", uuid="GPU-aaaa", used_bytes=70 * GIB, total_bytes=80 * GIB,
                reserved_bytes=512 * MIB, util_gpu_pct=87, util_mem_pct=41,
                processes=[FakeProcess(4242, 69 * GIB)])
    base.update(kw)
    return FakeGpu(**base)


def _mig_a100() -> FakeGpu:
    return FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-bbbb", used_bytes=0, total_bytes=80 * GIB, mig=[
        FakeMig(2, "3g.40gb", "MIG-1111", used_bytes=35210 * MIB, total_bytes=40192 * MIB,
                processes=[FakeProcess(3891245, 35184 * MIB)]),
        None,  # an empty slot: NVML_ERROR_NOT_FOUND
        FakeMig(9, "1g.10gb", "MIG-2222", used_bytes=9101 * MIB, total_bytes=9728 * MIB,
                processes=[FakeProcess(3902217, None)]),
    ])


# ------------------------------------------------------------------------------ whole GPUs


def test_whole_gpu_reports_v2_memory_with_the_reserve_apart():
    snap = read_gpus(FakeNvml([_h100()], process_names={4242: "python3"}), now=AT)
    (d,) = snap.devices
    assert (d.index, d.name, d.uuid, d.mig_profile) == ("0", "NVIDIA H100 80GB HBM3", "GPU-aaaa", None)
    assert (d.used_bytes, d.total_bytes, d.reserved_bytes) == (70 * GIB, 80 * GIB, 512 * MIB)
    assert (d.util_gpu_pct, d.util_mem_bandwidth_pct) == (87.0, 41.0)
    assert [(p.pid, p.name, p.used_bytes) for p in d.processes] == [(4242, "python3", 69 * GIB)]
    assert (snap.source, snap.taken_at, snap.driver_version, snap.cuda_version) == ("nvml", AT, "550.90.07", "12.4")


def test_old_driver_without_v2_falls_back_to_v1_where_used_includes_the_reserve():
    (d,) = read_gpus(FakeNvml([_h100(memory_v2=False)])).devices
    assert d.used_bytes == 70 * GIB + 512 * MIB
    assert d.reserved_bytes is None
    assert d.total_bytes == 80 * GIB


def test_pynvml_without_the_v2_constant_uses_v1():
    (d,) = read_gpus(FakeNvml([_h100()], memory_v2_constant=False)).devices
    assert (d.used_bytes, d.reserved_bytes) == (70 * GIB + 512 * MIB, None)


def test_process_memory_that_nvml_cannot_report_is_none_not_zero():
    (d,) = read_gpus(FakeNvml([_h100(processes=[FakeProcess(7, None), FakeProcess(8, 3 * GIB)])])).devices
    assert [(p.pid, p.used_bytes) for p in d.processes] == [(7, None), (8, 3 * GIB)]


def test_process_name_outside_this_pid_namespace_is_none():
    (d,) = read_gpus(FakeNvml([_h100()], process_names={})).devices
    assert d.processes[0].name is None
    assert d.processes[0].pid == 4242


def test_unsupported_utilisation_is_none():
    (d,) = read_gpus(FakeNvml([_h100(util_gpu_pct=None)])).devices
    assert d.util_gpu_pct is None and d.util_mem_bandwidth_pct is None
    assert d.used_bytes == 70 * GIB


def test_devices_come_in_index_order_with_their_own_readings():
    snap = read_gpus(FakeNvml([_h100(uuid=f"GPU-{i}", used_bytes=i * GIB) for i in range(12)]))
    assert [d.index for d in snap.devices] == [str(i) for i in range(12)]
    assert [d.used_bytes for d in snap.devices] == [i * GIB for i in range(12)]


def test_a_gpu_this_container_may_not_open_is_left_out():
    snap = read_gpus(FakeNvml([_h100(handle_error=fake_nvml.NVMLError_NoPermission), _h100(uuid="GPU-b")]))
    assert [(d.index, d.uuid) for d in snap.devices] == [("1", "GPU-b")]


def test_no_gpu_that_can_be_opened_is_a_permission_problem():
    with pytest.raises(NvmlUnavailable) as e:
        read_gpus(FakeNvml([_h100(handle_error=fake_nvml.NVMLError_NoPermission)]))
    assert e.value.reason == "no_permission"
    assert "GPU 0: Insufficient Permissions" in e.value.detail


# ------------------------------------------------------------------------------ MIG


def test_mig_slices_replace_their_parent_with_gi_indexes_and_profiles():
    snap = read_gpus(FakeNvml([_mig_a100()]))
    assert [(d.index, d.name, d.mig_profile, d.uuid) for d in snap.devices] == [
        ("0:2", "NVIDIA A100-SXM4-80GB", "3g.40gb", "MIG-1111"),
        ("0:9", "NVIDIA A100-SXM4-80GB", "1g.10gb", "MIG-2222"),
    ]
    assert [(d.used_bytes, d.total_bytes) for d in snap.devices] == [(35210 * MIB, 40192 * MIB),
                                                                      (9101 * MIB, 9728 * MIB)]


def test_mig_slices_have_no_utilisation():
    snap = read_gpus(FakeNvml([_mig_a100()]))
    assert {(d.util_gpu_pct, d.util_mem_bandwidth_pct) for d in snap.devices} == {(None, None)}


def test_mig_process_without_memory_figure_keeps_its_pid():
    snap = read_gpus(FakeNvml([_mig_a100()]))
    assert [(p.pid, p.used_bytes) for p in snap.devices[1].processes] == [(3902217, None)]


def test_refused_slice_process_list_falls_back_to_the_parent_list_by_gpu_instance():
    gpu = _mig_a100()
    for mig in gpu.mig or []:
        if mig:
            mig.processes_refused = True
    snap = read_gpus(FakeNvml([gpu]))
    assert [[p.pid for p in d.processes] for d in snap.devices] == [[3891245], [3902217]]


def test_two_compute_instances_of_one_gpu_instance_are_one_device():
    gpu = FakeGpu(name="NVIDIA A100-SXM4-80GB", mig=[
        FakeMig(1, "1c.3g.40gb", "MIG-a", compute_instance_id=0, processes=[FakeProcess(10, GIB)]),
        FakeMig(1, "1c.3g.40gb", "MIG-b", compute_instance_id=1, processes=[FakeProcess(11, GIB)]),
    ])
    (d,) = read_gpus(FakeNvml([gpu])).devices
    assert (d.index, d.mig_profile) == ("0:1", "1c.3g.40gb")
    assert [p.pid for p in d.processes] == [10, 11]


def test_mig_enabled_gpu_without_slices_is_listed_whole():
    (d,) = read_gpus(FakeNvml([FakeGpu(name="NVIDIA A100-SXM4-80GB", used_bytes=GIB, mig=[])])).devices
    assert (d.index, d.mig_profile, d.used_bytes) == ("0", None, GIB)


def test_mig_readings_line_up_with_nvidia_smi_evidence_of_the_same_card():
    """The same A100 seen by nvidia-smi (table + -L) and by NVML gives the same device keys."""
    smi = parse_nvidia_smi((DATA / "a100_mig_with_list.txt").read_text())
    gpu = FakeGpu(name="NVIDIA A100-SXM4-80GB", uuid="GPU-1a2b3c4d-5e6f-4a7b-8c9d-0e1f2a3b4c5d", mig=[
        FakeMig(2, "3g.40gb", "MIG-4f5e6d7c-8b9a-5c0d-9e1f-2a3b4c5d6e7f", used_bytes=35210 * MIB,
                total_bytes=40192 * MIB, processes=[FakeProcess(3891245, 35184 * MIB)]),
        FakeMig(9, "1g.10gb", "MIG-7a8b9c0d-1e2f-5a3b-8c4d-5e6f7a8b9c0d", used_bytes=9101 * MIB,
                total_bytes=9728 * MIB, processes=[FakeProcess(3902217, 9088 * MIB)]),
        FakeMig(10, "1g.10gb", "MIG-0c1d2e3f-4a5b-5c6d-9e7f-8a9b0c1d2e3f", used_bytes=2210 * MIB,
                total_bytes=9728 * MIB, processes=[FakeProcess(3910050, 2198 * MIB)]),
    ])
    nvml = read_gpus(FakeNvml([gpu]))

    def keys(devices: tuple[GpuDevice, ...]):
        return [(d.index, d.name, d.uuid, d.mig_profile, d.used_bytes, d.total_bytes,
                 [(p.pid, p.used_bytes) for p in d.processes]) for d in devices]

    assert keys(nvml.devices) == keys(smi.devices)


@pytest.mark.parametrize(("name", "parts"), [
    ("NVIDIA A100-SXM4-80GB MIG 3g.40gb", ("NVIDIA A100-SXM4-80GB", "3g.40gb")),
    ("A100-SXM4-40GB MIG 1g.5gb", ("A100-SXM4-40GB", "1g.5gb")),
    ("NVIDIA H100 80GB HBM3 MIG 1g.10gb+me", ("NVIDIA H100 80GB HBM3", "1g.10gb+me")),
    ("NVIDIA A100-SXM4-80GB MIG 1c.3g.40gb", ("NVIDIA A100-SXM4-80GB", "1c.3g.40gb")),
    ("NVIDIA L4", ("NVIDIA L4", None)),
    ("", (None, None)),
    (None, (None, None)),
])
def test_mig_device_names_split_into_parent_and_profile(name, parts):
    assert mig_name_parts(name) == parts


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=80))
def test_mig_name_parts_never_raises(name):
    parent, profile = mig_name_parts(name)
    assert parent is None or isinstance(parent, str)
    assert profile is None or (isinstance(profile, str) and profile.strip() == profile)


# ------------------------------------------------------------------------------ no GPU


@pytest.mark.parametrize(("error", "reason"), [
    (fake_nvml.NVMLError_LibraryNotFound, "library_not_found"),
    (fake_nvml.NVMLError_DriverNotLoaded, "driver_not_loaded"),
    (fake_nvml.NVMLError_NoPermission, "no_permission"),
    (fake_nvml.NVMLError_LibRmVersionMismatch, "version_mismatch"),
    (fake_nvml.NVMLError_Uninitialized, "init_failed"),
])
def test_init_failures_become_typed_reasons_without_a_shutdown(error, reason):
    nvml = FakeNvml([_h100()], init_error=error)
    with pytest.raises(NvmlUnavailable) as e:
        read_gpus(nvml)
    assert e.value.reason == reason
    assert nvml.shutdown_calls == 0


def test_missing_library_says_so_plainly():
    with pytest.raises(NvmlUnavailable) as e:
        read_gpus(FakeNvml([], init_error=fake_nvml.NVMLError_LibraryNotFound))
    assert str(e.value) == "no NVIDIA driver or GPU on this machine (libnvidia-ml.so not found)"


def test_driver_without_gpus_is_no_devices_and_still_shuts_down():
    nvml = FakeNvml([])
    with pytest.raises(NvmlUnavailable) as e:
        read_gpus(nvml)
    assert e.value.reason == "no_devices"
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_shutdown_happens_even_when_a_reading_blows_up():
    nvml = FakeNvml([_h100()])

    def boom(handle):
        raise RuntimeError("unexpected")

    nvml.nvmlDeviceGetName = boom
    with pytest.raises(RuntimeError):
        read_gpus(nvml)
    assert (nvml.init_calls, nvml.shutdown_calls) == (1, 1)


def test_a_session_reads_many_times_and_opens_nvml_once():
    nvml = FakeNvml([_h100()])
    with NvmlSession(nvml) as session:
        first, second = session.read(now=AT), session.read(now=AT)
    assert first == second
    assert (nvml.init_calls, nvml.count_calls, nvml.shutdown_calls) == (1, 2, 1)


def test_real_pynvml_error_classes_map_to_the_same_reasons():
    assert _unavailable(pynvml, pynvml.NVMLError_LibraryNotFound()).reason == "library_not_found"
    assert _unavailable(pynvml, pynvml.NVMLError_DriverNotLoaded()).reason == "driver_not_loaded"
    assert _unavailable(pynvml, pynvml.NVMLError_NoPermission()).reason == "no_permission"
    assert _unavailable(pynvml, pynvml.NVMLError_LibRmVersionMismatch()).reason == "version_mismatch"
    assert _unavailable(pynvml, pynvml.NVMLError_Unknown()).reason == "init_failed"


def test_the_fake_only_offers_names_the_real_pynvml_has():
    names = [n for n, _ in inspect.getmembers(FakeNvml) if n.startswith(("nvml", "NVML"))]
    assert len(names) > 20
    assert [n for n in names if not hasattr(pynvml, n)] == []
    assert pynvml.nvmlMemory_v2 == fake_nvml.nvmlMemory_v2
    assert pynvml.NVMLError_NotSupported().value == fake_nvml.NVMLError_NotSupported().value
    assert list(inspect.signature(pynvml.nvmlDeviceGetMemoryInfo).parameters) == ["handle", "version"]


# ------------------------------------------------------------------------ agent payloads


def test_snapshot_json_loads_back_to_the_same_evidence():
    snap = read_gpus(FakeNvml([_h100(), _mig_a100()], process_names={4242: "python3"}), now=AT)
    text = json.dumps([{"schema_version": 1, **to_jsonable(snap)}])
    assert parse_snapshot_json(text) == (snap,)
    assert parse_snapshot_json(json.dumps(to_jsonable(snap))) == (snap,)


@pytest.mark.parametrize("text", ["", "{", "[1]", '{"devices": 3}', '[{"devices": [{"name": "x"}]}]',
                                  '{"devices": [], "taken_at": "yesterday"}', '{"devices": [{"index": 5}]}'])
def test_malformed_snapshot_json_is_a_parse_error_naming_the_source(text):
    with pytest.raises(ParseError) as e:
        parse_snapshot_json(text, source="agent:node-1")
    assert e.value.source == "agent:node-1"


_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["devices", "index", "used_bytes", "processes", "pid", "taken_at", "source", "x"]),
        inner, max_size=4),
    max_leaves=12)


@settings(max_examples=200, deadline=None)
@given(st.one_of(_json_values.map(json.dumps), st.text(max_size=60)))
def test_snapshot_json_parser_returns_snapshots_or_raises_parse_error(text):
    try:
        samples = parse_snapshot_json(text)
    except ParseError:
        return
    assert all(isinstance(s, GpuSnapshot) for s in samples)
