"""KIP-714 client telemetry: the request manager (sans-I/O) behind ``enable.metrics.push``.

The client asks a broker for its telemetry subscription (GetTelemetrySubscriptions), which assigns the
client instance id and says which metrics the cluster wants (name prefixes), how often, how compressed and
whether counters go as deltas.  When metrics are requested, the manager pushes them (PushTelemetry) every
push interval as OTLP ``MetricsData`` (:mod:`kafka_handoff.protocol.otlp`), the first push after a jittered
0.5-1.5 x interval; on close a final *terminating* push is sent.

Names follow KIP-714: ``org.apache.kafka.`` + the metric group without ``-metrics`` + ``.`` + the name, with
dashes turned into dots (``org.apache.kafka.consumer.fetch.manager.records.lag.max``); a metric's tags other
than ``client-id`` become data point attributes (dashes as underscores).

States (as in Java's ``ClientTelemetryState``): subscription-needed, subscription-in-progress, push-needed,
push-in-progress, terminating-push-needed, terminating-push-in-progress, terminated; plus disabled (the
broker has no telemetry receiver: the APIs are not supported) -- nothing here ever raises into the
application: telemetry problems are logged.
"""

from __future__ import annotations

import logging
import random
import threading
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Final

from kio.schema.errors import ErrorCode

from kafka_handoff.errors import UnsupportedVersionError
from kafka_handoff.metrics import MetricName, Metrics
from kafka_handoff.protocol.backoff import ExponentialBackoff
from kafka_handoff.protocol.compression import CompressionType, compress
from kafka_handoff.protocol.otlp import CUMULATIVE, DELTA, OtlpMetric, OtlpPoint, encode_metrics_data
from kafka_handoff.protocol.requests import ANY_NODE, PollResult, UnsentRequest
from kafka_handoff.protocol.versions import ApiKey

__all__ = ["TelemetryManager", "client_instance_id", "telemetry_name"]

log = logging.getLogger(__name__)

_ZERO = uuid.UUID(int=0)
_UNKNOWN_SUBSCRIPTION_ID = ErrorCode.unknown_subscription_id
_TELEMETRY_TOO_LARGE = ErrorCode.telemetry_too_large
_UNSUPPORTED_COMPRESSION_TYPE = ErrorCode.unsupported_compression_type
_INVALID_REQUEST = ErrorCode.invalid_request
_INVALID_RECORD = ErrorCode.invalid_record
_PREFERRED = (CompressionType.ZSTD, CompressionType.LZ4, CompressionType.SNAPPY, CompressionType.GZIP)

SUBSCRIPTION_NEEDED = "subscription-needed"
SUBSCRIPTION_IN_PROGRESS = "subscription-in-progress"
PUSH_NEEDED = "push-needed"
PUSH_IN_PROGRESS = "push-in-progress"
TERMINATING_PUSH_NEEDED = "terminating-push-needed"
TERMINATING_PUSH_IN_PROGRESS = "terminating-push-in-progress"
TERMINATED = "terminated"
DISABLED = "disabled"


def telemetry_name(name: MetricName) -> str:
    """The KIP-714 name of a client metric."""
    group = name.group.removesuffix("-metrics").replace("-", ".")
    return f"org.apache.kafka.{group}.{name.name.replace('-', '.')}"


MIN_PUSH_INTERVAL_MS: Final = 100
"""The shortest push interval accepted from a broker: the broker's own bound of a client metrics
subscription's ``interval.ms``; a broker asking for less (1 ms: a push storm) gets this."""
DEFAULT_PUSH_INTERVAL_MS: Final = 300_000


def push_interval_ms(asked_ms: int) -> int:
    """The push interval used for the one a broker asked for: none (0 or less) means the default (5 minutes,
    as Java), anything else at least :data:`MIN_PUSH_INTERVAL_MS`."""
    if asked_ms <= 0:
        return DEFAULT_PUSH_INTERVAL_MS
    return max(MIN_PUSH_INTERVAL_MS, asked_ms)


