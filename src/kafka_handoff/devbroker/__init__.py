"""A real Apache Kafka (KRaft) broker for tests and demos, from Maven Central jars.

>>> from kafka_handoff import devbroker
>>> with devbroker.start(nodes=1) as broker:          # doctest: +SKIP
...     print(broker.bootstrap_servers)               # 127.0.0.1:PORT

See :mod:`kafka_handoff.devbroker.cluster` for ownership (supervised vs detached) and teardown.
"""

from kafka_handoff.devbroker.cluster import (
    DEFAULT_STOP_TIMEOUT_S,
    START_LOCK_ENV,
    BrokerAlreadyRunningError,
    BrokerStartError,
    Cluster,
    ClusterStatus,
    Node,
    NodeStatus,
    attach,
    start,
    status,
    stop,
)
from kafka_handoff.devbroker.config import broker_settings, generate_cluster_id, render_properties
from kafka_handoff.devbroker.jars import (
    KAFKA_VERSION,
    JarResolutionError,
    ResolvedJars,
    cache_root,
    ensure_jars,
)
from kafka_handoff.devbroker.probe import ProbeConnection, create_topic, fetch_metadata, wait_for_topic

#: A single-node cluster is the usual "broker"; the same handle serves both.
Broker = Cluster

__all__ = [
    "DEFAULT_STOP_TIMEOUT_S",
    "KAFKA_VERSION",
    "START_LOCK_ENV",
    "Broker",
    "BrokerAlreadyRunningError",
    "BrokerStartError",
    "Cluster",
    "ClusterStatus",
    "JarResolutionError",
    "Node",
    "NodeStatus",
    "ProbeConnection",
    "ResolvedJars",
    "attach",
    "broker_settings",
    "cache_root",
    "create_topic",
    "ensure_jars",
    "fetch_metadata",
    "generate_cluster_id",
    "render_properties",
    "start",
    "status",
    "stop",
    "wait_for_topic",
]
