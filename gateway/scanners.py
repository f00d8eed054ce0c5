"""Scanners: a partition cursor, the merge of several partitions, and the registry of open ones.

A scanner keeps only a position, never a store iterator, between calls: an idle scanner pins
nothing in the store, and each read re-checks that its queue still exists, is enabled and was
not truncated. Merged scanners (queue, combined) return messages in MessageID order across
partitions (newest first when reversed), ties broken by partition id.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
import logging
import time
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gevent

from . import rowkey
from ._wirecheck import merge_rows
from .errors import InvalidArgument, Overloaded
from .ids import wall_clock_ms
from .rowkey import MessageId
from .store.base import PartitionStore, QueueMeta, Row

log = logging.getLogger(__name__)

MAX_SCANNER_ID = 2**31 - 1
MERGE_IN_C_UP_TO = 64  # partitions; beyond, walking every cursor per refill costs more


@dataclass(frozen=True)
class ScanSpec:
    """A validated TMessageScan. Ids are inclusive start / exclusive stop in scan order."""

    start: MessageId | None
    stop: MessageId | None
    topics: frozenset[bytes] | None
    reverse: bool
    caching: int


class PartitionCursor:
    """Reads one partition's key range in chunks, oldest first (newest first if reversed)."""

    __slots__ = ("_buffer", "_bytes", "_done", "_lower", "_upper", "chunk", "partition", "spec")

    def __init__(self, partition: int, spec: ScanSpec) -> None:
        self.partition = partition
        self.spec = spec
        self.chunk = spec.caching
        p = partition
        if spec.reverse:
            # start is the newest end (inclusive), stop the oldest (exclusive)
            self._upper = (
                rowkey.id_key(p, rowkey.next_id(spec.start))
                if spec.start and spec.start < rowkey.MAX_ID
                else rowkey.partition_end(p)
            )
            self._lower = (
                rowkey.id_key(p, rowkey.next_id(spec.stop))
                if spec.stop and spec.stop < rowkey.MAX_ID
                else rowkey.partition_start(p)
            )
            if spec.stop and spec.stop >= rowkey.MAX_ID:
                self._lower = self._upper
        else:
            self._lower = rowkey.id_key(p, spec.start) if spec.start else rowkey.partition_start(p)
            self._upper = rowkey.id_key(p, spec.stop) if spec.stop else rowkey.partition_end(p)
        self._buffer: deque[Row] = deque()
        self._bytes = 0  # at least the topic and value bytes buffered
        self._done = False

    def peek_ready(self) -> bool:
        return bool(self._buffer)

    def fill(self, store: PartitionStore, meta: QueueMeta, want: int) -> None:
        """Reads until at least ``want`` rows are buffered or the range is exhausted."""
        cutoff = rowkey.encode(self.partition, max(0, wall_clock_ms() - meta.ttl_seconds * 1000), 0)
        limit = max(want, self.chunk)
        while len(self._buffer) < want and not self._done:
            lower = max(self._lower, cutoff)
            result = store.scan(
                meta,
                self.partition,
                lower,
                self._upper,
                reverse=self.spec.reverse,
                topics=self.spec.topics,
                limit=limit - len(self._buffer),
            )
            self._buffer.extend(result.rows)
            self._bytes += result.size
            if result.resume_after is None:
                self._done = True
            elif self.spec.reverse:
                self._upper = result.resume_after
            else:
                self._lower = result.resume_after + b"\x00"  # keys are fixed-length
            if not self._done and len(self._buffer) < want:
                gevent.sleep(0)  # a long filtered scan must not starve other clients

    def take(self, n: int, max_bytes: int) -> list[Row]:
        """Up to ``n`` buffered rows, fewer once their bodies reach ``max_bytes``."""
        buf = self._buffer
        if self._bytes > max_bytes:  # rare: count row by row
            rows: list[Row] = []
            size = 0
            while buf and len(rows) < n and size < max_bytes:
                row = buf.popleft()
                size += len(row[2]) + len(row[3])
                rows.append(row)
            self._bytes = max(0, self._bytes - size)
            return rows
        if n >= len(buf):
            rows = list(buf)
            buf.clear()
            self._bytes = 0
            return rows
        return [buf.popleft() for _ in range(n)]  # what is left keeps the (upper) bound

    def pop(self) -> Row:
        return self._buffer.popleft()

    def take_run(
        self, bound: tuple[int, ...] | None, reverse: bool, n: int, max_bytes: int
    ) -> tuple[list[Row], int]:
        """The buffered rows that sort before ``bound`` (another partition's head, as
        :meth:`Scanner._order` makes it), at most ``n``, fewer once their bodies reach
        ``max_bytes``; at least the head, which the caller knows sorts first. Returns them
        and (at least) their body bytes."""
        buf = self._buffer
        limit = min(n, len(buf))
        p = self.partition
        if bound is not None and limit > 1:
            # the buffer is sorted: find where the run ends by bisection, not row by row
            if reverse:
                k = bisect.bisect_left(buf, bound, 1, limit, key=lambda r: (-r[0], -r[1], -p))
            else:
                k = bisect.bisect_left(buf, bound, 1, limit, key=lambda r: (r[0], r[1], p))
            limit = max(1, k)
        if self._bytes <= max_bytes:  # the usual case: no need to count bytes row by row
            if limit == len(buf):
                rows = list(buf)
                buf.clear()
                size, self._bytes = self._bytes, 0
                return rows, size
            rows = [buf.popleft() for _ in range(limit)]
            size = -(-self._bytes * limit // (limit + len(buf)))  # its share, rounded up
            self._bytes -= size
            return rows, size
        rows = []
        size = 0
        while buf and len(rows) < limit and size < max_bytes:
            row = buf.popleft()
            rows.append(row)
            size += len(row[2]) + len(row[3])
        self._bytes = max(0, self._bytes - size)
        return rows, size

    def drop(self, snapshot: list[Row], k: int) -> None:
        """Forgets the first ``k`` rows; ``snapshot`` is ``list()`` of the buffer as it is."""
        total = len(snapshot)
        if k >= total:
            self._buffer.clear()
            self._bytes = 0
            return
        self._buffer = deque(snapshot[k:])
        self._bytes -= self._bytes * k // total

    def head(self) -> Row:
        return self._buffer[0]


class MessageRows(NamedTuple):
    """What a scanner read: rows, and their partition (one for all, or one per row).

    The Thrift boundary turns it into ``list<TMessage>``: encoded straight from the rows on
    the binary protocol (:func:`gateway._wirecheck.encode_messages_reply`), through TMessage
    objects otherwise (:meth:`to_messages`).
    """

    partitions: int | list[int]
    rows: list[Row]

    def to_messages(self, thrift: Any) -> list[Any]:
        message, mid = thrift.TMessage, thrift.TMessageID
        parts = self.partitions
        if isinstance(parts, int):
            return [message(mid(r[0], r[1]), parts, r[2], r[3]) for r in self.rows]
        return [
            message(mid(r[0], r[1]), p, r[2], r[3]) for p, r in zip(parts, self.rows, strict=True)
        ]


class Scanner:
    """An open scanner over one or more partitions of a queue."""

    def __init__(
        self,
        store: PartitionStore,
        meta: QueueMeta,
        partitions: Sequence[int],
        spec: ScanSpec,
    ) -> None:
        self.store = store
        self.queue = meta.name
        self.generation = meta.generation
        self.spec = spec
        self.cursors = [PartitionCursor(p, spec) for p in partitions]
        self.last_used = time.monotonic()
        self.busy = False

    def _meta(self) -> QueueMeta:
        meta = self.store.get_queue(self.queue)
        if meta is None:
            raise InvalidArgument("id", f"the scanner's queue '{self.queue}' was deleted")
        if meta.generation != self.generation:
            raise InvalidArgument("id", f"the scanner's queue '{self.queue}' was truncated")
        if not meta.enabled:
            raise InvalidArgument("id", f"the scanner's queue '{self.queue}' is disabled")
        return meta

    def next_rows(self, n: int, max_bytes: int) -> MessageRows:
        """Up to ``n`` rows (fewer once ``max_bytes`` of bodies are reached); none at the end."""
        meta = self._meta()
        if len(self.cursors) == 1:
            cursor = self.cursors[0]
            cursor.fill(self.store, meta, n)
            return MessageRows(cursor.partition, cursor.take(n, max_bytes))
        return self._merge(meta, n, max_bytes)

    def _merge(self, meta: QueueMeta, n: int, max_bytes: int) -> MessageRows:
        # Every cursor that is not exhausted must have a head row before we can pick the
        # smallest; refill a cursor only when it has run dry.
        per_cursor = max(1, min(self.spec.caching, n))
        for index, cursor in enumerate(self.cursors):
            if index % 512 == 511:
                gevent.sleep(0)  # a queue may have 32767 partitions; let others in meanwhile
            if not cursor.peek_ready():
                cursor.fill(self.store, meta, per_cursor)
        if len(self.cursors) > MERGE_IN_C_UP_TO:
            return self._merge_heap(meta, n, max_bytes, per_cursor, [], [], 0)
        # A producer writing several partitions within one millisecond interleaves them
        # message by message: merged in C (gateway/_wirecheck.c, merge_rows), a row costs
        # tens of nanoseconds instead of a heap step in Python.
        partitions: list[int] = []
        rows: list[Row] = []
        size = 0
        while len(rows) < n and size < max_bytes:
            live = [c for c in self.cursors if c.peek_ready()]
            if not live:
                break
            buffers = [list(c._buffer) for c in live]
            try:
                got, parts, taken, got_size = merge_rows(
                    buffers, [not c._done for c in live], [c.partition for c in live],
                    n - len(rows), max_bytes - size, self.spec.reverse,
                )  # fmt: skip
            except TypeError:  # rows of another shape (a store's own tuple type): in Python
                return self._merge_heap(meta, n, max_bytes, per_cursor, partitions, rows, size)
            rows += got
            partitions += parts
            size += got_size
            refilled = False
            for cursor, buffer, k in zip(live, buffers, taken, strict=True):
                if k:
                    cursor.drop(buffer, k)
                if not cursor.peek_ready() and not cursor._done:
                    cursor.fill(self.store, meta, per_cursor)
                    refilled = True
            if not refilled:
                break  # n rows, or max_bytes, or every partition read to its end
        return MessageRows(partitions, rows)

    def _merge_heap(
        self,
        meta: QueueMeta,
        n: int,
        max_bytes: int,
        per_cursor: int,
        partitions: list[int],
        rows: list[Row],
        size: int,
    ) -> MessageRows:
        """The merge in Python, from the cursors' current heads (after ``rows``): for very
        many partitions (a heap step per run beats walking every cursor per refill), and
        for rows that are not plain tuples."""
        reverse = self.spec.reverse
        heap = [
            self._order(c.head(), c.partition, index, reverse)
            for index, c in enumerate(self.cursors)
            if c.peek_ready()
        ]
        heapq.heapify(heap)
        while heap and len(rows) < n and size < max_bytes:
            *_, index = heapq.heappop(heap)
            cursor = self.cursors[index]
            # Partitions are mostly written in runs (a put is one partition's batch): take the
            # whole run that sorts before the next partition's head, not one row per heap step.
            run, run_bytes = cursor.take_run(heap[0] if heap else None, reverse,
                                             n - len(rows), max_bytes - size)  # fmt: skip
            partitions += itertools.repeat(cursor.partition, len(run))
            rows += run
            size += run_bytes
            if not cursor.peek_ready():
                cursor.fill(self.store, meta, per_cursor)
            if cursor.peek_ready():
                heapq.heappush(heap, self._order(cursor.head(), cursor.partition, index, reverse))
        return MessageRows(partitions, rows)

    @staticmethod
    def _order(row: Row, partition: int, index: int, reverse: bool) -> tuple[int, int, int, int]:
        if reverse:
            return (-row[0], -row[1], -partition, index)
        return (row[0], row[1], partition, index)


class ScannerRegistry:
    """Open scanners by id. Idle ones expire; the number open at once is bounded."""

    def __init__(self, *, idle_timeout: float = 60.0, max_open: int = 10_000) -> None:
        if idle_timeout <= 0:
            raise ValueError("'idle_timeout' must be > 0 seconds")
        if max_open < 1:
            raise ValueError("'max_open' must be >= 1")
        self.idle_timeout = idle_timeout
        self.max_open = max_open
        self._open: dict[int, Scanner] = {}
        # Recently finished or expired ids, so errors can say what happened to them.
        self._gone: OrderedDict[int, str] = OrderedDict()
        self._ids = itertools.count(1)
        self._reaper: gevent.Greenlet | None = None

    def start(self) -> None:
        self._reaper = gevent.spawn(self._reap_loop)

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.kill()
        self._open.clear()

    def __len__(self) -> int:
        return len(self._open)

    def add(self, scanner: Scanner) -> int:
        if len(self._open) >= self.max_open:
            self.expire_idle()
            if len(self._open) >= self.max_open:
                raise Overloaded(
                    f"too many open scanners ({self.max_open}); close the ones you no longer use"
                )
        while True:
            sid = next(self._ids)
            if sid > MAX_SCANNER_ID:
                self._ids = itertools.count(1)
                continue
            if sid not in self._open:
                break
        self._open[sid] = scanner
        self._gone.pop(sid, None)
        return sid

    def get(self, sid: Any) -> Scanner:
        scanner = self._open.get(sid) if isinstance(sid, int) else None
        if scanner is None:
            why = self._gone.get(sid) if isinstance(sid, int) else None
            raise InvalidArgument("id", f"no open scanner {sid!r}" + (f" ({why})" if why else ""))
        scanner.last_used = time.monotonic()
        return scanner

    def finish(self, sid: int, why: str) -> None:
        if self._open.pop(sid, None) is not None:
            self._gone[sid] = why
            while len(self._gone) > 10_000:
                self._gone.popitem(last=False)

    def close(self, sid: Any) -> None:
        if isinstance(sid, int) and sid in self._open:
            self.finish(sid, "closed")
        elif not (isinstance(sid, int) and self._gone.get(sid) == "it reached its end"):
            # Closing a scanner that ran to its end is harmless: clients are told to close.
            self.get(sid)

    def expire_idle(self) -> int:
        deadline = time.monotonic() - self.idle_timeout
        stale = [sid for sid, s in self._open.items() if s.last_used < deadline and not s.busy]
        for sid in stale:
            self.finish(sid, f"expired after {self.idle_timeout:g} s idle")
        return len(stale)

    def _reap_loop(self) -> None:
        while True:
            gevent.sleep(min(5.0, self.idle_timeout / 2))
            expired = self.expire_idle()
            if expired:
                log.info("expired %d idle scanner(s)", expired)
