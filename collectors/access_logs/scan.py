"""The vectorised numpy scan of access-log blocks, for installs where the compiled line scanner
(`_access_native.c`, which `tally.scan_block` uses when it was built) could not be built. Both
keep the same contract and tally into the same `tally.BlockTally`.

The scan reads a line the way `collectors.access_logs.reference.parse_access_line` does, and it
takes a line only when it can show that the two readings agree; every other non-empty line
goes, in arrival order, to `parse_access_line` itself, so the tallies are always the ones the
line-by-line reader makes. What the scan takes:

- key=value fields in any order among any others (`input_tokens=`/`prompt_tokens=`,
  `output_tokens=`/`completion_tokens=`, `time=`/`ts=`/`timestamp=`/`@timestamp=`), values
  bare or in double quotes, the first of each key counting, as the reference reads them;
- counts written any other way it reads with its `input_tokens: N` search (JSON lines:
  `"prompt_tokens": 512` anywhere, nested among any other objects), when each count is named
  exactly once on the line;
- times: RFC 3339 / ISO 8601 (`2026-10-10T13:55:36.123+08:00`, `Z`, with or without seconds,
  1-9 fraction digits, the compact `2026-03-09T2011Z`), Unix epochs in seconds (with up to 6
  fraction digits) and milliseconds, each as a key value, as a JSON `"created"`/`"time"`/...
  value, in brackets at the start (Envoy), or as the nginx/Apache `[10/Oct/2026:13:55:36 +0000]`.

A JSON line (one starting with `{`) is read by the reference as JSON when it parses and its
usage holds the counts; the scan reads it as text. The two agree when each count and each
time key is named once and every time key sits at the top level, which the scan checks
(braces counted outside strings), so whether the line is valid JSON never needs deciding.

Lines are refused (and read by the reference) for anything outside that: control bytes
other than a final CR, non-ASCII bytes, a leading blank, a key inside quotes, a `'` near
keys, a value of 10 or more digits, a time in any other layout, a time that is no real date,
and so on. A line longer than MAX_LINE_BYTES is counted as skipped, as the reference does.

How: one pass over the block finds the few bytes that matter (newlines and control bytes,
`=`, `[`; in blocks with JSON lines also braces, `_`, a quote before `t`/`c`, backslashes);
quotes are kept as a packed bit array, and the quotes before a position are counted with
popcounts. Key=value lines are read by line plans: a plan, made from one line, says which
token holds which key and where the time comes from, and lists the bytes each of those
decisions reads; every line of the block with the same tokens is checked column by column
against those bytes and read by the plan (plans carry over from block to block). Lines no
plan fits are read token by token (`_general`). Keys are recognised by comparing unaligned
64-bit words before each `=` and after each quote; digits are converted 8 at a time with
the SWAR multiply-shift method, two at a time in times; dates become days by table.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectors.access_logs.tally import (
    FRONT_BYTES,
    LOCAL,
    PAD_BYTES,
    SMALL_TOKENS,
    BlockTally,
    epoch_micros,
    reference_request,
)
from collectors.parsers.textio import MAX_LINE_BYTES

_U64 = np.uint64
_ZEROS = _U64(0x3030303030303030)
_HI = _U64(0x8080808080808080)
_LO7 = _U64(0x7F7F7F7F7F7F7F7F)
_K76 = _U64(0x7676767676767676)
_ONE = _U64(1)
_US = 1_000_000
#: the years whose times the scan converts (offsets cannot leave them; epochs stay positive)
_MIN_YEAR, _MAX_YEAR = 1971, 9998
#: Unix epochs parse_access_line takes as times (2000 to 2100), in seconds
_EPOCH_MIN_S, _EPOCH_MAX_S = 946_684_800, 4_102_444_800

# line states
_FALLBACK, _FAST, _IGNORED, _SKIPPED = 0, 1, 2, 3
# kinds of key=value keys
_IN_A, _IN_B, _OUT_A, _OUT_B, _TIME = 0, 1, 2, 3, 4


def _w(text: bytes) -> np.uint64:
    """Up to 8 bytes as the little-endian word a load at their first byte gives."""
    return _U64(int.from_bytes(text.ljust(8, b"\0")[:8], "little"))


def _mask(n: int) -> np.uint64:
    return _U64((1 << (8 * n)) - 1)


_M = [_mask(n) for n in range(9)]


# ----------------------------------------------------------------------------- tallies


def _add_requests(tally: BlockTally, v_in: np.ndarray, v_out: np.ndarray, cls: np.ndarray) -> None:
    tally.classes += cls.tobytes()
    _count_into(np.frombuffer(tally.inputs, np.int64), tally.inputs_big, v_in)
    _count_into(np.frombuffer(tally.outputs, np.int64), tally.outputs_big, v_out)
    if tally.lengths is not None:
        lengths = np.frombuffer(tally.lengths, np.int64)
        total = v_in + v_out
        small = total < SMALL_TOKENS
        if small.all():
            counts = np.bincount(total * 4 + cls)
        else:
            counts = np.bincount(total[small] * 4 + cls[small])
            for c, n in zip(cls[~small].tolist(), total[~small].tolist(), strict=True):
                tally.lengths_big[c][n] += 1
        lengths[: len(counts)] += counts


def _add_times(tally: BlockTally, seconds: np.ndarray, micros: np.ndarray, cls: np.ndarray) -> None:
    """Timed requests in arrival order: their second (int(time.timestamp())), their time
    in µs, their bucket. Kept per minute (second // 60): the profile builders bin by
    60 s, or a power of two times that, so a minute falls in one bin whatever the width."""
    if not len(seconds):
        return
    tally.see_times(int(micros.min()), int(micros.max()))
    minutes = seconds // 60
    heads = np.flatnonzero(minutes[1:] != minutes[:-1]) + 1
    if not len(heads):
        tally.add_time(int(minutes[0]), np.bincount(cls, minlength=4).tolist())
        return
    run_of = np.zeros(len(minutes), np.int64)
    run_of[heads] = 1
    np.cumsum(run_of, out=run_of)
    per_run = np.bincount(run_of * 4 + cls, minlength=4 * (len(heads) + 1)).reshape(-1, 4).tolist()
    for minute, counts in zip(minutes[np.concatenate(([0], heads))].tolist(), per_run, strict=True):
        tally.add_time(minute, counts)


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


# ----------------------------------------------------------------------------- digits


def _parse8(words: np.ndarray) -> np.ndarray:
    """Eight ASCII digits per word (first digit in the lowest byte, already minus '0')."""
    v = ((words & _U64(0x0F0F0F0F0F0F0F0F)) * _U64(2561)) >> _U64(8)
    v = ((v & _U64(0x00FF00FF00FF00FF)) * _U64(6553601)) >> _U64(16)
    return ((v & _U64(0x0000FFFF0000FFFF)) * _U64(42949672960001)) >> _U64(32)


def _nondigits(w: np.ndarray) -> np.ndarray:
    """The high bit of each byte of `w` that is not an ASCII digit."""
    x = w ^ _ZEROS
    return (x | ((x & _LO7) + _K76)) & _HI


def _is_digit(a: np.ndarray, at: np.ndarray) -> np.ndarray:
    return (a[at] - np.uint8(48)) < 10


def _count_at(words: np.ndarray, a: np.ndarray, d0: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(run, value, byte after) of the digits starting at each of `d0`: run is the number of
    digits (0-9, 10 meaning more), from one word load (two more bytes for a 9th digit)."""
    x = words[d0]
    nd = _nondigits(x)
    run = np.bitwise_count((nd - _U64(1)) & ~nd).astype(np.int64) >> 3  # index of the first non-digit
    shift = (np.minimum(8 - run, 7) * 8).astype(np.uint64)
    value = _parse8(((x ^ _ZEROS) << shift) & ~((_U64(1) << shift) - _U64(1))).view(np.int64)
    value[run == 0] = 0
    after = ((x >> (np.minimum(run, 7) * 8).astype(np.uint64)) & _U64(0xFF)).astype(np.uint8)
    full = np.flatnonzero(run == 8)
    if len(full):
        ninth, tenth = a[d0[full] + 8], a[d0[full] + 9]
        nine = (ninth - np.uint8(48)) < 10
        run[full] = np.where(nine, np.where((tenth - np.uint8(48)) < 10, 10, 9), 8)
        value[full] = np.where(nine, value[full] * 10 + ninth.astype(np.int64) - 48, value[full])
        after[full] = np.where(nine, tenth, ninth)
    return run, value, after


def _row_words(words: np.ndarray, s: np.ndarray, n_words: int) -> np.ndarray:
    """The 8 * n_words bytes from each of `s`, as words: w[k] holds bytes 8k..8k+7 of every row."""
    w = np.empty((n_words, len(s)), np.uint64)
    for k in range(n_words):
        w[k] = words[s + 8 * k]
    return w


def _bytes8(w: np.ndarray, j: int | np.ndarray) -> np.ndarray:
    """The 8 bytes from byte j of each row of words `w` (j the same for all rows, or one per row)."""
    if not isinstance(j, int):
        if len(j) and (j == j[0]).all():
            j = int(j[0])
        elif not len(j):
            return np.zeros(0, np.uint64)
    if isinstance(j, int):
        q, r = divmod(j, 8)
        if r == 0:
            return w[q]
        return (w[q] >> _U64(8 * r)) | (w[q + 1] << _U64(64 - 8 * r))
    rows = np.arange(w.shape[1])
    q = j >> 3
    r = ((j & 7) * 8).astype(np.uint64)
    return (w[q, rows] >> r) | ((w[q + 1, rows] << (_U64(63) - r)) << _ONE)


def _byte(w: np.ndarray, j: int | np.ndarray) -> np.ndarray:
    return (_bytes8(w, j) & _U64(0xFF)).astype(np.uint8)


def _digits_at(w: np.ndarray, j: int | np.ndarray, k: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(all digits, value) of the k bytes (0-8) from byte j of each row."""
    x = _bytes8(w, j) ^ _ZEROS
    bits = np.asarray(k, np.uint64) * _U64(8)
    low = np.where(bits >= 64, _U64(0xFFFFFFFFFFFFFFFF), (_ONE << np.minimum(bits, _U64(63))) - _ONE)
    ok = ((x | ((x & _LO7) + _K76)) & _HI & low) == 0
    up = _U64(64) - bits
    value = _parse8(((x & low) << np.minimum(up, _U64(63))) * (up < 64)).view(np.int64)
    return ok, value


def _run_at(w: np.ndarray, j: int | np.ndarray) -> np.ndarray:
    """The number of digits (0-8) from byte j of each row."""
    nd = _nondigits(_bytes8(w, j))
    return np.bitwise_count((nd - _ONE) & ~nd).astype(np.int64) >> 3


# ----------------------------------------------------------------------------- times

_YEARS = np.arange(_MIN_YEAR, _MAX_YEAR + 1, dtype=np.int64)
_LEAP = (_YEARS % 4 == 0) & ((_YEARS % 100 != 0) | (_YEARS % 400 == 0))
#: days from 1970-01-01 to 1 January of each year the scan converts (1970 had 365 days)
_YEAR_DAYS = np.cumsum(np.concatenate(([365], 365 + _LEAP[:-1]))).astype(np.int64)
#: days before each month (1-12; index 0 and 13 unused), for common and leap years, and days in it
_MONTH_START = np.array([[0, 0, 31, 59, 90, 120, 151, 181, 212, 243, 273, 304, 334, 0],
                         [0, 0, 31, 60, 91, 121, 152, 182, 213, 244, 274, 305, 335, 0]], np.int64)
_MONTH_DAYS = np.array([[0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0],
                        [0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31, 0]], np.int64)


def _micros(y: np.ndarray, mo: np.ndarray, d: np.ndarray, h: np.ndarray, mi: np.ndarray, s: np.ndarray,
            us: np.ndarray, offset_min: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(µs since the epoch, is a real date in the years the scan converts) of civil fields."""
    yi = np.clip(y - _MIN_YEAR, 0, len(_YEARS) - 1)
    mo_c = np.clip(mo, 0, 13)
    leap = _LEAP[yi].astype(np.int64)
    ok = (y >= _MIN_YEAR) & (y <= _MAX_YEAR) & (mo >= 1) & (mo <= 12) & (h <= 23) & (mi <= 59) & (s <= 59)
    ok &= (d >= 1) & (d <= _MONTH_DAYS[leap, mo_c])
    days = _YEAR_DAYS[yi] + _MONTH_START[leap, mo_c] + d - 1
    seconds = days * 86400 + h * 3600 + mi * 60 + s - offset_min * 60
    return seconds * _US + us, ok


#: words read from a stamp's start: the longest ISO time the scan takes (35 bytes) and what follows
_STAMP_WORDS = 6


# "YYYY-MM-DDTHH:MM:SS": digits where the template has '0', the other bytes as they are
_ISO_T0 = _w(b"0000-00-")
_ISO_T1 = _w(b"00T00:00")
_ISO_T2 = _w(b":00")  # and the fraction mark or zone after it, checked apart
_PAIRS = _U64(0x00FF00FF00FF00FF)


def _pairs(x: np.ndarray) -> np.ndarray:
    """Per 16-bit lane of bytes already minus '0': 10 x the lower byte + the upper one."""
    return ((x & _PAIRS) * _U64(10)) + ((x >> _U64(8)) & _PAIRS)


def _lane(x: np.ndarray, k: int) -> np.ndarray:
    return ((x >> _U64(16 * k)) & _U64(0xFFFF)).astype(np.int64)


def _iso_seconds(w: np.ndarray, bare: bool) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """(is `YYYY-MM-DD[T ]HH:MM:SS`, (y, mo, d, h, mi, s)) at the start of each row: one masked
    compare per word for the layout, paired digits for the fields."""
    x0 = w[0] ^ _ISO_T0
    x1 = w[1] ^ _ISO_T1
    x2 = (w[2] & _M[3]) ^ _ISO_T2
    space = ((w[1] >> _U64(16)) & _U64(0xFF)) == 32  # the date and time may be parted by a blank
    if not bare:
        x1 = np.where(space, x1 ^ _U64(0x740000), x1)  # 'T' ^ ' ' in byte 2
    # digit bytes (now 0-9) must stay below 10; separator bytes (now 0) too, and be 0
    high = (x0 | ((x0 & _LO7) + _K76)) | (x1 | ((x1 & _LO7) + _K76)) | (x2 | ((x2 & _LO7) + _K76))
    ok = (high & _HI) == 0
    ok &= ((x0 >> _U64(32)) & _U64(0xFF)) == 0
    ok &= (x0 >> _U64(56)) == 0
    ok &= ((x1 >> _U64(16)) & _U64(0xFF)) == 0
    ok &= ((x1 >> _U64(40)) & _U64(0xFF)) == 0
    ok &= (x2 & _U64(0xFF)) == 0
    p0, q0 = _pairs(x0), _pairs(x0 >> _U64(8))
    p1, q1 = _pairs(x1), _pairs(x1 >> _U64(8))
    q2 = _pairs(x2 >> _U64(8))
    fields = (_lane(p0, 0) * 100 + _lane(p0, 1), _lane(q0, 2), _lane(p1, 0), _lane(q1, 1), _lane(p1, 3), _lane(q2, 0))
    return ok, fields


def _iso(w: np.ndarray, bracket: bool = False, bare: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ISO 8601 times at the start of each row of words `w`: (length, µs, ok), read as
    `parse_time` reads them. The time part is HH:MM:SS[.f], HH:MM or HHMM, then a zone (Z,
    z, +HH:MM, +HHMM, +HH) or none; the caller checks what follows. `bracket`: the prefix
    `_BRACKET_TIME` takes (seconds required, then as much fraction and zone as it matches).
    `bare`: a key=value value without quotes, which a blank or a comma would end (so `T`
    and `.` only). Layouts the scan does not convert are not ok (the reference reads them)."""
    fast, (y, mo, d, h, mi_e, sec) = _iso_seconds(w, bare)
    if fast.all():  # the common layout: every row has seconds in the extended form
        p = np.full(w.shape[1], 19, np.int64)
        return _iso_tail(w, bracket, bare, fast.copy(), fast, p, (y, mo, d, h, mi_e, sec))
    ok_y, y = _digits_at(w, 0, 4)
    ok_mo, mo = _digits_at(w, 5, 2)
    ok_d, d = _digits_at(w, 8, 2)
    ok_h, h = _digits_at(w, 11, 2)
    b0 = w[0]
    dashes = ((b0 >> _U64(32)) & _U64(0xFF)) == 45
    dashes &= (b0 >> _U64(56)) == 45
    sep = _byte(w, 10)
    ok = ok_y & ok_mo & ok_d & ok_h & dashes & ((sep == 84) if bare else ((sep == 84) | (sep == 32)))
    c13 = _byte(w, 13)
    ext = c13 == 58
    ok_me, mi_e = _digits_at(w, 14, 2)
    ok_mc, mi_c = _digits_at(w, 13, 2)
    ok_s, sec = _digits_at(w, 17, 2)
    with_sec = ext & ok_me & (_byte(w, 16) == 58) & ok_s
    if bracket:
        ok &= with_sec
        p = np.full(w.shape[1], 19, np.int64)
    else:
        no_sec_e = ext & ok_me & ~with_sec
        ok_sc, _ = _digits_at(w, 15, 2)
        compact = ~ext & ok_mc & ~ok_sc  # HHMMSS is left to the reference
        ok &= with_sec | no_sec_e | compact
        p = np.where(with_sec, 19, np.where(no_sec_e, 16, 15))
    mi = np.where(ext, mi_e, mi_c)
    sec = np.where(with_sec, sec, 0)
    return _iso_tail(w, bracket, bare, ok, with_sec, p, (y, mo, d, h, mi, sec))


def _iso_tail(w: np.ndarray, bracket: bool, bare: bool, ok: np.ndarray, with_sec: np.ndarray, p: np.ndarray,
              fields: tuple[np.ndarray, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The fraction and zone after the time part (which ends at byte p), and the time."""
    y, mo, d, h, mi, sec = fields
    # fraction after seconds: [.,] and digits (1-9 taken; the bracket regex stops after 9)
    mark = _byte(w, p)
    dot = with_sec & ((mark == 46) | ((mark == 44) & (not bare)))
    run = np.where(dot, _run_at(w, p + 1), 0)
    more = np.flatnonzero(run == 8)
    if len(more):
        run[more] += _run_at(w[:, more], p[more] + 9)
    ok &= ~dot | (run >= 1)  # `.` without digits: left to the reference
    if not bracket:
        ok &= run <= 9
    six = np.minimum(run, 6)
    _, frac = _digits_at(w, p + 1, six)
    us = frac * _POW10[6 - six]
    q = p + np.where(run > 0, 1 + np.minimum(run, 9), 0)
    zone_len, offset, zone_ok = _zone(w, q)
    if bracket:
        late = run > 9  # a 10th digit follows the 9 the regex takes: no zone
        zone_len[late] = 0
        offset[late] = 0
        zone_ok[late] = True
    micros, real = _micros(y, mo, d, h, mi, sec, us, offset)
    return q + zone_len, micros, ok & zone_ok & real


_POW10 = 10 ** np.arange(10, dtype=np.int64)


def _zone(w: np.ndarray, q: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(length, offset in minutes, ok) of the zone at byte q of each row: Z, z, +HH:MM, +HHMM,
    +HH or none (as `parse_time`'s regex takes it, greedily)."""
    x = _bytes8(w, q)
    z = (x & _U64(0xFF)).astype(np.uint8)
    zulu = (z == 90) | (z == 122)
    ok_h, zh = _digits_at(w, q + 1, 2)
    signed = ((z == 43) | (z == 45)) & ok_h
    ok_c, zm_c = _digits_at(w, q + 4, 2)
    ok_b, zm_b = _digits_at(w, q + 3, 2)
    long_c = signed & (((x >> _U64(24)) & _U64(0xFF)) == 58) & ok_c
    long_b = signed & ~long_c & ok_b
    zm = np.where(long_c, zm_c, np.where(long_b, zm_b, 0))
    zone_len = np.where(zulu, 1, np.where(long_c, 6, np.where(long_b, 5, np.where(signed, 3, 0))))
    offset = np.where(signed, np.where(z == 45, -1, 1) * (zh * 60 + zm), 0)
    return zone_len, offset, ~signed | ((zh <= 23) & (zm <= 59))


def _epoch(w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Unix epochs at the start of each row of words: 10 digits with an optional fraction of
    1-6 digits (seconds) or 13 digits (milliseconds): (length, µs, ok), as `epoch_time` reads them."""
    run = _run_at(w, 0)
    full = run == 8
    run[full] += _run_at(w[:, full], 8)
    r2 = run == 16
    run[r2] += _run_at(w[:, r2], 16)
    secs = run == 10
    millis = run == 13
    _, head = _digits_at(w, 0, 8)
    _, two = _digits_at(w, 8, 2)
    _, five = _digits_at(w, 8, 5)
    v = np.where(secs, head * 100 + two, head * 100_000 + five)
    dot = secs & (_byte(w, 10) == 46)
    frac = np.where(dot, _run_at(w, 11), 0)
    ok = (secs | millis) & (~dot | ((frac >= 1) & (frac <= 6)))
    six = np.minimum(frac, 6)
    _, f = _digits_at(w, 11, six)
    us = f * _POW10[6 - six]
    ok &= np.where(secs, v < _EPOCH_MAX_S, (v >= _EPOCH_MIN_S * 1000) & (v < _EPOCH_MAX_S * 1000))
    micros = np.where(secs, v * _US + us, v * 1000)
    return run + np.where(dot, 1 + frac, 0), micros, ok


def _stamp_at(words: np.ndarray, s: np.ndarray, bare: np.ndarray | bool = False,
              bracket: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A time value at each of `s` as `_time_value` reads it (an epoch when it is digits with at
    most one dot, else ISO 8601): (length, µs, ok, the byte after)."""
    n = len(s)
    length = np.zeros(n, np.int64)
    micros = np.zeros(n, np.int64)
    ok = np.zeros(n, bool)
    after = np.zeros(n, np.uint8)
    if not n:
        return length, micros, ok, after
    w0 = words[s]
    dashed = ((w0 >> _U64(32)) & _U64(0xFF)) == 45
    bare_rows = np.broadcast_to(np.asarray(bare, bool), (n,))
    # ISO times read up to 6 words (a zone after 9 fraction digits); epochs 3
    parts = [(dashed & bare_rows, True, _STAMP_WORDS), (dashed & ~bare_rows, False, _STAMP_WORDS)]
    if not bracket:
        parts.append((~dashed, None, 3))
    for sel, iso_bare, n_words in parts:
        i = np.flatnonzero(sel)
        if not len(i):
            continue
        every = len(i) == n
        si = s if every else s[i]
        w = np.empty((n_words, len(i)), np.uint64)
        w[0] = w0 if every else w0[i]
        for k in range(1, n_words):
            w[k] = words[si + 8 * k]
        if iso_bare is None:
            got = _epoch(w)
            limit = 8 * n_words - 8
        else:
            got = _iso(w, bracket, iso_bare)
            limit = 8 * n_words - 8
        length[i], micros[i], ok[i] = got
        ok[i] &= got[0] < limit
        after[i] = _byte(w, np.minimum(got[0], limit - 1))
    return length, micros, ok, after


_MONTHS = {_w(name.encode()) & _M[3]: i for i, name in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_MONTH_WORDS = np.array(sorted(_MONTHS), dtype=np.uint64)
_MONTH_OF = np.array([_MONTHS[w] for w in sorted(_MONTHS)], np.int64)


def _clf_runs(words: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(has the CLF shape `[DD/Mmm/YYYY:HH:MM:SS +ZZZZ]` (any three ASCII letters for the
    month, as the reference's regex has it), µs, a real time as `clf_time` reads it) of the
    `[` at each of `at`, worked out once per run of identical stamps."""
    if not len(at):
        return np.zeros(0, bool), np.zeros(0, np.int64), np.zeros(0, bool)
    w = _row_words(words, at, 4)
    new = np.ones(len(at), bool)
    same = (w[0, 1:] == w[0, :-1]) & (w[1, 1:] == w[1, :-1]) & (w[2, 1:] == w[2, :-1])
    same &= ((w[3, 1:] ^ w[3, :-1]) & _M[4]) == 0
    new[1:] = ~same
    heads = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    h = _row_words(words, at[heads], 5)
    shaped = np.ones(len(heads), bool)
    fields = []
    for j, k in ((1, 2), (8, 4), (13, 2), (16, 2), (19, 2), (23, 2), (25, 2)):
        good, v = _digits_at(h, j, k)
        shaped &= good
        fields.append(v)
    d, y, hh, mi, ss, zh, zm = fields
    for k, c in ((3, 47), (7, 47), (12, 58), (15, 58), (18, 58), (21, 32), (27, 93)):
        shaped &= _byte(h, k) == c
    for k in (4, 5, 6):
        letter = _byte(h, k) | np.uint8(0x20)
        shaped &= (letter >= 97) & (letter <= 122)
    sign = _byte(h, 22)
    shaped &= (sign == 43) | (sign == 45)
    mon_word = (h[0] >> _U64(32)) & _M[3]
    idx = np.clip(np.searchsorted(_MONTH_WORDS, mon_word), 0, len(_MONTH_WORDS) - 1)
    known = _MONTH_WORDS[idx] == mon_word
    offset = np.where(sign == 45, -1, 1) * (zh * 60 + zm)
    us, real = _micros(y, np.where(known, _MONTH_OF[idx], 0), d, hh, mi, ss, np.zeros(len(heads), np.int64), offset)
    good = shaped & known & real & (zh <= 23) & (zm <= 59)
    return shaped[run], us[run], good[run]


def _bracket_shape(words: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Whether `\\d{4}-\\d\\d-\\d\\d[ T]\\d\\d:\\d\\d:\\d\\d` starts at each of `s`."""
    w = _row_words(words, s, 4)
    ok = np.ones(len(s), bool)
    for j, k in ((0, 4), (5, 2), (8, 2), (11, 2), (14, 2), (17, 2)):
        ok &= _digits_at(w, j, k)[0]
    for k, c in ((4, 45), (7, 45), (13, 58), (16, 58)):
        ok &= _byte(w, k) == c
    sep = _byte(w, 10)
    return ok & ((sep == 84) | (sep == 32))


# ----------------------------------------------------------------------------- the scan

_T_TOKENS, _N_TOKENS, _IMESTAMP = _w(b"t_tokens"), _w(b"n_tokens"), _w(b"imestamp")
_TIME_HI, _TS_HI = _w(b"time") & _M[4], _w(b"ts") & _M[2]
_INPU, _PROMP, _OUTPU, _COMPLETI = _w(b"inpu"), _w(b"promp"), _w(b"outpu"), _w(b"completi")
_UNDER_TOKENS = _w(b"_tokens")
_INPUT, _PROMPT, _OUTPUT, _COMPLETIO, _ON = _w(b"input"), _w(b"prompt"), _w(b"output"), _w(b"completi"), _w(b"on")
# JSON-style time keys, in the order the reference tries them
_JSON_NAMES = ((b"created", 0), (b"time", 1), (b"timestamp", 2), (b"ts", 3), (b"@timestamp", 4))
#: bytes the masks are computed over at a time (the temporaries stay in the CPU's cache)
_CHUNK = 1 << 18


def _work(size: int, name: str, dtype: Any) -> np.ndarray:
    """A scratch array of `size` items, reused from block to block (its content is not kept):
    allocating them afresh costs a page fault per 4 KiB every block."""
    work = getattr(LOCAL, "work", None)
    if work is None:
        work = LOCAL.work = {}
    arr = work.get(name)
    if arr is None or len(arr) < size:
        arr = work[name] = np.empty(max(size, 1 << 20), dtype)
    return arr[:size]


class _Block:
    """One block's bytes, its tokens and lines, and quote counts.

    Tokens are the bytes the scan looks at: newlines and control or non-ASCII bytes, `=`,
    `[`; in a block with JSON lines also `]{}_`, backslashes, `>?@`, a `"` before `t` or `c`
    (and `Y`, `y`, DEL, which share a bit pattern). Quotes are not tokens: the quotes before a
    position are counted from a packed bit array (popcount of whole words, then of a part)."""

    def __init__(self, buf: bytearray, start: int, end: int, json: bool) -> None:
        self.buf = buf
        self.a = a = np.frombuffer(buf, np.uint8)
        self.words = np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, offset=0, strides=(1,))
        self.start, self.end, self.json_mode = start, end, json
        size = end - start
        mask, quotes = _work(size, "mask", bool), _work(size, "quotes", bool)
        tmp, tmp2 = _work(min(size, _CHUNK), "tmp", bool), _work(min(size, _CHUNK), "tmp2", bool)
        tmp8 = _work(min(size, _CHUNK), "tmp8", np.uint8)
        for lo in range(0, size, _CHUNK):
            hi = min(lo + _CHUNK, size)
            cur = a[start + lo : start + hi]
            m, q, t, t2, t8 = mask[lo:hi], quotes[lo:hi], tmp[: hi - lo], tmp2[: hi - lo], tmp8[: hi - lo]
            np.less(cur.view(np.int8), 32, out=m)  # newlines, control bytes, non-ASCII
            np.equal(cur, 34, out=q)
            if json:
                np.bitwise_and(cur, 0xD9, out=t8)
                np.equal(t8, 0x59, out=t)  # [ ] { } _ (and Y y DEL)
                m |= t
                np.subtract(cur, 0x3D, out=t8)
                np.less_equal(t8, 3, out=t)  # = > ? @
                m |= t
                np.equal(cur, 92, out=t)
                m |= t
                nxt = a[start + lo + 1 : start + hi + 1]
                np.equal(nxt, 116, out=t)
                np.equal(nxt, 99, out=t2)
                t |= t2
                t &= q
                m |= t
            else:
                np.equal(cur, 61, out=t)
                m |= t
                np.equal(cur, 91, out=t)
                m |= t
        self.pos = pos = np.flatnonzero(mask)
        pos += start
        self.kind = kind = a[pos]
        self.any_quotes = bool(quotes.any())
        if self.any_quotes:
            packed = np.packbits(quotes, bitorder="little")
            packed = np.concatenate((packed, np.zeros(8 - len(packed) % 8 + 8, np.uint8)))
            self.qw = qw = packed.view("<u8")
            self.qbefore = np.concatenate(([0], np.cumsum(np.bitwise_count(qw), dtype=np.int64)))
        is_nl = kind == 10
        self.nl_tok = nl_tok = np.flatnonzero(is_nl)
        self.nl = nl = pos[nl_tok]
        self.n = n = len(nl)
        starts = np.empty(n, np.int64)
        if n:
            starts[0] = start
            starts[1:] = nl[:-1] + 1
        self.starts = starts
        self.state = np.zeros(n, np.int8)  # _FALLBACK until shown otherwise
        self.bad = np.zeros(n, bool)
        self.eol = nl.copy()  # end of the text (before a final CR)
        odd = np.flatnonzero((kind.view(np.int8) < 32) & ~is_nl)
        if len(odd):
            lines = np.searchsorted(nl_tok, odd)
            cr_end = (kind[odd] == 13) & (pos[odd] + 1 == nl[lines])
            self.eol[lines[cr_end]] -= 1
            self.bad[lines[~cr_end]] = True
        length = self.eol - starts
        first = a[starts]
        self.state[length == 0] = _IGNORED
        self.bad |= (first == 32) & (length > 0)
        self.json = (first == 123) & (length > 0)
        self.state[nl - starts > MAX_LINE_BYTES] = _SKIPPED
        if self.any_quotes:
            self.line_q = self.quotes_before(starts)  # quotes before each line
            self.odd_quotes = ((self.quotes_before(nl) - self.line_q) & 1) == 1
        else:
            self.line_q = np.zeros(n, np.int64)
            self.odd_quotes = np.zeros(n, bool)
        self._line_of: np.ndarray | None = None

    @property
    def line_of(self) -> np.ndarray:
        """The line index of each token."""
        if self._line_of is None:
            is_nl = self.kind == 10
            self._line_of = np.cumsum(is_nl, dtype=np.int32) - is_nl
        return self._line_of

    def quotes_before(self, p: np.ndarray) -> np.ndarray:
        """Quotes in the block before each position (absolute)."""
        if not self.any_quotes:
            return np.zeros(len(p), np.int64)
        r = p - self.start
        w = r >> 6
        below = (_ONE << (r & 63).astype(np.uint64)) - _ONE
        return self.qbefore[w] + np.bitwise_count(self.qw[w] & below)

    def quoted(self, p: np.ndarray, line: np.ndarray) -> np.ndarray:
        """Whether an odd number of quotes precede each position on its line."""
        return ((self.quotes_before(p) - self.line_q[line]) & 1) == 1

    def tokens(self, byte: int) -> tuple[np.ndarray, np.ndarray]:
        """(positions, lines) of the tokens that are `byte`."""
        t = np.flatnonzero(self.kind == byte)
        return self.pos[t], self.line_of[t].astype(np.int64)


def scan_block_numpy(buf: bytearray, start: int, end: int, tally: BlockTally, json: bool = False) -> bool:
    """Tally the lines of `buf[start:end]` (whole lines, the last one ending with b"\\n");
    `buf` must hold FRONT_BYTES before `start` and PAD_BYTES after `end`. `json`: look for
    the tokens JSON lines need (the scan does so anyway when it meets such a line). Returns
    whether the block held JSON lines (a hint for the next block)."""
    b = _Block(buf, start, end, json)
    if b.n == 0:
        return json
    if not json and b.json.any():
        b = _Block(buf, start, end, True)
    n = b.n
    v_in = np.zeros(n, np.int64)
    v_out = np.zeros(n, np.int64)
    micros = np.zeros(n, np.int64)
    timed = np.zeros(n, bool)
    todo = (b.state == _FALLBACK) & ~b.bad
    if not b.json_mode:
        todo = _templates(b, todo, v_in, v_out, micros, timed)
    if todo.any():
        rest = np.flatnonzero(todo)
        if len(rest) * 8 < n:
            _general_apart(b, rest, v_in, v_out, micros, timed)
        else:
            _general(b, todo, v_in, v_out, micros, timed)
    _tally(b, tally, v_in, v_out, micros, timed)
    return b.json_mode and bool(b.json.any())


def _general_apart(b: _Block, rest: np.ndarray, v_in: np.ndarray, v_out: np.ndarray, micros: np.ndarray,
                   timed: np.ndarray) -> None:
    """The general scan of a few lines, copied into a block of their own."""
    view = memoryview(b.buf)
    parts = [bytes(view[s : e + 1]) for s, e in zip(b.starts[rest].tolist(), b.nl[rest].tolist(), strict=True)]
    body = b"".join(parts)
    sub = bytearray(FRONT_BYTES + len(body) + PAD_BYTES)
    sub[FRONT_BYTES : FRONT_BYTES + len(body)] = body
    sb = _Block(sub, FRONT_BYTES, FRONT_BYTES + len(body), b.json_mode)
    m = sb.n
    s_in, s_out, s_us, s_timed = np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, np.int64), np.zeros(m, bool)
    _general(sb, (sb.state == _FALLBACK) & ~sb.bad, s_in, s_out, s_us, s_timed)
    fast = sb.state == _FAST
    lines = rest[fast]
    b.state[lines] = _FAST
    v_in[lines], v_out[lines], micros[lines], timed[lines] = s_in[fast], s_out[fast], s_us[fast], s_timed[fast]


def _general(b: _Block, todo: np.ndarray, v_in: np.ndarray, v_out: np.ndarray, micros: np.ndarray,
             timed: np.ndarray) -> None:
    """Read lines `todo` of the block token by token (any mix of lines): fast where shown."""
    ok = todo.copy()
    kv = _key_values(b)
    ok &= ~kv.refused
    counts = kv.has_in & kv.has_out
    v_in[counts & ok], v_out[counts & ok] = kv.v_in[counts & ok], kv.v_out[counts & ok]
    need_any = ok & (~counts | b.json)
    if need_any.any():
        if b.json_mode:
            got, a_in, a_out = _any_counts(b, need_any)
            ok &= ~need_any | got
            take = need_any & got & ~counts
            v_in[take], v_out[take] = a_in[take], a_out[take]
        else:
            ok &= ~need_any
    if b.json_mode:
        ok &= ~(b.json & (kv.has_time | _with(b, 92) | kv.any_key))
    # times: a time key first; else the line's own order (brackets, CLF, JSON keys, none)
    ok &= ~kv.has_time | kv.time_ok
    has_key_time = ok & kv.has_time
    micros[has_key_time], timed[has_key_time] = kv.micros[has_key_time], True
    rest = ok & ~kv.has_time
    if rest.any():
        found, known, us = _line_times(b, rest)
        ok &= ~rest | known
        got_time = found & ok
        micros[got_time], timed[got_time] = us[got_time], True
    b.state[ok] = _FAST


def _with(b: _Block, byte: int) -> np.ndarray:
    """Lines holding a token that is `byte`."""
    out = np.zeros(b.n, bool)
    out[b.tokens(byte)[1]] = True
    return out


# ----------------------------------------------------------------------------- key=value


class _KeyValues:
    """Per line: the first key of each kind the reference's key=value reader finds, read."""

    def __init__(self, n: int) -> None:
        self.refused = np.zeros(n, bool)
        self.any_key = np.zeros(n, bool)  # a count or time key at all
        self.has_in = np.zeros(n, bool)
        self.has_out = np.zeros(n, bool)
        self.v_in = np.zeros(n, np.int64)
        self.v_out = np.zeros(n, np.int64)
        self.has_time = np.zeros(n, bool)
        self.time_ok = np.zeros(n, bool)
        self.micros = np.zeros(n, np.int64)


def _eq_classes(b: _Block, e: np.ndarray, line: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For each `=` at `e`: (the key kind it ends, or -1; whether the reference's key=value
    reader takes it as a key; whether a value before it may have swallowed it). The reader
    takes `name=` when the name follows the line's start, a blank, `,` or `;`."""
    a, words = b.a, b.words
    kind = np.full(len(e), -1, np.int64)
    key = np.zeros(len(e), bool)
    ambiguous = np.zeros(len(e), bool)
    w8 = words[e - 8]
    t_tok = w8 == _T_TOKENS
    n_tok = w8 == _N_TOKENS
    time = (w8 >> _U64(32)) == _TIME_HI
    ts = (w8 >> _U64(48)) == _TS_HI
    stamp = w8 == _IMESTAMP
    hit = np.flatnonzero(t_tok | n_tok | time | ts | stamp)
    if not len(hit):
        return kind, key, ambiguous
    eh = e[hit]
    t_tok, n_tok, time, ts, stamp = t_tok[hit], n_tok[hit], time[hit], ts[hit], stamp[hit]
    kh = np.full(len(hit), -1, np.int64)
    name_len = np.zeros(len(hit), np.int64)
    w13 = words[eh - 13]
    inp = t_tok & (((w13 >> _U64(8)) & _M[4]) == _INPU)
    prm = t_tok & ((w13 & _M[5]) == _PROMP)
    oup = t_tok & ((w13 & _M[5]) == _OUTPU)
    cmp_ = n_tok & (words[eh - 17] == _COMPLETI) & (a[eh - 9] == 111)
    at_sign = stamp & (a[eh - 10] == 64)
    stamp &= a[eh - 9] == 116
    for sel, k, length in ((inp, _IN_A, 12), (prm, _IN_B, 13), (oup, _OUT_A, 13), (cmp_, _OUT_B, 17),
                           (time, _TIME, 4), (ts, _TIME, 2), (stamp & ~at_sign, _TIME, 9),
                           (stamp & at_sign, _TIME, 10)):
        kh[sel] = k
        name_len[sel] = length
    key_at = eh - name_len
    line_start = b.starts[line[hit]]
    fits = (kh >= 0) & (key_at >= line_start)
    before = a[key_at - 1]
    at_start = key_at == line_start
    delim = at_start | (before == 32) | (before == 44) | (before == 59)
    kind[hit] = kh
    key[hit] = fits & delim
    ambiguous[hit] = fits & ~at_start & ((before == 123) | (before == 40))
    return kind, key, ambiguous


def _key_values(b: _Block) -> _KeyValues:
    """The reference's `_KEY_VALUE` reading of the count and time keys."""
    out = _KeyValues(b.n)
    a = b.a
    e, line = b.tokens(61)
    if not len(e):
        return out
    # on lines with keys: `='` starts a value the scan does not follow; `="` must open a string
    after = a[e + 1]
    unfollowed = np.zeros(b.n, bool)
    unfollowed[line[after == 39]] = True
    opens = np.flatnonzero(after == 34)
    unfollowed[line[opens[b.quoted(e[opens] + 1, line[opens])]]] = True
    kind, key, ambiguous = _eq_classes(b, e, line)
    out.refused[line[ambiguous]] = True
    key = np.flatnonzero(key)
    e, line, kind = e[key], line[key], kind[key]
    if not len(e):
        return out
    out.any_key[line] = True
    # a key inside quotes may or may not be one; a line whose quotes the reference could pair
    # otherwise than the scan (an odd count) is refused too
    out.refused[line[b.quoted(e, line)]] = True
    out.refused |= out.any_key & (b.odd_quotes | unfollowed)
    # the first key of each kind on each line, read
    values = {}
    for k in (_IN_A, _IN_B, _OUT_A, _OUT_B, _TIME):
        sel = np.flatnonzero(kind == k)
        if not len(sel):
            continue
        lk = line[sel]
        first = np.ones(len(sel), bool)
        first[1:] = lk[1:] != lk[:-1]
        values[k] = (lk[first], e[sel[first]])
    n = b.n
    for primary, secondary, has, dest in ((_IN_A, _IN_B, out.has_in, out.v_in),
                                          (_OUT_A, _OUT_B, out.has_out, out.v_out)):
        taken = np.zeros(n, bool)
        for k in (primary, secondary):
            if k not in values:
                continue
            lk, ek = values[k]
            if k == secondary:
                keep = ~taken[lk]
                lk, ek = lk[keep], ek[keep]
            taken[lk] = True
            good, unsure, v = _count_values(b, ek)
            out.refused[lk[unsure]] = True
            has[lk[good]] = True
            dest[lk[good]] = v[good]
    if _TIME in values:
        lk, ek = values[_TIME]
        v = ek + 1
        quoted = a[v] == 34
        us, good, _ = _stamp_values(b, v + quoted, quoted)
        out.has_time[lk] = True
        out.time_ok[lk] = good
        out.micros[lk] = us
    return out


def _count_values(b: _Block, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a count, maybe a count (10-12 digits), value) of the key=value values after each `=`."""
    v = e + 1
    quoted = b.a[v] == 34
    run, values, after = _count_at(b.words, b.a, v + quoted)
    ends = np.where(quoted, after == 34, _value_end(after))
    return (run >= 1) & (run <= 9) & ends, (run >= 10) & ends, values


#: the bytes that end a bare key=value value (`[\\s,;"')}]`, and the line's end), by byte
_ENDS = np.zeros(256, bool)
_ENDS[[32, 44, 59, 34, 39, 41, 125, 10, 13]] = True


def _value_end(after: np.ndarray) -> np.ndarray:
    """Whether each byte ends a bare key=value value."""
    return _ENDS[after]


def _stamp_values(b: _Block, s: np.ndarray, quoted: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(µs, ok, length) of key=value time values starting at `s` (after the quote when
    quoted): ok when a layout the scan converts fills the whole value."""
    length, micros, ok, after = _stamp_at(b.words, s, bare=~quoted)
    return micros, ok & np.where(quoted, after == 34, _value_end(after)), length


# ----------------------------------------------------------------------------- counts by name


def _any_counts(b: _Block, need: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reference's `input_tokens: N` search (`_IN_ANY`, `_OUT_ANY`), for lines `need`:
    (read, input, output), read only where each side is named exactly once on the line in a
    way the search could take (the name followed by a quote, a blank, `:` or `=`), and the
    search takes it there."""
    a, words, n = b.a, b.words, b.n
    got = np.zeros(n, bool)
    v_in = np.zeros(n, np.int64)
    v_out = np.zeros(n, np.int64)
    under, line = b.tokens(95)
    keep = (words[under] & _M[7]) == _UNDER_TOKENS
    under, line = under[keep], line[keep]
    follow = a[under + 7]
    keep = (follow == 34) | (follow == 39) | (follow == 32) | (follow == 58) | (follow == 61)
    under, line = under[keep], line[keep]
    side = np.full(len(under), -1, np.int64)
    name_at = np.zeros(len(under), np.int64)
    for word, back, s in ((_INPUT, 5, 0), (_PROMPT, 6, 0), (_OUTPUT, 6, 1)):
        hit = (words[under - back] & _M[back]) == word
        side[hit] = s
        name_at[hit] = under[hit] - back
    hit = (words[under - 10] == _COMPLETIO) & ((words[under - 2] & _M[2]) == _ON)
    side[hit] = 1
    name_at[hit] = under[hit] - 10
    keep = (side >= 0) & need[line]
    under, side, name_at, line = under[keep], side[keep], name_at[keep], line[keep]
    if not len(under):
        return got, v_in, v_out
    per_line = np.bincount(line * 2 + side, minlength=2 * n)
    once = (per_line[0::2] == 1) & (per_line[1::2] == 1)
    keep = once[line]
    under, side, name_at, line = under[keep], side[keep], name_at[keep], line[keep]
    # (?<![\w\-])NAME['"]?\s*[:=]\s*['"]?(\d{1,12})\b, each \s* at most one blank here
    good = (name_at == b.starts[line]) | ~_word_or_dash(a[name_at - 1])
    p = under + 7
    p = p + ((a[p] == 34) | (a[p] == 39))
    p = p + (a[p] == 32)
    good &= (a[p] == 58) | (a[p] == 61)
    p = p + 1
    p = p + (a[p] == 32)
    good &= a[p] != 32
    p = p + ((a[p] == 34) | (a[p] == 39))
    run, value, after = _count_at(words, a, p)
    good &= (run >= 1) & (run <= 9) & ~_word(after)
    read = np.zeros(2 * n, bool)
    read[line[good] * 2 + side[good]] = True
    got = need & read[0::2] & read[1::2]
    v_in[line[good & (side == 0)]] = value[good & (side == 0)]
    v_out[line[good & (side == 1)]] = value[good & (side == 1)]
    return got, v_in, v_out


def _word(x: np.ndarray) -> np.ndarray:
    """Whether each byte is [A-Za-z0-9_] (`\\w` of an ASCII line)."""
    low = x | np.uint8(0x20)
    return ((x >= 48) & (x <= 57)) | ((low >= 97) & (low <= 122)) | (x == 95)


def _word_or_dash(x: np.ndarray) -> np.ndarray:
    return _word(x) | (x == 45)


# ----------------------------------------------------------------------------- line times


def _line_times(b: _Block, need: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`_line_time` for lines `need` (no time key): (has a time, known, µs); known is False
    where the scan cannot tell what the reference would make of the line."""
    a, words, n = b.a, b.words, b.n
    found = np.zeros(n, bool)
    known = np.zeros(n, bool)
    micros = np.zeros(n, np.int64)
    todo = need.copy()
    # 1. [ISO ...] at the start
    lines = np.flatnonzero(todo & (a[b.starts] == 91))
    if len(lines):
        m = lines[_bracket_shape(words, b.starts[lines] + 1)]
        if len(m):
            _, us, good, _ = _stamp_at(words, b.starts[m] + 1, bracket=True)
            found[m[good]], micros[m[good]] = True, us[good]
            known[m] = good
            todo[m] = False
    # 2. the first [DD/Mon/YYYY:HH:MM:SS +ZZZZ] after a blank or at the start
    lb, line = b.tokens(91)
    sel = np.flatnonzero(todo[line])
    if len(sel):
        lb, line = lb[sel], line[sel]
        after_blank = (lb == b.starts[line]) | (a[lb - 1] == 32)
        lb, line = lb[after_blank], line[after_blank]
        shaped, us, good = _clf_runs(words, lb)
        lb, line, us, good = lb[shaped], line[shaped], us[shaped], good[shaped]
        first = np.ones(len(line), bool)
        first[1:] = line[1:] != line[:-1]
        line, us, good = line[first], us[first], good[first]
        good &= ~b.json[line]  # a JSON line parsed as JSON would take its time from its keys instead
        found[line[good]], micros[line[good]] = True, us[good]
        known[line] = good
        todo[line] = False
    # 3. "created": / "time": ... (JSON-style keys); JSON lines also need them at the top level
    if todo.any():
        if b.json_mode:
            j_found, j_known, j_us, j_none = _json_key_times(b, todo)
            found |= j_found
            micros[j_found] = j_us[j_found]
            known |= j_known
            todo &= j_none
        else:  # such keys need quotes: lines without any go on
            todo &= (b.quotes_before(b.nl) - b.line_q) == 0
    # 4. an ISO time in the first 40 characters: the scan only shows there is none
    if todo.any():
        known |= todo & ~_maybe_iso_prefix(b, todo)
    return found, known, micros


def _json_key_times(b: _Block, todo: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The reference's `_json_key_time` for lines `todo`: (found, known, µs, has no such key).

    Every `"name"` of a time key followed by `:` (a blank before and after allowed) is a match
    of its regex unless it starts at a quote of an earlier match's value, which the scan
    refuses; the value must be a quoted string ending on the line or a plain number. The
    first of each name counts, the names tried in the reference's order; the first name
    present must hold a time the scan reads. On a JSON line each name must occur once and at
    the top level, where a parsed object would have it."""
    a, words, n = b.a, b.words, b.n
    found = np.zeros(n, bool)
    known = np.zeros(n, bool)
    micros = np.zeros(n, np.int64)
    none = todo.copy()
    refuse = np.zeros(n, bool)
    # a quote before `t`/`c` is a token, and so is `@`: the quote before `@timestamp`
    at_tok = np.flatnonzero((b.kind == 34) | (b.kind == 64))
    q = b.pos[at_tok] - (b.kind[at_tok] == 64)
    line = b.line_of[at_tok].astype(np.int64)
    keep = todo[line] & (a[q] == 34)
    at_tok, q, line = at_tok[keep], q[keep], line[keep]
    w1, w9 = words[q + 1], words[q + 9]
    name = np.full(len(q), -1, np.int64)
    name_len = np.zeros(len(q), np.int64)
    for text, rank in _JSON_NAMES:
        full = text + b'"'
        if len(full) <= 8:
            hit = (w1 & _M[len(full)]) == _w(full)
        else:
            hit = (w1 == _w(full[:8])) & ((w9 & _M[len(full) - 8]) == _w(full[8:]))
        name[hit] = rank
        name_len[hit] = len(text)
    keep = name >= 0
    at_tok, q, name, name_len, line = at_tok[keep], q[keep], name[keep], name_len[keep], line[keep]
    # `\s*:` after the closing quote, at most one blank
    c = q + name_len + 2
    c = c + (a[c] == 32)
    refuse[line[a[c] == 32]] = True
    match = a[c] == 58
    at_tok, q, name, line, c = at_tok[match], q[match], name[match], line[match], c[match]
    none[line] = False
    if len(q):
        v = c + 1
        v = v + (a[v] == 32)
        refuse[line[a[v] == 32]] = True
        quoted = a[v] == 34
        s = v + quoted
        length, us, good, after = _stamp_at(words, s)
        # a quoted value is the text up to the next quote: the layout must end there; a bare
        # one is `[-+.\w]+`: it must end where a byte outside that set follows
        stop = (after == 44) | (after == 125) | (after == 32) | (after == 93) | (after == 10) | (after == 13)
        good &= np.where(quoted, after == 34, stop)
        # no name may start at another match's value quotes (where an unread quoted value
        # ends is not worked out: a later name on its line is refused)
        close = s + length
        clash = np.isin(q, np.concatenate((v[quoted], close[quoted & good])))
        unread = quoted & ~good
        later = np.zeros(len(q), bool)
        later[1:] = unread[:-1] & (line[1:] == line[:-1])
        refuse[line[clash | later]] = True
        js = np.flatnonzero(b.json[line])
        if len(js):
            per = np.bincount(line[js] * 5 + name[js], minlength=5 * n)
            refuse[line[js[per[line[js] * 5 + name[js]] > 1]]] = True
            refuse[line[js[_depth(b, at_tok[js]) != 1]]] = True
        # per line the first of each name, names in the reference's order: the first decides
        order = np.lexsort((q, name, line))
        lo, na = line[order], name[order]
        first = np.ones(len(order), bool)
        first[1:] = (lo[1:] != lo[:-1]) | (na[1:] != na[:-1])
        pick = order[first]
        head = np.ones(len(pick), bool)
        head[1:] = line[pick][1:] != line[pick][:-1]
        chosen = pick[head]
        c_line, c_good = line[chosen], good[chosen]
        found[c_line[c_good]] = True
        micros[c_line[c_good]] = us[chosen][c_good]
        known[c_line[c_good]] = True
    known &= ~refuse
    found &= ~refuse
    return found, known, micros, none & ~refuse


def _depth(b: _Block, tok: np.ndarray) -> np.ndarray:
    """Braces and brackets open before each token, outside strings, on its line."""
    cum = getattr(b, "_depth_cum", None)
    if cum is None:
        k = b.kind
        sel = np.flatnonzero((k == 123) | (k == 125) | (k == 91) | (k == 93))
        line = b.line_of[sel].astype(np.int64)
        sign = np.where((k[sel] & np.uint8(0xDF)) == 0x5B, 1, -1).astype(np.int32)
        sign[b.quoted(b.pos[sel], line)] = 0
        full = np.zeros(len(k), np.int32)
        full[sel] = sign
        cum = np.cumsum(full, dtype=np.int32)
        base = np.zeros(b.n, np.int32)
        base[1:] = cum[b.nl_tok[:-1]]
        b._depth_cum, b._depth_base = cum, base  # type: ignore[attr-defined]
    return cum[tok] - b._depth_base[b.line_of[tok]]  # type: ignore[attr-defined]


def _maybe_iso_prefix(b: _Block, lines_mask: np.ndarray) -> np.ndarray:
    """Whether `search_time(line[:40])` could find a time: a `T` or blank between two digits
    in the line's first 40 characters."""
    a = b.a
    lines = np.flatnonzero(lines_mask)
    out = np.zeros(b.n, bool)
    if not len(lines):
        return out
    s = b.starts[lines]
    limit = np.minimum(b.eol[lines], s + 40)
    for k in range(1, 39):
        at = s + k
        inside = at + 1 < limit
        c = a[at]
        hit = inside & ((c == 84) | (c == 32)) & _is_digit(a, at - 1) & _is_digit(a, at + 1)
        out[lines[hit]] = True
    return out


# ----------------------------------------------------------------------------- templates

#: line plans tried per block before the rest of its lines go to the general scan
_PLANS_PER_BLOCK = 4
#: bytes that may make up a key=value key (the reference's `[\w.@\-]`, ASCII)
_KEY_BYTES = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.@-")
#: the last byte of every key the `=` classification can take (time, ts, timestamp, *_tokens)
_HIT_ENDS = frozenset(b"sep")


@dataclass(eq=False)
class _Plan:
    """How the scan reads one line, as column-wise checks that every line of the same layout
    must pass to be read the same way (the bytes each decision reads are the same), and the
    columns its values come from. Columns are the line's tokens, in order."""

    k: int
    kinds: np.ndarray
    first_bracket: bool
    cr: bool
    top_byte: list[tuple[int, int]] = field(default_factory=list)
    top_words: list[tuple[int, list[tuple[int, int, int]]]] = field(default_factory=list)
    at_start: list[tuple[int, int]] = field(default_factory=list)
    after_quote: list[int] = field(default_factory=list)
    after_other: list[int] = field(default_factory=list)
    even: list[tuple[int, int]] = field(default_factory=list)
    no_quotes: bool = False
    counts: tuple[int, bool, int, bool] = (0, False, 0, False)
    time: tuple[Any, ...] = ("none",)
    #: the length of the plan line's stamp (how many bytes to compare when stamps repeat)
    stamp_len: int = 0
    not_clf: list[int] = field(default_factory=list)
    not_bracket: bool = False


def _compile(b: _Block, i: int) -> _Plan | None:
    """The plan of key=value line i, or None when the scan would not take the line."""
    a = b.a
    t0 = int(b.nl_tok[i - 1]) + 1 if i else 0
    t1 = int(b.nl_tok[i])
    kinds = b.kind[t0 : t1 + 1].copy()
    pos = b.pos[t0 : t1 + 1]
    ks = kinds.tolist()
    if not set(ks) <= {61, 91, 13, 10} or (13 in ks and (ks.count(13) > 1 or ks[-2] != 13 or pos[-2] + 1 != pos[-1])):
        return None
    start = int(b.starts[i])
    first = int(a[start])
    if first in (32, 123) or b.eol[i] == start or b.nl[i] - start > MAX_LINE_BYTES:
        return None
    plan = _Plan(len(ks), kinds, first == 91, 13 in ks)
    cols = [j for j, k in enumerate(ks) if k == 61]
    if not cols:
        return None
    e = pos[cols]
    line = np.full(len(cols), i, np.int64)
    kind, key, ambiguous = _eq_classes(b, e, line)
    after = a[e + 1]
    if ambiguous.any() or not key.any() or (after == 39).any() or b.odd_quotes[i]:
        return None
    for c, ee, is_key, af, kd in zip(cols, e.tolist(), key.tolist(), after.tolist(), kind.tolist(), strict=True):
        if is_key:
            if b.quoted(np.array([ee]), np.array([i]))[0]:
                return None
            plan.even.append((c, 0))
        if af == 34:
            if b.quoted(np.array([ee + 1]), np.array([i]))[0]:
                return None
            plan.even.append((c, 1))
            plan.after_quote.append(c)
        else:
            plan.after_other.append(c)
        run = 0
        while run < 24 and ee - run - 1 >= start and a[ee - run - 1] in _KEY_BYTES:
            run += 1
        if ee - run == start:
            plan.at_start.append((c, run))
            plan.top_words.append((c, _word_checks(b, ee, run)))
        elif not is_key and kd < 0 and a[ee - 1] not in _HIT_ENDS:
            plan.top_byte.append((c, int(a[ee - 1])))
        else:
            plan.top_words.append((c, _word_checks(b, ee, min(run + 1, 24))))
    first_of: dict[int, int] = {}
    for c, is_key, kd in zip(cols, key.tolist(), kind.tolist(), strict=True):
        if is_key and kd not in first_of:
            first_of[kd] = c
    in_col = first_of.get(_IN_A, first_of.get(_IN_B))
    out_col = first_of.get(_OUT_A, first_of.get(_OUT_B))
    if in_col is None or out_col is None:
        return None
    plan.counts = (in_col, bool(a[pos[in_col] + 1] == 34), out_col, bool(a[pos[out_col] + 1] == 34))
    if _TIME in first_of:
        c = first_of[_TIME]
        in_quotes = bool(a[pos[c] + 1] == 34)
        plan.time = ("key", c, in_quotes)
        length, _, _, _ = _stamp_at(b.words, np.array([pos[c] + 1 + in_quotes]), bare=not in_quotes)
        plan.stamp_len = int(length[0])
    else:
        lbs = [j for j, k in enumerate(ks) if k == 91]
        if plan.first_bracket:
            if _bracket_shape(b.words, np.array([start + 1]))[0]:
                plan.time = ("bracket",)
            else:
                plan.not_bracket = True
        if plan.time[0] == "none":
            for c in lbs:
                p = int(pos[c])
                if (p == start or a[p - 1] == 32) and _clf_runs(b.words, np.array([p]))[0][0]:
                    plan.time = ("clf", c)
                    break
                plan.not_clf.append(c)
        if plan.time[0] == "none":
            plan.no_quotes = True
    ok, *_ = _apply(b, plan, np.array([i]), pos[None, :])
    return plan if ok[0] else None


def _word_checks(b: _Block, e: int, n: int) -> list[tuple[int, int, int]]:
    """(offset back from `e`, mask, value) of the words that hold the n bytes before `e`."""
    checks = []
    back = 0
    while back < n:
        take = min(8, n - back)
        w = int(b.words[e - back - 8])
        mask = ((1 << (8 * take)) - 1) << (8 * (8 - take))
        checks.append((back + 8, mask, w & mask))
        back += take
    return checks


def _apply(b: _Block, plan: _Plan, rows: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, ...]:
    """(read, input, output, has a time, µs) of lines `rows` (token positions `cols`, one row
    per line) by the plan: read where every check passes and the values are read."""
    a, words = b.a, b.words
    n = len(rows)
    starts = b.starts[rows]
    nl = cols[:, plan.k - 1]
    ok = nl - starts <= MAX_LINE_BYTES
    first = a[starts]
    ok &= (first == 91) if plan.first_bracket else ((first != 91) & (first != 32) & (first != 123))
    if plan.cr:
        ok &= cols[:, plan.k - 2] + 1 == nl
        ok &= cols[:, plan.k - 2] > starts
    else:
        ok &= nl > starts
    for c, v in plan.top_byte:
        ok &= a[cols[:, c] - 1] == v
    for c, checks in plan.top_words:
        e = cols[:, c]
        for back, mask, v in checks:
            ok &= (words[e - back] & _U64(mask)) == _U64(v)
    for c, run in plan.at_start:
        ok &= cols[:, c] - run == starts
    for c in plan.after_quote:
        ok &= a[cols[:, c] + 1] == 34
    for c in plan.after_other:
        x = a[cols[:, c] + 1]
        ok &= (x != 34) & (x != 39)
    line_q = b.line_q[rows]
    total = b.quotes_before(nl) - line_q
    ok &= (total == 0) if plan.no_quotes else ((total & 1) == 0)
    quoted = np.flatnonzero(total)  # a line without quotes has every position outside them
    if len(quoted) and plan.even:
        where = np.concatenate([cols[quoted, c] + off for c, off in plan.even])
        odd = ((b.quotes_before(where) - np.tile(line_q[quoted], len(plan.even))) & 1).reshape(len(plan.even), -1)
        ok[quoted] &= ~odd.any(axis=0).astype(bool)
    in_col, _, out_col, _ = plan.counts
    good, unsure, v_in = _count_values(b, cols[:, in_col])
    ok &= good & ~unsure
    good, unsure, v_out = _count_values(b, cols[:, out_col])
    ok &= good & ~unsure
    micros = np.zeros(n, np.int64)
    timed = np.zeros(n, bool)
    if plan.not_bracket:
        ok &= ~_bracket_shape(words, starts + 1)
    for c in plan.not_clf:
        p = cols[:, c]
        shaped = _clf_runs(words, p)[0]
        ok &= ~(((p == starts) | (a[p - 1] == 32)) & shaped)
    how = plan.time[0]
    if how == "key":
        _, c, in_quotes = plan.time
        micros, good = _runs_of(b, cols[:, c] + 1 + in_quotes, plan.stamp_len + 3,
                                lambda at: _stamp_values(b, at, np.full(len(at), in_quotes)))
        ok &= good
        timed[:] = True
    elif how == "bracket":
        ok &= _bracket_shape(words, starts + 1)
        _, micros, good, _ = _stamp_at(words, starts + 1, bracket=True)
        ok &= good
        timed[:] = True
    elif how == "clf":
        p = cols[:, plan.time[1]]
        shaped, micros, good = _clf_runs(words, p)
        ok &= ((p == starts) | (a[p - 1] == 32)) & shaped & good
        timed[:] = True
    else:
        lines = np.zeros(b.n, bool)
        lines[rows] = True
        ok &= ~_maybe_iso_prefix(b, lines)[rows]
    return ok, v_in, v_out, timed, micros


def _runs_of(b: _Block, at: np.ndarray, width: int, read: Any) -> tuple[np.ndarray, np.ndarray]:
    """`read(at)` -> (µs, ok, length), worked out once per run of rows whose first `width`
    bytes from `at` (at most 24) are the same, where the run's first value and the byte
    after it lie within them; for stamps that repeat line after line."""
    n = len(at)
    width = min(width, 24)
    if n < 2:
        return read(at)[:2]
    words = b.words
    probe = at[:64]  # stamps that change line after line are read at once
    if (words[probe[1:]] == words[probe[:-1]]).sum() * 2 < len(probe) - 1 and width > 8:
        w8 = words[probe + 8] & _M[min(8, width - 8)]
        if ((w8[1:] == w8[:-1]) & (words[probe[1:]] == words[probe[:-1]])).sum() * 2 < len(probe) - 1:
            return read(at)[:2]
    same = np.ones(n - 1, bool)
    for k in range(0, width, 8):
        take = min(8, width - k)
        w = words[at + k] & _M[take]
        same &= w[1:] == w[:-1]
    if same.sum() * 4 < n:  # mostly different: read them all
        return read(at)[:2]
    new = np.ones(n, bool)
    new[1:] = ~same
    heads = np.flatnonzero(new)
    run = np.cumsum(new) - 1
    us, ok, length = read(at[heads])
    us, ok = us[run], ok[run]
    # the parsers look at most 2 bytes past a value's end: a run whose bytes do not hold that
    # much of its first value is read line by line
    wide = np.flatnonzero((length[run] + 3 > width) & ~new)
    if len(wide):
        us[wide], ok[wide], _ = read(at[wide])
    return us, ok


#: plans kept from earlier blocks (a log's layouts carry over), the latest used first
_PLANS_KEPT = 8


def _plans() -> list[_Plan]:
    plans = getattr(LOCAL, "plans", None)
    if plans is None:
        plans = LOCAL.plans = []
    return plans


def _templates(b: _Block, todo: np.ndarray, v_in: np.ndarray, v_out: np.ndarray, micros: np.ndarray,
               timed: np.ndarray) -> np.ndarray:
    """Read the key=value lines `todo` that follow a line plan (one kept from earlier blocks,
    or one made from a line of this block); returns the lines left."""
    todo = todo.copy()
    pending = todo & ~b.json  # lines a plan may still be made from
    counts = np.diff(b.nl_tok, prepend=-1)
    uniform = bool((counts == counts[0]).all())
    plans = _plans()
    for plan in list(plans):
        if not pending.any():
            break
        if _take(b, plan, pending, todo, counts, uniform, v_in, v_out, micros, timed):
            plans.remove(plan)
            plans.insert(0, plan)
    tried = 0
    while tried < _PLANS_PER_BLOCK and pending.any():
        i = int(np.argmax(pending))
        plan = _compile(b, i)
        pending[i] = False
        tried += 1
        if plan is None:
            continue
        _take(b, plan, pending, todo, counts, uniform, v_in, v_out, micros, timed)
        plans.insert(0, plan)
        del plans[_PLANS_KEPT:]
    return todo


def _take(b: _Block, plan: _Plan, pending: np.ndarray, todo: np.ndarray, counts: np.ndarray, uniform: bool,
          v_in: np.ndarray, v_out: np.ndarray, micros: np.ndarray, timed: np.ndarray) -> bool:
    """Read the pending lines that follow the plan; whether any did."""
    k = plan.k
    left = np.flatnonzero(pending)
    if uniform and k == counts[0]:
        rows = left
        if len(rows) == b.n:  # every line: the token arrays as they are
            kinds, cols = b.kind.reshape(b.n, k), b.pos.reshape(b.n, k)
        else:
            kinds, cols = b.kind.reshape(b.n, k)[rows], b.pos.reshape(b.n, k)[rows]
    else:
        rows = left[counts[left] == k]
        if not len(rows):
            return False
        idx = b.nl_tok[rows][:, None] + np.arange(1 - k, 1)
        kinds = b.kind[idx]
        cols = b.pos[idx]
    same = (kinds == plan.kinds).all(axis=1)
    if not same.any():
        return False
    if not same.all():
        rows, cols = rows[same], cols[same]
    ok, r_in, r_out, r_timed, r_us = _apply(b, plan, rows, cols)
    took = rows[ok]
    v_in[took], v_out[took], timed[took], micros[took] = r_in[ok], r_out[ok], r_timed[ok], r_us[ok]
    b.state[took] = _FAST
    todo[took] = False
    pending[took] = False
    return bool(len(took))


# ----------------------------------------------------------------------------- tallying


def _tally(b: _Block, tally: BlockTally, v_in: np.ndarray, v_out: np.ndarray, micros: np.ndarray,
           timed: np.ndarray) -> None:
    _tally_lines(b.buf, b.starts, b.nl, b.state, tally, v_in, v_out, micros, timed)


def _tally_lines(buf: bytearray, starts: np.ndarray, ends: np.ndarray, state: np.ndarray, tally: BlockTally,
                 v_in: np.ndarray, v_out: np.ndarray, micros: np.ndarray, timed: np.ndarray) -> None:
    """Tally a block's lines in arrival order: the ones read fast as they are, each _FALLBACK
    line by the reference reader (`starts`/`ends`: where each line starts, where its newline is)."""
    tally.skipped += int(np.count_nonzero(state == _SKIPPED))
    fallback = np.flatnonzero(state == _FALLBACK)
    cls = np.full(len(state), 255, np.uint8)
    fast = state == _FAST
    cls[fast] = _classes(v_in[fast], v_out[fast])
    seconds = micros // _US
    if len(fallback):
        timed[fallback] = False
        view = memoryview(buf)
        for i, s, e in zip(fallback.tolist(), starts[fallback].tolist(), ends[fallback].tolist(), strict=True):
            found = reference_request(tally, bytes(view[s:e]))
            if found is None:
                continue
            v_in[i], v_out[i], cls[i], at = found
            if at is not None:
                timed[i] = True
                seconds[i] = int(at.timestamp())
                micros[i] = epoch_micros(at)
    req = cls != 255
    timed &= req
    t = np.flatnonzero(timed)
    _add_times(tally, seconds[t], micros[t], cls[t].astype(np.int64))
    if req.all():
        _add_requests(tally, v_in, v_out, cls)
    else:
        _add_requests(tally, v_in[req], v_out[req], cls[req])
