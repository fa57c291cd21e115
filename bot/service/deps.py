"""What a use case is given besides its request: the settings, the environment, the connections
to the clusters, and the clock.

One small frozen object, made by the surface that runs the verb (`Deps.of(request, env)` in
`bot.main`), so a use case is called as `use_case(request, deps)` and a test hands it its own
settings, clock or connections. The settings are read when a use case first asks for them (from
the request's --config, else $GPUMEM_CONFIG): a verb that needs none (budget, rules, an offline
triage) is not refused for a config it never reads, and a bad config is reported where the use
case reads it, as before.

>>> from bot.config.environ import Environment
>>> deps = Deps(Environment())
>>> deps.settings.default_namespace is None, deps.now().tzinfo is not None
(True, True)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from typing import TYPE_CHECKING, Any

from bot.config.environ import Environment

if TYPE_CHECKING:
    from bot.config.settings import Settings
    from bot.service.connections import Connections


def utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Deps:
    env: Environment
    #: the config file a command named (--config); None: $GPUMEM_CONFIG, else none
    config_path: str | None = None
    #: the wall clock, aware (UTC)
    now: Callable[[], datetime] = utc_now
    #: settings already loaded (the bot's); None: loaded from `config_path` on first use
    loaded: Any = field(default=None, repr=False)

    @classmethod
    def of(cls, request: Any, env: Environment) -> Deps:
        """The deps of one command: its --config, when its verb takes one."""
        return cls(env, getattr(request, "config", None))

    @cached_property
    def settings(self) -> Settings:
        if self.loaded is not None:
            return self.loaded
        # lazy: the YAML loader and the settings tree cost ~100 ms (-X importtime), which
        # `gpumem --help` and the verbs that read no config would pay at start
        from bot.config.settings import load_settings

        return load_settings(self.config_path, self.env)

    @cached_property
    def connections(self) -> Connections:
        # lazy: the Kubernetes and HTTP clients cost ~500 ms to import (-X importtime)
        from bot.service.connections import Connections

        return Connections(self.settings)
