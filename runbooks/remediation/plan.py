"""A plan: one typed change to one object, what it was made against, and its life as states.

The store keeps plans; this module only says what a plan is and which steps its life may take.
A plan moves in one direction through

    proposed -> approved -> applying -> applied -> watched
                                             \\-> failed
                                             \\-> reverted (another writer put a changed field back)
    (and rolled_back after applied, watched or failed)

and ends early as rejected, expired or superseded. A plan stays `applying` when its write was
sent and nobody could read what became of it (the store's `outcome_unknown` audit row); a
reconcile pass reads the object and moves it to applied or failed. Each step is one transaction in the store
that names the state it leaves, so a double click, two approvers at once or a retried Slack
delivery finds the plan already moved and does nothing.

What is approved is the plan's content hash: the target, the resourceVersion and generation
it was made against, the changes and the exact patch. A plan whose content differs is another
plan, and approval does not carry over.

>>> can_move("proposed", "approved"), can_move("applied", "approved")
(True, False)
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runbooks.model.changes import Change
from runbooks.model.managers import Manager
from runbooks.model.serde import to_jsonable
from runbooks.remediation.preview import PlanPreview

#: every state a plan can be in
STATES = ("proposed", "approved", "applying", "applied", "watched", "rolled_back",
          "rejected", "expired", "failed", "superseded", "reverted")
#: state -> the states it may move to
TRANSITIONS: dict[str, frozenset[str]] = {
    "proposed": frozenset({"approved", "rejected", "expired", "superseded"}),
    "approved": frozenset({"applying", "rejected", "expired", "superseded"}),
    "applying": frozenset({"applied", "failed"}),
    "applied": frozenset({"watched", "failed", "rolled_back", "reverted"}),
    "watched": frozenset({"rolled_back"}),
    "failed": frozenset({"rolled_back"}),
    "rolled_back": frozenset(),
    "rejected": frozenset(),
    "expired": frozenset(),
    "superseded": frozenset(),
    # the change is off the object (its rollback's tests would refuse): nothing more for gpumem to do
    "reverted": frozenset(),
}
#: states from which nothing more happens to the object
FINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
#: states in which the plan's change may be on the cluster
WRITTEN = frozenset({"applying", "applied", "watched", "failed"})
#: how long a proposed plan may wait for its approval
DEFAULT_TTL = timedelta(minutes=15)


def can_move(from_state: str, to_state: str) -> bool:
    """Whether a plan in `from_state` may move to `to_state`."""
    return to_state in TRANSITIONS.get(from_state, frozenset())


@dataclass(frozen=True)
class PlanTarget:
    cluster: str | None
    namespace: str
    kind: str
    name: str

    def __str__(self) -> str:
        where = f"{self.cluster}:" if self.cluster else ""
        return f"{where}{self.namespace}/{self.kind.lower()}/{self.name}"


@dataclass(frozen=True)
class Plan:
    """What would be applied, to what, made against which version of it, and until when."""

    id: str
    target: PlanTarget
    #: the recommended action it comes from (`set_safe_flags`, `scale_out`, ...)
    action_id: str
    changes: tuple[Change, ...]
    #: the object's metadata.resourceVersion and metadata.generation when the plan was made
    resource_version: str
    generation: int | None
    #: the exact request body, e.g. RFC 6902 operations with `test` on the old values
    patch: tuple[dict[str, Any], ...]
    patch_type: str
    requested_by: str
    created_at: datetime
    expires_at: datetime
    #: approvals needed before it may be applied (two for kinds the config names high-risk)
    approvals_needed: int = 1
    #: where it came from: the triage's target and time, or "cli"
    origin: str = ""
    #: the workload the plan is for when the object written is another one (the HPA that scales
    #: it): what the watch looks at and a re-plan reads
    workload: PlanTarget | None = None
    #: the predicted budget and blast radius (`runbooks.remediation.preview`); not part of the
    #: content hash (it is what was read about the cluster, not what is applied); None in plans
    #: stored before it existed
    preview: PlanPreview | None = None
    #: who manages the object written (`runbooks.model.managers`: a controller owner, Argo CD,
    #: Flux, Helm, server-side apply) as read when the plan was made; not part of the content
    #: hash (apply reads them again and refuses on them); () in plans stored before
    managers: tuple[Manager, ...] = ()

    @property
    def content_hash(self) -> str:
        """sha256 of what gets applied: target, version, changes and the exact patch.

        >>> from datetime import UTC, datetime
        >>> from runbooks.model.changes import Scale
        >>> t = datetime(2026, 12, 1, tzinfo=UTC)
        >>> p = Plan("p1", PlanTarget("prod", "llm", "Deployment", "vllm"), "scale_out",
        ...          (Scale(2, 3),), "41", 7, ({"op": "replace", "path": "/spec/replicas", "value": 3},),
        ...          "application/json-patch+json", "U1", t, t)
        >>> p.content_hash[:12] == Plan(**{**p.__dict__, "id": "p2", "requested_by": "U9"}).content_hash[:12]
        True
        """
        doc = {"target": to_jsonable(self.target), "resource_version": self.resource_version,
               "generation": self.generation, "changes": to_jsonable(self.changes), "patch": list(self.patch),
               "patch_type": self.patch_type}
        if self.workload is not None:
            doc["workload"] = to_jsonable(self.workload)
        return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()

    def expired(self, now: datetime) -> bool:
        return now >= self.expires_at
