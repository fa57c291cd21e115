"""YAML for the test harness, read with libyaml's C loader (PyYAML's pure-Python one made reading
the scenarios' object files a third of the Slack and remediation tests' time). It is the same
safe constructor over libyaml's parser, so the values are `yaml.safe_load`'s
(`tests/test_catalog_loader.py` shows the two loaders equal on the message catalogs)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

Loader = yaml.CSafeLoader


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=Loader)


def safe_load_all(text: str) -> Iterator[Any]:
    return yaml.load_all(text, Loader=Loader)
