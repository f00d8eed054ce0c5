"""MessageID allocation: the single writer of a partition hands out strictly increasing ids.

HQueue did this in a region-server coprocessor; here the gateway that owns the partition does
it. The allocator never trusts the wall clock to move forward: when the clock steps back, or
more than 32768 ids are needed in one millisecond, it keeps counting from the last id it gave
out (borrowing milliseconds from the future) so that ids only ever increase. After a restart it
is seeded with the newest stored id of the partition.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .rowkey import MAX_SEQUENCE, MessageId

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class PartitionIdAllocator:
    """Ids for one partition. Not thread-safe; the gateway's event loop is its only caller."""

    __slots__ = ("_clock", "_last_seq", "_last_ts")

    def __init__(self, last: MessageId | None, clock: Clock = wall_clock_ms) -> None:
        self._clock = clock
        self._last_ts = last.timestamp if last else -1
        self._last_seq = last.sequence if last else MAX_SEQUENCE

    @property
    def last(self) -> MessageId | None:
        return MessageId(self._last_ts, self._last_seq) if self._last_ts >= 0 else None

    def allocate(self, count: int) -> tuple[int, int]:
        """Reserves ``count`` consecutive ids; returns (timestamp, first sequence).

        The ids are (ts, s), (ts, s+1), ... carrying into ts+1, ts+2 ... after sequence 32767;
        :func:`gateway.rowkey.consecutive_ids` lists them. Allocating a whole batch at once
        keeps the per-message cost of a batched put to a few additions.
        """
        now = self._clock()
        if now > self._last_ts:
            ts, seq = now, 0
        elif self._last_seq < MAX_SEQUENCE:
            ts, seq = self._last_ts, self._last_seq + 1
        else:
            ts, seq = self._last_ts + 1, 0
        end = seq + count - 1  # the last id, as an offset of sequences from (ts, 0)
        self._last_ts = ts + end // (MAX_SEQUENCE + 1)
        self._last_seq = end % (MAX_SEQUENCE + 1)
        return ts, seq
