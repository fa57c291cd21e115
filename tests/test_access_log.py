"""Access logs: every line kind, skipped lines, chunk boundaries, and the fast path agreeing with the slow one."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectors.access_logs.reference import (
    NO_LENGTHS,
    parse_access_line,
    parse_access_lines,
    read_access_log,
)
from collectors.errors import ParseError
from runbooks.profile.requests import ProfileBuilder

DATA = Path(__file__).parent / "data" / "access"


def _counts(profile) -> dict[str, int]:
    return {b.bucket: b.count for b in profile.buckets}


def test_runbook_sample_is_all_long_context_with_minute_times():
    profile = read_access_log(DATA / "runbook.log", source="runbook.log")
    assert profile.source == "runbook.log"
    assert profile.total == 3
    assert _counts(profile) == {"S": 0, "M": 0, "L": 3, "XL": 0}
    assert profile.p50_input_tokens == 7928.0
    assert profile.p99_output_tokens == 501.0
    assert profile.first_at == datetime(2026, 3, 9, 20, 11, tzinfo=UTC)
    assert profile.last_at == datetime(2026, 3, 9, 20, 13, tzinfo=UTC)
    assert profile.skipped_lines == 0
    assert profile.estimated is False


def test_every_line_kind_is_read_and_the_rest_counted_as_skipped():
    profile = read_access_log(DATA / "mixed_kinds.log")
    # key=value (runbook, prompt/completion, any order with quoted time), JSON usage with `created`,
    # JSON top-level with ISO time, SGLang Finish; a comment, an uvicorn line, a non-number and a
    # negative count are skipped; the blank line is neither
    assert profile.total == 7
    assert _counts(profile) == {"S": 1, "M": 2, "L": 2, "XL": 2}
    assert profile.skipped_lines == 4
    assert profile.first_at == datetime(2026, 3, 9, 20, 11, tzinfo=UTC)
    assert profile.last_at == datetime(2026, 3, 9, 20, 17, tzinfo=UTC)
    assert profile.max_input_tokens == 9000
    assert profile.max_output_tokens == 600


def test_windows_line_endings_are_read():
    profile = read_access_log(DATA / "crlf.log")
    assert profile.total == 2
    assert _counts(profile) == {"S": 1, "M": 0, "L": 1, "XL": 0}
    assert profile.last_at == datetime(2026, 3, 9, 20, 12, tzinfo=UTC)


def test_a_file_with_lines_but_no_lengths_is_a_parse_error_naming_it():
    with pytest.raises(ParseError) as err:
        read_access_log(DATA / "no_lengths.log", source="access.log")
    assert err.value.source == "access.log"
    assert err.value.line == 1
    assert err.value.message == NO_LENGTHS


def test_an_empty_file_is_an_empty_profile(tmp_path):
    path = tmp_path / "access.log"
    path.write_bytes(b"\n\n")
    profile = read_access_log(path)
    assert profile.total == 0
    assert profile.skipped_lines == 0


@pytest.mark.parametrize("chunk_bytes", [1, 2, 7, 64, 1000])
def test_a_line_split_across_chunks_is_counted_once(chunk_bytes):
    whole = read_access_log(DATA / "mixed_kinds.log")
    assert read_access_log(DATA / "mixed_kinds.log", chunk_bytes=chunk_bytes) == whole


def test_text_in_memory_gives_the_same_profile_as_the_file():
    text = (DATA / "mixed_kinds.log").read_text()
    assert parse_access_lines(text) == read_access_log(DATA / "mixed_kinds.log")
    assert parse_access_lines(text.splitlines(keepends=True)) == read_access_log(DATA / "mixed_kinds.log")


def test_a_time_after_the_counts_is_not_lost():
    profile = parse_access_lines(["input_tokens=10 output_tokens=20 time=2026-03-09T2011Z"])
    assert profile.first_at == datetime(2026, 3, 9, 20, 11, tzinfo=UTC)


def test_counts_of_a_billion_or_more_are_not_request_lengths():
    profile = parse_access_lines(["input_tokens=1000000000 output_tokens=1", "input_tokens=999999999 output_tokens=1"])
    assert profile.total == 1
    assert profile.skipped_lines == 1


def test_an_overlong_line_is_skipped_whatever_the_chunk_size(tmp_path):
    path = tmp_path / "access.log"
    path.write_bytes(b"input_tokens=1 output_tokens=1\n" + b"z" * (100 * 1024) + b"\ninput_tokens=2 output_tokens=2\n")
    for chunk_bytes in (16, 1024 * 1024):
        profile = read_access_log(path, chunk_bytes=chunk_bytes)
        assert (profile.total, profile.skipped_lines) == (2, 1)


def test_unix_epoch_in_milliseconds_is_read():
    found = parse_access_line('{"timestamp": 1773087300000, "usage": {"input_tokens": 5, "output_tokens": 6}}')
    assert found == (5, 6, datetime(2026, 3, 9, 20, 15, tzinfo=UTC))


def test_a_long_campaign_in_the_access_log_shows_as_a_shift(tmp_path):
    lines = []
    for minute in range(61):  # 20:00 to 21:00: quarters of exactly 15 minutes
        long = 8 if minute < 15 else 37 if minute >= 45 else 20
        stamp = f"2026-03-09T{20 + minute // 60:02d}{minute % 60:02d}Z"
        lines += [f"time={stamp} input_tokens={6000 if k < long else 400} output_tokens=100" for k in range(100)]
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    shift = read_access_log(path).shift
    assert shift is not None
    assert shift.long_share_before == pytest.approx(0.08)
    assert shift.long_share_after == pytest.approx(0.37)


_STAMPS = st.sampled_from(["", "time=2026-03-09T2011Z ", "ts=2026-03-09T20:12:05Z ", "timestamp=2026-03-09T2301Z ",
                           "time=not-a-time "])
_TAILS = st.sampled_from(["", " model=qwen2.5-7b", " model=x time=2026-03-10T0101Z", "\r", "  "])


@st.composite
def _access_line(draw) -> str:
    kind = draw(st.integers(0, 5))
    i, o = draw(st.integers(0, 20_000)), draw(st.integers(0, 3_000))
    if kind == 0:
        return f"{draw(_STAMPS)}input_tokens={i} output_tokens={o}{draw(_TAILS)}"
    if kind == 1:
        return f"{draw(_STAMPS)}prompt_tokens={i} completion_tokens={o}{draw(_TAILS)}"
    if kind == 2:
        return f'{{"created": 1773087300, "usage": {{"prompt_tokens": {i}, "completion_tokens": {o}}}}}'
    if kind == 3:
        return f"output_tokens={o} input_tokens={i}{draw(_TAILS)}"
    if kind == 4:
        return draw(st.sampled_from(["", "noise", "GET /health 200", "input_tokens=x output_tokens=1"]))
    return f"[2026-03-09 20:17:00 TP0] Finish: out={{'meta_info': {{'prompt_tokens': {i}, 'completion_tokens': {o}}}}}"


@settings(max_examples=200, deadline=None)
@given(st.lists(_access_line(), min_size=1, max_size=60), st.integers(1, 300))
def test_fast_chunk_path_agrees_with_reading_line_by_line(tmp_path_factory, lines, chunk_bytes):
    builder = ProfileBuilder()
    for line in lines:
        if not line.strip():
            continue
        found = parse_access_line(line)
        if found is None:
            builder.skip()
        else:
            builder.add(*found)
    expected = builder.build("access.log")
    path = tmp_path_factory.mktemp("acc") / "access.log"
    path.write_text("\n".join(lines) + "\n", newline="")
    try:
        got = read_access_log(path, chunk_bytes=chunk_bytes)
    except ParseError:
        assert expected.total == 0 and expected.skipped_lines > 0
        return
    assert got == expected
