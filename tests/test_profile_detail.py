"""Profile detail: exact per-bucket p95 lengths, exact joint percentiles, and the bucket mix
over time (by time when requests carry times, by arrival otherwise)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from runbooks.profile.detail import DetailBuilder

T0 = datetime(2026, 3, 9, 18, 0, tzinfo=UTC)


def test_bucket_p95_is_the_nearest_rank_of_input_plus_output_in_that_bucket():
    b = DetailBuilder()
    for n in range(1, 101):  # S lengths 2..200 (n input + n output)
        b.add(n, n)
    b.add(7420, 312)
    d = b.build()
    assert d.p95_tokens("S") == 190.0
    assert d.p95_tokens("L") == 7732.0
    assert d.p95_tokens("M") is None and d.p95_tokens("XL") is None


def test_joint_percentiles_are_of_each_requests_sum_not_the_sum_of_percentiles():
    b = DetailBuilder()
    for _ in range(98):
        b.add(100, 10)
    b.add(8000, 10)   # long input, short output
    b.add(100, 900)   # short input, long output
    d = b.build()
    assert (d.p50_total_tokens, d.p95_total_tokens, d.p99_total_tokens) == (110.0, 110.0, 1000.0)


def test_timed_requests_give_time_slices_that_cover_the_window():
    b = DetailBuilder()
    for minute in range(120):
        for k in range(10):
            long = minute >= 60 and k < 5
            b.add(9000 if long else 100, 50, T0 + timedelta(minutes=minute))
    d = b.build(max_slices=12)
    assert d.by_time
    assert len(d.slices) == 12
    assert sum(s.total for s in d.slices) == 1200
    assert d.slices[0].start == T0 and d.slices[-1].end == T0 + timedelta(minutes=120)
    assert [s.share("XL") for s in (d.slices[0], d.slices[-1])] == [0.0, 0.5]


def test_untimed_requests_give_arrival_slices():
    b = DetailBuilder()
    b.add_tallied([{640: 3000}, {}, {}, {9000: 3000}], bytes([0] * 3000 + [3] * 3000))
    d = b.build(max_slices=6)
    assert not d.by_time
    assert [(s.first_request, s.last_request, s.counts) for s in d.slices] == [
        (0, 1000, (1000, 0, 0, 0)), (1000, 2000, (1000, 0, 0, 0)), (2000, 3000, (1000, 0, 0, 0)),
        (3000, 4000, (0, 0, 0, 1000)), (4000, 5000, (0, 0, 0, 1000)), (5000, 6000, (0, 0, 0, 1000))]


def test_counted_arrival_runs_give_the_same_slices_as_scanning_the_bytes():
    classes = bytes([k % 4 for k in range(10_500)])
    scanned, counted = DetailBuilder(), DetailBuilder()
    scanned.add_tallied([{}, {}, {}, {}], classes)
    runs = [[classes[i : i + 1000].count(c) for c in range(4)] for i in range(0, len(classes), 1000)]
    counted.add_tallied([{}, {}, {}, {}], classes, arrival_counts=runs)
    assert counted.build() == scanned.build()


def test_many_arrival_blocks_are_merged_to_stay_bounded():
    b = DetailBuilder()
    b.add_tallied([{}, {}, {}, {}], bytes(5_000_000))
    d = b.build(max_slices=10)
    assert sum(s.total for s in d.slices) == 5_000_000
    assert len(d.slices) <= 10
