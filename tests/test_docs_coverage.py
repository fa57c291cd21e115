"""The docs against the code (sqlite-utils' tests/test_docs.py, for our surfaces): every verb of
the command grammar has an entry in docs/cli.md, every field the config loader accepts one in
docs/config.md, every key a `--json` output prints one in docs/json.md, and every relative link
in README.md and docs/*.md points at a file, and a heading, that exists. Each failure names what
is missing. The helpers are pure, and the last tests feed each one a made-up gap: a check that
cannot fail would pass a page that drifted."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from bot.config.settings import load_settings
from bot.config.yaml_io import YamlDoc
from bot.grammar.commands import VERBS

# The grammar, the config loader and the CLI entry point: the one place to change when they move.
from bot.main import main as gpumem

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
EXAMPLES = ROOT / "examples"
RUNBOOK_INCIDENT = EXAMPLES / "runbook-incident"

#: JSON values whose keys are names, not schema (a fact's params, a budget's assumptions, maps
#: keyed by bucket, flag or column, the rule file itself): documented as a whole, not walked
DATA_MAPS = frozenset({"params", "assumptions", "assumption_reasons", "document", "changed", "detail", "counts", "bucket_p95_tokens",
                       "shares", "lines", "queries", "readings"})


def grammar_verbs() -> list[str]:
    """The verbs `gpumem` accepts, in the grammar's order."""
    return list(VERBS)


# ----------------------------------------------------------------------------- pure helpers


def backticked(text: str) -> set[str]:
    """Every `code` span of a page, normalised: `[]` and a trailing `()` dropped, each `<name>`
    placeholder written `<*>`.

    >>> sorted(backticked("`a.b[]` and `slack.channels.<channel>.lang`, ``x``"))
    ['a.b', 'slack.channels.<*>.lang', 'x']
    """
    spans = re.findall(r"`+([^`]+?)`+", text)
    return {re.sub(r"<[^<>`]+>", "<*>", s.strip().replace("[]", "")) for s in spans}


def section(text: str, heading: str) -> str:
    """The body of the `## heading` section of a page, up to the next `## ` heading."""
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"no section '## {heading}'"
    return match.group(1)


def missing_verbs(verbs: Iterable[str], page: str) -> list[str]:
    """The verbs with neither a heading naming `gpumem VERB` nor a line starting with it."""
    def has(verb: str) -> bool:
        entry = rf"gpumem {re.escape(verb)}(?![\w-])"
        return bool(re.search(rf"^#+ .*{entry}", page, re.M) or re.search(rf"^\s*{entry}", page, re.M))
    return [v for v in verbs if not has(v)]


def config_fields(records: Iterable[tuple[tuple[str | int, ...], tuple[str, ...]]]) -> list[str]:
    """Dotted field names from the loader's `(path, allowed keys)` checks: list items as `[]`,
    keys the user chooses (a channel id, a namespace) as `<*>`.

    >>> config_fields([((), ("slack", "clusters")), (("slack",), ("channels",)),
    ...                (("slack", "channels", "C0123"), ("lang",)), (("clusters", 0), ("name",))])
    ['clusters', 'clusters[].name', 'slack', 'slack.channels', 'slack.channels.<*>.lang']
    """
    allowed_at: dict[tuple, set[str]] = {}
    records = list(records)
    for path, allowed in records:
        allowed_at.setdefault(tuple(path), set()).update(allowed)

    def name(path: tuple) -> str:
        out = ""
        for i, part in enumerate(path):
            if isinstance(part, int):
                out += "[]"
            else:
                literal = part in allowed_at.get(tuple(path[:i]), ())
                out += ("." if out else "") + (part if literal else "<*>")
        return out

    fields = set()
    for path, allowed in records:
        parent = name(tuple(path))
        fields.update(f"{parent}.{key}" if parent else key for key in allowed)
    return sorted(fields)


def undocumented_fields(fields: Iterable[str], page: str) -> list[str]:
    spans = backticked(page)
    return [f for f in fields if f.replace("[]", "") not in spans]


