"""Vectorised scan of key=value access-log blocks (numpy), for `access_log_fast`.

A line is taken by the scan only when it has exactly this shape (a strict subset of what the
reference reader's fast regex in `collectors.parsers.access_log` takes, read the same way):

    [time=|ts=|timestamp=STAMP ]input_tokens=N output_tokens=M[ anything][\\r]

with `prompt_tokens=`/`completion_tokens=` as the other spellings, single spaces between the
fields, STAMP 1-64 bytes without whitespace or quotes, N and M of 1-9 digits, no control
bytes except a final CR, and, without a time key, no ` time=`/` ts=`/` timestamp=` later in
the line. Every other non-empty line goes, in arrival order, through the reference reader's
own logic (its regex, then `parse_access_line`), so the tallies are the ones it would make.

How: one pass finds the bytes <= 0x27 (newlines, spaces, control bytes, quotes); field ends
are the spaces of each line; keys are compared as unaligned 64-bit words; digits are
converted 8 at a time with the SWAR multiply-shift method.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime
from typing import Any

import numpy as np

from collectors.parsers.access_log import _FAST, parse_access_line
from collectors.parsers.log_time import parse_time
from collectors.parsers.textio import MAX_LINE_BYTES
from runbooks.model.evidence import BUCKETS
from runbooks.profile.requests import bucket_of

#: bytes a block must have after its last line: the widest word load reaches this far
PAD_BYTES = 256
#: token counts below this are tallied with bincount; larger ones in a Counter
SMALL_TOKENS = 1 << 17

_U64 = np.uint64
_ZEROS = _U64(0x3030303030303030)
_HI = _U64(0x8080808080808080)
_LO7 = _U64(0x7F7F7F7F7F7F7F7F)
_K76 = _U64(0x7676767676767676)
_FULL = _U64(0xFFFFFFFFFFFFFFFF)
_MAX_STAMP = 64
_MAX_TIME_CACHE = 200_000


def _word(text: bytes) -> np.uint64:
    return _U64(int.from_bytes(text.ljust(8, b"\0"), "little"))


def _mask(n: int) -> np.uint64:
    return _U64((1 << (8 * n)) - 1)


_TIME, _TS, _TIMESTAM, _P_EQ = _word(b"time="), _word(b"ts="), _word(b"timestam"), _word(b"p=")
_INPUT_TO, _KENS_EQ = _word(b"input_to"), _word(b"kens=")
_PROMPT_T, _OKENS_EQ = _word(b"prompt_t"), _word(b"okens=")
_OUTPUT_T = _word(b"output_t")
_COMPLETI, _ON_TOKEN, _S_EQ = _word(b"completi"), _word(b"on_token"), _word(b"s=")
_M2, _M3, _M5, _M6 = _mask(2), _mask(3), _mask(5), _mask(6)


class LineTooLong(Exception):
    """A line is longer than MAX_LINE_BYTES (the reference reader's handling of it depends on
    where its chunks fall, so the caller reads the file the reference way)."""


class BlockTally:
    """What a scan of some blocks found: token counts, the bucket of each request in arrival
    order, per-bucket lengths, and (time -> requests per bucket) in order of first arrival."""

    def __init__(self, detail: bool = False) -> None:
        self.inputs = np.zeros(SMALL_TOKENS, np.int64)
        self.outputs = np.zeros(SMALL_TOKENS, np.int64)
        self.inputs_big: Counter[int] = Counter()
        self.outputs_big: Counter[int] = Counter()
        self.detail = detail
        #: requests by (input + output tokens) x 4 + bucket index, for lengths below SMALL_TOKENS
        self.lengths = np.zeros(4 * SMALL_TOKENS, np.int64) if detail else None
        self.lengths_big: list[Counter[int]] = [Counter() for _ in range(4)]
        self.classes = bytearray()
        self.times: dict[datetime, list[int]] = {}
        self.skipped = 0

    def add_requests(self, v_in: np.ndarray, v_out: np.ndarray, cls: np.ndarray) -> None:
        self.classes += cls.tobytes()
        _count_into(self.inputs, self.inputs_big, v_in)
        _count_into(self.outputs, self.outputs_big, v_out)
        if self.lengths is not None:
            total = v_in + v_out
            small = total < SMALL_TOKENS
            if small.all():
                counts = np.bincount(total * 4 + cls)
            else:
                counts = np.bincount(total[small] * 4 + cls[small])
                for c, n in zip(cls[~small].tolist(), total[~small].tolist(), strict=True):
                    self.lengths_big[c][n] += 1
            self.lengths[: len(counts)] += counts

    def add_time(self, at: datetime, counts: list[int]) -> None:
        cell = self.times.get(at)
        if cell is None:
            self.times[at] = list(counts)
        else:
            for i, n in enumerate(counts):
                cell[i] += n


def _count_into(small: np.ndarray, big: Counter[int], values: np.ndarray) -> None:
    if not len(values):
        return
    fits = values < SMALL_TOKENS
    if fits.all():
        counts = np.bincount(values)
    else:
        counts = np.bincount(values[fits])
        keys, many = np.unique(values[~fits], return_counts=True)
        big.update(dict(zip(keys.tolist(), many.tolist(), strict=True)))
    small[: len(counts)] += counts


def _classes(v_in: np.ndarray, v_out: np.ndarray) -> np.ndarray:
    """Bucket index of each request (the runbook's rule, as `runbooks.profile.requests.bucket_of`)."""
    c_in = (v_in > 512).astype(np.uint8) + (v_in > 2048) + (v_in > 8192)
    c_out = (v_out > 128).astype(np.uint8) + (v_out > 256) + (v_out > 512)
    return np.maximum(c_in, c_out)


def _parse8(words: np.ndarray) -> np.ndarray:
    """Eight ASCII digits per word (first digit in the lowest byte, already minus '0')."""
    v = ((words & _U64(0x0F0F0F0F0F0F0F0F)) * _U64(2561)) >> _U64(8)
    v = ((v & _U64(0x00FF00FF00FF00FF)) * _U64(6553601)) >> _U64(16)
    return ((v & _U64(0x0000FFFF0000FFFF)) * _U64(42949672960001)) >> _U64(32)


#: by field length (clipped to 0..9): the bytes of a word loaded at end - 8 that belong to it
_KEEP = np.array([0] + [((1 << 64) - 1) ^ ((1 << (8 * (8 - n))) - 1) for n in range(1, 9)] + [(1 << 64) - 1],
                 dtype=np.uint64)


def _digits(words: np.ndarray, a: np.ndarray, start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(value, valid) of the 1-9 digit fields [start, end).

    A field of fewer than 14 bytes from the block start cannot be valid (keys come first), so
    the word load never needs a bounds check: a negative index only meets invalid fields.
    """
    length = end - start
    keep = _KEEP[np.clip(length, 0, 9)]
    w = words[end - 8] ^ _ZEROS
    high = ((w & _HI) | (((w & _LO7) + _K76) & _HI)) & keep
    value = _parse8(w & keep).view(np.int64)
    valid = (high == 0) & (keep != 0) & (length <= 9)
    nine = np.flatnonzero(length == 9)
    if len(nine):
        first = a[start[nine]].astype(np.int64) - 48
        value[nine] += first * 100_000_000
        valid[nine] &= (first >= 0) & (first <= 9)
    return value, valid


def _spaces(low: np.ndarray, types: np.ndarray, nl_at: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(space positions padded with sentinels, index of each line's first space, spaces per line)."""
    n = len(nl_at)
    first = np.empty(n, np.int64)
    first[0] = 0
    is_sp = types == 32
    if np.count_nonzero(is_sp) + n == len(low):
        # only newlines and spaces: a line's spaces sit between its newlines in `low`
        first[1:] = nl_at[:-1] + 1
        return np.concatenate([low, np.full(3, size + 1, np.int64)]), first, nl_at - first
    upto = np.cumsum(is_sp)[nl_at]
    first[1:] = upto[:-1]
    return np.concatenate([low[is_sp], np.full(3, size + 1, np.int64)]), first, upto - first


def _prefix(words: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray | int]:
    """(line has a time key, length of `time=`/`ts=`/`timestamp=`)."""
    w0 = words[starts]
    is_time = (w0 & _M5) == _TIME
    if is_time.all():
        return is_time, 5
    is_ts = (w0 & _M3) == _TS
    is_tstamp = w0 == _TIMESTAM
    if is_tstamp.any():
        is_tstamp &= (words[starts + 8] & _M2) == _P_EQ
    prefix = np.where(is_time, 5, np.where(is_ts, 3, np.where(is_tstamp, 10, 0)))
    return prefix > 0, prefix


def _key(words: np.ndarray, at: np.ndarray, short: tuple, long: tuple) -> tuple[np.ndarray, np.ndarray]:
    """(is one of the two spellings, where its digits start) for keys at `at`."""
    (w1, tail1, mask1, len1), (w2, tail2, mask2, len2) = short, long
    first, second = words[at], words[at + 8]
    hit = (first == w1) & ((second & mask1) == tail1)
    if hit.all():
        return hit, at + len1
    other = (first == w2) & ((second & mask2) == tail2)
    if len2 > 16:
        other &= (words[at + 16] & _M2) == _S_EQ
    return hit | other, at + np.where(hit, len1, len2)


_IN_KEYS = ((_INPUT_TO, _KENS_EQ, _M5, 13), (_PROMPT_T, _OKENS_EQ, _M6, 14))
_OUT_KEYS = ((_OUTPUT_T, _OKENS_EQ, _M6, 14), (_COMPLETI, _ON_TOKEN, _FULL, 18))


def scan_block(buf: bytearray, size: int, tally: BlockTally, cache: dict[bytes, datetime | None],
               allow_long: bool = False) -> None:
    """Tally the lines of `buf[:size]` (whole lines, the last one ending with b"\\n");
    `buf` must hold PAD_BYTES more after `size`."""
    a = np.frombuffer(buf, np.uint8)
    words = np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
    low = np.flatnonzero(a[:size] <= 39)
    types = a[low]
    nl_at = np.flatnonzero(types == 10)
    nl = low[nl_at]
    n = len(nl)
    if n == 0:
        return
    starts = np.empty(n, np.int64)
    starts[0] = 0
    starts[1:] = nl[:-1] + 1
    lengths = nl - starts
    if not allow_long and int(lengths.max()) > MAX_LINE_BYTES:
        raise LineTooLong()
    sp, first_sp, spaces = _spaces(low, types, nl_at, size)
    eol, bad, quotes = _odd_bytes(low, types, nl, lengths)

    timed, prefix = _prefix(words, starts)
    stamp_start = starts + prefix
    stamp_end = sp[first_sp]
    stamp_len = stamp_end - stamp_start
    ok = ~bad & (spaces >= 1 + timed) & (~timed | ((stamp_len >= 1) & (stamp_len <= _MAX_STAMP)))
    if quotes is not None:
        quote_pos, quote_line = quotes
        in_stamp = timed[quote_line] & (quote_pos < stamp_end[quote_line])
        ok[quote_line[in_stamp]] = False

    all_timed = bool(timed.all())
    j = first_sp + 1 if all_timed else first_sp + timed
    key1 = stamp_end + 1 if all_timed else np.where(timed, stamp_end + 1, starts)
    is_in, d1 = _key(words, key1, *_IN_KEYS)
    end1 = sp[j]
    v_in, ok_in = _digits(words, a, d1, end1)
    is_out, d2 = _key(words, end1 + 1, *_OUT_KEYS)
    end2 = np.where(spaces >= 2 + timed, sp[j + 1], eol)
    v_out, ok_out = _digits(words, a, d2, end2)
    ok &= is_in & ok_in & is_out & ok_out
    if not all_timed:
        _untimed_clash(a, words, sp, nl, timed, ok)

    events: list[tuple[int, datetime, list[int]]] = []
    if ok.all():
        cls = _classes(v_in, v_out)
        _timed_runs(buf, words, np.arange(n) if all_timed else np.flatnonzero(timed), stamp_start, stamp_len,
                    cls, events, cache)
        for _, at, counts in events:
            tally.add_time(at, counts)
        tally.add_requests(v_in, v_out, cls)
        return
    cls = np.full(n, 255, np.uint8)
    cls[ok] = _classes(v_in[ok], v_out[ok])
    fallback = np.flatnonzero(~ok & (lengths > 0))
    if len(fallback):
        _fallback(buf, starts, nl, fallback, v_in, v_out, cls, events, cache, tally)
    _timed_runs(buf, words, np.flatnonzero(ok & timed), stamp_start, stamp_len, cls, events, cache)
    events.sort(key=lambda e: e[0])
    for _, at, counts in events:
        tally.add_time(at, counts)
    req = cls != 255
    tally.add_requests(v_in[req], v_out[req], cls[req])


def _odd_bytes(low: np.ndarray, types: np.ndarray, nl: np.ndarray,
               lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[np.ndarray, np.ndarray] | None]:
    """(end of each line before a final CR, lines the scan must not take, (quote, its line))."""
    eol = nl
    bad = lengths == 0
    odd_sel = (types < 32) & (types != 10) | (types == 34) | (types == 39)
    if not odd_sel.any():
        return eol, bad, None
    odd, odd_t = low[odd_sel], types[odd_sel]
    line_of = np.searchsorted(nl, odd)
    cr_end = (odd_t == 13) & (odd + 1 == nl[line_of])
    eol = nl.copy()
    eol[line_of[cr_end]] -= 1
    bad[line_of[(odd_t < 32) & ~cr_end]] = True
    quote = odd_t >= 32
    return eol, bad, ((odd[quote], line_of[quote]) if quote.any() else None)


def _untimed_clash(a: np.ndarray, words: np.ndarray, sp: np.ndarray, nl: np.ndarray, timed: np.ndarray,
                   ok: np.ndarray) -> None:
    """Without a time key the reference regex takes no line with ` time=`-like keys later on."""
    spaces = sp[:-3]
    after = spaces[a[spaces] == 32] + 1  # `sp` may hold the newlines too
    w = words[after]
    clash = ((w & _M5) == _TIME) | ((w & _M3) == _TS) | ((w == _TIMESTAM) & ((words[after + 8] & _M2) == _P_EQ))
    if clash.any():
        lines = np.searchsorted(nl, after[clash])
        ok[lines[~timed[lines]]] = False


def _stamp_time(stamp: bytes, cache: dict[bytes, datetime | None]) -> datetime | None:
    at = cache.get(stamp, False)
    if at is False:
        if len(cache) >= _MAX_TIME_CACHE:
            cache.clear()
        at = cache[stamp] = parse_time(stamp.decode("ascii", "replace")) if stamp else None
    return at  # type: ignore[return-value]


def _one_hot(cls: int) -> list[int]:
    counts = [0, 0, 0, 0]
    counts[cls] = 1
    return counts


def _fallback(buf: bytearray, starts: np.ndarray, ends: np.ndarray, lines: np.ndarray, v_in: np.ndarray,
              v_out: np.ndarray, cls: np.ndarray, events: list[tuple[int, datetime, list[int]]],
              cache: dict[bytes, datetime | None], tally: BlockTally) -> None:
    """Lines the scan does not take, read exactly as the reference reader reads them."""
    for i, s, e in zip(lines.tolist(), starts[lines].tolist(), ends[lines].tolist(), strict=True):
        found = _reference(bytes(buf[s:e]), cache)
        if found is _IGNORED:
            continue
        if found is None:
            tally.skipped += 1
            continue
        n_in, n_out, at = found
        c = BUCKETS.index(bucket_of(n_in, n_out))
        v_in[i], v_out[i], cls[i] = n_in, n_out, c
        if at is not None:
            events.append((i, at, _one_hot(c)))


_IGNORED = ("ignored",)


def _reference(raw: bytes, cache: dict[bytes, datetime | None]) -> Any:
    """The reference reader's reading of one line: (input, output, time), None when it counts
    the line as skipped, or _IGNORED for a blank line (its regex first, then the line parser)."""
    m = _FAST.match(raw)
    if m is not None and m.group(4) is None:
        return int(m.group(2)), int(m.group(3)), _stamp_time(m.group(1) or b"", cache)
    if len(raw) > MAX_LINE_BYTES:
        return None
    text = raw.decode("utf-8", "replace")
    if not text.strip():
        return _IGNORED
    return parse_access_line(text)


def _timed_runs(buf: bytearray, words: np.ndarray, idx: np.ndarray, stamp_start: np.ndarray,
                stamp_len: np.ndarray, cls: np.ndarray, events: list[tuple[int, datetime, list[int]]],
                cache: dict[bytes, datetime | None]) -> None:
    """Group scanned timed lines into runs of one stamp; one event per run."""
    if not len(idx):
        return
    everything = len(idx) == len(stamp_len)  # then idx is every line, in order
    st = stamp_start if everything else stamp_start[idx]
    ln = stamp_len if everything else stamp_len[idx]
    shortest, longest = int(ln.min()), int(ln.max())
    same = ln[1:] == ln[:-1] if shortest != longest else np.ones(len(ln) - 1, bool)
    for w in range((longest + 7) // 8):
        word = words[st + 8 * w]
        if w * 8 + 8 > shortest:
            rest = np.clip(ln - 8 * w, 0, 8)
            word &= _KEEP_LOW[rest]
        same &= word[1:] == word[:-1]
    heads = np.concatenate([[0], np.flatnonzero(~same) + 1])
    c = cls if everything else cls[idx]
    if len(heads) == 1:
        per_run = [np.bincount(c, minlength=4).tolist()]
    else:
        run_of = np.cumsum(np.concatenate([[False], ~same]))
        per_run = np.bincount(run_of * 4 + c, minlength=4 * len(heads)).reshape(-1, 4).tolist()
    view = memoryview(buf)
    lines = heads if everything else idx[heads]
    for counts, line, s, n in zip(per_run, lines.tolist(), st[heads].tolist(), ln[heads].tolist(), strict=True):
        at = _stamp_time(bytes(view[s : s + n]), cache)
        if at is not None:
            events.append((line, at, counts))


#: by byte count 0..8: a mask of that many low bytes
_KEEP_LOW = np.array([(1 << (8 * n)) - 1 for n in range(9)], dtype=np.uint64)
