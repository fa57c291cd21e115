"""The CLI's guard around a live verb: a bad target or an unusable kube/gpumem config becomes
exit 2 with one line on stderr, never a traceback; any `GpumemError` passes through to
`bot.main.fail`, worded by `bot.render.errors.error_line`.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bot.grammar.slack import CommandError
from bot.render.i18n import Catalog

if TYPE_CHECKING:
    from bot.service.connections import KubeConfigError


@dataclass
class Guard:
    cat: Catalog
    exit_code: int = 0
    message: str | None = field(default=None)


@contextmanager
def live_guard(lang: str) -> Iterator[Guard]:
    """Turn a bad target or an unusable kube/gpumem config into exit 2 with one line on stderr;
    never a traceback.

    A GpumemError (a workload that does not exist, ...) passes through to `bot.main`,
    which maps every verb's errors in one place with the same wording (`error_line`).
    """
    # lazy: the settings loader (~40 ms) and the Kubernetes client behind KubeConfigError
    # (~500 ms, -X importtime) are not paid by an offline triage, which imports this module
    from bot.config.settings import SettingsError
    from bot.service.connections import KubeConfigError

    guard = Guard(Catalog.load(lang))
    try:
        yield guard
    except CommandError as e:  # the target is not NAMESPACE/DEPLOYMENT: worded as Slack words it
        detail = guard.cat.t(f"slack.error.{e.key}", e.params).rstrip(".")
        guard.exit_code, guard.message = 2, guard.cat.t("live.bad_target", detail=detail)
    except KubeConfigError as e:
        guard.exit_code, guard.message = 2, guard.cat.t("live.no_cluster", detail=kube_config_words(guard.cat, e))
    except SettingsError as e:
        guard.exit_code, guard.message = 2, guard.cat.t("live.bad_config", detail=str(e).rstrip("."))
    except OSError as e:  # the bundle folder cannot be written (--out, --save-bundle)
        if e.filename is None:  # not a file: the collectors turn network errors into evidence
            raise
        where = e.filename
        guard.exit_code, guard.message = 2, guard.cat.t("live.cannot_write", path=where, reason=e.strerror or str(e))
    if guard.message:
        print(guard.message, file=sys.stderr)


def kube_config_words(cat: Catalog, error: KubeConfigError) -> str:
    """A KubeConfigError worded: which source (the file, the default kubeconfig, the pod's
    service account) in the reader's language, then the Kubernetes client's own words."""
    if error.in_cluster:
        where = cat.t("live.kube_source_in_cluster")
    elif error.kubeconfig:
        where = error.kubeconfig
    else:
        where = cat.t("live.kube_source_default")
    return cat.t("live.kube_source_said", where=where, reason=str(error.reason).rstrip("."))
