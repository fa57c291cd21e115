"""Prometheus exposition text as a lookup of samples by name, with the reductions the
normalisers need (sum over engines, max of ratios, cumulative histograms).

The text is read by `prometheus_client`'s own parser; this module only counts lines so that a
malformed line can be named, and keeps the samples in a shape that is cheap to query.

>>> s = read_samples('vllm:num_requests_waiting{engine="0"} 3\\nvllm:num_requests_waiting{engine="1"} 4\\n')
>>> s.sum("vllm:num_requests_waiting")
7.0
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator

from prometheus_client.parser import text_fd_to_metric_families

from collectors.errors import ParseError, quoted, said
from runbooks.model.lengths import Histogram

Labels = dict[str, str]
Series = tuple[Labels, float]
Reducer = Callable[[Iterable[float]], float]

#: Labels whose values name copies of the same scheduler state (SGLang reports the same
#: queue from every tensor/pipeline rank when metrics are on for all schedulers).
#: Series that differ only in these count once (their max).
MIRROR_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank"})

_MESSAGE_LIMIT = 200


#: no real /metrics line is this long (a histogram bucket with many labels is a few hundred
#: bytes); longer lines are skipped and counted, so one line cannot take the memory of the file
MAX_LINE_CHARS = 64 * 1024
#: series kept per file: a busy vLLM or DCGM exporter has a few thousand; past this the rest of
#: the file is not read (and the reading says so), so a million series cost neither a gigabyte
#: nor half a minute
MAX_SERIES = 50_000


class _NumberedLines:
    """Feeds the parser one line at a time and remembers which 1-based line it is on; over-long
    lines are counted and left out."""

    def __init__(self, text: str):
        self.lines = text.split("\n")
        self.current = 0
        self.long_lines = 0
        self.stopped_at: int | None = None

    def __iter__(self) -> Iterator[str]:
        samples = 0
        for number, line in enumerate(self.lines, start=1):
            self.current = number
            if len(line) > MAX_LINE_CHARS:
                self.long_lines += 1
                continue
            if line and not line.startswith("#"):
                samples += 1
                if samples > MAX_SERIES:
                    # the parser holds a family until it ends: stop feeding it, so it ends here
                    self.stopped_at = number
                    return
            yield line


class Samples:
    """Samples of one exposition text, by sample name. `*_created` samples are left out.

    A series that appears twice (same name and labels) keeps its last value.
    """

    def __init__(self, by_name: dict[str, dict[tuple[tuple[str, str], ...], Series]], *, long_lines: int = 0,
                 stopped_at_line: int | None = None):
        self._by_name = by_name
        #: lines over MAX_LINE_CHARS, left out
        self.long_lines = long_lines
        #: the line where reading stopped because MAX_SERIES series were kept (None: read to the end)
        self.stopped_at_line = stopped_at_line

    def names(self) -> Iterable[str]:
        return self._by_name.keys()

    def has(self, name: str) -> bool:
        return name in self._by_name

    def series(self, name: str) -> list[Series]:
        found = self._by_name.get(name)
        return list(found.values()) if found else []

    def first(self, *names: str) -> list[Series]:
        """Series of the first name that has any (a rename chain: newest name first)."""
        for name in names:
            found = self.series(name)
            if found:
                return found
        return []

    def counter(self, base: str) -> list[Series]:
        """Series of a counter, whether or not `_total` is on the wire.

        `prometheus_client` appends `_total` to samples of a family typed `counter` whose
        declared name lacks it (TGI's counters), so both spellings are tried.
        """
        return self.first(base + "_total", base)

    def sum(self, *names: str) -> float | None:
        return combine(self.first(*names))

    def max(self, *names: str) -> float | None:
        found = self.first(*names)
        return max(v for _, v in found) if found else None

    def histogram(self, base: str) -> Histogram | None:
        return build_histogram(self.series(base + "_bucket"), self.series(base + "_count"),
                               self.series(base + "_sum"))


def read_samples(text: str, source: str = "metrics.txt") -> Samples:
    """Parse exposition text; a line the parser rejects raises ParseError naming that line."""
    lines = _NumberedLines(text.removeprefix("\ufeff"))  # a byte-order mark from a Windows editor
    by_name: dict[str, dict[tuple[tuple[str, str], ...], Series]] = {}
    try:
        # text_fd_to_metric_families is what text_string_to_metric_families wraps; it is
        # called directly so that the line being parsed is known when the parser fails.
        for family in text_fd_to_metric_families(lines):  # type: ignore[arg-type]
            for sample in family.samples:
                if sample.name.endswith("_created"):
                    continue
                value = _finite(sample.value)
                if value is None:
                    continue
                key = tuple(sorted(sample.labels.items()))
                by_name.setdefault(sample.name, {})[key] = (sample.labels, value)
    # The parser is outside code fed outside input: whatever it raises (ValueError mostly,
    # but also UnicodeError or IndexError on odd bytes) means "this text is malformed".
    except Exception as e:
        detail = str(e).strip() or type(e).__name__
        raise ParseError(source, said("bad_exposition", detail=quoted(_clip(detail, _MESSAGE_LIMIT - 30))),
                         _blamed_line(lines, detail)) from e
    return Samples(by_name, long_lines=lines.long_lines, stopped_at_line=lines.stopped_at)


def combine(series: list[Series], across: Reducer = sum) -> float | None:
    """Sum series (or max with `across=max`); mirror copies count once, by their max."""
    if not series:
        return None
    groups: dict[tuple[tuple[str, str], ...], float] = {}
    for labels, value in series:
        key = _key_without(labels, MIRROR_LABELS)
        prev = groups.get(key)
        groups[key] = value if prev is None else max(prev, value)
    return float(across(groups.values()))


def combine_by(series: list[Series], label: str, across: Reducer = sum) -> float | None:
    """Reduce within each value of `label` (sum, mirrors once), then across them.

    >>> combine_by([({"dp_rank": "0"}, 10.0), ({"dp_rank": "1"}, 8.0)], "dp_rank", min)
    8.0
    """
    if not series:
        return None
    parts: dict[str | None, list[Series]] = {}
    for labels, value in series:
        parts.setdefault(labels.get(label), []).append((labels, value))
    values = [combine(part) for part in parts.values()]
    return float(across(v for v in values if v is not None))


def build_histogram(buckets: list[Series], counts: list[Series], sums: list[Series]) -> Histogram | None:
    """Merge `_bucket` series (any label order, several engines) into one cumulative histogram.

    Series whose bucket bounds differ are merged as step functions, so the result stays
    cumulative: at each bound a series contributes its count at its own largest bound <= it.
    """
    per_group: dict[tuple[tuple[str, str], ...], dict[float, float]] = {}
    for labels, value in buckets:
        bound = _bound(labels.get("le"))
        if bound is None:
            continue
        key = _key_without(labels, MIRROR_LABELS | {"le"})
        group = per_group.setdefault(key, {})
        group[bound] = max(group.get(bound, value), value)
    if not per_group:
        return None
    bounds = sorted({b for group in per_group.values() for b in group})
    merged = [0.0] * len(bounds)
    for group in per_group.values():
        own = sorted(group.items())
        j, last = 0, 0.0
        for i, bound in enumerate(bounds):
            while j < len(own) and own[j][0] <= bound:
                last = own[j][1]
                j += 1
            merged[i] += last
    pairs = list(zip(bounds, merged, strict=True))
    total = combine(counts)
    if not math.isinf(bounds[-1]):
        pairs.append((math.inf, total if total is not None else merged[-1]))
    count = total if total is not None else pairs[-1][1]
    return Histogram(buckets=tuple(pairs), count=count, sum=combine(sums))


def label_values(samples: Samples, prefix: str, label: str) -> list[str]:
    """Distinct values of `label` over every sample whose name starts with `prefix`, sorted."""
    seen: set[str] = set()
    for name in samples.names():
        if name.startswith(prefix):
            for labels, _ in samples.series(name):
                value = labels.get(label)
                if value is not None:
                    seen.add(value)
    return sorted(seen, key=natural_key)


def natural_key(value: str) -> tuple[int, float, str]:
    """Sort key: numbers by value ("2" before "10"), then the rest by text."""
    try:
        return (0, float(value), value)
    except ValueError:
        return (1, 0.0, value)


def _key_without(labels: Labels, dropped: frozenset[str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in labels.items() if k not in dropped))


def _bound(le: str | None) -> float | None:
    if le is None:
        return None
    try:
        bound = float(le)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def _finite(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


def _blamed_line(lines: _NumberedLines, detail: str) -> int | None:
    """The line to name for a parser error.

    Most errors concern the line being read. A bad `# TYPE` (unknown type, invalid name) is
    only noticed when its family is closed, at a later line or at the end of the text, so
    the last earlier line that carries the offending token is named instead.
    """
    current = lines.current or None
    for marker in ("Invalid metric type: ", "invalid metric name "):
        if detail.startswith(marker):
            token = detail[len(marker):]
            stop = min(current or len(lines.lines), len(lines.lines))
            for number in range(stop, 0, -1):
                line = lines.lines[number - 1]
                if line.lstrip().startswith("#") and token in line:
                    return number
    return current


def _clip(message: str, limit: int = _MESSAGE_LIMIT) -> str:
    return message if len(message) <= limit else message[: limit - 3] + "..."
