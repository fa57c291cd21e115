"""The vectorised access-log reader gives exactly the reference reader's profile: counts,
percentiles, times, shift and skipped lines, whatever the lines, chunking or process split."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectors.access_logs.fast as fast
from collectors.access_logs.fast import read_access_log_fast, scan_access_log
from collectors.access_logs.reference import read_access_log
from collectors.errors import ParseError
from collectors.parsers.textio import MAX_LINE_BYTES
from runbooks.profile.requests import ProfileBuilder
from tests.support.scanners import line_scanner  # noqa: F401 (each test runs with both scanners)

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = sorted([*ROOT.glob("examples/*/access.log"), *ROOT.glob("tests/data/access/*.log")])


def _reference(path: Path):
    try:
        return read_access_log(path)
    except ParseError as e:
        return ("ParseError", e.source, e.message, e.line)


def _fast(path: Path, **kwargs):
    try:
        return scan_access_log(path, **kwargs).profile
    except ParseError as e:
        return ("ParseError", e.source, e.message, e.line)


def _in_ranges(path: Path, parts: int):
    """The multi-process path without processes: scan each range here, then merge."""
    size = os.path.getsize(path)
    try:
        tallies = [fast._scan_range(str(path), a, b, True) for a, b in fast._ranges(path, size, parts)]
        return fast._merge(tallies, "access.log", True, 48)[0]
    except ParseError as e:
        return ("ParseError", e.source, e.message, e.line)


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_logs_give_the_reference_profile(path):
    assert _fast(path) == _reference(path)
    assert _fast(path, workers=3) == _reference(path)


# ------------------------------------------------------------------ generated lines

_STAMPS = st.sampled_from([
    "2026-03-09T2011Z", "2026-03-09T20:11:05Z", "2026-03-09T20:11:05.123456+08:00", "2026-03-09 20:11",
    "1741550000", "garbage", "2026-13-40T2011Z", "'2026-03-09T2011Z'", 'a"b', "x" * 70, "2026-03-09T2012Z",
])
_NUMBERS = st.one_of(st.integers(0, 20_000).map(str), st.integers(0, 10**11).map(str),
                     st.sampled_from(["007", "", "12a", "-5", "1e3", "999999999", "1000000000"]))
_PREFIX = st.sampled_from(["time=", "ts=", "timestamp=", "", "tim=", "time =", "@timestamp="])
_SEP = st.sampled_from([" ", " ", " ", "  ", "\t", ""])
_KEY_IN = st.sampled_from(["input_tokens", "input_tokens", "prompt_tokens", "inputtokens", "Input_tokens"])
_KEY_OUT = st.sampled_from(["output_tokens", "output_tokens", "completion_tokens", "output_token"])
_TAIL = st.sampled_from(["", "", " model=qwen2.5-7b", "\r", " \r", " ts=9", " time=2026-03-09T2011Z",
                         " user='a b'", "\x00", " é", "x", " status=200\tok", "\r\r"])


@st.composite
def _key_value_line(draw) -> str:
    prefix = draw(_PREFIX)
    head = f"{prefix}{draw(_STAMPS)}{draw(_SEP)}" if prefix else ""
    return (f"{head}{draw(_KEY_IN)}={draw(_NUMBERS)}{draw(_SEP)}{draw(_KEY_OUT)}={draw(_NUMBERS)}"
            f"{draw(_TAIL)}")


_OTHER = st.one_of(
    st.just(""), st.just("   "), st.just("\r"),
    st.builds(lambda a, b: f'{{"usage": {{"prompt_tokens": {a}, "completion_tokens": {b}}}, "created": 1741550000}}',
              st.integers(0, 9000), st.integers(0, 900)),
    st.builds(lambda a, b: f"[2025-03-01 12:00:00 TP0] Finish: out={{'meta_info': {{'prompt_tokens': {a}, "
                           f"'completion_tokens': {b}}}}}", st.integers(0, 9000), st.integers(0, 900)),
    st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
)
_LINES = st.lists(st.one_of(_key_value_line(), _key_value_line(), _OTHER), max_size=60)


def _write(lines: list[str], newline: str, final: bool) -> Path:
    fd, name = tempfile.mkstemp(suffix=".log")
    with os.fdopen(fd, "wb") as fh:
        fh.write((newline.join(lines) + (newline if final and lines else "")).encode("utf-8", "surrogatepass"))
    return Path(name)


@settings(max_examples=200, deadline=None)
@given(_LINES, st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_any_lines_give_the_reference_profile_or_the_same_parse_error(lines, newline, final):
    path = _write(lines, newline, final)
    try:
        expected = _reference(path)
        assert _fast(path, workers=1) == expected
        assert _in_ranges(path, 3) == expected
    finally:
        path.unlink()


@settings(max_examples=60, deadline=None)
@given(st.lists(_key_value_line(), min_size=1, max_size=80), st.integers(1, 200))
def test_tiny_read_chunks_carry_partial_lines_correctly(lines, chunk):
    path = _write(lines, "\n", True)
    old = fast.CHUNK_BYTES
    fast.CHUNK_BYTES = chunk
    try:
        assert _fast(path, workers=1) == _reference(path)
    finally:
        fast.CHUNK_BYTES = old
        path.unlink()


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_give_the_reference_result(data):
    fd, name = tempfile.mkstemp(suffix=".log")
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)
    path = Path(name)
    try:
        assert _fast(path) == _reference(path)
    finally:
        path.unlink()


# ------------------------------------------------------------------ files and processes


def _runbook_lines(n: int, start_minute: int = 0) -> list[str]:
    out = []
    for k in range(n):
        m = start_minute + k // 40
        out.append(f"time=2026-03-09T{8 + m // 60:02d}{m % 60:02d}Z input_tokens={(k * 7919) % 12000} "
                   f"output_tokens={(k * 104729) % 700} model=qwen2.5-7b")
    return out


def test_several_processes_give_the_single_process_profile(tmp_path):
    path = tmp_path / "access.log"
    path.write_text("\n".join([*_runbook_lines(30_000), "noise line", *_runbook_lines(30_000, 750)]) + "\n")
    scan = scan_access_log(path, workers=2)
    assert scan.workers == 2
    assert scan.profile == read_access_log(path)
    assert scan.profile.skipped_lines == 1


def test_untimed_log_keeps_arrival_order_across_processes(tmp_path):
    lines = [f"input_tokens={100 if k < 6000 else 9000} output_tokens=50" for k in range(12_000)]
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    scan = scan_access_log(path, workers=3)
    assert scan.profile == read_access_log(path)
    assert (scan.profile.shift.long_share_before, scan.profile.shift.long_share_after) == (0.0, 1.0)


def test_a_line_longer_than_the_line_limit_is_skipped_as_the_reference_skips_it(tmp_path):
    # wherever it falls: inside a read, across reads, at the end without a newline
    body = _runbook_lines(70_000)
    long_fast = "time=2026-03-09T0800Z input_tokens=5 output_tokens=6 pad=" + "x" * (MAX_LINE_BYTES + 10)
    long_junk = "y" * (3 * MAX_LINE_BYTES)
    path = tmp_path / "access.log"
    path.write_text("\n".join([*body[:20], long_fast, *body[20:60_000], long_junk, *body[60_000:], long_fast]))
    scan = scan_access_log(path, workers=2)
    assert scan.profile == read_access_log(path)
    assert scan.profile.skipped_lines == 3
    # Reads far shorter than the line limit, so that each long line is carried across many of
    # them and dropped across more. The same layout with a shorter body: every block costs the
    # numpy scanner a fixed few milliseconds, and 5,000 blocks of the long body say no more
    # about long lines than 500 of this one.
    short = tmp_path / "short.log"
    short.write_text("\n".join([*body[:20], long_fast, *body[20:2_000], long_junk, *body[2_000:2_500], long_fast]))
    old = fast.CHUNK_BYTES
    fast.CHUNK_BYTES = 1000
    try:
        chunked = read_access_log_fast(short, workers=1)
    finally:
        fast.CHUNK_BYTES = old
    assert chunked == read_access_log(short)
    assert chunked.skipped_lines == 3


def test_many_distinct_times_coarsen_the_bins_as_the_reference_does(tmp_path):
    lines = [f"time=2026-03-{1 + k // 1440:02d}T{k // 60 % 24:02d}{k % 60:02d}Z input_tokens={k % 9000} "
             f"output_tokens={k % 600}" for k in range(25_000)]
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    assert read_access_log_fast(path) == read_access_log(path)


def test_no_lengths_raises_the_reference_parse_error(tmp_path):
    path = tmp_path / "access.log"
    path.write_text("GET / 200\nGET /x 404\n")
    with pytest.raises(ParseError) as e:
        read_access_log_fast(path, "access.log")
    assert (e.value.source, e.value.line) == ("access.log", 1)


def test_missing_file_raises_os_error(tmp_path):
    with pytest.raises(OSError):
        read_access_log_fast(tmp_path / "nope.log")


def test_tallied_requests_build_the_profile_that_adding_them_one_by_one_builds():
    requests = [(300, 100), (7420, 312), (9000, 10), (100, 600), (512, 128)]
    one = ProfileBuilder()
    for n_in, n_out in requests:
        one.add(n_in, n_out)
    many = ProfileBuilder()
    many.add_tallied({300: 1, 7420: 1, 9000: 1, 100: 1, 512: 1}, {100: 1, 312: 1, 10: 1, 600: 1, 128: 1},
                     bytes([0, 2, 3, 3, 0]))
    assert many.build("x") == one.build("x")


def test_tallies_that_disagree_are_refused():
    with pytest.raises(ValueError):
        ProfileBuilder().add_tallied({1: 2}, {1: 1}, bytes([0]))
    with pytest.raises(ValueError):
        ProfileBuilder().add_tallied({1: 1}, {1: 1}, bytes([4]))


def test_processes_that_cannot_start_leave_the_scan_to_this_process(tmp_path, monkeypatch):
    class NoProcesses:
        def __init__(self, *args, **kwargs):
            raise OSError("no processes here")

    import concurrent.futures

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", NoProcesses)  # fast.py imports it when it splits
    path = tmp_path / "access.log"
    path.write_text("\n".join(_runbook_lines(5000)) + "\n")
    scan = scan_access_log(path, workers=2)
    assert scan.workers == 1
    assert scan.profile == read_access_log(path)


def test_the_compiled_tally_hands_back_when_its_outputs_fill_and_the_profile_stays_the_reference(tmp_path, monkeypatch):
    """One request, one run of a minute and one large count a call: every hand-back (and the
    lines the reference reads between them) keeps arrival order, minutes and counts."""
    import collectors.access_logs.tally as tally

    lines = []
    for k in range(300):
        minute = 10 + k // 7
        big = 150_000 + k if k % 11 == 0 else 40 + k
        lines.append(f"time=2026-03-09T20:{minute:02d}:{k % 60:02d}Z input_tokens={big} output_tokens={k % 700}")
        if k % 13 == 0:
            lines.append(f"time=2026-03-09T20:{minute:02d}:00+0000 input_tokens=5 output_tokens=6 caf\u00e9")  # non-ASCII
        if k % 17 == 0:
            lines.append("no counts here")
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    expected = _reference(path)
    detail = scan_access_log(path, workers=1, detail=True).detail  # with the outputs at their sizes
    monkeypatch.setattr(tally, "_CLASSES_CAP", 1)
    monkeypatch.setattr(tally, "_RUNS_CAP", 1)
    monkeypatch.setattr(tally, "_BIG_CAP", 3)
    tally.release()
    calls = []
    if tally.NATIVE is not None:
        native = tally.NATIVE

        class Counting:
            def __getattr__(self, name):
                return getattr(native, name)

            def tally_lines(self, *args):
                calls.append(args[1])
                return native.tally_lines(*args)

        monkeypatch.setattr(tally, "NATIVE", Counting())
    try:
        assert _fast(path, workers=1) == expected
        assert scan_access_log(path, workers=1, detail=True).detail == detail
    finally:
        tally.release()
    if tally.NATIVE is not None:
        assert len(calls) > 300  # a call a request at least


def test_every_bucket_boundary_tallies_as_the_runbook_rule_buckets_it(tmp_path):
    """The scanners' own bucket rule (C and numpy) against `bucket_of`, at each limit and one past it."""
    from runbooks.model.lengths import BUCKETS
    from runbooks.profile.requests import bucket_of

    inputs = (0, 512, 513, 2048, 2049, 8192, 8193)
    outputs = (0, 128, 129, 256, 257, 512, 513)
    pairs = [(i, o) for i in inputs for o in outputs]
    path = tmp_path / "access.log"
    path.write_text("".join(f"input_tokens={i} output_tokens={o}\n" for i, o in pairs))
    expected = [sum(1 for i, o in pairs if bucket_of(i, o) == name) for name in BUCKETS]
    profile = scan_access_log(path, workers=1).profile
    assert [b.count for b in profile.buckets] == expected
    assert sum(expected) == 49 and all(expected)
