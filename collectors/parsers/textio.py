"""Streaming reads of large text files in flat memory: blocks of whole lines, or lines.

A file is read in binary chunks; the partial last line of a chunk is carried into the next.
A line longer than `max_line_bytes` is never held whole: it is dropped while reading and an
empty line stands in its place, so line numbers stay right.

>>> import io
>>> list(iter_lines(io.BytesIO(b"a\\nbb\\nccc"), chunk_bytes=2))
[b'a', b'bb', b'ccc']
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import BinaryIO

from runbooks.model.units import MIB

CHUNK_BYTES = 4 * MIB
MAX_LINE_BYTES = 64 * 1024


class BlockReader:
    """Blocks of whole lines from a binary stream: each ends with b"\\n" except maybe the last.

    A line longer than `max_line_bytes` that spans chunks is dropped while reading (an empty
    line stands in for it) and counted in `dropped_lines`; shorter over-long lines inside one
    chunk are left for the caller to judge.
    """

    def __init__(
        self, stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES
    ) -> None:
        self._stream = stream
        self._chunk_bytes = max(1, chunk_bytes)
        self._max_line_bytes = max_line_bytes
        self.dropped_lines = 0

    def __iter__(self) -> Iterator[bytes]:
        carry = b""
        skipping = False  # inside an over-long line: drop bytes until its newline
        while True:
            chunk = self._stream.read(self._chunk_bytes)
            if not chunk:
                break
            if skipping:
                end = chunk.find(b"\n")
                if end < 0:
                    continue
                skipping = False
                self.dropped_lines += 1
                yield b"\n"
                chunk = chunk[end + 1 :]
            data = carry + chunk if carry else chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
            else:
                yield data[: cut + 1]
                carry = data[cut + 1 :]
            if len(carry) > self._max_line_bytes:
                carry = b""
                skipping = True
        if skipping:
            self.dropped_lines += 1
            yield b"\n"
        elif carry:
            yield carry


def iter_blocks(
    stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[bytes]:
    """`BlockReader` as a plain iterator, for callers that need no count of dropped lines."""
    return iter(BlockReader(stream, chunk_bytes, max_line_bytes))


def split_block(block: bytes) -> list[bytes]:
    """The lines of a block, without their newlines (a final newline adds no empty line)."""
    lines = block.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    return lines


def iter_lines(
    stream: BinaryIO, chunk_bytes: int = CHUNK_BYTES, max_line_bytes: int = MAX_LINE_BYTES
) -> Iterator[bytes]:
    """The lines of a binary stream, without newlines, in flat memory."""
    for block in iter_blocks(stream, chunk_bytes, max_line_bytes):
        yield from split_block(block)


def decode_line(raw: bytes | str, max_line_bytes: int = MAX_LINE_BYTES) -> str:
    """A line as text: undecodable bytes replaced, a trailing CR dropped, over-long lines emptied."""
    if len(raw) > max_line_bytes:
        return ""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    return text[:-1] if text.endswith("\r") else text
