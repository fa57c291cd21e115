/* The access-log line scanner, compiled: reads each line of a block the way
 * collectors.access_logs.reference.parse_access_line reads it, and takes a line only when it can
 * show that the two readings agree. Every other line is left to parse_access_line (state
 * FALLBACK), so what the scan reports is always what the line-by-line reader reports.
 *
 * Read here, exactly as the reference reads them:
 *   - key=value lines: every `key=value` pair the reference's regex finds (keys after the line
 *     start or a space , ; { ( ; values bare, in double or in single quotes), the first of each
 *     key counting; the counts from input_tokens / prompt_tokens and output_tokens /
 *     completion_tokens, else from the `input_tokens: N` search the reference falls back to;
 *     lines without counts are counted as skipped, as the reference counts them;
 *   - times: the first time key's value (RFC 3339 / ISO 8601 forms the reference accepts,
 *     Unix epochs in seconds with up to 6 fraction digits and in milliseconds), else `[ISO]` at
 *     the line start, else the first nginx/Apache `[10/Oct/2026:13:55:36 +0000]`, else a
 *     JSON-style `"created": ...` / `"time": ...` in the text;
 *   - JSON lines (starting with `{`): validated against the JSON grammar json.loads accepts,
 *     the counts read from the holders the reference tries, in its order (usage, the object,
 *     response.usage, meta_info, out.meta_info), the time from created / time / timestamp /
 *     ts / @timestamp of the object, then of its response; a line starting with `{` that
 *     json.loads refuses, or whose holders lack the counts, is read as text, as the reference
 *     reads it.
 *
 * Left to the reference: control bytes other than a final CR, non-ASCII bytes, a leading or
 * trailing blank, duplicate or escaped keys where they matter, NaN and Infinity, nesting deeper
 * than 64, numbers of over 300 characters, token counts written as floats, epochs in micro- or
 * nanoseconds, years outside 1971..9998, a time value in any other form, a line without a time
 * whose first 40 characters might hold an ISO time.
 *
 * scan_lines(buf, start, end, max_line, state, v_in, v_out, micros, ends) -> (lines, next)
 *   buf[start:end] holds whole lines, the last ending with a newline; the lines are read until
 *   the output arrays are full (`next`: where the first line not read starts). Per line i: state[i]
 *   (int8: 0 fallback, 1 counts without a time, 2 blank, 3 skipped, 4 counts with a time),
 *   v_in[i], v_out[i], micros[i] (int64, µs since the epoch, UTC) and ends[i] (int64, the
 *   offset of its newline). A line longer than max_line bytes is skipped, as the reference
 *   skips it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

enum { ST_FALLBACK = 0, ST_UNTIMED = 1, ST_IGNORED = 2, ST_SKIPPED = 3, ST_TIMED = 4 };
/* the outcome of reading a time: a time, certainly none (the reference reads None), or not
 * shown to agree (the line goes to the reference) */
enum { T_TIME = 0, T_NONE = 1, T_UNSURE = 2 };

#define MAX_TOKENS 999999999LL
#define EPOCH_MIN_S 946684800LL
#define EPOCH_MAX_S 4102444800LL
#define US 1000000LL
#define MAX_DEPTH 64

typedef struct {
    const unsigned char *p;
    Py_ssize_t n;
} span;

/* character classes, one table lookup each (filled at import) */
enum { C_DIGIT = 1, C_WORD = 2, C_KEY_HEAD = 4, C_KEY_CHAR = 8, C_KEY_DELIM = 16, C_ENDS_BARE = 32, C_STR_STOP = 64 };
static unsigned char classes[256];

static void fill_classes(void) {
    for (int c = 0; c < 256; c++) {
        int is_dig = c >= '0' && c <= '9', alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');
        int word = is_dig || alpha || c == '_';
        classes[c] = (unsigned char)((is_dig ? C_DIGIT : 0) | (word ? C_WORD : 0) |
                                     /* a key's first character, [A-Za-z_@] */
                                     (alpha || c == '_' || c == '@' ? C_KEY_HEAD : 0) |
                                     /* a key's other characters, [\w.@-] */
                                     (word || c == '.' || c == '@' || c == '-' ? C_KEY_CHAR : 0) |
                                     /* what may stand before a key, [\s,;{(] (no control bytes reach here) */
                                     (c == ' ' || c == ',' || c == ';' || c == '{' || c == '(' ? C_KEY_DELIM : 0) |
                                     /* what ends a bare value, [\s,;"')}] */
                                     (c == ' ' || c == ',' || c == ';' || c == '"' || c == '\'' || c == ')' || c == '}'
                                          ? C_ENDS_BARE : 0) |
                                     (c == '"' || c == '\\' ? C_STR_STOP : 0));
    }
}

static inline int is_digit(unsigned char c) { return classes[c] & C_DIGIT; }
static inline int is_word(unsigned char c) { return classes[c] & C_WORD; }
static inline int is_key_head(unsigned char c) { return classes[c] & C_KEY_HEAD; }
static inline int is_key_char(unsigned char c) { return classes[c] & C_KEY_CHAR; }
static inline int is_key_delim(unsigned char c) { return classes[c] & C_KEY_DELIM; }
static inline int ends_bare(unsigned char c) { return classes[c] & C_ENDS_BARE; }

/* Runs of bytes. JSON strings are searched 16 bytes at a time where SSE2 is (every x86-64): a
 * 16-byte load may read past the line (never past `limit`, the end of the caller's buffer), and
 * what it finds there is not used. The key=value runs are short: a byte at a time measured
 * faster for them than 16 at a time (benchmarks/bench_profile_vs_mawk.py). */
#if defined(__SSE2__)
#include <emmintrin.h>
#define EQ(v, c) _mm_cmpeq_epi8((v), _mm_set1_epi8((char)(c)))
/* bytes that are at most `hi` after subtracting `lo` (unsigned) */
static inline __m128i in_range(__m128i v, char lo, char hi_minus_lo) {
    __m128i d = _mm_sub_epi8(v, _mm_set1_epi8(lo));
    return _mm_cmpeq_epi8(_mm_min_epu8(d, _mm_set1_epi8(hi_minus_lo)), d);
}
#endif

static inline Py_ssize_t clamp(Py_ssize_t at, Py_ssize_t n) { return at < n ? at : n; }

/* the first i' >= i where p[i'] ends a bare value ([\s,;"')}]), or n: the first 8 bytes one at
 * a time (most values are short counts and words), then 16 at a time where SSE2 is, as long as
 * 16 bytes of the line are left (times, trace and request ids run 20 to 40 bytes: a byte loop
 * over them was about a quarter of read_text's perf samples on logfmt with extra fields) */
static inline Py_ssize_t bare_end(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    for (Py_ssize_t stop = i + 8 < n ? i + 8 : n; i < stop; i++)
        if (ends_bare(p[i])) return i;
#if defined(__SSE2__)
    while (i + 16 <= n) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        __m128i hit = _mm_or_si128(_mm_or_si128(_mm_or_si128(EQ(v, ' '), EQ(v, ',')), _mm_or_si128(EQ(v, ';'), EQ(v, '"'))),
                                   _mm_or_si128(_mm_or_si128(EQ(v, '\''), EQ(v, ')')), EQ(v, '}')));
        int bits = _mm_movemask_epi8(hit);
        if (bits) return i + __builtin_ctz((unsigned)bits);
        i += 16;
    }
#endif
    while (i < n && !ends_bare(p[i])) i++;
    return i;
}

/* the first i' >= i where p[i'] is no key character ([\w.@-]), or n: a byte at a time, which
 * measured faster than 16 at a time on real keys (they are short) */
static inline Py_ssize_t key_run_end(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && is_key_char(p[i])) i++;
    return i;
}

