"""runbooks.profile.requests: the runbook's buckets, exact percentiles, the long-share shift, histograms."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runbooks.model.lengths import Histogram, RequestProfile
from runbooks.model.serde import from_jsonable, to_jsonable
from runbooks.profile.requests import (
    ProfileBuilder,
    bucket_of,
    compare,
    profile_from_histograms,
    profile_of,
)

T0 = datetime(2026, 3, 9, 20, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("input_tokens", "output_tokens", "bucket"),
    [
        (0, 0, "S"),
        (512, 128, "S"),
        (513, 128, "M"),
        (512, 129, "M"),
        (2048, 256, "M"),
        (2049, 256, "L"),
        (2048, 257, "L"),
        (8192, 512, "L"),
        (8193, 512, "XL"),
        (8192, 513, "XL"),
        (300, 200, "M"),  # the smallest bucket holding both: the output length decides
        (100, 600, "XL"),
        (7420, 312, "L"),  # the runbook's own access-log lines
        (8011, 448, "L"),
        (7928, 501, "L"),
    ],
)
def test_bucket_is_the_smallest_whose_input_and_output_limits_both_hold(input_tokens, output_tokens, bucket):
    assert bucket_of(input_tokens, output_tokens) == bucket


def test_runbook_sample_lines_are_all_long_context():
    profile = profile_of([(7420, 312), (8011, 448), (7928, 501)], "access.log")
    assert profile.total == 3
    assert profile.share("L") == 1.0
    assert [b.bucket for b in profile.buckets] == ["S", "M", "L", "XL"]
    assert profile.p50_input_tokens == 7928.0
    assert profile.max_input_tokens == 8011
    assert profile.max_output_tokens == 501


def test_empty_builder_gives_an_empty_profile_without_percentiles():
    profile = ProfileBuilder().build("access.log")
    assert profile.total == 0
    assert profile.p50_input_tokens is None
    assert profile.max_input_tokens is None
    assert all(b.share == 0.0 for b in profile.buckets)
    assert profile.shift is None


def test_skipped_lines_are_counted_in_the_profile():
    builder = ProfileBuilder()
    builder.add(10, 10)
    builder.skip()
    builder.skip(2)
    assert builder.build("x").skipped_lines == 3


def test_negative_token_counts_are_refused():
    with pytest.raises(ValueError):
        ProfileBuilder().add(-1, 3)
    with pytest.raises(ValueError):
        ProfileBuilder().add_many([1, -1], [1, 1])


def _nearest_rank(values: list[int], pct: int) -> float:
    ordered = sorted(values)
    return float(ordered[max(1, math.ceil(pct * len(ordered) / 100)) - 1])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40_000), st.integers(0, 5_000)), min_size=1, max_size=400))
def test_percentiles_are_exact_nearest_rank(pairs):
    profile = profile_of(pairs, "random")
    inputs = [p[0] for p in pairs]
    outputs = [p[1] for p in pairs]
    assert profile.p50_input_tokens == _nearest_rank(inputs, 50)
    assert profile.p95_input_tokens == _nearest_rank(inputs, 95)
    assert profile.p99_input_tokens == _nearest_rank(inputs, 99)
    assert profile.p50_output_tokens == _nearest_rank(outputs, 50)
    assert profile.p95_output_tokens == _nearest_rank(outputs, 95)
    assert profile.p99_output_tokens == _nearest_rank(outputs, 99)
    assert sum(b.count for b in profile.buckets) == len(pairs)
    for b in profile.buckets:
        assert b.count == sum(1 for i, o in pairs if bucket_of(i, o) == b.bucket)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 20_000), st.integers(0, 2_000), st.none() | st.integers(0, 4 * 3600)),
        min_size=1,
        max_size=300,
    )
)
def test_add_many_equals_adding_one_at_a_time(rows):
    one, many = ProfileBuilder(), ProfileBuilder()
    times = [T0 + timedelta(seconds=s) if s is not None else None for _, _, s in rows]
    for (i, o, _), at in zip(rows, times, strict=True):
        one.add(i, o, at)
    many.add_many([r[0] for r in rows], [r[1] for r in rows], times)
    assert one.build("x") == many.build("x")


def test_add_many_takes_digit_bytes_as_a_regex_finds_them():
    builder = ProfileBuilder()
    builder.add_many([b"7420", b"0300"], [b"312", b"200"])
    profile = builder.build("x")
    assert [b.count for b in profile.buckets] == [0, 1, 1, 0]
    assert profile.max_input_tokens == 7420


def _campaign(before_long: int, after_long: int, minutes: int = 61, per_minute: int = 100) -> ProfileBuilder:
    """One hour of traffic: the first quarter with `before_long` long requests per minute, the last with `after_long`."""
    builder = ProfileBuilder()
    for minute in range(minutes):
        at = T0 + timedelta(minutes=minute)
        if minute < 15:
            long = before_long
        elif minute >= 45:
            long = after_long
        else:
            long = (before_long + after_long) // 2
        for k in range(per_minute):
            builder.add(6000 if k < long else 300, 200, at)
    return builder


def test_shift_compares_long_share_of_first_and_last_quarter():
    # the runbook's campaign case: the long bucket share went from 8% to 37%
    shift = _campaign(8, 37).build("access.log").shift
    assert shift is not None
    assert shift.long_share_before == pytest.approx(0.08)
    assert shift.long_share_after == pytest.approx(0.37)
    assert shift.before_count == 15 * 100
    assert shift.after_count == 16 * 100
    assert shift.delta == pytest.approx(0.29)
    assert (shift.before_label, shift.after_label) == ("first part", "last part")


def test_shift_does_not_depend_on_arrival_order():
    ordered = _campaign(8, 37).build("x")
    shuffled = ProfileBuilder()
    rows = []
    for minute in range(61):
        long = 8 if minute < 15 else 37 if minute >= 45 else 22
        rows += [(6000 if k < long else 300, 200, T0 + timedelta(minutes=minute)) for k in range(100)]
    for row in reversed(rows):
        shuffled.add(*row)
    assert shuffled.build("x") == ordered


def test_no_shift_when_the_window_is_shorter_than_ten_minutes():
    builder = ProfileBuilder()
    for second in range(0, 9 * 60, 2):
        builder.add(6000 if second > 400 else 300, 100, T0 + timedelta(seconds=second))
    assert builder.build("x").shift is None


def test_no_shift_when_a_part_has_fewer_than_twenty_requests():
    builder = ProfileBuilder()
    for minute in range(60):
        builder.add(300, 100, T0 + timedelta(minutes=minute))
    assert builder.build("x").shift is None


def test_shift_without_times_uses_blocks_of_arrivals():
    builder = ProfileBuilder()
    for n in range(8000):
        long = (n % 100) < (10 if n < 2000 else 40 if n >= 6000 else 25)
        builder.add(6000 if long else 300, 100)
    shift = builder.build("x").shift
    assert shift is not None
    assert shift.long_share_before == pytest.approx(0.10)
    assert shift.long_share_after == pytest.approx(0.40)
    assert shift.before_count == 2000
    assert shift.after_count == 2000


def test_no_shift_without_times_below_four_blocks():
    builder = ProfileBuilder()
    for n in range(3000):
        builder.add(6000 if n > 1500 else 300, 100)
    assert builder.build("x").shift is None


def test_memory_stays_bounded_over_months_of_minutes_and_millions_of_requests():
    builder = ProfileBuilder()
    minutes = 60 * 24 * 60  # two months, one request a minute
    builder.add_many([300] * minutes, [100] * minutes, [T0 + timedelta(minutes=m) for m in range(minutes)])
    builder.add_many([9000] * 5_000_000, [100] * 5_000_000)
    assert len(builder._bins) <= 20_000
    assert len(builder._blocks) <= 4096
    profile = builder.build("x")
    assert profile.total == minutes + 5_000_000
    assert profile.first_at == T0
    assert profile.last_at == T0 + timedelta(minutes=minutes - 1)


def test_naive_times_are_taken_as_utc():
    builder = ProfileBuilder()
    builder.add(1, 1, datetime(2026, 3, 9, 20, 0))
    builder.add(1, 1, datetime(2026, 3, 9, 21, 0, tzinfo=UTC))
    profile = builder.build("x")
    assert profile.first_at == T0
    assert profile.first_at.tzinfo is not None


def test_compare_labels_baseline_and_current():
    baseline = profile_of([(300, 100)] * 92 + [(6000, 100)] * 8, "last week")
    current = profile_of([(300, 100)] * 63 + [(9000, 100)] * 37, "today")
    shift = compare(current, baseline)
    assert (shift.before_label, shift.after_label) == ("baseline", "current")
    assert shift.long_share_before == pytest.approx(0.08)
    assert shift.long_share_after == pytest.approx(0.37)
    assert (shift.before_count, shift.after_count) == (100, 100)


def _vllm_prompt_histogram() -> Histogram:
    # vLLM 1-2-5 buckets for max_model_len 32768 (last finite bound 20000), cumulative counts
    bounds = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, math.inf]
    cumulative = [0, 0, 0, 0, 0, 0, 10, 20, 40, 50, 60, 70, 90, 95, 100]
    return Histogram(buckets=tuple(zip(map(float, bounds), map(float, cumulative), strict=True)), count=100.0)


def test_profile_from_histograms_interpolates_bucket_shares_by_input_length():
    prompt = _vllm_prompt_histogram()
    generation = Histogram(buckets=((100.0, 50.0), (500.0, 90.0), (math.inf, 100.0)), count=100.0)
    profile = profile_from_histograms(prompt, generation, "metrics.txt")
    assert profile is not None
    assert profile.estimated is True
    assert profile.total == 100
    shares = {b.bucket: b.share for b in profile.buckets}
    # <=512: 40 below 500, plus 12/500 of the 10 in (500, 1000]
    assert shares["S"] == pytest.approx(0.40 + 0.10 * 12 / 500)
    # (512, 2048]: rest of (500, 1000], all of (1000, 2000], 48/3000 of the 10 in (2000, 5000]
    assert shares["M"] == pytest.approx(0.10 * 488 / 500 + 0.10 + 0.10 * 48 / 3000)
    # (2048, 8192]: rest of (2000, 5000] and 3192/5000 of the 20 in (5000, 10000]
    assert shares["L"] == pytest.approx(0.10 * 2952 / 3000 + 0.20 * 3192 / 5000)
    assert shares["XL"] == pytest.approx(0.20 * 1808 / 5000 + 0.05 + 0.05)
    assert sum(b.count for b in profile.buckets) == 100
    assert profile.p50_input_tokens == pytest.approx(prompt.quantile(0.5))
    assert profile.p50_output_tokens == pytest.approx(100.0)


def test_profile_from_histograms_without_prompt_buckets_by_output():
    generation = Histogram(buckets=((128.0, 30.0), (256.0, 60.0), (512.0, 90.0), (math.inf, 100.0)), count=100.0)
    profile = profile_from_histograms(None, generation, "metrics.txt")
    assert profile is not None
    assert [b.count for b in profile.buckets] == [30, 30, 30, 10]
    assert profile.p50_input_tokens is None


def test_profile_from_empty_histograms_is_none():
    empty = Histogram(buckets=((10.0, 0.0), (math.inf, 0.0)), count=0.0)
    assert profile_from_histograms(empty, None, "metrics.txt") is None
    assert profile_from_histograms(None, None, "metrics.txt") is None


def test_profile_round_trips_through_json():
    profile = _campaign(8, 37).build("access.log")
    assert from_jsonable(RequestProfile, to_jsonable(profile)) == profile
