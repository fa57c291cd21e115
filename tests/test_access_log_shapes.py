"""The access-log shapes gateways write: what the reference reader makes of each, and the fast
reader giving exactly that on generated, hand-written, mutated and mixed lines (a line the
fast reader cannot vouch for goes to the reference, so the tests also check that the shapes
themselves stay on the vectorised path)."""

from __future__ import annotations

import os
import random
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import collectors.access_logs.fast as fast
import collectors.access_logs.tally as tally
from benchmarks.bench_profile_vs_mawk import SHAPES, shape_lines
from collectors.access_logs.fast import scan_access_log
from collectors.access_logs.reference import NO_LENGTHS, parse_access_line, read_access_log
from collectors.errors import ParseError
from collectors.parsers.textio import MAX_LINE_BYTES
from runbooks.profile.requests import ProfileBuilder
from tests.support.scanners import line_scanner  # noqa: F401 (each test runs with both scanners)

DATA = Path(__file__).parent / "data" / "access" / "shapes"


def _utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


# ------------------------------------------------------------------ what each shape means

# (line, (input, output, time)) as gateways write them
LINES = [
    # nginx log_format with upstream variables; the time is $time_local
    ('10.0.3.7 - - [10/Oct/2026:13:55:36 +0000] "POST /v1/chat/completions HTTP/1.1" 200 1834 "-" '
     '"python-httpx/0.27.0" rt=0.812 uct="0.000" urt="0.810" ua=10.1.2.3:8000 input_tokens=512 output_tokens=128',
     (512, 128, _utc(2026, 10, 10, 13, 55, 36))),
    # Apache combined with the counts appended, a remote user and a local offset
    ('127.0.0.1 - frank [10/Oct/2026:13:55:36 -0700] "POST /v1/completions HTTP/1.1" 200 2326 '
     '"http://example.com/start" "Mozilla/5.0 (X11; Linux x86_64)" prompt_tokens=3000 completion_tokens=200',
     (3000, 200, _utc(2026, 10, 10, 20, 55, 36))),
    # Envoy's default format (Istio's too) with the counts from dynamic metadata appended
    ('[2026-10-10T13:55:36.123Z] "POST /v1/chat/completions HTTP/1.1" 200 - 512 1834 812 810 "10.0.0.1" '
     '"python-httpx/0.27.0" "3f2a-1f2e" "llm.example" "10.1.2.3:8000" input_tokens=9000 output_tokens=40',
     (9000, 40, _utc(2026, 10, 10, 13, 55, 36, 123000))),
    ('[2026-10-10T21:55:36.123456+08:00] "POST /v1/completions HTTP/2" 200 - input_tokens=1 output_tokens=2',
     (1, 2, _utc(2026, 10, 10, 13, 55, 36, 123456))),
    # logfmt, fields in any order, quoted values, RFC 3339 with fractions and offsets
    ('level=info ts=2026-10-10T13:55:36.123+08:00 msg="request done" model="qwen2.5 7b" input_tokens="512" '
     'output_tokens=128 duration_ms=812', (512, 128, _utc(2026, 10, 10, 5, 55, 36, 123000))),
    ('output_tokens=7 model=x input_tokens=700 time="2026-10-10 13:55:36Z" user="a b"',
     (700, 7, _utc(2026, 10, 10, 13, 55, 36))),
    ('time=2026-10-10T13:55:36.123456789Z input_tokens=5 output_tokens=6', (5, 6, _utc(2026, 10, 10, 13, 55, 36, 123456))),
    ('@timestamp=2026-10-10T13:55Z prompt_tokens=5 completion_tokens=6', (5, 6, _utc(2026, 10, 10, 13, 55))),
    # epochs in seconds, with a fraction, and in milliseconds
    ("ts=1791640536 input_tokens=5 output_tokens=6", (5, 6, _utc(2026, 10, 10, 13, 55, 36))),
    ("ts=1791640536.25 input_tokens=5 output_tokens=6", (5, 6, _utc(2026, 10, 10, 13, 55, 36, 250000))),
    ("timestamp=1791640536123 input_tokens=5 output_tokens=6", (5, 6, _utc(2026, 10, 10, 13, 55, 36, 123000))),
    # OpenAI-style responses, usage among other nested objects, keys in any order
    ('{"id":"chatcmpl-1","object":"chat.completion","created":1791640536,"model":"m","choices":[{"index":0,'
     '"message":{"role":"assistant","content":"hi"},"finish_reason":"stop"}],"usage":{"prompt_tokens":9000,'
     '"completion_tokens":100,"total_tokens":9100,"prompt_tokens_details":{"cached_tokens":0}}}',
     (9000, 100, _utc(2026, 10, 10, 13, 55, 36))),
    ('{"usage": {"completion_tokens": 3, "prompt_tokens": 9}, "choices": [{"index": 0}], "created": 1791640536}',
     (9, 3, _utc(2026, 10, 10, 13, 55, 36))),
    # a gateway's JSON log: the time nested objects leave at the top level
    ('{"request": {"method": "POST", "time": "1999-01-01T00:00:00Z"}, "usage": {"prompt_tokens": 9, '
     '"completion_tokens": 3}, "time": "2026-10-10T13:55:36.5Z"}', (9, 3, _utc(2026, 10, 10, 13, 55, 36, 500000))),
    ('{"timestamp": 1791640536123, "usage": {"input_tokens": 5, "output_tokens": 6}}',
     (5, 6, _utc(2026, 10, 10, 13, 55, 36, 123000))),
    # LiteLLM's payload: the counts at the top and again in the response, the time in the response
    ('{"id":"x","call_type":"acompletion","prompt_tokens":12,"completion_tokens":34,"total_tokens":46,'
     '"startTime":1791640530.5,"response":{"id":"x","created":1791640536,"usage":{"prompt_tokens":12,'
     '"completion_tokens":34}}}', (12, 34, _utc(2026, 10, 10, 13, 55, 36))),
    # Kong's http-log: usage under ai.proxy, which no JSON holder looks at; read as text, no time
    ('{"started_at":1791640536000,"request":{"method":"POST","uri":"/v1/chat"},"ai":{"proxy":{"usage":'
     '{"prompt_tokens":10,"completion_tokens":20,"total_tokens":30},"meta":{"provider_name":"openai"}}}}',
     (10, 20, None)),
    # not JSON after all (cut short): read as text, the time from its JSON-style key
    ('{"created": 1791640536, "usage": {"prompt_tokens": 9, "completion_tokens": 3}', (9, 3, _utc(2026, 10, 10, 13, 55, 36))),
]