/* the first i' >= i where p[i'] may stand before a key ([\s,;{(]), or n */
static inline Py_ssize_t delim_next(const unsigned char *p, Py_ssize_t i, Py_ssize_t n) {
    while (i < n && !is_key_delim(p[i])) i++;
    return i;
}

/* the first i' >= i where p[i'] is `"` or a backslash, or n */
static inline Py_ssize_t string_stop(const unsigned char *p, Py_ssize_t i, Py_ssize_t n, const unsigned char *limit) {
#if defined(__SSE2__)
    while (i < n && p + i + 16 <= limit) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        int bits = _mm_movemask_epi8(_mm_or_si128(EQ(v, '"'), EQ(v, '\\')));
        if (bits) return clamp(i + __builtin_ctz((unsigned)bits), n);
        i += 16;
    }
#else
    (void)limit;
#endif
    while (i < n && !(classes[p[i]] & C_STR_STOP)) i++;
    return clamp(i, n);
}

/* whether p[0:n] holds a byte outside printable ASCII (0x20..0x7E): 16 bytes at a time where
 * SSE2 is (GCC -O2 leaves the byte loop scalar; it was a fifth of the scan's time), the tail a
 * byte at a time */
static inline int has_odd_bytes(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t i = 0;
#if defined(__SSE2__)
    __m128i odd16 = _mm_setzero_si128();
    for (; i + 16 <= n; i += 16) {
        __m128i v = _mm_loadu_si128((const __m128i *)(p + i));
        /* printable when v - 0x20 is at most 0x5E (unsigned) */
        odd16 = _mm_or_si128(odd16, _mm_xor_si128(in_range(v, 0x20, 0x5E), _mm_set1_epi8(-1)));
    }
    if (_mm_movemask_epi8(odd16)) return 1;
#endif
    unsigned char odd = 0;
    for (; i < n; i++) odd |= (unsigned char)(p[i] - 0x20) > 0x5E;
    return odd;
}

static inline int span_is(span s, const char *text, Py_ssize_t n) { return s.n == n && memcmp(s.p, text, (size_t)n) == 0; }

/* Names found by length and first character: one table lookup, then one comparison (a switch
 * on the length costs an indirect jump that the CPU mispredicts on nearly every key). */
#define MAX_NAME 17
typedef struct {
    const char *const *names;
    int count;
    unsigned char slot[256];            /* by first character: 1..3 for the ones given, else 0 */
    signed char by_shape[MAX_NAME + 1][4]; /* [length][slot] -> name index, -1 for none */
} name_table;

/* Fills a table, `firsts` (up to three characters) telling names of one length apart; -1 when
 * two names would share a cell (the module then refuses to load). */
static int fill_names(name_table *table, const char *firsts) {
    memset(table->slot, 0, sizeof table->slot);
    for (int i = 0; firsts[i] && i < 3; i++) table->slot[(unsigned char)firsts[i]] = (unsigned char)(i + 1);
    memset(table->by_shape, -1, sizeof table->by_shape);
    for (int k = 0; k < table->count; k++) {
        size_t n = strlen(table->names[k]);
        if (n < 1 || n > MAX_NAME) return -1;
        signed char *cell = &table->by_shape[n][table->slot[(unsigned char)table->names[k][0]]];
        if (*cell >= 0) return -1;
        *cell = (signed char)k;
    }
    return 0;
}

