"""The process environment gpumem reads, taken once (`read_environment`) and handed down.

`bot.main` reads it at start and passes it to the verb it runs; nothing else in gpumem looks
at `os.environ` (ruff's banned-api rule holds that line, with this package, `bot.grammar` and
`bot.main` the only exceptions). An `Environment` is a read-only mapping of the variables
named in `NAMES`, so the settings loader takes it where it took `os.environ`, and a test
hands it a plain dict.

>>> env = Environment.from_mapping({"GPUMEM_CONFIG": "/etc/gpumem.yaml", "PATH": "/bin", "LANG": "zh_CN.UTF-8"})
>>> env.config_path, env.lang, "PATH" in env
('/etc/gpumem.yaml', 'zh', False)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType


def _with_files(*names: str) -> tuple[str, ...]:
    """A secret is read from its variable or from the file its `*_FILE` variable names."""
    return tuple(n for name in names for n in (name, f"{name}_FILE"))


#: the language variables, in the order they decide (gpumem's own first, then POSIX's)
LANG_NAMES = ("GPUMEM_LANG", "LC_ALL", "LC_MESSAGES", "LANG")
#: every variable gpumem reads; the rest of the environment is not looked at
NAMES: tuple[str, ...] = (
    "GPUMEM_CONFIG",
    *LANG_NAMES,
    "GPUMEM_PROMETHEUS_URL",
    "GPUMEM_SLACK_API_URL",
    *_with_files("GPUMEM_PROMETHEUS_TOKEN", "GPUMEM_WEBHOOK_TOKEN", "SLACK_BOT_TOKEN", "SLACK_APP_TOKEN",
                 "SLACK_SIGNING_SECRET"),
    # the store's default place (`bot.store.db.default_path`)
    "XDG_STATE_HOME",
    "HOME",
    # `gpumem serve`'s hardening limits (`bot.slack.limits.ServeLimits`)
    "GPUMEM_HTTP_MAX_BODY_BYTES",
    "GPUMEM_DRAIN_S",
    "GPUMEM_EXIT_GRACE_S",
    # the scheduler's Lease: the pod's namespace (downward API) and whether it runs in a pod
    "POD_NAMESPACE",
    "KUBERNETES_SERVICE_HOST",
    # the agent's host name (downward API: spec.nodeName)
    "NODE_NAME",
    # whether a terminal redraws a line in place (`gpumem apply`'s watch)
    "TERM",
)


@dataclass(frozen=True)
class Environment(Mapping[str, str]):
    """The variables of `NAMES` that are set, as they were when gpumem started."""

    #: never in a repr: the secrets' variables are among them (a log line or a traceback that
    #: shows the deps shows only which variables are set)
    values: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), repr=False)

    def __repr__(self) -> str:
        return f"Environment(set={sorted(self.values)})"

    @classmethod
    def from_mapping(cls, environ: Mapping[str, str]) -> Environment:
        return cls(MappingProxyType({name: environ[name] for name in NAMES if name in environ}))

    def __getitem__(self, name: str) -> str:
        return self.values[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __len__(self) -> int:
        return len(self.values)

    @property
    def config_path(self) -> str | None:
        """$GPUMEM_CONFIG: the config file a verb reads when it is given no --config."""
        return self.values.get("GPUMEM_CONFIG") or None

    @property
    def lang(self) -> str:
        """The language of the messages when no --lang is given (`default_lang`)."""
        return default_lang(self)

    @property
    def prometheus_token(self) -> str | None:
        """$GPUMEM_PROMETHEUS_TOKEN, for a Prometheus named on the command line (--prometheus)."""
        return self.values.get("GPUMEM_PROMETHEUS_TOKEN")

    @property
    def node_name(self) -> str | None:
        return self.values.get("NODE_NAME") or None

    @property
    def term(self) -> str:
        return self.values.get("TERM", "")


def default_lang(environ: Mapping[str, str]) -> str:
    """zh when the locale says Chinese (LC_ALL, LC_MESSAGES, LANG, in POSIX order), else en.

    >>> default_lang({"LANG": "zh_CN.UTF-8"})
    'zh'
    """
    for name in LANG_NAMES:
        value = environ.get(name)
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def read_environment() -> Environment:
    """The one read of the process environment."""
    return Environment.from_mapping(os.environ)
