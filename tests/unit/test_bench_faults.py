"""The pure parts of the fault scenarios (bench/faults.py): coordinator choice and the outcome analysis."""

from __future__ import annotations

import pytest

from kafka_handoff.bench.faults import (
    STALL_BOUND_S,
    Recorder,
    analyse,
    group_ids,
    java_string_hash,
    offsets_partition,
)
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("") == 0
    assert java_string_hash("hello") == 99162322  # "hello".hashCode()
    assert java_string_hash("polygenelubricants") == -(1 << 31)  # Integer.MIN_VALUE
    assert offsets_partition("polygenelubricants", 3) == 0  # Utils.abs(MIN_VALUE) is 0


def test_group_ids_share_a_coordinator_partition() -> None:
    ids = group_ids("x", ["a", "b", "c"], 3)
    assert len({offsets_partition(g, 3) for g in ids.values()}) == 1
    assert len(set(ids.values())) == 3


def acked(*offsets: int, t: float = 0.0) -> dict[tuple[TopicPartition, int], tuple[float, bytes]]:
    return {(TP, o): (t, b"%d" % o) for o in offsets}


def test_analysis_counts_missing_duplicates_and_stall() -> None:
    rec = Recorder("g")
    rec.handed = [(1.0, "A", TP, 0, b"0"), (2.0, "A", TP, 1, b"1"), (3.0, "B", TP, 1, b"1")]
    rec.closes = [("A", 0.5, 15.0)]
    out = analyse(rec, acked(0, 1, 2), t_end=10.0)
    assert (out.acknowledged, out.consumed, out.missing, out.duplicated) == (3, 2, 1, 1)
    assert out.duplicated_after_commit == 0  # nothing was committed
    assert out.longest_stall_s == 10.0  # offset 2 waited from its ack (0.0) until the end
    assert out.stalled_partition == "t-0@2"
    assert out.close_bounded and out.longest_close_s == 0.5
    assert out.problems(outage_s=0.0) == ["1 acknowledged records never consumed"]


def test_a_record_handed_out_again_after_its_commit_is_a_problem() -> None:
    rec = Recorder("g")
    rec.handed = [(1.0, "A", TP, 0, b"0"), (3.0, "B", TP, 0, b"0")]
    rec.commits[TP] = [(2.0, 1)]  # A committed offset 1 (past record 0) at t=2, before B got it at t=3
    out = analyse(rec, acked(0), t_end=5.0)
    assert out.duplicated_after_commit == 1
    assert "1 records processed again after their commit" in out.problems(0.0)


def test_stall_bound_close_bound_errors_and_log_duplicates() -> None:
    rec = Recorder("g")
    rec.handed = [(50.0, "A", TP, 0, b"0"), (50.0, "A", TP, 1, b"0")]  # one value at two offsets
    rec.closes = [("A", 20.0, 15.0)]
    rec.unexpected = ["A poll: KafkaError: boom"]
    out = analyse(rec, acked(0, 1), t_end=60.0)
    problems = out.problems(outage_s=10.0)
    assert out.longest_stall_s == 50.0 > 10.0 + STALL_BOUND_S
    assert any("stalled 50.0 s" in p for p in problems)
    assert any("close() took 20.0 s" in p for p in problems)
    assert any("errors reached the application" in p for p in problems)
    assert any("written twice" in p for p in problems)
    assert not analyse(rec, acked(0, 1), t_end=60.0).problems(outage_s=20.0)[0].startswith("partition")


@pytest.mark.parametrize(
    ("faults", "protocols", "clients", "message"),
    [
        ("kill-leader,nope", "classic", "handoff", "--faults: unknown ['nope']"),
        ("kill-leader", "eager", "handoff", "--protocols: ['eager']; allowed values: classic, consumer"),
        ("kill-leader", "consumer", "java", "--clients: ['java']; allowed values: handoff, confluent"),
    ],
)
def test_bench_cli_rejects_bad_choices_before_starting_a_cluster(
    faults: str, protocols: str, clients: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from kafka_handoff.cli.main import main

    code = main(["bench", "faults", "--faults", faults, "--protocols", protocols, "--clients", clients])
    assert code == 2
    assert message in capsys.readouterr().err