def json_paths(doc: Any, prefix: str = "") -> Iterator[str]:
    """Every key path of a JSON document (`a.b[].c`), not walking into DATA_MAPS.

    >>> sorted(json_paths({"a": [{"b": 1}], "params": {"x": 1}}))
    ['a', 'a[].b', 'params']
    """
    if isinstance(doc, dict):
        for key, value in doc.items():
            path = f"{prefix}.{key}" if prefix else key
            yield path
            if key not in DATA_MAPS:
                yield from json_paths(value, path)
    elif isinstance(doc, list):
        for item in doc:
            yield from json_paths(item, prefix + "[]")


def undocumented_keys(paths: Iterable[str], body: str) -> list[str]:
    """The key paths whose full dotted name and leaf name are both absent from the section."""
    spans = backticked(body)
    out = []
    for path in sorted(set(paths)):
        flat = path.replace("[]", "")
        if flat not in spans and flat.rsplit(".", 1)[-1] not in spans:
            out.append(path)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens.

    >>> slug("In the terminal: apply --yes and rollback")
    'in-the-terminal-apply---yes-and-rollback'
    >>> slug("The store: `gpumem plans` and `gpumem audit`")
    'the-store-gpumem-plans-and-gpumem-audit'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: str) -> set[str]:
    out: set[str] = set()
    for heading in re.findall(r"^#+ (.+)$", re.sub(r"^```.*?^```", "", page, flags=re.M | re.S), re.M):
        base = slug(heading)
        name, n = base, 0
        while name in out:  # GitHub numbers a repeated heading: x, x-1, x-2
            n += 1
            name = f"{base}-{n}"
        out.add(name)
    return out


def broken_links(path: Path) -> list[str]:
    """The relative links of a markdown file whose file, or heading, is not there."""
    text = path.read_text(encoding="utf-8")
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    out = []
    for target in re.findall(r"\[[^\]]*\]\(([^()\s]+)\)", prose):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            out.append(f"{path.name}: {target} (no such file)")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest.read_text(encoding="utf-8")):
            out.append(f"{path.name}: {target} (no such heading)")
    return out


# ----------------------------------------------------------------------------- what the code emits


def _cli_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    capsys.readouterr()
    code = gpumem(list(argv))
    out = capsys.readouterr().out
    assert code in (0, 1, 3), (argv, code)  # 3: insufficient_evidence, a verdict with its JSON
    return json.loads(out)


def _loader_checks(tmp_path: Path) -> list[tuple[tuple, tuple]]:
    """The `(path, allowed keys)` checks the config loader makes on a file that uses every
    section, each list with an entry and each map with a key."""
    token = tmp_path / "token"
    token.write_text("t0ken-for-the-docs-test\n")
    (tmp_path / "kubeconfig").write_text("apiVersion: v1\nkind: Config\n")
    (tmp_path / "config.yaml").write_text(f"""
default_namespace: llm
default_context: prod
allowed_namespaces: [llm]
clusters:
  - name: prod
    context: prod-ctx
    kubeconfig: {tmp_path / "kubeconfig"}
    namespaces: [llm]
    prometheus: {{url: "https://prom.example", bearer_token_file: {token}, username: u, password_file: {token},
                 ca_file: {token}, timeout_s: 5}}
prometheus: {{url: "https://prom.example", bearer_token_file: {token}, timeout_s: 5}}
slack:
  api_url: "https://slack.example/api/"
  command: /gpumem
  default_lang: en
  verify_token_at_start: false
  channels:
    C0123ABCD: {{lang: en, namespaces: [llm], watch: [llm/vllm-server]}}
workers: {{pool_size: 2, queue_length: 8, listener_threads: 2, http_threads: 2}}
deadlines: {{triage_s: 60, verb_s: 30, progress_interval_s: 1, slack_call_s: 10, source_s: 5, collect_s: 20}}
http: {{host: 127.0.0.1, port: 3000}}
bundles: {{drill/vllm-server: {RUNBOOK_INCIDENT}}}
store: {{path: {tmp_path / "gpumem.db"}}}
remediation:
  enabled: true
  scopes: [{{cluster: prod, namespace: llm}}]
  approvers: {{llm: [U0123ABCD]}}
  four_eyes: true
  two_approvals_for: [scale]
  ttl_s: 900
  watch_s: 600
  auto_rollback: false
  expiry_sweep_s: 60
  writer: {{kubeconfig: {tmp_path / "kubeconfig"}, context: prod-ctx}}
schedules:
  - {{channel: C0123ABCD, cron: "0 9 * * *", timezone: UTC, grace_s: 3600}}
scheduler:
  election: file
  lease_name: gpumem-scheduler
  lease_namespace: gpumem
  lease_duration_s: 30
  lock_path: {tmp_path / "lock"}
  interval_s: 30
  review_after_s: 43200
  review_channel: C0123ABCD
alerts:
  labels: {{namespace: namespace, deployment: deployment, pod: pod, cluster: cluster, severity: severity}}
  routes:
    - {{namespace: llm, cluster: prod, severity: critical, channel: C0123ABCD}}
  default_channel: C0123ABCD
  triage_interval_s: 1800
  max_triages: 2
  dedupe_window_s: 86400
  queue_length: 16
""")
    seen: list[tuple[tuple, tuple]] = []
    real = YamlDoc.only_keys

    def recording(self: YamlDoc, path: tuple, allowed: tuple[str, ...]) -> None:
        seen.append((tuple(path), tuple(allowed)))
        real(self, path, allowed)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(YamlDoc, "only_keys", recording)
        load_settings(tmp_path / "config.yaml", {})
    return seen


