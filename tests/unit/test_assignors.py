"""range / roundrobin exact outputs (Java's documented examples), the assignor registry, rebalance-protocol
selection, and the leader's validation of custom cooperative assignors."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from kafka_handoff.errors import ConfigError, IllegalStateError
from kafka_handoff.group.assignors import (
    DEFAULT_ASSIGNMENT_STRATEGY,
    CooperativeStickyAssignor,
    RangeAssignor,
    RoundRobinAssignor,
    StickyAssignor,
    get_assignor,
    get_assignors,
    is_builtin_cooperative,
    select_protocol,
)
from kafka_handoff.group.assignors.base import (
    MemberAssignment,
    MemberSubscription,
    PartitionAssignor,
    RebalanceProtocol,
)
from kafka_handoff.group.validate import validate_cooperative_assignment
from kafka_handoff.types import TopicPartition as TP

pytestmark = pytest.mark.unit


def sub(*topics: str, instance: str | None = None) -> MemberSubscription:
    return MemberSubscription(topics=topics, group_instance_id=instance)


def tps(spec: str) -> list[TP]:
    """``"t0p0 t1p2"`` -> [TP("t0", 0), TP("t1", 2)]."""
    out = []
    for item in spec.split():
        topic, _, partition = item.rpartition("p")
        out.append(TP(topic, int(partition)))
    return out


def as_lists(result: Mapping[str, MemberAssignment]) -> dict[str, list[TP]]:
    return {member: sorted(a.partitions) for member, a in result.items()}


# --------------------------------------------------------------------------------------------- range


def test_range_javadoc_example() -> None:
    out = RangeAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert as_lists(out) == {"C0": tps("t0p0 t0p1 t1p0 t1p1"), "C1": tps("t0p2 t1p2")}


def test_range_first_members_get_the_extra_partitions_in_contiguous_ranges() -> None:
    members = {f"c{i}": sub("t") for i in range(3)}
    out = RangeAssignor().assign({"t": 8}, members)
    assert as_lists(out) == {"c0": tps("tp0 tp1 tp2"), "c1": tps("tp3 tp4 tp5"), "c2": tps("tp6 tp7")}


def test_range_per_topic_only_among_its_subscribers() -> None:
    out = RangeAssignor().assign({"a": 2, "b": 4}, {"c0": sub("a"), "c1": sub("a", "b"), "c2": sub("b")})
    assert as_lists(out) == {"c0": tps("ap0"), "c1": tps("ap1 bp0 bp1"), "c2": tps("bp2 bp3")}


def test_range_more_members_than_partitions_leaves_the_last_empty() -> None:
    out = RangeAssignor().assign({"t": 2}, {"c0": sub("t"), "c1": sub("t"), "c2": sub("t")})
    assert as_lists(out) == {"c0": tps("tp0"), "c1": tps("tp1"), "c2": []}


def test_range_orders_static_members_first_by_instance_id() -> None:
    subscriptions = {
        "a-member": sub("t"),  # dynamic: after every static member despite the smallest member id
        "z-member": sub("t", instance="i1"),
        "m-member": sub("t", instance="i2"),
    }
    out = RangeAssignor().assign({"t": 3}, subscriptions)
    assert as_lists(out) == {"z-member": tps("tp0"), "m-member": tps("tp1"), "a-member": tps("tp2")}


def test_range_static_assignment_survives_member_id_changes() -> None:
    before = RangeAssignor().assign({"t": 5}, {"x": sub("t", instance="A"), "y": sub("t", instance="B")})
    after = RangeAssignor().assign(
        {"t": 5}, {"new-b": sub("t", instance="B"), "new-a": sub("t", instance="A")}
    )
    assert before["x"].partitions == after["new-a"].partitions
    assert before["y"].partitions == after["new-b"].partitions


def test_range_skips_topics_without_metadata_and_lists_every_member() -> None:
    out = RangeAssignor().assign({"t": 1}, {"c0": sub("t", "missing"), "c1": sub("missing")})
    assert as_lists(out) == {"c0": tps("tp0"), "c1": []}


# --------------------------------------------------------------------------------------------- roundrobin


def test_roundrobin_javadoc_example_equal_subscriptions() -> None:
    out = RoundRobinAssignor().assign({"t0": 3, "t1": 3}, {"C0": sub("t0", "t1"), "C1": sub("t0", "t1")})
    assert as_lists(out) == {"C0": tps("t0p0 t0p2 t1p1"), "C1": tps("t0p1 t1p0 t1p2")}


def test_roundrobin_javadoc_example_unequal_subscriptions() -> None:
    out = RoundRobinAssignor().assign(
        {"t0": 1, "t1": 2, "t2": 3},
        {"C0": sub("t0"), "C1": sub("t0", "t1"), "C2": sub("t0", "t1", "t2")},
    )
    assert as_lists(out) == {"C0": tps("t0p0"), "C1": tps("t1p0"), "C2": tps("t1p1 t2p0 t2p1 t2p2")}


def test_roundrobin_skipping_keeps_the_turn_order() -> None:
    # a: c0,c1 subscribed; b: only c1.  Sorted: a0 a1 a2 b0 b1 -> c0 c1 c0 | (c1) b0 -> c1, b1 -> c1
    out = RoundRobinAssignor().assign({"a": 3, "b": 2}, {"c0": sub("a"), "c1": sub("a", "b")})
    assert as_lists(out) == {"c0": tps("ap0 ap2"), "c1": tps("ap1 bp0 bp1")}


def test_roundrobin_static_members_first() -> None:
    out = RoundRobinAssignor().assign({"t": 4}, {"a": sub("t"), "b": sub("t", instance="s1")})
    assert as_lists(out) == {"b": tps("tp0 tp2"), "a": tps("tp1 tp3")}


# --------------------------------------------------------------------------------------------- registry


@pytest.mark.parametrize(
    ("name", "cls"),
    [
        ("range", RangeAssignor),
        ("roundrobin", RoundRobinAssignor),
        ("sticky", StickyAssignor),
        ("cooperative-sticky", CooperativeStickyAssignor),
        ("org.apache.kafka.clients.consumer.RangeAssignor", RangeAssignor),
        ("org.apache.kafka.clients.consumer.RoundRobinAssignor", RoundRobinAssignor),
        ("org.apache.kafka.clients.consumer.StickyAssignor", StickyAssignor),
        ("org.apache.kafka.clients.consumer.CooperativeStickyAssignor", CooperativeStickyAssignor),
        (" range ", RangeAssignor),
        ("kafka_handoff.group.assignors.sticky:StickyAssignor", StickyAssignor),
    ],
)
def test_get_assignor_by_name(name: str, cls: type) -> None:
    assignor = get_assignor(name)
    assert type(assignor) is cls
    assert isinstance(assignor, PartitionAssignor)


class CustomCooperative:
    """A user's own assignor: everything to the first member (deliberately naive)."""

    @property
    def name(self) -> str:
        return "custom"

    @property
    def supported_protocols(self) -> tuple[RebalanceProtocol, ...]:
        return (RebalanceProtocol.COOPERATIVE,)

    def subscription_user_data(self, topics: frozenset[str]) -> bytes | None:
        return None

    def assign(
        self, partitions_per_topic: Mapping[str, int], subscriptions: Mapping[str, MemberSubscription]
    ) -> dict[str, MemberAssignment]:
        first = min(subscriptions)
        everything = tuple(TP(t, p) for t, n in partitions_per_topic.items() for p in range(n))
        return {m: MemberAssignment(everything if m == first else ()) for m in subscriptions}

    def on_assignment(self, assignment: MemberAssignment, generation_id: int) -> None:
        return None


