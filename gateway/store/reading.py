"""What the three stores' partition readers share: the key range still to read.

A :class:`KeyRangeReader` turns its MessageID positions into the row-key range it has left,
clamps it to the queue's TTL on every read, and moves on by what the store examined: callers
see MessageIDs only, and a store that lays rows out differently (several messages to a record)
keeps its own layout behind ``_scan``.
"""

from __future__ import annotations

import abc
from collections.abc import Collection

from .. import rowkey
from ..ids import wall_clock_ms
from ..rowkey import MessageId
from .base import EncodedRead, PartitionReader, QueueMeta, ReadResult, Row


class KeyRangeReader(PartitionReader):
    """A reader over ``[lower, upper)`` of one partition's row keys; stores implement
    ``_scan`` (one bounded read of the range) and ``_release`` (drop what it holds)."""

    def __init__(
        self,
        queue: QueueMeta,
        partition: int,
        after: MessageId | None,
        stop: MessageId | None,
        *,
        reverse: bool,
        topics: Collection[bytes] | None,
    ) -> None:
        self.queue = queue
        self.partition = partition
        self.reverse = reverse
        if topics is not None and not isinstance(topics, frozenset):
            topics = frozenset(topics)
        self.topics = topics
        p = partition
        after = None if after is None else MessageId(*after)
        stop = None if stop is None else MessageId(*stop)
        if reverse:  # rows below ``after`` and above ``stop``
            self._upper = rowkey.partition_end(p) if after is None else _key_at(p, after)
            self._lower = rowkey.partition_start(p) if stop is None else _key_after(p, stop)
        else:  # rows above ``after`` and below ``stop``
            self._lower = rowkey.partition_start(p) if after is None else _key_after(p, after)
            self._upper = rowkey.partition_end(p) if stop is None else _key_at(p, stop)
        self.closed = False

    def read(self, limit: int, max_bytes: int | None = None) -> ReadResult:
        self._check_read(limit)
        lower = self._cutoff_lower()
        rows, size, stop = self._scan(lower, self._upper, limit, max_bytes)
        last = rowkey.encode(self.partition, rows[-1][0], rows[-1][1]) if rows else None
        self._advance(lower, stop, last)
        return ReadResult(rows, size, stop is None)

    def read_encoded(
        self,
        out: bytearray,
        limit: int,
        max_bytes: int | None = None,
        marks: bytearray | None = None,
    ) -> EncodedRead | None:
        self._check_read(limit)
        lower = self._cutoff_lower()
        got = self._scan_into(lower, self._upper, limit, max_bytes, out, marks)
        if got is None:
            return None
        count, size, bodies, stop, last_key = got
        last = None if last_key is None else MessageId(*rowkey.decode(last_key)[1:])
        self._advance(lower, stop, last_key)
        return EncodedRead(count, size, bodies, last, stop is None)

    def _check_read(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("'limit' must be >= 1")
        if self.closed:
            raise ValueError("the reader is closed")

    def _cutoff_lower(self) -> bytes:
        cutoff = rowkey.encode(
            self.partition, max(0, wall_clock_ms() - self.queue.ttl_seconds * 1000), 0
        )
        return self._lower if self._lower >= cutoff else cutoff  # expired rows never show

    def _advance(self, lower: bytes, stop: bytes | None, last: bytes | None) -> None:
        """Moves the range on after a read from ``lower`` that stopped at ``stop`` (None: the
        range is exhausted as far as it is visible now) having returned up to ``last``."""
        if stop is None:
            if self.reverse:
                self._upper = lower  # older rows never come: done for good
            elif last is not None:
                self._lower = rowkey.key_after(last)
            else:
                self._lower = lower
        elif self.reverse:
            self._upper = stop
        else:
            self._lower = rowkey.key_after(stop)

    def close(self) -> None:
        self.closed = True
        self._release()

    def _scan_into(
        self,
        lower: bytes,
        upper: bytes,
        limit: int,
        max_bytes: int | None,
        sink: list[Row] | bytearray,
        marks: bytearray | None = None,
    ) -> tuple[int, int, int, bytes | None, bytes | None] | None:
        """Stores that can append TMessages to a bytearray (``read_encoded``, marking the
        page's segments in ``marks`` when given) override this: (messages, size, bodies'
        bytes, the key it stopped at or None, the last message's key or None). None: they
        cannot."""
        return None

    @abc.abstractmethod
    def _scan(
        self, lower: bytes, upper: bytes, limit: int, max_bytes: int | None
    ) -> tuple[list[Row], int, bytes | None]:
        """Up to ``limit`` rows of ``lower <= key < upper`` in scan order (fewer once they
        hold ``max_bytes``), their size, and the last key examined, or None when the range
        is exhausted. Raises InvalidArgument when the queue's generation is gone."""

    def _release(self) -> None:
        """Drops the store resources the reader holds (it reopens them when read again)."""


def _key_at(partition: int, mid: MessageId) -> bytes:
    return rowkey.id_key(partition, mid)


def _key_after(partition: int, mid: MessageId) -> bytes:
    """The first key after ``mid``'s (past the partition for the largest id)."""
    if mid >= rowkey.MAX_ID:
        return rowkey.partition_end(partition)
    return rowkey.id_key(partition, rowkey.next_id(mid))


def after_for_start(start: MessageId | None, reverse: bool) -> MessageId | None:
    """The ``after`` of a reader whose first row may be ``start`` (inclusive), in scan order;
    None for no start."""
    if start is None:
        return None
    start = MessageId(*start)
    if reverse:
        return None if start >= rowkey.MAX_ID else rowkey.next_id(start)
    return rowkey.previous_id(start)