def _json_outputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> dict[str, set[str]]:
    """docs/json.md section -> every key path the JSON outputs print on the bundled examples."""
    deployment, access = RUNBOOK_INCIDENT / "deployment.yaml", RUNBOOK_INCIDENT / "access.log"
    runs: dict[str, list[list[str]]] = {
        "triage": [["triage", "--bundle", str(b), "--json"] for b in sorted(EXAMPLES.iterdir()) if b.is_dir()],
        "budget": [
            ["budget", "--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB", "--json"],
            ["budget", "--from-deployment", str(deployment), "--profile", str(access), "--json"],
            ["budget", "--from-deployment", str(deployment), "--what-if", "max-num-seqs=32", "--json"],
            ["budget", "--engine", "tgi", "--model", "meta-llama/Llama-2-7b-hf", "--gpu", "A10G",
             "--engine-version", "1.4", "--json"],
            ["budget", "--engine", "sglang", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "L4", "--json"],
        ],
        "profile": [
            ["profile", "--access-log", str(access), "--json"],
            ["profile", "--access-log", str(access), "--baseline",
             str(EXAMPLES / "mixed-pool-vllm-v1" / "access.log"), "--json"],
        ],
        "rules": [["rules", "--json"], ["rules", "-o", "rules", "--engine", "tgi", "--json"]],
    }
    store = str(tmp_path / "gpumem.db")
    assert gpumem(["note", "--store", store, "llm/vllm-server", "max-num-seqs", "64", "while", "the", "batch", "runs"]) == 0
    runs["notes"] = [["notes", "--store", store, "--json"]]
    runs["handover"] = [["handover", "--store", store, "--offline", "--json"]]
    runs["plans and audit"] = [["audit", "--store", store, "--json"]]
    runs["audit --verify"] = [["audit", "--verify", "--store", store, "--json"]]
    out: dict[str, set[str]] = {}
    for name, argvs in runs.items():
        for argv in argvs:
            out.setdefault(name, set()).update(json_paths(_cli_json(capsys, *argv)))
    return out


# ----------------------------------------------------------------------------- the checks


def test_every_verb_has_an_entry_in_the_cli_page():
    verbs = grammar_verbs()
    assert len(verbs) >= 17 and "triage" in verbs
    missing = missing_verbs(verbs, (DOCS / "cli.md").read_text(encoding="utf-8"))
    assert not missing, f"docs/cli.md has no entry (a '## gpumem VERB' heading or a 'gpumem VERB' line) for: {missing}"


def test_every_config_field_has_an_entry_in_the_config_page(tmp_path):
    fields = config_fields(_loader_checks(tmp_path))
    # the file above reached every section: its nested fields were checked, not only the top level
    for field in ("slack.channels.<*>.watch", "clusters[].prometheus.timeout_s", "remediation.writer.context",
                  "schedules[].grace_s", "alerts.routes[].severity", "alerts.labels.pod", "deadlines.slack_call_s"):
        assert field in fields, field
    missing = undocumented_fields(fields, (DOCS / "config.md").read_text(encoding="utf-8"))
    assert not missing, f"docs/config.md has no entry for these config fields: {missing}"


