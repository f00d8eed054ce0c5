"""A partition reader of the embedded store: a RocksDB iterator kept between reads.

Entries are per-row values or records of several messages (records.py); the loop over them
(gateway/_records.c, ``scan_records``) goes message by message, so bounds, the topic filter,
limits and the rows-examined budget apply per message. A read may start or stop inside a
record: a forward read starts at the record holding its first message (``seek_for_prev``),
and one that stopped inside a record keeps it to go on from (``_held``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rocksdict import Rdict, ReadOptions

from ... import rowkey
from ...fast import scan_records
from ...rowkey import MessageId
from ..base import QueueMeta, Row
from ..reading import KeyRangeReader
from .records import is_record

if TYPE_CHECKING:
    from .store import EmbeddedStore

# How many rows one read may look at before it hands control back (topic filters can skip
# many rows; the event loop must keep serving meanwhile).
MAX_EXAMINED_PER_SCAN = 4096
_SCAN_EXHAUSTED, _SCAN_OUT_OF_RANGE = 0, 1  # scan_records' statuses (2, 3: limit, budget)


class _Reader(KeyRangeReader):
    """Reads through a RocksDB iterator that it keeps while it stops at its limit (counted
    by the store's ``_cursors``, which drops it when idle or when its family is dropped), and
    never past the durability floor: rows of puts whose log record is not synced yet stay
    invisible (``_pending_floor``)."""

    def __init__(
        self,
        store: EmbeddedStore,
        queue: QueueMeta,
        partition: int,
        after: MessageId | None,
        stop: MessageId | None,
        **kw: Any,
    ) -> None:
        super().__init__(queue, partition, after, stop, **kw)
        self._store = store
        self._items: Any = None  # the kept iterator (of items())
        self._held: tuple[bytes, bytes] | None = None  # the record it stopped inside
        self._at = b""  # the key it goes on from (the lower bound, the upper when reversed)
        self.family = ""  # the base of the families it reads (see _Cursors.drop)

    def _scan(
        self, lower: bytes, upper: bytes, limit: int, max_bytes: int | None
    ) -> tuple[list[Row], int, bytes | None]:
        rows: list[Row] = []
        _, size, _, key, _ = self._scan_into(lower, upper, limit, max_bytes, rows)
        return rows, size, key

    def _scan_into(
        self,
        lower: bytes,
        upper: bytes,
        limit: int,
        max_bytes: int | None,
        sink: list[Row] | bytearray,
        marks: bytearray | None = None,
    ) -> tuple[int, int, int, bytes | None, bytes | None]:
        """Appends up to ``limit`` messages of [lower, upper) to ``sink`` (row tuples to a
        list, TMessages to a bytearray: scan_records, marking their segments in ``marks``
        when given); returns (messages, size, their bodies'
        bytes, the key it stopped at or None when the range is exhausted, the key of the
        last message appended or None)."""
        store = self._store
        store._gate.wait_open()  # not while the store reopens (see _heal_loop)
        layout, (cf, _) = store._family(self.queue, self.partition)
        self.family = family = layout.base
        reverse = self.reverse
        floor = store._pending_floor(family, self.partition)
        if floor is not None and floor < upper:
            upper = floor
        if lower >= upper:
            self._release()
            return 0, 0, 0, None, None
        if max_bytes is None:
            max_bytes = 1 << 62
        # Going on where the last read stopped: its iterator, no new seek through the
        # memtables and every level (unless the TTL cutoff or the floor moved the start).
        start = upper if reverse else lower
        items = self._items
        kept = items is not None and self._at == start and store._cursors.take(self)
        held = self._held
        if not kept:
            self._release()
            items, held = _iterate(cf, start, upper, reverse)
        encoded = type(sink) is bytearray
        taken = size = bodies = 0
        last: bytes | None = None
        budget = MAX_EXAMINED_PER_SCAN
        topics = self.topics
        while True:
            # the per-message loop runs in C (gateway/_records.c, scan_records): bounds
            # (lower, since rocksdict ignores iterate_lower_bound), topic filter, the rows
            # (a bytearray's limit counts what one call adds, a list's its length)
            status, key, added, budget, held, got, got_last, got_bodies = scan_records(
                items, held, lower, upper, topics, limit - taken if encoded else limit,
                budget, sink, max_bytes - size, reverse, marks,
            )  # fmt: skip
            size += added
            taken += got
            bodies += got_bodies
            if got_last is not None:
                last = got_last
            if status == _SCAN_OUT_OF_RANGE:
                self._release()
                return taken, size, bodies, None, last
            if status != _SCAN_EXHAUSTED:  # the limit, max_bytes, or the rows-examined budget
                assert key is not None
                self._items, self._held = items, held
                self._at = key if reverse else rowkey.key_after(key)
                store._cursors.keep(self)
                return taken, size, bodies, key, last
            if not kept or reverse:
                self._release()
                return taken, size, bodies, None, last
            # A kept iterator sees the store as it was when it was made: its end is not the
            # range's end. Newer rows sort after it (ids grow), so a forward read goes on from
            # where it got to with a fresh iterator; a reverse one has seen everything below.
            kept = False
            if last is not None:
                resume = rowkey.key_after(last)
                if resume >= upper:
                    self._release()
                    return taken, size, bodies, None, last
            else:
                resume = lower
            # from ``resume`` on: the record it may start in holds rows already returned
            lower = resume
            items, held = _iterate(cf, resume, upper, reverse)

    def _release(self) -> None:
        self._held = None
        if self._items is not None:
            self._items = None
            self._store._cursors.forget(self)

    def _drop_iterator(self) -> None:
        self._items = self._held = None


def _iterate(
    cf: Rdict, start: bytes, upper: bytes, reverse: bool
) -> tuple[Any, tuple[bytes, bytes] | None]:
    """An iterator of the entries from ``start`` in scan order, and for a forward one the
    record before ``start`` that may hold its first messages (None if there is none)."""
    ro = ReadOptions()
    ro.set_iterate_upper_bound(upper)
    held = None
    if not reverse:
        # A record is keyed by its first message: the one holding ``start`` may sit below it.
        probe = cf.iter(ro)
        probe.seek_for_prev(start)
        if probe.valid():
            key = probe.key()
            if key < start and key[:2] == start[:2]:
                value = probe.value()
                if is_record(value):
                    held = (key, value)
        del probe
    # items() steps the iterator once per entry (iter() needs key, value and next calls);
    # backwards it starts at the last key below ``upper``, the record that may hold the
    # newest messages below it.
    return iter(cf.items(backwards=reverse, from_key=start, read_opt=ro)), held
