"""Why a source could not be read is said in the reader's language.

The collectors say it as phrases under `read.` (`collectors.errors`): every one they build has
its wording in both catalogs, none is worded and never built, the Chinese is Chinese but for
the values, field paths and quoted words from outside, and the sentences a person meets (a
bundle file that is not YAML, a missing RBAC permission, a Prometheus that cannot be reached,
a refused file on the command line) read so in a Chinese triage, plan preview and CLI error.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from pathlib import Path

import pytest

from bot.main import main
from bot.render.i18n import Catalog
from bot.render.text import render_text
from bot.render.wording import issue_text, issues_json
from bot.service import triage as triage_service
from collectors.errors import ParseError, field, kind_of, noun, quoted, said
from collectors.kube.client import Call, issue_for
from collectors.parsers.kube_objects import parse_deployment
from runbooks.model.evidence import ReadIssue
from runbooks.model.phrases import Phrase
from tests.support import words
from tests.test_words_remediation import english

ROOT = Path(__file__).resolve().parent.parent
EN, ZH = Catalog.load("en"), Catalog.load("zh")
EXAMPLE = ROOT / "examples" / "runbook-incident"


def _built() -> set[str]:
    """The `read.` keys the code builds: `said("KEY"`, `noun("KEY"` (under `read.a.`), the
    nouns the field readers name (`expected("KEY"`, `_expected("KEY"`), `Phrase("read.KEY"`."""
    keys: set[str] = set()
    for path in [*(ROOT / "collectors").rglob("*.py"), *(ROOT / "bot").rglob("*.py"), *(ROOT / "runbooks").rglob("*.py")]:
        text = path.read_text(encoding="utf-8")
        keys |= {f"read.{k}" for k in re.findall(r'\bsaid\(\s*"([a-z0-9_.]+)"', text)}
        keys |= {f"read.a.{k}" for k in re.findall(r'\b_?(?:noun|expected)\(\s*"([a-z0-9_]+)"', text)}
        keys |= {k for k in re.findall(r'Phrase\(\s*"(read\.[a-z0-9_.]+)"', text) if not k.endswith(".")}
    # built from a variable: the field readers' kinds, and the three keys collectors.errors composes
    keys |= {f"read.a.{k}" for k in ("null_value", "boolean", "number", "string", "list", "mapping")}
    keys |= {"read.quoted", "read.field", "read.internal_error", "read.cannot_read", "read.where", "read.where_line"}
    return keys


def test_every_reason_the_collectors_build_is_worded_in_both_languages_and_none_is_left_over():
    built = _built()
    assert len(built) >= 90  # the scan really found them
    worded_en = {k.removeprefix("phrase.") for k in EN.messages if k.startswith("phrase.read.")}
    worded_zh = {k.removeprefix("phrase.") for k in ZH.messages if k.startswith("phrase.read.")}
    assert built - worded_en == set(), "built but not worded"
    assert worded_en - built == set(), "worded but never built"
    assert worded_zh == worded_en


def test_every_flag_spelling_reason_is_worded_in_both_languages_and_none_is_left_over():
    text = (ROOT / "runbooks" / "catalogs" / "engine_flags.py").read_text(encoding="utf-8")
    built = {f"flag.{k}" for k in re.findall(r'\b_said\(\s*"([a-z0-9_]+)"', text)}
    built |= set(re.findall(r'Phrase\(\s*"(flag\.[a-z0-9_]+)"', text))
    built |= {"flag.unknown_only_accepted", "flag.unknown_only_read"}  # chosen by a variable
    assert len(built) >= 10
    for cat in (EN, ZH):
        assert {k.removeprefix("phrase.") for k in cat.messages if k.startswith("phrase.flag.")} == built
    leaks = {k: english(re.sub(r"\{[^}]*\}", " ", t)) for k, t in ZH.messages.items() if k.startswith("phrase.flag.")}
    assert {k: v for k, v in leaks.items() if v} == {}


@pytest.mark.parametrize(("text", "en", "zh"), [
    ("triage llm/x --dry-run", "unrecognized arguments: --dry-run", "无法识别的参数：--dry-run"),
    ("fleet llm --all", "give NAMESPACE or --all, not both", "请给出命名空间或 --all，不要同时给出"),
    ("budget --tp x", "argument --tp: not a whole number", "“argument --tp: not a whole number"),
])
def test_what_the_slack_grammar_refuses_is_said_in_both_languages(text, en, zh):
    from bot.grammar.slack import CommandError, parse_command

    with pytest.raises(CommandError) as caught:
        parse_command(text)
    detail = caught.value.params["detail"]
    assert EN.phrase(detail).startswith(en) and ZH.phrase(detail).startswith(zh)
    assert english(ZH.t("slack.error.bad_flags", detail=detail)) == []
    keys = {k.removeprefix("phrase.") for k in EN.messages if k.startswith("phrase.grammar.")}
    assert keys == {k.removeprefix("phrase.") for k in ZH.messages if k.startswith("phrase.grammar.")}
    assert keys == set(re.findall(r'Phrase\("(grammar\.[a-z_]+)"', (ROOT / "bot/grammar/slack.py").read_text(encoding="utf-8")))


def test_each_chinese_reason_is_chinese_but_for_its_values():
    leaks = {k: english(re.sub(r"\{[^}]*\}", " ", t)) for k, t in ZH.messages.items() if k.startswith("phrase.read.")}
    assert {k: v for k, v in leaks.items() if v} == {}


def test_the_chinese_check_sees_an_english_reason():
    assert english("deployment.yaml 第 3 行：expected a list") == ["expected", "a", "list"]


@pytest.mark.parametrize(("reason", "en", "zh"), [
    (ParseError("deployment.yaml", field("spec.replicas", said("expected_got", what=noun("integer"),
                                                                 got=quoted("'many'"))), 4).reason,
     "deployment.yaml line 4: spec.replicas: expected an integer, got 'many'",
     "deployment.yaml 第 4 行：`spec.replicas`：应为整数，实际为“'many'”"),
    (field("kind", said("missing")), "kind: missing", "`kind`：缺失"),
    (said("expected_got", what=noun("mapping"), got=kind_of([1])), "expected a mapping, got a list", "应为映射，实际为列表"),
    (said("long_lines_left_out", count=1, kib=64), "1 line over 64 KiB left out", "1 行超过 64 KiB，未读取"),
    (said("long_lines_left_out", count=3, kib=64), "3 lines over 64 KiB left out", "3 行超过 64 KiB，未读取"),
    (said("missing_rbac", permission=Call("get", "pods", "llm", "p", "log").rbac),
     "missing RBAC: get pods/log in namespace llm", "缺少 RBAC 权限：命名空间 llm 中的 `get pods/log`"),
    (said("missing_rbac", permission=Call("list", "nodes").rbac),
     "missing RBAC: list nodes cluster-wide", "缺少 RBAC 权限：集群范围的 `list nodes`"),
    (said("cannot_reach", server="https://10.0.0.1:6443", reason=said("transport.refused")),
     "cannot reach https://10.0.0.1:6443: connection refused", "无法连接 https://10.0.0.1:6443：连接被拒绝"),
    (said("not_yaml", detail=quoted("mapping values are not allowed here")),
     "not YAML: mapping values are not allowed here", "不是有效的 YAML：“mapping values are not allowed here”"),
    (said("no_answer_within_call", seconds="2.5", permission=Call("list", "events", "llm").rbac),
     "no answer within 2.5 s: list events in namespace llm", "2.5 秒内没有回答：命名空间 llm 中的 `list events`"),
])
def test_reasons_read_in_english_as_before_and_in_chinese(reason: Phrase, en: str, zh: str):
    assert (EN.phrase(reason), ZH.phrase(reason)) == (en, zh)
    assert english(ZH.phrase(reason)) == []


def test_a_bundle_file_that_is_not_yaml_is_said_in_chinese_in_the_chinese_triage(tmp_path):
    bundle = tmp_path / "incident"
    shutil.copytree(EXAMPLE, bundle)
    (bundle / "deployment.yaml").write_text("kind: Deployment\nmetadata: {name: x\nspec: [\n", encoding="utf-8")
    report = triage_service.triage_bundle(str(bundle)).report
    issue = next(i for i in report.read_issues if i.source == "deployment.yaml")
    assert isinstance(issue.message, Phrase) and issue.message.key == "read.not_yaml"
    text = render_text(report, "zh")
    line = next(ln for ln in text.splitlines() if ln.lstrip("- ").startswith("deployment.yaml"))
    assert re.fullmatch(r"\s*- deployment\.yaml 第 \d+ 行：不是有效的 YAML：“[^”]+”", line), line
    assert "deployment.yaml line" not in text and "not YAML" not in text
    assert english(line) == []
    en_line = next(ln for ln in render_text(report, "en").splitlines() if "deployment.yaml line" in ln)
    assert "not YAML: " in en_line


def test_a_preview_that_stops_on_a_template_it_cannot_read_says_where_in_words():
    from bot.service.plan_preview import _why
    from runbooks.model.templates import TemplateShapeError

    why = _why(TemplateShapeError("spec.template.spec.containers", Phrase("read.missing")))
    assert (EN.phrase(why), ZH.phrase(why)) == ("spec.template.spec.containers: missing", "`spec.template.spec.containers`：缺失")
    assert _why(ValueError("bad")) == "bad"


def test_the_json_report_gives_each_reason_in_english_and_as_its_phrase(tmp_path):
    bundle = tmp_path / "incident"
    shutil.copytree(EXAMPLE, bundle)
    (bundle / "nvidia-smi.txt").write_text("hello\n", encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        main(["triage", "--bundle", str(bundle), "--json", "--lang", "zh"])
    doc = json.loads(out.getvalue())
    issue = next(i for i in doc["read_issues"] if i["source"] == "nvidia-smi.txt")
    assert issue["message"].startswith("not recognised as nvidia-smi output")
    assert issue["reason"] == {"phrase": "read.not_nvidia_smi", "params": {}}
    assert ZH.phrase(issue["reason"]).startswith("无法识别为 nvidia-smi 输出")


def test_a_reason_stored_before_phrases_reads_as_the_text_it_was():
    old = ReadIssue("metrics.txt", "bad sample value 'x'", 12)
    assert issue_text(ZH, old) == "metrics.txt 第 12 行：“bad sample value 'x'”"
    assert issues_json([old])[0] == {"source": "metrics.txt", "line": 12, "kind": "unreadable",
                                     "message": "bad sample value 'x'", "reason": None}


def test_a_forbidden_log_read_is_worded_with_the_permission_in_chinese():
    from kubernetes.client.exceptions import ApiException

    error = ApiException(status=403, reason="Forbidden")
    issue = issue_for(error, Call("get", "pods", "llm", "vllm-0", "log"), "https://10.0.0.1:6443", 5.0)
    assert issue.kind == "forbidden"
    assert issue_text(ZH, issue) == "kube:pods/log/llm/vllm-0：缺少 RBAC 权限：命名空间 llm 中的 `get pods/log`"
    assert words.message(issue) == "missing RBAC: get pods/log in namespace llm"


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_deployment_file_the_budget_cannot_read_is_a_clear_error_in_the_language_asked(tmp_path, lang):
    bad = tmp_path / "deployment.yaml"
    bad.write_text("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: many}\n", encoding="utf-8")
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        rc = main(["budget", "--from-deployment", str(bad), "--gpu", "H100-80GB", "--lang", lang])
    assert rc == 2
    text = err.getvalue()
    assert "Traceback" not in text and "read.field" not in text
    if lang == "zh":
        assert "`spec.replicas`：应为整数，实际为“'many'”" in text
        assert english(text.replace(str(bad), " ")) == []
    else:
        assert "spec.replicas: expected an integer, got 'many'" in text


def test_parse_deployment_names_the_field_whatever_the_language():
    with words.raises(ParseError, match=r"spec\.replicas: expected an integer"):
        parse_deployment("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: many}\n")
    with pytest.raises(ParseError) as caught:
        parse_deployment("kind: Deployment\nmetadata: {name: d}\nspec: {replicas: many}\n")
    assert words.zh(caught.value) == "deployment.yaml：`spec.replicas`：应为整数，实际为“'many'”"


def test_the_cli_errors_of_a_live_read_name_the_permission_and_the_workload_in_chinese():
    from bot.render.errors import error_line
    from runbooks.model.errors import NotPermitted, TargetNotFound

    assert error_line(ZH, NotPermitted("get", "pods/log", "llm")).startswith(
        "gpumem：没有命名空间 llm 中的 `get pods/log` 的权限。")
    assert error_line(EN, NotPermitted("list", "nodes")).startswith("gpumem: not permitted to list nodes cluster-wide.")
    line = error_line(ZH, TargetNotFound("Deployment", "llm", "nope", "prod"))
    assert line.startswith("gpumem：在上下文 prod 中找不到 Deployment llm/nope。")
    assert english(line.replace("--context", " ")) == []
    assert error_line(EN, TargetNotFound("Deployment", "llm", "nope")).startswith("gpumem: Deployment llm/nope not found.")
