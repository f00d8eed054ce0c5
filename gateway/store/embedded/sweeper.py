"""The TTL sweeper.

TTL: rows older than their queue's TTL are filtered by every scan (the service clamps the
range); a sweeper greenlet deletes expired key ranges with range tombstones and compacts them
away in the thread pool (RocksDB compaction also releases the GIL), so puts never wait for it.
The key index (``hqueue.extras``) is swept with the rows.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    Rdict,
    ReadOptions,
)

from ... import rowkey
from ...errors import HQueueError
from ...ids import wall_clock_ms
from ..base import QueueMeta
from .cursors import _Cursors
from .records import is_record, last_id

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by EmbeddedStore (store.py)


log = logging.getLogger(__name__)


class _Sweeper(_State):
    """Deletes expired rows and keys; forgets idle kept iterators."""

    def _expire_loop(self) -> None:
        while self._running:
            gevent.sleep(_Cursors.MAX_AGE)
            self._cursors.expire()

    def _sweep_loop(self) -> None:
        while self._running:
            gevent.sleep(self.ttl_sweep_interval)
            try:
                swept = self.sweep_expired()
                if swept:
                    log.info("TTL sweep removed expired messages from %d partition(s)", swept)
            except Exception:
                log.exception("TTL sweep failed; will retry")

    def sweep_expired(self, now_ms: int | None = None) -> int:
        """Deletes the rows older than each queue's TTL; returns the partitions swept."""
        now_ms = wall_clock_ms() if now_ms is None else now_ms
        swept = 0
        ranges: list[tuple[bytes, bytes]] = []  # of the extras family, to compact
        for meta in list(self._queues.values()):
            try:
                with self._gate.passing():
                    ranges += self._sweep_extras(meta, now_ms - meta.ttl_seconds * 1000)
                    swept += self._sweep_queue(meta, now_ms - meta.ttl_seconds * 1000)
            except HQueueError as exc:  # truncated or deleted meanwhile: nothing to sweep
                if self._queues.get(meta.name) == meta:
                    raise
                log.debug("skipping the TTL sweep of %s: %s", meta.name, exc)
        with self._gate.passing():
            if ranges and self._extras is not None:
                cf, pool = self._extras[0], gevent.get_hub().threadpool
                for begin, end in ranges:
                    pool.apply(cf.compact_range, (begin, end))
        return swept

    def _sweep_queue(self, meta: QueueMeta, cutoff: int) -> int:
        if cutoff <= 0:
            return 0
        swept = partition = 0
        touched: dict[int, tuple[Rdict, int, int]] = {}  # region -> (family, first, last)
        while partition < meta.partitions and self._queues.get(meta.name) == meta:
            layout, (cf, _) = self._family(meta, partition)
            region_end = min(meta.partitions, (partition // layout.span + 1) * layout.span)
            it = cf.iter(ReadOptions())
            it.seek(rowkey.partition_start(partition))
            if not it.valid():
                partition = region_end
                continue
            p, ts, _ = rowkey.KEY.unpack(it.key())
            if p >= region_end:  # the rest of this region is empty
                partition = region_end
                continue
            end = _expired_end(cf, p, cutoff) if ts < cutoff else None
            if end is not None and end > it.key():
                cf.delete_range(rowkey.partition_start(p), end)
                region = p // layout.span
                first = touched[region][1] if region in touched else p
                touched[region] = (cf, first, p)
                swept += 1
            partition = p + 1
            gevent.sleep(0)  # one seek per non-empty partition; let puts through
        pool = gevent.get_hub().threadpool
        for cf, first, last in touched.values():
            begin, end = rowkey.partition_start(first), rowkey.partition_end(last)
            pool.apply(cf.compact_range, (begin, end))
        return swept


def _expired_end(cf: Rdict, partition: int, cutoff: int) -> bytes:
    """Where the range delete of ``partition``'s messages older than ``cutoff`` (ms) ends:
    at the cutoff's key, or at the record that straddles it, which keeps its newer messages
    (readers hide its older ones; a later sweep takes it whole)."""
    end = rowkey.encode(partition, cutoff, 0)
    it = cf.iter(ReadOptions())
    it.seek_for_prev(end)
    if it.valid():
        key = it.key()
        value = it.value()
        if key[:2] == end[:2] and is_record(value) and last_id(key, value).timestamp >= cutoff:
            return key
    return end
