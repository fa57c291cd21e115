"""Plans that nobody approved in time: moved to `expired` by a sweep, so that a plan message left
alone in a channel does not keep an Approve button that can only say "expired" when clicked.

`gpumem serve` runs the sweep on its scheduler's leader every `remediation.expiry_sweep_s`
(60 s) and once when it starts; the Slack side edits each expired plan's message
(`bot.slack.plan_notices`). Each plan moves in one store transaction, audited by
`EXPIRY_ACTOR`, expecting the state it was found in: a plan an approval (or a rejection, or a
second sweep) moved meanwhile is left alone. The sweep reads and writes the store only; it
sends nothing to a cluster.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.store.db import StoredPlan

#: the actor of the moves the sweep makes
EXPIRY_ACTOR = "gpumem-expiry"
#: an approved plan moves to `applying` as soon as its apply starts (milliseconds after the
#: approval); one still `approved` this long after its approval lost its apply (the bot stopped)
APPROVED_GRACE_S = 120.0


def expire_due(store: Any, now: datetime | None = None) -> list[StoredPlan]:
    """Every proposed plan past its expiry, and every approved one past it whose approval is
    `APPROVED_GRACE_S` old, moved to `expired` (one transaction and audit row each, by
    `EXPIRY_ACTOR`); the plans this call moved, as they are now."""
    now = now or datetime.now(UTC)
    moved = store.expire_due(now, actor=EXPIRY_ACTOR, approved_grace_s=APPROVED_GRACE_S)
    return [store.get(plan_id) for plan_id in moved]
