"""HBase scanners kept open between the store's scan calls, and read one chunk ahead.

A partition reader (``PartitionStore.reader``) reads in chunks, each read going on where the
last one stopped. Opening and closing an HBase scanner per chunk costs two extra round trips,
and reading only when asked leaves HBase idle while the client handles the chunk before. So
an HBase scanner that was not exhausted stays open, filed under the reader that owns it, and
a greenlet fetches its next chunk meanwhile.

Thrift1 scanner ids belong to the Thrift server, not to a connection, so any pooled connection
can continue one. An HBase scanner sees rows as of when it was opened; that is the same promise
our scanners make (a scan ends at the end of what was there), and the tail of a partition is
always read by a fresh scanner, because exhausted scanners are never kept.
"""

from __future__ import annotations

import logging
import struct
import time
from collections.abc import Callable
from typing import Any

import gevent
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.transport import TMemoryBuffer

from .. import rowkey
from ..errors import StoreError
from ..fast import decode_rows_reply
from . import rawcall
from .base import Row

log = logging.getLogger(__name__)

CHUNK = 1000  # rows per scannerGetList at most
MAX_BYTES = 8 << 20  # per scan call at most (the caller's max_bytes may ask for less)
# Rows asked for by the first scannerGetList of a scanner, before any row size is known: a
# chunk of 1000 rows of 1 MiB would be read whole (and one more read ahead) for a 16 MiB reply.
FIRST_CHUNK = 16
PREFIX_LEN = len(b"message:")
# scannerGetList(1: ScannerID id, 2: i32 nbRows), binary protocol, strict header, seqid 0
_GET_LIST = struct.Struct(">4si14si3si3sib")


