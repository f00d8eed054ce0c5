"""Scanners: a partition cursor, the merge of several partitions, and the registry of open ones.

A scanner reads each partition through a store reader, which remembers its position and may
keep a store iterator or HBase scanner between calls; the store drops those when idle, so an
idle scanner pins nothing for long. Each read re-checks that its queue still exists, is
enabled and was not truncated. Merged scanners (queue, combined) return messages in MessageID
order across partitions (newest first when reversed), ties broken by partition id.
"""

from __future__ import annotations

import heapq
import logging
import secrets
import struct
import time
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import gevent

from . import peer
from .errors import InvalidArgument, Overloaded
from .fast import merge_encoded, merge_rows
from .rowkey import MessageId
from .store.base import PartitionReader, PartitionStore, QueueMeta, Row
from .store.reading import after_for_start

log = logging.getLogger(__name__)

MAX_SCANNER_ID = 2**31 - 1
MERGE_IN_C_UP_TO = 64  # partitions; beyond, walking every cursor per refill costs more


class ScanMeter:
    """The bytes of rows all open scanners hold (read ahead and kept between calls, or being
    read), against ``limit`` (``--max-scanner-bytes``).

    Each scanner may read ahead about one reply (16 MiB) and keep what the reply did not take:
    10,000 open scanners could hold 160 GB. Cursors add and remove their bytes here as they
    buffer and hand out rows. Past the limit the registry forgets the read-ahead of idle
    scanners, least recently used first (they read it again when asked: see
    :meth:`PartitionCursor.rewind`); when the rows of reads in progress alone pass it, a read
    is refused (:class:`Overloaded`, an IOError naming the flag).
    """

    __slots__ = ("limit", "make_room", "used")

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("'limit' must be >= 1 byte")
        self.limit = limit
        self.used = 0
        self.make_room: Any = None  # set by the registry: frees idle read-ahead

    def check(self) -> None:
        """Before a scanner reads more: room, or Overloaded."""
        if self.used <= self.limit:
            return
        if self.make_room is not None:
            self.make_room()
        if self.used > self.limit:
            raise Overloaded(
                f"open scanners hold {self.used} bytes of rows, past the limit of {self.limit} "
                "(--max-scanner-bytes); retry once other reads are done"
            )


@dataclass(frozen=True)
class ScanSpec:
    """A validated TMessageScan. Ids are inclusive start / exclusive stop in scan order."""

    start: MessageId | None
    stop: MessageId | None
    topics: frozenset[bytes] | None
    reverse: bool
    caching: int


class _PageRead:
    """What one read of encoded pages got so far (it survives the read being refused)."""

    __slots__ = ("bodies", "count", "last", "size")

    def __init__(self) -> None:
        self.count = self.size = self.bodies = 0
        self.last: MessageId | None = None


