"""One error vocabulary: the GpumemError base and its children, how collectors map the
Kubernetes API's failures onto them, and how each surface tells them (CLI exit code and line,
Slack reply), down to the bug this fixed: `/gpumem triage` of a Deployment that does not exist
ended as "could not finish: TargetNotFound ..." with a traceback in the log."""

from __future__ import annotations

import logging
import os
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest
import requests
import urllib3
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.client.rest import RESTResponse

from bot.grammar.slack import CommandError
from bot.main import fail, main
from bot.render.errors import error_line
from bot.render.i18n import Catalog
from bot.service import runners as slack_runner
from bot.service.exits import EXIT_NO_EVIDENCE, EXIT_USAGE, exit_code
from bot.slack.work import error_reply
from collectors.kube import client as kube
from collectors.kube.client import Call, KubeConfigError, KubeError, api_error
from runbooks.model import errors
from runbooks.model.errors import (
    AlreadyApproved,
    ChangedAfterApply,
    ChangedSincePlanned,
    EvidenceUnavailable,
    GpumemError,
    InvalidChange,
    NotPermitted,
    PartlyApplied,
    PlanExpired,
    PlanMoved,
    PlanNotFound,
    SplitChangedAfterApply,
    StaleObject,
    TargetNotFound,
    TemporaryError,
    UsageError,
    WriterNotConfigured,
)
from runbooks.sizing.whatif import PlanError, parse_what_if
from tests.support.fake_slack import FakeSlack, signed_headers, slash_body
from tests.support.kube_fixtures import running_scenario
from tests.support.slack_kit import (
    CHANNEL,
    SECRET,
    dispatch_command,
    drain,
    env_for,
    live_config,
    running_bot,
)

EN = Catalog.load("en")
NOT_FOUND_LINE = ("gpumem: Deployment llm/nope not found in context prod. Check the name and namespace "
                  "(kubectl get deploy -n NAMESPACE) and the --context.")


# ----------------------------------------------------------------------------- the classes


def test_the_base_carries_a_stable_code_and_its_params_and_says_only_those():
    e = GpumemError("what_if_syntax", item="tp")
    assert (e.code, e.params) == ("what_if_syntax", {"item": "tp"})
    assert str(e) == "what_if_syntax: {'item': 'tp'}"
    assert repr(e) == "GpumemError(\"what_if_syntax: {'item': 'tp'}\")"
    with pytest.raises(TypeError):
        GpumemError()  # the base has no default: only a child knows what it means


@pytest.mark.parametrize(("error", "code", "params"), [
    (UsageError(), "usage", {}),
    (UsageError("no_engine"), "no_engine", {}),
    (UsageError("not_positive", flag="tp", value=0), "not_positive", {"flag": "tp", "value": 0}),
    (EvidenceUnavailable(), "no_evidence", {}),
    (EvidenceUnavailable("no_histograms", path="m.txt"), "no_histograms", {"path": "m.txt"}),
    (TargetNotFound("Deployment", "llm", "x", "prod"), "not_found",
     {"kind": "Deployment", "namespace": "llm", "name": "x", "context": "prod"}),
    (NotPermitted("list", "pods", "llm"), "forbidden", {"verb": "list", "resource": "pods", "namespace": "llm"}),
    (StaleObject(), "conflict", {}),
    (StaleObject(name="x"), "conflict", {"name": "x"}),
    (ChangedSincePlanned(plan="p"), "changed_since_planned", {"plan": "p"}),
    (ChangedAfterApply(differences=[]), "changed_after_apply", {"differences": []}),
    (SplitChangedAfterApply(), "split_changed_after_apply", {}),
    (PartlyApplied(), "split_partly_applied", {}),
    (PlanMoved(state="applied"), "plan_moved", {"state": "applied"}),
    (PlanExpired(plan="p"), "plan_expired", {"plan": "p"}),
    (AlreadyApproved(approver="U1"), "already_approved", {"approver": "U1"}),
    (PlanNotFound(plan="p"), "plan_not_found", {"plan": "p"}),
    (WriterNotConfigured(), "no_writer", {}),
    (InvalidChange(detail="x"), "invalid_change", {"detail": "x"}),
    (TargetNotFound.no_source("llm/x"), "no_source", {"kind": "workload", "namespace": "llm", "name": "x",
                                                      "context": None}),
    (TemporaryError(), "temporary", {"delay_s": 1.0}),
    (TemporaryError(3.0, status=503), "temporary", {"delay_s": 3.0, "status": 503}),
])
def test_every_child_has_a_default_code_and_keeps_its_fields_as_params(error, code, params):
    assert isinstance(error, GpumemError)
    assert (error.code, error.params) == (code, params)


