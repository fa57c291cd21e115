"""The command grammar Slack shares with the CLI: what parses, what is refused and how."""

from __future__ import annotations

import pytest

from bot.grammar.slack import (
    SLACK_VERBS,
    CommandError,
    Target,
    available_verbs,
    normalise,
    parse_command,
    parse_target,
    usage_of,
)
from bot.verbs import VERBS
from tests.support import words
from tests.support.slack_kit import parser_with_budget


def _error(text: str, **kw) -> CommandError:
    with pytest.raises(CommandError) as info:
        parse_command(text, **kw)
    return info.value


def test_triage_takes_namespace_slash_deployment_and_a_context():
    cmd = parse_command("triage llm/vllm-server --context prod-a")
    assert (cmd.verb, cmd.target, cmd.context) == ("triage", Target("llm", "vllm-server"), "prod-a")
    assert cmd.argv == ("llm/vllm-server", "--context", "prod-a")


def test_a_bare_deployment_lands_in_the_default_namespace():
    assert parse_command("triage vllm-server", default_namespace="llm").target == Target("llm", "vllm-server")


def test_a_bare_deployment_without_a_default_namespace_asks_for_one():
    e = _error("triage vllm-server")
    assert e.key == "missing_namespace"
    assert "/gpumem triage" in e.usage


@pytest.mark.parametrize("target", ["LLM/vllm", "llm/Server", "a/b/c/d", "llm/-x", "llm/" + "x" * 300, "llm/x_y",
                                    "llm/isvc/X", "LLM/lws/x"])
def test_names_kubernetes_would_refuse_are_refused(target):
    e = _error(f"triage {target}")
    assert e.key == "bad_target"
    assert e.params["target"] == target


@pytest.mark.parametrize("target, expected", [
    ("llm/isvc/llama", Target("llm", "llama", "InferenceService")),
    ("llm/InferenceService/llama", Target("llm", "llama", "InferenceService")),
    ("llm/inferenceservices/llama", Target("llm", "llama", "InferenceService")),
    ("llm/LWS/vllm", Target("llm", "vllm", "LeaderWorkerSet")),
    ("llm/leaderworkerset/vllm", Target("llm", "vllm", "LeaderWorkerSet")),
    ("llm/sts/vllm", Target("llm", "vllm", "StatefulSet")),
    ("llm/deploy/vllm", Target("llm", "vllm", "Deployment")),
    ("llm/vllm", Target("llm", "vllm", "Deployment")),
])
def test_namespace_kind_name_names_the_kinds_gpumem_takes(target, expected):
    assert parse_command(f"triage {target}").target == expected
    assert parse_command(f"plan {target} --set max-num-seqs=8").target == expected
    assert parse_target(str(expected), None) == expected  # printed back in the form it parses from


def test_a_kind_gpumem_does_not_take_is_refused_naming_the_kinds():
    e = _error("triage llm/daemonset/x")
    assert e.key == "bad_kind"
    assert e.params["kind"] == "daemonset"
    assert e.params["kinds"] == "deployment (deploy), statefulset (sts), inferenceservice (isvc), leaderworkerset (lws)"
    assert e.usage.startswith("usage: /gpumem triage")


def test_the_deployment_forms_are_unchanged():
    from bot.grammar.slack import split_target, split_workload

    assert split_target("llm/vllm") == ("llm", "vllm") and str(Target("llm", "vllm")) == "llm/vllm"
    assert split_target("vllm", "llm") == ("llm", "vllm")
    assert split_workload("llm/isvc/llama") == ("llm", "InferenceService", "llama")
    assert split_target("llm/isvc/llama") == ("llm", "llama")


def test_triage_without_a_target_says_so_with_the_usage():
    e = _error("triage")
    assert e.key == "missing_target"
    assert e.usage.startswith("usage: /gpumem triage")
    assert "target" in e.usage


def test_unknown_verbs_list_the_ones_that_exist():
    e = _error("diagnose llm/x")
    assert e.key == "unknown_verb"
    assert e.params["verb"] == "diagnose"
    assert "triage" in e.params["verbs"] and "help" in e.params["verbs"]


@pytest.mark.parametrize("verb", ["serve", "agent"])
def test_cli_only_verbs_are_not_reachable_from_slack(verb):
    assert verb in VERBS
    assert _error(f"{verb} --http").key == "unknown_verb"


