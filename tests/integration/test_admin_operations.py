"""The admin client's group-offset, config, record, ACL and SCRAM operations against the real broker.

Offsets the admin client commits are read back by librdkafka (confluent-kafka, an independent client);
configs it sets are described by librdkafka's admin client too; ACLs run on the secured dev broker
(StandardAuthorizer), where a principal denied by them gets an ``AuthorizationError`` naming the resource.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from admin_helpers import produce_timestamped
from kafka_tools import run_tool

from kafka_handoff import devbroker
from kafka_handoff.admin import (
    AccessControlEntry,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigResource,
    ConfigResourceType,
    OffsetSpec,
    PatternType,
    RecordsToDelete,
    ResetSpec,
    ResourcePattern,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)
from kafka_handoff.aio.admin import AsyncAdminClient
from kafka_handoff.errors import (
    AuthorizationError,
    IllegalStateError,
    UnknownTopicOrPartitionError,
)
from kafka_handoff.producer import Producer
from kafka_handoff.types import OffsetAndMetadata, TopicPartition

pytestmark = pytest.mark.integration


@pytest.fixture
def admin(broker: Any) -> Iterator[AdminClient]:
    with AdminClient({"bootstrap.servers": broker.bootstrap_servers}) as client:
        yield client


def committed_by_librdkafka(
    bootstrap: str, group: str, tps: list[TopicPartition]
) -> dict[TopicPartition, int]:
    ck = pytest.importorskip("confluent_kafka")
    consumer = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = consumer.committed([ck.TopicPartition(tp.topic, tp.partition) for tp in tps], timeout=30)
    finally:
        consumer.close()
    return {TopicPartition(t.topic, t.partition): t.offset for t in got}


def test_alter_and_delete_group_offsets_as_librdkafka_reads_them(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=2)
    produce_timestamped(broker.bootstrap_servers, topic, 5, 2, int(time.time() * 1000))
    group = f"alter-{uuid.uuid4().hex[:8]}"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    admin.alter_consumer_group_offsets(group, {tp0: 3, tp1: OffsetAndMetadata(5, "by admin")}, timeout=30)
    assert committed_by_librdkafka(broker.bootstrap_servers, group, [tp0, tp1]) == {tp0: 3, tp1: 5}
    assert admin.list_group_offsets(group, timeout=30)[tp1] == OffsetAndMetadata(5, "by admin", None)

    admin.delete_consumer_group_offsets(group, [tp0], timeout=30)
    assert admin.list_group_offsets(group, [tp0, tp1], timeout=30) == {
        tp0: None,
        tp1: OffsetAndMetadata(5, "by admin", None),
    }
    # librdkafka's "no committed offset" (-1001)
    assert committed_by_librdkafka(broker.bootstrap_servers, group, [tp0])[tp0] < 0


def test_reset_plans_clamp_and_execute_only_when_asked(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=2)
    base = int(time.time() * 1000) - 60_000
    produce_timestamped(broker.bootstrap_servers, topic, 10, 2, base)
    group = f"reset-{uuid.uuid4().hex[:8]}"
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    admin.alter_consumer_group_offsets(group, {tp0: 4, tp1: 8}, timeout=30)

    plan = admin.reset_consumer_group_offsets(group, ResetSpec.to_earliest(), topics=[topic], timeout=30)
    assert [(r.partition, r.current, r.new) for r in plan] == [(tp0, 4, 0), (tp1, 8, 0)]
    assert admin.list_group_offsets(group, timeout=30) == {
        tp0: OffsetAndMetadata(4),
        tp1: OffsetAndMetadata(8),
    }

    shifted = admin.reset_consumer_group_offsets(group, ResetSpec.shift_by(5), topics=[topic], timeout=30)
    assert [r.new for r in shifted] == [9, 10]  # 8 + 5 clamped to the log end (10)
    assert [
        r.new for r in admin.reset_consumer_group_offsets(group, ResetSpec.to_offset(-3), timeout=30)
    ] == [0, 0]

    # Record i has timestamp base + i s: the first offset at or after base + 6.5 s is 7.
    at = admin.reset_consumer_group_offsets(
        group, ResetSpec.to_timestamp(base + 6500), topics=[tp1], dry_run=False, timeout=30
    )
    assert [(r.partition, r.new) for r in at] == [(tp1, 7)]
    ago = admin.reset_consumer_group_offsets(
        group, ResetSpec.by_duration(3500), topics=[tp0], now_ms=base + 9000, dry_run=False, timeout=30
    )
    assert [r.new for r in ago] == [6]
    assert committed_by_librdkafka(broker.bootstrap_servers, group, [tp0, tp1]) == {tp0: 6, tp1: 7}
    latest = admin.reset_consumer_group_offsets(group, ResetSpec.to_latest(), dry_run=False, timeout=30)
    assert [r.new for r in latest] == [10, 10]
    assert committed_by_librdkafka(broker.bootstrap_servers, group, [tp0, tp1]) == {tp0: 10, tp1: 10}


def test_reset_refuses_a_group_with_active_members(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    ck = pytest.importorskip("confluent_kafka")
    topic = topic_factory(partitions=1)
    group = f"active-{uuid.uuid4().hex[:8]}"
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": group})
    consumer.subscribe([topic])
    try:
        deadline = time.monotonic() + 60
        while not consumer.assignment():
            assert time.monotonic() < deadline, "librdkafka consumer never joined"
            consumer.poll(0.2)
        with pytest.raises(IllegalStateError, match=f"{group}.*active member"):
            admin.reset_consumer_group_offsets(
                group, ResetSpec.to_earliest(), topics=[topic], dry_run=False, timeout=30
            )
    finally:
        consumer.close()


def test_incremental_alter_configs_sets_and_deletes_and_names_the_failing_resource(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    ck_admin = pytest.importorskip("confluent_kafka.admin")
    topic = topic_factory(partitions=1)
    missing = f"missing-{uuid.uuid4().hex[:8]}"
    good = ConfigResource(ConfigResourceType.TOPIC, topic)
    with pytest.raises(UnknownTopicOrPartitionError, match=missing):
        admin.incremental_alter_configs(
            {
                good: [AlterConfigOp("retention.ms", "3600000"), AlterConfigOp("cleanup.policy", "compact")],
                ConfigResource(ConfigResourceType.TOPIC, missing): [AlterConfigOp("retention.ms", "1")],
            },
            timeout=30,
        )
    # The good resource was altered although the other failed; librdkafka sees it.
    oracle = ck_admin.AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    (future,) = oracle.describe_configs([ck_admin.ConfigResource("topic", topic)]).values()
    entries = future.result(30)
    assert entries["retention.ms"].value == "3600000"
    assert entries["cleanup.policy"].value == "compact"

    admin.incremental_alter_configs(
        {good: [AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE)]}, timeout=30
    )
    described = admin.describe_configs([good], timeout=30)[topic]
    assert described["retention.ms"].is_default
    assert described["cleanup.policy"].value == "compact"

    broker_configs = admin.describe_configs([ConfigResource(ConfigResourceType.BROKER, "1")], timeout=30)["1"]
    assert "log.retention.hours" in broker_configs


def test_delete_records_moves_the_low_watermark(admin: AdminClient, broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=2)
    produce_timestamped(broker.bootstrap_servers, topic, 6, 2, int(time.time() * 1000))
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    result = admin.delete_records({tp0: RecordsToDelete.before_offset(4), tp1: -1}, timeout=30)
    assert {tp: r.low_watermark for tp, r in result.items()} == {tp0: 4, tp1: 6}
    assert admin.list_offsets([tp0, tp1], OffsetSpec.EARLIEST, timeout=30) == {tp0: 4, tp1: 6}


def test_async_twin_alters_offsets_and_configs(broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    group = f"aio-{uuid.uuid4().hex[:8]}"
    tp = TopicPartition(topic, 0)

    async def run() -> tuple[Any, Any]:
        async with AsyncAdminClient({"bootstrap.servers": broker.bootstrap_servers}) as a:
            await a.alter_consumer_group_offsets(group, {tp: 0})
            await a.incremental_alter_configs(
                {ConfigResource(ConfigResourceType.TOPIC, topic): [AlterConfigOp("retention.ms", "7200000")]}
            )
            plan = await a.reset_consumer_group_offsets(group, ResetSpec.to_latest())
            return await a.list_group_offsets(group), (plan, await a.describe_configs([topic]))

    offsets, (plan, configs) = asyncio.run(run())
    assert offsets == {tp: OffsetAndMetadata(0)}
    assert [(r.partition, r.current, r.new) for r in plan] == [(tp, 0, 0)]
    assert configs[topic]["retention.ms"].value == "7200000"


# ------------------------------------------------------------------------------------ secured broker
def _wait_for_acls(admin: AdminClient, flt: AclBindingFilter, count: int) -> list[AclBinding]:
    """ACLs reach the authorizer through the metadata log: await them (bounded)."""
    deadline = time.monotonic() + 30
    while True:
        found = admin.describe_acls(flt, timeout=30)
        if len(found) == count or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_acls_create_describe_delete_and_deny_a_principal(secured: devbroker.Cluster) -> None:
    assert secured.security is not None
    topic = f"acl-{uuid.uuid4().hex[:8]}"
    with AdminClient({"bootstrap.servers": secured.bootstrap_servers}) as admin:
        from kafka_handoff.admin import NewTopic

        admin.create_topics([NewTopic(topic, 1, 1)], timeout=60)
        pattern = ResourcePattern(ResourceType.TOPIC, topic, PatternType.LITERAL)
        deny = AclBinding(
            pattern, AccessControlEntry("User:alice", "*", AclOperation.DELETE, AclPermissionType.DENY)
        )
        allow = AclBinding(
            pattern, AccessControlEntry("User:bob", "*", AclOperation.READ, AclPermissionType.ALLOW)
        )
        see = AclBinding(
            pattern, AccessControlEntry("User:alice", "*", AclOperation.DESCRIBE, AclPermissionType.ALLOW)
        )
        admin.create_acls([deny, allow, see], timeout=30)
        flt = AclBindingFilter(ResourceType.TOPIC, topic, PatternType.LITERAL)
        assert _wait_for_acls(admin, flt, 3) == sorted([deny, allow, see], key=str)
        only_alice = AclBindingFilter(ResourceType.TOPIC, topic, principal="User:alice")
        assert admin.describe_acls(only_alice, timeout=30) == sorted([deny, see], key=str)

        alice = secured.security.client_config("sasl_ssl", user="alice", mechanism="SCRAM-SHA-256")
        denied = pytest.raises(AuthorizationError, match=f"{topic}-0.*DELETE on TOPIC '{topic}'")
        with AdminClient(alice) as as_alice:
            with denied as info:
                as_alice.delete_records({TopicPartition(topic, 0): -1}, timeout=30)
            assert (info.value.operation, info.value.resource_type) == ("DELETE", "TOPIC")
            # every admin refusal names the operation and the resource it needed
            with pytest.raises(AuthorizationError, match=f"DESCRIBE_CONFIGS on TOPIC '{topic}'"):
                as_alice.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], timeout=30)

        deleted = admin.delete_acls(
            [AclBindingFilter(ResourceType.TOPIC, topic, PatternType.ANY, "User:bob")], timeout=30
        )
        assert deleted == [allow]
        assert _wait_for_acls(admin, flt, 2) == sorted([deny, see], key=str)
        admin.delete_acls([flt], timeout=30)


def test_scram_credentials_set_describe_and_delete(secured: devbroker.Cluster) -> None:
    assert secured.security is not None
    user = f"carol{uuid.uuid4().hex[:6]}"
    with AdminClient({"bootstrap.servers": secured.bootstrap_servers}) as admin:
        info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192)
        admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion(user, info, "s3cret-pw")], timeout=30
        )
        assert admin.describe_user_scram_credentials([user], timeout=30)[user].credential_infos == (info,)
        # Kafka's ConfigCommand describes the credential handoff set (never the password)
        oracle = run_tool(
            "kafka.admin.ConfigCommand", "--bootstrap-server", secured.bootstrap_servers, "--describe",
            "--entity-type", "users", "--entity-name", user, broker_jars=True,
        )  # fmt: skip
        assert "SCRAM-SHA-256=iterations=8192" in oracle and "s3cret-pw" not in oracle, oracle
        # The new user can authenticate with the password.
        props = {
            **secured.security.client_config("sasl_ssl", user="alice", mechanism="SCRAM-SHA-256"),
            "sasl.username": user,
            "sasl.password": "s3cret-pw",
        }
        with AdminClient(props) as as_carol:
            assert as_carol.describe_cluster(timeout=30).brokers
        admin.alter_user_scram_credentials(
            [UserScramCredentialDeletion(user, ScramMechanism.SCRAM_SHA_256)], timeout=30
        )
        # The controller accepted the deletion; the broker answering DescribeUserScramCredentials applies it
        # when its metadata image catches up (a moment later on a loaded machine): await that.
        deadline = time.monotonic() + 60
        while True:
            try:
                admin.describe_user_scram_credentials([user], timeout=30)
            except Exception as exc:
                assert user in str(exc), exc
                break
            assert time.monotonic() < deadline, f"{user}'s credential still described 60 s after its deletion"
            time.sleep(0.2)


def test_list_groups_filters_by_type_and_state(admin: AdminClient, broker: Any, topic_factory: Any) -> None:
    topic = topic_factory(partitions=1)
    group = f"filtered-{uuid.uuid4().hex[:8]}"
    admin.alter_consumer_group_offsets(
        group, {TopicPartition(topic, 0): 0}, timeout=30
    )  # an Empty classic group

    def ids(types: list[str] | None = None, states: list[str] | None = None) -> set[str]:
        return {g.group_id for g in admin.list_groups(timeout=30, types=types, states=states)}

    assert group in ids(types=["classic"], states=["Empty"])
    # Kafka's ConsumerGroupCommand lists it with the same filters
    oracle = run_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server",
        broker.bootstrap_servers, "--list", "--type", "classic", "--state", "Empty",
    )  # fmt: skip
    assert group in oracle.split(), oracle
    assert group in ids(states=["EMPTY"])
    assert group not in ids(states=["Stable"])
    assert group not in ids(types=["share", "consumer"])
    listed = [g for g in admin.list_groups(timeout=30, types=["classic"]) if g.group_id == group]
    assert [(g.type, g.state) for g in listed] == [("classic", "Empty")]


# ------------------------------------------------------------------------------------ cluster operations
def test_elections_reassignments_log_dirs_and_producers(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    from kafka_handoff.admin import ElectionType
    from kafka_handoff.errors import BrokerResponseError

    topic = topic_factory(partitions=2)
    # an idempotent producer
    produce_timestamped(broker.bootstrap_servers, topic, 3, 2, int(time.time() * 1000))
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    (node,) = [b.node_id for b in admin.describe_cluster(timeout=30).brokers]

    elected = admin.elect_leaders(ElectionType.PREFERRED, [tp0], timeout=30)
    assert list(elected) == [tp0]
    assert "ELECTION_NOT_NEEDED" in str(elected[tp0])  # the only replica leads already

    with pytest.raises(BrokerResponseError, match=f"{topic}-1") as info:
        admin.alter_partition_reassignments({tp0: [node], tp1: [node, 99]}, timeout=30)
    assert f"{topic}-0" not in str(info.value)  # the good partition is not reported as failed
    assert admin.list_partition_reassignments([tp0, tp1], timeout=30) == {}

    dirs = admin.describe_log_dirs(timeout=30)
    assert list(dirs) == [node]
    replicas = {tp: r for d in dirs[node].values() for tp, r in d.replica_infos.items()}
    assert replicas[tp0].size > 0 and not replicas[tp0].is_future

    producers = admin.describe_producers([tp0, tp1], timeout=30)
    assert [len(producers[tp]) for tp in (tp0, tp1)] == [1, 1]
    state = producers[tp0][0]
    assert (
        state.producer_id >= 0 and state.last_sequence == 2 and state.current_transaction_start_offset is None
    )
    # Kafka's TransactionsCommand describes the same producer; LogDirsCommand the same replica
    oracle = run_tool(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", broker.bootstrap_servers,
        "describe-producers", "--topic", topic, "--partition", "0",
    )  # fmt: skip
    row = next(line.split() for line in oracle.splitlines() if line.split()[:1] == [str(state.producer_id)])
    assert [row[1], row[3]] == [str(state.producer_epoch), str(state.last_sequence)], (
        oracle
    )  # 2: coord. epoch
    oracle = run_tool(
        "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", broker.bootstrap_servers,
        "--describe", "--topic-list", topic,
    )  # fmt: skip
    reported = json.loads(next(line for line in oracle.splitlines() if line.startswith("{")))
    sizes = {
        (p["partition"], b["broker"]): p["size"]
        for b in reported["brokers"] for d in b["logDirs"] for p in d["partitions"]
    }  # fmt: skip
    assert sizes[(f"{topic}-0", node)] == replicas[tp0].size


def test_transactions_listed_and_described_as_kafkas_tool_describes_them(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    topic = topic_factory(partitions=1)
    txn_id = f"txn-{uuid.uuid4().hex[:8]}"
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": txn_id}) as producer:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.send(topic, b"in-flight").result(60)
        listed = admin.list_transactions(states=["Ongoing"], timeout=30)
        assert txn_id in [t.transactional_id for t in listed]
        described = admin.describe_transactions([txn_id], timeout=30)[txn_id]
        assert described.state == "Ongoing"
        assert described.topic_partitions == (TopicPartition(topic, 0),)
        oracle = run_tool(
            "org.apache.kafka.tools.TransactionsCommand",
            "--bootstrap-server",
            broker.bootstrap_servers,
            "describe",
            "--transactional-id",
            txn_id,
        )
        assert str(described.producer_id) in oracle and "Ongoing" in oracle and f"{topic}-0" in oracle
        producer.abort_transaction(60)


def test_client_quotas_set_described_and_removed(admin: AdminClient, broker: Any) -> None:
    from kafka_handoff.admin import ClientQuotaAlteration, ClientQuotaEntity

    user = f"quota-{uuid.uuid4().hex[:6]}"
    entity = ClientQuotaEntity({"user": user})
    admin.alter_client_quotas([ClientQuotaAlteration(entity, {"producer_byte_rate": 1024.0})], timeout=30)
    deadline = time.monotonic() + 30
    while not (found := admin.describe_client_quotas({"user": user}, timeout=30)):
        assert time.monotonic() < deadline, "quota never visible"
        time.sleep(0.1)
    assert found == {entity: {"producer_byte_rate": 1024.0}}
    oracle = run_tool(
        "kafka.admin.ConfigCommand", "--bootstrap-server", broker.bootstrap_servers, "--describe",
        "--entity-type", "users", "--entity-name", user, broker_jars=True,
    )  # fmt: skip
    assert "producer_byte_rate=1024.0" in oracle, oracle
    admin.alter_client_quotas([ClientQuotaAlteration(entity, {"producer_byte_rate": None})], timeout=30)
    deadline = time.monotonic() + 30
    while admin.describe_client_quotas({"user": user}, timeout=30):
        assert time.monotonic() < deadline, "quota never removed"
        time.sleep(0.1)


def test_abort_transaction_ends_a_hanging_transaction(
    admin: AdminClient, broker: Any, topic_factory: Any
) -> None:
    from kafka_handoff.admin import AbortTransactionSpec

    topic = topic_factory(partitions=1)
    tp = TopicPartition(topic, 0)
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"hang-{uuid.uuid4().hex[:8]}"}
    )
    try:
        producer.init_transactions(60)
        producer.begin_transaction()
        producer.send(topic, b"hanging", partition=0).result(60)
        (state,) = admin.describe_producers([tp], timeout=30)[tp]
        assert state.current_transaction_start_offset == 0
        admin.abort_transaction(
            AbortTransactionSpec(tp, state.producer_id, state.producer_epoch, state.coordinator_epoch),
            timeout=30,
        )
        (after,) = admin.describe_producers([tp], timeout=30)[tp]
        assert after.current_transaction_start_offset is None
        # The abort marker follows the record: the log end moved past it.
        assert admin.list_offsets([tp], timeout=30)[tp] == 2
    finally:
        producer.close(5)


def test_describe_features_as_kafkas_feature_command_describes_them(admin: AdminClient, broker: Any) -> None:
    features = admin.describe_features(timeout=30)
    assert "metadata.version" in features.supported_features
    assert features.finalized_features_epoch is not None
    out = run_tool(
        "org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", broker.bootstrap_servers, "describe"
    )
    # Lines like: Feature: transaction.version  SupportedMinVersion: 0  SupportedMaxVersion: 2
    #             FinalizedVersionLevel: 2 ...
    levels: dict[str, int] = {}
    for line in out.splitlines():
        cols = line.replace("\t", " ").split()
        if len(cols) >= 8 and cols[0] == "Feature:" and "FinalizedVersionLevel:" in cols:
            level = cols[cols.index("FinalizedVersionLevel:") + 1]
            if level.isdigit() and int(level) > 0:
                levels[cols[1]] = int(level)
    finalized = {k: v.max_version for k, v in features.finalized_features.items() if k != "metadata.version"}
    assert finalized, out
    assert {k: levels.get(k) for k in finalized} == finalized
