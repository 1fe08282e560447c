"""The AdminClient without a broker: config errors, bounded timeouts and close, and its response handlers
fed with kio-built responses (error mapping, group descriptions, offsets)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kafka_handoff.admin import AdminClient, NewTopic
from kafka_handoff.admin.calls import AdminCall, NoRetry, Steps
from kafka_handoff.errors import (
    ConfigError,
    ConnectionError_,
    GroupIdNotFoundError,
    IllegalStateError,
    KafkaTimeoutError,
    RequestTimedOutError,
    TopicAlreadyExistsError,
    UnknownTopicOrPartitionError,
)
from kafka_handoff.group.assignors.base import MemberAssignment, MemberSubscription
from kafka_handoff.group.protocol_data import encode_assignment, encode_subscription
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.protocol.wire import build_response
from kafka_handoff.types import BrokerNode, ClusterMetadata, OffsetAndMetadata, PartitionInfo, TopicPartition

pytestmark = pytest.mark.threads  # real clients with their network threads (no broker)

FAR = 1 << 62  # a deadline nobody reaches in these tests


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def admin() -> Iterator[AdminClient]:
    client = AdminClient({"bootstrap.servers": f"127.0.0.1:{_closed_port()}", "reconnect.backoff.ms": 20})
    try:
        yield client
    finally:
        client.close(timeout=2)


def handle(call: AdminCall, response: Any, version: int, node: int = 1) -> Any:
    """Run a call's handler; ``NoRetry`` is unwrapped and raised as the error it carries."""
    try:
        return call.handle(response, version, node)
    except NoRetry as wrapper:
        raise wrapper.error from None


def test_missing_bootstrap_servers_is_a_config_error_naming_the_key() -> None:
    with pytest.raises(ConfigError, match=r"bootstrap\.servers"):
        AdminClient({})


def test_unknown_config_key_is_rejected() -> None:
    with pytest.raises(ConfigError, match=r"group\.id"):
        AdminClient({"bootstrap.servers": "127.0.0.1:1", "group.id": "g"})


def test_without_a_broker_calls_time_out_naming_the_operation(admin: AdminClient) -> None:
    # The call's own timeout error, with what went wrong last (not a generic "did not complete").
    with pytest.raises(KafkaTimeoutError, match=r"DescribeCluster timed out .*last error: cannot connect"):
        admin.describe_cluster(timeout=2.0)  # long enough for a connect attempt on a loaded machine
    with pytest.raises(KafkaTimeoutError, match=r"CreateTopics\(topic 't'\)"):
        admin.create_topics([NewTopic("t", 1, 1)], timeout=0.3)


def test_close_is_bounded_and_later_calls_fail(admin: AdminClient) -> None:
    admin.close(timeout=1)
    assert not admin._thread.alive
    with pytest.raises(IllegalStateError, match="closed"):
        admin.list_topics()
    admin.close()  # idempotent


def test_duplicate_and_empty_names_are_rejected_before_any_request(admin: AdminClient) -> None:
    with pytest.raises(ValueError, match="'a' is given more than once"):
        admin.delete_topics(["a", "a"])
    with pytest.raises(ValueError, match="non-empty"):
        admin.describe_groups([""])


# ----------------------------------------------------------------------------------------- CreateTopics
def _create_response(name: str, code: int, message: str | None = None) -> Any:
    return build_response(
        ApiKey.CREATE_TOPICS,
        7,
        {
            "throttle_time": 0,
            "topics": [
                {
                    "name": name,
                    "topic_id": uuid.UUID(int=7),
                    "error_code": code,
                    "error_message": message,
                    "num_partitions": 3,
                    "replication_factor": 1,
                    "configs": [
                        {
                            "name": "cleanup.policy",
                            "value": "compact",
                            "read_only": False,
                            "config_source": 1,
                            "is_sensitive": False,
                        }
                    ],
                }
            ],
        },
    )


def test_create_topics_handler_maps_success_and_already_exists(admin: AdminClient) -> None:
    call = admin._create_topic_call(NewTopic("t", 3, 1, {"cleanup.policy": "compact"}), False, FAR)
    body = call.build(7, 5000)
    assert body["topics"][0]["configs"] == [{"name": "cleanup.policy", "value": "compact"}]
    assert body["timeout"] == 5000
    result = handle(call, _create_response("t", 0), 7)
    assert (result.name, result.topic_id, result.num_partitions, result.replication_factor) == (
        "t",
        uuid.UUID(int=7),
        3,
        1,
    )
    assert result.configs["cleanup.policy"] == "compact"
    with pytest.raises(TopicAlreadyExistsError, match="cannot create topic 't'"):
        handle(call, _create_response("t", 36, "Topic 't' already exists."), 7)