@pytest.mark.parametrize(("line", "expected"), LINES, ids=range(len(LINES)))
def test_each_shape_means_what_its_writer_meant(line, expected):
    assert parse_access_line(line) == expected


NOT_READ = [
    "10.0.3.7 - - [10/Oct/2026:13:55:36 +0000] \"GET /health HTTP/1.1\" 200 2",  # no counts
    "time=2026-10-10T13:55:36Z input_tokens=x output_tokens=1",
    '{"usage": {"prompt_tokens": -5, "completion_tokens": 3}}',
    "input_tokens=1000000000 output_tokens=1",
]


@pytest.mark.parametrize("line", NOT_READ)
def test_lines_without_readable_counts_are_not_read(line):
    assert parse_access_line(line) is None


def test_a_time_that_is_no_date_leaves_the_line_untimed():
    assert parse_access_line("ts=2026-02-30T10:00:00Z input_tokens=1 output_tokens=2") == (1, 2, None)
    assert parse_access_line('1.2.3.4 - - [31/Feb/2026:13:55:36 +0000] "GET /" input_tokens=1 output_tokens=2') == (
        1, 2, None)
    assert parse_access_line('1.2.3.4 - - [10/Okt/2026:13:55:36 +0000] "GET /" input_tokens=1 output_tokens=2') == (
        1, 2, None)


# ------------------------------------------------------------------ fast == reference


def _reference(path: Path):
    try:
        return read_access_log(path)
    except ParseError as e:
        return ("ParseError", e.source, e.message, e.line)


def _fast(path: Path, workers: int = 1):
    try:
        return scan_access_log(path, workers=workers).profile
    except ParseError as e:
        return ("ParseError", e.source, e.message, e.line)


