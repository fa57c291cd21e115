"""The message catalogs are read with libyaml's loader where PyYAML has it (a start-up cost
every verb pays): it must give exactly what the pure-Python safe loader gives."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
import yaml

from bot.render import i18n
from bot.render.i18n import LANGS, Catalog


@pytest.mark.parametrize("lang", LANGS)
def test_the_fast_loader_reads_each_catalog_as_the_safe_loader_does(lang):
    text = resources.files("bot.render").joinpath("locales", f"{lang}.yaml").read_text(encoding="utf-8")
    assert yaml.load(text, Loader=i18n._loader()) == yaml.load(text, Loader=yaml.SafeLoader)
    assert Catalog.load(lang).messages == i18n._flatten(yaml.safe_load(text))


def test_the_c_loader_is_used_where_pyyaml_has_it():
    assert yaml.__with_libyaml__ and i18n._loader() is yaml.CSafeLoader


def test_a_json_answer_does_not_import_pyyaml():
    import subprocess
    import sys

    code = ("import sys; from bot.main import main\n"
            "try:\n    main(['profile', '--access-log', 'examples/runbook-incident/access.log', '--json'])\n"
            "except SystemExit:\n    pass\n"
            "print('yaml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip().splitlines()[-1] == "False"