class TelemetryManager:
    """Subscription, periodic pushes and the terminating push of one client (network thread)."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        enabled: bool,
        retry_backoff_ms: int = 100,
        retry_backoff_max_ms: int = 1000,
        resource: Callable[[], Mapping[str, str]] | None = None,
        now_unix_nanos: Callable[[], int],
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._metrics = metrics
        self.state = SUBSCRIPTION_NEEDED if enabled else DISABLED
        self.enabled = enabled
        self.unsupported = False
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._failures = 0
        self._resource = resource or (lambda: {})
        self._unix_nanos = now_unix_nanos
        self._rand = rand
        self._next_ms = 0
        self.instance_id: uuid.UUID | None = None
        self.instance_id_known = threading.Event()
        """Set once the instance id is known, or once it never will be (disabled, unsupported)."""
        if not enabled:
            self.instance_id_known.set()
        self._subscription_id = 0
        self._push_interval_ms = 300_000
        self._max_bytes = 1 << 20
        self._compression = CompressionType.NONE
        self._delta = False
        self._prefixes: tuple[str, ...] = ()
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self._last_push_nanos = 0
        self._start_nanos = self._unix_nanos()
        self._terminated: list[Future[None]] = []
        self.pushes = 0
        """Successful pushes (for tests and logs)."""

    # ------------------------------------------------------------------------------------------ polling
    def poll(self, now_ms: int) -> PollResult:
        if self.state in (SUBSCRIPTION_NEEDED, PUSH_NEEDED) and now_ms < self._next_ms:
            return PollResult.idle(self._next_ms - now_ms)
        if self.state == SUBSCRIPTION_NEEDED:
            self.state = SUBSCRIPTION_IN_PROGRESS
            return PollResult([self._get_subscriptions()])
        if self.state == PUSH_NEEDED:
            return self._push(now_ms, terminating=False)
        if self.state == TERMINATING_PUSH_NEEDED:
            return self._push(now_ms, terminating=True)
        return PollResult.idle()

    def terminate(self, now_ms: int, done: Future[None]) -> None:
        """Close: send the terminating push if metrics are subscribed; ``done`` completes when it is over."""
        if self.state in (PUSH_NEEDED, PUSH_IN_PROGRESS) and self._prefixes:
            self._terminated.append(done)
            # A push in flight: the terminating push follows its answer (see _after_push).
            self.state = (
                TERMINATING_PUSH_NEEDED if self.state == PUSH_NEEDED else TERMINATING_PUSH_IN_PROGRESS
            )
            return
        if self.state != DISABLED:
            self.state = TERMINATED
        self.instance_id_known.set()
        done.set_result(None)

    # ---------------------------------------------------------------------------- GetTelemetrySubscriptions
    def _get_subscriptions(self) -> UnsentRequest:
        def on_response(response: Any, version: int, now: int) -> None:
            code = int(response.error_code)
            if code != ErrorCode.none:
                self._retry_subscription(now, f"error code {code}")
                return
            self._failures = 0
            if response.client_instance_id is not None and response.client_instance_id != _ZERO:
                self.instance_id = response.client_instance_id
                self.instance_id_known.set()
            self._subscription_id = int(response.subscription_id)
            self._push_interval_ms = push_interval_ms(_ms(response.push_interval))
            self._max_bytes = int(response.telemetry_max_bytes)
            self._delta = bool(response.delta_temporality)
            accepted = [int(c) for c in response.accepted_compression_types]
            self._compression = next(
                (CompressionType(c) for c in accepted if c in {int(p) for p in _PREFERRED}),
                CompressionType.NONE,
            )
            self._prefixes = tuple(response.requested_metrics)
            if self.state != SUBSCRIPTION_IN_PROGRESS:
                return  # closed meanwhile
            if self._prefixes:
                self.state = PUSH_NEEDED
                self._next_ms = now + int(self._push_interval_ms * (0.5 + self._rand()))
            else:
                self.state = SUBSCRIPTION_NEEDED  # nothing requested: ask again after the interval
                self._next_ms = now + self._push_interval_ms

        def on_failure(error: BaseException, now: int) -> None:
            if isinstance(error, UnsupportedVersionError):
                self._disable("the broker does not support client telemetry (KIP-714)", logging.DEBUG)
                self.unsupported = True
                return
            self._retry_subscription(now, str(error))

        values = {"client_instance_id": self.instance_id or _ZERO}
        return UnsentRequest(
            api_key=ApiKey.GET_TELEMETRY_SUBSCRIPTIONS,
            node=ANY_NODE,
            values=values,
            on_response=on_response,
            on_failure=on_failure,
        )

    def _retry_subscription(self, now_ms: int, why: str) -> None:
        if self.state != SUBSCRIPTION_IN_PROGRESS:
            return
        wait = self._backoff.backoff_ms(self._failures)
        self._failures += 1
        log.debug("telemetry subscription failed (%s); retrying in %d ms", why, wait)
        self.state = SUBSCRIPTION_NEEDED
        self._next_ms = now_ms + wait

    def _disable(self, why: str, level: int) -> None:
        log.log(level, "client telemetry disabled: %s", why)
        self.state = DISABLED
        self.instance_id_known.set()
        self._finish_terminated()

    # ------------------------------------------------------------------------------------- PushTelemetry
    def collect(self) -> list[OtlpMetric]:
        """The subscribed metrics, as OTLP metrics (counters as deltas when the broker asked for it)."""
        now_nanos = self._unix_nanos()
        by_name: dict[str, tuple[bool, list[OtlpPoint]]] = {}
        for name, value in self._metrics.snapshot().items():
            full = telemetry_name(name)
            if not any(full.startswith(p) for p in self._prefixes):
                continue
            if value != value or value in (float("inf"), float("-inf")):
                continue  # NaN / infinite: no sample
            attrs = {k.replace("-", "_"): str(v) for k, v in name.tags.items() if k != "client-id"}
            is_sum = name.name.endswith("-total")
            start = self._start_nanos
            if is_sum and self._delta:
                key = (full, tuple(sorted(attrs.items())))
                previous = self._last.get(key, 0.0)
                self._last[key] = value
                value = value - previous
                start = self._last_push_nanos or self._start_nanos
            by_name.setdefault(full, (is_sum, []))[1].append(OtlpPoint(value, attrs, now_nanos, start))
        return [
            OtlpMetric(name, points, is_sum=is_sum, temporality=DELTA if self._delta else CUMULATIVE)
            for name, (is_sum, points) in sorted(by_name.items())
        ]

    def _push(self, now_ms: int, *, terminating: bool) -> PollResult:
        from kafka_handoff import __version__

        payload = encode_metrics_data(self.collect(), self._resource(), "kafka_handoff", __version__)
        codec = self._compression
        if codec != CompressionType.NONE:
            try:
                payload = compress(codec, payload)
            except Exception:  # a codec that fails here: send uncompressed rather than nothing
                codec = CompressionType.NONE
        if len(payload) > self._max_bytes:
            log.warning(
                "client telemetry: %d bytes of metrics exceed the broker's limit of %d; skipping this push",
                len(payload),
                self._max_bytes,
            )
            self._after_push(now_ms, terminating)
            return PollResult.idle(max(1, self._next_ms - now_ms))
        self.state = TERMINATING_PUSH_IN_PROGRESS if terminating else PUSH_IN_PROGRESS
        self._last_push_nanos = self._unix_nanos()

        def on_response(response: Any, version: int, now: int) -> None:
            code = int(response.error_code)
            if code == ErrorCode.none:
                self.pushes += 1
                self._after_push(now, terminating)
            elif code in (_UNKNOWN_SUBSCRIPTION_ID, _UNSUPPORTED_COMPRESSION_TYPE):
                if terminating or self._terminated:
                    self._finish_terminated()
                else:
                    self.state = SUBSCRIPTION_NEEDED  # the subscription changed: fetch it again now
                    self._next_ms = now
            elif code in (_INVALID_REQUEST, _INVALID_RECORD):
                self._disable(f"the broker rejected the pushed metrics (error code {code})", logging.ERROR)
            else:
                if code == _TELEMETRY_TOO_LARGE:
                    log.warning("client telemetry: the broker says the pushed metrics were too large")
                else:
                    log.debug("client telemetry push failed with error code %d", code)
                self._after_push(now, terminating)

        def on_failure(error: BaseException, now: int) -> None:
            if isinstance(error, UnsupportedVersionError):
                self._disable("the broker does not support client telemetry (KIP-714)", logging.DEBUG)
                return
            log.debug("client telemetry push failed: %s", error)
            self._after_push(now, terminating)

        request = UnsentRequest(
            api_key=ApiKey.PUSH_TELEMETRY,
            node=ANY_NODE,
            values={
                "client_instance_id": self.instance_id or _ZERO,
                "subscription_id": self._subscription_id,
                "terminating": terminating,
                "compression_type": int(codec),
                "metrics": payload,
            },
            on_response=on_response,
            on_failure=on_failure,
        )
        return PollResult([request])

    def _after_push(self, now_ms: int, terminating: bool) -> None:
        if terminating or self._terminated:
            if not terminating and self.state == TERMINATING_PUSH_IN_PROGRESS:
                self.state = TERMINATING_PUSH_NEEDED  # a regular push was in flight at close
                return
            self._finish_terminated()
            return
        self.state = PUSH_NEEDED
        self._next_ms = now_ms + self._push_interval_ms

    def _finish_terminated(self) -> None:
        if self.state != DISABLED:
            self.state = TERMINATED
        waiting, self._terminated = self._terminated, []
        for fut in waiting:
            if not fut.done():
                fut.set_result(None)


def _ms(value: Any) -> int:
    seconds = getattr(value, "total_seconds", None)
    if callable(seconds):
        return int(seconds() * 1000)
    return int(value)


def client_instance_id(manager: TelemetryManager, timeout_s: float) -> uuid.UUID | None:
    """The application-thread side of ``client_instance_id(timeout)`` (Java's ``clientInstanceId``).

    Raises :class:`~kafka_handoff.errors.IllegalStateError` when ``enable.metrics.push`` is false (as
    Java does), ``ValueError`` for a negative timeout; returns ``None`` when the id is not known within the
    timeout or the brokers do not support client telemetry."""
    from kafka_handoff.errors import IllegalStateError

    if not manager.enabled:
        raise IllegalStateError("Telemetry is not enabled. Set config `enable.metrics.push` to `true`.")
    if timeout_s < 0:
        raise ValueError(f"timeout must not be negative, got {timeout_s}")
    manager.instance_id_known.wait(timeout_s)
    return manager.instance_id
