"""The bot's settings: YAML + environment, secrets kept out of sight, errors that point at the line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from bot.config.settings import DEFAULT_SLACK_API_URL, SettingsError, load_settings

BOT = "xoxb-1111-2222-secretbotvalue"
SIGNING = "8f14e45fceea167a5a36dedd4bea2543"
APP = "xapp-1-A0-secretappvalue"

FULL = """\
default_namespace: llm
default_context: prod-a
allowed_namespaces: [llm, search]
clusters:
  - context: prod-a
    prometheus:
      url: https://prometheus.prod-a.internal/
      bearer_token_file: prom-token
  - context: prod-b
    kubeconfig: kube/prod-b.yaml
    namespaces: [llm]
slack:
  default_lang: en
  channels:
    C0INCIDENT: {lang: en}
    C0ZHONCALL: {lang: zh, namespaces: [llm]}
workers:
  pool_size: 8
  queue_length: 100
  listener_threads: 96
deadlines:
  triage_s: 120
  progress_interval_s: 1.5
http:
  port: 8080
bundles:
  drill/vllm: bundles/drill
"""


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "gpumem.yaml"
    path.write_text(text)
    return path


def _error(tmp_path: Path, text: str, env: dict | None = None) -> str:
    with pytest.raises(SettingsError) as info:
        load_settings(_write(tmp_path, text), env or {})
    return str(info.value)


def test_without_a_file_the_defaults_and_slacks_api_apply():
    s = load_settings(None, {})
    assert s.slack.api_url == DEFAULT_SLACK_API_URL
    assert (s.workers.pool_size, s.workers.queue_length, s.deadlines.progress_interval_s) == (4, 64, 1.0)
    assert s.channel_policy("C1") is None  # no channels configured: gpumem answers nowhere


def test_the_api_url_comes_from_the_environment_and_keeps_a_trailing_slash():
    s = load_settings(None, {"GPUMEM_SLACK_API_URL": "http://127.0.0.1:9999/api"})
    assert s.slack.api_url == "http://127.0.0.1:9999/api/"
    with pytest.raises(SettingsError, match="GPUMEM_SLACK_API_URL"):
        load_settings(None, {"GPUMEM_SLACK_API_URL": "ftp://x"})


def test_a_full_file_is_read_into_the_tree(tmp_path):
    (tmp_path / "prom-token").write_text("prom-secret-token\n")
    s = load_settings(_write(tmp_path, FULL), {"SLACK_BOT_TOKEN": BOT})
    assert s.default_namespace == "llm" and s.default_context == "prod-a"
    assert [c.context for c in s.clusters] == ["prod-a", "prod-b"]
    assert s.clusters[0].prometheus.url == "https://prometheus.prod-a.internal"
    assert s.clusters[0].prometheus.bearer_token.reveal() == "prom-secret-token"
    assert s.clusters[1].kubeconfig == str(tmp_path / "kube" / "prod-b.yaml")
    assert (s.workers.pool_size, s.workers.queue_length, s.workers.listener_threads) == (8, 100, 96)
    assert (s.deadlines.triage_s, s.deadlines.progress_interval_s) == (120.0, 1.5)
    assert s.http.port == 8080
    assert s.bundles["drill/vllm"] == str(tmp_path / "bundles" / "drill")
    assert s.lang_for("C0ZHONCALL") == "zh" and s.lang_for("C0INCIDENT") == "en"


def test_namespaces_are_allowed_per_cluster_and_per_channel(tmp_path):
    s = load_settings(_write(tmp_path, FULL.replace("      bearer_token_file: prom-token\n", "")), {})
    assert s.namespace_allowed("search", None, "C0INCIDENT")
    assert not s.namespace_allowed("search", "prod-b", "C0INCIDENT")  # prod-b only has llm
    assert not s.namespace_allowed("search", None, "C0ZHONCALL")  # the channel only asks about llm
    assert not s.namespace_allowed("kube-system", None, "C0INCIDENT")
    assert s.context_known(None) and s.context_known("prod-b") and not s.context_known("prod-z")


def test_a_wildcard_channel_admits_every_channel(tmp_path):
    s = load_settings(_write(tmp_path, "slack:\n  channels:\n    '*': {lang: zh}\n"), {})
    assert s.channel_policy("CANY") is not None and s.lang_for("CANY") == "zh"


def test_secrets_come_from_the_environment_or_files(tmp_path):
    (tmp_path / "signing").write_text(SIGNING + "\n")
    s = load_settings(None, {"SLACK_BOT_TOKEN": BOT, "SLACK_SIGNING_SECRET_FILE": str(tmp_path / "signing"),
                             "SLACK_APP_TOKEN": APP})
    assert s.slack.bot_token.reveal() == BOT
    assert s.slack.signing_secret.reveal() == SIGNING
    assert s.slack.app_token.reveal() == APP


def test_no_repr_or_str_shows_a_secret(tmp_path):
    (tmp_path / "prom-token").write_text("prom-secret-token")
    s = load_settings(_write(tmp_path, FULL), {"SLACK_BOT_TOKEN": BOT, "SLACK_SIGNING_SECRET": SIGNING,
                                                "SLACK_APP_TOKEN": APP})
    for text in (repr(s), str(s), repr(s.slack), str(s.slack.bot_token), f"{s.clusters[0]}"):
        for secret in (BOT, SIGNING, APP, "prom-secret-token", "secretbotvalue"):
            assert secret not in text
    assert "Secret(from SLACK_BOT_TOKEN, '***')" in repr(s)


def test_settings_are_frozen():
    s = load_settings(None, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.default_namespace = "x"  # type: ignore[misc]
    with pytest.raises(TypeError):
        s.slack.channels["C1"] = None  # type: ignore[index]


def test_a_secret_set_twice_is_refused():
    with pytest.raises(SettingsError, match="SLACK_BOT_TOKEN and SLACK_BOT_TOKEN_FILE"):
        load_settings(None, {"SLACK_BOT_TOKEN": BOT, "SLACK_BOT_TOKEN_FILE": "/x"})


def test_a_missing_secret_file_names_the_variable_and_path_but_no_value(tmp_path):
    with pytest.raises(SettingsError) as info:
        load_settings(None, {"SLACK_SIGNING_SECRET_FILE": str(tmp_path / "nope")})
    assert "SLACK_SIGNING_SECRET_FILE" in str(info.value) and "nope" in str(info.value)


@pytest.mark.parametrize("name,value", [("SLACK_BOT_TOKEN", "xoxp-user-token"), ("SLACK_APP_TOKEN", "xoxb-1")])
def test_the_wrong_kind_of_token_is_refused(name, value):
    with pytest.raises(SettingsError, match=name):
        load_settings(None, {name: value})


def test_require_names_the_missing_variables():
    s = load_settings(None, {"SLACK_BOT_TOKEN": BOT})
    s.require("bot_token")
    with pytest.raises(SettingsError, match="SLACK_SIGNING_SECRET"):
        s.require("bot_token", "signing_secret")


@pytest.mark.parametrize("text,where,what", [
    ("workers:\n  pool_size: four\n", ":2: workers.pool_size:", "whole number"),
    ("workers:\n  pool_size: 0\n", ":2: workers.pool_size:", "more than 0"),
    ("slack:\n  chanels: {}\n", ":2: slack.chanels:", "unknown field"),
    ("slack:\n  bot_token: xoxb-in-the-file\n", ":2: slack.bot_token:", "do not belong in the config file"),
    ("slack:\n  default_lang: fr\n", ":2: slack.default_lang:", "not one of en, zh"),
    ("slack:\n  channels:\n    C1: {lang: de}\n", ":3: slack.channels.C1.lang:", "not one of en, zh"),
    ("slack:\n  channels:\n    C1:\n      watch: [vllm-server]\n", ":4: slack.channels.C1.watch.0:",
     "not NAMESPACE/DEPLOYMENT"),
    ("clusters:\n  - kubeconfig: x\n", ":2: clusters.0:", "needs a context"),
    ("prometheus:\n  url: prom:9090\n", ":2: prometheus.url:", "not an http(s) URL"),
    ("deadlines:\n  triage_s: soon\n", ":2: deadlines.triage_s:", "expected a number"),
    ("http:\n  port: 70000\n", ":2: http.port:", "not a TCP port"),
    ("default_namespace: llm\ndefault_namespace: x\n", ":2: default_namespace:", "duplicate field"),
    ("allowed_namespaces: llm\n", ":1: allowed_namespaces:", "expected a list"),
])
def test_errors_name_the_file_the_line_and_the_field(tmp_path, text, where, what):
    message = _error(tmp_path, text)
    assert message.startswith(str(tmp_path / "gpumem.yaml") + where), message
    assert what in message


def test_broken_yaml_is_reported_with_its_line(tmp_path):
    message = _error(tmp_path, "slack:\n  channels: [C1\n")
    assert ":3: not valid YAML" in message or ":2: not valid YAML" in message


def test_an_unreadable_file_is_reported(tmp_path):
    with pytest.raises(SettingsError, match="cannot read the config file"):
        load_settings(tmp_path / "missing.yaml", {})


def test_the_config_path_can_come_from_the_environment(tmp_path):
    path = _write(tmp_path, "default_namespace: from-env\n")
    assert load_settings(None, {"GPUMEM_CONFIG": str(path)}).default_namespace == "from-env"


def test_a_cluster_is_named_by_its_name_or_its_kube_context(tmp_path):
    s = load_settings(_write(tmp_path, "default_context: prod-a\nclusters:\n"
                                       "  - name: prod-a\n    context: gke_acme_us-east1_prod-a\n"
                                       "  - context: staging\n"), {})
    assert s.cluster(None).context == "gke_acme_us-east1_prod-a"
    assert s.cluster("prod-a") is s.cluster("gke_acme_us-east1_prod-a")
    assert s.clusters[1].name == "staging"
    assert s.context_known("prod-a") and not s.context_known("prod-z")


def test_the_documented_example_file_loads(tmp_path):
    example = Path(__file__).resolve().parent.parent / "deploy" / "gpumem.example.yaml"
    secret = tmp_path / "prometheus-token"
    secret.write_text("prom-token\n")
    text = example.read_text().replace("/var/run/secrets/gpumem/prometheus-token", str(secret))
    s = load_settings(_write(tmp_path, text), {"SLACK_BOT_TOKEN": BOT, "SLACK_SIGNING_SECRET": SIGNING})
    assert s.cluster("prod-a").prometheus.bearer_token.reveal() == "prom-token"
    assert s.lang_for("C0456ONCALLZH") == "zh"
    assert (s.workers.pool_size, s.deadlines.collect_s) == (4, 20.0)
    assert "prom-token" not in repr(s)


def test_a_channels_watch_list_is_read_in_order_without_repeats(tmp_path):
    path = tmp_path / "gpumem.yaml"
    path.write_text("slack:\n  channels:\n    C1: {watch: [llm/b, llm/a, llm/b]}\n    C2: {lang: zh}\n")
    s = load_settings(str(path), {})
    assert s.watched("C1") == ("llm/b", "llm/a") and s.watched("C2") == () and s.watched("C9") == ()
