"""The pure parts of the pipeline fault scenario (bench/pipeline_faults.py): the verdict and the CLI."""

from __future__ import annotations

import argparse
import threading

import pytest

from kafka_handoff.bench.faults import add_arguments as add_fault_arguments
from kafka_handoff.bench.pipeline_faults import (
    PIPELINE_FAULTS,
    PipelineFaultRun,
    StepStalledError,
    _Progress,
    add_arguments,
    run_pipeline_faults,
)
from kafka_handoff.pipeline.stats import BatchReport

pytestmark = pytest.mark.unit


def clean_run() -> PipelineFaultRun:
    return PipelineFaultRun(
        "consumer", "delta", ["kill-leader"], records=100, expected_rows=99, output_rows=99,
        marks_equal_end_offsets=True, committed_equal_end_offsets=True,
    )  # fmt: skip


def test_a_clean_run_has_no_problems() -> None:
    assert clean_run().problems() == []


@pytest.mark.parametrize(
    ("change", "needle"),
    [
        ({"missing": 3}, "3 missing"),
        ({"extra": 2, "duplicated": 2}, "2 extra"),
        ({"marks_equal_end_offsets": False}, "marks"),
        ({"committed_equal_end_offsets": False}, "committed offsets"),
        ({"stalled": "node 2 down: only 10 of 20 records committed"}, "stalled: node 2 down"),
        ({"worker_errors": ["w1: SinkError()"]}, "workers failed"),
    ],
)
def test_each_broken_guarantee_is_a_problem(change: dict[str, object], needle: str) -> None:
    run = clean_run()
    for key, value in change.items():
        setattr(run, key, value)
    problems = run.problems()
    assert len(problems) == 1 and needle in problems[0]


def test_progress_counts_committed_records_and_a_stall_is_an_error_not_a_hang() -> None:
    progress = _Progress()
    progress.on_batch(BatchReport(1, "committed", 10, 1))
    progress.on_batch(BatchReport(2, "conflict", 5, 1))  # discarded: re-read later
    assert progress.committed == 10
    progress.await_committed(10, "warm-up", lambda: "", timeout=1)
    with pytest.raises(StepStalledError, match="only 10 of 11 records committed"):
        progress.await_committed(11, "node 1 down", lambda: "", timeout=0.05)
    with pytest.raises(StepStalledError, match="w1 died"):
        progress.await_committed(11, "node 1 down", lambda: "w1 died", timeout=5)


def test_progress_wakes_on_a_batch_report() -> None:
    progress = _Progress()
    t = threading.Thread(target=progress.await_committed, args=(5, "x", lambda: "", 30.0))
    t.start()
    progress.on_batch(BatchReport(1, "committed", 5, 1))
    t.join(30)
    assert not t.is_alive()


def test_unknown_faults_are_refused_naming_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match="kill-leader, move-leaders"):
        run_pipeline_faults(
            None,  # type: ignore[arg-type]
            None,
            protocol="consumer",
            sink_format="delta",
            workdir=".",
            faults=["nope"],
        )


def test_bench_faults_takes_the_pipeline_options() -> None:
    parser = argparse.ArgumentParser()
    add_fault_arguments(parser)
    add_arguments(parser)
    args = parser.parse_args(["--pipeline", "--rounds", "3", "--sinks", "kafka", "--seed", "7"])
    assert args.pipeline and args.rounds == 3 and args.sinks == "kafka" and args.seed == 7
    assert not parser.parse_args([]).pipeline
    assert set(PIPELINE_FAULTS) == {"kill-leader", "move-leaders", "kill-group-coordinator",
                                    "kill-txn-coordinator"}  # fmt: skip
