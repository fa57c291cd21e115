"""Both access-log scanners under one set of tests: the compiled line scanner that an install
builds (`collectors/access_logs/_access_native.c`) and the numpy scan that reads the logs where no
C compiler was at hand. Import `line_scanner` into a test module and each of its tests runs
once with each."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import collectors.access_logs.tally as tally


@pytest.fixture(scope="module", params=["compiled", "numpy"], autouse=True)
def line_scanner(request: pytest.FixtureRequest) -> Iterator[str]:
    """The scanner `scan_block` uses for this module's tests (worker processes are forked, so
    they use it too)."""
    patch = pytest.MonkeyPatch()
    if request.param == "numpy":
        patch.setattr(tally, "NATIVE", None)
    else:
        assert tally._compiled is not None, "the compiled scanner is not built: reinstall with a C compiler at hand"
        patch.setattr(tally, "NATIVE", tally._compiled)
    yield request.param
    patch.undo()