def test_an_unknown_flag_is_a_usage_error_not_an_exit():
    e = _error("triage llm/x --dry-run")
    assert e.key == "bad_flags"
    assert "--dry-run" in words.en(e.params["detail"])
    assert e.usage.startswith("usage: /gpumem triage")


def test_help_flag_returns_the_verb_help_instead_of_exiting():
    e = _error("triage llm/x --help")
    assert e.key == "help_verb"
    assert "NAMESPACE/DEPLOYMENT" in e.usage and "--context" in e.usage


@pytest.mark.parametrize("text,flag", [("triage llm/x --bundle /etc", "--bundle"), ("triage llm/x --json", "--json")])
def test_flags_that_touch_the_bots_disk_are_refused_and_not_offered(text, flag):
    e = _error(text)
    assert e.key == "host_only_flag"
    assert e.params["flag"] == flag
    assert flag not in usage_of("triage")


def test_slack_formatting_is_undone_before_parsing():
    assert normalise("triage llm/x —context a") == "triage llm/x --context a"
    assert normalise("budget --model “Qwen/Qwen2.5-7B”") == 'budget --model "Qwen/Qwen2.5-7B"'
    assert normalise("triage <http://llm/x|llm/x> &amp;") == "triage llm/x &"
    assert parse_command("triage llm/vllm-server –context prod-b").context == "prod-b"


def test_an_unclosed_quote_is_reported():
    assert _error('budget --model "Qwen').key == "bad_quotes"


def test_budget_takes_exactly_the_cli_flags():
    cmd = parse_command("budget --engine vllm --model Qwen/Qwen2.5-7B-Instruct --max-model-len 8192",
                        parser_factory=parser_with_budget)
    assert cmd.verb == "budget"
    assert cmd.target is None
    assert cmd.argv == ("--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct", "--max-model-len", "8192")
    assert cmd.request.max_model_len == 8192
    assert "--lang" in cmd.options


def test_budget_flag_values_are_checked_by_the_cli_parser():
    e = _error("budget --engine trt --model x", parser_factory=parser_with_budget)
    assert e.key == "bad_flags"
    assert "invalid choice" in words.en(e.params["detail"])
    assert e.usage.startswith("usage: /gpumem budget")
    assert _error("budget --model x", parser_factory=parser_with_budget).key == "bad_flags"  # --engine is required


def test_budget_flags_naming_files_are_refused():
    e = _error("budget --engine vllm --model x --config-json /etc/passwd", parser_factory=parser_with_budget)
    assert (e.key, e.params["flag"]) == ("host_only_flag", "--config-json")


@pytest.mark.skipif("budget" not in VERBS, reason="gpumem budget is not in this build")
def test_the_real_budget_verb_takes_its_flags_and_refuses_file_ones():
    cmd = parse_command("budget --engine vllm --model Qwen/Qwen2.5-7B-Instruct --gpu A100-80GB --max-num-seqs 64")
    assert cmd.request.max_num_seqs == 64 and cmd.request.gpu == "A100-80GB"
    assert _error("budget --help").usage.startswith("usage: /gpumem budget")
    for flag in ("--from-deployment d.yaml", "--profile access.log", "--model /models/qwen/config.json",
                 "--model ../secrets"):
        assert _error(f"budget --engine vllm {flag}").key == "host_only_flag", flag


@pytest.mark.parametrize("flag", ["--prometheus http://attacker.example", "--kubeconfig /root/.kube/config",
                                  "--config /etc/gpumem.yaml", "--save-bundle /tmp/x", "--in-cluster",
                                  "--deadline 600"])
def test_triage_refuses_flags_that_are_the_operators_or_touch_the_host(flag):
    e = _error(f"triage llm/x {flag}")
    assert e.key == "host_only_flag"
    assert flag.split()[0] not in e.usage


def test_triage_takes_the_namespace_flag_for_a_bare_name():
    assert parse_command("triage vllm-server -n search").target == Target("search", "vllm-server")


def test_profile_in_slack_reads_a_service_not_a_log_file():
    assert parse_command("profile llm/vllm-server").target == Target("llm", "vllm-server")
    assert _error("profile llm/x --access-log /var/log/a.log").key == "bad_flags"