class PartitionCursor:
    """Reads one partition in chunks, oldest first (newest first if reversed), through a
    store reader (:meth:`PartitionStore.reader`), buffering what the merge has not taken.

    The buffer is a list and where its rows not yet taken begin (``_head``): the merge reads
    the list in place (``merge_rows`` takes the start) and taking rows moves the start, so no
    row is copied from one container to another until a reply takes it.

    A merged scan whose reply is binary buffers TMessages instead, as the store reader encoded
    them (:meth:`fill_encoded`): ``_enc`` holds ``_enc_left`` of them from ``_enc_at`` on, and
    ``merge_encoded`` copies them into the reply run by run. At most one of the two buffers
    holds anything; a row read (:meth:`fill`) decodes what the encoded one has left."""

    __slots__ = (
        "_after",
        "_buffer",
        "_bytes",
        "_done",
        "_enc",
        "_enc_at",
        "_enc_left",
        "_head",
        "_last",
        "_reader",
        "chunk",
        "meter",
        "partition",
        "spec",
    )

    def __init__(self, partition: int, spec: ScanSpec, meter: ScanMeter | None = None) -> None:
        self.partition = partition
        self.spec = spec
        self.chunk = spec.caching
        self.meter = meter
        self._after = after_for_start(spec.start, spec.reverse)  # where the buffer begins
        self._last: Row | None = None  # the last row handed out
        self._reader: PartitionReader | None = None  # made at the first fill
        self._buffer: list[Row] = []
        self._head = 0  # rows before it are taken
        self._enc: bytearray | None = None  # TMessages (fill_encoded), or None
        self._enc_at = 0  # where the next of them begins
        self._enc_left = 0  # how many are left
        self._bytes = 0  # at least the topic and value bytes buffered (see _set_bytes)
        self._done = False

    def _set_bytes(self, value: int) -> None:
        meter = self.meter
        if meter is not None:
            meter.used += value - self._bytes
        self._bytes = value

    def rewind(self) -> int:
        """Forgets the rows read ahead (the next fill reads them again, with a new reader);
        returns the bytes freed."""
        if not self.peek_ready():
            return 0
        self.close()
        if self._last is not None:
            self._after = MessageId(self._last[0], self._last[1])
            self._last = None
        self._buffer = []
        self._head = 0
        self._drop_encoded()
        self._done = False
        freed = self._bytes
        self._set_bytes(0)
        return freed

    def close(self) -> None:
        """Frees the store reader (a later fill makes another where the buffer begins)."""
        reader = self._reader
        if reader is not None:
            self._reader = None
            reader.close()

    def peek_ready(self) -> bool:
        return self._head < len(self._buffer) or self._enc_left > 0

    def has_rows(self) -> bool:
        return self._head < len(self._buffer)

    def exhausted(self) -> bool:
        return self._done and not self.peek_ready()

    def _drop_encoded(self) -> None:
        self._enc = None
        self._enc_at = self._enc_left = 0

    def _decode_encoded(self) -> None:
        """The encoded buffer's messages become rows (a row read after encoded ones)."""
        if self._enc_left:
            assert self._enc is not None
            rest = EncodedRows(self._enc[self._enc_at :], self._enc_left, 0).rows()
            buf = self._buffer
            if self._head:
                del buf[: self._head]
                self._head = 0
            buf.extend(rest)
        self._drop_encoded()

    def _open_reader(self, store: PartitionStore, meta: QueueMeta) -> PartitionReader:
        """A store reader from where the buffer begins (at the first read, or after a
        rewind)."""
        spec = self.spec
        reader = self._reader = store.reader(
            meta, self.partition, self._after, spec.stop,
            reverse=spec.reverse, topics=spec.topics,
        )  # fmt: skip
        return reader

    def fill(self, store: PartitionStore, meta: QueueMeta, want: int, max_bytes: int) -> None:
        """Reads until at least ``want`` rows, or rows holding ``max_bytes`` of topics and
        values, are buffered, or the range is exhausted. The byte bound keeps what a reply
        reads ahead within the reply cap: 160 bodies of 1 MiB asked for at once were all read
        (and the ones past the 16 MiB reply held in the scanner afterwards)."""
        limit = max(want, self.chunk)
        meter = self.meter
        if self._enc_left:
            self._decode_encoded()
        buf = self._buffer
        if self._head:
            del buf[: self._head]
            self._head = 0
        while len(buf) < want and self._bytes < max_bytes and not self._done:
            if meter is not None:
                meter.check()
            reader = self._reader or self._open_reader(store, meta)
            result = reader.read(limit - len(buf), max_bytes - self._bytes)
            buf.extend(result.rows)
            self._set_bytes(self._bytes + result.size)
            if result.done:
                self._done = True
                self.close()
            elif len(buf) < want and self._bytes < max_bytes:
                gevent.sleep(0)  # a long filtered scan must not starve other clients

    def read_encoded(
        self, store: PartitionStore, meta: QueueMeta, want: int, max_bytes: int
    ) -> EncodedRows | None:
        """The next ``want`` messages (fewer once ``max_bytes`` of topics and values, or at
        the end) encoded by the store reader as TMessages, as :meth:`fill` then :meth:`take`
        would give them; None when rows are buffered or the store reads rows only."""
        if self.peek_ready():
            return None
        out = bytearray(REPLY_ROOM)
        got = _PageRead()
        try:
            if not self._read_pages(store, meta, out, want, max_bytes, got):
                return None
        except BaseException:
            # Refused midway (--max-scanner-bytes) or interrupted: the reader has moved past
            # what was read, so it stays buffered as rows for the next call, as fill() keeps it.
            if got.count:
                self._buffer.extend(EncodedRows(out, got.count, got.bodies, REPLY_ROOM).rows())
            self._set_bytes(got.size if got.count else 0)
            raise
        self._set_bytes(0)
        if got.last is not None:
            self._last = (got.last[0], got.last[1], b"", b"")  # where a rewind goes on from
        return EncodedRows(out, got.count, got.bodies, REPLY_ROOM)

    def _read_pages(
        self,
        store: PartitionStore,
        meta: QueueMeta,
        out: bytearray,
        want: int,
        max_bytes: int,
        got: _PageRead,
    ) -> bool:
        """Appends to ``out`` the next ``want`` messages (fewer once ``max_bytes``, or at the
        end) as the reader encodes them, tallying them in ``got`` as it goes (a refused read
        raises with what came before counted). False when the store reads rows only."""
        meter = self.meter
        while got.count < want and got.size < max_bytes and not self._done:
            if meter is not None:
                meter.check()
            reader = self._reader or self._open_reader(store, meta)
            page = reader.read_encoded(out, want - got.count, max_bytes - got.size)
            if page is None:
                assert got.count == 0, "a reader reads encoded or not"
                return False
            got.count += page.messages
            got.size += page.size
            got.bodies += page.bodies
            if page.last is not None:
                got.last = page.last
            if page.done:
                self._done = True
                self.close()
            elif got.count < want and got.size < max_bytes:
                self._set_bytes(got.size)  # what this read holds counts while it waits
                gevent.sleep(0)  # a long filtered scan must not starve other clients
        return True

    def fill_encoded(
        self, store: PartitionStore, meta: QueueMeta, want: int, max_bytes: int
    ) -> None:
        """As :meth:`fill`, into the encoded buffer, when it has run dry and no rows are
        buffered (otherwise, and for a store that reads rows only, :meth:`fill` itself)."""
        if self.peek_ready() or self._done:
            if not self._enc_left:
                self.fill(store, meta, want, max_bytes)
            return
        out = bytearray()
        got = _PageRead()
        try:
            if self._read_pages(store, meta, out, want, max_bytes, got):
                return
        finally:
            # refused midway (--max-scanner-bytes) or not: what was read stays buffered
            if got.count:
                self._enc, self._enc_at, self._enc_left = out, 0, got.count
            self._set_bytes(got.size)
        self.fill(store, meta, want, max_bytes)  # the store reads rows only

    def drop_encoded(self, k: int, at: int, body_bytes: int, last_at: int) -> None:
        """Forgets the next ``k`` encoded messages (``merge_encoded`` took them): the next
        begins at ``at``, theirs topics and values held ``body_bytes``, the last of them
        began at ``last_at``."""
        if not k:
            return
        enc = self._enc
        assert enc is not None
        ts, seq = _TS_SEQ.unpack_from(enc, last_at + 6)
        self._last = (ts, seq, b"", b"")  # where a rewind goes on from
        self._enc_left -= k
        if self._enc_left:
            self._enc_at = at
            self._set_bytes(max(0, self._bytes - body_bytes))
        else:
            self._drop_encoded()
            self._set_bytes(0)

    def take(self, n: int, max_bytes: int) -> list[Row]:
        """Up to ``n`` buffered rows, fewer once their bodies reach ``max_bytes``."""
        buf, head = self._buffer, self._head
        if n >= len(buf) - head and self._bytes <= max_bytes:
            rows = buf if head == 0 else buf[head:]  # the list itself when all of it goes
            self._buffer = []
            self._head = 0
            self._set_bytes(0)
            if rows:
                self._last = rows[-1]
            return rows
        # Count row by row: ``_bytes`` must stay an upper bound of what is left, since fill()
        # stops reading ahead on it.
        end = min(len(buf), head + n)
        size = 0
        at = head
        while at < end and size < max_bytes:
            row = buf[at]
            size += len(row[2]) + len(row[3])
            at += 1
        rows = buf[head:at]
        self._head = at
        self._set_bytes(max(0, self._bytes - size) if at < len(buf) else 0)
        if rows:
            self._last = rows[-1]
        return rows

    def pop(self) -> Row:
        row = self._last = self._buffer[self._head]
        self._head += 1
        more = self._head < len(self._buffer)
        self._set_bytes(max(0, self._bytes - len(row[2]) - len(row[3])) if more else 0)
        return row

    def drop(self, k: int, body_bytes: int) -> None:
        """Forgets the next ``k`` rows, whose topics and values hold ``body_bytes``: ``_bytes``
        stays an upper bound."""
        if not k:
            return
        self._head = head = min(len(self._buffer), self._head + k)
        self._last = self._buffer[head - 1]
        self._set_bytes(max(0, self._bytes - body_bytes) if head < len(self._buffer) else 0)

    def head(self) -> Row:
        return self._buffer[self._head]