def test_get_assignor_accepts_instances_classes_and_module_strings() -> None:
    instance = CustomCooperative()
    assert get_assignor(instance) is instance
    assert type(get_assignor(CustomCooperative)) is CustomCooperative
    assert type(get_assignor(f"{__name__}:CustomCooperative")) is CustomCooperative


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ("nope", "unknown assignor"),
        ("no_such_module_xyz:Thing", "cannot import module 'no_such_module_xyz'"),
        ("kafka_handoff.group.assignors:Missing", "has no attribute 'Missing'"),
        (42, "not a partition assignor"),
        (object(), "not a partition assignor"),
        (dict, "not a partition assignor"),
    ],
)
def test_get_assignor_rejects_bad_values_naming_the_key(value: object, match: str) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        get_assignor(value)
    assert "partition.assignment.strategy" in str(info.value)
    assert "'cooperative-sticky'" in str(info.value)  # the allowed values are listed


def test_get_assignors_default_and_comma_separated() -> None:
    assert (
        [a.name for a in get_assignors()]
        == list(DEFAULT_ASSIGNMENT_STRATEGY)
        == ["range", "cooperative-sticky"]
    )
    assert [a.name for a in get_assignors("roundrobin, sticky")] == ["roundrobin", "sticky"]


def test_get_assignors_rejects_empty_and_duplicate_names() -> None:
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy.*at least one"):
        get_assignors([])
    with pytest.raises(ConfigError, match=r"partition\.assignment\.strategy.*at least one"):
        get_assignors(" , ")
    with pytest.raises(ConfigError, match="'range' is used in more than one assignor"):
        get_assignors(["range", "org.apache.kafka.clients.consumer.RangeAssignor"])


