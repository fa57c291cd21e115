"""A bundle someone pasted is masked when read, as live collection masks what it reads."""

from __future__ import annotations

import shutil
from pathlib import Path

from bot.main import main
from bot.service.runners import BundleRunner

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
KEY = "sk-live-0f9e8d7c6b5a4f3e2d1c0b9a"


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "runbook-incident", bundle)
    dep = bundle / "deployment.yaml"
    dep.write_text(dep.read_text().replace("--max-num-seqs=128", f"--max-num-seqs=128\n            - --api-key={KEY}"))
    logs = bundle / "logs.txt"
    logs.write_text(f"INFO using api_key={KEY} for the router\n" + logs.read_text())
    return bundle


def test_a_pasted_bundle_never_shows_its_credentials(tmp_path, capsys):
    bundle = _bundle(tmp_path)
    for extra in ([], ["--json"]):
        assert main(["triage", "--bundle", str(bundle), "--lang", "en", *extra]) == 1
        out = capsys.readouterr()
        assert KEY not in out.out + out.err
    outcome = BundleRunner({"llm/vllm-server": bundle})("llm/vllm-server", None, lambda *_: None)
    assert KEY not in repr(outcome.evidence) and KEY not in repr(outcome.report)
    assert outcome.evidence.server_config.max_num_seqs == 128
