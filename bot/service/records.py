"""What the store remembers, for the surfaces: the audit trail and the plans (`gpumem audit`,
`gpumem plans`)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

from bot.config.remediation import store_path
from bot.grammar.requests import AuditRequest, PlansRequest, StoreRequest
from bot.grammar.slack import split_target
from bot.service.deps import Deps
from bot.store.chain import ChainReport
from bot.store.db import AuditRow, Store, StoredPlan
from runbooks.model.errors import UsageError


def store_file(request: StoreRequest, deps: Deps) -> Any:
    """The path of the store named by --store, else the config's store.path, else the default."""
    if getattr(request, "store", None):
        return request.store
    return store_path(deps.settings.store, deps.env)


def open_store(request: StoreRequest, deps: Deps) -> Store:
    """The store named by --store, else the config's store.path, else the default path.
    Raises UsageError store_unusable naming the file."""
    return Store.open(store_file(request, deps))


def _target(request: AuditRequest | PlansRequest) -> tuple[str | None, str | None]:
    if not getattr(request, "target", None):
        return None, None

    return split_target(request.target)


def audit_rows(request: AuditRequest, deps: Deps) -> list[AuditRow]:
    """The audit rows `request` asks for (--since, --target), oldest first."""
    since = request.since
    if isinstance(since, timedelta):
        since = deps.now() - since
    namespace, name = _target(request)
    store = open_store(request, deps)
    try:
        return store.audit(since=since, namespace=namespace, name=name)
    finally:
        store.close()


def verify_audit(request: AuditRequest, deps: Deps) -> ChainReport:
    """The audit's hash chain checked (`gpumem audit --verify`). A store file that is not there
    is refused (UsageError store_unusable), not created and called intact."""
    path = store_file(request, deps)
    if not os.path.isfile(path):
        raise UsageError("store_unusable", path=str(path), reason="no such file")
    store = Store.open(path)
    try:
        return store.verify_audit()
    finally:
        store.close()


def plan_rows(request: PlansRequest, deps: Deps) -> list[StoredPlan]:
    """The plans `request` asks for (--target, --all), newest first."""
    namespace, name = _target(request)
    store = open_store(request, deps)
    try:
        plans = store.plans(namespace=namespace, open_only=not request.all, limit=200)
    finally:
        store.close()
    return [p for p in plans if name is None or name in (p.plan.target.name, (p.plan.workload or p.plan.target).name)]
