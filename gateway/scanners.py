"""Scanners: the merge of several partitions' cursors, and the registry of open scanners.

A scanner reads each partition through a cursor (gateway/cursor.py) and its store reader, which
remembers its position and may keep a store iterator or HBase scanner between calls; the store
drops those when idle, so an idle scanner pins nothing for long. Each read re-checks that its
queue still exists, is enabled and was not truncated. Merged scanners (queue, combined) return
messages in MessageID order across partitions (newest first when reversed), ties broken by
partition id.
"""

from __future__ import annotations

import heapq
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import gevent

from . import peer
from .cursor import PartitionCursor, ScanMeter, ScanSpec
from .errors import InvalidArgument, Overloaded
from .fast import merge_encoded, merge_rows
from .scanrows import EncodedRows, MessageRows
from .store.base import PartitionStore, QueueMeta, Row

# what scanners' users import from here
__all__ = ["EncodedRows", "MessageRows", "ScanMeter", "ScanSpec", "Scanner", "ScannerRegistry"]

log = logging.getLogger(__name__)

MAX_SCANNER_ID = 2**31 - 1
MERGE_IN_C_UP_TO = 64  # partitions; beyond, walking every cursor per refill costs more
# A merged reply's run of this many bytes or more is sent from its page (a view, one iovec of
# the reply's sendmsg); shorter runs are copied together: a view costs about what copying 8 KiB
# does, and a reply of runs a message long would otherwise be thousands of iovecs.
MERGE_VIEW_BYTES = 8192


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
        # Partitions whose cursor is not made yet: a queue scanner over 32767 partitions cost
        # ~32 MiB at open when every cursor was made at once. Cursors are made at the first
        # read and dropped once their partition is exhausted.
        self._pending: Sequence[int] | None = partitions
        self.width = len(partitions)  # what the registry counts against its cap
        self.cursors: list[PartitionCursor] = []
        self.meter: ScanMeter | None = None  # set by the registry (ScannerRegistry.add)
        if len(partitions) == 1:
            self._make_cursors()
        self.last_used = time.monotonic()
        self.busy = False

    def _make_cursors(self) -> None:
        if self._pending is not None:
            self.cursors = [PartitionCursor(p, self.spec, self.meter) for p in self._pending]
            self._pending = None

    def attach(self, meter: ScanMeter) -> None:
        """Counts this scanner's rows in ``meter`` from now on."""
        self.meter = meter
        for cursor in self.cursors:
            meter.used += cursor._bytes
            cursor.meter = meter

    def rewind(self) -> int:
        """Forgets every row read ahead; returns the bytes freed."""
        return sum(cursor.rewind() for cursor in self.cursors)

    def release(self) -> None:
        """Closed: its rows no longer count, its store readers are closed."""
        self.rewind()
        for cursor in self.cursors:
            cursor.close()
        self.cursors = []

    def _meta(self) -> QueueMeta:
        meta = self.store.get_queue(self.queue)
        if meta is None:
            raise InvalidArgument("id", f"the scanner's queue '{self.queue}' was deleted")
        if meta.generation != self.generation:
            raise InvalidArgument("id", f"the scanner's queue '{self.queue}' was truncated")
        if not meta.enabled:
            raise InvalidArgument("id", f"the scanner's queue '{self.queue}' is disabled")
        return meta

    def next_rows(self, n: int, max_bytes: int, encoded: bool = False) -> MessageRows:
        """Up to ``n`` rows (fewer once ``max_bytes`` of bodies are reached); none at the end.
        ``encoded``: the messages may come as :class:`EncodedRows` (then, from several
        partitions, with ``partitions`` None: each TMessage says its own)."""
        meta = self._meta()
        if len(self.cursors) == 1 and self._pending is None and not self.cursors[0]._enc_left:
            cursor = self.cursors[0]
            if encoded:
                got = cursor.read_encoded(self.store, meta, n, max_bytes)
                if got is not None:
                    return MessageRows(cursor.partition, got)
            cursor.fill(self.store, meta, n, max_bytes)
            return MessageRows(cursor.partition, cursor.take(n, max_bytes))
        return self._merge(meta, n, max_bytes, encoded)

    def _merge(self, meta: QueueMeta, n: int, max_bytes: int, encoded: bool) -> MessageRows:
        # Every cursor that is not exhausted must have a head row before we can pick the
        # smallest; refill a cursor only when it has run dry.
        per_cursor = max(1, min(self.spec.caching, n))
        # Every cursor needs a head row to merge; together they read ahead about one reply.
        per_cursor_bytes = max(1, max_bytes // max(1, len(self.cursors) or self.width))
        if self._pending is not None:  # the first read: keep only partitions with rows
            pending = self._pending
            for i, p in enumerate(pending):
                if i % 512 == 511:
                    gevent.sleep(0)
                cursor = PartitionCursor(p, self.spec, self.meter)
                try:
                    if encoded:
                        cursor.fill_encoded(self.store, meta, per_cursor, per_cursor_bytes)
                    else:
                        cursor.fill(self.store, meta, per_cursor, per_cursor_bytes)
                except BaseException:
                    # Refused midway (--max-scanner-bytes): what the cursor read stays with it
                    # and the next call goes on from there. Reading it again from the start
                    # each call could be refused each call, as far into the partition.
                    if cursor.peek_ready():
                        self.cursors.append(cursor)
                        self._pending = pending[i + 1 :]
                    else:
                        cursor.close()
                        self._pending = pending[i:]
                    raise
                if not cursor.exhausted():
                    self.cursors.append(cursor)
            self._pending = None
        self.cursors = [c for c in self.cursors if not c.exhausted()]  # closed at their end
        if not self.cursors:
            return MessageRows([], [])
        for index, cursor in enumerate(self.cursors):
            if index % 512 == 511:
                gevent.sleep(0)  # a queue may have 32767 partitions; let others in meanwhile
            if not cursor.peek_ready():
                if encoded:
                    cursor.fill_encoded(self.store, meta, per_cursor, per_cursor_bytes)
                else:
                    cursor.fill(self.store, meta, per_cursor, per_cursor_bytes)
        if (
            encoded
            and len(self.cursors) <= MERGE_IN_C_UP_TO
            and not any(c.has_rows() for c in self.cursors)
        ):
            return self._merge_encoded(meta, n, max_bytes, per_cursor, per_cursor_bytes)
        for cursor in self.cursors:
            if cursor._enc_left:
                cursor._decode_encoded()  # the row merges below read rows
        if len(self.cursors) <= MERGE_IN_C_UP_TO:
            merged = self._merge_in_c(meta, n, max_bytes, per_cursor, per_cursor_bytes)
            if merged is not None:
                return merged
        reverse = self.spec.reverse
        heap = [
            self._order(cursor.head(), cursor.partition, index, reverse)
            for index, cursor in enumerate(self.cursors)
            if cursor.peek_ready()
        ]
        heapq.heapify(heap)
        partitions: list[int] = []
        rows: list[Row] = []
        size = 0
        while heap and len(rows) < n and size < max_bytes:
            *_, index = heapq.heappop(heap)
            cursor = self.cursors[index]
            row = cursor.pop()
            partitions.append(cursor.partition)
            rows.append(row)
            size += len(row[3]) + len(row[2])
            if not cursor.peek_ready():
                try:
                    cursor.fill(self.store, meta, per_cursor, per_cursor_bytes)
                except Exception:
                    break  # refused or failing: the reply ends with the rows taken (see _refill)
            if cursor.peek_ready():
                heapq.heappush(heap, self._order(cursor.head(), cursor.partition, index, reverse))
        return MessageRows(partitions, rows)

    def _merge_encoded(
        self, meta: QueueMeta, n: int, max_bytes: int, per_cursor: int, per_cursor_bytes: int
    ) -> MessageRows:
        """The merge of encoded buffers (gateway/_merge.c, merge_encoded): the reply's
        TMessages are taken from the store readers' pages run by run, with no row, tuple or
        bytes object per message (a merged read of 8 partitions cost 2.5x one partition's).
        Runs of ``MERGE_VIEW_BYTES`` or more are sent from the pages (views, the reply's
        parts: copying them into one buffer was a tenth of a merged read's CPU); shorter ones
        (partitions interleaved message by message) are copied together."""
        out: list[bytearray | memoryview] = []
        count = size = bodies = 0
        reverse = self.spec.reverse
        while count < n and size < max_bytes:
            live = [c for c in self.cursors if c._enc_left]
            if not live:
                break
            taken, offsets, sizes, lasts, got_bodies = merge_encoded(
                [c._enc for c in live if c._enc is not None], [c._enc_at for c in live],
                [c._enc_left for c in live], [not c._done for c in live],
                out, n - count, max_bytes - size, reverse, MERGE_VIEW_BYTES,
                [c._enc_marks for c in live],
            )  # fmt: skip
            bodies += got_bodies
            for cursor, k, at, body, last in zip(live, taken, offsets, sizes, lasts, strict=True):
                count += k
                size += body
                cursor.drop_encoded(k, at, body, last)
            if not self._refill(live, meta, per_cursor, per_cursor_bytes, count, True):
                break  # n messages, or max_bytes, or every partition read to its end
            if any(c.has_rows() for c in live):
                break  # the store read rows after all: the row merge goes on next call
        return MessageRows(None, EncodedRows(None, count, bodies, parts=out))

    def _refill(
        self, live: list[PartitionCursor], meta: QueueMeta, per_cursor: int,
        per_cursor_bytes: int, taken: int, encoded: bool,
    ) -> bool:  # fmt: skip
        """Refills the cursors a merge step ran dry; whether it did any. A refill refused
        (--max-scanner-bytes) or failing once messages were taken ends the reply with them
        (they left their cursors: raising would lose them); the next call meets it again."""
        refilled = False
        for cursor in live:
            if cursor.peek_ready() or cursor._done:
                continue
            try:
                if encoded:
                    cursor.fill_encoded(self.store, meta, per_cursor, per_cursor_bytes)
                else:
                    cursor.fill(self.store, meta, per_cursor, per_cursor_bytes)
            except Exception:
                if not taken:
                    raise
                return False
            refilled = True
        return refilled

    def _merge_in_c(
        self, meta: QueueMeta, n: int, max_bytes: int, per_cursor: int, per_cursor_bytes: int
    ) -> MessageRows | None:
        """The merge in C (gateway/_merge.c, merge_rows): a producer writing several
        partitions within one millisecond interleaves them message by message, and a heap
        step in Python per message cost about a microsecond. None (nothing taken) when the
        rows are not plain tuples: the heap merge then does it."""
        partitions: list[int] = []
        rows: list[Row] = []
        size = 0
        while len(rows) < n and size < max_bytes:
            live = [c for c in self.cursors if c.peek_ready()]
            if not live:
                break
            try:
                got, parts, taken, taken_bytes, got_size = merge_rows(
                    [c._buffer for c in live], [c._head for c in live],
                    [not c._done for c in live], [c.partition for c in live],
                    n - len(rows), max_bytes - size, self.spec.reverse,
                )  # fmt: skip
            except TypeError:
                if rows:
                    raise
                return None
            rows += got
            partitions += parts
            size += got_size
            for cursor, k, body in zip(live, taken, taken_bytes, strict=True):
                cursor.drop(k, body)
            if not self._refill(live, meta, per_cursor, per_cursor_bytes, len(rows), False):
                break  # n rows, or max_bytes, or every partition read to its end
        return MessageRows(partitions, rows)

    @staticmethod
    def _order(row: Row, partition: int, index: int, reverse: bool) -> tuple[int, int, int, int]:
        if reverse:
            return (-row[0], -row[1], -partition, index)
        return (row[0], row[1], partition, index)


class ScannerRegistry:
    """Open scanners by id. Idle ones expire; the number open at once is bounded.

    A scanner belongs to the connection that opened it (:mod:`gateway.peer`): another
    connection asking for its id is told there is no such scanner, exactly as for an id never
    issued, and its connection's end closes it. Ids are drawn at random as well, so they say
    nothing about how many were opened or which ids others hold.
    """

    def __init__(
        self,
        *,
        idle_timeout: float = 60.0,
        max_open: int = 10_000,
        max_partitions: int = 1 << 20,
        max_bytes: int = 256 << 20,
    ) -> None:
        if idle_timeout <= 0:
            raise ValueError("'idle_timeout' must be > 0 seconds")
        if max_open < 1:
            raise ValueError("'max_open' must be >= 1")
        if max_partitions < 1:
            raise ValueError("'max_partitions' must be >= 1")
        self.idle_timeout = idle_timeout
        self.max_open = max_open
        # Partitions of all open scanners together: each may hold a cursor and its head rows.
        self.max_partitions = max_partitions
        self.partitions = 0
        # Rows all open scanners hold: see ScanMeter.
        self.meter = ScanMeter(max_bytes)
        self.meter.make_room = self.shed
        self.shed_bytes = 0  # read-ahead forgotten to stay within the limit (a metric)
        self._open: dict[int, tuple[int | None, Scanner]] = {}  # id -> (owner, scanner)
        self._owned: dict[int | None, set[int]] = {}  # owner -> its open ids
        # Recently finished or expired ids, so errors can tell their owner what happened.
        self._gone: OrderedDict[int, tuple[int | None, str]] = OrderedDict()
        self._reaper: gevent.Greenlet | None = None

    def start(self) -> None:
        self._reaper = gevent.spawn(self._reap_loop)

    def stop(self) -> None:
        if self._reaper is not None:
            self._reaper.kill()
        self._open.clear()
        self._owned.clear()
        self.partitions = 0
        self.meter.used = 0

    def __len__(self) -> int:
        return len(self._open)

    def add(self, scanner: Scanner) -> int:
        if len(self._open) >= self.max_open:
            self.expire_idle()
            if len(self._open) >= self.max_open:
                raise Overloaded(
                    f"too many open scanners ({self.max_open}); close the ones you no longer use"
                )
        if self.partitions + scanner.width > self.max_partitions:
            self.expire_idle()
            if self.partitions + scanner.width > self.max_partitions:
                raise Overloaded(
                    f"open scanners cover {self.partitions} partitions; this one would pass the "
                    f"limit of {self.max_partitions} (--max-scanner-partitions): close scanners "
                    "you no longer use"
                )
        while True:
            sid = secrets.randbelow(MAX_SCANNER_ID) + 1
            if sid not in self._open:
                break
        owner = _owner()
        scanner.attach(self.meter)
        self._open[sid] = (owner, scanner)
        self.partitions += scanner.width
        self._owned.setdefault(owner, set()).add(sid)
        self._gone.pop(sid, None)
        return sid

    def get(self, sid: Any) -> Scanner:
        owner = _owner()
        entry = self._open.get(sid) if isinstance(sid, int) else None
        if entry is None or entry[0] != owner:
            gone = self._gone.get(sid) if isinstance(sid, int) else None
            why = gone[1] if gone is not None and gone[0] == owner else None
            raise InvalidArgument("id", f"no open scanner {sid!r}" + (f" ({why})" if why else ""))
        scanner = entry[1]
        scanner.last_used = time.monotonic()
        return scanner

    def finish(self, sid: int, why: str) -> None:
        entry = self._open.pop(sid, None)
        if entry is not None:
            self.partitions -= entry[1].width
            entry[1].release()
            owned = self._owned.get(entry[0])
            if owned is not None:
                owned.discard(sid)
                if not owned:
                    del self._owned[entry[0]]
            self._gone[sid] = (entry[0], why)
            while len(self._gone) > 10_000:
                self._gone.popitem(last=False)

    def close(self, sid: Any) -> None:
        entry = self._open.get(sid) if isinstance(sid, int) else None
        if entry is not None and entry[0] == _owner():
            self.finish(sid, "closed")
            return
        gone = self._gone.get(sid) if isinstance(sid, int) else None
        if not (gone is not None and gone == (_owner(), "it reached its end")):
            # Closing a scanner that ran to its end is harmless: clients are told to close.
            self.get(sid)

    def shed(self) -> int:
        """Forgets the read-ahead of idle scanners, least recently used first, until the rows
        held are within the limit; returns the bytes freed."""
        meter = self.meter
        freed = 0
        if meter.used <= meter.limit:
            return 0
        idle = sorted((s for _, s in self._open.values() if not s.busy), key=lambda s: s.last_used)
        for scanner in idle:
            freed += scanner.rewind()
            if meter.used <= meter.limit:
                break
        self.shed_bytes += freed
        return freed

    def done_reading(self, scanner: Scanner) -> None:
        """After a read: what it kept counts, and past the limit idle read-ahead goes (this
        scanner's own too, now that it is idle)."""
        if self.meter.used > self.meter.limit:
            self.shed()

    def drop_owner(self, owner: int) -> int:
        """Closes every scanner of connection ``owner`` (it went away); returns how many."""
        sids = list(self._owned.get(owner, ()))
        for sid in sids:
            self.finish(sid, "its connection closed")
        return len(sids)

    def expire_idle(self) -> int:
        deadline = time.monotonic() - self.idle_timeout
        stale = [sid for sid, (_, s) in self._open.items() if s.last_used < deadline and not s.busy]
        for sid in stale:
            self.finish(sid, f"expired after {self.idle_timeout:g} s idle")
        return len(stale)

    def _reap_loop(self) -> None:
        while True:
            gevent.sleep(min(5.0, self.idle_timeout / 2))
            expired = self.expire_idle()
            if expired:
                log.info("expired %d idle scanner(s)", expired)


def _owner() -> int | None:
    caller = peer.current()
    return None if caller is None else caller.id