def test_children_carry_their_fields_as_attributes_and_read_as_sentences():
    missing = TargetNotFound("StatefulSet", "a", "b")
    assert (missing.kind, missing.namespace, missing.name, missing.context) == ("StatefulSet", "a", "b", None)
    assert str(missing) == "StatefulSet a/b not found"
    assert str(TargetNotFound("Deployment", "llm", "x", "prod")) == "Deployment llm/x not found in context prod"
    denied = NotPermitted("get", "pods/log", "llm")
    assert (denied.verb, denied.resource, denied.namespace) == ("get", "pods/log", "llm")
    assert denied.permission == "get pods/log in namespace llm" and str(denied) == "forbidden: get pods/log in namespace llm"
    assert NotPermitted("list", "nodes").permission == "list nodes cluster-wide"
    assert TemporaryError(2.5).delay_s == 2.5


def test_plan_error_is_a_usage_error_with_the_same_code_and_params():
    with pytest.raises(PlanError) as caught:
        parse_what_if("max-num-seqs=8,max-num-seqs=9")
    e = caught.value
    assert isinstance(e, UsageError) and isinstance(e, ValueError)
    assert (e.code, e.params) == ("what_if_duplicate", {"key": "max-num-seqs"})
    assert str(PlanError("what_if_empty")) == "what_if_empty: {}"
    with pytest.raises(TypeError):
        PlanError()  # every PlanError says which input


def test_the_surfaces_usage_errors_are_the_one_usage_error():
    e = CommandError("bad_target", "usage: /gpumem triage", target="X/y")
    assert isinstance(e, UsageError)
    assert (e.key, e.code, e.params, e.usage) == ("bad_target", "bad_target", {"target": "X/y"}, "usage: /gpumem triage")
    from bot.service import budget, profile

    assert budget.UsageError is UsageError
    assert not hasattr(profile, "_Stop")


def test_there_is_one_target_not_found():
    """A cluster's 404 and a target no evidence source knows are the same class, told apart by
    what it says (`source_unknown`), not by a subclass per room."""
    from_cluster = api_error(_api_exception(404), Call("get", "deployments", "llm", "x"))
    assert type(from_cluster) is errors.TargetNotFound and not isinstance(from_cluster, KubeError)
    assert str(errors.TargetNotFound("Deployment", "llm", "x", "prod")) == "Deployment llm/x not found in context prod"
    no_source = errors.TargetNotFound.no_source("llm/x")
    assert type(no_source) is errors.TargetNotFound and no_source.source_unknown and not from_cluster.source_unknown
    assert (str(no_source), no_source.target, no_source.code) == ("llm/x", "llm/x", "no_source")
    assert not hasattr(kube, "TargetNotFound") and not hasattr(slack_runner, "TargetNotFound")
    assert not issubclass(KubeConfigError, GpumemError)  # still a collector error, not a person's answer


# ----------------------------------------------------------------------------- api_error


def _api_exception(status: int, body: bytes = b"", headers: dict[str, str] | None = None,
                   reason: str = "Reason") -> ApiException:
    """The ApiException the client raises for an answer, built the way the client builds it."""
    raw = urllib3.HTTPResponse(body=body, headers=headers or {}, status=status, reason=reason, preload_content=True)
    response = RESTResponse(raw)
    response.read()
    with pytest.raises(ApiException) as caught:
        ApiException.from_response(http_resp=response, body=(response.data or b"").decode(), data=None)
    return caught.value


