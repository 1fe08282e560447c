"""The producer's request manager: turns ready batches into Produce requests and handles the answers.

Sans-I/O (the network thread calls :meth:`Sender.poll` with the time and sends the returned requests).
What it does each poll, as the Java client's ``Sender.runOnce``:

1. idempotence housekeeping: settle unresolved sequences, apply an epoch bump, get a producer id
   (``InitProducerId``) when there is none;
2. expire batches past ``delivery.timeout.ms`` -- queued ones and ones whose request is still unanswered;
3. ask the accumulator which leaders have sendable data (requesting a metadata refresh for partitions
   without a known leader) and drain up to ``max.request.size`` per leader, keeping at most
   ``max.in.flight.requests.per.connection`` requests in flight per broker;
4. on answers: complete batches, retry retriable failures (same bytes, same sequence) after a backoff, treat
   ``DUPLICATE_SEQUENCE_NUMBER`` as success, fail the rest, and refresh metadata after leadership errors.

Outcomes go to ``on_done(batch, base_offset, log_append_time_ms, error)``; the producer completes the
records' futures and runs callbacks on its own completion thread, never on the network thread.
"""

from __future__ import annotations

import datetime
import functools
import heapq
import itertools
import logging
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    MessageTooLargeError,
    Needs,
    error_for_code,
)
from kafka_handoff.producer import produce_request
from kafka_handoff.producer.accumulator import ReadyCheck, RecordAccumulator
from kafka_handoff.producer.batch import ProducerBatch
from kafka_handoff.producer.idempotence import (
    DUPLICATE_SEQUENCE_NUMBER,
    IdempotenceManager,
    ProducerState,
)
from kafka_handoff.producer.metrics import ProducerMetrics
from kafka_handoff.producer.transactions import TransactionManager, mark_transactional
from kafka_handoff.protocol import wire
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.compression import CompressionType
from kafka_handoff.protocol.metadata import MetadataManager
from kafka_handoff.protocol.requests import ANY_NODE, MAX_POLL_WAIT_MS, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata, TopicPartition

__all__ = ["OnDone", "Sender"]

log = logging.getLogger(__name__)

OnDone = Callable[[ProducerBatch, int, int, BaseException | None], None]

_EPOCH: Final = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
_MS: Final = datetime.timedelta(milliseconds=1)

NETWORK_EXCEPTION: Final = ErrorCode.network_exception
REQUEST_TIMED_OUT: Final = ErrorCode.request_timed_out
MESSAGE_TOO_LARGE: Final = ErrorCode.message_too_large
RECORD_LIST_TOO_LARGE: Final = ErrorCode.record_list_too_large
INVALID_RECORD: Final = ErrorCode.invalid_record

NOT_LEADER_OR_FOLLOWER: Final = ErrorCode.not_leader_or_follower
FENCED_LEADER_EPOCH: Final = ErrorCode.fenced_leader_epoch
#: Produce errors that come with the new leader (KIP-951 ``current_leader``).
_LEADER_HINT_ERRORS: Final = frozenset({NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH})

#: Java's ``InvalidMetadataException`` subclasses: after these the leader may have moved.
_METADATA_ERRORS: Final = frozenset(
    {
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.not_leader_or_follower,
        ErrorCode.network_exception,
        ErrorCode.kafka_storage_error,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
        ErrorCode.unknown_topic_id,
        ErrorCode.inconsistent_topic_id,
    }
)


@functools.cache
def _produce_entities(version: int) -> tuple[Any, Any]:
    """kio's ``TopicProduceData`` and ``PartitionProduceData`` classes of a Produce request version."""
    module = sys.modules[wire.request_class(ApiKey.PRODUCE, version).__module__]
    return module.TopicProduceData, module.PartitionProduceData


def _to_ms(value: Any) -> int:
    if value is None:
        return -1
    if isinstance(value, datetime.datetime):
        return (value - _EPOCH) // _MS
    return int(value)


