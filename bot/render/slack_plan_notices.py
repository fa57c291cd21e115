"""What the bot says about a plan by itself, with nobody clicking: the plan message's stage after
a reconcile pass settled a plan left `applying` or a rollback whose outcome was unknown (or after
the expiry sweep), and the thread reply that says what happened. The plan message itself is `bot.render.slack_remediation.plan_message`.
"""

from __future__ import annotations

from bot.render import slack_blocks as B
from bot.render.i18n import Catalog
from bot.render.slack_blocks import Message
from bot.render.slack_remediation import plan_message, restored
from bot.render.slack_triage import t
from bot.store.db import StoredPlan

#: what a reconciliation outcome makes of the plan message (`Reconciled.outcome`; `unknown`
#: leaves it: the plan is still `applying`)
RECONCILED_STAGES = {"applied": "reconciled_applied", "failed": "reconciled_failed",
                     "rolled_back": "reconciled_rolled_back", "rollback_not_applied": "rollback_not_applied",
                     "partly_applied": "partly_applied"}
#: the emoji of the thread reply
_EMOJI = {"applied": ":white_check_mark:", "failed": ":x:", "rolled_back": ":leftwards_arrow_with_hook:",
          "rollback_not_applied": ":x:", "partly_applied": ":warning:"}


def reconciled_message(stored: StoredPlan, outcome: str, reason: str, lang: str) -> Message:
    """The plan message once a reconcile pass settled it: applied (Roll back) or failed (Plan
    again); a rollback: rolled back, or not applied (Roll back)."""
    if outcome not in RECONCILED_STAGES:
        raise ValueError(f"no plan message for the reconciliation outcome {outcome!r}")
    return plan_message(stored, lang, RECONCILED_STAGES[outcome], reason=reason or "-")


def reconciled_reply(stored: StoredPlan, outcome: str, reason: str, lang: str) -> Message:
    """The thread reply: the plan was left applying (or its rollback's answer was lost), the
    object was read again, and what that settled it to."""
    if outcome not in RECONCILED_STAGES:
        raise ValueError(f"no thread reply for the reconciliation outcome {outcome!r}")
    cat = Catalog.load(lang)
    p = stored.plan
    text = t(cat, f"slack_plan_notice.reconciled_{outcome}", plan=p.id, target=str(p.target),
             restored=restored(p.changes, cat), reason=reason or "-")
    return B.message(text, [B.section(B.clip(f"{_EMOJI[outcome]} {text}", B.SECTION_CHARS))])


def expired_message(stored: StoredPlan, lang: str) -> Message:
    """The plan message of a plan the sweep expired: the expired stage, with Plan again."""
    return plan_message(stored, lang, "expired")

