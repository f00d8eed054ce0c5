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

from ..errors import HQueueError
from ..rowkey import MAX_ID, MessageId, next_id
from ..store.base import PartitionReader, PartitionStore, Row

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
        # the last row buffered: where a new reader starts (after a truncate, say)
        self._after = None if checkpoint is None else MessageId(*checkpoint)
        self._stop: MessageId | None = None
        self._reader: PartitionReader | None = None
        self._generation = -1  # of the queue the reader reads

    def stop_after(self, last: Id) -> None:
        """Reads nothing after MessageID ``last`` (a bounded replay); before ``run``."""
        last = MessageId(*last)
        self._stop = None if last >= MAX_ID else next_id(last)

    def _close_reader(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None

    def run(self) -> None:
        try:
            self._run()
        finally:
            self._close_reader()

    def _run(self) -> None:
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
            reader = self._reader
            if reader is None or self._generation != meta.generation:
                self._close_reader()
                reader = self._reader = self.store.reader(
                    meta, self.partition, self._after, self._stop,
                    reverse=False, topics=self.topics,
                )  # fmt: skip
                self._generation = meta.generation
            try:
                result = reader.read(min(self.chunk, space))
            except HQueueError as exc:  # truncated meanwhile, or the store failing
                log.warning("scanning %s/%d failed: %s; retrying", self.queue, self.partition, exc)
                self._close_reader()
                self.wake.wait(1.0)
                continue
            if result.rows:
                self.buffer.add(result.rows, result.size)
                last = result.rows[-1]
                self._after = MessageId(last[0], last[1])
            if not result.done:
                gevent.sleep(0)  # more to read: let the event loop breathe between chunks
                continue
            # caught up: sleep until a put to this partition (or the safety recheck)
            self.wake.wait(self.idle_recheck)
