"""Fixtures shared by several test files (pytest finds them here without an import)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import fast
from tests.support.kube_fixtures import Scenario, running_scenario
from tests.support.prom_harness import PromServer, run_prometheus


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Scenario]:
    """The vllm-incident scenario served by a stand-in API server, with a kubeconfig."""
    with running_scenario("vllm-incident", tmp_path) as scenario:
        yield scenario


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PromServer]:
    """A real Prometheus loaded with the harness's history, one per test module; one that cannot
    start fails the module's tests with its reason, not a traceback. (Modules that need another
    history, the fleet's, define their own `prom`.)"""
    try:
        with run_prometheus(tmp_path_factory.mktemp("prometheus")) as running:
            yield running
    except RuntimeError as e:
        pytest.fail(str(e), pytrace=False)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--fast", action="store_true", default=False,
                     help="the developer loop (make test-fast): no real Prometheus or Alertmanager, "
                          f"at most {fast.FAST_EXAMPLES} examples per hypothesis test")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "real_services: starts a real Prometheus or Alertmanager "
                                       "(left out by `pytest --fast`)")
    fast.enabled = bool(config.getoption("--fast"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not fast.enabled:
        return
    kept, dropped = [], []
    for item in items:
        (dropped if fast.uses_real_services(item) else kept).append(item)
    for item in kept:
        fast.cap_examples(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