class Sender:
    def __init__(
        self,
        accumulator: RecordAccumulator,
        metadata: MetadataManager,
        on_done: OnDone,
        *,
        idempotence: IdempotenceManager | None = None,
        acks: int = -1,
        request_timeout_ms: int = 30000,
        retries: int = 2147483647,
        delivery_timeout_ms: int = 120000,
        max_request_size: int = 1048576,
        max_in_flight: int = 5,
        compression: CompressionType = CompressionType.NONE,
        compression_level: int | None = None,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        metrics: ProducerMetrics | None = None,
        transactions: TransactionManager | None = None,
    ) -> None:
        self.accumulator = accumulator
        self.metadata = metadata
        self.on_done = on_done
        self.idempotence = idempotence
        self.acks = acks
        self.request_timeout_ms = request_timeout_ms
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.max_request_size = max_request_size
        self.max_in_flight = max(1, max_in_flight)
        self.compression = compression
        self.compression_level = compression_level
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self.metrics = metrics
        self._in_flight: dict[int, int] = {}
        self._in_flight_batches: set[ProducerBatch] = set()
        # Delivery deadlines of in-flight batches (compacted so that done batches are not kept alive).
        self._expiry_heap: list[tuple[int, int, ProducerBatch]] = []
        self._heaped: set[ProducerBatch] = set()
        self._counter = itertools.count()
        self._init_in_flight = False
        self._last_drain_ms = -(1 << 62)
        self._init_attempts = 0
        self._init_next_ms = 0
        self._cluster: ClusterMetadata | None = None
        self._leaders: dict[TopicPartition, int] = {}
        self._by_node: dict[int, list[TopicPartition]] = {}
        self.requests_sent = 0
        # Partitions whose records wait longer than request.timeout.ms: when each was last warned about.
        self._stall_warned: dict[TopicPartition, int] = {}
        self._next_stall_check_ms = 0
        self.stall_warnings = 0
        """How many stall WARNING lines were logged (for tests)."""
        self.transactions = transactions
        self._transactional_id: str | None = None
        if transactions is not None:
            self._transactional_id = transactions.transactional_id
            transactions.has_pending_batches = self.has_pending
            transactions.abort_undrained = self._abort_undrained

    # ------------------------------------------------------------------ state for the facade
    def in_flight_requests(self) -> int:
        return sum(self._in_flight.values())

    def has_pending(self) -> bool:
        """Anything queued or awaiting an answer (close waits until this is False)."""
        return bool(self._in_flight_batches) or self.accumulator.has_undrained()

    # ------------------------------------------------------------------ metadata
    def _leader_maps(self) -> tuple[dict[TopicPartition, int], dict[int, list[TopicPartition]]]:
        cluster = self.metadata.cluster
        if cluster is not self._cluster:
            leaders: dict[TopicPartition, int] = {}
            by_node: dict[int, list[TopicPartition]] = {}
            for topic, parts in cluster.partitions.items():
                for p in parts:
                    if p.leader >= 0:
                        tp = TopicPartition(topic, p.partition)
                        leaders[tp] = p.leader
                        by_node.setdefault(p.leader, []).append(tp)
            self._cluster = cluster
            self._leaders = leaders
            self._by_node = by_node
        return self._leaders, self._by_node

    # ------------------------------------------------------------------ poll
    def poll(self, now_ms: int) -> PollResult:
        unsent: list[UnsentRequest] = []
        wait = MAX_POLL_WAIT_MS
        idem = self.idempotence
        if idem is not None:
            idem.maybe_resolve_sequences()
            if self.transactions is None:  # a transactional producer's epoch comes from its coordinator
                idem.bump_epoch_if_needed()
            if idem.state is ProducerState.FATAL:
                error = idem.fatal_error or KafkaError("the idempotent producer failed")
                for batch in self.accumulator.abort_undrained():
                    self._fail(batch, error, None, False, now_ms)
            elif idem.needs_producer_id and not self._init_in_flight and self.transactions is None:
                if now_ms >= self._init_next_ms:
                    unsent.append(self._init_producer_id_request())
                else:
                    wait = min(wait, self._init_next_ms - now_ms)

        leaders, by_node = self._leader_maps()
        self._expire_in_flight(now_ms)
        can_send = idem is None or idem.has_producer_id
        # While requests are in flight, drain at most every coalesce_ms (min(linger.ms, 2)): under the GIL
        # each poll costs a whole round of Python, and a response arriving every moment would otherwise
        # drain one fresh batch per request.  A flush, close or a send blocked on memory drains at once.
        acc = self.accumulator
        hold_ms = 0
        if acc.coalesce_ms > 0 and self._in_flight and not acc.urgent:
            hold_ms = self._last_drain_ms + acc.coalesce_ms - now_ms
        check: ReadyCheck | None = None
        rounds = self.max_in_flight if hold_ms <= 0 else 0
        if hold_ms > 0:
            wait = min(wait, hold_ms)
        # Several requests per broker per poll (up to max.in.flight): a poll of the network thread is
        # costly under the GIL, so each should move as much sendable data as it can.
        for _round in range(rounds):
            check = self.accumulator.ready(leaders, now_ms)
            for batch in check.expired:
                self._expire(batch, now_ms, awaiting_response=False)
            if check.unknown_leader_topics:
                self.metadata.request_update()
            if not (check.nodes and can_send):
                break
            nodes = [n for n in check.nodes if self._in_flight.get(n, 0) < self.max_in_flight]
            if not nodes:
                break
            drained = self.accumulator.drain(
                by_node,
                nodes,
                self.max_request_size,
                now_ms,
                may_drain=self._may_drain_txn
                if self.transactions is not None
                else idem.may_drain
                if idem is not None
                else None,
                on_drained=self._on_drained if idem is not None else None,
            )
            if not drained:
                break
            self._last_drain_ms = now_ms
            for node, batches in drained.items():
                unsent.append(self._produce_request(node, batches, now_ms))
        self._check_stalls(now_ms, leaders)
        if check is not None:
            if check.next_ready_ms < (1 << 62):
                wait = min(wait, check.next_ready_ms - now_ms)
            if check.next_expiry_ms < (1 << 62):
                wait = min(wait, check.next_expiry_ms - now_ms)
        if self._expiry_heap:
            wait = min(wait, self._expiry_heap[0][0] - now_ms)
        wait = max(0, wait)
        # With requests in flight (or just made), look again within coalesce_ms instead of being woken by
        # each batch that fills meanwhile (see RecordAccumulator.finish_poll).
        coalesce = self.accumulator.coalesce_ms
        coalescing = coalesce > 0 and (bool(unsent) or bool(self._in_flight))
        if coalescing:
            wait = min(wait, coalesce)
        if self.accumulator.finish_poll(now_ms + wait, coalescing):
            wait = 0
        return PollResult(unsent, wait)

    def _check_stalls(self, now_ms: int, leaders: Mapping[TopicPartition, int]) -> None:
        """Once a second: one WARNING naming the partitions whose oldest undelivered batch is older than
        ``request.timeout.ms``, and why it is not delivered (each partition at most once per
        ``request.timeout.ms``), as the consumer warns about partitions it cannot fetch.  A partition that
        delivers again is logged at INFO."""
        if now_ms < self._next_stall_check_ms:
            return
        self._next_stall_check_ms = now_ms + 1000
        oldest: dict[TopicPartition, tuple[ProducerBatch, int]] = {
            batch.tp: (batch, queued) for batch, queued in self.accumulator.queue_heads()
        }
        for batch in self._in_flight_batches:
            if batch.done:
                continue
            known = oldest.get(batch.tp)
            if known is None:
                oldest[batch.tp] = (batch, len(batch.entries))
            else:
                first, count = known
                oldest[batch.tp] = (
                    batch if batch.created_ms < first.created_ms else first,
                    count + len(batch.entries),
                )
        threshold = self.request_timeout_ms
        for tp in list(self._stall_warned):
            known = oldest.get(tp)
            if known is None or now_ms - known[0].created_ms < threshold:
                del self._stall_warned[tp]
                log.info("records for %s are delivered again", tp)
        due: list[str] = []
        for tp, (batch, count) in sorted(oldest.items(), key=lambda item: str(item[0])):
            age = now_ms - batch.created_ms
            if age < threshold:
                continue
            warned = self._stall_warned.get(tp)
            if warned is not None and now_ms - warned < threshold:
                continue
            self._stall_warned[tp] = now_ms
            due.append(
                f"{tp}: {count} record(s), the oldest waiting for {age / 1000.0:.0f} s "
                f"({self._stall_reason(batch, leaders, now_ms)})"
            )
        if due:
            self.stall_warnings += 1
            more = f"; and {len(due) - 10} more partition(s)" if len(due) > 10 else ""
            log.warning(
                "records not delivered for longer than request.timeout.ms (%d ms), delivery.timeout.ms is "
                "%d ms: %s%s",
                threshold,
                self.delivery_timeout_ms,
                "; ".join(due[:10]),
                more,
            )

    def _stall_reason(self, batch: ProducerBatch, leaders: Mapping[TopicPartition, int], now_ms: int) -> str:
        """Why ``batch`` (a partition's oldest undelivered batch) is not delivered yet."""
        if batch.in_flight:
            reason = f"attempt {batch.attempts + 1} awaits the answer of broker {batch.sent_to}"
        else:
            idem = self.idempotence
            leader = leaders.get(batch.tp, -1)
            veto: str | None = None
            if idem is not None and idem.state is ProducerState.FATAL:
                veto = f"the idempotent producer failed: {idem.fatal_error}"
            elif leader < 0:
                veto = "no leader in metadata"
            elif idem is not None:
                veto = idem.drain_veto(batch)
            txn = self.transactions
            if veto is None and txn is not None and batch.tp not in txn.partitions_in_txn:
                veto = "the partition is not yet added to the transaction"
            if veto is None and batch.attempts > 0 and batch.retry_at_ms > now_ms:
                veto = f"retry backoff until {batch.retry_at_ms - now_ms} ms from now"
            if veto is None and self._in_flight.get(leader, 0) >= self.max_in_flight:
                veto = (
                    f"{self._in_flight[leader]} requests to broker {leader} await answers "
                    "(max.in.flight.requests.per.connection)"
                )
            reason = f"queued: {veto}" if veto is not None else "queued, sendable"
        if batch.attempts > 0 and batch.last_error is not None:
            reason += f"; {batch.attempts} attempt(s) failed, the last with: {batch.last_error}"
        return reason

    def _may_drain_txn(self, batch: ProducerBatch) -> bool:
        """A transactional batch goes once its partition is in the transaction (AddPartitionsToTxn)."""
        assert self.transactions is not None and self.idempotence is not None
        return self.idempotence.may_drain(batch) and self.transactions.may_send(batch.tp)

    def _abort_undrained(self, error: BaseException, now_ms: int) -> None:
        """The transaction is aborted: its batches not yet sent fail with ``error``."""
        for batch in self.accumulator.abort_undrained():
            if batch.has_sequence and self.transactions is not None:
                self.transactions.bump_epoch_after_abort()  # a retry that never lands leaves a gap
            self._fail(batch, error, None, False, now_ms)

    def purge_unsent(self, error: BaseException, now_ms: int) -> int:
        """Fail the queued records that were never sent with ``error`` (``Producer.purge``); returns how
        many.  Sent batches -- in flight or waiting for a retry -- keep their course."""
        purged = 0
        for batch in self.accumulator.remove_unsent():
            purged += len(batch.entries)
            self._fail(batch, error, None, False, now_ms)
        return purged

    def _on_drained(self, batch: ProducerBatch) -> None:
        assert self.idempotence is not None
        if not batch.has_sequence:
            self.idempotence.assign_sequence(batch)

    # ------------------------------------------------------------------ InitProducerId
    def _init_producer_id_request(self) -> UnsentRequest:
        idem = self.idempotence
        assert idem is not None
        values = idem.init_producer_id_values()
        self._init_in_flight = True

        def backoff(now: int) -> None:
            self._init_attempts += 1
            self._init_next_ms = now + ExponentialBackoff(
                self.retry_backoff_ms, self.retry_backoff_max_ms
            ).after_failures(self._init_attempts)

        def on_response(response: Any, _version: int, now: int) -> None:
            self._init_in_flight = False
            error = idem.on_init_producer_id(
                int(response.error_code), int(response.producer_id), int(response.producer_epoch)
            )
            if error is None:
                self._init_attempts = 0
            elif idem.state is ProducerState.FATAL:
                log.error("InitProducerId failed: %s", error)
            else:
                log.debug("InitProducerId failed, retrying: %s", error)
                backoff(now)

        def on_failure(error: BaseException, now: int) -> None:
            self._init_in_flight = False
            idem.on_init_producer_id_failed()
            log.debug("InitProducerId request failed: %s", error)
            backoff(now)

        return UnsentRequest(
            api_key=ApiKey.INIT_PRODUCER_ID,
            node=ANY_NODE,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
        )

    # ------------------------------------------------------------------ Produce
    def _produce_request(self, node: int, batches: list[ProducerBatch], now_ms: int) -> UnsentRequest:
        topics: dict[str, list[tuple[int, bytes]]] = {}
        by_tp: dict[TopicPartition, ProducerBatch] = {}
        records = 0
        sizes: list[int] = []
        for batch in batches:
            payload = batch.encode(self.compression, self.compression_level)
            if self._transactional_id is not None:
                payload = mark_transactional(batch)
            if batch.attempts == 0 and self.compression != CompressionType.NONE and batch.uncompressed_size:
                ratio = len(payload) / batch.uncompressed_size
                self.accumulator.update_compression_ratio(batch.topic, ratio)
                if self.metrics is not None:
                    self.metrics.record_compression(ratio, now_ms)
            topics.setdefault(batch.topic, []).append((batch.partition, payload))
            by_tp[batch.tp] = batch
            batch.in_flight = True
            batch.sent_to = node
            self._in_flight_batches.add(batch)
            if batch not in self._heaped:
                self._heaped.add(batch)
                heapq.heappush(
                    self._expiry_heap,
                    (batch.created_ms + self.delivery_timeout_ms, next(self._counter), batch),
                )
            records += len(batch.entries)
            sizes.append(len(payload))
            if batch.attempts > 0 and self.metrics is not None:
                self.metrics.record_retry(len(batch.entries), now_ms)
        acks = self.acks
        timeout = self.request_timeout_ms
        transactional_id = self._transactional_id

        def encode(version: int) -> wire.EncodedBody:
            # What build() describes, written directly (produce_request.py): kio's generic writer costs more
            # than the rest of the request.
            body = produce_request.encode_produce_body(version, transactional_id, acks, timeout, topics)
            return wire.EncodedBody(ApiKey.PRODUCE, version, body)

        def build(version: int) -> dict[str, Any]:
            # The nested entities are built as kio objects of the negotiated version directly: the generic
            # dict conversion in wire.build_request costs more than the rest of the request.
            topic_cls, partition_cls = _produce_entities(version)
            return {
                "transactional_id": transactional_id,
                "acks": acks,
                "timeout": timeout,
                "topic_data": tuple(
                    topic_cls(
                        name=t,
                        partition_data=tuple(partition_cls(index=p, records=data) for p, data in parts),
                    )
                    for t, parts in topics.items()
                ),
            }

        self._in_flight[node] = self._in_flight.get(node, 0) + 1
        self.requests_sent += 1
        if self.metrics is not None:
            self.metrics.record_request(records, sizes, now_ms)
        sent_ms = now_ms

        def on_response(response: Any, version: int, now: int) -> None:
            self._request_done(node)
            if self.metrics is not None:
                self.metrics.record_latency(now - sent_ms, now)
            if response is None:  # acks=0: no answer comes
                for batch in by_tp.values():
                    self._succeed(batch, -1, -1)
                return
            throttle = getattr(response, "throttle_time", None)
            if throttle is not None and self.metrics is not None:
                self.metrics.record_throttle(
                    _to_ms(throttle) if not isinstance(throttle, datetime.timedelta) else throttle // _MS, now
                )
            self._apply_leader_hints(response, now)  # a retry to the new leader then skips its backoff
            for topic_response in response.responses:
                name = str(topic_response.name)
                for p in topic_response.partition_responses:
                    tp = TopicPartition(name, int(p.index))
                    if tp not in by_tp:
                        continue
                    batch = by_tp.pop(tp)
                    code = int(p.error_code)
                    if code == 0:
                        self._succeed(batch, int(p.base_offset), _to_ms(p.log_append_time))
                    else:
                        message = getattr(p, "error_message", None)
                        record_errors = getattr(p, "record_errors", ())
                        detail = f"producing to {batch.tp}"
                        if message:
                            detail += f": {message}"
                        if record_errors:
                            detail += "; " + ", ".join(
                                f"record {int(e.batch_index)}: {e.batch_index_error_message}"
                                for e in record_errors
                            )
                        error = error_for_code(code, detail, needs=Needs("Produce", topic=("WRITE", name)))
                        self._handle_error(batch, code, error, int(getattr(p, "log_start_offset", -1)), now)
            for batch in by_tp.values():  # not in the answer: treat as a retriable failure
                self._handle_error(
                    batch,
                    NETWORK_EXCEPTION,
                    error_for_code(NETWORK_EXCEPTION, f"no answer for {batch.tp}"),
                    -1,
                    now,
                )

        def on_failure(error: BaseException, now: int) -> None:
            self._request_done(node)
            self.metadata.request_update()
            if not isinstance(error, KafkaError):
                error = KafkaError(str(error))
            code = REQUEST_TIMED_OUT if isinstance(error, KafkaTimeoutError) else NETWORK_EXCEPTION
            log.debug("produce request to node %d failed: %s", node, error)
            for batch in by_tp.values():
                self._handle_error(batch, code, error, -1, now)

        return UnsentRequest(
            api_key=ApiKey.PRODUCE,
            node=node,
            build=build,
            encode=encode,
            on_response=on_response,
            on_failure=on_failure,
            timeout_ms=self.request_timeout_ms,
            expect_response=self.acks != 0,
            min_version=3,
            max_version=11 if self.transactions is None else self.transactions.produce_max_version,
        )

    def _apply_leader_hints(self, response: Any, now_ms: int) -> set[TopicPartition]:
        """KIP-951 (Produce v10+): partitions answered NOT_LEADER_OR_FOLLOWER / FENCED_LEADER_EPOCH name their
        new leader and epoch, and the response carries its endpoint; update the metadata at once.  Returns
        the partitions whose leader moved."""
        hints: dict[TopicPartition, tuple[int, int]] = {}
        for topic_response in response.responses:
            for p in topic_response.partition_responses:
                if int(p.error_code) not in _LEADER_HINT_ERRORS:
                    continue
                leader = getattr(p, "current_leader", None)
                if leader is not None and int(leader.leader_id) >= 0 and int(leader.leader_epoch) >= 0:
                    tp = TopicPartition(str(topic_response.name), int(p.index))
                    hints[tp] = (int(leader.leader_id), int(leader.leader_epoch))
        if not hints:
            return set()
        nodes = [
            BrokerNode(int(n.node_id), str(n.host), int(n.port), None if n.rack is None else str(n.rack))
            for n in getattr(response, "node_endpoints", None) or ()
        ]
        moved = self.metadata.update_leaders(hints, nodes, now_ms)
        if moved:
            described = ", ".join(f"{tp} -> {hints[tp][0]} (epoch {hints[tp][1]})" for tp in sorted(moved))
            log.info("new leaders from the produce response (KIP-951): %s", described)
        return moved

    def _request_done(self, node: int) -> None:
        count = self._in_flight.get(node, 0) - 1
        if count > 0:
            self._in_flight[node] = count
        else:
            self._in_flight.pop(node, None)

    # ------------------------------------------------------------------ outcomes
    def _succeed(self, batch: ProducerBatch, base_offset: int, log_append_ms: int) -> None:
        batch.in_flight = False
        self._in_flight_batches.discard(batch)
        if self.idempotence is not None:
            self.idempotence.on_success(batch, base_offset)
        if batch.done:
            return  # expired while in flight: its records were already failed
        batch.done = True
        self.on_done(batch, base_offset, log_append_ms, None)

    def _fail(
        self, batch: ProducerBatch, error: BaseException, code: int | None, adjust: bool, now_ms: int
    ) -> None:
        batch.in_flight = False
        self._in_flight_batches.discard(batch)
        if self.idempotence is not None:
            self.idempotence.on_failure(batch, code, adjust)
        if self.transactions is not None:
            self.transactions.on_batch_failed(code, error)
        if batch.done:
            return
        batch.done = True
        if self.metrics is not None:
            self.metrics.record_errors(len(batch.entries), now_ms)
        self.on_done(batch, -1, -1, error)

    def _handle_error(
        self, batch: ProducerBatch, code: int, error: KafkaError, log_start_offset: int, now_ms: int
    ) -> None:
        if code in _METADATA_ERRORS:
            self.metadata.request_update()
        if batch.done:
            # Expired while its request was in flight: only the sequence bookkeeping is left.
            batch.in_flight = False
            self._in_flight_batches.discard(batch)
            if self.idempotence is not None:
                self.idempotence.forget([batch])
            return
        if code in (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE):
            error = MessageTooLargeError(
                f"the batch of {len(batch.entries)} record(s) for {batch.tp} "
                f"({len(batch.payload or b'')} bytes) is larger than the broker accepts "
                "(message.max.bytes / max.message.bytes)"
            )
            self._fail(batch, error, code, batch.attempts < self.retries, now_ms)
            return
        retriable = bool(error.retriable)
        timed_out = now_ms >= batch.created_ms + self.delivery_timeout_ms
        if self._can_retry(batch, code, retriable, log_start_offset, timed_out):
            batch.last_error = error
            log.debug("retrying %s after %s (attempt %d)", batch, error, batch.attempts + 1)
            self._in_flight_batches.discard(batch)
            self.accumulator.reenqueue(batch, now_ms, in_sequence_order=self.idempotence is not None)
            return
        if code == DUPLICATE_SEQUENCE_NUMBER and self.idempotence is not None:
            # The broker already has this batch but no longer remembers its offset: success without one.
            self._succeed(batch, -1, -1)
            return
        if retriable and timed_out:
            error = KafkaTimeoutError(f"{self._expiry_error(batch, now_ms)}; last error: {error}")
        self._fail(batch, error, code, batch.attempts < self.retries, now_ms)

    def _can_retry(
        self, batch: ProducerBatch, code: int, retriable: bool, log_start_offset: int, timed_out: bool
    ) -> bool:
        if timed_out or batch.attempts >= self.retries or batch.done:
            return False
        if self.idempotence is not None:
            return self.idempotence.can_retry(batch, code, retriable, log_start_offset)
        return retriable

    # ------------------------------------------------------------------ expiry
    def _expiry_error(self, batch: ProducerBatch, now_ms: int) -> KafkaTimeoutError:
        return KafkaTimeoutError(
            f"Expiring {len(batch.entries)} record(s) for {batch.tp}: {now_ms - batch.created_ms} ms "
            f"has passed since batch creation (delivery.timeout.ms={self.delivery_timeout_ms})"
        )

    def _expire(self, batch: ProducerBatch, now_ms: int, *, awaiting_response: bool) -> None:
        if self.idempotence is not None and batch.has_sequence:
            self.idempotence.mark_unresolved(batch, awaiting_response=awaiting_response)
        error = self._expiry_error(batch, now_ms)
        if awaiting_response:
            # Fail the records now; the request's answer is still needed for the sequence bookkeeping.
            batch.done = True
            if self.metrics is not None:
                self.metrics.record_errors(len(batch.entries), now_ms)
            self.on_done(batch, -1, -1, error)
        else:
            self._fail(batch, error, None, False, now_ms)

    def _expire_in_flight(self, now_ms: int) -> None:
        heap = self._expiry_heap
        while heap and heap[0][0] <= now_ms:
            _deadline, _n, batch = heapq.heappop(heap)
            self._heaped.discard(batch)
            if batch.in_flight and not batch.done:
                self._expire(batch, now_ms, awaiting_response=True)
        if len(heap) > 2 * len(self._in_flight_batches) + 64:
            # Drop the entries of batches that are no longer in flight (done, or queued for a retry: they
            # get a new entry when sent again), so that their records can be freed.
            kept = [entry for entry in heap if entry[2] in self._in_flight_batches]
            heapq.heapify(kept)
            self._expiry_heap = kept
            self._heaped = {entry[2] for entry in kept}

    # ------------------------------------------------------------------ close
    def abort_all(self, error: BaseException, now_ms: int) -> int:
        """Fail every queued and unanswered batch (after the network thread stopped).  Returns the number
        of records failed."""
        failed = 0
        for batch in self.accumulator.abort_undrained():
            if not batch.done:
                failed += len(batch.entries)
            self._fail(batch, error, None, False, now_ms)
        for batch in list(self._in_flight_batches):
            if not batch.done:
                failed += len(batch.entries)
            self._fail(batch, error, None, False, now_ms)
        self._in_flight_batches.clear()
        return failed

    def partitions_with_leader(self, topic: str) -> Sequence[int]:
        parts = self.metadata.cluster.partitions.get(topic, ())
        return [p.partition for p in parts if p.leader >= 0]

    def leaders(self) -> Mapping[TopicPartition, int]:
        return self._leader_maps()[0]


def closed_error(timeout_ms: int) -> KafkaError:
    return IllegalStateError(
        f"the producer was closed before the record could be delivered (close timeout {timeout_ms} ms)"
    )