def _line_by_line(lines: list[str]):
    """The profile `parse_access_line` makes of the lines, one at a time."""
    builder = ProfileBuilder()
    for line in lines:
        raw = line.encode("utf-8", "surrogatepass")
        if len(raw.rstrip(b"\r")) + (1 if raw.endswith(b"\r") else 0) > MAX_LINE_BYTES:
            builder.skip()
            continue
        text = raw.decode("utf-8", "replace")
        if not text.strip():
            continue
        found = parse_access_line(text)
        if found is None:
            builder.skip()
        else:
            builder.add(*found)
    profile = builder.build("access.log")
    if profile.total == 0 and profile.skipped_lines > 0:
        return ("ParseError", "access.log", NO_LENGTHS, 1)
    return profile


def _write(lines: list[str], newline: str = "\n", final: bool = True) -> Path:
    fd, name = tempfile.mkstemp(suffix=".log")
    with os.fdopen(fd, "wb") as fh:
        fh.write((newline.join(lines) + (newline if final and lines else "")).encode("utf-8", "surrogatepass"))
    return Path(name)


def _split_here(path: Path, workers: int):
    """`_fast(path, workers)` with the file split into the same line-aligned ranges and the
    tallies merged as across processes, but each range scanned in this process: the split and
    the merge are what a property test checks line shape by line shape, and a process pool
    per example (about 0.3 s to start) made these tests most of the suite's time. Real
    processes: test_mixed_shapes_in_one_large_file_across_processes and the recorded files."""
    real = fast._scan_ranges
    fast._scan_ranges = lambda name, ranges, detail: [fast._scan_range(name, a, b, detail) for a, b in ranges]
    try:
        return _fast(path, workers=workers)
    finally:
        fast._scan_ranges = real


def _same_three_ways(lines: list[str], newline: str = "\n", final: bool = True) -> None:
    path = _write(lines, newline, final)
    try:
        expected = _reference(path)
        assert _fast(path) == expected
        assert _split_here(path, 3) == expected
        if newline == "\n" and final:
            assert _line_by_line(lines) == expected
    finally:
        path.unlink()


def test_hand_written_lines_of_every_shape_give_the_reference_profile():
    lines = [line for line, _ in LINES] + NOT_READ + ["", "garbage", "   ", "{", "[", '"time": ']
    _same_three_ways(lines)
    _same_three_ways(lines, "\r\n")


def test_recorded_shape_files_give_the_reference_profile():
    for path in sorted(DATA.glob("*.log")):
        assert _fast(path) == _reference(path), path.name
        assert _fast(path, workers=2) == _reference(path), path.name


def _counts(rng: random.Random, n: int) -> tuple[list[int], list[int]]:
    return ([int(rng.lognormvariate(7.0, 1.1)) for _ in range(n)], [int(rng.lognormvariate(5.0, 0.9)) for _ in range(n)])


@pytest.mark.parametrize("name", list(SHAPES))
def test_each_shape_is_read_by_the_vectorised_scan(name, monkeypatch, tmp_path):
    # the fast reader sends no line of these shapes to the line parser (counted, not timed)
    calls = []
    original = tally._reference  # both scanners hand their fallback lines to it
    monkeypatch.setattr(tally, "_reference", lambda raw: calls.append(raw) or original(raw))
    rng = random.Random(name)
    lines = []
    for k0 in (0, 90_000, 7_000_000):  # midnight, month and year boundaries come and go
        tin, tout = _counts(rng, 700)
        lines += shape_lines(SHAPES[name], k0, tin, tout)
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    assert _fast(path) == _reference(path)
    assert calls == []


# ------------------------------------------------------------------ generated and mutated lines

# pieces that touch a rule of the readers when dropped into a line
_FRAGMENTS = [
    '"', "'", "=", " ", "  ", "\t", ",", ";", "(", "{", "}", "[", "]", "\\", ":", "\r", "\x00", "é", "_",
    " time=2026-10-10T13:55:36Z", " ts=1791640536", " input_tokens=5", " output_tokens=6", " prompt_tokens=7",
    ' "created": 1791640537', ' "time": "2026-10-10T13:55:37Z"', '"prompt_tokens": 8,', ' [10/Oct/2026:13:55:37 +0000]',
    "[2026-10-10T13:55:37Z] ", " x=\"a b\"", "=\"", "='", " @timestamp=2026-10-10T13:55:37Z", "2026-10-10 13:55:37",
    " completion_tokens=\"9\"", "0", "9999999999", ".5", "+08:00", "Z", "-", "T",
]


