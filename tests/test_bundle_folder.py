"""`gpumem collect --out` and `triage --save-bundle` write a fresh folder whole, never through a
link and never on top of old evidence; they refuse before asking the cluster anything."""

from __future__ import annotations

import os

import pytest

from bot.main import main
from bot.service.bundle_dir import write_bundle_dir
from runbooks.model.errors import UsageError
from tests.support.kube_fixtures import running_scenario

TARGET = "llm/vllm-server"


def _collect(sc, out, *extra: str) -> int:
    return main(["collect", TARGET, "--kubeconfig", str(sc.kubeconfig), "--out", str(out), "--lang", "en", *extra])


def test_a_symlink_inside_the_folder_is_never_written_through(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = tmp_path / "bundle"
    out.mkdir()
    os.symlink(victim, out / "deployment.yaml")
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc = _collect(sc, out)
        asked = len(sc.kube.calls())
    err = capsys.readouterr().err
    assert rc == 2 and asked == 0, "refused before any read"
    assert victim.read_text() == "precious\n"
    assert f"{out} already holds files" in err and "Traceback" not in err
    assert sorted(p.name for p in out.iterdir()) == ["deployment.yaml"]


def test_old_evidence_in_the_folder_is_refused_not_mixed(tmp_path, capsys):
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "access.log").write_text("input_tokens=100000 output_tokens=10\n")
    with running_scenario("vllm-incident", tmp_path) as sc:
        rc = main(["triage", TARGET, "--kubeconfig", str(sc.kubeconfig), "--save-bundle", str(out), "--lang", "en"])
    assert rc == 2 and "already holds files" in capsys.readouterr().err
    assert [p.name for p in out.iterdir()] == ["access.log"]


def test_the_folder_itself_may_not_be_a_link(tmp_path, capsys):
    real = tmp_path / "real"
    real.mkdir()
    link = tmp_path / "link"
    os.symlink(real, link)
    with running_scenario("vllm-incident", tmp_path) as sc:
        assert _collect(sc, link) == 2
    assert "is a symbolic link" in capsys.readouterr().err
    assert list(real.iterdir()) == []


def test_an_empty_or_new_folder_gets_the_whole_bundle_and_nothing_else(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    with running_scenario("vllm-incident", tmp_path) as sc:
        assert _collect(sc, empty) == 0
        assert _collect(sc, tmp_path / "new" / "bundle") == 0
    for folder in (empty, tmp_path / "new" / "bundle"):
        names = {p.name for p in folder.iterdir()}
        assert {"deployment.yaml", "pods.yaml", "logs.txt", "bundle.json"} <= names
        assert not [n for n in names if n.startswith(".")], "no staging files left"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_a_failed_write_leaves_nothing_behind(tmp_path):
    out = tmp_path / "b"

    def boom(folder):
        raise OSError(28, "No space left on device", str(folder / "bundle.json"))

    with pytest.raises(OSError):
        write_bundle_dir(out, {"logs.txt": "x"}, boom)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_a_file_appearing_while_writing_fails_the_rename_instead_of_mixing(tmp_path):
    out = tmp_path / "b"
    out.mkdir()

    def race(folder):
        (out / "late.txt").write_text("someone else")

    with pytest.raises(UsageError) as e:
        write_bundle_dir(out, {"logs.txt": "x"}, race)
    assert e.value.code == "bundle_folder_not_empty"
    assert [p.name for p in out.iterdir()] == ["late.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]


def test_names_are_plain_file_names(tmp_path):
    with pytest.raises(ValueError):
        write_bundle_dir(tmp_path / "b", {"../escape.txt": "x"}, lambda f: None)
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "b").exists()
