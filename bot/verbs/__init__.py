"""The verb registry: one entry per verb, read by every surface that runs verbs.

`bot.main` dispatches `gpumem VERB` through it (`Verb.cli`: the module whose
`run(request, lang, deps)` runs the verb in a terminal, its errors worded from `error_keys`),
the Slack listener decides from its `slack` policy how `/gpumem VERB` is answered (in the ack,
in the job pool, by the remediation desk; what it needs configured first), and the job runner
(`bot.slack.work.Work`) runs the pool's jobs by `SlackPolicy.job` and answers them with the
entry's Slack renderer. A verb Slack does not offer has no policy.

Adding a verb is one entry here plus its modules: its arguments in `bot.grammar.commands`
(`VERBS`) with its request in `bot.grammar.requests`, its use case in `bot.service`, its
renderers in `bot.render`, its terminal runner in `bot.cli` (a verb with a surface of its own
names that: `serve`, `agent`).

The heavy references are `Lazy`: importing every verb's runner, use case and renderers when the
registry loads costs about 650 ms (measured by importing them all: ~690 ms against ~37 ms for
`bot.main` alone), which `gpumem --help` and a one-verb command would pay; each is imported
when it is first called instead.

>>> VERBS["budget"].request.__name__, VERBS["budget"].cli, VERBS["budget"].slack.job
('BudgetRequest', 'bot.cli.budget', 'worker')
>>> sorted(name for name, verb in VERBS.items() if verb.slack and verb.slack.runs == "desk")
['plan', 'plans', 'rollback']
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from bot.grammar.requests import (
    AgentRequest,
    ApplyRequest,
    AuditRequest,
    BudgetRequest,
    CollectRequest,
    DashboardsRequest,
    FleetRequest,
    HandoverRequest,
    NoteRequest,
    NotesRequest,
    PlanRequest,
    PlansRequest,
    ProfileRequest,
    RollbackRequest,
    RulesRequest,
    ServeRequest,
    SnapshotRequest,
    TriageRequest,
)


@dataclass(frozen=True)
class Lazy:
    """A callable named `module:attribute`, imported on its first call."""

    ref: str
    _found: list[Callable[..., Any]] = field(default_factory=list, compare=False, repr=False)

    def resolve(self) -> Callable[..., Any]:
        if not self._found:
            module, _, attr = self.ref.partition(":")
            self._found.append(getattr(importlib.import_module(module), attr))
        return self._found[0]

    def __call__(self, *args: Any, **kw: Any) -> Any:
        return self.resolve()(*args, **kw)


@dataclass(frozen=True)
class Upload:
    """A picture of an outcome the Slack answer attaches in its thread: the outcome's attribute,
    the file's name part (`gpumem-<target>-<name>.png`) and its catalog title."""

    attribute: str
    name: str
    title_key: str


@dataclass(frozen=True)
class SlackPolicy:
    """How `/gpumem VERB` is answered.

    `runs`: "ack" in the ack itself (one SQLite statement, ephemeral); "pool" as a job of the
    job pool, acked first with "on it" (`bot.render.slack_verbs.ack_text`); "desk" by the
    remediation desk (`bot.slack.remediation`). `job` says what the pool runs: "target" the
    triage runner on the service (a parent message shows its progress), "worker" the verb's
    terminal use case in a worker process (`bot.verbs.worker`), "handover" and "fleet" theirs
    on a pool thread. `needs` is refused up front when missing ("store": `store.path`,
    "prometheus": a configured Prometheus). `scoped`: its `[NAMESPACE|--all]` is resolved to
    the namespaces the channel may read.
    """

    runs: Literal["ack", "pool", "desk"]
    job: Literal["target", "worker", "handover", "fleet"] | None = None
    needs: tuple[Literal["store", "prometheus"], ...] = ()
    scoped: bool = False
    #: a target job's answer: (outcome, lang, target, user) -> the parent's message (None: the
    #: triage diagnosis, with its thread, files and record)
    message: Callable[..., dict[str, Any]] | None = None
    uploads: tuple[Upload, ...] = ()

    @property
    def parent(self) -> bool:
        """A parent message shows the job while it runs."""
        return self.job == "target"


@dataclass(frozen=True)
class Verb:
    name: str
    request: type[Any]
    #: the module whose `run(request, lang, deps) -> int` runs it in a terminal (imported when it runs)
    cli: str
    #: the catalog section of its own error codes (`bot.main.fail`)
    error_keys: str | None = None
    slack: SlackPolicy | None = None
    #: in a worker process for Slack: (request, lang, deps) -> `bot.verbs.worker.VerbOutput`
    worker: Callable[..., Any] | None = None

    @property
    def terminal(self) -> bool:
        """Prints for a person at a terminal (servers log instead)."""
        return self.cli.startswith("bot.cli.")


_PROFILE_CHART = Upload("profile_chart_png", "buckets", "slack.upload.profile_chart")

#: verb -> its entry, in the grammar's order (`bot.grammar.commands.VERBS`)
VERBS: dict[str, Verb] = {v.name: v for v in (
    Verb("triage", TriageRequest, "bot.cli.triage", "cli", SlackPolicy("pool", "target")),
    Verb("budget", BudgetRequest, "bot.cli.budget", "budget_cli.error", SlackPolicy("pool", "worker"),
         worker=Lazy("bot.verbs.worker:budget_text")),
    Verb("profile", ProfileRequest, "bot.cli.profile", "profile_cli.error",
         SlackPolicy("pool", "target", message=Lazy("bot.render.slack_verbs:profile_answer"),
                     uploads=(_PROFILE_CHART,))),
    Verb("collect", CollectRequest, "bot.cli.collect"),
    Verb("snapshot", SnapshotRequest, "bot.cli.snapshot", None,
         SlackPolicy("pool", "target", message=Lazy("bot.render.slack_verbs:snapshot_answer"))),
    Verb("agent", AgentRequest, "bot.agent.command"),
    Verb("plan", PlanRequest, "bot.cli.remediate", "remediate_cli.error", SlackPolicy("desk")),
    Verb("apply", ApplyRequest, "bot.cli.remediate", "remediate_cli.error"),
    Verb("rollback", RollbackRequest, "bot.cli.remediate", "remediate_cli.error", SlackPolicy("desk")),
    Verb("plans", PlansRequest, "bot.cli.records", None, SlackPolicy("desk")),
    Verb("audit", AuditRequest, "bot.cli.records"),
    Verb("note", NoteRequest, "bot.cli.handover", "handover.error", SlackPolicy("ack", needs=("store",))),
    Verb("notes", NotesRequest, "bot.cli.handover", "handover.error", SlackPolicy("ack", needs=("store",))),
    Verb("handover", HandoverRequest, "bot.cli.handover", "handover.error",
         SlackPolicy("pool", "handover", needs=("store",))),
    Verb("rules", RulesRequest, "bot.cli.rules", "rules_cli.error"),
    Verb("dashboards", DashboardsRequest, "bot.cli.dashboards", "dashboards.error"),
    Verb("fleet", FleetRequest, "bot.cli.fleet", "fleet_cli.error",
         SlackPolicy("pool", "fleet", needs=("prometheus",), scoped=True)),
    Verb("serve", ServeRequest, "bot.serve"),
)}