def test_every_json_key_has_an_entry_in_the_json_page(capsys, tmp_path, monkeypatch):
    # a triage records into the default store when one exists: keep it in tmp_path
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("GPUMEM_CONFIG", raising=False)
    page = (DOCS / "json.md").read_text(encoding="utf-8")
    outputs = _json_outputs(capsys, tmp_path)
    assert {"verdict.primary", "verdict.causes[].evidence_for[].key", "checks[].missing[].key"} <= outputs["triage"]
    assert {"plan.reasons[].flag", "buckets.rows[].fit_in_kv", "before", "after", "changed"} <= outputs["budget"]
    missing = [f"{name}: {key}" for name, paths in outputs.items() for key in undocumented_keys(paths, section(page, name))]
    assert not missing, f"docs/json.md has no entry for these JSON keys (section: key): {missing}"


def test_every_environment_variable_gpumem_reads_has_an_entry_in_the_config_page():
    from bot.config.environ import NAMES

    page = (DOCS / "config.md").read_text(encoding="utf-8")
    section = page[page.index("## Environment"):]
    missing = [name for name in NAMES if f"`{name}`" not in section]
    assert not missing, f"docs/config.md's Environment section has no entry for: {missing}"


def test_every_relative_link_points_at_a_file_and_heading_that_exist():
    pages = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
    assert len(pages) >= 11
    broken = [b for page in pages for b in broken_links(page)]
    assert not broken, f"broken links: {broken}"


def test_the_readme_stays_a_guide():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    assert "make demo" in readme and "make test" in readme
    assert "(docs/development.md)" in readme


# ----------------------------------------------------------------------------- the checks can fail


def test_a_verb_without_an_entry_is_named():
    page = "## gpumem triage\n\n```\ngpumem notes --json\n```\n"
    assert missing_verbs(["triage", "notes", "note", "frobnicate"], page) == ["note", "frobnicate"]


def test_a_config_field_without_an_entry_is_named():
    records = [((), ("store", "slack")), (("store",), ("path", "mode")), (("slack",), ("channels",)),
               (("slack", "channels", "C9"), ("lang",))]
    page = "| `store` | | |\n| `store.path` | | |\n| `slack`, `slack.channels`, `slack.channels.<id>.lang` | | |\n"
    assert undocumented_fields(config_fields(records), page) == ["store.mode"]


def test_a_json_key_without_an_entry_is_named():
    doc = {"verdict": {"primary": "x", "made_up": 1}, "findings": [{"id": "f", "facts": [{"params": {"a": 1}}]}]}
    body = "`verdict.primary`, `findings[]` (`id`, `facts[]`, `params`), `verdict`"
    assert undocumented_keys(json_paths(doc), body) == ["verdict.made_up"]


@pytest.mark.parametrize("link, problem", [
    ("[x](missing.md)", "missing.md (no such file)"),
    ("[x](other.md#no-such-heading)", "other.md#no-such-heading (no such heading)"),
    ("[x](#nowhere)", "#nowhere (no such heading)"),
])
def test_a_broken_link_is_named(tmp_path, link, problem):
    (tmp_path / "other.md").write_text("# Other\n\n## Real heading\n")
    page = tmp_path / "page.md"
    page.write_text(f"# Page\n\nSee [ok](other.md#real-heading), [ok](#page) and {link}.\n\n```\n[x](in-code.md)\n```\n")
    assert broken_links(page) == [f"page.md: {problem}"]


def test_the_real_checks_fail_on_a_made_up_gap(tmp_path):
    """The page checks above, run against the real pages with one entry taken out or one verb
    added: each failure message names the gap."""
    verbs = [*grammar_verbs(), "frobnicate"]
    assert missing_verbs(verbs, (DOCS / "cli.md").read_text(encoding="utf-8")) == ["frobnicate"]
    config = (DOCS / "config.md").read_text(encoding="utf-8").replace("`workers.http_threads`", "`workers.http`")
    assert undocumented_fields(config_fields(_loader_checks(tmp_path)), config) == ["workers.http_threads"]
    body = section((DOCS / "json.md").read_text(encoding="utf-8"), "rules")
    assert undocumented_keys({"not_written[].reason", "made_up_key"}, body) == ["made_up_key"]
