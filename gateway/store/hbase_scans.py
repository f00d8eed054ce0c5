"""HBase scanners kept open between the store's scan calls, and read one chunk ahead.

A gateway scanner reads a partition in chunks: each ``PartitionStore.scan`` call continues
where the last one stopped. Opening and closing an HBase scanner per chunk costs two extra
round trips, and reading only when asked leaves HBase idle while the client handles the chunk
before. So an HBase scanner that was not exhausted stays open, keyed by where the next call
will start, and a greenlet fetches its next chunk meanwhile.

Thrift1 scanner ids belong to the Thrift server, not to a connection, so any pooled connection
can continue one. An HBase scanner sees rows as of when it was opened; that is the same promise
our scanners make (a scan ends at the end of what was there), and the tail of a partition is
always read by a fresh scanner, because exhausted scanners are never kept.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import gevent

from ..errors import StoreError

log = logging.getLogger(__name__)

CHUNK = 1000  # rows per scannerGetList
MAX_BYTES = 8 << 20  # per scan call, roughly (whole chunks)

Key = tuple[bytes, bytes, bool, tuple[bytes, ...]]  # table, next position, reverse, columns


class _Open:
    __slots__ = ("ahead", "buffer", "error", "exhausted", "lower", "sid", "upper", "used")

    def __init__(self, sid: int, lower: bytes, upper: bytes) -> None:
        self.sid = sid
        self.lower = lower
        self.upper = upper
        self.buffer: list[Any] = []  # TRowResults read but not yet returned
        self.exhausted = False
        self.ahead: gevent.Greenlet | None = None
        self.error: BaseException | None = None
        self.used = time.monotonic()


class ResidentScans:
    """``call(fn)`` runs ``fn(thrift1_client)`` on a pooled connection (HBase faults become
    StoreError); ``hbase`` is happybase's loaded Hbase.thrift module."""

    def __init__(
        self, call: Callable[[Any], Any], hbase: Any, *, max_open: int = 1024, idle: float = 30.0
    ) -> None:
        self._call = call
        self._hbase = hbase
        self.max_open = max_open
        self.idle = idle  # seconds; under HBase's own 60 s scanner lease
        self._open: dict[Key, _Open] = {}
        self._reaper: gevent.Greenlet | None = gevent.spawn(self._reap_loop)

    def close_all(self) -> None:
        if self._reaper is not None:
            self._reaper.kill()
            self._reaper = None
        for entry in list(self._open.values()):
            self._close(entry)
        self._open.clear()

    def scan(
        self,
        table: bytes,
        lower: bytes,
        upper: bytes,
        start: bytes,
        stop: bytes,
        *,
        reverse: bool,
        columns: list[bytes],
        limit: int,
    ) -> tuple[list[Any], bool]:
        """Up to ``limit`` rows of ``lower <= key < upper`` (HBase's own ``start``/``stop``
        for them given) and whether the range is exhausted."""
        cols = tuple(columns)
        entry = self._open.pop((table, upper if reverse else lower, reverse, cols), None)
        if entry is not None and not (
            entry.lower <= lower if reverse else entry.upper == upper
        ):  # the other bound moved the wrong way: this scanner may not serve it
            self._close(entry)
            entry = None
        if entry is not None:
            try:
                rows = self._read(entry, limit)
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
            entry = _Open(sid, lower, upper)
            try:
                rows = self._read(entry, limit)
            except BaseException:
                self._close(entry)
                raise
        if reverse and rows and rows[-1].row < lower:  # the TTL cutoff moved up past these
            rows = [r for r in rows if r.row >= lower]
            entry.exhausted, entry.buffer = True, []
        if entry.exhausted and not entry.buffer:
            self._close(entry)
            return rows, True
        if not rows:  # limit 0: nothing read, nothing learnt
            self._close(entry)
            return rows, False
        entry.used = time.monotonic()
        entry.lower, entry.upper = lower, upper
        position = rows[-1].row if reverse else rows[-1].row + b"\x00"
        self._keep((table, position, reverse, cols), entry)
        if not entry.buffer:
            entry.ahead = gevent.spawn(self._fetch_ahead, entry, min(limit, CHUNK))
        return rows, False

    def _read(self, entry: _Open, limit: int) -> list[Any]:
        if entry.ahead is not None:
            entry.ahead.join()
            entry.ahead = None
        if entry.error is not None:
            error, entry.error = entry.error, None
            raise StoreError(str(error)) from error
        rows = entry.buffer[:limit]
        entry.buffer = entry.buffer[limit:]
        size = 0
        while len(rows) < limit and not entry.exhausted and size < MAX_BYTES:
            want = min(CHUNK, limit - len(rows))
            got = self._call(lambda c: c.scannerGetList(entry.sid, want))  # noqa: B023
            rows.extend(got)
            if len(got) < want:
                entry.exhausted = True
            size += sum(len(c.value) for r in got for c in r.columns.values())
        return rows

    def _fetch_ahead(self, entry: _Open, n: int) -> None:
        try:
            got = self._call(lambda c: c.scannerGetList(entry.sid, n))
        except BaseException as exc:  # handed to the next reader of this scanner
            entry.error = exc
            return
        entry.buffer.extend(got)
        if len(got) < n:
            entry.exhausted = True

    def _keep(self, key: Key, entry: _Open) -> None:
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
