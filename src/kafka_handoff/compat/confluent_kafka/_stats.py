"""librdkafka-style statistics JSON (``stats_cb``), built from the native client's public state.

The field names follow librdkafka's STATISTICS.md so dashboards keep working: top level ``name``,
``client_id``, ``type``, ``ts``, ``time``, ``age``, ``replyq``, ``msg_cnt``, ``msg_size``, ``tx``/``rx``
counters, ``brokers{}``, ``topics{partitions{}}`` (``consumer_lag``, ``fetchq_cnt``, ``committed_offset``,
``app_offset``, ``stored_offset``, ``hi_offset``, ``lo_offset``, ...) and ``cgrp{}``.  Values kafka-handoff
does not track are reported as librdkafka reports unknown values (-1, -1001 for offsets, 0 for counters).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kafka_handoff import errors as native_errors
from kafka_handoff.config import parse_bootstrap_servers
from kafka_handoff.types import TopicPartition as NativeTP

if TYPE_CHECKING:
    from kafka_handoff.compat.confluent_kafka.consumer import Consumer

__all__ = ["base_stats", "broker_stats", "consumer_stats"]

OFFSET_INVALID = -1001


def base_stats(name: str, client_id: str, kind: str, started: float) -> dict[str, Any]:
    """The top-level fields every client reports."""
    now = time.time()
    return {
        "name": name,
        "client_id": client_id,
        "type": kind,
        "ts": int(time.monotonic() * 1_000_000),
        "time": int(now),
        "age": int((time.monotonic() - started) * 1_000_000),
        "replyq": 0,
        "msg_cnt": 0,
        "msg_size": 0,
        "msg_max": 0,
        "msg_size_max": 0,
        "simple_cnt": 0,
        "metadata_cache_cnt": 0,
        "tx": 0,
        "tx_bytes": 0,
        "rx": 0,
        "rx_bytes": 0,
        "txmsgs": 0,
        "txmsg_bytes": 0,
        "rxmsgs": 0,
        "rxmsg_bytes": 0,
        "brokers": {},
        "topics": {},
    }


def broker_stats(bootstrap: Any, started: float) -> dict[str, Any]:
    """One entry per bootstrap address (librdkafka lists its configured brokers the same way)."""
    out: dict[str, Any] = {}
    try:
        addresses = parse_bootstrap_servers(bootstrap)
    except Exception:
        return out
    for host, port in addresses:
        name = f"{host}:{port}/bootstrap"
        out[name] = {
            "name": name,
            "nodeid": -1,
            "nodename": f"{host}:{port}",
            "source": "configured",
            "state": "UP",
            "stateage": int((time.monotonic() - started) * 1_000_000),
            "outbuf_cnt": 0,
            "outbuf_msg_cnt": 0,
            "waitresp_cnt": 0,
            "waitresp_msg_cnt": 0,
            "tx": 0,
            "txbytes": 0,
            "txerrs": 0,
            "txretries": 0,
            "req_timeouts": 0,
            "rx": 0,
            "rxbytes": 0,
            "rxerrs": 0,
            "connects": 0,
            "disconnects": 0,
            "rtt": _window(),
            "throttle": _window(),
            "toppars": {},
        }
    return out


def _window() -> dict[str, int]:
    return {
        "min": 0,
        "max": 0,
        "avg": 0,
        "sum": 0,
        "cnt": 0,
        "stddev": 0,
        "hdrsize": 0,
        "p50": 0,
        "p75": 0,
        "p90": 0,
        "p95": 0,
        "p99": 0,
        "p99_99": 0,
        "outofrange": 0,
    }


def _partition_stats(partition: int) -> dict[str, Any]:
    return {
        "partition": partition,
        "broker": -1,
        "leader": -1,
        "desired": True,
        "unknown": False,
        "msgq_cnt": 0,
        "msgq_bytes": 0,
        "xmit_msgq_cnt": 0,
        "xmit_msgq_bytes": 0,
        "fetchq_cnt": 0,
        "fetchq_size": 0,
        "fetch_state": "active",
        "query_offset": OFFSET_INVALID,
        "next_offset": OFFSET_INVALID,
        "app_offset": OFFSET_INVALID,
        "stored_offset": OFFSET_INVALID,
        "stored_leader_epoch": -1,
        "commited_offset": OFFSET_INVALID,
        "committed_offset": OFFSET_INVALID,
        "committed_leader_epoch": -1,
        "eof_offset": OFFSET_INVALID,
        "lo_offset": -1,
        "hi_offset": -1,
        "ls_offset": -1,
        "consumer_lag": -1,
        "consumer_lag_stored": -1,
        "leader_epoch": -1,
        "txmsgs": 0,
        "txbytes": 0,
        "rxmsgs": 0,
        "rxbytes": 0,
        "msgs": 0,
        "rx_ver_drops": 0,
        "msgs_inflight": 0,
        "next_ack_seq": 0,
        "next_err_seq": 0,
        "acked_msgid": 0,
    }


def _metric(metrics: Mapping[str, float], name: str) -> int:
    value = metrics.get(name)
    return int(value) if value is not None and value == value else 0


def consumer_stats(c: Consumer) -> dict[str, Any]:
    """The statistics of a compat consumer."""
    native = c._native
    out = base_stats(f"{c._client_id}#consumer", c._client_id, "consumer", c._start)
    metrics = native.metrics()
    fetches = _metric(metrics, "consumer-fetch-manager-metrics:fetch-total")
    out["rx"] = fetches
    out["tx"] = fetches
    out["rxmsgs"] = _metric(metrics, "consumer-fetch-manager-metrics:records-consumed-total")
    out["rxmsg_bytes"] = _metric(metrics, "consumer-fetch-manager-metrics:bytes-consumed-total")
    out["rx_bytes"] = out["rxmsg_bytes"]
    out["brokers"] = broker_stats(c._native_conf.get("bootstrap.servers"), c._start)
    buffered: dict[NativeTP, list[int]] = {}
    chunks = ([c._chunk] if c._chunk is not None else []) + list(c._chunks)
    for chunk in chunks:
        left = chunk.records[chunk.index :]
        entry = buffered.setdefault(chunk.tp, [0, 0])
        entry[0] += len(left)
        entry[1] += sum(len(r.value) for r in left if isinstance(r.value, bytes | bytearray | memoryview))
    out["msg_cnt"] = sum(e[0] for e in buffered.values())
    out["msg_size"] = sum(e[1] for e in buffered.values())
    try:
        assigned = sorted(native.assignment())
        paused = native.paused()
    except native_errors.KafkaError:
        assigned, paused = [], frozenset()
    topics: dict[str, Any] = {}
    for tp in assigned:
        topic = topics.setdefault(
            tp.topic,
            {
                "topic": tp.topic,
                "age": out["age"],
                "metadata_age": 0,
                "batchsize": _window(),
                "batchcnt": _window(),
                "partitions": {},
            },
        )
        p = _partition_stats(tp.partition)
        fq = buffered.get(tp, [0, 0])
        p["fetchq_cnt"], p["fetchq_size"] = fq
        p["fetch_state"] = "stopped" if tp in paused else "active"
        app = c._app_offsets.get(tp, OFFSET_INVALID)
        stored = c._stored.get(tp, OFFSET_INVALID)
        committed = c._committed.get(tp, OFFSET_INVALID)
        p["app_offset"] = app
        p["stored_offset"] = stored
        p["committed_offset"] = p["commited_offset"] = committed
        p["eof_offset"] = c._eof_at.get(tp, OFFSET_INVALID)
        hi = -1
        try:
            lag = native.current_lag(tp)
            if lag is not None:
                position = native.position(tp, timeout=0)
                p["next_offset"] = position
                hi = position + lag
        except native_errors.KafkaError:
            pass
        p["hi_offset"] = p["ls_offset"] = hi
        if hi >= 0:
            base = committed if committed >= 0 else -1
            p["consumer_lag"] = max(0, hi - base) if base >= 0 else -1
            p["consumer_lag_stored"] = max(0, hi - stored) if stored >= 0 else -1
        topic["partitions"][str(tp.partition)] = p
    out["topics"] = topics
    if c._group_id is not None:
        out["cgrp"] = {
            "state": "up" if c._subscribed or assigned else "init",
            "stateage": out["age"] // 1000,
            "join_state": "steady" if assigned else ("wait-join" if c._subscribed else "init"),
            "rebalance_age": _metric(metrics, "consumer-coordinator-metrics:last-rebalance-seconds-ago")
            * 1000,
            "rebalance_cnt": c._rebalance_cnt,
            "rebalance_reason": "",
            "assignment_size": len(assigned),
        }
    return out
