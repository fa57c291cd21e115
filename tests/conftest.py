"""Fixtures shared by several test files (pytest finds them here without an import)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kube_fixtures import Scenario, running_scenario


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Scenario]:
    """The vllm-incident scenario served by a stand-in API server, with a kubeconfig."""
    with running_scenario("vllm-incident", tmp_path) as scenario:
        yield scenario
