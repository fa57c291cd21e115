"""Every output says what it knows in words, and the Chinese outputs are Chinese.

The outputs: the terminal triage of every example and every real case, the Slack diagnosis and
thread of every example, every Slack golden file (plans, previews, pool splits, status
messages, the handover), the terminal budget and profile of the examples and the dashboards of
each engine; in English and in Chinese.

- No `?`, `n/a`, `None` or `<name>` standing for a value, and no raw cause id or plan state
  (`kv_cache_pressure`, `rolled_back`) in prose, outside code spans and quoted lines.
- A Chinese output is Chinese except engine flags, metric names, commands, quoted log lines,
  names the evidence gave (models, GPUs, workloads, files) and ids in code spans
  (`ZH_ALLOWED` lists the rest, each with its reason).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from functools import cache
from pathlib import Path

import pytest

from bot.main import main
from bot.render import slack_triage as R
from bot.render.text import render_text
from bot.service import triage as triage_service
from runbooks.model.report import VERDICT_IDS
from runbooks.remediation.plan import STATES

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted(p for p in (ROOT / "examples").iterdir() if (p / "expected.json").is_file())
REAL = sorted(p for p in (ROOT / "tests" / "data" / "real").iterdir() if p.is_dir())
GOLDEN = sorted((ROOT / "tests" / "golden" / "slack").glob("*.json"))
#: plan states and outcomes that are ids, not words (a state spelled as a word, "applied", reads as one)
PLAN_STATES = (*(s for s in STATES if "_" in s), "rollback_failed", "dry_run_failed", "partly_applied",
               "symptoms_remain")

#: what is not prose: code spans, quoted text (log lines, the engine's or a reader's words),
#: Slack's own tokens (mentions, dates, links, emoji, entities)
_NOT_PROSE = re.compile(r"`[^`\n]*`|\"[^\n]*\"|“[^”\n]*”|<[@#!][^>\n]*>|<https?://[^>\n]*>|:[a-z0-9_+-]+:|&\w+;")
#: a value left unsaid: a lone "?" (not a question's), n/a, None, a <placeholder>
_UNSAID = re.compile(r"(?:^|(?<=[\s=(:·,/]))\?(?=$|[\s),;·.])|\bn/a\b|\bNone\b|<[a-z_]+>")
_RAW_IDS = re.compile(r"\b(?:" + "|".join(sorted(set(VERDICT_IDS) | set(PLAN_STATES), key=len, reverse=True)) + r")\b")


def _slack_texts(doc: object) -> list[str]:
    """The words of a Slack message (its "text" values), not the Block Kit around them."""
    out: list[str] = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            if key == "text" and isinstance(value, str):
                out.append(value)
            else:
                out += _slack_texts(value)
    elif isinstance(doc, list):
        for value in doc:
            out += _slack_texts(value)
    return out


@cache
def _report(bundle: Path):
    return triage_service.triage_bundle(str(bundle)).report


def _cli(*argv: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(list(argv))
    return out.getvalue()


def _outputs(lang: str) -> list[tuple[str, str]]:
    """(where, text) for every output in `lang`."""
    out: list[tuple[str, str]] = []
    for bundle in EXAMPLES + REAL:
        out.append((f"triage {bundle.name}", render_text(_report(bundle), lang)))
    for bundle in EXAMPLES:
        report = _report(bundle)
        msgs = [R.diagnosis_message(report, lang, user="U0ONCALL"), *R.thread_detail(report, lang).messages]
        out.append((f"slack {bundle.name}", "\n".join(t for m in msgs for t in _slack_texts(m))))
        if (bundle / "access.log").is_file():
            out.append((f"profile {bundle.name}", _cli("profile", "--access-log", str(bundle / "access.log"),
                                                       "--lang", lang)))
        if (bundle / "deployment.yaml").is_file():
            out.append((f"budget {bundle.name}", _cli("budget", "--from-deployment", str(bundle / "deployment.yaml"),
                                                      "--lang", lang)))
    for engine in ("vllm", "sglang", "tgi"):
        out.append((f"dashboards {engine}", _cli("dashboards", "--engine", engine, "--lang", lang)))
    for path in GOLDEN:
        if path.name.endswith(f".{lang}.json"):
            out.append((f"golden {path.name}", "\n".join(_slack_texts(json.loads(path.read_text(encoding="utf-8"))))))
    return out


@cache
def _all(lang: str) -> tuple[tuple[str, str], ...]:
    return tuple(_outputs(lang))


def _prose(line: str) -> str:
    return _NOT_PROSE.sub(" ", line)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_outputs_cover_every_surface(lang: str):
    kinds = {where.split()[0] for where, _ in _all(lang)}
    assert kinds == {"triage", "slack", "profile", "budget", "dashboards", "golden"}
    assert len(_all(lang)) >= len(EXAMPLES) + len(REAL) + len(GOLDEN) // 2


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_no_output_leaves_a_value_unsaid_or_an_id_raw(lang: str):
    bad = []
    for where, text in _all(lang):
        for line in text.splitlines():
            prose = _prose(line)
            if _UNSAID.search(prose) or _RAW_IDS.search(prose):
                bad.append((where, line.strip()[:200]))
    assert bad == []


def test_the_check_sees_a_lone_question_mark_n_a_none_a_placeholder_and_a_raw_id():
    for line in ("gpumem triage · ?", "queue n/a", "model None", "kubectl rollout undo deployment/<name>",
                 "kv_cache_pressure (highest)", "plan p-1 rolled_back"):
        assert _UNSAID.search(_prose(line)) or _RAW_IDS.search(_prose(line)), line
    for line in ("Approve `--max-model-len 8192 -> 4096` on llm/vllm-server?", 'e.g. "best_of: None"',
                 "`kv_cache_pressure`", "needs 1 of: <@U1>"):
        assert not (_UNSAID.search(_prose(line)) or _RAW_IDS.search(_prose(line))), line


#: ASCII a Chinese output may carry, beyond flags, metric names, commands, quoted lines, code
#: spans and names with a digit, a slash, a dot, a dash or an underscore in them
ZH_ALLOWED = {
    # units and the terms the Chinese catalog keeps as they are
    "GiB", "MiB", "KiB", "GB", "MB", "token", "tokens", "KV", "cache", "UTC", "HTTP", "GET", "SLA",
    # hardware, drivers, the engines and the tools (names)
    "GPU", "GPUs", "CPU", "CUDA", "NVIDIA", "NVML", "DCGM", "MIG", "NCCL", "OOM", "TTFT", "PyTorch", "torch", "graph",
    "vLLM", "vllm", "SGLang", "sglang", "TGI", "tgi", "KServe", "Ray", "HAMi", "Prometheus", "Grafana", "Slack",
    "Argo", "CD", "Flux", "Helm", "GitOps", "Kubernetes", "Docker", "gpumem",
    # the runbook's terms: tensor/pipeline/data parallel, the request buckets, percentiles
    "TP", "PP", "DP", "S", "M", "L", "XL", "LoRA", "AWQ", "GPTQ", "FP", "BF",
    # Kubernetes kinds and fields, as kubectl and the manifests spell them
    "Pod", "pod", "pods", "Deployment", "StatefulSet", "LeaderWorkerSet", "InferenceService", "Service", "HPA", "PodDisruptionBudget", "ServiceMonitor",
    "NetworkPolicy", "ConfigMap", "Secret", "ReplicaSet", "Node", "RBAC", "emptyDir", "medium", "Memory",
    "sizeLimit", "maxSurge", "maxUnavailable", "startupProbe", "livenessProbe", "readinessProbe", "resourceVersion",
    "generation", "selector", "Pending", "OOMKilled", "Error", "Recreate", "RollingUpdate",
    # values as the engine and the manifests write them
    "True", "False", "true", "false", "auto", "default", "VAR", "http", "kubelet",
    # an engine setting named as the engine's flag is (`--dtype`: the budget's "dtype = bfloat16")
    "dtype",
    # the verb a profile came from ("triage llm/vllm-server ..."), a command's name
    "triage",
    # the stand-in cluster and namespace the Slack goldens use (names)
    "prod", "llm",
    # the file names of a bundle (without their suffix)
    "nvidia", "smi", "metrics", "deployment", "events", "logs", "access", "log", "hpa", "txt", "yaml", "json", "JSON", "YAML",
    "config",
    # protocols and formats, as Chinese technical writing keeps them
    "CSV", "URL", "API", "IP", "TLS", "FIFO", "HorizontalPodAutoscaler",
}
#: commands shown to run, as typed
_COMMAND = re.compile(r"(?:kubectl|curl|docker|nvidia-smi|gpumem)\b[^；;，。（）]*")
#: names: anything with a digit, a slash, a dot, a dash, an underscore, a colon or "=" in it; flags
_NAME = re.compile(r"--[\w.-]+|\S*[\d/._:=-]\S*")


#: lines whose words are not gpumem's to translate: a person's note in the handover (left as written)
_NOT_OURS = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d <@\w+> ")


@pytest.mark.parametrize("bundle_or_file", ["triage", "slack", "profile", "budget", "dashboards", "golden"])
def test_every_chinese_output_is_chinese_but_for_flags_metrics_commands_names_and_quotes(bundle_or_file: str):
    leaks: dict[str, tuple[str, str]] = {}
    for where, text in _all("zh"):
        if where.split()[0] != bundle_or_file:
            continue
        for line in text.splitlines():
            if _NOT_OURS.search(line.strip()):
                continue
            prose = _NAME.sub(" ", _COMMAND.sub(" ", _prose(line)))
            for word in re.findall(r"[A-Za-z][A-Za-z']*", prose):
                if word not in ZH_ALLOWED:
                    leaks.setdefault(word, (where, line.strip()[:160]))
    assert leaks == {}


def test_the_chinese_check_sees_an_english_sentence():
    prose = _NAME.sub(" ", _COMMAND.sub(" ", _prose("失败：1 restart in new pods")))
    assert [w for w in re.findall(r"[A-Za-z][A-Za-z']*", prose) if w not in ZH_ALLOWED] == ["restart", "in", "new"]


def test_a_chinese_list_of_people_or_items_uses_the_chinese_separator():
    from bot.render.i18n import Catalog

    assert Catalog.load("zh").join(["<@U1>", "<@U2>"]) == "<@U1>、<@U2>"
    assert Catalog.load("en").join(["<@U1>", "<@U2>"]) == "<@U1>, <@U2>"
    mentions = re.compile(r">, <[@!]")
    assert [w for w, text in _all("zh") if mentions.search(text)] == []
    assert any(mentions.search(text) for _, text in _all("en"))  # the check would see one
    assert any(re.search(r">、<[@!]", text) for _, text in _all("zh"))
