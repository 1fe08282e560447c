"""``revoke.completion`` (issue 14 item 8, KIP-983 "Compatibility") and Java's KIP-848 shortcut.

* ``next-poll`` (default): a revoke requested in poll N completes at the start of poll N+1 (KIP-983).
* ``same-poll``: it completes in poll N, as before KIP-983, for applications written for that.
* Under KIP-848 with no rebalance listener and no use of KIP-983's API (``to_be_revoked_partitions``,
  ``delay_revoke``), the revoke completes in the requesting poll too: Java's consumer completes it without
  the application then, so nothing waits for another trip through ``poll()``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from semantics_harness import ConfiguredHarness
from test_consumer_dispatch import REVOKE, T0, T1

from kafka_handoff.config import parse_consumer_config
from kafka_handoff.errors import ConfigError
from kafka_handoff.group.membership import CallbackNeeded

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

Make = Callable[..., ConfiguredHarness]


@pytest.fixture
def make() -> Iterator[Make]:
    made: list[ConfiguredHarness] = []

    def factory(config: dict[str, Any] | None = None, *, listener: bool = True) -> ConfiguredHarness:
        harness = ConfiguredHarness(config, listener=listener)
        made.append(harness)
        return harness

    yield factory
    for harness in made:
        harness.shutdown()


def revoke_t0(h: ConfiguredHarness) -> None:
    h.own(T0, T1)
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))


# ------------------------------------------------------------------------------------------------ config
def test_the_default_is_next_poll() -> None:
    cfg = parse_consumer_config({"bootstrap.servers": "x:1"})
    assert cfg.get("revoke.completion") == "next-poll"
    assert cfg.revoke_completion == "next-poll"


@pytest.mark.parametrize("bad", ["later", "next_poll", "", 1])
def test_a_bad_value_names_the_key_and_the_allowed_values(bad: Any) -> None:
    with pytest.raises(ConfigError) as info:
        parse_consumer_config({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "revoke.completion": bad})
    message = str(info.value)
    assert "revoke.completion" in message
    assert "next-poll" in message and "same-poll" in message


# ------------------------------------------------------------------------------------------- same-poll
@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_same_poll_completes_the_revoke_in_the_poll_that_requested_it(make: Make, protocol: str) -> None:
    h = make({"revoke.completion": "same-poll", "group.protocol": protocol})
    revoke_t0(h)
    records = h.consumer.poll(0)
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.completed() == [(1, None)]
    assert records.to_be_revoked_partitions == frozenset()
    assert h.consumer.delay_revoke([T0]) is False  # nothing left to delay
    h.consumer.poll(0)
    assert h.calls() == [("revoked", frozenset({T0}))]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_next_poll_with_a_listener_completes_in_the_next_poll(make: Make, protocol: str) -> None:
    h = make({"group.protocol": protocol})
    revoke_t0(h)
    assert h.consumer.poll(0).to_be_revoked_partitions == {T0}
    assert h.calls() == [] and h.completed() == []
    h.consumer.poll(0)
    assert h.calls() == [("revoked", frozenset({T0}))]
    assert h.completed() == [(1, None)]


# -------------------------------------------------------------------------- KIP-848 without a listener
def test_kip848_without_listener_or_kip983_use_completes_in_the_requesting_poll(make: Make) -> None:
    h = make({"group.protocol": "consumer"}, listener=False)
    revoke_t0(h)
    h.consumer.poll(0)
    assert h.completed() == [(1, None)]  # no second trip through poll() needed
    assert not h.consumer._dispatch.revoke.revoke_requested_partitions()


def test_kip848_without_listener_waits_for_the_next_poll_once_the_app_reads_to_be_revoked(
    make: Make,
) -> None:
    h = make({"group.protocol": "consumer"}, listener=False)
    h.own(T0, T1)
    assert h.consumer.poll(0).to_be_revoked_partitions == frozenset()  # a KIP-983 loop reads this
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    assert h.consumer.poll(0).to_be_revoked_partitions == {T0}
    assert h.completed() == []
    assert h.consumer.delay_revoke([T0]) is True
    h.consumer.poll(0)
    assert h.completed() == []
    h.consumer.poll(0)
    assert h.completed() == [(1, None)]


def test_kip848_without_listener_columnar_poll_reading_to_be_revoked_counts_as_kip983_use(
    make: Make,
) -> None:
    h = make({"group.protocol": "consumer"}, listener=False)
    h.own(T0, T1)
    assert h.consumer.poll_columns(0).to_be_revoked_partitions == frozenset()
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    assert h.consumer.poll_columns(0).to_be_revoked_partitions == {T0}
    assert h.completed() == []


def test_kip848_without_listener_waits_once_delay_revoke_was_used(make: Make) -> None:
    h = make({"group.protocol": "consumer"}, listener=False)
    h.own(T0, T1)
    assert h.consumer.delay_revoke([]) is True
    h.inject(CallbackNeeded(REVOKE, frozenset({T0}), seq=1))
    h.consumer.poll(0)
    assert h.completed() == []
    h.consumer.poll(0)
    assert h.completed() == [(1, None)]


def test_classic_without_listener_keeps_next_poll(make: Make) -> None:
    h = make({"group.protocol": "classic"}, listener=False)
    revoke_t0(h)
    h.consumer.poll(0)
    assert h.completed() == []
    h.consumer.poll(0)
    assert h.completed() == [(1, None)]
