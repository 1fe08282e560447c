"""The dead-letter row layout, shared by the dead letters (:mod:`.deadletter`) and the Kafka sink's
transactional dead-letter topic (:mod:`.sinks.kafka`): both import this module, neither the other.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["DEAD_LETTER_COLUMNS", "normalise_rejects"]

#: Columns of the dead-letter table.
DEAD_LETTER_COLUMNS = ("topic", "partition", "offset", "timestamp", "key", "value", "error")


def normalise_rejects(rejected: Any) -> Any:
    """The dead-letter columns (missing optional ones as nulls) in a fixed order."""
    n = rejected.num_rows
    types = {
        "topic": pa.string(),
        "partition": pa.int32(),
        "offset": pa.int64(),
        "timestamp": pa.timestamp("ms", tz="UTC"),
        "key": pa.binary(),
        "value": pa.binary(),
        "error": pa.string(),
    }
    arrays = []
    for name in DEAD_LETTER_COLUMNS:
        if name in rejected.column_names:
            arrays.append(rejected.column(name).cast(types[name]))
        else:
            arrays.append(pa.nulls(n, types[name]))
    return pa.table(arrays, names=list(DEAD_LETTER_COLUMNS))
