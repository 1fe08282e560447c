"""The admin client and the ``handoff topics|groups`` commands against the real broker.

Groups are made by confluent-kafka consumers (librdkafka) of both protocols, so what the admin client
reports is checked against what an independent client says it owns and committed; only those tests skip
without confluent-kafka.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from kafka_handoff.admin import AdminClient, GroupDescription, NewTopic
from kafka_handoff.cli.main import main
from kafka_handoff.errors import (
    GroupIdNotFoundError,
    InvalidReplicationFactorError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
    error_class,
)
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import TopicPartition

pytestmark = pytest.mark.integration


def confluent() -> Any:
    """confluent-kafka, the independent client of the group tests (they alone skip without it)."""
    return pytest.importorskip("confluent_kafka")


RECORDS_PER_PARTITION = 10
NonEmptyGroupError = error_class(68)  # NON_EMPTY_GROUP


@pytest.fixture
def admin(broker: Any) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": broker.bootstrap_servers}) as client:
        yield client


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def produce(bootstrap: str, topic: str, partitions: int) -> None:
    producer = confluent().Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for p in range(partitions):
        for i in range(RECORDS_PER_PARTITION):
            producer.produce(topic, value=b"v%d" % i, partition=p)
    assert producer.flush(30) == 0


def table_rows(output: str) -> list[list[str]]:
    """The body rows of the rich tables in ``output``, as lists of stripped cells."""
    return [
        [c.strip() for c in line.strip().strip("│").split("│")] for line in output.splitlines() if "│" in line
    ]


# ============================================================================================ topics
def test_create_describe_and_delete_a_topic(admin: AdminClient) -> None:
    name = unique("admin-create")
    configs = {"cleanup.policy": "compact", "retention.ms": "3600000"}
    result = admin.create_topics([NewTopic(name, 3, 1, configs)])[name]
    assert (result.name, result.num_partitions, result.replication_factor, result.created) == (
        name,
        3,
        1,
        True,
    )
    assert result.topic_id is not None
    assert result.configs["cleanup.policy"] == "compact"

    # Created means usable: every partition has a leader that answers at once.
    tps = [TopicPartition(name, p) for p in range(3)]
    assert admin.list_offsets(tps) == dict.fromkeys(tps, 0)

    described = admin.describe_topics([name])[name]
    assert described.topic_id == result.topic_id
    assert [p.partition for p in described.partitions] == [0, 1, 2]
    assert all(p.leader >= 0 and len(p.replicas) == 1 for p in described.partitions)
    assert described.replication_factor == 1

    entries = admin.describe_configs([name])[name]
    assert entries["cleanup.policy"].value == "compact"
    assert entries["cleanup.policy"].source == "TOPIC_CONFIG"
    assert entries["retention.ms"].value == "3600000"
    assert entries["segment.bytes"].is_default

    assert name in {t.name for t in admin.list_topics()}
    admin.delete_topics([name])
    assert name not in {t.name for t in admin.list_topics()}
    with pytest.raises(UnknownTopicOrPartitionError, match=f"topic '{name}'"):
        admin.describe_topics([name])


def test_creating_an_existing_topic_fails_naming_it_unless_if_not_exists(admin: AdminClient) -> None:
    name = unique("admin-dup")
    admin.create_topics([NewTopic(name, 2, 1)])
    try:
        with pytest.raises(TopicAlreadyExistsError, match=f"cannot create topic '{name}'"):
            admin.create_topics([NewTopic(name, 2, 1)])
        again = admin.create_topics([NewTopic(name, 5, 1)], if_not_exists=True)[name]
        assert (again.created, again.num_partitions) == (False, 2)  # the existing topic, untouched
    finally:
        admin.delete_topics([name])


def test_bad_topic_requests_fail_at_once_with_the_brokers_reason(
    admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = unique("admin-bad")
    calls: list[Any] = []
    submit = admin._calls.submit

    def recording(call: Any, now_ms: int) -> None:
        calls.append(call)
        submit(call, now_ms)

    monkeypatch.setattr(admin._calls, "submit", recording)
    with pytest.raises(InvalidReplicationFactorError, match=f"topic '{name}'"):
        admin.create_topics([NewTopic(name, 1, 3)], timeout=120)  # one broker: replication 3 is impossible
    monkeypatch.undo()
    # A non-retriable error is not retried until the timeout: one CreateTopics request, answered.
    creates = [c for c in calls if c.api_key == ApiKey.CREATE_TOPICS]
    assert [c.attempts for c in creates] == [1], [(c.name, c.attempts) for c in calls]
    assert admin.create_topics([NewTopic(name, 1, 1)], validate_only=True)[name].num_partitions == 1
    assert name not in {t.name for t in admin.list_topics()}  # validate_only created nothing
    with pytest.raises(UnknownTopicOrPartitionError, match=f"cannot delete topic '{name}'"):
        admin.delete_topics([name])
    admin.delete_topics([name], if_exists=True)


def test_create_partitions_grows_a_topic(admin: AdminClient, topic_factory: Any) -> None:
    name = topic_factory(partitions=2)
    admin.create_partitions({name: 5})
    described = admin.describe_topics([name])[name]
    assert [p.partition for p in described.partitions] == [0, 1, 2, 3, 4]
    assert all(p.leader >= 0 for p in described.partitions)


def test_describe_cluster_lists_the_broker(admin: AdminClient, broker: Any) -> None:
    cluster = admin.describe_cluster()
    assert cluster.cluster_id
    ports = {b.port for b in cluster.brokers}
    bootstrap_ports = {int(hp.rsplit(":", 1)[1]) for hp in broker.bootstrap_servers.split(",")}
    assert bootstrap_ports <= ports
    assert cluster.controller_id in {b.node_id for b in cluster.brokers}


# ============================================================================================ groups
class Group:
    """Two confluent-kafka consumers in one group, each owning half of a 4-partition topic."""

    def __init__(self, bootstrap: str, topic: str, protocol: str) -> None:
        self.topic = topic
        self.protocol = protocol
        self.group_id = unique(f"admin-{protocol}")
        conf = {
            "bootstrap.servers": bootstrap,
            "group.id": self.group_id,
            "group.protocol": protocol,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
        confluent_kafka = confluent()
        self.consumers = [confluent_kafka.Consumer({**conf, "client.id": f"c{i}"}) for i in range(2)]
        for c in self.consumers:
            c.subscribe([topic])
        wait_until(self._balanced, f"both {protocol} consumers to own 2 partitions")
        # Commit offsets 3 and 7 alternately, each consumer for its own partitions.
        self.committed: dict[TopicPartition, int] = {}
        for c in self.consumers:
            offsets = [
                confluent_kafka.TopicPartition(topic, tp.partition, 3 if tp.partition % 2 == 0 else 7)
                for tp in c.assignment()
            ]
            c.commit(offsets=offsets, asynchronous=False)
            self.committed.update({TopicPartition(topic, o.partition): o.offset for o in offsets})

    def _balanced(self) -> bool:
        for c in self.consumers:
            c.poll(0.05)
        return all(len(c.assignment()) == 2 for c in self.consumers)

    def owned(self) -> dict[str, set[TopicPartition]]:
        """Member id -> partitions, as each consumer itself reports them."""
        return {
            c.memberid(): {TopicPartition(tp.topic, tp.partition) for tp in c.assignment()}
            for c in self.consumers
        }

    def close(self) -> None:
        for c in self.consumers:
            c.close()


@pytest.fixture(params=["classic", "consumer"])
def group(request: pytest.FixtureRequest, broker: Any, topic_factory: Any) -> Iterator[Group]:
    topic = topic_factory(partitions=4)
    produce(broker.bootstrap_servers, topic, 4)
    g = Group(broker.bootstrap_servers, topic, request.param)
    try:
        yield g
    finally:
        g.close()


def _settled(admin: AdminClient, g: Group) -> GroupDescription | None:
    d = admin.describe_groups([g.group_id])[g.group_id]
    by_member = {m.member_id: set(m.assignment) for m in d.members}
    if d.state != "Stable" or by_member != g.owned():
        return None
    if d.type == "consumer" and any(set(m.target_assignment or ()) != set(m.assignment) for m in d.members):
        return None
    return d


def test_list_and_describe_groups_of_both_protocols(admin: AdminClient, group: Group) -> None:
    protocol = group.protocol
    listing = {g.group_id: g for g in admin.list_groups()}[group.group_id]
    assert (listing.type, listing.protocol_type) == (protocol, "consumer")
    assert listing.state == "Stable"

    # The broker's view and the consumers' own view of who owns what agree.
    d = wait_until(lambda: _settled(admin, group), "the group description to match the consumers")
    assert d.type == protocol
    assert d.coordinator is not None
    assert sorted(m.client_id for m in d.members) == ["c0", "c1"]
    assert sorted(tp for m in d.members for tp in m.assignment) == [
        TopicPartition(group.topic, p) for p in range(4)
    ]
    if protocol == "consumer":
        assert d.group_epoch is not None and d.group_epoch > 0
        assert all(m.member_epoch is not None and m.member_epoch > 0 for m in d.members)
        assert all(m.subscribed_topics == (group.topic,) for m in d.members)
        assert d.assignor  # server-side assignor, e.g. "uniform"
    else:
        assert d.assignor in ("range", "roundrobin", "cooperative-sticky")
        assert all(m.member_epoch is None and m.target_assignment is None for m in d.members)

    offsets = admin.list_group_offsets(group.group_id)
    assert {tp: (o.offset, o.metadata) for tp, o in offsets.items() if o is not None} == {
        tp: (o, "") for tp, o in group.committed.items()
    }
    assert len(offsets) == 4
    some = [TopicPartition(group.topic, 0), TopicPartition(group.topic, 9)]
    picked = admin.list_group_offsets(group.group_id, some)
    assert picked[TopicPartition(group.topic, 0)] == offsets[TopicPartition(group.topic, 0)]
    assert picked[TopicPartition(group.topic, 9)] is None


def test_groups_with_members_cannot_be_deleted_then_can(admin: AdminClient, group: Group) -> None:
    with pytest.raises(NonEmptyGroupError, match=f"group '{group.group_id}'"):
        admin.delete_groups([group.group_id])
    group.close()
    group.consumers = []
    wait_until(
        lambda: admin.describe_groups([group.group_id])[group.group_id].state == "Empty", "an empty group"
    )
    admin.delete_groups([group.group_id])
    assert group.group_id not in {g.group_id for g in admin.list_groups()}
    with pytest.raises(GroupIdNotFoundError, match=f"group '{group.group_id}' does not exist"):
        admin.describe_groups([group.group_id])


def test_describing_an_unknown_group_names_it(admin: AdminClient) -> None:
    with pytest.raises(GroupIdNotFoundError, match="group 'no-such-group-"):
        admin.describe_groups([unique("no-such-group")])


# ============================================================================================ CLI
def test_cli_topics_create_list_delete(broker: Any, capsys: pytest.CaptureFixture[str]) -> None:
    name = unique("cli-topic")
    b = ["--bootstrap-servers", broker.bootstrap_servers]
    args = ["topics", "create", name, "--partitions", "3", "--replication-factor", "1", "--config"]
    assert main([*args, "cleanup.policy=compact", *b]) == 0
    assert f"created topic {name} (3 partitions, replication factor 1" in capsys.readouterr().out

    assert main(["topics", "create", name, "--partitions", "3", *b]) == 1
    assert f"cannot create topic '{name}'" in capsys.readouterr().err

    assert main(["topics", "list", *b]) == 0
    rows = {r[0]: r for r in table_rows(capsys.readouterr().out)}
    assert rows[name][1:3] == ["3", "1"]

    assert main(["topics", "describe", name, *b]) == 0
    out = capsys.readouterr().out
    assert ["cleanup.policy", "compact", "TOPIC_CONFIG"] in table_rows(out)

    assert main(["topics", "delete", name, *b]) == 0
    assert f"deleted topic {name}" in capsys.readouterr().out
    assert main(["topics", "list", *b]) == 0
    assert name not in {r[0] for r in table_rows(capsys.readouterr().out)}


def test_cli_groups_list_and_describe_show_members_offsets_and_lag(
    broker: Any, group: Group, admin: AdminClient, capsys: pytest.CaptureFixture[str]
) -> None:
    b = ["--bootstrap-servers", broker.bootstrap_servers]
    wait_until(lambda: _settled(admin, group), "the group to settle")

    assert main(["groups", "list", *b]) == 0
    listed = {r[0]: r for r in table_rows(capsys.readouterr().out)}
    assert listed[group.group_id][1:3] == [group.protocol, "Stable"]

    assert main(["groups", "describe", group.group_id, *b]) == 0
    out = capsys.readouterr().out
    rows = table_rows(out)
    owners = {tp: member for member, tps in group.owned().items() for tp in tps}
    client_of = {c.memberid(): f"c{i}" for i, c in enumerate(group.consumers)}
    for member_id, tps in group.owned().items():
        (member_row,) = [r for r in rows if r[0] == member_id]
        assert client_of[member_id] in member_row
        assert f"{group.topic}: {','.join(str(tp.partition) for tp in sorted(tps))}" in member_row
    for tp, committed in group.committed.items():
        lag = RECORDS_PER_PARTITION - committed
        expected = [group.topic, str(tp.partition), str(committed), str(RECORDS_PER_PARTITION), str(lag)]
        expected.append(client_of[owners[tp]])
        assert expected in rows, f"no offsets row {expected} in:\n{out}"
    total = sum(RECORDS_PER_PARTITION - c for c in group.committed.values())
    assert f"total lag {total}" in out

    assert main(["groups", "describe", unique("cli-no-group"), *b]) == 1
    assert "does not exist" in capsys.readouterr().err
