"""Map the errors of a live collection to on-call wording and exit codes, in one place.

`error_line` words a `runbooks.model.errors.GpumemError` the same way on every surface: the
CLI prints it (`bot.main.fail`) and Slack ends the job with it (`bot.slack.work`), so a
workload that does not exist reads alike in a terminal and in a channel.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bot.render.i18n import Catalog
from runbooks.model.errors import (
    EvidenceUnavailable,
    GpumemError,
    NotPermitted,
    PartlyApplied,
    PlanMoved,
    StaleObject,
    TargetNotFound,
    TemporaryError,
)


@dataclass
class Guard:
    cat: Catalog
    exit_code: int = 0
    message: str | None = field(default=None)


def error_line(cat: Catalog, error: GpumemError) -> str:
    """One line for a person about an error that stopped the work, by what it means.

    A workload that does not exist, a missing RBAC permission (named), an object changed
    under us, a server that cannot answer now (with the delay), nothing to read; any other
    error by its code and params, which carry nothing secret.

    >>> line = error_line(Catalog.load("en"), TargetNotFound("Deployment", "llm", "nope", "prod"))
    >>> line.split(". ")[0]
    'gpumem: Deployment llm/nope not found in context prod'
    """
    if isinstance(error, TargetNotFound):
        return cat.t("live.not_found", detail=str(error).rstrip("."))
    if isinstance(error, NotPermitted):
        return cat.t("live.forbidden", permission=error.permission)
    if isinstance(error, (StaleObject, PlanMoved, PartlyApplied)):  # what changed under us: plan again
        return cat.t("live.conflict")
    if isinstance(error, TemporaryError):
        return cat.t("live.temporary", seconds=error.delay_s)
    if isinstance(error, EvidenceUnavailable):
        return cat.t("live.unavailable", detail=error.params.get("detail") or error.code)
    if cat.has(f"live.{error.code}"):  # a code with wording of its own (bundle_folder_not_empty, ...)
        return cat.t(f"live.{error.code}", error.params)
    return cat.t("live.error", detail=str(error))


@contextmanager
def live_guard(lang: str) -> Iterator[Guard]:
    """Turn a bad target or an unusable kube/gpumem config into exit 2 with one line on stderr;
    never a traceback.

    A GpumemError (a workload that does not exist, ...) passes through to `bot.main`,
    which maps every verb's errors in one place with the same wording (`error_line`).
    """
    from bot.config.settings import SettingsError
    from bot.grammar.slack import CommandError
    from collectors.kube.client import KubeConfigError

    guard = Guard(Catalog.load(lang))
    try:
        yield guard
    except CommandError as e:  # the target is not NAMESPACE/DEPLOYMENT: worded as Slack words it
        detail = guard.cat.t(f"slack.error.{e.key}", e.params).rstrip(".")
        guard.exit_code, guard.message = 2, guard.cat.t("live.bad_target", detail=detail)
    except KubeConfigError as e:
        guard.exit_code, guard.message = 2, guard.cat.t("live.no_cluster", detail=str(e).rstrip("."))
    except SettingsError as e:
        guard.exit_code, guard.message = 2, guard.cat.t("live.bad_config", detail=str(e).rstrip("."))
    except OSError as e:  # the bundle folder cannot be written (--out, --save-bundle)
        if e.filename is None:  # not a file: the collectors turn network errors into evidence
            raise
        where = e.filename
        guard.exit_code, guard.message = 2, guard.cat.t("live.cannot_write", path=where, reason=e.strerror or str(e))
    if guard.message:
        print(guard.message, file=sys.stderr)
