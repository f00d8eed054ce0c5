"""MessageID allocation: the single writer of a partition hands out strictly increasing ids.

HQueue did this in a region-server coprocessor; here the gateway that owns the partition does
it. The allocator never trusts the wall clock to move forward: when the clock steps back, or
more than 32768 ids are needed in one millisecond, it keeps counting from the last id it gave
out (borrowing milliseconds from the future) so that ids only ever increase. After a restart it
is seeded with the newest stored id of the partition.

A queue's partitions on one gateway share where the sequence numbers of the current millisecond
have got to (:class:`QueueSequence`): a put to partition 1 in the millisecond a put to partition
0 took sequences 0-999 gets 1000-1999, not 0-999 again. A merged scan, which interleaves
partitions in (timestamp, sequence, partition) order, then copies each put's messages as one
run instead of alternating partitions message by message (its merge steps were about a tenth of
the gateway's CPU on an 8-partition read). Ids stay per partition: the sharing only spaces them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from .rowkey import MAX_SEQUENCE, MessageId

Clock = Callable[[], int]


def wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


class QueueSequence:
    """The newest id handed out in any partition of one queue on this gateway (see the module's
    docstring). Not thread-safe, as the allocators that share it."""

    __slots__ = ("seq", "ts")

    def __init__(self) -> None:
        self.ts = -1
        self.seq = MAX_SEQUENCE


class PartitionIdAllocator:
    """Ids for one partition. Not thread-safe; the gateway's event loop is its only caller.
    ``shared``: the queue's :class:`QueueSequence`, whose millisecond's sequences it goes on
    after (None: the partition counts alone)."""

    __slots__ = ("_clock", "_last_seq", "_last_ts", "_shared")

    def __init__(
        self,
        last: MessageId | None,
        clock: Clock = wall_clock_ms,
        shared: QueueSequence | None = None,
    ) -> None:
        self._clock = clock
        self._last_ts = last.timestamp if last else -1
        self._last_seq = last.sequence if last else MAX_SEQUENCE
        self._shared = shared

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
        shared = self._shared
        if shared is not None and ts == shared.ts and seq <= shared.seq:
            # another partition of the queue took sequences of this millisecond: after them
            if shared.seq < MAX_SEQUENCE:
                seq = shared.seq + 1
            else:
                ts, seq = ts + 1, 0
        end = seq + count - 1  # the last id, as an offset of sequences from (ts, 0)
        last_ts = self._last_ts = ts + end // (MAX_SEQUENCE + 1)
        last_seq = self._last_seq = end % (MAX_SEQUENCE + 1)
        if shared is not None and (last_ts, last_seq) > (shared.ts, shared.seq):
            shared.ts, shared.seq = last_ts, last_seq
        return ts, seq