# Bytes left free before the messages of a reply's EncodedRows: the reply's head is written
# there (gateway/boundary.py), so sending it copies no message (a b"".join of head and
# messages copied every reply once more).
REPLY_ROOM = 64


class EncodedRows:
    """Messages a store reader appended as TMessages of the binary protocol (the elements of
    a scan's reply) to one bytearray, from ``start`` on (the bytes before are free for the
    reply's head: ``REPLY_ROOM``): a reply from them needs no Python object per message.
    Iterating decodes them into rows (the compact protocol, keys to attach)."""

    __slots__ = ("bodies", "count", "data", "start")

    def __init__(self, data: bytearray, count: int, bodies: int, start: int = 0) -> None:
        self.data = data
        self.count = count
        self.bodies = bodies  # bytes of the bodies (the read_bytes metric)
        self.start = start

    def __len__(self) -> int:
        return self.count

    def __bool__(self) -> bool:
        return self.count > 0

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def rows(self) -> list[Row]:
        """The messages as (timestamp, sequence, topic, value) rows."""
        data = self.data
        rows: list[Row] = []
        at = self.start
        for _ in range(self.count):
            # gateway/_thriftbuf.h put_tmessage: field headers of 3 bytes, then the values
            ts, seq = _TS_SEQ.unpack_from(data, at + 6)
            (tl,) = _LEN.unpack_from(data, at + 28)
            topic = bytes(data[at + 32 : at + 32 + tl])
            at += 32 + tl + 3
            (vl,) = _LEN.unpack_from(data, at)
            rows.append((ts, seq, topic, bytes(data[at + 4 : at + 4 + vl])))
            at += 4 + vl + 1
        return rows

    def partition_ids(self) -> list[int]:
        """Each message's partition, as its TMessage says (a merged scan's pages)."""
        data = self.data
        parts: list[int] = []
        at = self.start
        for _ in range(self.count):
            (part,) = _PART.unpack_from(data, at + 23)
            (tl,) = _LEN.unpack_from(data, at + 28)
            (vl,) = _LEN.unpack_from(data, at + 35 + tl)
            parts.append(part)
            at += 40 + tl + vl
        return parts


