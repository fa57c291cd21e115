"""`gpumem profile`: the request profile of an access log, a server log or a metrics scrape,
printed (see `bot.service.profile`), with a chart on request.

Exit codes: 0 profiled; 1 the L+XL share rose by the runbook's threshold (15 points) or more
within the window or against the baseline; 2 bad usage or an unreadable file; 3 no request
lengths in the input.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace

from bot.grammar.requests import ProfileRequest
from bot.render import profile as render
from bot.render.chart_profile import ChartUnavailable, write_profile_chart
from bot.render.i18n import Catalog
from bot.service.deps import Deps
from bot.service.exits import EXIT_CAUSE, EXIT_OK, EXIT_USAGE
from bot.service.outcomes import ProfileView
from bot.service.profile import build_profile, is_alarming

# a file that cannot be used raises UsageError (exit 2), one without request lengths
# EvidenceUnavailable (exit 3); `bot.main` words both from `profile_cli.error.<code>`
# (the catalog section is the verb's `error_keys` in `bot.verbs.VERBS`)


def run(request: ProfileRequest, lang: str, deps: Deps) -> int:
    view = build_profile(request, deps)
    chart_error = None
    if request.chart:
        view, chart_error = _write_chart(view, request.chart, lang)
        if chart_error is not None:
            key, params = chart_error
            print(Catalog.load(lang).t(key, params), file=sys.stderr)
    if request.json:
        json.dump(render.profile_json(view, lang), sys.stdout, ensure_ascii=False, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render.profile_text(view, lang))
    if chart_error is not None:
        return EXIT_USAGE
    return EXIT_CAUSE if is_alarming(view) else EXIT_OK


def _write_chart(view: ProfileView, path: str, lang: str):
    """(the view with the chart recorded, None) or (the view, (catalog key, params)) when the
    chart could not be written."""
    if view.detail is None or not view.detail.slices:
        return view, ("profile_cli.error.chart_needs_times", {})
    try:
        size = write_profile_chart(path, view.detail, view.profile.source, view.profile.total, lang)
    except ChartUnavailable:
        return view, ("profile_cli.error.chart_unavailable", {})
    except OSError as e:
        return view, ("profile_cli.error.chart_unwritable", {"path": path, "message": str(e)})
    return replace(view, chart_path=path, chart_bytes=size), None
