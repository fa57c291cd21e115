"""The hardening limits of `gpumem serve`: request body size, the drain on SIGTERM, replays.

They come from the environment, so a deployment can change them without a config release:

| variable | default | meaning |
|---|---|---|
| `GPUMEM_HTTP_MAX_BODY_BYTES` | 1048576 | a larger request body gets 413 before it is read (every path) |
| `GPUMEM_DRAIN_S` | 20 | after SIGTERM, running jobs get this long to finish |
| `GPUMEM_EXIT_GRACE_S` | 5 | then this long for best-effort "restarted" edits; then the process exits |

Drain plus grace (25 s) stays under Kubernetes' default 30 s termination grace period, so the
kubelet's SIGKILL never cuts a goodbye edit short.

>>> ServeLimits.from_environ({"GPUMEM_DRAIN_S": "3"}).drain_s
3.0
>>> ServeLimits.from_environ({"GPUMEM_HTTP_MAX_BODY_BYTES": "1e9"})
Traceback (most recent call last):
...
bot.config.yaml_io.SettingsError: GPUMEM_HTTP_MAX_BODY_BYTES: expected a whole number of bytes, got '1e9'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from bot.config.settings import SettingsError

#: Slack's payloads are a few KB (a slash command, a block_actions click with its message)
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
DEFAULT_DRAIN_S = 20.0
DEFAULT_EXIT_GRACE_S = 5.0
#: Slack signs a request with a timestamp it accepts for 5 minutes either side
SIGNATURE_WINDOW_S = 300

_WHOLE = re.compile(r"[0-9]{1,12}")
_SECONDS = re.compile(r"[0-9]{1,6}(\.[0-9]{1,3})?")


@dataclass(frozen=True)
class ServeLimits:
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    drain_s: float = DEFAULT_DRAIN_S
    exit_grace_s: float = DEFAULT_EXIT_GRACE_S

    @property
    def stop_s(self) -> float:
        """From SIGTERM to the end of the process, at most."""
        return self.drain_s + self.exit_grace_s

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ServeLimits:
        body = _read(environ, "GPUMEM_HTTP_MAX_BODY_BYTES", _WHOLE, "a whole number of bytes")
        drain = _read(environ, "GPUMEM_DRAIN_S", _SECONDS, "seconds")
        grace = _read(environ, "GPUMEM_EXIT_GRACE_S", _SECONDS, "seconds")
        limits = cls(max_body_bytes=int(body) if body is not None else DEFAULT_MAX_BODY_BYTES,
                     drain_s=float(drain) if drain is not None else DEFAULT_DRAIN_S,
                     exit_grace_s=float(grace) if grace is not None else DEFAULT_EXIT_GRACE_S)
        if limits.max_body_bytes < 1024:
            raise SettingsError("GPUMEM_HTTP_MAX_BODY_BYTES: at least 1024 (Slack's smallest payloads are ~500 bytes)")
        if limits.exit_grace_s < 1:
            raise SettingsError("GPUMEM_EXIT_GRACE_S: at least 1 second")
        return limits


def _read(environ: Mapping[str, str], name: str, form: re.Pattern[str], what: str) -> str | None:
    value = environ.get(name)
    if value is None or value.strip() == "":
        return None
    value = value.strip()
    if not form.fullmatch(value):
        raise SettingsError(f"{name}: expected {what}, got {value[:40]!r}")
    return value
