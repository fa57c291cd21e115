"""One registry of verbs, one grammar, one request per command: argv and Slack text agree."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from bot.config.environ import NAMES, Environment, read_environment
from bot.grammar import commands
from bot.grammar.commands import parse_argv
from bot.grammar.requests import REQUESTS, BudgetRequest, FleetRequest, PlanRequest
from bot.grammar.slack import SLACK_VERBS, parse_command
from bot.service.deps import Deps
from bot.verbs import VERBS, Lazy


def test_every_verb_of_the_grammar_has_one_entry_with_its_request_type():
    assert list(VERBS) == list(commands.VERBS)
    assert {name: entry.request for name, entry in VERBS.items()} == REQUESTS


def test_slack_offers_exactly_the_verbs_whose_entry_has_a_slack_policy():
    offered = {name for name, entry in VERBS.items() if entry.slack is not None}
    assert offered == set(SLACK_VERBS) - {"help"}


def test_each_entrys_terminal_module_runs_the_verb():
    for entry in VERBS.values():
        assert callable(importlib.import_module(entry.cli).run), entry.name


def test_the_lazy_references_resolve_to_callables():
    for entry in VERBS.values():
        refs = [entry.worker] + ([entry.slack.message] if entry.slack else [])
        for ref in refs:
            if isinstance(ref, Lazy):
                assert callable(ref.resolve()), ref.ref


@pytest.mark.parametrize("words", [
    "budget --engine vllm --model Qwen/Qwen2.5-7B-Instruct --gpu A100-80GB --max-num-seqs 64",
    "plan llm/vllm-server --set max-num-seqs=64 --set enforce-eager= --replicas 3",
    "fleet -n llm --engine vllm --top 5",
])
def test_argv_and_slack_text_become_the_same_request(words):
    from_slack = parse_command(words).request
    from_argv = parse_argv(words.split())
    assert type(from_slack) is type(from_argv)
    shared = {f.name for f in dataclasses.fields(from_argv)} - {"scope", "all", "target", "context", "lang"}
    assert {n: getattr(from_slack, n) for n in shared} == {n: getattr(from_argv, n) for n in shared}


def test_requests_are_frozen_and_repeatable_options_are_tuples():
    request = parse_argv(["plan", "llm/x", "--set", "a=1", "--set", "b=2"])
    assert isinstance(request, PlanRequest) and request.set == ("a=1", "b=2")
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.set = ()  # type: ignore[misc]
    fleet = parse_argv(["fleet", "-n", "llm", "-n", "ml"])
    assert isinstance(fleet, FleetRequest) and fleet.namespace == ("llm", "ml")
    assert parse_argv(["budget"]) == BudgetRequest()


def test_the_slack_fleet_scope_is_a_new_request_not_a_changed_one():
    command = parse_command("fleet prod")
    before = command.request
    assert isinstance(before, FleetRequest) and before.scope == "prod" and before.namespace is None
    scoped = dataclasses.replace(before, namespace=("prod",))
    assert before.namespace is None and scoped.namespace == ("prod",)


def test_the_environment_keeps_only_the_variables_gpumem_reads():
    env = Environment.from_mapping({"GPUMEM_CONFIG": "/etc/g.yaml", "AWS_SECRET_ACCESS_KEY": "x", "LANG": "zh_CN"})
    assert dict(env) == {"GPUMEM_CONFIG": "/etc/g.yaml", "LANG": "zh_CN"}
    assert env.config_path == "/etc/g.yaml" and env.lang == "zh"
    assert set(read_environment()) <= set(NAMES)


def test_deps_read_the_settings_only_when_asked(tmp_path):
    broken = tmp_path / "gpumem.yaml"
    broken.write_text("clusters: [\n")
    deps = Deps(Environment.from_mapping({"GPUMEM_CONFIG": str(broken)}))
    assert deps.env.config_path == str(broken)  # made without reading the file
    from bot.config.yaml_io import SettingsError

    with pytest.raises(SettingsError):
        deps.settings  # noqa: B018 - the read is the point
    assert Deps.of(parse_argv(["rules"]), Environment()).config_path is None
    assert Deps.of(parse_argv(["fleet", "--config", "x.yaml"]), Environment()).config_path == "x.yaml"


def test_the_environment_never_shows_a_secrets_value():
    from bot.config.environ import Environment

    env = Environment.from_mapping({"SLACK_BOT_TOKEN": "xoxb-123-secret", "GPUMEM_PROMETHEUS_TOKEN": "prom-secret",
                                    "GPUMEM_CONFIG": "/etc/gpumem.yaml"})
    shown = repr(env) + str(env) + repr([env]) + f"{env!r}"
    assert "xoxb-123-secret" not in shown and "prom-secret" not in shown
    assert "SLACK_BOT_TOKEN" in repr(env)  # which variables are set is still told
    assert env["SLACK_BOT_TOKEN"] == "xoxb-123-secret"  # the value itself is still there to read