@st.composite
def _shape_line(draw) -> str:
    shape = SHAPES[draw(st.sampled_from(list(SHAPES)))]
    k = draw(st.integers(0, 10_000_000))
    i, o = draw(st.integers(0, 20_000)), draw(st.integers(0, 3_000))
    return shape.line(k, i, o)


@st.composite
def _mutated(draw) -> str:
    line = draw(_shape_line())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(line)))
        how = draw(st.integers(0, 3))
        if how == 0:
            line = line[:at] + draw(st.sampled_from(_FRAGMENTS)) + line[at:]
        elif how == 1:
            line = line[:at] + line[at + draw(st.integers(1, 12)) :]
        elif how == 2:
            line = line[:at] + draw(st.text(max_size=3)).replace("\n", "") + line[at:]
        else:
            line = line[:at]  # cut short
    return line


_ODD = st.sampled_from(["", "   ", "\r", "noise", "GET /health 200", "{}", "[]", '{"usage": null}'])
_LINES = st.lists(st.one_of(_shape_line(), _mutated(), _mutated(), _ODD), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LINES, st.sampled_from(["\n", "\r\n"]), st.booleans())
def test_generated_and_mutated_lines_of_all_shapes_give_the_reference_profile(lines, newline, final):
    _same_three_ways(lines, newline, final)


@settings(max_examples=100, deadline=None)
@given(st.lists(_shape_line(), min_size=1, max_size=30), st.integers(0, 29), st.sampled_from(["tail", "head", "junk"]))
def test_an_over_long_line_among_shapes_is_skipped(lines, at, where):
    long = {"tail": lines[0] + " pad=" + "x" * MAX_LINE_BYTES, "head": "y" * (MAX_LINE_BYTES + 1) + lines[0],
            "junk": "z" * (MAX_LINE_BYTES + 5)}[where]
    lines = [*lines[:at], long, *lines[at:]]
    _same_three_ways(lines)


def test_mixed_shapes_in_one_large_file_across_processes(tmp_path):
    rng = random.Random(5)
    lines = []
    names = list(SHAPES)
    for block in range(60):
        shape = SHAPES[names[block % len(names)]]
        tin, tout = _counts(rng, 800)
        lines += shape_lines(shape, block * 800, tin, tout)
        lines += ["", "GET /health 200", shape.line(block, 5, 6)[:20]]
    path = tmp_path / "access.log"
    path.write_text("\n".join(lines) + "\n")
    expected = _reference(path)
    assert scan_access_log(path, workers=3).profile == expected
    assert scan_access_log(path, workers=1).profile == expected


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_LINES, st.integers(64, 2000))
def test_lines_read_in_many_small_blocks_give_the_reference_profile(lines, chunk):
    # line plans made in one block are used in the next ones
    path = _write(lines * 3)
    old = fast.CHUNK_BYTES
    fast.CHUNK_BYTES = chunk
    try:
        assert _fast(path) == _reference(path)
    finally:
        fast.CHUNK_BYTES = old
        path.unlink()


def test_a_plan_from_short_stamps_reads_longer_stamps_that_start_alike(tmp_path):
    short = [f"time=2026-03-09T{10 + k // 60:02d}{k % 60:02d}Z input_tokens={k} output_tokens=7" for k in range(600)]
    longer = [f"time=2026-03-09T1001:{k % 60:02d}Z input_tokens={k} output_tokens=7" for k in range(600)]
    longer += [f"time=2026-03-09T1001Zjunk input_tokens={k} output_tokens=7" for k in range(50)]
    path = tmp_path / "access.log"
    path.write_text("\n".join(short + longer + short) + "\n")
    old = fast.CHUNK_BYTES
    fast.CHUNK_BYTES = 8192
    try:
        assert _fast(path) == _reference(path)
    finally:
        fast.CHUNK_BYTES = old
