"""`budget` and `profile` are use cases like the others: `(request, deps)` in, a typed outcome
out, no language; the renderers word them, and the charts a live triage writes are drawn by the
drawer a surface hands in (`bot.service` imports no `bot.render`)."""

from __future__ import annotations

import pytest

from bot.config.environ import Environment
from bot.grammar.requests import BudgetRequest, ProfileRequest
from bot.main import main
from bot.render import budget as render
from bot.render import triage_charts
from bot.render.i18n import Catalog
from bot.service.budget import run_budget
from bot.service.deps import Deps
from bot.service.exits import EXIT_OK, EXIT_USAGE
from bot.service.outcomes import BudgetOutcome, BudgetPage, BudgetSide, ProfileView
from bot.service.profile import build_profile
from bot.verbs.worker import run_verb
from runbooks.model.errors import UsageError
from tests.support.kube_fixtures import running_scenario

DEPS = Deps(Environment())
QWEN = dict(engine="vllm", model="Qwen/Qwen2.5-7B-Instruct", gpu="A100-80GB", max_model_len=8192)
BUDGET_ARGV = ["budget", "--engine", "vllm", "--model", "Qwen/Qwen2.5-7B-Instruct", "--gpu", "A100-80GB",
               "--max-model-len", "8192"]


def test_budget_returns_its_page_as_data_and_the_renderer_words_it_in_either_language():
    outcome = run_budget(BudgetRequest(**QWEN, what_if="max-num-seqs=64"), DEPS)
    assert isinstance(outcome, BudgetOutcome) and outcome.exit_code == EXIT_OK
    page = outcome.page
    assert isinstance(page, BudgetPage) and isinstance(page.before, BudgetSide) and isinstance(page.after, BudgetSide)
    assert page.changed == {"max-num-seqs": {"before": page.before.budget.max_num_seqs, "after": 64}}
    assert page.after.budget.max_num_seqs == 64 and page.before.budget.max_num_seqs != 64
    # one outcome, two languages: the language is the renderer's alone
    en, zh = render.page_text(page, "en"), render.page_text(page, "zh")
    assert en != zh and "Qwen/Qwen2.5-7B-Instruct" in en and "Qwen/Qwen2.5-7B-Instruct" in zh
    assert render.page_json(page, "en")["changed"] == page.changed


@pytest.mark.parametrize(("spec", "kind"), [("max-num-seqs=lots", "int"), ("enforce-eager=maybe", "bool")])
def test_a_what_if_of_the_wrong_kind_names_the_kind_by_code_and_each_surface_words_it(spec, kind, capsys):
    with pytest.raises(UsageError) as caught:
        run_budget(BudgetRequest(**QWEN, what_if=spec), DEPS)
    assert (caught.value.code, caught.value.params["expected"]) == ("what_if_bad_value", kind)
    key, value = spec.split("=")
    for lang in ("en", "zh"):
        cat = Catalog.load(lang)
        line = cat.t("budget_cli.error.what_if_bad_value",
                     {"key": key, "value": value, "expected": cat.t(f"budget_cli.kind.{kind}")})
        assert render.worded_error(caught.value, lang).params["expected"] == cat.t(f"budget_cli.kind.{kind}")
        assert main([*BUDGET_ARGV, "--what-if", spec, "--lang", lang]) == EXIT_USAGE
        assert capsys.readouterr().err == line + "\n"
        out = run_verb([*BUDGET_ARGV, "--what-if", spec], lang)
        assert (out.returncode, out.text, out.error) == (EXIT_USAGE, "", line)


def test_other_usage_errors_pass_the_renderer_unchanged():
    error = UsageError("no_engine")
    assert render.worded_error(error, "zh") is error


def test_profile_takes_request_and_deps(tmp_path):
    log = tmp_path / "access.log"
    log.write_text("".join(f"input_tokens={n} output_tokens=10\n" for n in (100, 3000, 9000, 40000)))
    view = build_profile(ProfileRequest(access_log=str(log)), DEPS)
    assert isinstance(view, ProfileView) and view.kind == "access_log" and view.profile.total == 4


class _Stub:
    """A drawer that counts its calls and draws fixed bytes."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def of_evidence(self, evidence, lang):
        self.calls.append(lang)
        return b"memory-" + lang.encode(), b"buckets-" + lang.encode()

    def of_report(self, report, evidence, lang):
        raise AssertionError("a live triage draws from its evidence")

    def warm(self, lang):
        raise AssertionError("not warmed here")


def test_a_saved_live_bundle_carries_the_charts_of_the_drawer_the_cli_hands_in(tmp_path, capsys, monkeypatch):
    stub = _Stub()
    monkeypatch.setattr(triage_charts, "CHARTS", stub)
    out = tmp_path / "bundle"
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc = main(["triage", "llm/vllm-server", "--kubeconfig", str(sc.kubeconfig), "--save-bundle", str(out),
                   "--json", "--lang", "zh"])
    assert rc == 1 and stub.calls == ["zh"]
    assert (out / "gpu-memory.png").read_bytes() == b"memory-zh"
    assert (out / "request-buckets.png").read_bytes() == b"buckets-zh"


def test_without_a_drawer_a_live_bundle_has_no_pictures(tmp_path):
    from bot.service.triage import run_live_triage
    from collectors.live import LiveOptions

    out = tmp_path / "bundle"
    with running_scenario("vllm-incident", tmp_path) as sc:
        outcome = run_live_triage("llm/vllm-server", LiveOptions(kubeconfig=str(sc.kubeconfig)), "en",
                                  bundle_dir=out)
    assert outcome.report.verdict.primary == "kv_cache_pressure"
    assert (outcome.memory_chart_png, outcome.profile_chart_png) == (None, None)
    names = {p.name for p in out.iterdir()}
    assert "deployment.yaml" in names and not any(n.endswith(".png") for n in names)