def test_404_is_target_not_found_of_the_object_the_call_names():
    cause = _api_exception(404, b'{"kind":"Status","message":"deployments.apps \\"x\\" not found"}')
    e = api_error(cause, Call("get", "deployments", "llm", "x", group="apps"))
    assert isinstance(e, errors.TargetNotFound) and e.code == "not_found"
    assert str(e) == "Deployment llm/x not found"
    assert e.__cause__ is cause


def test_403_names_the_missing_permission_of_the_call():
    call = Call("get", "pods", "llm", "vllm-0", "log")
    body = b'{"kind":"Status","message":"pods \\"vllm-0\\" is forbidden: User \\"x\\" cannot get resource"}'
    e = api_error(_api_exception(403, body), call)
    assert isinstance(e, NotPermitted)
    assert (e.verb, e.resource, e.namespace) == ("get", "pods/log", "llm")
    assert e.permission == call.permission == "get pods/log in namespace llm"
    assert e.params["detail"].startswith('pods "vllm-0" is forbidden')
    grouped = api_error(_api_exception(403), Call("list", "deployments", "llm", group="apps"))
    assert grouped.permission == Call("list", "deployments", "llm", group="apps").permission
    assert api_error(_api_exception(403), Call("list", "nodes")).permission == "list nodes cluster-wide"


def test_409_is_a_stale_object():
    e = api_error(_api_exception(409, b"the object has been modified"), Call("get", "deployments", "llm", "x"))
    assert type(e) is StaleObject
    assert e.params == {"resource": "deployments", "namespace": "llm", "name": "x",
                        "detail": "the object has been modified"}


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_busy_or_failing_servers_are_temporary_with_retry_after_as_the_delay(status):
    call = Call("list", "pods", "llm")
    e = api_error(_api_exception(status, headers={"Retry-After": "7"}), call)
    assert isinstance(e, TemporaryError) and e.delay_s == 7.0 and e.params["status"] == status
    assert api_error(_api_exception(status), call).delay_s == 1.0  # no header: 1 s
    assert api_error(_api_exception(status, headers={"retry-after": "soon"}), call).delay_s == 1.0


def test_retry_after_may_be_an_http_date():
    at = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    delay = api_error(_api_exception(503, headers={"Retry-After": at}), Call("list", "pods", "llm")).delay_s
    assert 25 <= delay <= 31
    past = format_datetime(datetime.now(UTC) - timedelta(seconds=30), usegmt=True)
    assert api_error(_api_exception(503, headers={"Retry-After": past}), Call("list", "pods", "llm")).delay_s == 0


def test_body_text_is_cut_to_256_characters_and_headers_are_not_copied():
    body = ("x" * 1000).encode()
    e = api_error(_api_exception(503, body, headers={"Authorization": "Bearer s3cr3t", "Retry-After": "2"}),
                  Call("list", "pods", "llm"))
    assert len(e.params["detail"]) == 256
    assert "s3cr3t" not in str(e) and "s3cr3t" not in repr(e.params)
    status_body = ('{"kind":"Status","message":"' + "y" * 400 + '"}').encode()
    assert len(api_error(_api_exception(409, status_body), Call("get", "pods", "llm", "p")).params["detail"]) == 256


def test_other_answers_say_nothing_could_be_read():
    e = api_error(_api_exception(401), Call("list", "pods", "llm"))
    assert isinstance(e, EvidenceUnavailable) and e.code == "unauthorized"
    assert api_error(_api_exception(400, b"bad"), Call("list", "pods", "llm")).code == "api_error"


