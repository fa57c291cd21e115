"""Turn report objects into sentences through a catalog. Shared by every renderer."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from bot.render.i18n import Catalog, shift_label
from runbooks.alerts.engines import SERIES
from runbooks.catalogs.engine_defaults import LENGTH_REFUSAL_STATUS
from runbooks.catalogs.engine_flags import FLAGS, ROLES, role_flag
from runbooks.catalogs.engine_metrics import eviction_term
from runbooks.model.changes import from_stored
from runbooks.model.evidence import ReadIssue
from runbooks.model.phrases import Phrase, phrase_of
from runbooks.model.report import Action, Fact
from runbooks.model.units import pct as pct  # the one pct; renderers import it from here too

#: the roles a message names by the deployed engine's own flag: `--{length_flag}` is vLLM's
#: --max-model-len, SGLang's --context-length, TGI's --max-total-tokens
ENGINE_WORDS = {"length_flag": "context_length", "seqs_flag": "concurrency", "fraction_flag": "memory_fraction",
                "tp_flag": "tensor_parallel"}


def engine_words(engine: str | None) -> dict[str, str]:
    """The flag names of `engine` (no dashes) by the placeholder messages use; vLLM's where the
    engine is not known.

    >>> engine_words("sglang")["length_flag"], engine_words("tgi")["seqs_flag"], engine_words(None)["fraction_flag"]
    ('context-length', 'max-batch-size', 'gpu-memory-utilization')
    >>> engine_words("tgi")["queue_metric"]
    'tgi_queue_size'

    """
    name = (engine or "vllm").lower()
    name = name if name in ROLES else "vllm"
    words = {k: role_flag(name, role) or role_flag("vllm", role) or "" for k, role in ENGINE_WORDS.items()}
    # the queue series, from the metric table the alert rules use
    words["queue_metric"] = SERIES[name].queue
    # the HTTP status a request over the length limit gets (TGI's 422, the others' 400)
    words["length_status"] = str(LENGTH_REFUSAL_STATUS[name])
    return words


def length_status(flag: str | None) -> str:
    """The HTTP status a request over the length limit gets from the engine `flag` belongs to
    (TGI's 422; vLLM's words where the flag names no one engine).

    >>> length_status("max-total-tokens"), length_status("context-length")
    ('422', '400')
    """
    return engine_words(flag_engine(flag))["length_status"]


def flag_engine(flag: str | None) -> str | None:
    """The one engine whose flag tables spell `flag` (None: several, or none).

    >>> flag_engine("max-total-tokens"), flag_engine("max-model-len"), flag_engine("max-num-seqs"), flag_engine(None)
    ('tgi', 'vllm', 'vllm', None)
    """
    name = (flag or "").lstrip("-")
    owners = [e for e in ROLES if any(s.flag == name for entry in FLAGS[e].values() for s in entry.spellings)]
    return owners[0] if len(owners) == 1 else None


#: the forms of the engine's own word for putting a running request back for lack of KV cache
#: (`runbooks.catalogs.engine_metrics.EVICTION`: vLLM's preemption, SGLang's retraction), each
#: worded per language under `eviction.<term>.<form>`: `{evicted}` "preempted", `{eviction}`,
#: `{evictions}` (counted as `{count|$eviction|$evictions}`), `{no_evictions}` the clause a
#: rule-out adds (empty for an engine that never does it)
EVICTION_FORMS = ("evicted", "eviction", "evictions", "no_evictions")


def eviction_words(cat: Catalog, engine: str | None) -> dict[str, str]:
    """The forms of `engine`'s word for it in `cat`'s language.

    >>> eviction_words(Catalog.load("en"), "sglang")["evicted"]
    'retracted'
    """
    term = eviction_term(engine)
    return {form: cat.t(f"eviction.{term}.{form}") for form in EVICTION_FORMS}


def change_words(cat: Catalog) -> Callable[..., str]:
    """The words of a change's notation in `cat`'s language, for `Change.describe(words)`.

    >>> from runbooks.model.changes import SetArg
    >>> SetArg(None, "max-num-seqs", None, 64).describe(change_words(Catalog.load("zh")))
    '--max-num-seqs （默认） -> 64'
    """
    return lambda key, **values: cat.t(f"change_notation.{key}", **values)


def change_text(cat: Catalog, change: Any) -> str:
    """`change`'s diff in `cat`'s language ("--max-num-seqs (default) -> 64"); a stored change
    (`to_stored`'s dict) is read first."""
    if isinstance(change, dict):
        change = from_stored(change)
    return change.describe(change_words(cat))


def restored_text(cat: Catalog, change: Any) -> str | None:
    """`change` undone, in `cat`'s language (None: a change gpumem does not write back)."""
    return change.restored(change_words(cat))


def eviction_count(cat: Catalog, count: float | None, term: str | None) -> str:
    """A measured count of requests put back for lack of KV cache, in the engine word its series
    carried (`collectors.prometheus.promql.eviction_reading`; None with a count: engines of both).

    >>> en = Catalog.load("en")
    >>> eviction_count(en, 1, "retraction"), eviction_count(en, 0, "none"), eviction_count(en, None, None)
    ('1 retraction', 'no preemption (the engine queues requests instead)', 'preemptions (retractions on SGLang) not measured')
    """
    if count is None:
        return cat.t("eviction_count.unknown")
    key = term if term in ("preemption", "retraction", "none") else "mixed"
    return cat.t(f"eviction_count.{key}", count=int(round(count)))


def engine_catalog(lang: str, engine: str | None) -> Catalog:
    """The catalog of `lang` that words every message with `engine`'s own flag names and its
    own word for evicting a running request."""
    cat = Catalog.load(lang)
    return cat.with_values(**engine_words(engine), **eviction_words(cat, engine))

#: fact parameters whose values are themselves catalog keys
_NESTED = {"signal": "signal", "warning": "warning", "what": "what", "kind": "probe_kind", "error_kind": "error_kind",
           "admitted": "demand_admitted", "pool": "pool_basis",
           "phase": "alloc_phase"}
#: facts whose parameter is worded from another part of the catalog (a budget warning is
#: worded as `gpumem budget` words it)
_NESTED_BY_FACT = {"budget_warning": {"warning": "budget_cli.warning"}}
#: the most of a quoted log line a message shows (the full line is in --json)
QUOTE_CHARS = 140
#: what a log line starts with before its message: a logfmt time/level, a vLLM "INFO 03-09
#: 20:14:01 [engine.py:123]", a worker's "(VllmWorkerProcess pid=221)", a bracketed tag
_LOG_PREFIX = re.compile(
    r"^(?:\s*(?:\(\w+(?: pid=\d+)?\)|\[[^\]]{0,60}\]|(?:INFO|WARNING|WARN|ERROR|DEBUG|CRITICAL|FATAL)\b:?"
    r"|\d{2,4}[-/]\d{2}(?:[-/]\d{2})?(?:[T ][\d:.,]+Z?)?|\d{2}:\d{2}:\d{2}(?:[.,]\d+)?|[\w/.-]+\.py:\d+\]?"
    r"|(?:time|ts|level)=\S+)\s*)+")
#: where the part worth quoting starts: the error class ("torch.OutOfMemoryError: ..."), or
#: "... error: ..." in a line with no class
_ERROR_CLASS = re.compile(r"(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception)\b")
_ERROR_WORD = re.compile(r"\b(?:\w+ )?error: ", re.IGNORECASE)
_LOGFMT_MSG = re.compile(r'\bmsg="((?:[^"\\]|\\.)*)"')


def quote_text(line: str, limit: int = QUOTE_CHARS) -> str:
    """A log line cut to its key part for a message: from its error class (or its logfmt msg),
    without the timestamp and level in front, at most `limit` characters; "…" where cut.

    >>> quote_text('time=2026-03-09T2014Z level=warn msg="request rejected due to insufficient KV cache blocks"')
    '…request rejected due to insufficient KV cache blocks'
    >>> quote_text("ERROR 04-27 11:08:32 [core.py:340] ValueError: No available memory for the cache blocks.")
    '…ValueError: No available memory for the cache blocks.'
    >>> quote_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0 has a total "
    ...            "capacity of 39.38 GiB of which 412.06 MiB is free. Process 1 has 38.9 GiB memory in use.", 80)
    'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.17 GiB. GPU 0…'
    >>> quote_text("Liveness probe failed: connection refused")
    'Liveness probe failed: connection refused'
    """
    text, front = line.strip(), False
    msg = _LOGFMT_MSG.search(text)
    if msg:
        text, front = msg.group(1), True
    else:
        anchors = [m.start() for m in (_ERROR_CLASS.search(text), _ERROR_WORD.search(text)) if m]
        start = min(anchors) if anchors else len(_LOG_PREFIX.match(text).group(0) if _LOG_PREFIX.match(text) else "")
        if 0 < start < len(text):
            text, front = text[start:].lstrip(), True
    if len(text) > limit:
        cut = text[: limit - 1]
        space = cut.rfind(" ")
        text = (cut[:space] if space > limit // 2 else cut).rstrip(" ,;:") + "…"
    return ("…" if front else "") + text


def fact_text(cat: Catalog, f: Fact) -> str:
    params: dict[str, Any] = dict(f.params)
    nested = {**_NESTED, **_NESTED_BY_FACT.get(f.key, {})}
    for name, prefix in nested.items():
        value = params.get(name)
        if not isinstance(value, str):
            continue
        # keys may carry one argument after a colon: "unparsed_value:max-model-len"
        key, _, arg = value.partition(":")
        if cat.has(f"{prefix}.{key}"):
            params[name] = cat.t(f"{prefix}.{key}", arg=arg)
    for name in ("before_label", "after_label"):
        params[name] = shift_label(cat, params.get(name))
    example = params.get("example")
    if isinstance(example, str):
        params["example"] = quote_text(example)
    text = cat.t(f"fact.{f.key}", params)
    if f.key.startswith("missing_") and params.get("reason"):
        text = cat.t("fact.missing_reason", what=text, source=f.source, reason=params["reason"])
    return text


def action_text(cat: Catalog, a: Action) -> dict[str, str]:
    base = f"action.{a.id}"
    # an action whose numbers have another basis words its title for it ("template": no p99)
    variant = a.params.get("variant")
    title_key = f"{base}.title_{variant}" if isinstance(variant, str) and cat.has(f"{base}.title_{variant}") \
        else f"{base}.title"
    title = cat.t(title_key, a.params)
    follows = a.params.get("input_follows")
    if isinstance(follows, dict):
        # TGI's input limit brought under a lowered total (runbooks.triage.failure_actions.tgi_limits_held)
        title += cat.t("action_input_follows", follows)
    withheld = a.params.get("withheld")
    if isinstance(withheld, dict) and withheld:
        # flags the deployed engine version rejects, left out of the action (runbooks.triage.spelling)
        title += cat.t("action_withheld", reasons=cat.phrases(list(withheld.values())))
    rollback = cat.t(f"{base}.rollback", a.params)
    if isinstance(follows, dict):
        rollback += cat.t("action_input_follows_rollback", follows)
    return {
        "title": title,
        "risk": cat.t(f"{base}.risk", a.params),
        "rollback": rollback,
        "tier": cat.t("section.escalate" if a.tier == "escalate" else "section.now"),
    }


def issue_text(cat: Catalog, issue: ReadIssue) -> str:
    key = "issue.line" if issue.line is not None else "issue.noline"
    message = issue.message
    if isinstance(message, str):  # stored before reasons were phrases: gpumem's English, quoted
        message = Phrase("read.quoted", {"text": message})
    return cat.t(key, source=issue.source, line=issue.line, message=message)


def reason_json(message: Any) -> dict[str, Any]:
    """A read's reason in a JSON output: `message` in English words (what scripts grep) and
    `reason`, the phrase itself (key and values) where it is one, so a reader in any language
    can word it; a reason from before phrases is its text, and `reason` is null."""
    found = phrase_of(message)
    if isinstance(found, Phrase):
        return {"message": Catalog.load("en").phrase(found), "reason": found.to_json()}
    return {"message": "" if found is None else str(found), "reason": None}


def issues_json(issues: Any) -> list[dict[str, Any]]:
    """ReadIssues as JSON: source, line, kind, and the reason (`reason_json`)."""
    return [{"source": i.source, "line": i.line, "kind": i.kind, **reason_json(i.message)} for i in issues]


def cause_title(cat: Catalog, cause_id: str, kubernetes: bool = True, prefix: str = "verdict") -> str:
    """A verdict's title; the platform cause is worded as Kubernetes only when the evidence
    shows Kubernetes (a docker host or a workstation gets the platform wording)."""
    if cause_id == "platform_amplifier" and not kubernetes:
        return cat.t(f"{prefix}.platform_amplifier_host")
    return cat.t(f"{prefix}.{cause_id}")


def counted(cat: Catalog, key: str, count: int, params: dict[str, Any] | None = None, **more: Any) -> str:
    """`key` worded for `count`: `key_one` where the catalog has it and count is 1."""
    one = f"{key}_one"
    return cat.t(one if count == 1 and cat.has(one) else key, params, count=count, **more)


def _concurrency_flag(engine: str | None) -> str:
    """The flag that caps how many requests `engine` runs at once (vLLM's where not known)."""
    return role_flag((engine or "vllm").lower(), "concurrency") or role_flag("vllm", "concurrency") or ""


def concurrency_limit_text(cat: Catalog, engine: str | None, limit: str, kv: int, seqs: int | None,
                           length: int | None) -> str:
    """Why a pod runs no more requests at once: the engine's cap (its own flag) or the KV cache."""
    flag = _concurrency_flag(engine)
    key = limit if limit == "max_num_seqs" or seqs else "kv_cache_no_cap"
    return cat.t(f"concurrency.limit.{key}", flag=flag, seqs=seqs, kv=kv, length=length)


def concurrency_text(cat: Catalog, engine: str | None, count: int, limit: str, kv: int, seqs: int | None,
                     length: int | None) -> str:
    """"128 requests at once (capped by --max-num-seqs 128; the KV cache holds 136 requests of 8192 tokens)".

    >>> cat = Catalog.load("en")
    >>> concurrency_text(cat, "sglang", 1, "kv_cache", 1, 4096, 32768)
    '1 request at once (what the KV cache holds at 32,768 tokens; --max-running-requests 4096 allows more)'
    """
    return counted(cat, "concurrency.at_once", count,
                   limit=concurrency_limit_text(cat, engine, limit, kv, seqs, length))


def concurrency_short(cat: Catalog, engine: str | None, count: int, limit: str) -> str:
    """"128 (--max-num-seqs)": a table cell; "128（KV 缓存）" in Chinese.

    >>> concurrency_short(Catalog.load("zh"), "sglang", 64, "kv_cache")
    '64（KV 缓存）'
    """
    flag = _concurrency_flag(engine)
    return cat.t("concurrency.short.cell", count=count, limit=cat.t(f"concurrency.short.{limit}", flag=flag))


def budget_concurrency(cat: Catalog, b: Any) -> str:
    """`concurrency_text` of a `Budget` or a plan's `BudgetFigures` (engine given for figures)."""
    return concurrency_text(cat, getattr(b, "engine", None), b.concurrency, b.concurrency_limit, b.kv_requests,
                            b.max_num_seqs, b.max_model_len)
