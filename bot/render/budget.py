"""Rendering of `gpumem budget`: JSON (stable keys, see README) and terminal text (en, zh)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from bot.render.assumptions import assumed_line as assumed_line
from bot.render.assumptions import assumption_reasons as assumption_reasons
from bot.render.assumptions import flag_value as _flag_value
from bot.render.i18n import Catalog
from bot.render.templating import environment
from bot.render.terminal import cells, ljust
from bot.render.wording import budget_concurrency, concurrency_short, eviction_words, pct
from bot.service.outcomes import BudgetPage as Page
from bot.service.outcomes import BudgetSide as Side
from runbooks.model.budget import Budget, BudgetInputs
from runbooks.model.errors import UsageError
from runbooks.model.units import GIB
from runbooks.remediation.solver import ENGINE_FLAGS, SafePlan, current_fraction
from runbooks.sizing.capacity import BucketCapacity
from runbooks.sizing.conflicts import FlagClash

#: Budget fields every budget JSON carries, in this order (the README documents them)
BUDGET_KEYS = ("weights_gib", "activation_gib", "non_torch_gib", "cudagraph_gib", "kv_cache_gib",
               "kv_bytes_per_token", "kv_cache_tokens", "max_concurrency", "fits", "failure")
_EXTRA_KEYS = ("failure_id", "max_model_len", "max_num_seqs", "max_num_batched_tokens", "block_size",
               "gpu_blocks", "budget_gib", "static_gib", "headroom_gib", "free_gib", "gpu_total_gib", "regime",
               "lora_gib", "max_batch_total_tokens", "concurrency", "concurrency_limit", "kv_requests")
_ROWS = (("weights", "weights_gib"), ("activation", "activation_gib"), ("non_torch", "non_torch_gib"),
         ("cudagraph", "cudagraph_gib"), ("kv", "kv_cache_gib"))


def worded_error(error: UsageError, lang: str) -> UsageError:
    """A use case's usage error with the kind of value a what-if expected in the reader's words
    (`budget_cli.kind.<kind>`); any other error as it is."""
    if error.code != "what_if_bad_value":
        return error
    params = dict(error.params)
    params["expected"] = Catalog.load(lang).t(f"budget_cli.kind.{params.get('expected')}")
    return UsageError(error.code, **params)


# ---------------------------------------------------------------------------- JSON


def _num(value: Any) -> Any:
    return round(value, 4) if isinstance(value, float) else value


def _budget_doc(b: Budget) -> dict[str, Any]:
    return {key: _num(getattr(b, key)) for key in (*BUDGET_KEYS, *_EXTRA_KEYS)}


def buckets_json(cap: BucketCapacity) -> dict[str, Any]:
    return {
        "basis": "profile_p95" if any(r.basis == "profile_p95" for r in cap.rows) else "bucket_limits",
        "rows": [{"bucket": r.bucket, "tokens": r.tokens, "basis": r.basis, "fit_in_kv": r.fit_in_kv,
                  "concurrent": r.concurrent, "share": _num(r.share), "capped_at_max_model_len": r.capped}
                 for r in cap.rows],
        "kv_cache_tokens": cap.kv_cache_tokens, "block_size": cap.block_size, "max_num_seqs": cap.max_num_seqs,
        "long_share_now": _num(cap.long_share_now), "long_share_limit": _num(cap.long_share_limit),
        "demand_tokens": cap.demand_tokens, "demand_ratio": _num(cap.demand_ratio), "status": cap.status,
    }


def side_json(side: Side, cat: Catalog) -> dict[str, Any]:
    b, inp = side.budget, side.inputs
    doc: dict[str, Any] = {"engine": b.engine, "engine_version": inp.engine_version, "tp": inp.tp, "pp": inp.pp}
    doc.update(_budget_doc(b))
    en = Catalog.load("en")  # the assumptions' words are English in every language, as they always were
    doc["assumptions"] = {name: assumed_line(en, name, a, with_name=False) for name, a in b.assumptions}
    doc["assumption_reasons"] = assumption_reasons(b)
    doc["warnings"] = [{"id": w, "text": warning_text(cat, w)} for w in _warnings(side)]
    doc["conflicts"] = [{"id": c.id, "fatal": c.fatal, "params": c.params, "text": conflict_text(cat, c)}
                        for c in side.conflicts]
    doc["buckets"] = buckets_json(side.buckets)
    return doc


def plan_json(plan: SafePlan, cat: Catalog) -> dict[str, Any]:
    return {
        "feasible": plan.feasible, "problem": plan.problem, "target_headroom": plan.target_headroom,
        "max_model_len": plan.max_model_len, "max_num_seqs": plan.max_num_seqs,
        "memory_fraction": plan.memory_fraction, "memory_fraction_flag": plan.flags[2],
        "max_input_tokens": plan.max_input_tokens, "args": list(plan.args()),
        "p99_tokens": plan.p99_tokens, "p95_tokens": plan.p95_tokens, "length_basis": plan.length_basis,
        "kv_cache_tokens": plan.kv_cache_tokens, "kv_pool_basis": plan.kv_pool_basis,
        "reasons": [{"flag": r.flag, "id": r.id, "params": r.params, "text": reason_text(cat, plan, r)}
                    for r in plan.reasons],
        "budget": _budget_doc(plan.budget),
    }


def page_json(page: Page, lang: str) -> dict[str, Any]:
    cat = Catalog.load(lang)
    head: dict[str, Any] = {"schema_version": 1, "lang": lang, "model": page.model.name,
                            "model_source": page.model.source, "gpu": page.gpu_label,
                            "notes": [{"id": k, "params": p, "text": cat.t(f"budget_cli.note.{k}", p)}
                                      for k, p in page.notes]}
    if page.profile is not None:
        head["profile"] = {"source": page.profile.source, "total": page.profile.total,
                           "shares": {b.bucket: _num(b.share) for b in page.profile.buckets}}
    if page.after is None:
        doc = {**head, **side_json(page.before, cat)}
    else:
        doc = {**head, "before": side_json(page.before, cat), "after": side_json(page.after, cat),
               "changed": page.changed}
    if page.plan is not None:
        doc["plan"] = plan_json(page.plan, cat)
    return doc


# ---------------------------------------------------------------------------- wording


def _warnings(side: Side) -> list[str]:
    covered = {"quantization_needs_newer_gpu": "fp8_unsupported_on_gpu", "bf16_needs_newer_gpu": "bf16_unsupported_on_gpu"}
    hidden = {covered[c.id] for c in side.conflicts if c.id in covered}
    return [w for w in side.budget.warnings if w not in hidden]


def warning_text(cat: Catalog, key: str) -> str:
    return cat.t_or(f"budget_cli.warning.{key}", key)


def conflict_text(cat: Catalog, c: FlagClash) -> str:
    return cat.t(f"budget_cli.conflict.{c.id}", c.params)


def _kind(plan: SafePlan, flag: str) -> str:
    return ("length", "seqs", "fraction")[plan.flags.index(flag)] if flag in plan.flags else "length"


def reason_text(cat: Catalog, plan: SafePlan, r: Any) -> str:
    return cat.t(f"budget_cli.reason.{_kind(plan, r.flag)}.{r.id}", {**r.params, "flag": r.flag})




def _gib(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.2f} GiB"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _version(inp: BudgetInputs, b: Budget) -> str:
    assumed = b.assumption("engine_version")
    return inp.engine_version or (f"{assumed.value}?" if assumed else "?")


def verdict_line(cat: Catalog, b: Budget) -> str:
    if b.failure:
        return cat.t("budget_cli.verdict.fails", failure=b.failure)
    if not b.fits:
        return cat.t("budget_cli.verdict.overcommitted", over_gib=round(-b.headroom_gib, 2))
    return cat.t("budget_cli.verdict.starts", kv_cache_gib=round(b.kv_cache_gib, 2), kv_cache_tokens=b.kv_cache_tokens,
                 concurrency=budget_concurrency(cat, b))


def memory_lines(cat: Catalog, side: Side) -> list[str]:
    b, inp = side.budget, side.inputs
    labels = [cat.t(f"budget_cli.row.{name}") for name, _ in _ROWS]
    width = max(cells(x) for x in labels) + 2
    lines = [f"{ljust(label, width)}{_gib(getattr(b, key)):>13}" for label, (_, key) in zip(labels, _ROWS, strict=True)]
    lines[-1] += "   " + cat.t("budget_cli.row.kv_detail", kv_bytes_per_token=b.kv_bytes_per_token,
                                 kv_cache_tokens=b.kv_cache_tokens, block_size=b.block_size)
    flag = ENGINE_FLAGS[inp.engine][2]
    lines.append(cat.t("budget_cli.row.budget", budget_gib=round(b.budget_gib, 2), total_gib=round(b.gpu_total_gib, 2),
                       flag=flag, fraction=round(current_fraction(inp), 3)))
    lines.append(cat.t("budget_cli.row.headroom", headroom_gib=round(b.headroom_gib, 2)))
    flags = ENGINE_FLAGS[inp.engine]
    # flag values as typed on a command line (no thousands separators)
    lines.append(cat.t("budget_cli.row.limits", length_flag=flags[0], max_model_len=_flag_value(b.max_model_len),
                       seqs_flag=flags[1], max_num_seqs=_flag_value(b.max_num_seqs),
                       max_num_batched_tokens=_flag_value(b.max_num_batched_tokens)))
    return lines


def bucket_lines(cat: Catalog, cap: BucketCapacity, engine: str) -> list[str]:
    seqs_flag = ENGINE_FLAGS[engine][1]
    lines = []
    for r in cap.rows:
        basis = cat.t(f"budget_cli.basis.{r.basis}", length_flag=ENGINE_FLAGS[engine][0])
        if r.capped:
            basis = cat.t("budget_cli.buckets.capped", basis=basis, length_flag=ENGINE_FLAGS[engine][0])
        text = cat.t("budget_cli.buckets.row", bucket=r.bucket, tokens=r.tokens, basis=basis, fit_in_kv=r.fit_in_kv,
                     concurrent=r.concurrent, seqs_flag=seqs_flag, seqs=cap.max_num_seqs)
        if r.share is not None:
            text += " · " + cat.t("budget_cli.buckets.share", share=pct(r.share))
        lines.append(text)
    lines.append(cat.t(f"budget_cli.long.{cap.status}", now=pct(cap.long_share_now), limit=pct(cap.long_share_limit),
                       seqs=cap.max_num_seqs, seqs_flag=seqs_flag, demand_tokens=cap.demand_tokens,
                       kv_cache_tokens=cap.kv_cache_tokens, demand_pct=pct(cap.demand_ratio),
                       **eviction_words(cat, engine)))  # the engine's own "preempted" / "retracted"
    return lines


def side_view(cat: Catalog, side: Side) -> dict[str, Any]:
    cap = side.buckets
    basis = "profile" if any(r.basis == "profile_p95" for r in cap.rows) else "limits"
    return {
        "verdict": verdict_line(cat, side.budget),
        "memory": memory_lines(cat, side),
        "buckets_title": cat.t(f"budget_cli.section.buckets_{basis}"),
        "buckets": bucket_lines(cat, cap, side.inputs.engine),
        "assumed": [assumed_line(cat, name, a) for name, a in side.budget.assumptions],
        "warnings": [warning_text(cat, w) for w in _warnings(side)],
        "conflicts": [("[" + cat.t("budget_cli.fatal") + "] " if c.fatal else "") + conflict_text(cat, c)
                      for c in side.conflicts],
    }


def what_if_lines(cat: Catalog, page: Page) -> list[str]:
    assert page.after is not None
    before, after = page.before.budget, page.after.budget
    rows: list[tuple[str, str, str]] = []
    for name, key in _ROWS:
        rows.append((cat.t(f"budget_cli.row.{name}"), _gib(getattr(before, key)), _gib(getattr(after, key))))
    rows.append((cat.t("budget_cli.what_if.kv_tokens"), _fmt(before.kv_cache_tokens), _fmt(after.kv_cache_tokens)))
    # requests at once: min(the engine's cap, what the cache holds), so lowering the cap shows its cost
    rows.append((cat.t("budget_cli.what_if.concurrency"),
                 *(concurrency_short(cat, b.engine, b.concurrency, b.concurrency_limit) for b in (before, after))))
    rows.append((cat.t("budget_cli.what_if.headroom"), _gib(before.headroom_gib), _gib(after.headroom_gib)))
    yes, no = cat.t("budget_cli.what_if.yes"), cat.t("budget_cli.what_if.no")
    rows.append((cat.t("budget_cli.what_if.starts"), yes if before.fits else no, yes if after.fits else no))
    label_w = max(cells(r[0]) for r in rows) + 2
    col_w = max(14, *(len(r[1]) + 3 for r in rows))
    head = ljust("", label_w) + ljust(cat.t("budget_cli.what_if.before"), col_w) + cat.t("budget_cli.what_if.after")
    lines = [head] + [ljust(a, label_w) + ljust(b, col_w) + c for a, b, c in rows]
    for side, label in ((before, "before"), (after, "after")):
        if side.failure:
            lines.append(cat.t(f"budget_cli.what_if.fails_{label}", failure=side.failure))
    return lines


def plan_lines(cat: Catalog, page: Page) -> dict[str, Any]:
    plan = page.plan
    assert plan is not None
    b = plan.budget
    total = page.profile.total if page.profile is not None else 0
    if plan.kv_pool_basis == "engine_anchored":
        # sized on the engine's reported pool plus the change: the cache and the requests it
        # holds are that pool's, one figure each (the budget's own pool is in the reasons)
        pool = int(plan.kv_cache_tokens or 0)
        b = replace(b, kv_cache_tokens=pool, kv_cache_gib=pool * b.kv_bytes_per_token / GIB,
                    max_concurrency=pool / b.max_model_len if b.max_model_len else 0.0)
    out = {
        "title": cat.t("budget_cli.plan.title", total=total, headroom_pct=round(plan.target_headroom * 100, 1)),
        "args": " ".join(plan.args()),
        "yaml": [f"- {a}" for a in plan.args()],
        "why": [reason_text(cat, plan, r) for r in plan.reasons],
        "predicted": cat.t("budget_cli.plan.predicted", kv_cache_gib=round(b.kv_cache_gib, 2),
                           kv_cache_tokens=b.kv_cache_tokens, headroom_gib=round(b.headroom_gib, 2),
                           concurrency=budget_concurrency(cat, b)),
        "problem": None,
    }
    if not plan.feasible:
        key = plan.problem if plan.problem in ("p95_exceeds_pool", "headroom_negative") else "engine_failure"
        out["problem"] = cat.t(f"budget_cli.plan.problem_{key}", failure=b.failure, p95=plan.p95_tokens,
                               kv_cache_tokens=b.kv_cache_tokens)
    return out


def page_text(page: Page, lang: str) -> str:
    cat = Catalog.load(lang)
    inp, b = page.before.inputs, page.before.budget
    title = cat.t("budget_cli.title", engine=b.engine, version=_version(inp, b), regime=b.regime,
                  model=page.model.name, gpu=page.gpu_label, total_gib=round(inp.gpu_total_gib, 2), tp=inp.tp,
                  pp=inp.pp)
    view = {
        "t": cat.t, "title": title,
        "notes": [*(cat.t(f"budget_cli.note.{k}", p) for k, p in page.notes),
                  cat.t("budget_cli.computed_unmatched" if "tgi_kv_optimistic" in b.warnings else "budget_cli.computed")],
        "before": side_view(cat, page.before),
        "after": side_view(cat, page.after) if page.after is not None else None,
        "changed": ", ".join(f"{k} {_flag_value(v['before'])} → {_flag_value(v['after'])}"
                             for k, v in (page.changed or {}).items()),
        "what_if": what_if_lines(cat, page) if page.after is not None else [],
        "plan": plan_lines(cat, page) if page.plan is not None else None,
    }
    return environment().get_template("budget.txt.j2").render(**view)
