"""The config's store and remediation sections: read into the policy, refused with file, line and field."""

from __future__ import annotations

from pathlib import Path

import pytest

from bot.config.remediation import store_path
from bot.config.settings import SettingsError, load_settings
from runbooks.remediation.policy import decide

FULL = """\
store:
  path: state/gpumem.db
remediation:
  enabled: true
  scopes:
    - {cluster: prod, namespace: llm}
  approvers:
    llm: [U0SRE1, S0ONCALL]
    "*": [U0ADMIN]
  two_approvals_for: [split_pools]
  ttl_s: 600
  watch_s: 300
  auto_rollback: true
  writer: {kubeconfig: writer.kubeconfig, context: prod-writer}
"""


def _load(tmp_path: Path, text: str):
    path = tmp_path / "gpumem.yaml"
    path.write_text(text)
    return load_settings(path, {})


def test_the_sections_become_the_policy_and_paths_are_relative_to_the_file(tmp_path):
    s = _load(tmp_path, FULL)
    policy = s.remediation.policy
    assert s.remediation.enabled and policy.ttl_s == 600 and policy.four_eyes
    assert policy.scopes == (("prod", "llm"),) and policy.two_approvals_for == ("split_pools",)
    assert (s.remediation.watch_s, s.remediation.auto_rollback) == (300.0, True)
    assert s.remediation.writer.kubeconfig == str(tmp_path / "writer.kubeconfig")
    assert store_path(s.store, {}) == tmp_path / "state" / "gpumem.db"
    assert decide(policy, "llm", requested_by="U0SRE1", user="U0ADMIN", user_groups=(), cluster="prod").allowed


def test_without_the_sections_remediation_is_off_and_the_store_is_under_xdg(tmp_path):
    s = load_settings(None, {})
    assert not s.remediation.enabled
    assert store_path(s.store, {"XDG_STATE_HOME": str(tmp_path)}) == tmp_path / "gpumem" / "gpumem.db"


@pytest.mark.parametrize(("text", "words"), [
    ("remediation:\n  enabled: true\n", "names no approvers"),
    ("remediation:\n  enabled: true\n  approvers:\n    llm: [alice]\n", "alice: approvers are Slack user ids"),
    ("remediation:\n  ttl_s: 0\n  approvers: {llm: [U1]}\n", "remediation.ttl_s: must be more than 0"),
    ("remediation:\n  enabled: true\n  approvers: {llm: [U1]}\n  approve_by: everyone\n", "approve_by"),
    ("store:\n  file: x.db\n", "file"),
])
def test_a_bad_section_names_the_file_line_and_field(tmp_path, text, words):
    with pytest.raises(SettingsError) as e:
        _load(tmp_path, text)
    message = str(e.value)
    assert words in message and "gpumem.yaml" in message
