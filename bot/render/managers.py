"""Who manages a workload, in words: the finding line of a triage ("managed by Argo CD application
llm-serving, self-heal on"), what will happen to a patch, and the refusal of `gpumem apply`.

Managers come as JSON (`collectors.kube.managers.Manager.to_json`: kind, name, evidence,
namespace, owner_kind, automated, self_heal, sync_unknown), as the store and `--json` keep them.

>>> from bot.render.i18n import Catalog
>>> m = {"kind": "argocd", "name": "llm-serving", "evidence": "annotation ...", "automated": True, "self_heal": True}
>>> manager_line(Catalog.load("en"), m)
'managed by Argo CD application llm-serving, self-heal on'
>>> patch_fate(Catalog.load("en"), m)
'Argo CD will revert this at the next sync; with self-heal on, within minutes.'
"""

from __future__ import annotations

from typing import Any

from bot.render.i18n import Catalog


def _params(m: dict[str, Any]) -> dict[str, Any]:
    return {"name": m.get("name") or "?", "namespace": m.get("namespace") or "-",
            "owner_kind": m.get("owner_kind") or "?", "evidence": m.get("evidence") or ""}


def who(cat: Catalog, m: dict[str, Any]) -> str:
    kind = str(m.get("kind") or "ssa")
    p = _params(m)
    if kind in ("argocd", "flux") and p["name"] == "?":
        return cat.t(f"managers.who.{kind}_unknown", p)
    return cat.t(f"managers.who.{kind}" if kind in ("controller", "argocd", "flux", "helm") else "managers.who.ssa", p)


def sync_words(cat: Catalog, m: dict[str, Any]) -> str | None:
    """Argo CD's sync policy in words; None for another manager."""
    if m.get("kind") != "argocd":
        return None
    if m.get("sync_unknown"):
        return cat.t(f"managers.sync.{m['sync_unknown']}", _params(m))
    if m.get("self_heal"):
        return cat.t("managers.sync.self_heal")
    if m.get("automated"):
        return cat.t("managers.sync.automated")
    if m.get("automated") is False:
        return cat.t("managers.sync.manual")
    return cat.t("managers.sync.not_read")


def manager_line(cat: Catalog, m: dict[str, Any]) -> str:
    sync = sync_words(cat, m)
    return cat.t("managers.line_sync", who=who(cat, m), sync=sync) if sync else cat.t("managers.line", who=who(cat, m))


def managers_text(cat: Catalog, managers: list[dict[str, Any]]) -> str:
    """All managers, one clause each, with the evidence that said so."""
    if not managers:
        return cat.t("managers.none")
    return cat.t("managers.sep").join(f"{manager_line(cat, m)} {cat.t('managers.evidence', evidence=m.get('evidence') or '-')}"
                                      for m in managers)


def patch_fate(cat: Catalog, m: dict[str, Any]) -> str:
    """What will happen to a patch gpumem writes to an object `m` manages."""
    kind = m.get("kind")
    if kind == "argocd":
        if m.get("sync_unknown") or m.get("automated") is None:
            return cat.t("managers.fate.argocd_unknown")
        return cat.t("managers.fate.argocd_self_heal" if m.get("self_heal") else
                     "managers.fate.argocd_automated" if m.get("automated") else "managers.fate.argocd_manual")
    if kind in ("controller", "flux", "helm"):
        return cat.t(f"managers.fate.{kind}", _params(m))
    return cat.t("managers.fate.ssa", _params(m))


def fates_text(cat: Catalog, managers: list[dict[str, Any]]) -> str:
    return " ".join(patch_fate(cat, m) for m in managers)


def refusal_line(cat: Catalog, code: str, params: dict[str, Any]) -> str:
    """The wording of a ManagedElsewhere: who manages the target, nothing was written, what to do."""
    managers = [m for m in params.get("managers") or [] if isinstance(m, dict)]
    shown = [m for m in managers if m.get("kind") != "ssa"] or managers
    target = str(params.get("target") or "?")
    namespace = target.split("/", 1)[0]
    what = cat.t("managers.apply.controller_what" if code == "managed_controller" else "managers.apply.gitops_what",
                 namespace=namespace)
    managed = cat.t("managers.sep").join(manager_line(cat, m) for m in shown) or cat.t("managers.none")
    return cat.t("managers.apply.refused", target=target, managed=managed, what=what)


def plan_manager_lines(cat: Catalog, managers: list[dict[str, Any]], namespace: str) -> list[str]:
    """The plan's lines about who manages the object it writes: each manager with its evidence,
    what will happen to the patch, and whether apply refuses it (none when nothing manages it)."""
    if not managers:
        return []
    lines = [cat.t("managers.plan.heading")]
    lines += [f"  - {manager_line(cat, m)} {cat.t('managers.evidence', evidence=m.get('evidence') or '-')}"
              for m in managers]
    lines += [f"  {patch_fate(cat, m)}" for m in managers]
    kinds = {m.get("kind") for m in managers}
    if "controller" in kinds:
        lines.append("  " + cat.t("managers.plan.refuses_controller"))
    elif kinds & {"argocd", "flux", "helm"}:
        lines.append("  " + cat.t("managers.plan.refuses_gitops", namespace=namespace))
        if any(m.get("kind") == "argocd" and m.get("self_heal") for m in managers):
            lines.append("  " + cat.t("managers.plan.self_heal"))
    return lines


def managers_json(cat: Catalog, managers: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`managers` in `--json`: each manager's fields, its line and what happens to a patch."""
    return [{**m, "text": manager_line(cat, m), "patch_fate": patch_fate(cat, m)} for m in managers]
