"""`make test-fast`: the suite without the real Prometheus and Alertmanager, fuzzing on a short profile.

`pytest --fast` (tests/conftest.py) turns it on. The tests that start a real Prometheus or
Alertmanager are deselected (they use a `prom` fixture or carry the `real_services` mark); one
that starts a server some other way is skipped where it asks for the binary
(`prom_harness._require`). Every hypothesis test runs at most `FAST_EXAMPLES` examples, even one
whose own `@settings` asks for more; `make test`, which CI runs, keeps every test's own count.
"""

from __future__ import annotations

from typing import Any

#: examples per hypothesis test under `--fast`
FAST_EXAMPLES = 10

#: set by tests/conftest.py's pytest_configure when the run is `--fast`
enabled = False

#: the fixtures that start a real Prometheus (conftest's and the modules' own)
REAL_FIXTURES = frozenset({"prom"})


def uses_real_services(item: Any) -> bool:
    """True for a collected test that needs a real Prometheus or Alertmanager."""
    if item.get_closest_marker("real_services") is not None:
        return True
    return bool(REAL_FIXTURES & set(getattr(item, "fixturenames", ())))


def cap_examples(item: Any, limit: int = FAST_EXAMPLES) -> bool:
    """Lower a hypothesis test's example count to `limit`; True when the test is one.

    `@given` reads the settings it was decorated with from the wrapped test each time it runs,
    so replacing them after collection takes effect; a count already below `limit` is kept.
    """
    from hypothesis import settings

    test = getattr(item, "obj", None)
    test = getattr(test, "__func__", test)
    current = getattr(test, "_hypothesis_internal_use_settings", None)
    if current is None or not getattr(test, "is_hypothesis_test", False):
        return False
    if current.max_examples > limit:
        test._hypothesis_internal_use_settings = settings(current, max_examples=limit)
    return True
