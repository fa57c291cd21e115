"""The profile use case (`gpumem profile`): the request profile (length buckets, percentiles, shift) of an access log,
a server log or a metrics scrape, against a baseline when given (the chart, on request, is drawn by
the surface from the view: `bot.cli.profile`).

Exit codes: 0 profiled; 1 the L+XL share rose by the runbook's threshold (15 points) or more
within the window or against the baseline; 2 bad usage or an unreadable file; 3 no request
lengths in the input.
"""

from __future__ import annotations

import os
from dataclasses import replace

from bot.grammar.requests import ProfileRequest
from bot.service.deps import Deps
from bot.service.outcomes import ProfileView
from collectors.errors import ParseError, os_error
from runbooks.catalogs.thresholds import LONG_SHARE_SHIFT
from runbooks.model.errors import EvidenceUnavailable, UsageError
from runbooks.profile.requests import compare

# The readers are imported by the input that needs them: the access-log scanner and the
# server-log and metrics reader cost ~270 ms each, ~375 ms together (-X importtime; they share
# numpy), so an access log does not pay for the other reader, nor a metrics file for the scanner.


def build_profile(request: ProfileRequest, deps: Deps) -> ProfileView:
    """The ProfileView of parsed `profile` arguments: access log, server log or metrics, with a
    baseline when given. Reads files only, no settings. A file that cannot be used raises
    UsageError (exit 2), one without request lengths EvidenceUnavailable (exit 3); both are
    worded from `profile_cli.error.<code>`."""
    return _build(request)


def is_alarming(view: ProfileView) -> bool:
    """The L+XL share rose by the runbook's threshold or more, in the window or against the baseline."""
    return any(s is not None and s.delta >= LONG_SHARE_SHIFT for s in (view.profile.shift, view.baseline_shift))


def _build(request: ProfileRequest) -> ProfileView:
    if request.access_log:
        scan = _access_log(request.access_log, request.workers)
        base = _access_log(request.baseline, request.workers).profile if request.baseline else None
        view = ProfileView("access_log", scan.profile, scan.detail, workers=scan.workers)
    elif request.server_log:
        found = _server_log(request.server_log)
        base = _server_log(request.baseline).profile if request.baseline else None
        view = ProfileView("server_log", found.profile, found.detail)
    else:
        return _metrics(request)
    if base is not None:
        view = _with_baseline(view, base, compare(view.profile, base))
    return view


def _with_baseline(view, base, shift):
    return replace(view, baseline=base, baseline_shift=shift)


def _name(path: str) -> str:
    return os.path.basename(path) or path


def _access_log(path: str, workers: int | None):
    from collectors.access_logs.fast import scan_access_log  # lazy: see the note at the top
    from collectors.access_logs.reference import NO_LENGTHS

    try:
        return scan_access_log(path, _name(path), workers=workers, detail=True)
    except FileNotFoundError:
        raise UsageError("file_not_found", path=path) from None
    except ParseError as e:
        if e.message == NO_LENGTHS:
            raise EvidenceUnavailable("no_lengths_access_log", path=path) from None
        raise UsageError("unreadable", path=path, message=e.reason) from None
    except OSError as e:
        raise UsageError("unreadable", path=path, message=os_error(e)) from None


def _server_log(path: str):
    from collectors.access_logs.request_lengths import read_server_log_requests  # lazy: see the top

    try:
        found = read_server_log_requests(path, _name(path))
    except FileNotFoundError:
        raise UsageError("file_not_found", path=path) from None
    except OSError as e:
        raise UsageError("unreadable", path=path, message=os_error(e)) from None
    if found.profile is None:
        key = f"no_lengths_{found.engine}" if found.engine in ("vllm", "tgi", "sglang") else "no_lengths_log"
        raise EvidenceUnavailable(key, path=path)
    return found


def _metrics(request: ProfileRequest):
    # lazy: see the note at the top
    from collectors.access_logs.request_lengths import profile_from_metrics, read_metrics_file

    texts = {}
    for path in (p for p in (request.metrics, request.baseline) if p):
        try:
            texts[path] = read_metrics_file(path)
        except FileNotFoundError:
            raise UsageError("file_not_found", path=path) from None
        except OSError as e:
            raise UsageError("unreadable", path=path, message=os_error(e)) from None
    try:
        now = profile_from_metrics(texts[request.metrics], _name(request.metrics),
                                   texts.get(request.baseline) if request.baseline else None,
                                   _name(request.baseline) if request.baseline else "baseline")
        base = profile_from_metrics(texts[request.baseline], _name(request.baseline)) if request.baseline else None
    except ParseError as e:
        raise UsageError("unreadable", path=e.source, message=e.reason) from None
    if now.profile is None:
        raise EvidenceUnavailable("no_histograms", path=request.metrics)
    view = ProfileView("metrics", now.profile, between_scrapes=now.between_scrapes)
    if base is not None and base.profile is not None:
        view = _with_baseline(view, base.profile, compare(now.profile, base.profile))
    return view

