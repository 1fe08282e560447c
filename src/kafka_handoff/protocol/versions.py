"""API version negotiation: ApiVersions first, then min(ours, broker's) per API (sans-I/O)."""

from __future__ import annotations

from collections.abc import Mapping

from kafka_handoff.errors import UnsupportedVersionError
from kafka_handoff.protocol.wire import API_NAMES, kio_version_range

__all__ = ["CLIENT_VERSIONS", "ApiKey", "negotiate", "pick_version"]


class ApiKey:
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    INCREMENTAL_ALTER_CONFIGS = 44
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    ALTER_PARTITION_REASSIGNMENTS = 45
    LIST_PARTITION_REASSIGNMENTS = 46
    OFFSET_DELETE = 47
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    DESCRIBE_CLIENT_QUOTAS = 48
    ALTER_CLIENT_QUOTAS = 49
    DESCRIBE_PRODUCERS = 61
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    DESCRIBE_CLUSTER = 60
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    GET_TELEMETRY_SUBSCRIPTIONS = 71
    PUSH_TELEMETRY = 72
    SHARE_GROUP_HEARTBEAT = 76
    SHARE_GROUP_DESCRIBE = 77
    SHARE_FETCH = 78
    SHARE_ACKNOWLEDGE = 79
    DESCRIBE_SHARE_GROUP_OFFSETS = 90
    ALTER_SHARE_GROUP_OFFSETS = 91
    DELETE_SHARE_GROUP_OFFSETS = 92


# The versions this client speaks, per API: the range kio has schemas for, capped where our code
# does not (yet) handle what a newer version changed.  Kafka 4.x brokers removed old versions
# (KIP-896), so the minimums follow theirs.
_CAPS: Mapping[int, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 12),  # v12 only for a transactions-v2 producer (Sender caps the others at 11)
    ApiKey.FETCH: (4, 17),
    ApiKey.LIST_OFFSETS: (1, 10),
    ApiKey.METADATA: (1, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),
    ApiKey.OFFSET_FETCH: (1, 9),
    ApiKey.FIND_COORDINATOR: (0, 6),
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.SASL_HANDSHAKE: (1, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_TOPICS: (2, 7),
    ApiKey.DELETE_TOPICS: (1, 6),
    ApiKey.INIT_PRODUCER_ID: (0, 5),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 4),
    # Transactions: requests pick v1 (KIP-98) or v2 (KIP-890) versions themselves with max_version.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 5),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),
    ApiKey.DESCRIBE_CONFIGS: (1, 4),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.DESCRIBE_LOG_DIRS: (1, 4),
    ApiKey.WRITE_TXN_MARKERS: (1, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),
    ApiKey.DESCRIBE_CLUSTER: (0, 1),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 1),
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),
    ApiKey.PUSH_TELEMETRY: (0, 0),
    # KIP-932 share groups: v1 is the GA version (4.1+); ShareFetch/ShareAcknowledge v2 add KIP-1206's
    # acquire mode and KIP-1222's RENEW.
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}


def _client_versions() -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for key, (lo, hi) in _CAPS.items():
        klo, khi = kio_version_range(key)
        out[key] = (max(lo, klo), min(hi, khi))
    return out


CLIENT_VERSIONS: Mapping[int, tuple[int, int]] = _client_versions()


def negotiate(broker: Mapping[int, tuple[int, int]]) -> dict[int, int]:
    """Per API both sides speak: the highest common version."""
    chosen: dict[int, int] = {}
    for key, (lo, hi) in CLIENT_VERSIONS.items():
        b = broker.get(key)
        if b is None:
            continue
        v = min(hi, b[1])
        if v >= max(lo, b[0]):
            chosen[key] = v
    return chosen


def pick_version(
    negotiated: Mapping[int, int], api_key: int, min_version: int = 0, max_version: int | None = None
) -> int:
    """The version to send ``api_key`` with, honouring a request's own bounds."""
    v = negotiated.get(api_key)
    if v is None:
        name = API_NAMES.get(api_key, str(api_key))
        raise UnsupportedVersionError(f"the broker does not support {name} in a version this client speaks")
    if max_version is not None:
        v = min(v, max_version)
    if v < min_version:
        name = API_NAMES.get(api_key, str(api_key))
        raise UnsupportedVersionError(f"{name} needs version >= {min_version}; the broker offers at most {v}")
    return v
