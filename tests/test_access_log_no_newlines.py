"""An access log without newlines costs neither its size in memory nor a wrong profile: the
split into worker ranges reads a chunk at a time, and an over-long line is skipped and counted."""

from __future__ import annotations

import io

from collectors.access_logs.fast import _next_line_start, _ranges, scan_access_log


class _Counting(io.BytesIO):
    def __init__(self, data: bytes):
        super().__init__(data)
        self.largest_read = 0

    def read(self, size: int | None = -1) -> bytes:
        out = super().read(size)
        self.largest_read = max(self.largest_read, len(out))
        return out


def test_finding_the_next_line_reads_a_chunk_at_a_time():
    data = b"x" * (5 << 20) + b"\nnext"
    fh = _Counting(data)
    assert _next_line_start(fh, 10, len(data)) == (5 << 20) + 1
    assert fh.largest_read <= 1 << 16
    assert _next_line_start(_Counting(b"no newline at all"), 3, 17) == 17


def test_a_file_without_newlines_is_one_range(tmp_path):
    path = tmp_path / "access.log"
    path.write_bytes(b"input_tokens=100 output_tokens=20 " * 100_000)
    size = path.stat().st_size
    assert _ranges(path, size, 2) == [(0, size)]


def test_an_endless_line_between_requests_is_skipped_and_the_requests_counted(tmp_path):
    path = tmp_path / "access.log"
    good = b"input_tokens=100 output_tokens=20\n" * 500
    path.write_bytes(good + b"y" * (3 << 20) + b"\n" + good)
    scan = scan_access_log(path, "access.log", workers=2)
    assert (scan.profile.total, scan.profile.skipped_lines) == (1000, 1)