_TS_SEQ = struct.Struct(">q3xh")  # a TMessageID's two values and the field header between
_LEN = struct.Struct(">i")
_PART = struct.Struct(">h")


class MessageRows(NamedTuple):
    """What a scanner read: rows, and their partition (one for all, or one per row, or None
    for encoded rows whose TMessages say their own).

    The Thrift boundary turns it into ``list<TMessage>``: encoded straight from the rows on
    the binary protocol (:func:`gateway._wirecheck.encode_messages_reply`), through TMessage
    objects otherwise (:meth:`to_messages`).
    """

    partitions: int | list[int] | None
    rows: list[Row] | EncodedRows

    def to_messages(self, thrift: Any) -> list[Any]:
        message, mid = thrift.TMessage, thrift.TMessageID
        parts = self.partitions
        if parts is None:
            assert isinstance(self.rows, EncodedRows)
            parts = self.rows.partition_ids()
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
        TMessages are copied from the store readers' pages run by run, with no row, tuple or
        bytes object per message (a merged read of 8 partitions cost 2.5x one partition's)."""
        out = bytearray(REPLY_ROOM)
        count = size = bodies = 0
        reverse = self.spec.reverse
        while count < n and size < max_bytes:
            live = [c for c in self.cursors if c._enc_left]
            if not live:
                break
            taken, offsets, sizes, lasts, got_bodies = merge_encoded(
                [c._enc for c in live if c._enc is not None], [c._enc_at for c in live],
                [c._enc_left for c in live], [not c._done for c in live],
                out, n - count, max_bytes - size, reverse,
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
        return MessageRows(None, EncodedRows(out, count, bodies, REPLY_ROOM))

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