def test_create_after_a_broker_side_timeout_accepts_already_exists(admin: AdminClient) -> None:
    # The first attempt timed out on the broker but created the topic; the retry must not report an error.
    call = admin._create_topic_call(NewTopic("t", 3, 1), False, FAR)
    with pytest.raises(RequestTimedOutError):
        call.handle(_create_response("t", 7), 7, 1)  # retriable: raised as is, not wrapped in NoRetry
    assert handle(call, _create_response("t", 36), 7).name == "t"


def test_delete_topics_handler_names_the_missing_topic(admin: AdminClient) -> None:
    call = admin._delete_topic_call("gone", FAR)
    assert call.build(6, 1000)["topics"] == [{"name": "gone", "topic_id": None}]
    assert call.build(5, 1000)["topic_names"] == ["gone"]
    response = build_response(
        ApiKey.DELETE_TOPICS, 6, {"throttle_time": 0, "responses": [{"name": "gone", "error_code": 3}]}
    )
    with pytest.raises(UnknownTopicOrPartitionError, match="cannot delete topic 'gone': it does not exist"):
        handle(call, response, 6)


# ----------------------------------------------------------------------------------------- groups
def _member(topic_name: str, topic_id: uuid.UUID, parts: list[int]) -> dict[str, Any]:
    return {"topic_partitions": [{"topic_id": topic_id, "topic_name": topic_name, "partitions": parts}]}


def test_consumer_group_describe_resolves_topic_ids_through_metadata(admin: AdminClient) -> None:
    tid = uuid.uuid4()
    response = build_response(
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        1,
        {
            "throttle_time": 0,
            "groups": [
                {
                    "error_code": 0,
                    "group_id": "g",
                    "group_state": "Reconciling",
                    "group_epoch": 4,
                    "assignment_epoch": 4,
                    "assignor_name": "uniform",
                    "members": [
                        {
                            "member_id": "m1",
                            "instance_id": None,
                            "rack_id": None,
                            "member_epoch": 3,
                            "client_id": "c1",
                            "client_host": "/10.0.0.1",
                            "subscribed_topic_names": ["orders"],
                            "subscribed_topic_regex": None,
                            "assignment": _member("", tid, [2, 0]),
                            "target_assignment": _member("", tid, [0]),
                            "member_type": 1,
                        }
                    ],
                    "authorized_operations": 0,
                }
            ],
        },
    )
    pending = handle(admin._consumer_group_describe_call("g", FAR), response, 1)
    group = pending.resolve({tid: "orders"})
    assert (group.type, group.state, group.assignor, group.group_epoch) == (
        "consumer",
        "Reconciling",
        "uniform",
        4,
    )
    (member,) = group.members
    assert member.assignment == (TopicPartition("orders", 0), TopicPartition("orders", 2))
    assert member.target_assignment == (TopicPartition("orders", 0),)
    assert (member.member_epoch, member.client_id, member.subscribed_topics) == (3, "c1", ("orders",))


def test_consumer_group_describe_answers_none_for_classic_groups(admin: AdminClient) -> None:
    group = {
        "error_code": 69,
        "error_message": "Group g is not a consumer group.",
        "group_id": "g",
        "group_state": "",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
        "authorized_operations": 0,
    }
    response = build_response(ApiKey.CONSUMER_GROUP_DESCRIBE, 1, {"throttle_time": 0, "groups": [group]})
    assert handle(admin._consumer_group_describe_call("g", FAR), response, 1) is None


def _describe_groups_response(state: str, members: list[dict[str, Any]]) -> Any:
    return build_response(
        ApiKey.DESCRIBE_GROUPS,
        5,
        {
            "throttle_time": 0,
            "groups": [
                {
                    "error_code": 0,
                    "group_id": "g",
                    "group_state": state,
                    "protocol_type": "consumer",
                    "protocol_data": "cooperative-sticky",
                    "members": members,
                    "authorized_operations": 0,
                }
            ],
        },
    )


def test_describe_groups_decodes_classic_member_assignments(admin: AdminClient) -> None:
    assignment = encode_assignment(MemberAssignment((TopicPartition("t", 1), TopicPartition("t", 0))))
    subscription = encode_subscription(MemberSubscription(("t",)))
    response = _describe_groups_response(
        "Stable",
        [
            {
                "member_id": "m",
                "group_instance_id": "static-1",
                "client_id": "c",
                "client_host": "/h",
                "member_metadata": subscription,
                "member_assignment": assignment,
            }
        ],
    )
    group = handle(admin._describe_groups_call("g", FAR), response, 5).resolve({})
    assert (group.type, group.state, group.assignor) == ("classic", "Stable", "cooperative-sticky")
    (member,) = group.members
    assert member.assignment == (TopicPartition("t", 0), TopicPartition("t", 1))
    assert member.subscribed_topics == ("t",)
    assert member.group_instance_id == "static-1"
    assert member.target_assignment is None and member.member_epoch is None


