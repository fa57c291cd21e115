"""torch's CUDA OOM message at every version read (runbooks.catalogs.torch_oom), rendered from
its pieces and read back figure by figure, whole and as a log prints it, one line at a time."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.render.i18n import Catalog
from bot.render.wording import fact_text
from collectors.bundle import load_bundle
from collectors.parsers.log_failures import FailureReader, oom_numbers, torch_form
from collectors.parsers.log_startup import StartupReader
from collectors.parsers.logs import parse_server_log
from runbooks.catalogs import torch_oom
from runbooks.catalogs.torch_oom import PIECES, READ, render
from runbooks.model.evidence import Evidence
from runbooks.triage.runbook import triage

GIB, MIB = 2**30, 2**20
REAL = Path(__file__).parent / "data" / "real"

#: a distinct size per piece, so a figure read from the wrong piece shows
SIZES = {
    "tried": ("1.25 GiB", int(1.25 * GIB)),
    "old.total": ("79.15 GiB", int(79.15 * GIB)),
    "old.allocated": ("70.50 GiB", int(70.5 * GIB)),
    "old.free": ("448.00 MiB", 448 * MIB),
    "old.allowed": ("75.00 GiB", 75 * GIB),
    "old.reserved": ("72.75 GiB", int(72.75 * GIB)),
    "new.total_misspelt": ("79.15 GiB", int(79.15 * GIB)),
    "new.total": ("79.15 GiB", int(79.15 * GIB)),
    "new.free": ("448.00 MiB", 448 * MIB),
    "new.other_process": ("12.00 GiB", 12 * GIB),
    "new.this_process": ("66.50 GiB", int(66.5 * GIB)),
    "new.allowed": ("75.00 GiB", 75 * GIB),
    "new.allocated": ("60.25 GiB", int(60.25 * GIB)),
    "new.private_pools": ("3.50 GiB", int(3.5 * GIB)),
    "new.unallocated": ("2.25 GiB", int(2.25 * GIB)),
    "async.allocated": ("60.25 GiB", int(60.25 * GIB)),
    "async.requested": ("1.25 GiB", int(1.25 * GIB)),
    "async.limit": ("79.15 GiB", int(79.15 * GIB)),
    "async.free": ("448.00 MiB", 448 * MIB),
    "async.allowed": ("75.00 GiB", 75 * GIB),
}


def _expected(version: torch_oom.Version, form: str) -> dict[str, int]:
    """The CudaOom figures the message of `version` in `form` carries."""
    out: dict[str, int] = {}
    for p in PIECES:
        if p.field is None or not p.printed_by(version):
            continue
        if (form == "async") != (p.form == "async"):
            continue
        if p.form in ("old", "new") and (p.form == "old") != (version < (2, 1, 0)):
            continue
        value = SIZES[p.id][1]
        if p.field == "_reserved_total":
            out["reserved_unallocated_bytes"] = value - SIZES["old.allocated"][1]
        elif p.field == "_other_process":
            out["other_processes_bytes"] = value
        elif p.field == "this_process_bytes":
            out["this_process_bytes"] = out["in_use_bytes"] = value
        else:
            out.setdefault(p.field, value)
    return out


def _forms(version: torch_oom.Version) -> list[str]:
    return ["caching", "async"] if version >= (2, 0, 0) else ["caching"]


CASES = [(v, f) for v in READ for f in _forms(v)]


@pytest.mark.parametrize(("version", "form"), CASES, ids=[f"{'.'.join(map(str, v))}-{f}" for v, f in CASES])
def test_every_figure_of_every_version_is_read(version, form):
    text = render(version, form, {k: v[0] for k, v in SIZES.items()}, n=3)
    want = _expected(version, form)
    assert oom_numbers(text) == want
    # as a log prints it: one message per line
    reader = FailureReader()
    for line in text.splitlines():
        reader.feed(line)
    oom = reader.oom()
    assert oom is not None and oom.count == 1
    for name, value in want.items():
        assert getattr(oom, name) == value, name


def test_the_pieces_change_where_the_libraries_say():
    """The wording turns: the name at 2.4, the misspelling only in 2.1.x, private pools from 2.4."""
    sizes = {k: v[0] for k, v in SIZES.items()}
    assert render((2, 3, 0), "caching", sizes).startswith("torch.cuda.OutOfMemoryError: ")
    assert render((2, 4, 0), "caching", sizes).startswith("torch.OutOfMemoryError: ")
    assert "total capacty of" in render((2, 1, 2), "caching", sizes)
    assert "total capacty of" not in render((2, 2, 0), "caching", sizes)
    assert "private pools" not in render((2, 3, 0), "caching", sizes)
    assert "private pools" in render((2, 4, 0), "caching", sizes)
    assert "(GPU 0; 79.15 GiB total capacity;" in render((2, 0, 0), "caching", sizes)
    assert "expandable_segments:True" in render((2, 2, 0), "caching", sizes)
    assert "max_split_size_mb" in render((2, 1, 0), "caching", sizes)


def test_without_a_fraction_or_graph_pools_those_figures_are_absent():
    sizes = {k: v[0] for k, v in SIZES.items() if k not in ("new.allowed", "new.private_pools")}
    numbers = oom_numbers(render((2, 6, 0), "caching", sizes))
    assert "allowed_bytes" not in numbers and "private_pools_bytes" not in numbers
    assert numbers["allocated_bytes"] == SIZES["new.allocated"][1]


def test_a_figure_past_the_card_is_not_kept():
    """torch under WSL printed "this process has 17179869184.00 GiB memory in use" (a public
    report): the held figure is dropped, not read as 17 billion GiB nor as a tail of its digits."""
    text = ("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacty of 23.99 GiB of which "
            "7.20 GiB is free. Including non-PyTorch memory, this process has 17179869184.00 GiB memory in use. "
            "Of the allocated memory 14.51 GiB is allocated by PyTorch, and 685.18 MiB is reserved by PyTorch "
            "but unallocated.")
    numbers = oom_numbers(text)
    assert "in_use_bytes" not in numbers and "this_process_bytes" not in numbers
    assert numbers["total_bytes"] == int(23.99 * GIB)
    assert numbers["allocated_bytes"] == int(14.51 * GIB)


@pytest.mark.parametrize("version", [(2, 0, 0), (2, 1, 0), (2, 2, 0)])
def test_the_start_up_reader_takes_the_card_from_every_wording(version):
    """torch 2.1.x's "total capacty" gave no card size before."""
    line = render(version, "caching", {k: v[0] for k, v in SIZES.items()})
    reader = StartupReader()
    reader.feed(line)
    startup = reader.result()
    assert startup is not None and startup.total_gpu_gib == pytest.approx(79.15)


