"""`pytest --fast` (make test-fast): which tests it leaves out and how it shortens fuzzing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support import fast


class _Item(SimpleNamespace):
    def get_closest_marker(self, name):
        return self.marks.get(name)


def _item(obj=None, fixturenames=(), marks=None):
    return _Item(obj=obj, fixturenames=list(fixturenames), marks=marks or {})


def test_a_test_on_the_real_prometheus_fixture_or_marked_is_left_out_and_others_kept():
    assert fast.uses_real_services(_item(fixturenames=["tmp_path", "prom"]))
    assert fast.uses_real_services(_item(marks={"real_services": pytest.mark.real_services}))
    assert not fast.uses_real_services(_item(fixturenames=["tmp_path", "cluster"]))


def test_a_hypothesis_test_is_capped_at_the_fast_count_and_a_lower_count_is_kept():
    @settings(max_examples=200)
    @given(st.integers())
    def many(n):
        pass

    @settings(max_examples=3)
    @given(st.integers())
    def few(n):
        pass

    def plain():
        pass

    assert fast.cap_examples(_item(many)) and many._hypothesis_internal_use_settings.max_examples == fast.FAST_EXAMPLES
    assert fast.cap_examples(_item(few)) and few._hypothesis_internal_use_settings.max_examples == 3
    assert not fast.cap_examples(_item(plain))


def test_the_capped_test_runs_only_the_capped_number_of_examples():
    seen = []

    @settings(max_examples=200, database=None)
    @given(st.integers())
    def counted(n):
        seen.append(n)

    fast.cap_examples(_item(counted), limit=5)
    counted()
    assert 1 <= len(seen) <= 5
