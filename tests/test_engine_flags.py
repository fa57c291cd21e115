"""The flag table (runbooks/catalogs/engine_flags.py): no action or plan writes a flag, or a
spelling, the deployed engine version rejects; refused before a plan exists, with no write."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path

import pytest

from bot.service.container_reader import CONTAINER_READER
from runbooks.catalogs.engine_flags import COVERED, FLAGS, ROLES, choose_spelling, flag_entry, role_flag
from runbooks.catalogs.engine_flags_read import READ_FLAGS, all_entries, any_entry
from runbooks.model.errors import UsageError
from runbooks.remediation.edits.launch_edit import edit_flags
from runbooks.remediation.solver import ENGINE_FLAGS, SAFE_ROLES, SafePlan
from tests.support import words
from tests.support.kube_fixtures import run_cli, running_scenario

ROOT = Path(__file__).resolve().parent.parent
#: every TGI release tag read (launcher/src/main.rs) and the vLLM / SGLang releases read
TGI_TAGS = [
    "0.9.0", "0.9.1", "0.9.2", "0.9.3", "0.9.4", "1.0.0", "1.0.1", "1.0.2", "1.0.3", "1.1.0", "1.1.1", "1.2.0",
    "1.3.0", "1.3.1", "1.3.2", "1.3.3", "1.3.4", "1.4.0", "1.4.1", "1.4.2", "1.4.3", "1.4.4", "1.4.5", "2.0.0",
    "2.0.1", "2.0.2", "2.0.3", "2.0.4", "2.1.0", "2.1.1", "2.2.0", "2.3.0", "2.3.1", "2.4.0", "2.4.1", "3.0.0",
    "3.0.1", "3.0.2", "3.1.0", "3.1.1", "3.2.0", "3.2.1", "3.2.2", "3.2.3", "3.3.0", "3.3.1", "3.3.2", "3.3.3",
    "3.3.4", "3.3.5", "3.3.6", "3.3.7"]
READ = {
    "tgi": TGI_TAGS,
    "vllm": ["0.2.7", "0.3.3", "0.4.3", "0.5.5", "0.6.3", "0.8.5", "0.10.0", "0.10.1", "0.10.2", "0.11.0", "0.17.0", "0.18.0",
             "0.19.1", "0.20.0", "0.21.0", "0.28.0", "0.33.0"],
    "sglang": ["0.3.0", "0.4.1", "0.4.5", "0.4.6", "0.4.7", "0.4.8", "0.4.9", "0.4.10", "0.5.1", "0.5.22", "0.5.23"],
}


def _v(text: str) -> tuple[int, int, int]:
    a, b, c = (int(p) for p in text.split("."))
    return a, b, c


#: the modules whose actions and plans write flags (the actions, the solver) and the rest of
#: triage, which words them: they name none by hand
WRITERS = ("runbooks/remediation/solver.py",
           *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runbooks" / "triage").rglob("*.py")))


def _all_spellings() -> set[str]:
    return {s.flag for table in FLAGS.values() for e in table.values() for s in e.spellings} | \
        {e.setting for table in FLAGS.values() for e in table.values()}


def hand_written_flags(sources: dict[str, str]) -> set[tuple[str, int, str]]:
    """(file, line, text) of each string constant in `sources` that is a flag of the table
    (with or without dashes), and each `SetArg(...)` whose flag is a string constant."""
    spellings = _all_spellings()
    found: set[tuple[str, int, str]] = set()
    for name, text in sources.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lstrip("-") in spellings:
                found.add((name, node.lineno, node.value))
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "SetArg" and len(node.args) > 1 \
                    and isinstance(node.args[1], ast.Constant):
                found.add((name, node.lineno, str(node.args[1].value)))
    return found


def _writer_sources() -> dict[str, str]:
    return {name: (ROOT / name).read_text(encoding="utf-8") for name in WRITERS}


def writable_flags() -> dict[str, set[str]]:
    """Every flag an action or a plan can write, per engine: the roles the writers look up
    (`role_flag(engine, "role")` and the solver's SAFE_ROLES), read from their own source."""
    roles: set[str] = set(SAFE_ROLES)
    for text in _writer_sources().values():
        roles |= set(re.findall(r'role_flag\([^,()]+,\s*"([a-z_]+)"\)', text))
    out: dict[str, set[str]] = {engine: set(flags) for engine, flags in ENGINE_FLAGS.items()}
    for engine in out:
        out[engine] |= {flag for role in roles if (flag := role_flag(engine, role)) is not None}
    return out


def test_no_action_or_plan_names_a_flag_by_hand():
    assert hand_written_flags(_writer_sources()) == set()
    # and the check sees one: a hand-written flag, and a SetArg with a literal flag
    planted = {"x.py": 'SetArg(c, "max-num-seqs", 1, 2)\nadd("x", flag="--tp-size")\nSetArg(c, "--new-thing", 1, 2)\n'}
    assert hand_written_flags(planted) == {("x.py", 1, "max-num-seqs"), ("x.py", 2, "--tp-size"),
                                           ("x.py", 3, "--new-thing")}


def test_the_writers_roles_are_all_read():
    """Every role a writer looks up is one the table has for some engine (a typo'd role would
    silently write nothing), and the derived set holds the flags each action sets."""
    flags = writable_flags()
    assert flags["tgi"] >= {"max-input-tokens", "max-batch-total-tokens", "max-batch-prefill-tokens", "num-shard",
                            "cuda-graphs", "max-batch-size"}
    assert flags["vllm"] >= {"tensor-parallel-size", "pipeline-parallel-size", "enforce-eager", "max-num-seqs"}
    assert flags["sglang"] >= {"tp-size", "pp-size", "disable-cuda-graph", "context-length"}
    all_roles = {role for roles in ROLES.values() for role in roles}
    for text in _writer_sources().values():
        assert set(re.findall(r'role_flag\([^,()]+,\s*"([a-z_]+)"\)', text)) <= all_roles


@pytest.mark.parametrize("engine", sorted(FLAGS))
def test_every_writable_flag_is_in_the_table(engine):
    flags = writable_flags()[engine]
    assert flags, engine
    assert {f for f in flags if flag_entry(engine, f) is None} == set()


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, vs in READ.items() for v in vs])
def test_what_a_plan_writes_is_accepted_by_the_version_it_targets(engine, version):
    """For each version read: the spelling chosen is one the table says that version accepts,
    and a refusal only where no spelling of the setting is accepted there."""
    target = _v(version)
    for flag in sorted(writable_flags()[engine]):
        entry = flag_entry(engine, flag)
        choice = choose_spelling(engine, flag, target)
        if choice.flag is None:
            assert entry.accepted(target) == (), (flag, version)
            assert version in words.en(choice.reason) and flag in words.en(choice.reason)
        else:
            spelling = entry.spelling(choice.flag)
            assert spelling is not None and spelling.accepts(target), (flag, version, choice.flag)


