"""Request lengths from a server log or a metrics scrape, as a RequestProfile.

Server logs: SGLang writes one `Finish:` line per request with `--log-requests`
(`'prompt_tokens': 9, 'completion_tokens': 3` inside `meta_info`, or JSON with
`--log-requests-format json`); any line with both counts is read the way the access-log
reader reads it, with its time from the `[2025-03-01 12:00:00 TP0]` prefix. Other lines are
ordinary log lines and are not counted as skipped; a line that names a count but cannot be
read is. vLLM and TGI print no per-request lengths, so their logs give no profile.

Metrics: token histograms (vLLM `request_prompt_tokens` / `request_generation_tokens`, TGI
`tgi_request_input_length` / `tgi_request_generated_tokens`, SGLang
`prompt_tokens_histogram` / `generation_tokens_histogram`) give an estimated profile. Given
an earlier scrape of the same server, the difference of the two (the traffic between them)
is profiled, unless a counter went down (a restart).

>>> r = parse_server_log_requests("[2025-03-01 12:00:00 TP0] Finish: obj=GenerateReqInput(), "
...     "out={'meta_info': {'prompt_tokens': 7420, 'completion_tokens': 312}}")
>>> r.profile.total, r.profile.share("L")
(1, 1.0)
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from os import PathLike

from collectors.access_logs.reference import parse_access_line
from collectors.parsers.metrics import parse_metrics
from collectors.parsers.textio import MAX_LINE_BYTES, iter_lines
from runbooks.model.evidence import ServerMetrics
from runbooks.model.lengths import Histogram, RequestProfile
from runbooks.profile.detail import DEFAULT_SLICES, DetailBuilder, ProfileDetail
from runbooks.profile.requests import ProfileBuilder, profile_from_histograms

_MARKERS = (b"prompt_tokens", b"input_tokens")
_ENGINE_HINTS = ((b"text_generation", "tgi"), (b"vllm", "vllm"), (b"sglang", "sglang"), (b" TP0]", "sglang"))


@dataclass(frozen=True)
class LogLengths:
    """What a server log says about request lengths: a profile (None when there are no
    lengths), its detail, the engine the log looks like, and the lines read."""

    profile: RequestProfile | None
    detail: ProfileDetail | None
    engine: str | None
    lines: int


def _engine_of(line: bytes, found: str | None) -> str | None:
    if found is not None:
        return found
    low = line.lower()
    return next((engine for hint, engine in _ENGINE_HINTS if hint.lower() in low), None)


def _read(lines: Iterable[bytes], source: str, max_slices: int) -> LogLengths:
    builder, detail = ProfileBuilder(), DetailBuilder()
    engine: str | None = None
    count = 0
    for raw in lines:
        count += 1
        if count <= 200:
            engine = _engine_of(raw, engine)
        if not any(marker in raw for marker in _MARKERS):
            continue
        if len(raw) > MAX_LINE_BYTES:
            builder.skip()
            continue
        found = parse_access_line(raw.decode("utf-8", "replace"))
        if found is None:
            builder.skip()
            continue
        builder.add(*found)
        detail.add(*found)
    profile = builder.build(source)
    if profile.total == 0:
        return LogLengths(None, None, engine, count)
    return LogLengths(profile, detail.build(max_slices), engine, count)


def parse_server_log_requests(text: str, source: str = "logs.txt", max_slices: int = DEFAULT_SLICES) -> LogLengths:
    """Request lengths in a server log's text (never raises for odd lines)."""
    return _read((line.encode("utf-8", "replace") for line in text.splitlines()), source, max_slices)


def read_server_log_requests(path: str | PathLike[str], source: str = "logs.txt",
                             max_slices: int = DEFAULT_SLICES) -> LogLengths:
    """Request lengths in a server log file of any size, streamed. OSError when it cannot be opened."""
    with open(path, "rb") as fh:
        return _read(iter_lines(fh), source, max_slices)


# ---------------------------------------------------------------------- metrics


@dataclass(frozen=True)
class MetricsLengths:
    """An estimated profile from token histograms (None when the scrape has none)."""

    profile: RequestProfile | None
    engine: str
    #: True when it is the traffic between a baseline scrape and this one
    between_scrapes: bool = False


def _histograms(m: ServerMetrics) -> tuple[Histogram | None, Histogram | None]:
    return m.prompt_tokens, m.generation_tokens


def _delta(now: Histogram | None, before: Histogram | None) -> Histogram | None:
    """`now - before`, bucket by bucket; None when they do not line up or a count went down."""
    if now is None or before is None:
        return None
    if [b for b, _ in now.buckets] != [b for b, _ in before.buckets]:
        return None
    pairs = tuple((bound, cum - old) for (bound, cum), (_, old) in zip(now.buckets, before.buckets, strict=True))
    if any(count < 0 for _, count in pairs) or now.count < before.count:
        return None
    total = now.count - before.count
    sum_ = now.sum - before.sum if now.sum is not None and before.sum is not None else None
    return Histogram(buckets=pairs, count=total, sum=sum_)


def profile_from_metrics(text: str, source: str = "metrics.txt", earlier: str | None = None,
                         earlier_source: str = "baseline") -> MetricsLengths:
    """The estimated profile of a scrape; with `earlier` (a scrape of the same server taken
    before), of the traffic between the two. Raises ParseError for a malformed scrape."""
    metrics = parse_metrics(text, source)
    prompt, generation = _histograms(metrics)
    between = False
    if earlier is not None:
        old_prompt, old_generation = _histograms(parse_metrics(earlier, earlier_source))
        d_prompt, d_generation = _delta(prompt, old_prompt), _delta(generation, old_generation)
        base = d_prompt if d_prompt is not None else d_generation
        if base is not None and base.count > 0 and (prompt is None or d_prompt is not None):
            prompt, generation, between = d_prompt, d_generation, True
    profile = profile_from_histograms(prompt, generation, source)
    if profile is not None and profile.total == 0:
        profile = None
    return MetricsLengths(profile, metrics.engine, between)


def read_metrics_file(path: str | PathLike[str]) -> str:
    """A scrape file's text (undecodable bytes replaced). OSError when it cannot be read."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        return fh.read()


