"""``handoff bench rebalance``'s pure parts: the slow-loop case's per-member loop intervals and the fenced
members / lost partitions figures of the analysis (issue 26)."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_handoff.bench.rebalance import SLOW_LOOP, ScenarioConfig, analyse

pytestmark = pytest.mark.unit


def test_slow_loop_intervals_are_5_to_30_percent_of_the_rebalance_timeout_and_never_divide_it() -> None:
    cfg = ScenarioConfig(**SLOW_LOOP)
    timeout = cfg.max_poll_interval_ms
    assert cfg.always_delay
    for interval in cfg.loop_interval_ms:
        assert 0.05 * timeout <= interval <= 0.30 * timeout
        assert timeout % interval != 0
    assert [cfg.loop_interval_s(f"m{i}") for i in (1, 2, 3, 4, 5)] == [0.7, 1.3, 1.9, 2.9, 0.7]
    assert ScenarioConfig().loop_interval_s("m1") == 0.0


def _log(
    events: list[tuple[float, str, list[int]]], processed: list[tuple[float, int, int]]
) -> dict[str, Any]:
    return {"events": events, "processed": processed, "refused_delays": 1}


def test_analysis_counts_fenced_members_and_lost_partitions_before_the_stop() -> None:
    cfg = ScenarioConfig(partitions=4)
    logs = {
        "m1": _log([(10.0, "assigned", [0, 1]), (20.0, "lost", [0, 1])], [(11.0, 0, 0), (12.0, 1, 0)]),
        "m2": _log([(10.0, "assigned", [2, 3]), (40.0, "lost", [2, 3])], [(11.0, 2, 0), (21.0, 0, 0)]),
        # m3 closes gracefully during a rebalance: not fenced, counted apart.
        "m3": _log([(10.0, "assigned", [3]), (25.0, "stopping", []), (25.1, "lost", [3])], []),
    }
    marks = {"stable": 10.0, "produce_stopped": 30.0, "drained": 35.0}
    result = analyse(logs, [1, 1, 1, 0], marks, 9.0, cfg)
    assert result["fenced_members"] == 1  # m2's loss came after the producer stopped (closing)
    assert result["lost_partitions"] == 2
    assert result["lost_on_own_leave"] == 1
    assert result["duplicates"] == 1  # (0, 0) processed by m1 and again by m2
    assert result["missing"] == 0
    assert result["refused_delays"] == 3
