"""Map the errors of a live collection to on-call wording and exit codes, in one place."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from bot.render.i18n import Catalog


@dataclass
class Guard:
    cat: Catalog
    exit_code: int = 0
    message: str | None = field(default=None)


@contextmanager
def live_guard(lang: str) -> Iterator[Guard]:
    """Turn a bad target, a missing workload or an unusable kube/gpumem config into exit 2
    with one line on stderr; never a traceback."""
    from bot.service.settings import SettingsError
    from bot.service.triage import BadTarget
    from collectors.kube.client import KubeConfigError, TargetNotFound

    guard = Guard(Catalog.load(lang))
    try:
        yield guard
    except BadTarget as e:
        guard.exit_code, guard.message = 2, guard.cat.t("live.bad_target", detail=str(e).rstrip("."))
    except TargetNotFound as e:
        guard.exit_code, guard.message = 2, guard.cat.t("live.not_found", detail=str(e).rstrip("."))
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
