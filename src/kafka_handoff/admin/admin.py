"""The ``AdminClient``: topics, cluster, consumer groups (both protocols) and their offsets.

Same threading model as the consumer (seed 002): the application thread submits
:class:`~kafka_handoff.admin.calls.AdminCall` objects to the network thread, where the
:class:`~kafka_handoff.admin.calls.AdminCallManager` sends and retries them, and waits on their futures.
An operation made of several steps (find the brokers, then ask each one) runs its steps from the
application thread, all under one deadline (``timeout`` seconds; default ``default.api.timeout.ms``).

Per-entity failures (a topic that already exists, a group that does not) raise the broker error for the
first failing entity; its message names the entity, and the others' errors are attached as notes.
"""

from __future__ import annotations

import logging
import queue
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import Any, TypeVar

from kio.schema.errors import ErrorCode

from kafka_handoff.admin.acls import AclAdminMixin
from kafka_handoff.admin.calls import (
    AdminCall,
    AdminCallManager,
    Done,
    Pause,
    Steps,
    Target,
    call_outcome,
    drives_steps,
    next_step,
    raise_first,
    run_one,
    set_exception,
)
from kafka_handoff.admin.cluster_ops import ClusterOpsAdminMixin
from kafka_handoff.admin.configs import ConfigAdminMixin
from kafka_handoff.admin.group_offsets import GroupOffsetsAdminMixin
from kafka_handoff.admin.groups import GroupAdminMixin
from kafka_handoff.admin.offsets import OffsetAdminMixin, OffsetSpec
from kafka_handoff.admin.records import RecordsAdminMixin
from kafka_handoff.admin.results import (
    ClusterDescription,
)
from kafka_handoff.admin.share import ShareAdminMixin
from kafka_handoff.admin.topics import TopicAdminMixin
from kafka_handoff.client_setup import client_properties, metadata_and_client
from kafka_handoff.clock import MonotonicClock
from kafka_handoff.config import AdminConfig, parse_admin_config
from kafka_handoff.errors import (
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    Needs,
    UnsupportedVersionError,
    error_for_code,
)
from kafka_handoff.network.thread import BackgroundError, NetworkThread
from kafka_handoff.protocol.metadata import parse_metadata
from kafka_handoff.protocol.requests import ANY_NODE
from kafka_handoff.protocol.versions import ApiKey
from kafka_handoff.types import BrokerNode, ClusterMetadata

T = TypeVar("T")

__all__ = ["AdminClient", "OffsetSpec"]

log = logging.getLogger(__name__)

_GRACE_MS = 1000
"""How long the application thread waits past a deadline for the network thread's own timeout error."""