def test_tgi_spellings_by_version():
    assert choose_spelling("tgi", "max-input-tokens", (1, 4, 0)).flag == "max-input-length"
    assert choose_spelling("tgi", "max-input-tokens", (1, 4, 5)).flag == "max-input-length"
    assert choose_spelling("tgi", "max-input-tokens", (2, 0, 0)).flag == "max-input-tokens"
    assert choose_spelling("tgi", "max-batch-size", (1, 4, 0)).flag is None
    assert choose_spelling("tgi", "max-batch-size", (1, 4, 1)).flag == "max-batch-size"
    assert choose_spelling("tgi", "cuda-graphs", (1, 4, 5)).flag is None
    assert choose_spelling("tgi", "cuda-graphs", (2, 0, 0)).flag == "cuda-graphs"
    assert choose_spelling("tgi", "cuda-memory-fraction", (0, 9, 3)).flag is None
    assert choose_spelling("tgi", "cuda-memory-fraction", (0, 9, 4)).flag == "cuda-memory-fraction"
    assert choose_spelling("sglang", "pp-size", (0, 4, 6)).flag is None
    assert choose_spelling("sglang", "pp-size", (0, 4, 7)).flag == "pp-size"
    deprecated = choose_spelling("sglang", "disable-cuda-graph", (0, 5, 23))
    assert deprecated.flag == "disable-cuda-graph" and "deprecated (from 0.5.22)" in words.en(deprecated.note)
    assert choose_spelling("sglang", "disable-cuda-graph", (0, 5, 1)).note is None


def test_the_objects_own_spelling_wins_and_an_unknown_version_is_said():
    kept = choose_spelling("tgi", "max-input-tokens", None, used=("max-input-length",))
    assert kept.flag == "max-input-length" and "version unknown" in words.en(kept.note)
    refused = choose_spelling("tgi", "max-batch-size", None)
    assert refused.flag is None and "1.4.1" in words.en(refused.reason) and "unknown" in words.en(refused.reason)
    every = choose_spelling("vllm", "max-num-seqs", None)
    assert every.flag == "max-num-seqs" and "0.2.7-0.33.0" in words.en(every.note)
    newer = choose_spelling("tgi", "max-batch-size", (3, 4, 0))
    assert newer.flag == "max-batch-size" and "newer than the newest read (3.3.7)" in words.en(newer.note)
    assert choose_spelling("vllm", "max-num-seqs", (0, 2, 6)).flag is None


