"""A plan id from the command line, looked up in the store before anything else happens.

`gpumem apply ID` and `gpumem rollback ID` call `known_plan` first: an id the store does not
hold is refused before the settings name a cluster, before a kubeconfig is loaded (its exec
plugin run) and before the API server is asked anything. When a stored id is close to the one
given (the same id in other case, one that starts with it, or one a character or two away), the
refusal names it; gpumem never acts on the guess.
"""

from __future__ import annotations

import difflib

from bot.store.db import Store, StoredPlan
from runbooks.model.errors import PlanNotFound

#: how much of an unknown id the refusal repeats (a pasted line can be long)
SHOWN_CHARS = 40
#: difflib's ratio at or above which a stored id is offered: for the 10 characters of an id
#: (`p-` and 8 hex digits), at most two characters differ
CLOSE_RATIO = 0.8
#: at most this many suggestions
NEAREST = 3


def known_plan(store: Store, plan_id: str) -> StoredPlan:
    """The stored plan `plan_id`. Raises PlanNotFound `plan_not_found` (with `plan`), or
    `plan_not_found_near` (with `plan` and `nearest`, the close stored ids) when the store holds
    no such plan.

    >>> known_plan(Store.memory(), "p-1a2b3c4d")
    Traceback (most recent call last):
    ...
    runbooks.model.errors.PlanNotFound: plan_not_found: {'plan': 'p-1a2b3c4d'}
    """
    try:
        return store.get(plan_id)
    except PlanNotFound:
        shown = plan_id if len(plan_id) <= SHOWN_CHARS else plan_id[:SHOWN_CHARS] + "..."
        ids = [row[0] for row in store.db.execute("SELECT id FROM plans ORDER BY created_at DESC").fetchall()]
        near = nearest_ids(plan_id, ids)
        if near:
            raise PlanNotFound("plan_not_found_near", plan=shown, nearest=", ".join(near)) from None
        raise PlanNotFound(plan=shown) from None


def nearest_ids(given: str, ids: list[str]) -> list[str]:
    """The stored ids close to `given`, the closest first: the same id in other case or with
    spaces around it, ids that start with it (four characters or more), then those at most two
    characters away.

    >>> nearest_ids("p-1a2b3c4e", ["p-9f8e7d6c", "p-1a2b3c4d"])
    ['p-1a2b3c4d']
    >>> nearest_ids("P-1A2B", ["p-1a2b3c4d", "p-1a2b0000", "p-77777777"])
    ['p-1a2b3c4d', 'p-1a2b0000']
    >>> nearest_ids("p-00000000", ["p-9f8e7d6c"])
    []
    """
    wanted = given.strip().lower()
    if not wanted:
        return []
    out = [i for i in ids if i.lower() == wanted]
    if len(wanted) >= 4:
        out += [i for i in ids if i.lower().startswith(wanted) and i not in out]
    out += [i for i in difflib.get_close_matches(wanted, ids, n=NEAREST, cutoff=CLOSE_RATIO) if i not in out]
    return out[:NEAREST]