def test_api_errors_of_the_real_client_against_a_stand_in_api_server(cluster):
    """The ApiExceptions the kubernetes client raises itself, for a missing Deployment, a
    forbidden list and an overloaded server."""
    api = cluster.api("prod")
    apps, core = k8s.AppsV1Api(api), k8s.CoreV1Api(api)
    with pytest.raises(ApiException) as missing:
        apps.read_namespaced_deployment("nope", "llm")
    e = api_error(missing.value, Call("get", "deployments", "llm", "nope", group="apps"))
    assert isinstance(e, errors.TargetNotFound) and str(e) == "Deployment llm/nope not found"

    cluster.kube.fail(r"/api/v1/namespaces/llm/events", 503)
    with pytest.raises(ApiException) as busy:
        core.list_namespaced_event("llm")
    assert isinstance(api_error(busy.value, Call("list", "events", "llm")), TemporaryError)

    cluster.kube.grant([{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}], namespace="llm")
    with pytest.raises(ApiException) as forbidden:
        core.list_namespaced_pod("llm")
    denied = api_error(forbidden.value, Call("list", "pods", "llm"))
    assert isinstance(denied, NotPermitted) and denied.permission == "list pods in namespace llm"
    assert denied.__cause__ is forbidden.value


# ----------------------------------------------------------------------------- the CLI's mapping


@pytest.mark.parametrize(("error", "code"), [
    (UsageError("no_engine"), EXIT_USAGE),
    (PlanError("what_if_empty"), EXIT_USAGE),
    (TargetNotFound("Deployment", "llm", "x"), EXIT_USAGE),
    (NotPermitted("list", "pods", "llm"), EXIT_USAGE),
    (StaleObject(), EXIT_USAGE),
    (ChangedSincePlanned(), EXIT_USAGE),
    (PartlyApplied(), EXIT_USAGE),
    (PlanMoved(), EXIT_USAGE),
    (PlanExpired(), EXIT_USAGE),
    (EvidenceUnavailable(), EXIT_NO_EVIDENCE),
    (TemporaryError(), EXIT_NO_EVIDENCE),
])
def test_each_class_has_its_exit_code(error, code):
    assert exit_code(error) == code


def test_fail_prints_one_line_from_the_verbs_catalog_or_the_shared_wording(capsys):
    assert fail(UsageError("no_engine"), "en", "budget_cli.error") == EXIT_USAGE
    assert capsys.readouterr().err == EN.t("budget_cli.error.no_engine") + "\n"
    assert fail(EvidenceUnavailable("no_histograms", path="m.txt"), "en", "profile_cli.error") == EXIT_NO_EVIDENCE
    assert capsys.readouterr().err == EN.t("profile_cli.error.no_histograms", path="m.txt") + "\n"
    assert fail(TargetNotFound("Deployment", "llm", "nope", "prod"), "en", "cli") == EXIT_USAGE
    assert capsys.readouterr().err == NOT_FOUND_LINE + "\n"
    assert fail(NotPermitted("list", "pods", "llm"), "en") == EXIT_USAGE
    assert "not permitted to list pods in namespace llm" in capsys.readouterr().err
    assert fail(TemporaryError(2.0), "zh") == EXIT_NO_EVIDENCE
    assert "2 秒后重试" in capsys.readouterr().err
    assert fail(UsageError("who_knows", x=1), "en", "budget_cli.error") == EXIT_USAGE  # a code the verb does not word
    assert capsys.readouterr().err == "gpumem: who_knows: {'x': 1}\n"


def test_verbs_raise_and_main_maps(tmp_path, capsys):
    assert main(["budget", "--lang", "en"]) == EXIT_USAGE
    assert capsys.readouterr().err == EN.t("budget_cli.error.no_engine") + "\n"
    empty = tmp_path / "access.log"
    empty.write_text("GET / 200\nGET /health 200\n")
    assert main(["profile", "--access-log", str(empty), "--lang", "en"]) == EXIT_NO_EVIDENCE
    assert capsys.readouterr().err == EN.t("profile_cli.error.no_lengths_access_log", path=str(empty)) + "\n"
    assert main(["profile", "--access-log", str(tmp_path / "none.log"), "--lang", "en"]) == EXIT_USAGE
    assert "no such file" in capsys.readouterr().err
    assert main(["triage", "--lang", "en"]) == EXIT_USAGE
    assert capsys.readouterr().err == EN.t("cli.no_target") + "\n"


