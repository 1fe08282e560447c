"""Subscription state: what the consumer is assigned and where it stands on each partition.

Shared by the application thread and the network thread (as in Java's ``SubscriptionState``), so every
method takes the lock.  Per partition it keeps the position, paused flag, and the two flags that make a
partition *not fetchable*: pending revocation (KIP-983: once a revoke is requested, no more records) and
awaiting the assigned callback (KIP-848: newly assigned partitions are fetched only after it succeeded).
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kafka_handoff.errors import IllegalStateError
from kafka_handoff.group.membership import Subscription
from kafka_handoff.types import TopicPartition

__all__ = ["FetchPosition", "PartitionState", "SubscriptionState", "SubscriptionType"]


class SubscriptionType(enum.Enum):
    NONE = "none"
    AUTO_TOPICS = "topics"
    AUTO_PATTERN = "pattern"
    USER_ASSIGNED = "assigned"


@dataclass(frozen=True, slots=True)
class FetchPosition:
    offset: int
    leader_epoch: int | None = None


@dataclass(slots=True)
class PartitionState:
    position: FetchPosition | None = None
    paused: bool = False
    pending_revocation: bool = False
    awaiting_callback: bool = False
    position_requested: bool = False
    """The application asked for the position (``position()``, also from the assigned callback): it is
    initialised even while the partition awaits its assigned callback (as Java's ``position()``)."""
    reset_strategy: str | None = None
    """Set when the position must be (re)initialised: 'committed' first (groups), or a reset strategy."""
    high_watermark: int | None = None
    last_stable_offset: int | None = None
    log_start_offset: int | None = None
    position_epoch: int = 0
    """Bumped on every seek/reset so fetches issued for an older position are discarded."""
    consumed_at_poll: FetchPosition | None = None
    """The position when the current (or last) ``poll()`` started: every record before it was returned by an
    earlier ``poll()``, so the application has processed it -- what the auto-commit timer may commit."""
    leader_epoch: int | None = None
    """The partition leader's epoch (from metadata) that the position was last fetched from or validated
    against (Java's ``FetchPosition.currentLeader``).  When metadata shows another epoch, the leader changed:
    a position that carries a record epoch is validated again (KIP-320) before it is fetched."""
    awaiting_validation: bool = False
    """KIP-320: the position must be checked with OffsetsForLeaderEpoch before it is fetched (Java's
    ``AWAIT_VALIDATION``): after a leader change, or a seek to an offset with a leader epoch."""

    @property
    def fetchable(self) -> bool:
        return (
            self.position is not None
            and not self.paused
            and not self.pending_revocation
            and not self.awaiting_callback
            and not self.awaiting_validation
        )


class SubscriptionState:
    def __init__(self, default_reset: str) -> None:
        self._lock = threading.RLock()
        self._type = SubscriptionType.NONE
        self.subscription = Subscription()
        self._parts: dict[TopicPartition, PartitionState] = {}
        self.default_reset = default_reset
        self.version = 0
        """Bumped on every assignment change (lets collectors drop stale data)."""
        self._awaiting: set[TopicPartition] = set()
        """Partitions awaiting validation (may hold unassigned ones; pruned lazily)."""
        self._moved: set[TopicPartition] = set()
        """Partitions whose position was set since the last :meth:`mark_poll_start` (may hold unassigned
        ones): only these need their ``consumed_at_poll`` snapshot updated, not every assigned partition."""
        self._none_reset_seen = False
        self._unpositioned: set[TopicPartition] = set()
        """Every assigned partition without a position is in here (and some that have one since: pruned by
        :meth:`needs_position`), so that the network thread's check on each pass is not a scan of every
        assigned partition once all have positions.  A position becomes None only in a new
        ``PartitionState`` (:meth:`_replace`) and in :meth:`request_reset`."""
        """Whether a partition was ever to be reset with strategy ``none`` (else none can lack an offset)."""

    # ------------------------------------------------------------------ subscription
    @property
    def type(self) -> SubscriptionType:
        return self._type

    def _set_type(self, t: SubscriptionType) -> None:
        if self._type is not SubscriptionType.NONE and self._type is not t:
            raise IllegalStateError(
                "subscription to topics, partitions and pattern are mutually exclusive; "
                "call unsubscribe() first"
            )
        self._type = t

    def subscribe(self, subscription: Subscription) -> None:
        with self._lock:
            self._set_type(
                SubscriptionType.AUTO_PATTERN
                if subscription.pattern is not None
                else SubscriptionType.AUTO_TOPICS
            )
            self.subscription = subscription

    def assign_from_user(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            parts = set(partitions)
            if not parts:
                self.unsubscribe()
                return
            self._set_type(SubscriptionType.USER_ASSIGNED)
            self._replace(parts)

    def unsubscribe(self) -> None:
        with self._lock:
            self._type = SubscriptionType.NONE
            self.subscription = Subscription()
            self._parts.clear()
            self.version += 1

    @property
    def has_auto_assignment(self) -> bool:
        return self._type in (SubscriptionType.AUTO_TOPICS, SubscriptionType.AUTO_PATTERN)

    # ------------------------------------------------------------------ assignment
    def _replace(self, parts: set[TopicPartition]) -> None:
        new: dict[TopicPartition, PartitionState] = {}
        for tp in parts:
            state = self._parts.get(tp)
            if state is None:
                state = PartitionState(reset_strategy="committed")
                self._unpositioned.add(tp)
            new[tp] = state
        self._parts = new
        self.version += 1

    def set_group_assignment(
        self, owned: Iterable[TopicPartition], awaiting: Iterable[TopicPartition]
    ) -> None:
        """Mirror the membership's owned set (network thread)."""
        with self._lock:
            owned_set = set(owned)
            self._replace(owned_set)
            for tp in awaiting:
                st = self._parts.get(tp)
                if st is not None:
                    st.awaiting_callback = True

    def mark_pending_revocation(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                st = self._parts.get(tp)
                if st is not None:
                    st.pending_revocation = True

    def request_position(self, tp: TopicPartition) -> None:
        """``position()`` waits for ``tp``'s position: initialise it now, even before the assigned
        callback ran."""
        with self._lock:
            st = self._parts.get(tp)
            if st is not None and st.position is None:
                st.position_requested = True

    def clear_awaiting_callback(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                st = self._parts.get(tp)
                if st is not None:
                    st.awaiting_callback = False

    def assigned(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(self._parts)

    def is_assigned(self, tp: TopicPartition) -> bool:
        with self._lock:
            return tp in self._parts

    def state(self, tp: TopicPartition) -> PartitionState:
        with self._lock:
            st = self._parts.get(tp)
            if st is None:
                raise IllegalStateError(f"partition {tp} is not currently assigned to this consumer")
            return st

    def get(self, tp: TopicPartition) -> PartitionState | None:
        with self._lock:
            return self._parts.get(tp)

    # ------------------------------------------------------------------ positions
    def seek(self, tp: TopicPartition, offset: int, leader_epoch: int | None = None) -> None:
        with self._lock:
            st = self.state(tp)
            st.position = FetchPosition(offset, leader_epoch)
            self._moved.add(tp)
            st.reset_strategy = None
            st.position_epoch += 1
            if st.consumed_at_poll is not None and offset < st.consumed_at_poll.offset:
                # Seeking back means "not processed from here": auto-commit must not go beyond it.
                st.consumed_at_poll = st.position
            # An offset with a leader epoch (a committed offset, or one the application kept) is checked
            # for log truncation with the current leader before it is fetched (KIP-320).
            self._set_awaiting_validation(tp, st, leader_epoch is not None)

    def request_reset(self, tp: TopicPartition, strategy: str) -> None:
        with self._lock:
            st = self.state(tp)
            st.position = None
            self._unpositioned.add(tp)
            self._moved.add(tp)
            st.reset_strategy = strategy
            if strategy == "none":
                self._none_reset_seen = True
            st.position_epoch += 1
            st.consumed_at_poll = None  # may move backwards: nothing to auto-commit until the next poll()
            self._set_awaiting_validation(tp, st, False)

    def maybe_request_reset(self, tp: TopicPartition, expected_epoch: int, strategy: str) -> int | None:
        """:meth:`request_reset` for the network thread, which decided it on what it read earlier: done only
        if the partition is still assigned at ``expected_epoch`` (not seeked or reset by the application
        since -- a position set by ``seek()`` right after ``assign()`` must never be dropped).  Returns the
        new position epoch, or None if nothing was changed."""
        with self._lock:
            st = self._parts.get(tp)
            if st is None or st.position_epoch != expected_epoch:
                return None
            self.request_reset(tp, strategy)
            return st.position_epoch

    def maybe_seek_unvalidated(
        self,
        tp: TopicPartition,
        offset: int,
        expected_epoch: int,
        strategy: str,
        leader_epoch: int | None = None,
    ) -> bool:
        """Set a position found by a lookup, unless the partition was seeked/reset meanwhile.  A position
        with a ``leader_epoch`` (a committed offset) is validated before it is fetched (KIP-320)."""
        with self._lock:
            st = self._parts.get(tp)
            if st is None or st.position_epoch != expected_epoch or st.reset_strategy != strategy:
                return False
            st.position = FetchPosition(offset, leader_epoch)
            self._moved.add(tp)
            st.reset_strategy = None
            st.position_epoch += 1
            self._set_awaiting_validation(tp, st, leader_epoch is not None)
            return True

    # ------------------------------------------------------------------ leader epochs (network thread)
    def _set_awaiting_validation(self, tp: TopicPartition, st: PartitionState, value: bool) -> None:
        st.awaiting_validation = value
        if value:
            self._awaiting.add(tp)
        else:
            self._awaiting.discard(tp)

    def fetch_candidates(self) -> dict[TopicPartition, tuple[FetchPosition, int, int | None]]:
        """Fetchable partitions: (position, position epoch, leader epoch the position is known good for)."""
        with self._lock:
            return {
                tp: (st.position, st.position_epoch, st.leader_epoch)
                for tp, st in self._parts.items()
                if st.fetchable and st.position is not None
            }

    def on_leader_epochs(self, changes: Mapping[TopicPartition, tuple[int, int]]) -> set[TopicPartition]:
        """Metadata shows a leader epoch other than the one each position was fetched with:
        ``{tp: (position epoch, new leader epoch)}``.  Watermarks of the old leader are dropped (lag comes
        from the current leader only).  A position that carries a record leader epoch and was fetched from an
        earlier leader must be validated first (KIP-320); returns those partitions."""
        out: set[TopicPartition] = set()
        with self._lock:
            for tp, (pepoch, epoch) in changes.items():
                st = self._parts.get(tp)
                if st is None or st.position is None or st.position_epoch != pepoch:
                    continue
                if st.leader_epoch is not None:
                    st.high_watermark = st.last_stable_offset = None
                    if st.position.leader_epoch is not None and epoch >= 0:
                        self._set_awaiting_validation(tp, st, True)
                        out.add(tp)
                st.leader_epoch = epoch
        return out

    def validation_targets(self) -> dict[TopicPartition, tuple[FetchPosition, int]]:
        """Positions waiting for validation (KIP-320): (position, position epoch)."""
        with self._lock:
            if not self._awaiting:
                return {}
            out: dict[TopicPartition, tuple[FetchPosition, int]] = {}
            for tp in list(self._awaiting):
                st = self._parts.get(tp)
                if st is None or not st.awaiting_validation:
                    self._awaiting.discard(tp)  # unassigned since
                elif st.position is not None and not st.pending_revocation:
                    out[tp] = (st.position, st.position_epoch)
            return out

    def complete_validation(
        self,
        tp: TopicPartition,
        expected_epoch: int,
        leader_epoch: int | None,
        new_position: FetchPosition | None = None,
    ) -> bool:
        """The position was validated against the leader at ``leader_epoch``; ``new_position`` (the first
        diverging offset after a truncation) replaces it.  False if the partition was seeked meanwhile."""
        with self._lock:
            st = self._parts.get(tp)
            if st is None or st.position_epoch != expected_epoch or not st.awaiting_validation:
                return False
            self._set_awaiting_validation(tp, st, False)
            st.leader_epoch = leader_epoch
            if new_position is not None:
                st.position = new_position
                self._moved.add(tp)
                st.position_epoch += 1
                if st.consumed_at_poll is not None and new_position.offset < st.consumed_at_poll.offset:
                    # The log was truncated below what auto-commit may commit: never commit past it.
                    st.consumed_at_poll = new_position
            return True

    def advance(self, tp: TopicPartition, expected_epoch: int, offset: int, leader_epoch: int | None) -> bool:
        """Move the position after records were returned (application thread)."""
        with self._lock:
            st = self._parts.get(tp)
            if st is None or st.position_epoch != expected_epoch or st.position is None:
                return False
            st.position = FetchPosition(
                offset, leader_epoch if leader_epoch is not None else st.position.leader_epoch
            )
            self._moved.add(tp)
            return True

    def position(self, tp: TopicPartition) -> FetchPosition | None:
        with self._lock:
            return self.state(tp).position

    def needs_position(self) -> dict[TopicPartition, tuple[str, int]]:
        """Partitions without a position: (strategy, position epoch)."""
        with self._lock:
            if self._unpositioned:
                parts = self._parts
                self._unpositioned = {
                    tp
                    for tp in self._unpositioned
                    if (st := parts.get(tp)) is not None and st.position is None
                }
            if not self._unpositioned:
                return {}
            return {
                tp: (st.reset_strategy or self.default_reset, st.position_epoch)
                for tp, st in self._parts.items()
                # As Java: not before the assigned callback ran (it may seek to offsets kept elsewhere),
                # nor for a partition on its way out -- unless the application asks for the position (a
                # revoke delayed by delay_revoke() can last; position() must not time out meanwhile).
                if st.position is None
                and (st.position_requested or (not st.pending_revocation and not st.awaiting_callback))
            }

    def partitions_without_offset(self) -> frozenset[TopicPartition]:
        """Partitions whose position cannot be initialised: no committed offset and the reset strategy is
        ``none``.  They stay so until the application seeks them."""
        with self._lock:
            if not self._none_reset_seen:  # checked on every poll(): no scan of every partition
                return frozenset()
            return frozenset(
                tp
                for tp, st in self._parts.items()
                if st.position is None
                and st.reset_strategy == "none"
                and (st.position_requested or (not st.pending_revocation and not st.awaiting_callback))
            )

    def fetchable(self) -> dict[TopicPartition, tuple[FetchPosition, int]]:
        with self._lock:
            return {
                tp: (st.position, st.position_epoch)
                for tp, st in self._parts.items()
                if st.fetchable and st.position is not None
            }

    def all_consumed(self) -> dict[TopicPartition, FetchPosition]:
        with self._lock:
            return {tp: st.position for tp, st in self._parts.items() if st.position is not None}

    def mark_poll_start(self) -> None:
        """Start of ``poll()`` (application thread): the positions now cover exactly the records returned by
        earlier polls; remember them for the auto-commit timer.  Every other partition's snapshot equals its
        position already (each position change adds the partition to ``_moved``): the cost is per partition
        that moved, not per assigned partition."""
        with self._lock:
            parts = self._parts
            for tp in self._moved:
                st = parts.get(tp)
                if st is not None:
                    st.consumed_at_poll = st.position
            self._moved.clear()

    def consumed_before_poll(self) -> dict[TopicPartition, FetchPosition]:
        """The positions as they stood at the start of the current (or last) ``poll()``: the auto-commit
        timer commits these, never the records of the batch the application may still be processing."""
        with self._lock:
            return {
                tp: st.consumed_at_poll for tp, st in self._parts.items() if st.consumed_at_poll is not None
            }

    # ------------------------------------------------------------------ pause
    def pause(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self.state(tp).paused = True

    def resume(self, partitions: Iterable[TopicPartition]) -> None:
        with self._lock:
            for tp in partitions:
                self.state(tp).paused = False

    def paused(self) -> frozenset[TopicPartition]:
        with self._lock:
            return frozenset(tp for tp, st in self._parts.items() if st.paused)

    def update_watermarks(
        self, tp: TopicPartition, high: int | None, lso: int | None, log_start: int | None
    ) -> None:
        with self._lock:
            st = self._parts.get(tp)
            if st is None:
                return
            if high is not None and high >= 0:
                st.high_watermark = high
            if lso is not None and lso >= 0:
                st.last_stable_offset = lso
            if log_start is not None and log_start >= 0:
                st.log_start_offset = log_start
