"""`AddStartupProbe`: a startupProbe polling the engine's health endpoint, failureThreshold x
periodSeconds covering the load time.

>>> startup_budget(600)
(10, 60)
"""

from __future__ import annotations

import math
from typing import Any

from runbooks.model.changes import AddStartupProbe
from runbooks.model.errors import UsageError
from runbooks.model.phrases import Phrase
from runbooks.remediation.edits.common import KindEdit, set_op
from runbooks.remediation.edits.launch_edit import POD_PATH, server_container
from runbooks.remediation.edits.reader import ContainerReader
from runbooks.remediation.value_ranges import check_option

#: the health endpoint each engine serves on its HTTP port
HEALTH_PATH = {"vllm": "/health", "sglang": "/health", "tgi": "/health"}
#: the engine's port when neither its flags nor the container name one
DEFAULT_PORT = {"vllm": 8000, "sglang": 30000, "tgi": 80}
PROBE_PERIOD_S = 10
#: the startup budget without an observed load time: 30 x 10 s
DEFAULT_STARTUP_BUDGET_S = 300


def startup_budget(budget_s: int) -> tuple[int, int]:
    """(periodSeconds, failureThreshold) whose product covers `budget_s`."""
    return PROBE_PERIOD_S, max(1, math.ceil(budget_s / PROBE_PERIOD_S))


def startup_probe(workload: dict[str, Any], container: str | None, budget_s: Any, *,
                  reader: ContainerReader) -> KindEdit:
    """A startupProbe on the server container: GET the engine's health path on its port, every
    10 s, failing only after `budget_s` seconds. Replaces a startupProbe that is there."""
    budget_s = check_option("--startup-probe", budget_s)
    index, spec, config = server_container(workload, container, reader=reader)
    engine = config.engine or "vllm"
    port = config.port or _single_port(spec) or DEFAULT_PORT.get(engine, 8000)
    health = HEALTH_PATH.get(engine, "/health")
    period, failures = startup_budget(budget_s)
    probe = {"httpGet": {"path": health, "port": port, "scheme": "HTTP"}, "periodSeconds": period,
             "failureThreshold": failures, "timeoutSeconds": 1, "successThreshold": 1}
    old = spec.get("startupProbe")
    if old == probe:
        raise UsageError("nothing_to_change", what=Phrase("reason.startup_probe_already", {
            "container": spec.get("name"), "seconds": budget_s}))
    old_budget = None
    if isinstance(old, dict):
        old_budget = int(old.get("periodSeconds") or 10) * int(old.get("failureThreshold") or 3)
    path = f"{POD_PATH}/containers/{index}/startupProbe"
    return KindEdit((AddStartupProbe(spec.get("name"), health, old_budget, period * failures),),
                    tuple(set_op(path, "startupProbe" in spec, old, probe)))


def edit(workload: dict[str, Any], change: AddStartupProbe, container: str | None, reader: ContainerReader) -> KindEdit:
    """The registry's entry: the change's budget, or the default one without it."""
    return startup_probe(workload, container, DEFAULT_STARTUP_BUDGET_S if change.new is None else change.new,
                         reader=reader)


def _single_port(spec: dict[str, Any]) -> int | None:
    ports = [p.get("containerPort") for p in spec.get("ports") or [] if isinstance(p, dict)]
    return ports[0] if len(ports) == 1 and isinstance(ports[0], int) else None
