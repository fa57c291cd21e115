"""YAML for the test harness, read with libyaml's C loader (PyYAML's pure-Python one made reading
the scenarios' object files a third of the Slack and remediation tests' time). The same safe
constructor: the same values as `yaml.safe_load`, `tests/test_catalog_loader.py` checks it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

Loader = yaml.CSafeLoader


def safe_load(text: str) -> Any:
    return yaml.load(text, Loader=Loader)


def safe_load_all(text: str) -> Iterator[Any]:
    return yaml.load_all(text, Loader=Loader)
