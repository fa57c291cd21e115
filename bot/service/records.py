"""What the store remembers, for the surfaces: the audit trail and the plans (`gpumem audit`,
`gpumem plans`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from bot.config.remediation import store_path
from bot.config.settings import load_settings
from bot.grammar.requests import AuditRequest, PlansRequest, StoreRequest
from bot.store.chain import ChainReport
from bot.store.db import AuditRow, Store, StoredPlan
from runbooks.model.errors import UsageError


def store_file(request: StoreRequest, env: Mapping[str, str]) -> Any:
    """The path of the store named by --store, else the config's store.path, else the default."""
    if getattr(request, "store", None):
        return request.store
    settings = load_settings(getattr(request, "config", None), env)
    return store_path(settings.store, env)


def open_store(request: StoreRequest, env: Mapping[str, str]) -> Store:
    """The store named by --store, else the config's store.path, else the default path.
    Raises UsageError store_unusable naming the file."""
    return Store.open(store_file(request, env))


def _target(request: AuditRequest | PlansRequest) -> tuple[str | None, str | None]:
    if not getattr(request, "target", None):
        return None, None
    from bot.service.triage import split_target

    return split_target(request.target)


def audit_rows(request: AuditRequest, env: Mapping[str, str], now: datetime | None = None) -> list[AuditRow]:
    """The audit rows `request` asks for (--since, --target), oldest first."""
    since = request.since
    if isinstance(since, timedelta):
        since = (now or datetime.now(UTC)) - since
    namespace, name = _target(request)
    store = open_store(request, env)
    try:
        return store.audit(since=since, namespace=namespace, name=name)
    finally:
        store.close()


def verify_audit(request: AuditRequest, env: Mapping[str, str]) -> ChainReport:
    """The audit's hash chain checked (`gpumem audit --verify`). A store file that is not there
    is refused (UsageError store_unusable), not created and called intact."""
    path = store_file(request, env)
    if not os.path.isfile(path):
        raise UsageError("store_unusable", path=str(path), reason="no such file")
    store = Store.open(path)
    try:
        return store.verify_audit()
    finally:
        store.close()


def plan_rows(request: PlansRequest, env: Mapping[str, str]) -> list[StoredPlan]:
    """The plans `request` asks for (--target, --all), newest first."""
    namespace, name = _target(request)
    store = open_store(request, env)
    try:
        plans = store.plans(namespace=namespace, open_only=not request.all, limit=200)
    finally:
        store.close()
    return [p for p in plans if name is None or name in (p.plan.target.name, (p.plan.workload or p.plan.target).name)]
