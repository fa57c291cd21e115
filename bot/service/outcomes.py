"""The typed outcomes the use cases return and `bot.render` turns into text, JSON and Block Kit.

A use case builds one of these and returns it; nothing here words anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runbooks.model.lengths import ProfileShift, RequestProfile
from runbooks.model.phrases import Phrase
from runbooks.profile.detail import ProfileDetail

if TYPE_CHECKING:
    # annotations only: a verb that shows no fleet, rules or dashboards (`gpumem profile`,
    # whose whole run is a few hundred ms) does not import them
    from runbooks.alerts.dashboards import Dashboard
    from runbooks.alerts.fleet import Ranked
    from runbooks.alerts.fleet_queries import Recording
    from runbooks.alerts.rules import RuleSet
    from runbooks.model.budget import Budget, BudgetInputs
    from runbooks.model.evidence import ModelSpec
    from runbooks.remediation.solver import SafePlan
    from runbooks.sizing.capacity import BucketCapacity
    from runbooks.sizing.conflicts import FlagClash

#: the PrometheusRule's name when `--name` is not given
DEFAULT_OBJECT_NAME = "gpumem"


@dataclass(frozen=True)
class DashboardsOutcome:
    """What `gpumem dashboards` shows: the dashboards of the engines asked for."""

    dashboards: tuple[Dashboard, ...]


@dataclass(frozen=True)
class RulesOutcome:
    """What `gpumem rules` writes: the rules, the format, the runbook link's base, and the
    PrometheusRule's metadata."""

    ruleset: RuleSet
    output: str  # prometheusrule | rules
    runbook_url: str
    name: str = DEFAULT_OBJECT_NAME
    object_labels: dict[str, str] = field(default_factory=dict)
    #: the fleet view's recording rules (`runbooks.alerts.fleet_queries`), empty with --no-recording-rules
    recordings: tuple[Recording, ...] = ()


@dataclass(frozen=True)
class Missing:
    """A query that gave no answer: the columns it costs, the error kind and message."""

    query: str
    columns: tuple[str, ...]
    kind: str
    #: why, a phrase under `read.` (`collectors.errors`) the renderers word
    message: Phrase | str


@dataclass(frozen=True)
class FleetOutcome:
    rows: tuple[Ranked, ...]
    #: services in view before --top
    total: int
    missing: tuple[Missing, ...]
    #: query id -> PromQL, as sent
    queries: dict[str, str]
    at: datetime
    window_s: int
    namespaces: tuple[str, ...] = ()
    engines: tuple[str, ...] = ()
    #: "recorded" (gpumem's recording rules) or "raw" (the raw series)
    read_from: str = "raw"
    #: why: loaded, not_loaded, window, unread (collectors.prometheus.fleet)
    read_from_reason: str = "not_loaded"
    #: recording rules the view needs that are not loaded
    missing_records: int = 0
    #: the rules API's answer, when it gave none: (kind, message)
    rules_issue: tuple[str, Phrase | str] | None = None

    @property
    def not_read(self) -> tuple[str, ...]:
        """Columns no answer came back for, in the view's order."""
        from runbooks.alerts.fleet import COLUMNS

        cols = {c for m in self.missing for c in m.columns}
        return tuple(c for c in COLUMNS if c in cols)

    @property
    def nothing_read(self) -> bool:
        return bool(self.queries) and len(self.missing) == len(self.queries)


@dataclass(frozen=True)
class ProfileView:
    """Everything `gpumem profile` shows."""

    kind: str  # access_log | server_log | metrics
    profile: RequestProfile
    detail: ProfileDetail | None = None
    baseline: RequestProfile | None = None
    baseline_shift: ProfileShift | None = None
    chart_path: str | None = None
    chart_bytes: int | None = None
    #: metrics: the profile is the traffic between the baseline scrape and this one
    between_scrapes: bool = False
    workers: int = 1


@dataclass(frozen=True)
class BudgetSide:
    """One configuration of `gpumem budget` and what it gives."""

    inputs: BudgetInputs
    budget: Budget
    conflicts: tuple[FlagClash, ...]
    buckets: BucketCapacity


@dataclass(frozen=True)
class BudgetPage:
    """Everything `gpumem budget` shows: the launch, and with --what-if the changed one beside it
    (`changed`: {what-if key: {"before": value in effect, "after": value in effect}}), with
    --profile the safest flags that still serve the traffic."""

    model: ModelSpec
    gpu_label: str
    before: BudgetSide
    after: BudgetSide | None = None
    changed: dict[str, dict[str, Any]] | None = None
    plan: SafePlan | None = None
    profile: RequestProfile | None = None
    notes: tuple[tuple[str, dict[str, Any]], ...] = ()


@dataclass(frozen=True)
class BudgetOutcome:
    """The page to render and the exit code it calls for."""

    page: BudgetPage
    exit_code: int
