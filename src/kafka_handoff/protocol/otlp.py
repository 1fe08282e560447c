"""A small OTLP encoder: client metrics as an OpenTelemetry ``MetricsData`` protobuf message (KIP-714).

Only what PushTelemetry needs: a resource with string attributes, one instrumentation scope, and metrics
that are gauges or sums of double-valued number data points with string attributes.  Encoded by hand (the
wire format is simple and stable), so the client needs no protobuf runtime; the tests decode the output
with the official ``opentelemetry-proto`` classes.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from kafka_handoff.protocol.varint import uvarint

__all__ = ["CUMULATIVE", "DELTA", "OtlpMetric", "OtlpPoint", "encode_metrics_data"]

DELTA = 1
CUMULATIVE = 2


@dataclass(frozen=True, slots=True)
class OtlpPoint:
    value: float
    attributes: Mapping[str, str] = field(default_factory=dict)
    time_unix_nano: int = 0
    start_time_unix_nano: int = 0


@dataclass(frozen=True, slots=True)
class OtlpMetric:
    name: str
    points: Sequence[OtlpPoint]
    description: str = ""
    unit: str = ""
    is_sum: bool = False
    """A monotonic sum (a counter); else a gauge."""
    temporality: int = CUMULATIVE


def _key(field_no: int, wire_type: int) -> bytes:
    return uvarint((field_no << 3) | wire_type)


def _bytes(field_no: int, payload: bytes) -> bytes:
    return _key(field_no, 2) + uvarint(len(payload)) + payload


def _str(field_no: int, text: str) -> bytes:
    return _bytes(field_no, text.encode("utf-8")) if text else b""


def _fixed64(field_no: int, value: int) -> bytes:
    return _key(field_no, 1) + struct.pack("<Q", value)


def _double(field_no: int, value: float) -> bytes:
    return _key(field_no, 1) + struct.pack("<d", value)


def _key_value(key: str, value: str) -> bytes:
    any_value = _bytes(1, value.encode("utf-8"))  # AnyValue.string_value (present even when empty)
    return _str(1, key) + _bytes(2, any_value)


def _attributes(field_no: int, attributes: Mapping[str, str]) -> bytes:
    return b"".join(_bytes(field_no, _key_value(k, v)) for k, v in sorted(attributes.items()))


def _point(point: OtlpPoint) -> bytes:
    # NumberDataPoint: start_time_unix_nano = 2, time_unix_nano = 3, as_double = 4, attributes = 7
    out = b""
    if point.start_time_unix_nano:
        out += _fixed64(2, point.start_time_unix_nano)
    out += _fixed64(3, point.time_unix_nano)
    out += _double(4, point.value)
    out += _attributes(7, point.attributes)
    return out


def _metric(metric: OtlpMetric) -> bytes:
    # Metric: name = 1, description = 2, unit = 3, gauge = 5, sum = 7
    out = _str(1, metric.name) + _str(2, metric.description) + _str(3, metric.unit)
    points = b"".join(_bytes(1, _point(p)) for p in metric.points)
    if metric.is_sum:
        # Sum: data_points = 1, aggregation_temporality = 2, is_monotonic = 3
        body = points + _key(2, 0) + uvarint(metric.temporality) + _key(3, 0) + uvarint(1)
        out += _bytes(7, body)
    else:
        out += _bytes(5, points)
    return out


def encode_metrics_data(
    metrics: Sequence[OtlpMetric],
    resource: Mapping[str, str],
    scope_name: str,
    scope_version: str = "",
) -> bytes:
    """``MetricsData{resource_metrics: [ResourceMetrics{resource, scope_metrics: [ScopeMetrics]}]}``."""
    resource_msg = _attributes(1, resource)  # Resource.attributes = 1
    scope = _str(1, scope_name) + _str(2, scope_version)  # InstrumentationScope name = 1, version = 2
    scope_metrics = _bytes(1, scope) + b"".join(_bytes(2, _metric(m)) for m in metrics)
    resource_metrics = _bytes(1, resource_msg) + _bytes(2, scope_metrics)
    return _bytes(1, resource_metrics)
