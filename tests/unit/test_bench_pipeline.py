"""The pure helpers of ``handoff bench pipeline``: record-weighted percentiles, Maven version choice."""

from __future__ import annotations

import pytest

from kafka_handoff.bench.pipeline import _best, _percentiles

pytestmark = pytest.mark.unit


def test_percentiles_are_weighted_by_records_per_commit() -> None:
    # 90 records visible at 1 s, 10 at 5 s: the median record waited 1 s, the 99th 5 s
    assert _percentiles([(5000.0, 10), (1000.0, 90)]) == (1000.0, 5000.0)
    assert _percentiles([(1000.0, 50), (2000.0, 50)]) == (1000.0, 2000.0)


def test_percentiles_ignore_empty_commits_and_handle_none() -> None:
    assert _percentiles([]) == (None, None)
    assert _percentiles([(3000.0, 0)]) == (None, None)
    assert _percentiles([(3000.0, 0), (4000.0, 7)]) == (4000.0, 4000.0)


def test_best_version_is_newest_release_not_after_wanted_in_same_major() -> None:
    available = ["3.5.4", "4.0.0", "4.1.1", "4.2.0", "4.10.0", "5.0.0"]
    assert _best(available, "4.3.0") == "4.2.0"
    assert _best(available, "4.2.0") == "4.2.0"
    assert _best(available, "4.11.0") == "4.10.0"
    assert _best(["3.5.4", "5.0.0"], "4.3.0") is None