def _oom_facts(text: str) -> dict[str, dict]:
    logs = parse_server_log(text)
    report = triage(Evidence(logs=logs, server_config=logs.server_config))
    oom = next(f for c in report.checks for f in c.findings if f.id in ("cuda_oom", "runtime_cuda_oom",
                                                                          "startup_cuda_oom"))
    return {x.key: x for x in oom.facts}


def test_memory_in_cuda_graph_pools_is_named_in_both_languages():
    sizes = {k: v[0] for k, v in SIZES.items() if k != "new.allowed"}
    facts = _oom_facts(render((2, 6, 0), "caching", sizes))
    pools = facts["oom_graph_pools"]
    assert pools.params["pool_gib"] == 3.5
    assert "oom_under_cap" not in facts
    assert "3.5 GiB of what PyTorch held" in fact_text(Catalog.load("en"), pools) and "CUDA graph" in fact_text(Catalog.load("zh"), pools)
    # before 2.4 torch does not print them: nothing is said
    assert "oom_graph_pools" not in _oom_facts(render((2, 3, 0), "caching", sizes))


def test_an_oom_under_a_memory_fraction_with_the_card_free_blames_the_cap():
    sizes = {k: v[0] for k, v in SIZES.items() if k != "new.private_pools"}
    sizes["new.free"] = "14.00 GiB"
    sizes["new.allowed"] = "62.00 GiB"  # 60.25 allocated + 2.25 cached + 1.25 asked for is past it
    facts = _oom_facts(render((2, 6, 0), "caching", sizes))
    cap = facts["oom_under_cap"]
    assert (cap.params["allowed_gib"], cap.params["free_gib"]) == (62.0, 14.0)
    assert "capped at 62 GiB" in fact_text(Catalog.load("en"), cap)
    assert "62 GiB" in fact_text(Catalog.load("zh"), cap)
    # what torch held and asked for was under the cap: the cap did not refuse it
    sizes["new.allowed"] = "75.00 GiB"
    assert "oom_under_cap" not in _oom_facts(render((2, 6, 0), "caching", sizes))
    sizes["new.allowed"] = "62.00 GiB"
    # the card itself full: the cap is not what refused it
    sizes["new.free"] = "448.00 MiB"
    sizes["tried"] = "1.00 GiB"
    assert "oom_under_cap" not in _oom_facts(render((2, 6, 0), "caching", sizes))


