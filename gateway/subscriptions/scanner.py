"""MessageScanner (seed 3.5.3): reads a partition from a checkpoint into a bounded buffer.

The scanner waits while the buffer is full (that is the back-pressure a slow subscriber puts
on the gateway: memory per worker never exceeds the buffer's bounds plus one batch in flight)
and sleeps while the partition has nothing new, until a put to that partition wakes it. A put
sets the wake-up event after the store acknowledged it; the scanner clears the event *before*
it scans, so a put that lands during a scan is never missed.
"""

from __future__ import annotations

import logging
from collections import deque

import gevent
import gevent.event

from .. import rowkey
from ..errors import HQueueError
from ..ids import wall_clock_ms
from ..store.base import PartitionStore, Row

log = logging.getLogger(__name__)

Id = tuple[int, int]


class MessageBuffer:
    """Rows waiting to be sent, bounded by count and by bytes (topics + bodies)."""

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        if max_messages < 1 or max_bytes < 1:
            raise ValueError("'max_messages' and 'max_bytes' must be >= 1")
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self._rows: deque[Row] = deque()
        self.bytes = 0
        self._not_empty = gevent.event.Event()
        self._not_full = gevent.event.Event()
        self._not_full.set()

    def __len__(self) -> int:
        return len(self._rows)

    @property
    def not_empty(self) -> gevent.event.Event:
        """Set while rows are waiting (a long poll waits on it)."""
        return self._not_empty

    def space(self) -> int:
        """How many more rows may be added (0 when full by count or by bytes)."""
        if self.bytes >= self.max_bytes:
            return 0
        return max(0, self.max_messages - len(self._rows))

    def wait_for_space(self, timeout: float | None = None) -> bool:
        return self._not_full.wait(timeout)

    def add(self, rows: list[Row], size: int) -> None:
        self._rows.extend(rows)
        self.bytes += size
        if self.space() == 0:
            self._not_full.clear()
        if self._rows:
            self._not_empty.set()

    def take(self, max_messages: int, max_bytes: int) -> list[Row]:
        """The oldest rows, at least one, at most ``max_messages`` and (unless the first row
        alone is larger) ``max_bytes``; waits while the buffer is empty."""
        while not self._rows:
            self._not_empty.clear()
            self._not_empty.wait()
        rows = self._rows
        out: list[Row] = []
        size = 0
        while rows and len(out) < max_messages:
            row = rows[0]
            n = len(row[2]) + len(row[3])
            if out and size + n > max_bytes:
                break
            out.append(rows.popleft())
            size += n
        self.bytes = max(0, self.bytes - size)
        if not rows:
            self._not_empty.clear()
        if self.space() > 0:
            self._not_full.set()
        return out


class MessageScanner:
    """Fills ``buffer`` with the rows of one partition after ``checkpoint``, in MessageID
    order, keeping only ``topics`` (None: all). Runs until killed or the queue is deleted."""

    def __init__(
        self,
        store: PartitionStore,
        queue: str,
        partition: int,
        checkpoint: Id | None,
        topics: frozenset[bytes] | None,
        buffer: MessageBuffer,
        *,
        chunk: int = 1000,
        idle_recheck: float = 5.0,
    ) -> None:
        self.store = store
        self.queue = queue
        self.partition = partition
        self.topics = topics
        self.buffer = buffer
        self.chunk = chunk
        self.idle_recheck = idle_recheck  # seconds; a safety net, puts wake the scanner at once
        self.wake = gevent.event.Event()
        p = partition
        if checkpoint is None:
            self._lower = rowkey.partition_start(p)
        else:
            self._lower = rowkey.id_key(p, rowkey.next_id(rowkey.MessageId(*checkpoint)))
        self._upper = rowkey.partition_end(p)

    def stop_after(self, last: Id) -> None:
        """Reads nothing after MessageID ``last`` (a bounded replay)."""
        self._upper = rowkey.id_key(self.partition, rowkey.next_id(rowkey.MessageId(*last)))

    def run(self) -> None:
        while True:
            self.wake.clear()
            meta = self.store.get_queue(self.queue)
            if meta is None:
                log.info("queue %s was deleted; its scanner for partition %d ends",
                         self.queue, self.partition)  # fmt: skip
                return
            if not meta.enabled:
                self.wake.wait(1.0)
                continue
            space = self.buffer.space()
            if space == 0:
                self.buffer.wait_for_space()
                continue
            cutoff = rowkey.encode(
                self.partition, max(0, wall_clock_ms() - meta.ttl_seconds * 1000), 0
            )
            try:
                result = self.store.scan(
                    meta,
                    self.partition,
                    max(self._lower, cutoff),
                    self._upper,
                    reverse=False,
                    topics=self.topics,
                    limit=min(self.chunk, space),
                )
            except HQueueError as exc:  # truncated meanwhile, or the store failing
                log.warning("scanning %s/%d failed: %s; retrying", self.queue, self.partition, exc)
                self.wake.wait(1.0)
                continue
            if result.rows:
                self.buffer.add(result.rows, result.size)
                ts, seq = result.rows[-1][0], result.rows[-1][1]
                self._lower = rowkey.id_key(
                    self.partition, rowkey.next_id(rowkey.MessageId(ts, seq))
                )
            if result.resume_after is not None:
                self._lower = max(self._lower, result.resume_after + b"\x00")
                gevent.sleep(0)  # more to read: let the event loop breathe between chunks
                continue
            # caught up: sleep until a put to this partition (or the safety recheck)
            self.wake.wait(self.idle_recheck)