def test_each_spelling_names_where_the_engine_defines_it():
    for engine, table in FLAGS.items():
        oldest, newest = COVERED[engine]
        for entry in table.values():
            for s in entry.spellings:
                assert s.sources and all(re.fullmatch(r"[\w/.]+\.(rs|py):\d+@v?[\d.]+", src) for src in s.sources), s
                assert oldest <= s.since <= newest and (s.until is None or s.since <= s.until <= newest)
                assert entry.kind in ("int", "float", "bool", "int_list")


def test_the_safe_plan_leaves_out_what_the_version_rejects():
    plan = SafePlan("tgi", 4096, 8, None, 2048, 0.1, None, 4000, 3000, "exact", (), True, engine_version="1.4.0")
    assert plan.values() == {"max-input-length": 2048, "max-total-tokens": 4096}
    assert plan.args() == ("--max-input-length=2048", "--max-total-tokens=4096")
    assert set(plan.withheld()) == {"max-batch-size"}
    new = SafePlan("tgi", 4096, 8, None, 2048, 0.1, None, 4000, 3000, "exact", (), True, engine_version="2.4.1")
    assert new.values() == {"max-input-tokens": 2048, "max-total-tokens": 4096, "max-batch-size": 8}
    assert new.withheld() == {}


# ------------------------------------------------------------------ the edit and the plan


def tgi_deployment(image: str, args: list[str]) -> dict:
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "tgi", "namespace": "llm", "resourceVersion": "1", "generation": 1},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "tgi"}},
                     "template": {"metadata": {"labels": {"app": "tgi"}}, "spec": {"containers": [{
                         "name": "tgi", "image": image, "args": args}]}}}}


OLD_TGI = "ghcr.io/huggingface/text-generation-inference:1.4.0"


def test_an_edit_spells_the_flag_as_the_image_version_does():
    obj = tgi_deployment(OLD_TGI, ["--model-id", "m", "--max-total-tokens", "4096"])
    result = edit_flags(obj, None, {"max-input-tokens": 2048}, reader=CONTAINER_READER)
    assert result.diff(words.en) == ["--max-input-length (default) -> 2048 (after args[3]); TGI 1.4.0 spells it --max-input-length"]
    assert result.spelled == {"max-input-tokens": "max-input-length"}
    assert result.fields["args"][-2:] == ["--max-input-length", "2048"]


def test_an_edit_of_a_flag_the_image_version_lacks_is_refused():
    obj = tgi_deployment(OLD_TGI, ["--model-id", "m", "--max-total-tokens", "4096"])
    with pytest.raises(UsageError) as e:
        edit_flags(obj, None, {"max-batch-size": 8}, reader=CONTAINER_READER)
    assert e.value.code == "flag_not_in_version"
    assert words.en(e.value.params["reason"]) == "TGI 1.4.0 has no --max-batch-size (accepted from 1.4.1 on)"


def test_an_unknown_version_keeps_the_objects_spelling_and_says_so():
    obj = tgi_deployment("ghcr.io/huggingface/text-generation-inference:latest",
                         ["--model-id", "m", "--max-input-length", "1024", "--max-total-tokens", "4096"])
    result = edit_flags(obj, None, {"max-input-tokens": 2048}, reader=CONTAINER_READER)
    assert result.diff(words.en) == ["--max-input-length 1024 -> 2048 (args[3]); TGI version unknown: --max-input-length "
                             "kept as the object spells it"]
    with pytest.raises(UsageError) as e:
        edit_flags(obj, None, {"max-batch-size": 8}, reader=CONTAINER_READER)
    assert e.value.code == "flag_not_in_version" and "unknown" in words.en(e.value.params["reason"])
    # the log's version line stands in for the tag
    assert edit_flags(obj, None, {"max-batch-size": 8}, engine_version="2.4.1", reader=CONTAINER_READER).diff()[0].startswith("--max-batch-size")