_UNIT = {"GiB": GIB, "MiB": MIB, "KiB": 2**10}
#: the pieces torch prints only sometimes: the cap where a fraction is set, graph pools where
#: they hold memory, the process lines where the driver names processes
_OPTIONAL = ("old.allowed", "new.allowed", "new.private_pools", "async.allowed", "new.other_process",
             "new.this_process")


@settings(max_examples=200, deadline=None)
@given(version=st.sampled_from(READ), form=st.sampled_from(["caching", "async"]),
       figures=st.fixed_dictionaries({p.id: st.tuples(st.integers(0, 99_999), st.integers(0, 99),
                                                      st.sampled_from(list(_UNIT)))
                                      for p in PIECES if p.field is not None}),
       left_out=st.sets(st.sampled_from(_OPTIONAL)))
def test_any_figures_torch_prints_are_read_back_exactly(version, form, figures, left_out):
    """Whatever sizes torch prints, with or without its optional pieces, each is read as printed
    (a figure past the card's capacity is dropped, as torch's own count is then wrong)."""
    if form == "async" and version < (2, 0, 0):
        form = "caching"
    sizes = {k: f"{a}.{b:02d} {unit}" for k, (a, b, unit) in figures.items() if k not in left_out}
    text = render(version, form, sizes, n=1)
    got = oom_numbers(text)
    shown = {p.id: p for p in PIECES if p.id in sizes and p.printed_by(version)
             and p.render.format(size=sizes[p.id], n=1) in text}
    want: dict[str, int] = {}
    for pid, p in shown.items():
        a, b, unit = figures[pid]
        value = int(float(f"{a}.{b:02d}") * _UNIT[unit])
        if p.field == "this_process_bytes":
            want["this_process_bytes"] = want["in_use_bytes"] = value
        elif p.field == "_other_process":
            want.setdefault("_other", value)
        elif p.field != "_reserved_total":
            want.setdefault(p.field, value)
    other = want.pop("_other", None)
    if other is not None:
        if "this_process_bytes" in want:
            want["other_processes_bytes"] = other
        else:
            want["in_use_bytes"] = other
    for name, value in want.items():
        total = got.get("total_bytes")
        if name in ("tried_bytes", "total_bytes") or not total or value <= total:
            assert got.get(name) == value, name
        else:
            assert name not in got, name


def test_a_bogus_allocated_figure_derives_no_cached_figure():
    """Before 2.1 the cached figure is reserved minus allocated: with the allocated figure past
    the card dropped, no cached figure is made from it (it was 0, a wrong zero)."""
    text = ("CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 15.77 GiB total capacity; 99999.00 GiB already "
            "allocated; 3.12 MiB free; 14.86 GiB reserved in total by PyTorch)")
    numbers = oom_numbers(text)
    assert "allocated_bytes" not in numbers and "reserved_unallocated_bytes" not in numbers
    assert numbers["free_bytes"] == int(3.12 * MIB)


@pytest.mark.parametrize(("version", "form", "want"), [((2, 0, 0), "caching", "old"), ((1, 13, 0), "caching", "old"),
                                                       ((2, 1, 0), "caching", "new"), ((2, 15, 0), "caching", "new"),
                                                       ((2, 6, 0), "async", "async")])