def test_a_live_error_raised_inside_triage_is_mapped_by_main(monkeypatch, capsys):
    import bot.service.triage as live

    def busy(*args, **kwargs):
        raise TemporaryError(4.0, status=503)

    monkeypatch.setattr(live, "run_live_triage", busy)
    assert main(["triage", "llm/x", "--lang", "en"]) == EXIT_NO_EVIDENCE
    out = capsys.readouterr()
    assert out.err == EN.t("live.temporary", seconds=4.0) + "\n" and "Traceback" not in out.err


def test_cli_and_slack_word_a_missing_workload_alike():
    error = TargetNotFound("Deployment", "llm", "nope", "prod")
    assert error_line(EN, error) == NOT_FOUND_LINE
    assert error_reply(EN, error, "llm/nope") == NOT_FOUND_LINE
    assert error_reply(EN, errors.TargetNotFound.no_source("llm/nope"), "llm/nope") == "no evidence source knows llm/nope"


# ----------------------------------------------------------------------------- Slack


class _Raising:
    """A triage runner that fails the way live collection does."""

    def __init__(self, error: Exception):
        self.error = error

    def __call__(self, target, context, on_step):
        raise self.error


def _ended(fake) -> str:
    ends = fake.wait_for("chat.update", where=lambda c: c.args["text"].startswith("gpumem triage"))
    return ends[0].args["text"]