def test_a_plan_the_version_rejects_is_refused_before_it_exists_and_writes_nothing(tmp_path, capsys):
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(tgi_deployment(OLD_TGI, ["--model-id", "m", "--max-total-tokens", "4096"]))
        store = tmp_path / "gpumem.db"
        rc, text = run_cli(capsys, sc, store, "plan", "llm/tgi", "--set", "max-batch-size=8")
        assert rc == 2 and "TGI 1.4.0 has no --max-batch-size (accepted from 1.4.1 on)" in text
        assert "Traceback" not in text
        assert sc.kube.writes() == []
        rc, plan = run_cli(capsys, sc, store, "plans", "--all", "--json")
        assert rc == 0 and plan == []
        # the same object, a flag the version takes under its own spelling: planned and written so
        rc, plan = run_cli(capsys, sc, store, "plan", "llm/tgi", "--set", "max-input-tokens=2048", "--json")
        assert rc == 0 and [c["diff"] for c in plan["changes"]] == ["--max-input-length (default) -> 2048"]
        rc, applied = run_cli(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
        assert (rc, applied["state"]) == (0, "applied")
        assert len(sc.kube.writes(verb="patch")) == 1
        args = sc.kube.get("Deployment", "llm", "tgi")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args[-2:] == ["--max-input-length", "2048"] and "--max-input-tokens" not in args
        rc, back = run_cli(capsys, sc, store, "rollback", plan["id"], "--yes", "--json")
        assert (rc, back["state"]) == (0, "rolled_back")
        assert len(sc.kube.writes(verb="patch")) == 2
        args = sc.kube.get("Deployment", "llm", "tgi")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args == ["--model-id", "m", "--max-total-tokens", "4096"]


# ------------------------------------------------------------------ triage: before a plan exists


def _triage_tgi(tag: str):
    from dataclasses import replace

    from collectors.bundle import load_bundle
    from collectors.parsers.flags import server_config_from_container
    from runbooks.triage.runbook import triage

    ev = load_bundle(ROOT / "tests" / "data" / "real" / "tgi-653-llama2-7b-a10g-k8s-prefill-oom")
    cfg = server_config_from_container({
        "name": "tgi", "image": f"ghcr.io/huggingface/text-generation-inference:{tag}",
        "args": ["--model-id", "meta-llama/Llama-2-7b-hf", "--max-total-tokens", "4096", "--max-batch-prefill-tokens",
                 "4096", *(["--cuda-memory-fraction", "0.99"] if _v(tag) >= (0, 9, 4) else [])]})
    return triage(replace(ev, server_config=cfg))


def test_triage_spells_the_safe_flags_for_tgi_1_4_0_and_leaves_out_what_it_lacks():
    action = next(a for a in _triage_tgi("1.4.0").actions if a.id == "set_safe_flags")
    # the fraction (0.99) is kept: TGI's caps torch, and a lower one only shrinks the KV cache
    assert [c.flag for c in action.changes] == ["max-input-length"]
    assert {k: words.en(v) for k, v in action.params["withheld"].items()} == {
        "max-batch-size": "TGI 1.4.0 has no --max-batch-size (accepted from 1.4.1 on)"}
    assert "--max-batch-size" not in action.params["args"] and "--max-input-length=4095" in action.params["args"]
    new = next(a for a in _triage_tgi("2.4.1").actions if a.id == "set_safe_flags")
    assert [c.flag for c in new.changes] == ["max-input-tokens", "max-batch-size"]
    assert "withheld" not in new.params


@pytest.mark.parametrize("tag", TGI_TAGS)
def test_no_triage_action_names_a_flag_its_tgi_version_rejects(tag):
    for action in _triage_tgi(tag).actions:
        for change in action.changes:
            if change.kind == "set_arg":
                entry = flag_entry("tgi", change.flag)
                assert entry is not None and entry.spelling(change.flag).accepts(_v(tag)), (tag, action.id, change.flag)


def test_a_plan_from_a_triage_uses_the_version_its_log_said(tmp_path, capsys):
    """The image tag says nothing ("latest"); the recorded triage read TGI 1.4.0 from the log:
    --max-batch-size is refused with nothing written, --max-input-tokens is written as 1.4.0
    spells it."""
    from bot.service.notes import record_triage
    from bot.store.db import Store
    from runbooks.model.changes import SetArg
    from runbooks.model.report import Action, Report

    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(tgi_deployment("ghcr.io/huggingface/text-generation-inference:latest",
                                   ["--model-id", "m", "--max-total-tokens", "4096"]))
        store = tmp_path / "gpumem.db"
        db = Store.open(store)
        record_triage(db, Report(target="llm/tgi", engine="tgi", engine_version="1.4.0", actions=(
            Action("lower_max_num_seqs", changes=(SetArg("tgi", "max-batch-size", None, 8),)),
            Action("set_safe_flags", changes=(SetArg("tgi", "max-input-tokens", None, 2048),)))),
            actor="cli:test")
        db.close()
        rc, text = run_cli(capsys, sc, store, "plan", "llm/tgi", "--action", "lower_max_num_seqs")
        assert rc == 2 and "TGI 1.4.0 has no --max-batch-size" in text
        rc, plan = run_cli(capsys, sc, store, "plan", "llm/tgi", "--action", "set_safe_flags", "--json")
        assert rc == 0 and [c["diff"] for c in plan["changes"]] == ["--max-input-length (default) -> 2048"]
        assert sc.kube.writes() == []


def test_the_report_says_which_flag_was_left_out_and_why():
    from bot.render.text import render_text

    report = _triage_tgi("1.4.0")
    line = next(li for li in render_text(report, "en").split("\n") if "Set safe flags" in li)
    assert "--max-batch-size=" not in line
    assert line.endswith("(left out, the deployed version rejects it: TGI 1.4.0 has no --max-batch-size "
                         "(accepted from 1.4.1 on))")
    zh = next(li for li in render_text(report, "zh").split("\n") if "--max-input-length=4095" in li)
    assert "已略去" in zh
    assert "left out" not in next(li for li in render_text(_triage_tgi("2.4.1"), "en").split("\n")
                                  if "Set safe flags" in li)


def _table_names() -> set[str]:
    """Every flag name the engine tables hold: settings, spellings and aliases, all engines."""
    names: set[str] = set()
    for engine in FLAGS:
        for entry in all_entries(engine):
            names |= {entry.setting, *(s.flag for s in entry.spellings), *(a.name for a in entry.aliases)}
    return names


def names_by_hand(sources: dict[str, str]) -> set[tuple[str, int, str]]:
    """(file, line, text) of each string constant in `sources` that is a flag of the engine
    tables or one of its aliases, with or without dashes (a docstring is prose, not a constant
    equal to a flag)."""
    names = _table_names()
    return {(name, node.lineno, node.value) for name, text in sources.items() for node in ast.walk(ast.parse(text))
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.lstrip("-") in names}


#: the launch grammar and the value ranges: they read every flag from the tables
GRAMMAR = (*sorted(str(p.relative_to(ROOT)) for p in (ROOT / "runbooks" / "launch").glob("*.py")),
           "runbooks/remediation/value_ranges.py")


def test_the_launch_grammar_and_the_value_ranges_name_no_flag_by_hand():
    sources = {name: (ROOT / name).read_text(encoding="utf-8") for name in GRAMMAR}
    assert names_by_hand(sources) == set()
    # and the check sees them: a flag, a short alias and a read-only flag written by hand
    planted = {"x.py": 'BOOLEAN = {"enforce-eager"}\nA = {"tp": 1}\nR = {"--port": (1, 65535)}\nOK = "--replicas"\n'}
    assert names_by_hand(planted) == {("x.py", 1, "enforce-eager"), ("x.py", 2, "tp"), ("x.py", 3, "--port")}


def test_every_flag_entry_says_where_the_engine_declares_it():
    """Each entry of both tables: a source file:line@version per spelling (two where the oldest
    and newest version read differ), versions in order, a known kind; an engine's own alias
    has its source too, and one it does not declare says why gpumem reads it."""
    pattern = re.compile(r"^[\w./-]+\.(py|rs):\d+@v?\d+\.\d+\.\d+$")
    for engine in FLAGS:
        for entry in all_entries(engine):
            assert entry.engine == engine and entry.kind in {"int", "float", "bool", "int_list", "str", "multi",
                                                             "value", "bool_value"}, entry
            for s in entry.spellings:
                assert s.sources and all(pattern.match(src) for src in s.sources), (engine, s)
                assert s.until is None or s.since <= s.until
                assert engine == "tgi" or s.env is None
            for alias in entry.aliases:
                assert (alias.own and alias.sources and all(pattern.match(x) for x in alias.sources)) or \
                    (not alias.own and alias.why), (engine, alias)
    assert flag_entry("sglang", "cuda-graph-max-bs") is None  # a read flag: not the writers' table
    read = READ_FLAGS["sglang"]["cuda-graph-max-bs"]
    assert read.spellings[0].until == (0, 5, 17) and read.range is not None  # gone by 0.5.21


def test_value_ranges_come_from_the_table():
    from runbooks.catalogs.engine_flags import COUNT, TOKENS_OR_OFF
    from runbooks.remediation.value_ranges import RANGES

    for engine in FLAGS:
        want = {s.flag: e.range for e in all_entries(engine) if e.range is not None for s in e.spellings}
        assert RANGES[engine] == want
    assert RANGES["tgi"]["max-input-length"] is RANGES["tgi"]["max-input-tokens"]
    assert RANGES["vllm"]["max-num-seqs"] is COUNT and RANGES["sglang"]["chunked-prefill-size"] is TOKENS_OR_OFF


def test_the_launch_tables_take_every_flag_from_the_engine_tables():
    """One source: the launch grammar's switches, value flags, aliases, TGI env names, fields
    and the model's flag are the engine tables' (written and read), none listed twice."""
    from runbooks.launch import flag_tables as L

    for engine in FLAGS:
        for entry in all_entries(engine):
            for s in entry.spellings:
                if entry.kind == "bool":
                    assert s.flag in L.BOOLEAN_FLAGS[engine] and s.flag not in L.VALUE_FLAGS[engine], s.flag
                else:
                    assert s.flag in L.VALUE_FLAGS[engine] and s.flag not in L.BOOLEAN_FLAGS[engine], s.flag
                if s.env:
                    assert L.TGI_ENV_FLAGS[s.env] == s.flag
            for alias in entry.aliases:
                assert L.ALIASES[engine][alias.name] == entry.spellings[-1].flag
    assert L.known_flags("vllm") == {s.flag for e in all_entries("vllm") for s in e.spellings}
    assert L.MODEL_FLAG == {"vllm": "model", "sglang": "model-path", "tgi": "model-id"}
    assert L.ALIASES["vllm"]["tp"] == "tensor-parallel-size" and L.ALIASES["sglang"]["model"] == "model-path"
    for engine, rows in L.FIELD_MAP.items():
        for flag, _, kind in rows:
            entry = next(e for e in all_entries(engine) if e.spelling(flag) is not None)
            assert kind == {"multi": "first", "value": "str"}.get(entry.kind, entry.kind), (engine, flag)
    # both spellings of TGI's prompt limit fill the same field
    assert {f for f, field, _ in L.FIELD_MAP["tgi"] if field == "max_input_tokens"} == {"max-input-length",
                                                                                       "max-input-tokens"}
    # TGI 1.4's CUDA-graph switch takes no value (it came in with the table)
    assert "enable-cuda-graphs" in L.BOOLEAN_FLAGS["tgi"]


def _vllm_deployment(image: str) -> dict:
    obj = tgi_deployment(image, ["--model", "m", "--max-model-len", "8192"])
    obj["spec"]["template"]["spec"]["containers"][0]["name"] = "vllm"
    obj["spec"]["template"]["spec"]["containers"][0]["command"] = ["vllm", "serve"]
    return obj


def test_a_flag_set_by_hand_is_checked_against_the_versions_it_was_read_in():
    # --async-scheduling is one no action writes: its versions come from the flags only read
    entry = any_entry("vllm", "async-scheduling")
    assert entry is not None and entry not in FLAGS["vllm"].values()
    since = entry.spellings[0].since
    old = _vllm_deployment("vllm/vllm-openai:v0.6.0")
    with pytest.raises(UsageError) as e:
        edit_flags(old, None, {"async-scheduling": True}, reader=CONTAINER_READER)
    assert e.value.code == "flag_not_in_version"
    # outside what was read nothing is claimed either way: not "0.6.0 has no ..."
    assert words.en(e.value.params["reason"]) == (
        f"vLLM 0.6.0: --async-scheduling was read in the releases from {'.'.join(map(str, since))} on only, and "
        "whether 0.6.0 takes it is not known: set it by hand")
    new = _vllm_deployment("vllm/vllm-openai:v0.12.0")
    assert edit_flags(new, None, {"async-scheduling": True}, reader=CONTAINER_READER).diff()[0].startswith(
        "--async-scheduling")


def test_a_flag_the_version_refuses_is_said_in_chinese_too():
    from tests.test_words_remediation import english as english_words

    reason = choose_spelling("tgi", "max-batch-size", (1, 4, 0)).reason
    assert words.zh(reason) == "TGI 1.4.0 没有 --max-batch-size（自 1.4.1 起的版本才接受）"
    note = choose_spelling("tgi", "max-input-tokens", None, used=("max-input-length",)).note
    assert words.zh(note) == "TGI 版本未知：沿用对象中的写法 --max-input-length"
    assert english_words(words.zh(choose_spelling("vllm", "max-num-seqs", (0, 2, 6)).reason)) == []


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_plan_on_an_unknown_version_says_the_spelling_it_kept(tmp_path, capsys, lang):
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(tgi_deployment("ghcr.io/huggingface/text-generation-inference:latest",
                                   ["--model-id", "m", "--max-input-length", "1024", "--max-total-tokens", "4096"]))
        store = tmp_path / "gpumem.db"
        rc, plan = run_cli(capsys, sc, store, "plan", "llm/tgi", "--set", "max-input-tokens=2048", "--json")
        assert rc == 0 and [c["flag"] for c in plan["changes"]] == ["max-input-length"]
        notes = [n for n in plan["preview"]["notes"] if n["id"] == "flag_spelling"]
        assert [n["params"]["note"]["phrase"] for n in notes] == ["flag.unknown_kept"]
        from bot.main import main

        rc = main(["plan", "llm/tgi", "--set", "max-input-tokens=2000", "--kubeconfig", str(sc.kubeconfig),
                   "--context", "prod", "--store", str(store), "--lang", lang])
        text = capsys.readouterr().out
        assert rc == 0
        said = ("TGI version unknown: --max-input-length kept as the object spells it" if lang == "en"
                else "TGI 版本未知：沿用对象中的写法 --max-input-length")
        assert said in text


def test_a_plan_on_a_known_version_says_how_that_version_spells_the_flag(tmp_path, capsys):
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(tgi_deployment(OLD_TGI, ["--model-id", "m", "--max-total-tokens", "4096"]))
        rc, plan = run_cli(capsys, sc, tmp_path / "gpumem.db", "plan", "llm/tgi", "--set", "max-input-tokens=2048", "--json")
        assert rc == 0
        notes = [n["params"]["note"] for n in plan["preview"]["notes"] if n["id"] == "flag_spelling"]
        assert [words.en(n) for n in notes] == ["TGI 1.4.0 spells it --max-input-length"]


# ------------------------------------------------------------------ TGI's limits held together

TGI_32 = "ghcr.io/huggingface/text-generation-inference:3.2.1"
GEMMA_ARGS = ["--model-id", "google/gemma-3-27b-it", "--num-shard", "4", "--max-input-length", "30000",
              "--max-total-tokens", "32000", "--max-batch-prefill-tokens", "31000"]


@pytest.mark.parametrize(("sets", "said"), [
    # the router's check from 3.0 for a shard that does not chunk (Gemma 3 on 3.2)
    (("max-batch-prefill-tokens=15500",),
     "TGI 3.2.1 refuses to start with --max-batch-prefill-tokens 15,500 below --max-input-length 30,000 unless it "
     "prefills in chunks"),
    # the launcher's check in every release
    (("max-total-tokens=19456",),
     "TGI 3.2.1 refuses to start with --max-input-length 30,000 not below --max-total-tokens 19,456"),
])
def test_a_plan_whose_limits_tgi_refuses_together_is_refused_before_it_exists_and_writes_nothing(
        tmp_path, capsys, sets, said):
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(tgi_deployment(TGI_32, GEMMA_ARGS))
        store = tmp_path / "gpumem.db"
        rc, text = run_cli(capsys, sc, store, "plan", "llm/tgi", *(a for s in sets for a in ("--set", s)))
        assert rc == 2 and said in text and "Nothing was planned or written" in text
        assert "Traceback" not in text
        assert sc.kube.writes() == []
        rc, plans = run_cli(capsys, sc, store, "plans", "--all", "--json")
        assert rc == 0 and plans == []
        # the two limits lowered together are what TGI takes: planned and written
        rc, plan = run_cli(capsys, sc, store, "plan", "llm/tgi", "--set", "max-input-length=15360",
                           "--set", "max-batch-prefill-tokens=15500", "--json")
        assert rc == 0 and len(plan["changes"]) == 2
        rc, applied = run_cli(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
        assert (rc, applied["state"]) == (0, "applied")
        assert len(sc.kube.writes(verb="patch")) == 1


def test_a_chunking_tgi_3_takes_a_prefill_batch_below_its_input_limit():
    from runbooks.model.evidence import ServerConfig
    from runbooks.remediation.value_ranges import check_tgi_plan
    llama = ServerConfig(source="x", engine="tgi", engine_version="3.3.4", model="meta-llama/Llama-3.1-8B-Instruct",
                         flags={"max-input-tokens": "30000", "max-total-tokens": "32000"},
                         max_input_tokens=30000, max_model_len=32000)
    check_tgi_plan(llama, (("max-batch-prefill-tokens", 8192),), "3.3.4")  # chunked: taken
    with pytest.raises(UsageError) as e:
        check_tgi_plan(replace(llama, env={"PREFILL_CHUNKING": "0"}), (("max-batch-prefill-tokens", 8192),), "3.3.4")
    assert e.value.code == "limits_refused_by_engine"
    # a version not known is held to every rule
    with pytest.raises(UsageError) as e:
        check_tgi_plan(replace(llama, engine_version=None), (("max-batch-prefill-tokens", 8192),), None)
    assert words.en(e.value.params["reason"]).startswith("TGI refuses to start with --max-batch-prefill-tokens 8192 "
                                                         "below --max-input-tokens 30,000 unless it prefills in chunks "
                                                         "(TGI 3 only; the version here is not known)")
    # a rule the plan does not touch is the object's own state
    broken = replace(llama, max_batch_total_tokens=16000, flags={**llama.flags, "max-batch-total-tokens": "16000"})
    check_tgi_plan(broken, (("max-batch-prefill-tokens", 8192),), "3.3.4")


def test_an_unset_tgi_input_limit_is_held_at_the_launchers_default():
    from runbooks.model.evidence import ServerConfig
    from runbooks.remediation.value_ranges import check_tgi_plan
    # TGI 2.2 takes --max-total-tokens - 1 for a model this long: a 4096-token batch is below it
    cfg = ServerConfig(source="x", engine="tgi", engine_version="2.2.0", model="meta-llama/Llama-3.1-8B-Instruct",
                       flags={"max-total-tokens": "8192"}, max_model_len=8192)
    with pytest.raises(UsageError) as e:
        check_tgi_plan(cfg, (("max-batch-prefill-tokens", 4096),), "2.2.0")
    assert words.en(e.value.params["reason"]).startswith(
        "TGI 2.2.0 refuses to start with --max-batch-prefill-tokens 4096 below --max-input-tokens 8191")
    check_tgi_plan(cfg, (("max-batch-prefill-tokens", 8191),), "2.2.0")


def test_triages_tgi_prefill_action_plans_and_applies_where_a_halved_batch_alone_would_be_refused(tmp_path, capsys):
    """#3130's triage: the action lowers the input limit with the batch, so its plan passes
    TGI's limit checks, is written once, and rolls back to the object as it was."""
    from bot.service.notes import record_triage
    from bot.store.db import Store
    from collectors.bundle import load_bundle
    from runbooks.triage.runbook import triage

    report = triage(load_bundle(Path(__file__).parent / "data" / "real" / "tgi-3130-gemma3-27b-31k-prefill-4xa100"))
    action = next(a for a in report.actions if a.id == "lower_input_with_prefill")
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(tgi_deployment(TGI_32, GEMMA_ARGS))
        store = tmp_path / "gpumem.db"
        db = Store.open(store)
        record_triage(db, replace(report, target="llm/tgi"), actor="cli:test")
        db.close()
        rc, plan = run_cli(capsys, sc, store, "plan", "llm/tgi", "--action", action.id, "--json")
        assert rc == 0, plan
        assert sorted(c["diff"] for c in plan["changes"]) == ["--max-batch-prefill-tokens 31000 -> 15500",
                                                              "--max-input-length 30000 -> 15360"]
        rc, applied = run_cli(capsys, sc, store, "apply", plan["id"], "--yes", "--no-watch", "--json")
        assert (rc, applied["state"]) == (0, "applied")
        assert len(sc.kube.writes(verb="patch")) == 1
        rc, back = run_cli(capsys, sc, store, "rollback", plan["id"], "--yes", "--json")
        assert (rc, back["state"]) == (0, "rolled_back")
        args = sc.kube.get("Deployment", "llm", "tgi")["spec"]["template"]["spec"]["containers"][0]["args"]
        assert args == GEMMA_ARGS


def _vllm_serving(args: list[str]) -> dict:
    obj = tgi_deployment("vllm/vllm-openai:v0.10.2", args)
    obj["metadata"]["name"] = "vllm"
    return obj


def test_a_plan_whose_vllm_limits_the_scheduler_refuses_is_refused_before_it_exists_and_writes_nothing(
        tmp_path, capsys):
    # a launch vLLM takes: 512 batched tokens cover 256 sequences and the 512-token length
    args = ["--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "512", "--max-num-seqs", "256",
            "--max-num-batched-tokens", "512", "--no-enable-chunked-prefill"]
    with running_scenario(None, tmp_path) as sc:
        sc.kube.add(_vllm_serving(args))
        store = tmp_path / "gpumem.db"
        rc, text = run_cli(capsys, sc, store, "plan", "llm/vllm", "--set", "max-num-seqs=1024")
        assert rc == 2 and "vLLM refuses to start with --max-num-batched-tokens 512 below --max-num-seqs 1024" in text
        rc, text = run_cli(capsys, sc, store, "plan", "llm/vllm", "--set", "max-model-len=16384")
        assert rc == 2 and "below --max-model-len 16,384 while chunked prefill is off" in text
        assert "Traceback" not in text and sc.kube.writes() == []
        rc, plans = run_cli(capsys, sc, store, "plans", "--all", "--json")
        assert rc == 0 and plans == []
        # lowering the sequences keeps the scheduler's order: planned
        rc, plan = run_cli(capsys, sc, store, "plan", "llm/vllm", "--set", "max-num-seqs=128", "--json")
        assert rc == 0 and [c["diff"] for c in plan["changes"]] == ["--max-num-seqs 256 -> 128"]


def test_a_tgi_3_pinned_to_a_card_below_compute_capability_8_takes_no_batch_below_its_input_limit(tmp_path, capsys):
    """TGI 3 pages its attention on a T4 and so does not chunk its prefill: the plan check reads
    the card from the node selector, and refuses there what it takes on an L4."""
    args = ["--model-id", "meta-llama/Llama-3.1-8B-Instruct", "--max-input-tokens", "8000",
            "--max-total-tokens", "8192"]
    for accelerator, refused in (("nvidia-tesla-t4", True), ("nvidia-l4", False)):
        (tmp_path / accelerator).mkdir()
        with running_scenario(None, tmp_path / accelerator) as sc:
            obj = tgi_deployment("ghcr.io/huggingface/text-generation-inference:3.3.4", args)
            obj["spec"]["template"]["spec"]["nodeSelector"] = {"cloud.google.com/gke-accelerator": accelerator}
            sc.kube.add(obj)
            store = tmp_path / accelerator / "gpumem.db"
            rc, text = run_cli(capsys, sc, store, "plan", "llm/tgi", "--set", "max-batch-prefill-tokens=4096")
            if refused:
                assert rc == 2 and "unless it prefills in chunks" in text and sc.kube.writes() == []
            else:
                assert rc == 0, text