def test_describe_groups_reports_a_dead_group_as_not_found(admin: AdminClient) -> None:
    with pytest.raises(GroupIdNotFoundError, match="group 'g' does not exist"):
        handle(admin._describe_groups_call("g", FAR), _describe_groups_response("Dead", []), 5)


# ----------------------------------------------------------------------------------------- offsets
def test_list_group_offsets_builds_both_request_shapes(
    admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    captured: list[AdminCall] = []

    def fake_run_one(c: AdminCall) -> Any:
        captured.append(c)
        v9 = build_response(
            ApiKey.OFFSET_FETCH,
            9,
            {
                "throttle_time": 0,
                "groups": [
                    {
                        "group_id": "g",
                        "error_code": 0,
                        "topics": [
                            {
                                "name": "t",
                                "partitions": [
                                    {
                                        "partition_index": 0,
                                        "committed_offset": 5,
                                        "committed_leader_epoch": 2,
                                        "metadata": "m",
                                        "error_code": 0,
                                    },
                                    {
                                        "partition_index": 1,
                                        "committed_offset": -1,
                                        "committed_leader_epoch": -1,
                                        "metadata": "",
                                        "error_code": 0,
                                    },
                                ],
                            }
                        ],
                    }
                ],
            },
        )
        return c.handle(v9, 9, 1)

    def fake_run(calls: Any, deadline_ms: int) -> list[Any]:
        return [fake_run_one(c) for c in calls]

    monkeypatch.setattr(admin, "_run", fake_run)
    wanted = [TopicPartition("t", 0), TopicPartition("t", 1)]
    assert admin.list_group_offsets("g", wanted) == {
        TopicPartition("t", 0): OffsetAndMetadata(5, "m", 2),
        TopicPartition("t", 1): None,
    }
    assert admin.list_group_offsets("g") == {TopicPartition("t", 0): OffsetAndMetadata(5, "m", 2)}
    first = captured[0]
    assert first.build(9, 1000) == {
        "groups": [
            {
                "group_id": "g",
                "member_id": None,
                "member_epoch": -1,
                "topics": [{"name": "t", "partition_indexes": [0, 1]}],
            }
        ],
        "require_stable": False,
    }
    assert captured[1].build(7, 1000) == {"group_id": "g", "topics": None, "require_stable": False}


def test_list_offsets_follows_the_leader_when_the_old_one_is_unreachable(
    admin: AdminClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The leader of a partition is killed: the ListOffsets call to it fails (lost connection), and
    list_offsets asks the metadata again and goes to the new leader instead of failing or waiting for its
    deadline on the dead broker."""
    tp = TopicPartition("t", 0)
    leaders = iter([1, 2])
    targets: list[Any] = []

    def fake_cluster(topics: Any, deadline_ms: int) -> Steps[ClusterMetadata]:
        yield from ()
        return ClusterMetadata(
            brokers={n: BrokerNode(n, "127.0.0.1", 9000 + n) for n in (1, 2)},
            partitions={"t": (PartitionInfo("t", 0, next(leaders), leader_epoch=1),)},
        )

    def fake_run(calls: Any, deadline_ms: int) -> list[Any]:
        targets.extend(c.target for c in calls)
        assert all(c.reroute for c in calls)
        return [ConnectionError_("connection refused") if c.target == 1 else {tp: 42} for c in calls]

    monkeypatch.setattr(admin, "_cluster_steps", fake_cluster)
    monkeypatch.setattr(admin, "_run", fake_run)
    assert admin.list_offsets([tp], timeout=10) == {tp: 42}
    assert targets == [1, 2]


def test_config_values_that_are_not_strings_are_refused_naming_the_key(admin: AdminClient) -> None:
    """A non-string value is a TypeError naming the resource and the key, on the caller's thread -- not an
    encoder failure on the network thread that reaches nobody."""
    from kafka_handoff.admin.configs import AlterConfigOp, ConfigResource, ConfigResourceType

    topic = ConfigResource(ConfigResourceType.TOPIC, "orders")
    bad: Any = {"retention.ms": 1000}
    with pytest.raises(TypeError, match=r"orders.*'retention\.ms'.*int 1000"):
        admin.alter_configs({topic: bad}, timeout=1)
    five: Any = 5
    op = AlterConfigOp("cleanup.policy", five)
    with pytest.raises(TypeError, match=r"orders.*'cleanup\.policy'.*int 5"):
        admin.incremental_alter_configs({topic: [op]}, timeout=1)