/* bytes p[0:8] as one word (a load the compiler makes a single move) */
static inline uint64_t word8(const unsigned char *p) {
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* the index of the name p[0:n] is, or -1: compared a word at a time, the first 8 bytes and the
 * last 8 (overlapping) for names of 8 to 17 bytes (at 17, also the byte between), a byte at a time below 8 (a call to memcmp
 * for names this short cost more than the comparison; a byte loop over 13- to 17-byte names
 * was about a sixth of json_value's perf samples) */
static inline int name_of(const name_table *table, const unsigned char *p, Py_ssize_t n) {
    if (n < 1 || n > MAX_NAME) return -1;
    int k = table->by_shape[n][table->slot[p[0]]];
    if (k < 0) return -1;
    const unsigned char *name = (const unsigned char *)table->names[k];
    if (n >= 8) {
        if (word8(p) != word8(name)) return -1;
        if (n > 16 && p[8] != name[8]) return -1; /* 17 bytes: the middle byte the two words miss */
        return word8(p + n - 8) == word8(name + n - 8) ? k : -1;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] != name[i]) return -1;
    return k;
}

/* ------------------------------------------------------------------------------ dates */

static int64_t days_from_civil(int64_t y, int64_t m, int64_t d) {
    y -= m <= 2;
    const int64_t era = (y >= 0 ? y : y - 399) / 400;
    const int64_t yoe = y - era * 400;
    const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int days_in_month(int y, int m) {
    static const int days[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m == 2 && ((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 29;
    return days[m - 1];
}

static inline int num2(const unsigned char *p) { return (p[0] - '0') * 10 + (p[1] - '0'); }
static inline int dig2(const unsigned char *p, Py_ssize_t at, Py_ssize_t n) { return at + 2 <= n && is_digit(p[at]) && is_digit(p[at + 1]); }

/* A date and time as datetime(...) would take it, less the zone offset (minutes east): T_TIME,
 * T_NONE where datetime or the offset check refuses it, T_UNSURE outside the years read here. */
static int civil_micros(int y, int mo, int d, int h, int mi, int s, int64_t frac_us, int zone_sign, int zh, int zm,
                        int64_t *out) {
    if (y < 1971 || y > 9998) return T_UNSURE;
    if (mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || s > 59) return T_NONE;
    if (zone_sign && (zh > 23 || zm > 59)) return T_NONE;
    int64_t t = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    t -= (int64_t)zone_sign * (zh * 3600 + zm * 60);
    *out = t * US + frac_us;
    return T_TIME;
}

/* fraction digits (any number) as datetime's microseconds: the first six, padded */
static int64_t frac_micros(const unsigned char *p, Py_ssize_t k) {
    int64_t us = 0;
    for (Py_ssize_t i = 0; i < 6; i++) us = us * 10 + (i < k ? p[i] - '0' : 0);
    return us;
}

/* log_time.parse_time (the _ISO regex, whole text, already stripped). */
static int iso_full(span s, int64_t *out) {
    const unsigned char *p = s.p;
    Py_ssize_t n = s.n, i = 0;
    if (n < 4 || !is_digit(p[0]) || !is_digit(p[1]) || !is_digit(p[2]) || !is_digit(p[3])) return T_UNSURE;
    int y = (p[0] - '0') * 1000 + (p[1] - '0') * 100 + (p[2] - '0') * 10 + (p[3] - '0');
    i = 4;
    if (i < n && p[i] == '-') i++;
    if (!dig2(p, i, n)) return T_UNSURE;
    int mo = num2(p + i);
    i += 2;
    if (i < n && p[i] == '-') i++;
    if (!dig2(p, i, n)) return T_UNSURE;
    int d = num2(p + i);
    i += 2;
    if (i >= n || (p[i] != 'T' && p[i] != ' ')) return T_UNSURE;
    i++;
    if (!dig2(p, i, n)) return T_UNSURE;
    int h = num2(p + i);
    i += 2;
    if (i < n && p[i] == ':') i++;
    if (!dig2(p, i, n)) return T_UNSURE;
    int mi = num2(p + i);
    i += 2;
    int sec = 0;
    int64_t frac = 0;
    Py_ssize_t at = i;
    if (at < n && p[at] == ':') at++;
    if (dig2(p, at, n)) {
        sec = num2(p + at);
        i = at + 2;
        if (i + 1 < n && (p[i] == '.' || p[i] == ',') && is_digit(p[i + 1])) {
            Py_ssize_t k = 0;
            while (i + 1 + k < n && is_digit(p[i + 1 + k])) k++;
            if (k > 12) return T_UNSURE;
            frac = frac_micros(p + i + 1, k);
            i += 1 + k;
        }
    }
    while (i < n && p[i] == ' ') i++;
    int sign = 0, zh = 0, zm = 0;
    if (i < n) {
        if (p[i] == 'Z' || p[i] == 'z') {
            i++;
        } else if (i + 3 <= n && p[i] == 'U' && p[i + 1] == 'T' && p[i + 2] == 'C') {
            i += 3;
        } else if ((p[i] == '+' || p[i] == '-') && dig2(p, i + 1, n)) {
            sign = p[i] == '+' ? 1 : -1;
            zh = num2(p + i + 1);
            i += 3;
            Py_ssize_t z = i;
            if (z < n && p[z] == ':') z++;
            if (dig2(p, z, n)) {
                zm = num2(p + z);
                i = z + 2;
            }
        }
    }
    if (i != n) return T_UNSURE;
    return civil_micros(y, mo, d, h, mi, sec, frac, sign, zh, zm, out);
}

/* Unix epoch text (digits with at most one dot, as _time_value sends to epoch_time). */
static int epoch_text(span s, int64_t *out) {
    const unsigned char *p = s.p;
    Py_ssize_t n = s.n, dot = -1;
    for (Py_ssize_t i = 0; i < n; i++)
        if (p[i] == '.') dot = i;
    Py_ssize_t int_end = dot < 0 ? n : dot, frac_n = dot < 0 ? 0 : n - dot - 1;
    int64_t v = 0;
    Py_ssize_t sig = 0;
    for (Py_ssize_t i = 0; i < int_end; i++) {
        if (sig || p[i] != '0') sig++;
        if (sig > 15) return T_UNSURE;
        v = v * 10 + (p[i] - '0');
    }
    if (frac_n > 0) {
        if (frac_n > 6 || v < EPOCH_MIN_S || v >= EPOCH_MAX_S) return T_UNSURE;
        *out = v * US + frac_micros(p + dot + 1, frac_n);
        return T_TIME;
    }
    if (v >= EPOCH_MIN_S && v < EPOCH_MAX_S) {
        *out = v * US;
        return T_TIME;
    }
    if (v >= EPOCH_MIN_S * 1000 && v < EPOCH_MAX_S * 1000) {
        *out = v * 1000;
        return T_TIME;
    }
    if (v < EPOCH_MIN_S) return T_NONE;
    if (v < EPOCH_MIN_S * 1000) return T_NONE;
    return T_UNSURE; /* micro- and nanoseconds: rounding as CPython's, not shown here */
}

/* _time_value of a string (a key=value value or a JSON string without escapes) */
static int time_of_text(span s, int64_t *out) {
    if (s.n > 64) return T_NONE;
    while (s.n && s.p[0] == ' ') s.p++, s.n--;
    while (s.n && s.p[s.n - 1] == ' ') s.n--;
    /* digits with at most one dot go to epoch_time, all else to parse_time, then clf_time */
    Py_ssize_t i = 0, dots = 0;
    while (i < s.n && (is_digit(s.p[i]) || s.p[i] == '.')) dots += s.p[i++] == '.';
    if (i == s.n && dots <= 1 && s.n > dots) return epoch_text(s, out);
    int t = iso_full(s, out);
    if (t != T_UNSURE) return t;
    for (i = 0; i < s.n; i++)
        if (is_digit(s.p[i])) return T_UNSURE;
    return T_NONE; /* no time form reads a text without digits */
}

/* `[` + ISO time at the line start (_BRACKET_TIME, then parse_time of what it took) */
static int bracket_iso(span line, int64_t *out, int *matched) {
    const unsigned char *p = line.p;
    Py_ssize_t n = line.n;
    *matched = 0;
    /* [dddd-dd-dd?dd:dd:dd */
    if (n < 20 || p[0] != '[') return T_NONE;
    static const char shape[] = "[0000-00-00 00:00:00";
    for (int i = 1; i < 20; i++) {
        char want = shape[i];
        if (want == '0') {
            if (!is_digit(p[i])) return T_NONE;
        } else if (i == 11) {
            if (p[i] != 'T' && p[i] != ' ') return T_NONE;
        } else if (p[i] != (unsigned char)want) {
            return T_NONE;
        }
    }
    *matched = 1;
    Py_ssize_t i = 20;
    int64_t frac = 0;
    if (i + 1 < n && (p[i] == '.' || p[i] == ',') && is_digit(p[i + 1])) {
        Py_ssize_t k = 0;
        while (k < 9 && i + 1 + k < n && is_digit(p[i + 1 + k])) k++;
        frac = frac_micros(p + i + 1, k);
        i += 1 + k;
    }
    int sign = 0, zh = 0, zm = 0;
    if (i < n && (p[i] == 'Z' || p[i] == 'z')) {
        i++;
    } else if (i < n && (p[i] == '+' || p[i] == '-') && dig2(p, i + 1, n)) {
        sign = p[i] == '+' ? 1 : -1;
        zh = num2(p + i + 1);
        i += 3;
        Py_ssize_t z = i;
        if (z < n && p[z] == ':') z++;
        if (dig2(p, z, n)) zm = num2(p + z);
    }
    return civil_micros((p[1] - '0') * 1000 + (p[2] - '0') * 100 + (p[3] - '0') * 10 + (p[4] - '0'), num2(p + 6),
                        num2(p + 9), num2(p + 12), num2(p + 15), num2(p + 18), frac, sign, zh, zm, out);
}

/* the first nginx/Apache ` [10/Oct/2026:13:55:36 +0000]` (_CLF_BRACKET, then clf_time) */
static int clf_bracket(span line, int64_t *out, int *matched) {
    static const char *months[12] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    const unsigned char *p = line.p;
    Py_ssize_t n = line.n;
    *matched = 0;
    for (Py_ssize_t q = 0; q + 28 <= n; q++) {
        const unsigned char *b = memchr(p + q, '[', (size_t)(n - 28 - q + 1));
        if (b == NULL) return T_NONE;
        q = b - p;
        if (q > 0 && p[q - 1] != ' ') continue;
        const unsigned char *g = b + 1; /* dd/Mmm/yyyy:hh:mm:ss +zzzz] */
        int ok = is_digit(g[0]) && is_digit(g[1]) && g[2] == '/' && g[6] == '/' && g[11] == ':' && g[14] == ':' &&
                 g[17] == ':' && g[20] == ' ' && (g[21] == '+' || g[21] == '-') && g[26] == ']';
        for (int k = 3; ok && k < 6; k++) ok = (g[k] >= 'A' && g[k] <= 'Z') || (g[k] >= 'a' && g[k] <= 'z');
        static const int digits_at[] = {7, 8, 9, 10, 12, 13, 15, 16, 18, 19, 22, 23, 24, 25};
        for (size_t k = 0; ok && k < sizeof digits_at / sizeof digits_at[0]; k++) ok = is_digit(g[digits_at[k]]);
        if (!ok) continue;
        *matched = 1;
        int mo = 0;
        for (int k = 0; k < 12; k++)
            if (memcmp(g + 3, months[k], 3) == 0) mo = k + 1;
        if (!mo) return T_NONE;
        int y = (g[7] - '0') * 1000 + (g[8] - '0') * 100 + (g[9] - '0') * 10 + (g[10] - '0');
        return civil_micros(y, mo, num2(g), num2(g + 12), num2(g + 15), num2(g + 18), 0, g[21] == '+' ? 1 : -1,
                            num2(g + 22), num2(g + 24), out);
    }
    return T_NONE;
}

/* whether _ISO.search(line[:40]) would find anything: its required part
 * \d{4}-?\d{2}-?\d{2}[T ]\d{2}:?\d{2} inside the first 40 characters */
static int iso_in_head(span line) {
    Py_ssize_t n = line.n < 40 ? line.n : 40;
    const unsigned char *p = line.p;
    for (Py_ssize_t s = 0; s + 13 <= n; s++) {
        Py_ssize_t i = s;
        if (!(is_digit(p[i]) && is_digit(p[i + 1]) && is_digit(p[i + 2]) && is_digit(p[i + 3]))) continue;
        i += 4;
        if (i < n && p[i] == '-') i++;
        if (!dig2(p, i, n)) continue;
        i += 2;
        if (i < n && p[i] == '-') i++;
        if (!dig2(p, i, n)) continue;
        i += 2;
        if (i >= n || (p[i] != 'T' && p[i] != ' ')) continue;
        i++;
        if (!dig2(p, i, n)) continue;
        i += 2;
        if (i < n && p[i] == ':') i++;
        if (!dig2(p, i, n)) continue;
        return 1;
    }
    return 0;
}

static const char *const json_time_names[5] = {"created", "time", "timestamp", "ts", "@timestamp"};
static name_table time_table = {.names = json_time_names, .count = 5};

/* _json_key_time: the JSON-style time keys in text that was not read as JSON. Every match of
 * `"(created|time|timestamp|ts|@timestamp)"\s*:\s*("[^"]*"|[-+.\w]+)`, left to right as findall
 * takes them; the first value of each key; the keys tried in that order. */
static int json_key_time(span line, int64_t *us) {
    const unsigned char *p = line.p;
    Py_ssize_t n = line.n, i = 0;
    span first[5];
    int have[5] = {0};
    while (i < n) {
        const unsigned char *q = memchr(p + i, '"', (size_t)(n - i));
        if (q == NULL) break;
        Py_ssize_t at = q - p;
        i = at + 1;
        const unsigned char *close = memchr(p + at + 1, '"', (size_t)(n - at - 1));
        if (close == NULL) break;
        span key = {p + at + 1, close - (p + at + 1)};
        int kind = name_of(&time_table, key.p, key.n);
        if (kind < 0) continue;
        Py_ssize_t j = close - p + 1;
        while (j < n && p[j] == ' ') j++;
        if (j >= n || p[j] != ':') continue;
        j++;
        while (j < n && p[j] == ' ') j++;
        span value;
        Py_ssize_t end;
        if (j < n && p[j] == '"') {
            const unsigned char *vq = memchr(p + j + 1, '"', (size_t)(n - j - 1));
            if (vq == NULL) continue;
            value.p = p + j + 1;
            value.n = vq - (p + j + 1);
            end = vq - p + 1;
        } else {
            Py_ssize_t e = j;
            while (e < n && (is_word(p[e]) || p[e] == '-' || p[e] == '+' || p[e] == '.')) e++;
            if (e == j) continue;
            value.p = p + j;
            value.n = e - j;
            end = e;
        }
        if (!have[kind]) {
            have[kind] = 1;
            first[kind] = value;
        }
        i = end;
    }
    for (int k = 0; k < 5; k++) {
        if (!have[k]) continue;
        int r = time_of_text(first[k], us);
        if (r != T_NONE) return r;
    }
    return T_NONE;
}

/* ------------------------------------------------------------------------------ counts */

/* _tokens of a string value: 1..12 ASCII digits, at most MAX_TOKENS; -1 for None */
static int64_t tokens_of_text(span s) {
    if (s.n < 1 || s.n > 12) return -1;
    int64_t v = 0;
    for (Py_ssize_t i = 0; i < s.n; i++) {
        if (!is_digit(s.p[i])) return -1;
        v = v * 10 + (s.p[i] - '0');
    }
    return v <= MAX_TOKENS ? v : -1;
}

/* _IN_ANY / _OUT_ANY: the first `(input|prompt)_tokens['"]?\s*[:=]\s*['"]?(\d{1,12})\b` not
 * after a word character or `-`; 1 and the digits, or 0 */
static int any_count(span line, const char *a, const char *b, span *digits) {
    const unsigned char *p = line.p;
    Py_ssize_t n = line.n;
    size_t la = strlen(a), lb = strlen(b);
    for (Py_ssize_t i = 0; i < n; i++) {
        size_t k;
        if (p[i] == (unsigned char)a[0] && (size_t)(n - i) >= la && memcmp(p + i, a, la) == 0) k = la;
        else if (p[i] == (unsigned char)b[0] && (size_t)(n - i) >= lb && memcmp(p + i, b, lb) == 0) k = lb;
        else continue;
        if (i > 0 && (is_word(p[i - 1]) || p[i - 1] == '-')) continue;
        Py_ssize_t j = i + (Py_ssize_t)k;
        if (j < n && (p[j] == '\'' || p[j] == '"')) j++;
        while (j < n && p[j] == ' ') j++;
        if (j >= n || (p[j] != ':' && p[j] != '=')) continue;
        j++;
        while (j < n && p[j] == ' ') j++;
        if (j < n && (p[j] == '\'' || p[j] == '"')) j++;
        Py_ssize_t d = 0;
        while (j + d < n && is_digit(p[j + d])) d++;
        if (d < 1 || d > 12 || (j + d < n && is_word(p[j + d]))) continue;
        digits->p = p + j;
        digits->n = d;
        return 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------------ key=value */

enum { K_IN_A, K_IN_B, K_OUT_A, K_OUT_B, K_TIME, K_TIMESTAMP, K_TS, K_AT_TIMESTAMP, K_COUNT };

static const char *const key_names[K_COUNT] = {"input_tokens", "prompt_tokens", "output_tokens", "completion_tokens",
                                               "time", "timestamp", "ts", "@timestamp"};
static name_table key_table = {.names = key_names, .count = K_COUNT};

/* a key=value match whose key starts at k: 1 and the value (and where the match ends), or 0 */
static inline __attribute__((always_inline)) int pair_at(const unsigned char *p, Py_ssize_t n, Py_ssize_t k, Py_ssize_t *key_end,
                   span *value, Py_ssize_t *end) {
    if (k >= n || !is_key_head(p[k])) return 0;
    Py_ssize_t r = key_run_end(p, k + 1, n);
    if (r - k - 1 > 40 || r >= n || p[r] != '=') return 0;
    *key_end = r;
    Py_ssize_t v = r + 1;
    if (v < n && (p[v] == '"' || p[v] == '\'')) {
        const unsigned char *close = memchr(p + v + 1, p[v], (size_t)(n - v - 1));
        if (close != NULL) {
            value->p = p + v + 1;
            value->n = close - (p + v + 1);
            *end = close - p + 1;
            return 1;
        }
        value->p = p + v;
        value->n = 0;
        *end = v;
        return 1;
    }
    Py_ssize_t e = bare_end(p, v, n);
    value->p = p + v;
    value->n = e - v;
    *end = e;
    return 1;
}

/* The next match of the key=value regex at or after `pos` (where the previous one ended),
 * found from the `=` it needs rather than by trying a key after every delimiter: a key holds no
 * `=` and no delimiter, so a match's `=` is the first byte after its key that is no key
 * character, and each `=` has one candidate key, the run of key characters before it. It is
 * a match when that run starts with a key head, is at most 41 long and follows a delimiter at
 * or after `pos` (or starts the line when `pos` is 0). An `=` that fails cannot belong to a
 * later match either, so the first `=` that passes gives the leftmost match, as the regex
 * finds it. 1 and the key's start (`key`), where the key ends, the value and where the match
 * ends; or 0. */
__attribute__((noinline, cold)) static int next_pair(const unsigned char *p, Py_ssize_t n, Py_ssize_t pos, Py_ssize_t *key, Py_ssize_t *key_end,
                     span *value, Py_ssize_t *end) {
    Py_ssize_t from = pos;
    while (from < n) {
        const unsigned char *q = memchr(p + from, '=', (size_t)(n - from));
        if (q == NULL) return 0;
        Py_ssize_t e = q - p, k = e;
        while (k > pos && k > e - 42 && is_key_char(p[k - 1])) k--;
        int ok = k < e && e - k <= 41 && is_key_head(p[k]) && (k == 0 || (k - 1 >= pos && is_key_delim(p[k - 1])));
        if (!ok) {
            from = e + 1;
            continue;
        }
        *key = k;
        return pair_at(p, n, k, key_end, value, end);
    }
    return 0;
}

static int read_text(span line, int64_t *v_in, int64_t *v_out, int64_t *us) {
    const unsigned char *p = line.p;
    Py_ssize_t n = line.n;
    span found[K_COUNT];
    int have[K_COUNT] = {0};
    span stamp = {NULL, 0};
    int have_stamp = 0;
    {
        Py_ssize_t pos = 0;
        while (pos < n) {
            Py_ssize_t key_end = 0, end = 0, k = -1;
            span value;
            /* the next match of the key=value regex: most often a key at the line start or
             * after the next delimiter (logfmt: one pair after another), else found from an `=` */
            if (pos == 0 && pair_at(p, n, 0, &key_end, &value, &end)) {
                k = 0;
            } else {
                Py_ssize_t s = delim_next(p, pos, n);
                if (s >= n) break; /* no delimiter left: no key can follow one */
                if (__builtin_expect(pair_at(p, n, s + 1, &key_end, &value, &end), 1)) k = s + 1;
                else if (!next_pair(p, n, s + 1, &k, &key_end, &value, &end)) break;
            }
            int kind = name_of(&key_table, p + k, key_end - k);
            if (kind >= 0) {
                if (!have[kind]) {
                    have[kind] = 1;
                    found[kind] = value;
                }
                if (kind >= K_TIME && !have_stamp) {
                    have_stamp = 1;
                    stamp = value;
                }
            }
            pos = end;
        }
    }
    int64_t a = have[K_IN_A] ? tokens_of_text(found[K_IN_A]) : have[K_IN_B] ? tokens_of_text(found[K_IN_B]) : -1;
    int64_t b = have[K_OUT_A] ? tokens_of_text(found[K_OUT_A]) : have[K_OUT_B] ? tokens_of_text(found[K_OUT_B]) : -1;
    if (a < 0 || b < 0) {
        span da, db;
        if (!any_count(line, "input_tokens", "prompt_tokens", &da) ||
            !any_count(line, "output_tokens", "completion_tokens", &db))
            return ST_SKIPPED;
        a = tokens_of_text(da);
        b = tokens_of_text(db);
        if (a < 0 || b < 0) return ST_SKIPPED;
    }
    *v_in = a;
    *v_out = b;
    if (have_stamp) {
        int t = time_of_text(stamp, us);
        if (t == T_TIME) return ST_TIMED;
        if (t == T_UNSURE) return ST_FALLBACK;
    }
    /* the line's own time, in the reference's order */
    int matched = 0;
    int t = bracket_iso(line, us, &matched);
    if (matched) return t == T_TIME ? ST_TIMED : t == T_NONE ? ST_UNTIMED : ST_FALLBACK;
    t = clf_bracket(line, us, &matched);
    if (matched) return t == T_TIME ? ST_TIMED : t == T_NONE ? ST_UNTIMED : ST_FALLBACK;
    if (memchr(p, '"', (size_t)n) != NULL) {
        t = json_key_time(line, us);
        if (t == T_TIME) return ST_TIMED;
        if (t == T_UNSURE) return ST_FALLBACK;
    }
    if (iso_in_head(line)) return ST_FALLBACK;
    return ST_UNTIMED;
}

/* ------------------------------------------------------------------------------ JSON */

enum { V_NONE, V_OBJ, V_ARR, V_STR, V_INT, V_FLOAT, V_TRUE, V_FALSE, V_NULL };

typedef struct {
    int type;
    int escaped; /* a string with backslashes */
    span text;   /* a string's content, or a number's text */
} slot;

/* the objects whose keys the reference reads */
enum { O_TOP, O_USAGE, O_RESP, O_RESP_USAGE, O_META, O_OUT, O_OUT_META, O_COUNT };
/* the keys read in them */
enum {
    J_INPUT, J_PROMPT, J_OUTPUT, J_COMPLETION, J_CREATED, J_TIME, J_TIMESTAMP, J_TS, J_AT_TIMESTAMP, J_USAGE,
    J_RESPONSE, J_META_INFO, J_OUT, J_KEYS
};

typedef struct {
    const unsigned char *p, *limit;
    Py_ssize_t n, i;
    int unsure; /* valid JSON, but not shown to read as the reference reads it */
    unsigned char counts[O_COUNT][J_KEYS]; /* times each key was seen; a slot is set only where its count is not 0 */
    slot slots[O_COUNT][J_KEYS];           /* last: not zeroed per line (2.9 kB that cost a twentieth of the scan) */
} json_state;

/* the JSON keys read */
static const char *const json_names[J_KEYS] = {"input_tokens", "prompt_tokens", "output_tokens", "completion_tokens",
                                               "created", "time", "timestamp", "ts", "@timestamp", "usage",
                                               "response", "meta_info", "out"};
static name_table json_table = {.names = json_names, .count = J_KEYS};

/* the object a key's object value is, inside object `where` (-1: none the reference reads) */
static int child_object(int where, int key) {
    switch (where) {
    case O_TOP: return key == J_USAGE ? O_USAGE : key == J_RESPONSE ? O_RESP : key == J_META_INFO ? O_META
                     : key == J_OUT ? O_OUT : -1;
    case O_RESP: return key == J_USAGE ? O_RESP_USAGE : -1;
    case O_OUT: return key == J_META_INFO ? O_OUT_META : -1;
    default: return -1;
    }
}

/* (locals: j->p is a char pointer, which may alias *j, so the loop on the fields themselves
 * reloaded and stored j->i at every byte) */
static inline void skip_ws(json_state *j) {
    const unsigned char *p = j->p;
    Py_ssize_t i = j->i, n = j->n;
    while (i < n && p[i] == ' ') i++;
    j->i = i;
}

static inline int hex(unsigned char c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* a string at j->i (at its quote): its content and whether it has escapes; 0 when invalid
 * (inlined, as json_number is: called out of line they were a tenth of the JSON scan) */
static inline __attribute__((always_inline)) int json_string(json_state *j, span *text, int *escaped) {
    const unsigned char *p = j->p;
    Py_ssize_t i = j->i + 1, n = j->n;
    *escaped = 0;
    for (;;) {
        i = string_stop(p, i, n, j->limit);
        if (i >= n) return 0;
        if (p[i] == '"') break;
        *escaped = 1;
        if (i + 1 >= n) return 0;
        unsigned char e = p[i + 1];
        if (e == 'u') {
            if (i + 6 > n || !hex(p[i + 2]) || !hex(p[i + 3]) || !hex(p[i + 4]) || !hex(p[i + 5])) return 0;
            i += 6;
        } else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
            i += 2;
        } else {
            return 0;
        }
    }
    text->p = p + j->i + 1;
    text->n = i - j->i - 1;
    j->i = i + 1;
    return 1;
}

/* a number at j->i (NUMBER_RE of json.scanner); 0 when there is none */
static inline __attribute__((always_inline)) int json_number(json_state *j, span *text, int *is_float) {
    const unsigned char *p = j->p;
    Py_ssize_t i = j->i, n = j->n, start = j->i;
    *is_float = 0;
    if (i < n && p[i] == '-') i++;
    if (i >= n || !is_digit(p[i])) return 0;
    if (p[i] == '0') i++;
    else
        while (i < n && is_digit(p[i])) i++;
    if (i + 1 < n && p[i] == '.' && is_digit(p[i + 1])) {
        *is_float = 1;
        i++;
        while (i < n && is_digit(p[i])) i++;
    }
    if (i < n && (p[i] == 'e' || p[i] == 'E')) {
        Py_ssize_t e = i + 1;
        if (e < n && (p[e] == '+' || p[e] == '-')) e++;
        if (e < n && is_digit(p[e])) {
            *is_float = 1;
            i = e;
            while (i < n && is_digit(p[i])) i++;
        }
    }
    if (i - start > 300) j->unsure = 1; /* int() refuses over 4300 digits; keep far below */
    text->p = p + start;
    text->n = i - start;
    j->i = i;
    return 1;
}

static int json_value(json_state *j, int depth, int where, slot *into);

/* a string (at its quote) or a number at j->i, into `into` when given: 1, or 0 when invalid */
static inline __attribute__((always_inline)) int json_scalar(json_state *j, unsigned char c, slot *into) {
    span text;
    int flag;
    if (c == '"') {
        if (!json_string(j, &text, &flag)) return 0;
        if (into) {
            into->type = V_STR;
            into->text = text;
            into->escaped = flag;
        }
        return 1;
    }
    if (!json_number(j, &text, &flag)) return 0;
    if (into) {
        into->type = flag ? V_FLOAT : V_INT;
        into->text = text;
    }
    return 1;
}

/* an object's or array's item: a string or a plain number, the commonest items, read here,
 * the rest by json_value (recursive, so never inlined; its call per item was a twentieth of
 * the JSON scan). The same checks as json_value's for these two, the depth first. */
static inline __attribute__((always_inline)) int json_item(json_state *j, int depth, int where, slot *into) {
    unsigned char c = j->i < j->n ? j->p[j->i] : 0;
    if (depth > MAX_DEPTH || !(c == '"' || is_digit(c))) return json_value(j, depth, where, into);
    return json_scalar(j, c, into);
}

/* past an object's or array's opening bracket: whether `closer` follows at once (then past it) */
static int json_opened_empty(json_state *j, unsigned char closer) {
    j->i++;
    skip_ws(j);
    if (j->i < j->n && j->p[j->i] == closer) {
        j->i++;
        return 1;
    }
    return 0;
}

/* after an item of an object or array: 1 when `,` and another item follow, 0 when `closer`
 * ends the container (past it either way), -1 when neither does (not JSON) */
static int json_after_item(json_state *j, unsigned char closer) {
    skip_ws(j);
    if (j->i >= j->n) return -1;
    unsigned char c = j->p[j->i++];
    if (c == ',') {
        skip_ws(j);
        return 1;
    }
    return c == closer ? 0 : -1;
}

/* an object at j->i; `where`: which object the reference reads it as (-1 none) */
static int json_object(json_state *j, int depth, int where) {
    if (json_opened_empty(j, '}')) return 1;
    for (;;) {
        if (j->i >= j->n || j->p[j->i] != '"') return 0;
        span key;
        int escaped;
        if (!json_string(j, &key, &escaped)) return 0;
        slot *target = NULL;
        int child = -1;
        if (where >= 0) {
            if (escaped) j->unsure = 1; /* it may spell a key the reference reads */
            int k = name_of(&json_table, key.p, key.n);
            if (k >= 0) {
                target = &j->slots[where][k];
                if (j->counts[where][k]++) j->unsure = 1; /* the last of two counts there */
                child = child_object(where, k);
            }
        }
        skip_ws(j);
        if (j->i >= j->n || j->p[j->i] != ':') return 0;
        j->i++;
        skip_ws(j);
        if (!json_item(j, depth + 1, child, target)) return 0;
        int next = json_after_item(j, '}');
        if (next <= 0) return next == 0;
    }
}

static int json_array(json_state *j, int depth) {
    if (json_opened_empty(j, ']')) return 1;
    for (;;) {
        if (!json_item(j, depth + 1, -1, NULL)) return 0;
        int next = json_after_item(j, ']');
        if (next <= 0) return next == 0;
    }
}

static int literal(json_state *j, const char *word, int type, slot *into) {
    size_t k = strlen(word);
    if ((size_t)(j->n - j->i) < k || memcmp(j->p + j->i, word, k) != 0) return 0;
    j->i += (Py_ssize_t)k;
    if (into) into->type = type;
    return 1;
}

/* a value at j->i (white space skipped); `where`: the object it is, when it is one the
 * reference reads; `into`: the slot of its key, when the reference reads that key */
static int json_value(json_state *j, int depth, int where, slot *into) {
    if (depth > MAX_DEPTH) {
        j->unsure = 1;
        return 0;
    }
    if (j->i >= j->n) return 0;
    unsigned char c = j->p[j->i];
    /* an if-chain, commonest first: a switch here is an indirect jump mispredicted per value */
    if (c == '"' || is_digit(c) || (c == '-' && !(j->i + 1 < j->n && j->p[j->i + 1] == 'I')))
        return json_scalar(j, c, into);
    if (c == '{') {
        if (into) into->type = V_OBJ;
        return json_object(j, depth, where);
    }
    if (c == '[') {
        if (into) into->type = V_ARR;
        return json_array(j, depth);
    }
    if (c == 'n') return literal(j, "null", V_NULL, into);
    if (c == 't') return literal(j, "true", V_TRUE, into);
    if (c == 'f') return literal(j, "false", V_FALSE, into);
    if (c == 'N' || c == 'I' || c == '-') j->unsure = 1; /* NaN, Infinity, -Infinity: json.loads takes them */
    return 0;
}

/* _tokens of a JSON value: the count, -1 for None, -2 when not shown */
static int64_t json_tokens(const slot *s) {
    switch (s->type) {
    case V_INT: {
        span t = s->text;
        int negative = t.p[0] == '-';
        if (negative) t.p++, t.n--;
        if (t.n > 9) return -1; /* a billion or more */
        int64_t v = 0;
        for (Py_ssize_t i = 0; i < t.n; i++) v = v * 10 + (t.p[i] - '0');
        if (negative && v != 0) return -1;
        return v <= MAX_TOKENS ? v : -1;
    }
    case V_FLOAT: return -2;
    case V_STR: return s->escaped ? -2 : tokens_of_text(s->text);
    default: return -1; /* null, booleans, objects, arrays */
    }
}

/* _time_value of a JSON value */
static int json_time(const slot *s, int64_t *us) {
    switch (s->type) {
    case V_INT: {
        if (s->text.p[0] == '-') return T_NONE;
        return epoch_text(s->text, us);
    }
    case V_FLOAT: {
        for (Py_ssize_t i = 0; i < s->text.n; i++)
            if (s->text.p[i] == 'e' || s->text.p[i] == 'E' || s->text.p[i] == '-') return T_UNSURE;
        return epoch_text(s->text, us);
    }
    case V_STR: return s->escaped ? T_UNSURE : time_of_text(s->text, us);
    default: return T_NONE;
    }
}

/* whether key `key` of object `obj` was seen with an object for its value */
static inline int is_object(const json_state *j, int obj, int key) {
    return j->counts[obj][key] && j->slots[obj][key].type == V_OBJ;
}

static int read_json(span line, const unsigned char *limit, int64_t *v_in, int64_t *v_out, int64_t *us) {
    json_state j;
    memset(&j, 0, offsetof(json_state, slots));
    j.limit = limit;
    j.p = line.p;
    j.n = line.n;
    int parsed = json_value(&j, 0, O_TOP, NULL);
    if (j.unsure) return ST_FALLBACK;
    if (parsed) skip_ws(&j);
    if (!parsed || j.i != j.n) return read_text(line, v_in, v_out, us); /* json.loads refuses it: the reference reads text */
    static const int holders[][2] = {{O_USAGE, -1}, {O_TOP, -1}, {O_RESP, O_RESP_USAGE}, {O_META, -1},
                                     {O_OUT, O_OUT_META}};
    static const int parents[] = {O_TOP, -1, O_TOP, O_TOP, O_TOP};
    static const int parent_keys[] = {J_USAGE, -1, J_RESPONSE, J_META_INFO, J_OUT};
    static const int child_keys[] = {-1, -1, J_USAGE, -1, J_META_INFO};
    for (int h = 0; h < 5; h++) {
        /* the holder exists when each step of its path is an object */
        int obj = holders[h][0];
        if (parents[h] >= 0 && !is_object(&j, parents[h], parent_keys[h])) continue;
        if (holders[h][1] >= 0) {
            if (!is_object(&j, obj, child_keys[h])) continue;
            obj = holders[h][1];
        }
        const slot *s = j.slots[obj];
        const unsigned char *c = j.counts[obj];
        const slot *in = c[J_INPUT] ? &s[J_INPUT] : c[J_PROMPT] ? &s[J_PROMPT] : NULL;
        const slot *out = c[J_OUTPUT] ? &s[J_OUTPUT] : c[J_COMPLETION] ? &s[J_COMPLETION] : NULL;
        int64_t a = in ? json_tokens(in) : -1, b = out ? json_tokens(out) : -1;
        if (a == -2 || b == -2) return ST_FALLBACK;
        if (a < 0 || b < 0) continue;
        *v_in = a;
        *v_out = b;
        static const int time_keys[] = {J_CREATED, J_TIME, J_TIMESTAMP, J_TS, J_AT_TIMESTAMP};
        const int nodes[2] = {O_TOP, is_object(&j, O_TOP, J_RESPONSE) ? O_RESP : -1};
        for (int k = 0; k < 2; k++) {
            if (nodes[k] < 0) continue;
            for (int t = 0; t < 5; t++) {
                const slot *ts = &j.slots[nodes[k]][time_keys[t]];
                if (!j.counts[nodes[k]][time_keys[t]]) continue;
                int r = json_time(ts, us);
                if (r == T_TIME) return ST_TIMED;
                if (r == T_UNSURE) return ST_FALLBACK;
            }
        }
        return ST_UNTIMED;
    }
    return read_text(line, v_in, v_out, us); /* no holder: the reference reads the line as text */
}

/* ------------------------------------------------------------------------------ lines */

static int read_line(const unsigned char *p, Py_ssize_t len, const unsigned char *limit, int64_t *v_in, int64_t *v_out,
                     int64_t *us) {
    if (len > 0 && p[len - 1] == '\r') len--;
    if (has_odd_bytes(p, len)) return ST_FALLBACK; /* control bytes, non-ASCII: the reference decodes and strips */
    Py_ssize_t lead = 0;
    while (lead < len && p[lead] == ' ') lead++;
    if (lead == len) return ST_IGNORED;
    if (lead || p[len - 1] == ' ') return ST_FALLBACK;
    span line = {p, len};
    if (p[0] == '{') return read_json(line, limit, v_in, v_out, us);
    return read_text(line, v_in, v_out, us);
}

static int check_buffer(Py_buffer *b, Py_ssize_t itemsize, Py_ssize_t need, const char *name) {
    if (b->itemsize != itemsize || b->len / itemsize < need) {
        PyErr_Format(PyExc_ValueError, "%s: need %zd items of %zd bytes", name, need, itemsize);
        return 0;
    }
    return 1;
}

static PyObject *scan_lines(PyObject *self, PyObject *args) {
    Py_buffer buf, st, vi, vo, us, ends;
    Py_ssize_t start, end, max_line;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnw*w*w*w*w*", &buf, &start, &end, &max_line, &st, &vi, &vo, &us, &ends))
        return NULL;
    PyObject *result = NULL;
    if (start < 0 || end < start || end > buf.len) {
        PyErr_SetString(PyExc_ValueError, "start and end must lie inside the buffer");
        goto done;
    }
    const unsigned char *p = buf.buf;
    Py_ssize_t cap = st.len;
    if (!check_buffer(&st, 1, 0, "state") || !check_buffer(&vi, 8, cap, "v_in") || !check_buffer(&vo, 8, cap, "v_out") ||
        !check_buffer(&us, 8, cap, "micros") || !check_buffer(&ends, 8, cap, "ends"))
        goto done;
    int8_t *state = st.buf;
    int64_t *a = vi.buf, *b = vo.buf, *m = us.buf, *e = ends.buf;
    Py_ssize_t lines = 0, pos = start;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end && lines < cap) {
        const unsigned char *nl = memchr(p + pos, '\n', (size_t)(end - pos));
        if (nl == NULL) break;
        Py_ssize_t at = nl - p, len = at - pos;
        a[lines] = b[lines] = m[lines] = 0;
        state[lines] = len > max_line ? ST_SKIPPED : (int8_t)read_line(p + pos, len, p + buf.len, &a[lines], &b[lines], &m[lines]);
        e[lines] = at;
        lines++;
        pos = at + 1;
    }
    Py_END_ALLOW_THREADS
    result = Py_BuildValue("nn", lines, pos);
done:
    PyBuffer_Release(&buf);
    PyBuffer_Release(&st);
    PyBuffer_Release(&vi);
    PyBuffer_Release(&vo);
    PyBuffer_Release(&us);
    PyBuffer_Release(&ends);
    return result;
}

/* ------------------------------------------------------------------------------ tallies */

/* the runbook's bucket of a request (runbooks.profile.requests.bucket_of, by index) */
static inline int bucket_index(int64_t in, int64_t out) {
    int ci = (in > 512) + (in > 2048) + (in > 8192);
    int co = (out > 128) + (out > 256) + (out > 512);
    return ci > co ? ci : co;
}

static inline int64_t floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

/* tally_lines(buf, start, end, max_line, hist_in, hist_out, lengths, classes, runs, big, stats)
 *   -> (next, n_classes, n_runs, n_big, fallback_end)
 * Reads the lines of buf[start:end] as scan_lines does and tallies them where they are read:
 * hist_in / hist_out (int64 per token count below their length) and lengths (int64 per
 * total * 4 + bucket, or None) are added to; classes (uint8), runs (int64: minute and the 4
 * bucket counts of each run of timed requests in one minute) and big (int64 triples: 0 input,
 * 1 output or 2 total, the value, the bucket; counts too large for the histograms) are written
 * from their start; stats (int64: have times, first µs, last µs, skipped lines) is updated.
 * Stops at the first line left to the reference (fallback_end: its newline; `next`: its start),
 * when an output could overflow, or when no newline is left (fallback_end -1). */
static PyObject *tally_lines(PyObject *self, PyObject *args) {
    Py_buffer buf, hin, hout, cls, runs, big, stats, lens;
    PyObject *lengths;
    Py_ssize_t start, end, max_line;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnnw*w*Ow*w*w*w*", &buf, &start, &end, &max_line, &hin, &hout, &lengths, &cls,
                          &runs, &big, &stats))
        return NULL;
    PyObject *result = NULL;
    int have_lens = 0;
    if (lengths != Py_None) {
        if (PyObject_GetBuffer(lengths, &lens, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) goto done;
        have_lens = 1;
    }
    Py_ssize_t small = hin.len / 8;
    if (start < 0 || end < start || end > buf.len) {
        PyErr_SetString(PyExc_ValueError, "start and end must lie inside the buffer");
        goto done;
    }
    if (hin.len % 8 || hout.len != hin.len || small < 1 || (have_lens && lens.len != 4 * hin.len) ||
        cls.len < 1 || runs.len < 40 || big.len < 72 || stats.len < 32) {
        PyErr_SetString(PyExc_ValueError, "tally_lines: wrong output sizes");
        goto done;
    }
    {
        const unsigned char *p = buf.buf;
        int64_t *h_in = hin.buf, *h_out = hout.buf, *h_len = have_lens ? lens.buf : NULL;
        uint8_t *c_out = cls.buf;
        int64_t *r_out = runs.buf, *b_out = big.buf, *st = stats.buf;
        Py_ssize_t cls_cap = cls.len, runs_cap = runs.len / 40, big_cap = big.len / 24;
        Py_ssize_t nc = 0, nr = 0, nb = 0, pos = start, fallback_end = -1;
        Py_BEGIN_ALLOW_THREADS
        while (pos < end && nc < cls_cap && nr < runs_cap && nb + 3 <= big_cap) {
            const unsigned char *nl = memchr(p + pos, '\n', (size_t)(end - pos));
            if (nl == NULL) break;
            Py_ssize_t at = nl - p, len = at - pos;
            int64_t a = 0, b = 0, us = 0;
            int state = len > max_line ? ST_SKIPPED : read_line(p + pos, len, p + buf.len, &a, &b, &us);
            /* counts are never negative when read; were one so, the reference reads the line */
            if (state == ST_FALLBACK || ((state == ST_UNTIMED || state == ST_TIMED) && (a < 0 || b < 0))) {
                fallback_end = at;
                break;
            }
            pos = at + 1;
            if (state == ST_SKIPPED) {
                st[3]++;
                continue;
            }
            if (state == ST_IGNORED) continue;
            int c = bucket_index(a, b);
            c_out[nc++] = (uint8_t)c;
            if (a < small) h_in[a]++;
            else {
                b_out[3 * nb] = 0, b_out[3 * nb + 1] = a, b_out[3 * nb + 2] = c;
                nb++;
            }
            if (b < small) h_out[b]++;
            else {
                b_out[3 * nb] = 1, b_out[3 * nb + 1] = b, b_out[3 * nb + 2] = c;
                nb++;
            }
            if (h_len != NULL) {
                int64_t t = a + b;
                if (t < small) h_len[t * 4 + c]++;
                else {
                    b_out[3 * nb] = 2, b_out[3 * nb + 1] = t, b_out[3 * nb + 2] = c;
                    nb++;
                }
            }
            if (state == ST_TIMED) {
                int64_t minute = floor_div(us, 60 * US);
                if (nr > 0 && r_out[5 * (nr - 1)] == minute) r_out[5 * (nr - 1) + 1 + c]++;
                else {
                    int64_t *r = r_out + 5 * nr++;
                    r[0] = minute, r[1] = r[2] = r[3] = r[4] = 0;
                    r[1 + c] = 1;
                }
                if (!st[0]) st[0] = 1, st[1] = st[2] = us;
                else {
                    if (us < st[1]) st[1] = us;
                    if (us > st[2]) st[2] = us;
                }
            }
        }
        Py_END_ALLOW_THREADS
        result = Py_BuildValue("nnnnn", pos, nc, nr, nb, fallback_end);
    }
done:
    if (have_lens) PyBuffer_Release(&lens);
    PyBuffer_Release(&buf);
    PyBuffer_Release(&hin);
    PyBuffer_Release(&hout);
    PyBuffer_Release(&cls);
    PyBuffer_Release(&runs);
    PyBuffer_Release(&big);
    PyBuffer_Release(&stats);
    return result;
}

/* hist_items(histograms, offset, stride) -> {value: count}: the histograms (int64 buffers of
 * one length) summed at offset, offset + stride, ..., each nonzero sum under its value (the
 * index less offset, divided by stride) */
static PyObject *hist_items(PyObject *self, PyObject *args) {
    PyObject *seq;
    Py_ssize_t offset, stride;
    (void)self;
    if (!PyArg_ParseTuple(args, "Onn", &seq, &offset, &stride)) return NULL;
    if (offset < 0 || stride < 1) {
        PyErr_SetString(PyExc_ValueError, "hist_items: offset >= 0 and stride >= 1");
        return NULL;
    }
    PyObject *fast = PySequence_Fast(seq, "hist_items: a sequence of buffers");
    if (fast == NULL) return NULL;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(fast), got = 0, items = -1;
    Py_buffer *views = PyMem_Calloc((size_t)(k ? k : 1), sizeof(Py_buffer));
    PyObject *out = NULL;
    if (views == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (; got < k; got++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, got), &views[got], PyBUF_C_CONTIGUOUS) < 0) goto done;
        if (views[got].len % 8 || (items >= 0 && views[got].len / 8 != items)) {
            PyBuffer_Release(&views[got]);
            PyErr_SetString(PyExc_ValueError, "hist_items: int64 buffers of one length");
            goto done;
        }
        items = views[got].len / 8;
    }
    out = PyDict_New();
    if (out == NULL) goto done;
    for (Py_ssize_t i = offset; i < items; i += stride) {
        int64_t sum = 0;
        for (Py_ssize_t j = 0; j < k; j++) sum += ((const int64_t *)views[j].buf)[i];
        if (!sum) continue;
        PyObject *key = PyLong_FromSsize_t((i - offset) / stride), *val = PyLong_FromLongLong(sum);
        int bad = key == NULL || val == NULL || PyDict_SetItem(out, key, val) < 0;
        Py_XDECREF(key);
        Py_XDECREF(val);
        if (bad) {
            Py_CLEAR(out);
            goto done;
        }
    }
done:
    for (Py_ssize_t j = 0; j < got; j++) PyBuffer_Release(&views[j]);
    PyMem_Free(views);
    Py_DECREF(fast);
    return out;
}

/* bucket_runs(classes, block) -> [[n0, n1, n2, n3], ...]: how many of each bucket index (0-3)
 * every run of `block` bytes of classes holds, the last run perhaps shorter; other bytes are
 * not counted */
static PyObject *bucket_runs(PyObject *self, PyObject *args) {
    Py_buffer cls;
    Py_ssize_t block;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*n", &cls, &block)) return NULL;
    PyObject *out = NULL;
    if (block < 1) {
        PyErr_SetString(PyExc_ValueError, "bucket_runs: block >= 1");
        goto done;
    }
    out = PyList_New(0);
    if (out == NULL) goto done;
    const uint8_t *c = cls.buf;
    for (Py_ssize_t at = 0; at < cls.len; at += block) {
        Py_ssize_t stop = at + block < cls.len ? at + block : cls.len;
        long long n[4] = {0, 0, 0, 0};
        for (Py_ssize_t i = at; i < stop; i++)
            if (c[i] < 4) n[c[i]]++;
        PyObject *row = Py_BuildValue("[LLLL]", n[0], n[1], n[2], n[3]);
        if (row == NULL || PyList_Append(out, row) < 0) {
            Py_XDECREF(row);
            Py_CLEAR(out);
            goto done;
        }
        Py_DECREF(row);
    }
done:
    PyBuffer_Release(&cls);
    return out;
}

static PyMethodDef methods[] = {
    {"scan_lines", scan_lines, METH_VARARGS,
     "scan_lines(buf, start, end, max_line, state, v_in, v_out, micros, ends) -> (lines, next)"},
    {"tally_lines", tally_lines, METH_VARARGS,
     "tally_lines(buf, start, end, max_line, hist_in, hist_out, lengths, classes, runs, big, stats) -> "
     "(next, n_classes, n_runs, n_big, fallback_end)"},
    {"hist_items", hist_items, METH_VARARGS, "hist_items(histograms, offset, stride) -> {value: count}"},
    {"bucket_runs", bucket_runs, METH_VARARGS, "bucket_runs(classes, block) -> [[n0, n1, n2, n3], ...]"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_access_native",
    .m_doc = "Access-log lines read as parse_access_line reads them, compiled.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__access_native(void) {
    fill_classes();
    if (fill_names(&key_table, "poc") || fill_names(&json_table, "pom") || fill_names(&time_table, "")) {
        PyErr_SetString(PyExc_RuntimeError, "_access_native: two key names share a lookup cell");
        return NULL;
    }
    return PyModule_Create(&module);
}