def test_snapshot_in_slack_reads_a_service_not_the_bots_own_gpus():
    cmd = parse_command("snapshot llm/vllm-server --lang zh")
    assert (cmd.target, cmd.lang) == (Target("llm", "vllm-server"), "zh")
    e = _error("snapshot llm/vllm-server --count 3")
    assert e.key == "bad_flags"


def test_empty_text_and_help_ask_for_the_command_list():
    assert parse_command("").verb == "help"
    assert parse_command("help").topic is None
    assert parse_command("help triage").topic == "triage"
    assert parse_command("help nonsense").topic is None


def test_every_slack_verb_is_available():
    assert available_verbs(parser_with_budget) == SLACK_VERBS


def test_parse_target_checks_the_shape():
    assert parse_target("ns/app.v2", None) == Target("ns", "app.v2")
    with pytest.raises(CommandError):
        parse_target("", "llm")


@pytest.mark.parametrize("text,key", [
    ("triage -h", "help_verb"), ("budget", "bad_flags"), ("triage llm/x --context", "bad_flags"),
    ("--version", "unknown_verb"), ("triage llm/x extra", "bad_flags"), ("budget --engine", "bad_flags"),
])
def test_every_argparse_failure_becomes_a_command_error_never_an_exit(text, key):
    assert _error(text, parser_factory=parser_with_budget).key == key


@pytest.mark.parametrize(("target", "key"), [("LLM/x", "bad_target"), ("vllm-server", "missing_namespace"),
                                             ("a/b/c/d", "bad_target"), ("a/b/c", "bad_kind")])
def test_the_cli_and_slack_refuse_the_same_targets_in_the_same_words(target, key, capsys, monkeypatch):
    from bot.main import main
    from bot.render.i18n import Catalog

    monkeypatch.delenv("GPUMEM_CONFIG", raising=False)
    with pytest.raises(CommandError) as slack:
        parse_command(f"triage {target}")
    assert slack.value.key == key
    assert main(["triage", target, "--lang", "en"]) == 2
    worded = Catalog.load("en").t(f"slack.error.{key}", slack.value.params).rstrip(".")
    assert capsys.readouterr().err.strip() == f"gpumem: {worded}"


def _usage_error(capsys, argv: list[str]) -> str:
    from bot.grammar.commands import parse_argv

    with pytest.raises(SystemExit) as e:
        parse_argv(argv)
    assert e.value.code == 2
    return capsys.readouterr().err.strip().splitlines()[-1]


@pytest.mark.parametrize(("argv", "hint"), [
    (["triag"], "did you mean 'triage'?"),
    (["dashbords"], "did you mean 'dashboards'?"),
    (["triage", "--bundel", "x"], "--bundel: did you mean --bundle?"),
    (["plans", "--jsn"], "--jsn: did you mean --json?"),
    (["budget", "--engine", "vlm"], "did you mean 'vllm'?"),
])
def test_a_near_miss_gets_did_you_mean(capsys, argv, hint):
    assert _usage_error(capsys, argv).endswith(hint)


def test_a_word_near_nothing_gets_no_guess(capsys):
    line = _usage_error(capsys, ["zzzzqqq"])
    assert "invalid choice: 'zzzzqqq'" in line and "did you mean" not in line


def test_bundle_given_a_file_names_the_folder_to_pass(capsys, tmp_path):
    (tmp_path / "logs.txt").write_text("x")
    line = _usage_error(capsys, ["triage", "--bundle", str(tmp_path / "logs.txt")])
    assert line.endswith(f"logs.txt is a file; --bundle wants the folder holding the bundle's files (nvidia-smi.txt, "
                         f"metrics.txt, deployment.yaml, logs.txt, ...): --bundle {tmp_path}")


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_WORD = st.text(alphabet=st.sampled_from("abcISVClwsd-./_ 0"), max_size=12)


@settings(max_examples=300, deadline=None)
@given(parts=st.lists(_WORD, min_size=0, max_size=5), default_ns=st.one_of(st.none(), st.just("llm")))
def test_any_target_text_is_a_target_or_a_typed_usage_error(parts, default_ns):
    text = "/".join(parts)
    try:
        found = parse_target(text, default_ns)
    except CommandError as e:
        assert e.key in ("missing_target", "missing_namespace", "bad_target", "bad_kind")
        return
    assert found.kind in ("Deployment", "StatefulSet", "InferenceService", "LeaderWorkerSet")
    assert parse_target(str(found), None) == found
