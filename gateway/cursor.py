"""A partition cursor: one partition of a scanner, read through a store reader in chunks and
buffered until the scanner hands its rows out; and the meter of the bytes all cursors hold."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import gevent

from .errors import Overloaded
from .rowkey import MessageId
from .scanrows import _TS_SEQ, REPLY_ROOM, EncodedRows
from .store.base import PartitionReader, PartitionStore, QueueMeta, Row
from .store.reading import after_for_start


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
    them (:meth:`fill_encoded`): ``_enc`` holds ``_enc_left`` of them from ``_enc_at`` on,
    ``_enc_marks`` its segments (gateway/_marks.h), and ``merge_encoded`` copies them into the
    reply run by run, a segment at a time where it can. At most one of the two buffers
    holds anything; a row read (:meth:`fill`) decodes what the encoded one has left."""

    __slots__ = (
        "_after",
        "_buffer",
        "_bytes",
        "_done",
        "_enc",
        "_enc_at",
        "_enc_left",
        "_enc_marks",
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
        self._enc_marks: bytearray | None = None  # their segments, for merge_encoded
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
        self._enc = self._enc_marks = None
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
        marks: bytearray | None = None,
    ) -> bool:
        """Appends to ``out`` the next ``want`` messages (fewer once ``max_bytes``, or at the
        end) as the reader encodes them, tallying them in ``got`` as it goes (a refused read
        raises with what came before counted). False when the store reads rows only."""
        meter = self.meter
        while got.count < want and got.size < max_bytes and not self._done:
            if meter is not None:
                meter.check()
            reader = self._reader or self._open_reader(store, meta)
            page = reader.read_encoded(out, want - got.count, max_bytes - got.size, marks)
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
        out, marks = bytearray(), bytearray()
        got = _PageRead()
        try:
            if self._read_pages(store, meta, out, want, max_bytes, got, marks):
                return
        finally:
            # refused midway (--max-scanner-bytes) or not: what was read stays buffered
            if got.count:
                self._enc, self._enc_at, self._enc_left = out, 0, got.count
                self._enc_marks = marks
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
