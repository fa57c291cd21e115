"""Evidence cannot drive the reader's terminal: control characters print as visible escapes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from bot.main import main
from bot.render.terminal import inert

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
HOSTILE = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202egnp.exe"
CONTROLS = [chr(c) for c in (*range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))] + ["\u202e", "\u2066"]


@pytest.fixture
def hostile_bundle(tmp_path) -> Path:
    bundle = tmp_path / "bundle"
    shutil.copytree(EXAMPLES / "runbook-incident", bundle)
    logs = bundle / "logs.txt"
    line = f'time=2026-03-09T20:13:00Z level=warn msg="request rejected due to insufficient KV cache blocks {HOSTILE}"\n'
    logs.write_text(line + logs.read_text())
    return bundle


def test_text_output_shows_escapes_instead_of_obeying_them(hostile_bundle, capsys):
    assert main(["triage", "--bundle", str(hostile_bundle), "--lang", "en"]) == 1
    out = capsys.readouterr().out
    # (the log reader already drops CSI colour codes like ESC[2J; the rest reaches the report)
    assert "\\u001b]0;pwned\\u0007" in out and "\\u009b31m\\u202egnp.exe" in out
    assert not [c for c in CONTROLS if c in out]


def test_json_output_stays_valid_and_keeps_the_text(hostile_bundle, capsys):
    assert main(["triage", "--bundle", str(hostile_bundle), "--json", "--lang", "en"]) == 1
    raw = capsys.readouterr().out
    assert not [c for c in CONTROLS if c in raw]
    doc = json.loads(raw)
    examples = [x["params"]["example"] for f in doc["findings"] for x in f["facts"] if "pwned" in str(x["params"])]
    assert examples and "\x1b]0;pwned\x07" in examples[0] and "\u202egnp.exe" in examples[0], \
        "the hostile line is evidence: quoted, escaped in the output, and decoded back to itself"


def test_every_control_but_newline_and_tab_is_escaped():
    text = "".join(CONTROLS) + "\n\t"
    shown = inert(text)
    assert not [c for c in CONTROLS if c in shown]
    assert shown.endswith("\n\t") and shown.count("\\u") == len(CONTROLS)
    assert json.loads('"' + inert("\x9b\u202e") + '"') == "\x9b\u202e"
