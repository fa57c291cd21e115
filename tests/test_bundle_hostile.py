"""Reading a bundle stays inside its folder and never hangs or recurses: links out of it are not
followed, FIFOs and devices are skipped, a deeply nested bundle.json is one file's read error."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bot.main import main
from collectors.bundle import load_bundle
from tests.support import words

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SECRET = "outside-the-bundle-6f1c"


def _bundle(tmp_path: Path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "runbook-incident", bundle)
    return bundle


def test_a_link_out_of_the_bundle_is_unreadable_and_its_text_never_shown(tmp_path, capsys):
    secret = tmp_path / "elsewhere.txt"
    secret.write_text(f"root:x:0:0:{SECRET}\n")
    bundle = _bundle(tmp_path)
    (bundle / "logs.txt").unlink()
    os.symlink(secret, bundle / "logs.txt")
    ev = load_bundle(bundle)
    issue = next(i for i in ev.issues if i.source == "logs.txt")
    assert (issue.kind, words.message(issue)) == ("unreadable", "a link to a file outside the bundle folder; not read")
    assert "logs.txt" not in ev.sources
    for argv in (["triage", "--bundle", str(bundle)], ["triage", "--bundle", str(bundle), "--json"]):
        main([*argv, "--lang", "en"])
        out = capsys.readouterr()
        assert SECRET not in out.out + out.err


def test_a_link_inside_the_bundle_is_read(tmp_path):
    bundle = _bundle(tmp_path)
    (bundle / "server.log").write_text((bundle / "logs.txt").read_text())
    (bundle / "logs.txt").unlink()
    os.symlink("server.log", bundle / "logs.txt")
    assert "logs.txt" in load_bundle(bundle).sources


def test_a_fifo_is_skipped_without_waiting_for_a_writer(tmp_path):
    bundle = _bundle(tmp_path)
    (bundle / "metrics.txt").unlink()
    os.mkfifo(bundle / "metrics.txt")
    ev = load_bundle(bundle)  # opening a FIFO would block forever with no writer
    issue = next(i for i in ev.issues if i.source == "metrics.txt")
    assert (issue.kind, words.message(issue)) == ("skipped", "a FIFO, not a regular file; skipped")


def test_a_device_is_skipped(tmp_path):
    bundle = _bundle(tmp_path)
    (bundle / "access.log").unlink()
    os.symlink("/dev/zero", bundle / "access.log")  # outside the folder too, but a device first of all
    ev = load_bundle(bundle)
    assert [i.kind for i in ev.issues if i.source == "access.log"] in (["unreadable"], ["skipped"])
    assert "access.log" not in ev.sources


def test_a_deeply_nested_bundle_json_is_one_files_error(tmp_path, capsys):
    bundle = _bundle(tmp_path)
    (bundle / "bundle.json").write_text("[" * 100_000 + "]" * 100_000)
    ev = load_bundle(bundle)
    issue = next(i for i in ev.issues if i.source == "bundle.json")
    assert "nested too deeply" in words.message(issue)
    assert "logs.txt" in ev.sources and ev.server_config is not None, "the rest of the bundle is still read"
    assert main(["triage", "--bundle", str(bundle), "--lang", "en"]) == 1
    assert "Traceback" not in capsys.readouterr().err


def test_a_nested_object_in_evidence_is_also_one_files_error(tmp_path):
    bundle = _bundle(tmp_path)
    nested = '{"gpus": ' * 5000 + "{}" + "}" * 5000
    (bundle / "bundle.json").write_text('{"target": "llm/x", "evidence": ' + nested + "}")
    ev = load_bundle(bundle)
    assert [i.kind for i in ev.issues if i.source == "bundle.json"] == ["unreadable"]
    assert "logs.txt" in ev.sources