# --------------------------------------------------------------------------------------------- protocol


def test_default_strategy_selects_eager() -> None:
    assert select_protocol(get_assignors()) is RebalanceProtocol.EAGER


def test_cooperative_sticky_alone_selects_cooperative() -> None:
    assert select_protocol([CooperativeStickyAssignor()]) is RebalanceProtocol.COOPERATIVE


@pytest.mark.parametrize("names", [["range"], ["roundrobin"], ["sticky"], ["sticky", "cooperative-sticky"]])
def test_eager_only_assignors_select_eager(names: list[str]) -> None:
    assert select_protocol(get_assignors(names)) is RebalanceProtocol.EAGER


def test_custom_cooperative_with_cooperative_sticky_selects_cooperative() -> None:
    assert (
        select_protocol([CustomCooperative(), CooperativeStickyAssignor()]) is RebalanceProtocol.COOPERATIVE
    )


def test_no_common_protocol_is_a_config_error() -> None:
    with pytest.raises(
        ConfigError, match=r"no commonly supported rebalance protocol.*custom=\['COOPERATIVE'\]"
    ):
        select_protocol([RangeAssignor(), CustomCooperative()])
    with pytest.raises(ConfigError, match="at least one assignor"):
        select_protocol([])


def test_only_our_cooperative_sticky_skips_validation() -> None:
    assert is_builtin_cooperative(CooperativeStickyAssignor())
    assert not is_builtin_cooperative(CustomCooperative())


# --------------------------------------------------------------------------------------------- validation


def test_validation_accepts_keeping_adding_unowned_and_revoking() -> None:
    owned = {"a": set(tps("tp0 tp1")), "b": set(tps("tp2"))}
    validate_cooperative_assignment(
        owned,
        {"a": MemberAssignment(tuple(tps("tp0"))), "b": MemberAssignment(tuple(tps("tp2 tp3")))},
    )


def test_validation_rejects_a_direct_move() -> None:
    owned = {"a": set(tps("tp0 tp1")), "b": set()}
    with pytest.raises(IllegalStateError) as info:
        validate_cooperative_assignment(
            owned, {"a": MemberAssignment(tuple(tps("tp0"))), "b": MemberAssignment(tuple(tps("tp1")))}
        )
    message = str(info.value)
    assert message.startswith("Assignor supporting the COOPERATIVE protocol violates its requirements")
    assert "t-1 from a to b" in message


def test_validation_accepts_plain_partition_collections_and_missing_members() -> None:
    validate_cooperative_assignment({"gone": tps("tp5")}, {"a": tps("tp0")})
    with pytest.raises(IllegalStateError):
        validate_cooperative_assignment({"gone": tps("tp5")}, {"a": tps("tp0 tp5")})


def test_naive_custom_assignor_output_fails_validation_on_the_second_rebalance() -> None:
    assignor = CustomCooperative()
    first = assignor.assign({"t": 2}, {"b": sub("t")})
    owned = {"b": set(first["b"].partitions), "a": set()}
    second = assignor.assign({"t": 2}, {"a": sub("t"), "b": sub("t")})  # "a" sorts first: takes everything
    with pytest.raises(IllegalStateError, match="violates its requirements"):
        validate_cooperative_assignment(owned, second)