class AdminClient(
    TopicAdminMixin,
    ConfigAdminMixin,
    OffsetAdminMixin,
    GroupAdminMixin,
    GroupOffsetsAdminMixin,
    RecordsAdminMixin,
    AclAdminMixin,
    ClusterOpsAdminMixin,
    ShareAdminMixin,
):
    """A small Kafka admin client.  Thread-safe: calls from several threads are fine."""

    def __init__(self, config: Mapping[str, Any] | None = None, /, **kwargs: Any) -> None:
        self._config: AdminConfig = parse_admin_config(client_properties(config, kwargs))
        cfg = self._config
        self._closed = False
        self._clock = MonotonicClock()
        self.client_id: str = cfg.client_id
        self._default_timeout_ms = int(cfg.default_api_timeout_ms)
        self._background: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._fatal: BaseException | None = None

        self._metadata, client = metadata_and_client(cfg, self.client_id, allow_auto_topic_creation=False)
        self._client = client
        self._calls = AdminCallManager(
            retry_backoff_ms=int(cfg.retry_backoff_ms),
            retry_backoff_max_ms=int(cfg.retry_backoff_max_ms),
            request_timeout_ms=int(cfg.request_timeout_ms),
            max_retries=int(cfg.retries),
            on_unknown_node=self._metadata.request_update,
        )
        self._thread = NetworkThread(
            client,
            [self._metadata, self._calls],
            self._clock,
            name=f"kafka-handoff-network-{self.client_id}",
            background_events=self._background,
            on_close=self._on_close_nt,
        )
        self._thread.start()

    # ==================================================================================== lifecycle
    def close(self, timeout: float | None = 30.0) -> None:
        """Stop the network thread; calls still running fail with
        :class:`~kafka_handoff.errors.KafkaError`.  Idempotent."""
        timeout_ms = self._begin_close(timeout)
        if timeout_ms is not None:
            self._thread.close(timeout_ms)

    def _begin_close(self, timeout: float | None) -> int | None:
        """Mark the client closed; the network thread's close timeout (``None``: closed already)."""
        if self._closed:
            return None
        self._closed = True
        return self._timeout_ms(timeout)

    def _on_close_nt(self, now: int) -> bool:
        self._calls.fail_all(KafkaError("the admin client was closed"))
        return True

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ==================================================================================== plumbing
    def _timeout_ms(self, timeout: float | None) -> int:
        if timeout is None:
            return self._default_timeout_ms
        return max(0, int(timeout * 1000))

    def _deadline(self, timeout: float | None) -> int:
        if self._closed:
            raise IllegalStateError("this admin client has been closed")
        return self._clock.now_ms() + self._timeout_ms(timeout)

    def _run(self, calls: Sequence[AdminCall], deadline_ms: int) -> list[Any]:
        """Send ``calls`` together; return each one's result or exception, in order."""
        if not calls:
            return []
        self._submit_calls(calls)
        outcomes: list[Any] = []
        for call in calls:
            outcomes.append(self._wait(call.future, deadline_ms + _GRACE_MS, call.name))
        return outcomes

    def _submit_calls(self, calls: Sequence[AdminCall]) -> None:
        """Hand ``calls`` to the network thread (their futures fail if it has stopped)."""

        def submit(now: int, fut: Future[Any]) -> None:
            for call in calls:
                self._calls.submit(call, now)
            fut.set_result(None)

        event = self._thread.call(submit, name="admin calls")

        def on_submitted(f: Future[Any]) -> None:
            error = f.exception()  # the network thread has stopped: nobody will run the calls
            if error is not None:
                for call in calls:
                    set_exception(call.future, error)

        event.add_done_callback(on_submitted)

    def _drive(self, steps: Steps[T]) -> T:
        """Run an admin operation written as steps (see ``admin.calls``), blocking for each step."""
        value: Any = None
        error: BaseException | None = None
        while True:
            step = next_step(steps, value, error)
            if isinstance(step, Done):
                return step.value
            value, error = None, None
            try:
                if isinstance(step, Pause):
                    time.sleep(step.seconds)
                else:
                    value = self._run(step.calls, step.deadline_ms)
            except Exception as exc:  # a network-thread error: raised where the operation waited
                error = exc

    def _run_one(self, call: AdminCall) -> Any:
        (outcome,) = self._run([call], call.deadline_ms)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _wait(self, future: Future[Any], deadline_ms: int, what: str) -> Any:
        """The future's result or exception; surfaces network-thread errors; cancels at the deadline."""
        while True:
            self._raise_background_errors()
            remaining_ms = deadline_ms - self._clock.now_ms()
            # Not future.result(timeout): its TimeoutError is the builtin one, which KafkaTimeoutError
            # (a call's own outcome) is too.
            done, _ = wait_futures([future], timeout=max(0.0, min(remaining_ms, 100) / 1000.0))
            if done:
                return call_outcome(future, what)
            if remaining_ms <= 0:
                future.cancel()
                return KafkaTimeoutError(f"{what} did not complete in time")

    def _raise_background_errors(self) -> None:
        if self._fatal is not None:
            raise self._fatal
        while True:
            try:
                event = self._background.get_nowait()
            except queue.Empty:
                return
            if isinstance(event, BackgroundError):
                if event.fatal:
                    self._fatal = event.error
                raise event.error

    _raise_first = staticmethod(raise_first)

    # ==================================================================================== metadata
    def _metadata_call(
        self,
        topics: Sequence[str] | None,
        deadline_ms: int,
        *,
        target: Target = ANY_NODE,
        check: Callable[[ClusterMetadata], None] | None = None,
        name: str = "Metadata",
        backoff_max_ms: int | None = None,
    ) -> AdminCall:
        names = None if topics is None else list(topics)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {
                "topics": None if names is None else [{"name": n, "topic_id": None} for n in names],
                "allow_auto_topic_creation": False,
                "include_cluster_authorized_operations": False,
                "include_topic_authorized_operations": False,
            }

        def handle(response: Any, version: int, node: int) -> ClusterMetadata:
            cluster = parse_metadata(response)
            if cluster.brokers:
                self._client.update_brokers(cluster.brokers.values())
            if check is not None:
                check(cluster)
            return cluster

        return AdminCall(
            name,
            ApiKey.METADATA,
            target,
            build,
            handle,
            deadline_ms,
            min_version=1,
            backoff_max_ms=backoff_max_ms,
        )

    def _cluster(self, topics: Sequence[str] | None, deadline_ms: int) -> ClusterMetadata:
        return self._drive(self._cluster_steps(topics, deadline_ms))

    def _cluster_steps(self, topics: Sequence[str] | None, deadline_ms: int) -> Steps[ClusterMetadata]:
        def check(cluster: ClusterMetadata) -> None:
            for topic, code in cluster.topic_errors.items():
                if code != ErrorCode.unknown_topic_or_partition and error_for_code(code).retriable:
                    raise error_for_code(code, f"topic {topic!r}")  # e.g. LEADER_NOT_AVAILABLE: retry

        result: ClusterMetadata = yield from run_one(self._metadata_call(topics, deadline_ms, check=check))
        return result

    @drives_steps
    def describe_cluster(self, timeout: float | None = None) -> Steps[ClusterDescription]:
        """Cluster id, the controller id and the live brokers (DescribeCluster; Metadata on old brokers)."""
        deadline = self._deadline(timeout)

        def build(version: int, timeout_ms: int) -> dict[str, Any]:
            return {"include_cluster_authorized_operations": False, "endpoint_type": 1}

        def handle(response: Any, version: int, node: int) -> ClusterDescription:
            code = int(response.error_code)
            if code != ErrorCode.none:
                raise error_for_code(
                    code, response.error_message, needs=Needs("DescribeCluster", cluster="DESCRIBE")
                )
            brokers = tuple(
                sorted(
                    (
                        BrokerNode(int(b.broker_id), str(b.host), int(b.port), b.rack)
                        for b in response.brokers
                    ),
                    key=lambda b: b.node_id,
                )
            )
            return ClusterDescription(str(response.cluster_id), int(response.controller_id), brokers)

        call = AdminCall("DescribeCluster", ApiKey.DESCRIBE_CLUSTER, ANY_NODE, build, handle, deadline)
        try:
            result: ClusterDescription = yield from run_one(call)
            return result
        except UnsupportedVersionError:
            cluster = yield from self._cluster_steps([], deadline)
            brokers = tuple(sorted(cluster.brokers.values(), key=lambda b: b.node_id))
            return ClusterDescription(cluster.cluster_id, cluster.controller_id, brokers)