def test_slack_answers_a_missing_workload_with_the_clis_words_and_logs_no_error(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    runner = _Raising(TargetNotFound("Deployment", "llm", "nope", "prod"))
    with running_bot(tmp_path, runner=runner) as (fake, bot):
        assert dispatch_command(bot, fake, "triage llm/nope").status == 200
        text = _ended(fake)
        drain(bot)
    assert NOT_FOUND_LINE in text and "could not finish" not in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("triage llm/nope: not_found" in r.getMessage() for r in caplog.records)
    assert bot.metrics.registry.get_sample_value("gpumem_slack_commands_total",
                                                 {"verb": "triage", "outcome": "error"}) == 1


def test_slack_names_a_missing_permission(tmp_path, caplog):
    runner = _Raising(NotPermitted("list", "pods", "llm"))
    with running_bot(tmp_path, runner=runner) as (fake, bot):
        dispatch_command(bot, fake, "triage llm/x")
        text = _ended(fake)
        drain(bot)
    assert "not permitted to list pods in namespace llm" in text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


def test_live_triage_from_slack_of_a_deployment_that_does_not_exist(tmp_path, caplog):
    """The reproduction: `gpumem serve --http`, the real live runner and kubernetes client, a
    stand-in API server without llm/nope. The parent ends with the CLI's "not found" line, and
    nothing is logged as an error."""
    from bot.config.settings import load_settings
    from bot.serve import serve_http
    from bot.slack.serve import build_from_settings

    caplog.set_level(logging.INFO)
    with running_scenario("vllm-incident", tmp_path) as sc, FakeSlack() as fake:
        env = env_for(fake)
        settings = load_settings(live_config(tmp_path, sc.kubeconfig), env)
        bot = build_from_settings(settings, {**os.environ, **env})
        server = serve_http(bot, "127.0.0.1", 0)
        try:
            body = slash_body("triage llm/nope --context prod", fake.response_url(1), channel=CHANNEL)
            ack = requests.post(server.url + "/slack/events", data=body.encode(),
                                headers=signed_headers(SECRET, body), timeout=10)
            ended = fake.wait_for("chat.update", where=lambda c: "not found" in c.args["text"], timeout=60)[0]
        finally:
            server.close()
            bot.close(timeout_s=30)
    assert ack.status_code == 200
    assert ended.args["text"].endswith(": " + NOT_FOUND_LINE)
    assert ended.args["blocks"][0]["text"]["text"].startswith(":x:")
    assert "could not finish" not in ended.args["text"]
    errors_logged = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not errors_logged, [r.getMessage() for r in errors_logged]
    assert sc.kube.calls(resource="deployments", name="nope")


# ----------------------------------------------------------------------------- what each class says to do


def test_the_class_says_what_to_do_so_no_surface_reads_the_code():
    """A stale object is re-planned, a plan that moved is told and left, a rollback refused
    over changed values lists them: each its own class, children of the one they refine."""
    assert issubclass(ChangedSincePlanned, StaleObject) and issubclass(ChangedAfterApply, StaleObject)
    assert not issubclass(SplitChangedAfterApply, ChangedAfterApply)  # its rows are masked paths
    assert issubclass(PlanExpired, PlanMoved) and issubclass(AlreadyApproved, PlanMoved)
    assert not issubclass(PlanMoved, StaleObject) and not issubclass(PartlyApplied, StaleObject)
    assert issubclass(PlanNotFound, UsageError) and issubclass(WriterNotConfigured, UsageError)
    assert issubclass(InvalidChange, UsageError)


@pytest.mark.parametrize("error", [StaleObject(), ChangedSincePlanned(plan="p"), PlanMoved(state="applied"),
                                   PartlyApplied(proof="-"), SplitChangedAfterApply(differences=[])])
def test_what_changed_under_us_is_worded_as_the_conflict_it_was(error):
    assert error_line(Catalog.load("en"), error) == Catalog.load("en").t("live.conflict")



@pytest.mark.parametrize("lang, args, words", [
    ("zh", ["--kubeconfig", "{missing}"], ["没有可读取的集群：{missing}（“", "请传入 --context"]),
    ("zh", [], ["默认 kubeconfig（$KUBECONFIG 或 ~/.kube/config）（“"]),
    ("zh", ["--in-cluster"], ["Pod 的服务账号（“"]),
    ("en", [], ["no cluster to read: the default kubeconfig ($KUBECONFIG or ~/.kube/config): "]),
    ("en", ["--in-cluster"], ["no cluster to read: the pod's service account: "]),
])
def test_no_cluster_names_its_source_in_the_readers_language(tmp_path, monkeypatch, capsys, lang, args, words):
    missing = str(tmp_path / "no-such-kubeconfig")
    monkeypatch.setenv("KUBECONFIG", missing)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    code = main(["triage", "llm/vllm-server", "--lang", lang, *(a.format(missing=missing) for a in args)])
    err = capsys.readouterr().err
    assert code == EXIT_USAGE
    assert "Traceback" not in err and err.count("\n") == 1
    for word in words:
        assert word.format(missing=missing) in err
    if lang == "zh":
        assert "in-cluster service account" not in err and "default kubeconfig:" not in err


def test_kube_config_error_keeps_its_parts_and_an_english_message_for_logs():
    e = KubeConfigError("Service host/port is not set.", None, in_cluster=True)
    assert (e.reason, e.kubeconfig, e.in_cluster) == ("Service host/port is not set.", None, True)
    assert str(e) == "in-cluster service account: Service host/port is not set."


@pytest.mark.parametrize("lang, words", [
    ("en", "gpumem: the config's bundles: names {path} for llm/gone, and that folder does not exist."),
    ("zh", "gpumem：配置的 bundles: 为 llm/gone 指定了 {path}，但该目录不存在。"),
])
def test_a_configured_bundle_that_is_gone_is_an_answer_in_the_channels_language(tmp_path, lang, words):
    from bot.service.runners import BundleRunner

    path = str(tmp_path / "moved-away")
    with pytest.raises(errors.UsageError) as caught:
        BundleRunner({"llm/gone": path})("llm/gone", None, lambda *_: None)
    assert caught.value.code == "bundle_folder_missing"
    assert error_reply(Catalog.load(lang), caught.value, "llm/gone").startswith(words.format(path=path))
