"""Incremental fetch sessions (KIP-227): one per broker, sans-I/O (Java's ``FetchSessionHandler``).

A full Fetch names every partition the consumer wants from a broker; the broker answers with a session id.
Later Fetches of the session (each with the next *session epoch*) name only the partitions whose fetch
offset or leader epoch changed since the previous request, and ``forgotten_topics_data`` for the ones the
consumer no longer fetches from that broker; the broker keeps the rest.  A consumer with thousands of idle
partitions thus sends a few bytes per fetch instead of a few bytes per partition.

Session ids and epochs on the wire:

* ``session_id=0, epoch=-1``: a full fetch outside any session (brokers before v7, or a session refused);
* ``session_id=0 or S, epoch=0``: a full fetch that (closes session ``S`` and) asks for a new session;
* ``session_id=S, epoch=n>0``: an incremental fetch of session ``S``;
* ``session_id=S, epoch=-1``: closes session ``S``.

Any doubt -- FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH, another error, a disconnect or a
timeout, a new assignment or a leader change -- makes the next request a full one.
"""

from __future__ import annotations

from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from kafka_handoff.types import TopicPartition

__all__ = ["FINAL_EPOCH", "INITIAL_EPOCH", "FetchSession", "PartitionFetch", "SessionRequest"]

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
INVALID_SESSION_ID = 0
_MAX_EPOCH = 2**31 - 1

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71


@dataclass(frozen=True, slots=True)
class PartitionFetch:
    """What a Fetch says about one partition (the other fields are the same for every request)."""

    fetch_offset: int
    current_leader_epoch: int


@dataclass(frozen=True, slots=True)
class SessionRequest:
    """One Fetch as the session builds it."""

    session_id: int
    epoch: int
    partitions: dict[TopicPartition, PartitionFetch]
    """The partitions the request names: all of them in a full fetch, the changed ones otherwise."""
    forgotten: tuple[TopicPartition, ...]
    wanted: dict[TopicPartition, PartitionFetch]
    """Every partition fetched from the broker (the session's content after this request)."""
    generation: int = 0
    """The session's :attr:`FetchSession.generation` when this request was built."""

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSession:
    """The fetch session with one broker: what it holds and what the next request must say."""

    def __init__(self, node: int) -> None:
        self.node = node
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TopicPartition, PartitionFetch] = {}
        """The session's partitions on the broker, as of the last request sent."""
        self.use_ids: bool | None = None
        self.generation = 0
        """Bumped by every :meth:`reset`: a response to a request built before it must not end the reset."""
        self.full_fetches = 0
        self.incremental_fetches = 0

    def build(self, wanted: dict[TopicPartition, PartitionFetch], *, use_ids: bool) -> SessionRequest:
        """The next request for ``wanted`` (every partition to fetch from this broker now)."""
        if self.use_ids is not None and use_ids != self.use_ids:
            self.reset()  # topic ids and names cannot be mixed within a session
        self.use_ids = use_ids
        if self.epoch == INITIAL_EPOCH:
            request = SessionRequest(self.session_id, INITIAL_EPOCH, wanted, (), wanted, self.generation)
            self.full_fetches += 1
        else:
            known = self.partitions
            changed = {tp: data for tp, data in wanted.items() if known.get(tp) != data}
            forgotten = tuple(tp for tp in known if tp not in wanted)
            request = SessionRequest(self.session_id, self.epoch, changed, forgotten, wanted, self.generation)
            self.incremental_fetches += 1
        self.partitions = dict(wanted)
        return request

    def on_response(self, request: SessionRequest, error_code: int, response_session_id: int) -> None:
        """Apply a Fetch response's top-level outcome."""
        if request.generation != self.generation:
            # Reset while the request was in flight (a new assignment, a leader change): the next request
            # stays a full one.  Taking this answer's epoch would make it an incremental one from an empty
            # session -- with the wrong epoch after an incremental request (one INVALID_FETCH_SESSION_EPOCH
            # round trip), and after a full one never forgetting the partitions that request named.  The
            # session the broker now holds (none: 0) is remembered so that the full fetch closes it.
            if error_code == ErrorCode.none:
                self.session_id = response_session_id
            elif error_code == FETCH_SESSION_ID_NOT_FOUND:
                self.session_id = INVALID_SESSION_ID
            return
        if error_code == FETCH_SESSION_ID_NOT_FOUND:
            self._new_session()
        elif error_code != ErrorCode.none:
            # INVALID_FETCH_SESSION_EPOCH or anything else: close this session, start a new one.
            self.reset()
        elif response_session_id == INVALID_SESSION_ID:
            # No session (the broker's cache is full), or the broker closed it: next request is full again.
            self._new_session()
        elif request.full:
            self.session_id = response_session_id
            self.epoch = 1
        elif response_session_id != self.session_id:
            self.reset()  # not the session we spoke to: start over
        else:
            self.epoch = 1 if self.epoch >= _MAX_EPOCH else self.epoch + 1

    def reset(self) -> None:
        """The next request is a full one (closing the current session on the broker, if any)."""
        self.epoch = INITIAL_EPOCH
        self.partitions = {}
        self.generation += 1

    def _new_session(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.reset()

    def close(self) -> SessionRequest | None:
        """The request that closes the session on the broker (None when there is none)."""
        if self.session_id == INVALID_SESSION_ID:
            return None
        request = SessionRequest(self.session_id, FINAL_EPOCH, {}, (), {})
        self._new_session()
        return request
