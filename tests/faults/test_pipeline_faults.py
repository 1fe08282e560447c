"""The pipeline under broker failures (issue 32, item 5), on the shared 3-node KRaft cluster.

:func:`kafka_handoff.bench.pipeline_faults.run_pipeline_faults`: two pipeline workers (one group, the
module's local SparkSession) process an input topic (6 partitions, replication factor 3,
``min.insync.replicas=2``) written in chunks by an idempotent ``acks=all`` producer while, one after the
other,

1. ``kill-leader``: the leader of some input partitions is SIGKILLed; a chunk is written and committed
   while it is down; then it is restarted;
2. ``move-leaders``: every partition's leadership moves (replica order rotated by
   ``alter_partition_reassignments``, preferred election by ``elect_leaders``), then a chunk;
3. ``kill-group-coordinator``: the group coordinator's node is SIGKILLed; a chunk; restart;
4. (Kafka sink) ``kill-txn-coordinator``: the transaction coordinator of a worker's transactional id is
   SIGKILLed; a chunk; restart.

Every step waits for events (records committed by the workers, leaders moved), bounded by a step timeout
that turns a stalled pipeline into a failure naming the step.  Then: every well-formed input record's
output row is in the sink exactly once, nothing else; the sink's marks and the group's committed offsets
equal the input's end offsets; no worker failed.  Both group protocols, the Delta sink and the Kafka sink
(transactions).  The randomized, longer version is ``handoff bench faults --pipeline``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kafka_handoff.bench.pipeline_faults import run_pipeline_faults
from kafka_handoff.devbroker import Cluster

# Each test: ~4-5 min on the shared 2-core machine under load (a killed node's restart alone takes 20-40 s).
pytestmark = [
    pytest.mark.integration,
    pytest.mark.cluster,
    pytest.mark.faults,
    pytest.mark.spark,
    pytest.mark.timeout(1200),
]

FAULTS = ["kill-leader", "move-leaders", "kill-group-coordinator"]


@pytest.mark.parametrize(
    ("protocol", "sink_format"),
    [("classic", "delta"), ("consumer", "delta"), ("classic", "kafka"), ("consumer", "kafka")],
)
def test_pipeline_output_is_exactly_once_under_broker_failures(
    cluster: Any, spark: Any, tmp_path: Path, protocol: str, sink_format: str
) -> None:
    assert isinstance(cluster, Cluster), "the fault tests kill nodes of a cluster they start"
    faults = FAULTS + (["kill-txn-coordinator"] if sink_format == "kafka" else [])
    run = run_pipeline_faults(
        cluster, spark, protocol=protocol, sink_format=sink_format, workdir=tmp_path, faults=faults
    )
    report = run.report()
    print(report)
    assert run.problems() == [], report
    # The scenario did what it names: all of the input went through, under every fault.
    assert run.output_rows == run.expected_rows > 0
    assert len([s for s in run.steps if "records committed" in s]) == len(faults) + 2, report
    assert len([s for s in run.steps if "killed" in s]) == len(faults) - 1, report