def test_the_wording_tells_which_torch_printed_it(version, form, want):
    text = render(version, form, {k: v[0] for k, v in SIZES.items()})
    assert torch_form(text) == want
    reader = FailureReader()
    for line in text.splitlines():
        reader.feed(line)
    assert reader.oom().torch_form == want


def test_expandable_segments_is_not_offered_to_a_torch_that_rejects_it(tmp_path):
    """torch <= 2.0 has no expandable_segments option (libc10_cuda.so 1.13.0 and 2.0.0 lack it and
    stop on an option they do not know): the same OOM in its wording gets no such advice."""
    case = REAL / "tgi-1374-a100-40g-oom-after-warmup"
    new = {a.id for a in triage(load_bundle(case)).actions}
    assert "set_expandable_segments" in new  # torch 2.1's wording, 1.57 GiB cached
    shutil.copytree(case, tmp_path / "case")
    logs = tmp_path / "case" / "logs.txt"
    text = logs.read_text(encoding="utf-8")
    said = re.search(r"CUDA out of memory\. Tried to allocate .*?See documen\S*", text).group(0)
    # the same figures as torch 2.0 prints them: reserved = 37.10 allocated + 1.57 cached
    text = text.replace(said, "CUDA out of memory. Tried to allocate 222.00 MiB (GPU 0; 39.39 GiB total capacity; "
                              "37.10 GiB already allocated; 217.94 MiB free; 38.67 GiB reserved in total by PyTorch) "
                              "If reserved memory is >> allocated memory try setting max_split_size_mb to avoid "
                              "fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF")
    logs.write_text(text, encoding="utf-8")
    old = {a.id for a in triage(load_bundle(tmp_path / "case")).actions}
    assert old == new - {"set_expandable_segments"}


#: the cudaMallocAsync block as two public reports printed it, with no fraction set: torch then
#: prints its "no limit" (SIZE_MAX) as the PyTorch limit, 17179869184.00 GiB
REAL_ASYNC = (
    "torch.OutOfMemoryError: Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "Currently allocated     : 4.86 GiB\n"
    "Requested               : 10.12 GiB\n"
    "Device limit            : 24.00 GiB\n"
    "Free (according to CUDA): 0 bytes\n"
    "PyTorch limit (set by user-supplied memory fraction)\n"
    "                        : 17179869184.00 GiB\n"
    "This error means you ran out of memory on your GPU.\n",
    '  "generate_fn raised: ModelLoaderError: load_llm failed for\n'
    "   model_id='mistralai/Mistral-Nemo-Instruct-2407':\n"
    "   Allocation on device 0 would exceed allowed memory. (out of memory)\n"
    "   Currently allocated     : 29.97 GiB\n"
    "   Requested               : 7.17 GiB\n"
    "   Device limit            : 15.92 GiB\n"
    "   Free (according to CUDA): 0 bytes\n"
    "   PyTorch limit (set by user-supplied memory fraction)\n"
    '                           : 17179869184.00 GiB"\n',
)


@pytest.mark.parametrize(("text", "want"), [
    # written before the first run: no cap (torch's "no limit" is past the card), nothing free
    (REAL_ASYNC[0], {"tried_bytes": int(10.12 * GIB), "total_bytes": 24 * GIB, "free_bytes": 0,
                     "allocated_bytes": int(4.86 * GIB)}),
    # 29.97 GiB "allocated" on a 15.92 GiB card (host memory behind it): not a figure of the card
    (REAL_ASYNC[1], {"tried_bytes": int(7.17 * GIB), "total_bytes": int(15.92 * GIB), "free_bytes": 0}),
])
def test_real_cuda_malloc_async_blocks(text, want):
    reader = FailureReader()
    for line in text.splitlines():
        reader.feed(line)
    oom = reader.oom()
    got = {k: getattr(oom, k) for k in ("tried_bytes", "total_bytes", "free_bytes", "allocated_bytes",
                                        "allowed_bytes") if getattr(oom, k) is not None}
    assert got == want and oom.torch_form == "async"
