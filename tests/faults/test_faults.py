"""The fault suite (issue 13): broker failures and network faults while groups consume.

One 3-node cluster for the module (:func:`kafka_handoff.bench.faults.start_fault_cluster`: RF 3,
``min.insync.replicas=2``, ``broker.session.timeout.ms=4000``, ``controlled.shutdown.enable=true``, a fault
proxy in front of every broker).  Each test runs one fault of :data:`kafka_handoff.bench.faults.FAULTS`
(:func:`~kafka_handoff.bench.faults.run_fault`) while an idempotent ``acks=all`` producer writes and two
groups consume with asynchronous processing and KIP-983 delayed revocation -- one on the classic protocol
(cooperative-sticky), one on the consumer protocol (KIP-848) -- a member joining during the fault and one
leaving after it.  Each asserts, for both groups:

* every acknowledged record is consumed;
* none is processed again after a successful commit covered it (the app committed before the partition
  moved);
* no partition stalls longer than the fault's outage plus ``STALL_BOUND_S`` = 30 s (request.timeout.ms
  10 s + broker.session.timeout.ms 4 s + the classic session.timeout.ms 10 s, for a coordinator that took
  over mid-rebalance and waits for the members to rejoin, + 6 s for metadata refreshes, backoff and a busy
  machine).  The stall
  of a partition is the longest time an acknowledged record waited until the application started
  processing it.  The outage is what no client can route around: 0 for a killed, stopped or hung node
  (the other two take over once it is fenced -- however long its restart takes), the fault's length for a
  proxy fault (its broker stays the leader), the time the application held its records in
  ``coordinator-dies-mid-rebalance``;
* no error reaches the application where Java would not raise one (``poll()`` raises nothing; a commit may
  fail only with the membership errors Java's ``commitSync`` raises too);
* every ``close()`` returns within its timeout (15 s, + 2 s of scheduling slack);
* and the producer failed no record and wrote none twice.

The waits are for events (group settled, records consumed); the only sleeps are the faults' lengths.
``coordinator-dies-mid-rebalance`` and ``rolling-bounce`` are Kafka's ConsumerBounceTest scenarios.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import asdict

import pytest

from kafka_handoff.bench.faults import FAULTS, FaultRun, run_fault, start_fault_cluster
from kafka_handoff.devbroker import Cluster
from kafka_handoff.devbroker.probe import fetch_metadata
from kafka_handoff.devbroker.proxy import FaultProxy

pytestmark = [pytest.mark.integration, pytest.mark.cluster, pytest.mark.faults]


@pytest.fixture(scope="module")
def fault_cluster() -> Iterator[tuple[Cluster, FaultProxy]]:
    cluster, proxy = start_fault_cluster()
    try:
        yield cluster, proxy
    finally:
        cluster.stop()
        proxy.close()


def report(run: FaultRun) -> str:
    lines = [f"{run.fault}: fault {run.fault_s} s, outage {run.outage_s} s, scenario {run.elapsed_s} s"]
    for g in run.groups:
        data = asdict(g)
        data["unexpected_errors"] = data["unexpected_errors"][:3]
        lines.append(f"  {data}")
    return "\n".join(lines)


def test_clients_through_the_proxy_only_learn_proxy_addresses(
    fault_cluster: tuple[Cluster, FaultProxy],
) -> None:
    cluster, proxy = fault_cluster
    meta = fetch_metadata(proxy.bootstrap_servers, [], 10.0)
    assert {f"{b.host}:{b.port}" for b in meta.brokers.values()} == set(proxy.bootstrap_servers.split(","))
    direct = fetch_metadata(cluster.bootstrap_servers, [], 10.0)
    direct_addresses = {f"{b.host}:{b.port}" for b in direct.brokers.values()}
    assert direct_addresses == set(cluster.bootstrap_servers.split(","))


@pytest.mark.parametrize("fault", list(FAULTS))
def test_fault(fault_cluster: tuple[Cluster, FaultProxy], fault: str) -> None:
    cluster, proxy = fault_cluster
    # 60 s to settle and to drain: with the fixes both take seconds; without them a scenario fails in ~2 min.
    run = run_fault(cluster, proxy, fault, settle_timeout=60, drain_timeout=60)
    print(report(run))
    problems = run.problems()
    assert not problems, "\n".join(problems) + "\n" + report(run)
    assert {g.group for g in run.groups} == {"handoff/classic", "handoff/consumer"}
    assert all(g.acknowledged > 0 for g in run.groups)