class _Open:
    __slots__ = (
        "ahead",
        "at",
        "buffer",
        "columns",
        "error",
        "exhausted",
        "lower",
        "row_bytes",
        "sid",
        "table",
        "upper",
        "used",
    )

    def __init__(
        self, sid: int, table: bytes, columns: list[bytes], lower: bytes, upper: bytes
    ) -> None:
        self.sid = sid
        self.table = table
        self.columns = columns
        self.lower = lower
        self.upper = upper
        self.at = b""  # where its next row goes on from (the upper bound when reversed)
        self.buffer: list[Row] = []  # rows read but not yet returned
        self.exhausted = False
        self.ahead: gevent.Greenlet | None = None
        self.error: BaseException | None = None
        self.used = time.monotonic()
        self.row_bytes = 0  # estimated bytes (topic + value) of a row; 0: none seen yet

    def rows_for(self, budget: int, most: int) -> int:
        """How many rows to ask HBase for so that they hold about ``budget`` bytes."""
        if not self.row_bytes:
            return max(1, min(most, FIRST_CHUNK))
        return max(1, min(most, budget // self.row_bytes))

    def learn(self, rows: list[Row]) -> None:
        """Updates the row size estimate: this chunk's mean, but shrinking by half at most
        per chunk, so a run of small rows after large ones does not ask for a huge chunk."""
        if rows:
            mean = sum(len(r[2]) + len(r[3]) for r in rows) // len(rows) + 1
            self.row_bytes = max(mean, self.row_bytes // 2)


class ResidentScans:
    """``call(fn)`` runs ``fn(thrift1_client)`` on a pooled connection (HBase faults become
    StoreError); ``hbase`` is happybase's loaded Hbase.thrift module."""

    def __init__(
        self,
        call: Callable[[Any], Any],
        hbase: Any,
        *,
        raw: bool,
        max_open: int = 1024,
        idle: float = 30.0,
    ) -> None:
        self._call = call
        self._hbase = hbase
        # Buffered binary connections: replies are read off the socket and decoded in C.
        self.raw = raw
        self.max_open = max_open
        self.idle = idle  # seconds; under HBase's own 60 s scanner lease
        self._open: dict[object, _Open] = {}  # by the reader that owns it
        self._reaper: gevent.Greenlet | None = gevent.spawn(self._reap_loop)

    def close_all(self) -> None:
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper = None
        for entry in list(self._open.values()):
            self._close(entry)
        self._open.clear()

    def release(self, owner: object) -> None:
        """Closes the scanner of ``owner`` (in the background: a reader being closed or
        rewound does not wait for HBase)."""
        entry = self._open.pop(owner, None)
        if entry is not None:
            gevent.spawn(self._close, entry)

    def drop_table(self, table: bytes) -> None:
        """Closes the scanners of ``table`` (truncated or deleted: their rows are gone)."""
        for owner, entry in list(self._open.items()):
            if entry.table == table:
                self.release(owner)

    def scan(
        self,
        owner: object,
        table: bytes,
        partition: int,
        lower: bytes,
        upper: bytes,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool,
        columns: list[bytes],
        limit: int,
        max_bytes: int | None = None,
    ) -> tuple[list[Row], bool]:
        """Up to ``limit`` rows of ``lower <= key < upper`` of one partition (HBase's own
        ``start``/``stop`` for them given) for reader ``owner``, fewer once their topics and
        values reach ``max_bytes``, and whether the range is exhausted. Chunks are sized by
        the rows seen so far, so that about ``max_bytes`` is read (and about as much read
        ahead)."""
        budget = MAX_BYTES if max_bytes is None else max(1, min(max_bytes, MAX_BYTES))
        entry = self._open.pop(owner, None)
        if entry is not None and not (
            entry.at == (upper if reverse else lower)
            and entry.columns == columns
            and (entry.lower <= lower if reverse else entry.upper == upper)
        ):  # the reader's range moved (the TTL cutoff, say): this scanner may not serve it
            self._close(entry)
            entry = None
        if entry is not None:
            try:
                rows = self._read(entry, limit, budget)
            except StoreError as exc:  # expired lease, HBase restarted: read afresh
                log.debug("resident HBase scanner failed (%s); opening a new one", exc)
                self._close(entry)
                entry = None
        if entry is None:
            spec = self._hbase.TScan(
                startRow=start, stopRow=stop, columns=columns, caching=min(limit, CHUNK),
                reversed=reverse,
            )  # fmt: skip
            sid = self._call(lambda c: c.scannerOpenWithScan(table, spec, {}))
            entry = _Open(sid, table, columns, lower, upper)
            try:
                rows = self._read(entry, limit, budget)
            except BaseException:
                self._close(entry)
                raise
        if reverse and rows and rowkey.encode(partition, rows[-1][0], rows[-1][1]) < lower:
            # the TTL cutoff moved up past these: drop them, the range is done
            rows = [r for r in rows if rowkey.encode(partition, r[0], r[1]) >= lower]
            entry.exhausted, entry.buffer = True, []
        if entry.exhausted and not entry.buffer:
            self._close(entry)
            return rows, True
        if not rows:  # limit 0: nothing read, nothing learnt
            self._close(entry)
            return rows, False
        entry.used = time.monotonic()
        entry.lower, entry.upper = lower, upper
        last = rowkey.encode(partition, rows[-1][0], rows[-1][1])
        entry.at = last if reverse else rowkey.key_after(last)
        self._keep(owner, entry)
        if not entry.buffer:
            ahead = entry.rows_for(budget, min(limit, CHUNK))
            entry.ahead = gevent.spawn(self._fetch_ahead, entry, ahead)
        return rows, False

    def _read(self, entry: _Open, limit: int, budget: int) -> list[Row]:
        """Up to ``limit`` rows, stopping once they hold ``budget`` bytes; rows read past
        that stay in ``entry.buffer`` for the next call."""
        if entry.ahead is not None:
            entry.ahead.join()
            entry.ahead = None
        if entry.error is not None:
            error, entry.error = entry.error, None
            raise StoreError(str(error)) from error
        rows: list[Row] = []
        size = self._take(entry, rows, limit, budget, 0)
        while len(rows) < limit and not entry.exhausted and size < budget:
            want = entry.rows_for(budget - size, min(CHUNK, limit - len(rows)))
            got, count = self._get_list(entry.sid, want)
            if count < want:
                entry.exhausted = True
            entry.learn(got)
            entry.buffer = got
            size = self._take(entry, rows, limit, budget, size)
        return rows

    @staticmethod
    def _take(entry: _Open, rows: list[Row], limit: int, budget: int, size: int) -> int:
        """Moves rows from ``entry.buffer`` to ``rows`` while fewer than ``limit`` and
        ``size`` (returned) is below ``budget``."""
        buf = entry.buffer
        i = 0
        while i < len(buf) and len(rows) < limit and size < budget:
            row = buf[i]
            size += len(row[2]) + len(row[3])
            rows.append(row)
            i += 1
        entry.buffer = buf[i:] if i else buf
        return size

    def _fetch_ahead(self, entry: _Open, n: int) -> None:
        try:
            got, count = self._get_list(entry.sid, n)
        except BaseException as exc:  # handed to the next reader of this scanner
            entry.error = exc
            return
        entry.learn(got)
        entry.buffer.extend(got)
        if count < n:
            entry.exhausted = True

    def _get_list(self, sid: int, n: int) -> tuple[list[Row], int]:
        """scannerGetList(sid, n) as row tuples, and how many HBase rows came."""
        if self.raw:
            return self._call(lambda c: self._get_list_raw(c, sid, n))
        got = self._call(lambda c: c.scannerGetList(sid, n))
        return _to_rows(got), len(got)

    def _get_list_raw(self, client: Any, sid: int, n: int) -> tuple[list[Row], int]:
        request = _GET_LIST.pack(b"\x80\x01\x00\x01", 14, b"scannerGetList", 0,
                                 b"\x08\x00\x01", sid, b"\x08\x00\x02", n, 0)  # fmt: skip
        data = rawcall.call_raw(client, request)
        decoded = decode_rows_reply(data, PREFIX_LEN)
        if decoded is not None:
            return decoded
        # Unusual (an IOError from HBase, say): let thriftpy2 decode it and raise it.
        proto = TBinaryProtocol(TMemoryBuffer(bytes(data)), decode_response=False)
        proto.read_message_begin()
        result = self._hbase.Hbase.scannerGetList_result()
        result.read(proto)
        if result.success is not None:
            return _to_rows(result.success), len(result.success)
        raise result.io or result.ia or OSError("scannerGetList returned nothing")

    def _keep(self, key: object, entry: _Open) -> None:
        while len(self._open) >= self.max_open:  # the least recently kept goes first
            self._close(self._open.pop(next(iter(self._open))))
        self._open[key] = entry

    def _close(self, entry: _Open) -> None:
        if entry.ahead is not None:
            entry.ahead.join()  # never two calls on one scanner at once
            entry.ahead = None
        sid = entry.sid

        def close(client: Any) -> None:
            client.scannerClose(sid)

        try:
            self._call(close)
        except StoreError as exc:  # gone with an HBase restart or its lease: nothing to free
            log.debug("closing HBase scanner %d: %s", sid, exc)

    def _reap_loop(self) -> None:
        while True:
            gevent.sleep(self.idle / 3)
            now = time.monotonic()
            for key, entry in list(self._open.items()):
                if now - entry.used > self.idle and self._open.get(key) is entry:
                    del self._open[key]
                    self._close(entry)


def _to_rows(results: list[Any]) -> list[Row]:
    rows: list[Row] = []
    for r in results:
        _, ts, seq = rowkey.decode(r.row)
        for column, cell in r.columns.items():
            rows.append((ts, seq, column[PREFIX_LEN:], cell.value))
    return rows
