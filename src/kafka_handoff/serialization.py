"""The context a key/value serializer or deserializer may receive, under confluent-kafka's names.

``key.serializer``/``value.serializer`` (producer) and ``key.deserializer``/``value.deserializer``
(consumer, share consumer, their asyncio twins) are callables.  A callable of one argument gets the
value only (``json.dumps``, ``bytes.decode``, ``lambda v: ...``).  A callable that also takes a context --
its second positional parameter has no default, or is named ``ctx``/``context`` (the schema registry serdes,
confluent-kafka's ``Serializer`` objects) -- is called as ``fn(value, ctx)`` with a
:class:`SerializationContext`: the topic, which field (:class:`MessageField`), the partition when known
and the record's headers.

On the producer the headers are a mutable list: a serializer may append ``(name, bytes)`` pairs (the
schema registry serdes' header-based schema id) and they are sent with the record.  On the consumer they
are the record's headers (a list).  Which form a callable takes is decided once, when the client is built:
the per-record cost of a one-argument callable is unchanged.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

__all__ = ["MessageField", "SerializationContext", "takes_context"]


class MessageField:
    """Which part of a record a (de)serializer works on (confluent-kafka's ``MessageField``)."""

    NONE = "none"
    KEY = "key"
    VALUE = "value"


class SerializationContext:
    """What a (de)serializer knows about the record: ``topic``, ``field`` (:class:`MessageField`),
    ``headers`` (a list of ``(name, value)`` pairs; mutable on the producer, whose serializers may add
    headers) and ``partition`` (the consumer's record's partition; on the producer the partition passed to
    ``send()``, else ``None``: it is chosen after serializing the key).  Constructed as confluent-kafka's:
    ``SerializationContext(topic, field, headers=None)``."""

    __slots__ = ("field", "headers", "partition", "topic")

    def __init__(
        self,
        topic: str,
        field: str,
        headers: list[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
    ) -> None:
        self.topic = topic
        self.field = field
        self.headers = headers
        self.partition = partition

    def __repr__(self) -> str:
        names = [h[0] for h in self.headers] if self.headers else []
        return (
            f"SerializationContext(topic={self.topic!r}, field={self.field!r}, partition={self.partition!r}, "
            f"headers={names!r})"
        )


_CONTEXT_NAMES = frozenset({"ctx", "context"})
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def takes_context(fn: Callable[..., Any] | None) -> bool:
    """Whether ``fn`` is called as ``fn(value, ctx)`` rather than ``fn(value)``: its second positional
    parameter is required, or is named ``ctx``/``context``.  ``*args`` alone does not count, nor an optional
    second parameter of another name (``str.encode``'s ``encoding``, ``bytes.decode``'s), so existing
    one-argument serializers keep working.  Decided once per client, not per record."""
    if fn is None:
        return False
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature (e.g. ``str``): one argument
        return False
    positional = [p for p in sig.parameters.values() if p.kind in _POSITIONAL]
    if len(positional) < 2:
        return False
    second = positional[1]
    return second.default is inspect.Parameter.empty or second.name in _CONTEXT_NAMES
