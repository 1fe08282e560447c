"""asyncio clients: :class:`AsyncConsumer`, :class:`AsyncProducer`, :class:`AsyncAdminClient`.

They run on the same core as the synchronous clients (one network thread per client); the network thread's
futures are bridged to the event loop with ``loop.call_soon_threadsafe``.  Each client belongs to the loop
it was created on and raises :class:`WrongEventLoopError` when used from another loop or thread.
"""

from kafka_handoff.aio._bridge import WrongEventLoopError
from kafka_handoff.aio.admin import AsyncAdminClient
from kafka_handoff.aio.consumer import AsyncConsumer
from kafka_handoff.aio.listener import (
    AsyncRebalanceConsumer,
    AsyncRebalanceListener,
    AsyncRebalanceListenerBase,
)
from kafka_handoff.aio.producer import AsyncProducer

__all__ = [
    "AsyncAdminClient",
    "AsyncConsumer",
    "AsyncProducer",
    "AsyncRebalanceConsumer",
    "AsyncRebalanceListener",
    "AsyncRebalanceListenerBase",
    "WrongEventLoopError",
]
