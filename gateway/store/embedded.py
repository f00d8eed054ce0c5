"""The embedded store: RocksDB (through rocksdict) on local disk, nothing else to install.

Layout: one column family per queue (``<name>@<generation>``, so truncate and re-create swap in
a fresh family and drop the old one at once); the default family holds queue metadata. Keys are
the shared row keys of :mod:`gateway.rowkey`; a value is topic length + topic + body.

Durability with group commit: a put is applied to RocksDB without sync (memtable + WAL in the
page cache, microseconds, in the event loop) and then waits for the next WAL sync. One
committer greenlet runs ``flush_wal(sync=True)`` in the hub's thread pool (rocksdict releases
the GIL there, while a synced ``write`` would hold it), so every put that arrived during one
sync shares the next one and the loop keeps serving while the disk works. Rows are visible to
scans only once durable: each partition's lowest not-yet-synced key bounds every scan.

TTL: rows older than their queue's TTL are filtered by every scan (the service clamps the
range); a sweeper greenlet deletes expired key ranges with range tombstones and compacts them
away in the thread pool (RocksDB compaction also releases the GIL), so puts never wait for it.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from collections import OrderedDict
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.lock
from rocksdict import Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from .. import rowkey
from .._wirecheck import put_cells
from ..errors import HQueueError, InvalidArgument, StoreError
from ..ids import wall_clock_ms
from ..rowkey import MessageId
from .base import PartitionStore, PutBatch, QueueMeta, Row, ScanResult

log = logging.getLogger(__name__)

_META_PREFIX = b"queue\x00"
_GENERATION_KEY = b"generation"
# Small records (see PartitionStore.get_record): b"record\x00" + namespace + b"\x00" + key.
_RECORD_PREFIX = b"record\x00"
_KEY = struct.Struct(">hqh")
# How many rows one scan call may look at before it hands control back (topic filters can
# skip many rows; the event loop must keep serving meanwhile).
MAX_EXAMINED_PER_SCAN = 4096


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.increase_parallelism(2)
    opts.set_max_background_jobs(2)
    return opts


class _Group:
    """Writes applied since the last WAL sync began; they become durable together."""

    __slots__ = ("dirty", "done", "error", "floors")

    def __init__(self) -> None:
        self.done = gevent.event.Event()
        self.dirty = False
        self.error: BaseException | None = None
        # (column family, partition) -> the lowest key of this group in that partition
        self.floors: dict[tuple[str, int], bytes] = {}


class _Cursors:
    """Iterators of scans that stopped at their row limit, kept for the call that goes on.

    A lagging consumer reads a partition in chunks (``messageScannerGetList``); a fresh RocksDB
    iterator per chunk seeks again in the memtables and in every level (every L0 file spans
    all partitions), which made reading a large backlog markedly slower than reading fresh
    data. An iterator pins the memtables and files it reads, so few are kept, briefly: at
    most ``MAX`` for at most ``MAX_AGE`` seconds, and none across a dropped column family.
    Keyed by (column family, partition, reverse) and the bound the next call starts from.
    """

    MAX = 256
    MAX_AGE = 5.0

    def __init__(self) -> None:
        self._kept: OrderedDict[tuple[str, int, bool, bytes], tuple[float, Any]] = OrderedDict()

    def take(self, slot: tuple[str, int, bool], start: bytes) -> Any:
        entry = self._kept.pop((*slot, start), None)
        if entry is None or time.monotonic() - entry[0] > self.MAX_AGE:
            return None
        return entry[1]

    def keep(self, slot: tuple[str, int, bool], start: bytes, items: Any) -> None:
        kept = self._kept
        now = time.monotonic()
        while kept and (len(kept) >= self.MAX or now - next(iter(kept.values()))[0] > self.MAX_AGE):
            kept.popitem(last=False)
        kept[(*slot, start)] = (now, items)

    def drop(self, family: str | None = None) -> None:
        """Forgets the iterators of ``family`` (all, if None)."""
        if family is None:
            self._kept.clear()
            return
        for key in [k for k in self._kept if k[0] == family]:
            del self._kept[key]


class EmbeddedStore(PartitionStore):
    def __init__(self, data_dir: str | os.PathLike[str], *, ttl_sweep_interval: float = 60.0):
        if ttl_sweep_interval <= 0:
            raise ValueError("'ttl_sweep_interval' must be > 0 seconds")
        self.path = Path(data_dir) / "rocksdb"
        self.ttl_sweep_interval = ttl_sweep_interval
        self._db: Rdict | None = None
        self._queues: dict[str, QueueMeta] = {}
        self._families: dict[str, tuple[Rdict, Any]] = {}  # cf name -> (cf Rdict, cf handle)
        self._cursors = _Cursors()
        self._no_sync = WriteOptions()
        self._no_sync.sync = False
        self._current = _Group()
        self._flushing: _Group | None = None
        self._wake = gevent.event.Event()
        self._admin = gevent.lock.RLock()
        self._running = False
        self._committer: gevent.Greenlet | None = None
        self._sweeper: gevent.Greenlet | None = None

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        try:
            existing = Rdict.list_cf(str(self.path)) if (self.path / "CURRENT").exists() else []
            families = {name: _options() for name in existing if name != "default"}
            self._db = Rdict(str(self.path), _options(), column_families=families)
        except Exception as exc:  # rocksdict raises plain Exception
            raise StoreError(f"cannot open the embedded store at {self.path}: {exc}") from exc
        for key, value in self._db.items(from_key=_META_PREFIX):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(_META_PREFIX):
                break
            meta = QueueMeta.from_json(key[len(_META_PREFIX) :].decode(), value)
            self._queues[meta.name] = meta
        live = {self._family_name(m) for m in self._queues.values()}
        for name in existing:
            if name != "default" and name not in live:  # left over by a crash mid-truncate
                log.info("dropping orphaned column family %s", name)
                self._db.drop_column_family(name)
        for meta in self._queues.values():
            self._open_family(self._family_name(meta), create=False)
        self._running = True
        self._committer = gevent.spawn(self._commit_loop)
        self._sweeper = gevent.spawn(self._sweep_loop)
        log.info("embedded store open at %s with %d queue(s)", self.path, len(self._queues))

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if self._sweeper is not None:
            self._sweeper.kill()
        self._wake.set()
        if self._committer is not None:
            self._committer.join()
        self._families.clear()
        self._cursors.drop()
        if self._db is not None:
            try:
                self._db.flush_wal(True)
                self._db.close()
            except Exception as exc:
                log.warning("closing the embedded store: %s", exc)
            self._db = None

    # -- metadata -------------------------------------------------------------------------

    def list_queues(self) -> list[QueueMeta]:
        return sorted(self._queues.values(), key=lambda m: m.name)

    def get_queue(self, name: str) -> QueueMeta | None:
        return self._queues.get(name)

    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        with self._admin:  # admin changes yield on sync; one at a time
            if meta.name in self._queues:
                raise InvalidArgument("queueName", f"queue '{meta.name}' already exists")
            meta = meta.with_changes(generation=self._next_generation())
            self._open_family(self._family_name(meta), create=True)
            self._save_meta(meta)
            self._queues[meta.name] = meta
            return meta

    def delete_queue(self, name: str) -> None:
        with self._admin:  # admin changes yield on sync; one at a time
            meta = self._require(name)
            self._db_call(self._db_required().delete, _META_PREFIX + name.encode(), self._no_sync)
            self._await_sync()
            del self._queues[name]
            self._drop_family(self._family_name(meta))

    def truncate_queue(self, name: str) -> QueueMeta:
        with self._admin:  # admin changes yield on sync; one at a time
            old = self._require(name)
            new = old.with_changes(generation=self._next_generation())
            self._open_family(self._family_name(new), create=True)
            self._save_meta(new)
            self._queues[name] = new
            self._drop_family(self._family_name(old))
            return new

    def set_enabled(self, name: str, enabled: bool) -> QueueMeta:
        with self._admin:  # admin changes yield on sync; one at a time
            meta = self._require(name).with_changes(enabled=enabled)
            self._save_meta(meta)
            self._queues[name] = meta
            return meta

    # -- small metadata records -----------------------------------------------------------

    def get_record(self, namespace: str, key: str) -> bytes | None:
        value = self._db_call(self._db_required().get, _record_key(namespace, key))
        return value if isinstance(value, bytes) else None

    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        db = self._db_required()
        self._db_call(db.put, _record_key(namespace, key), value, self._no_sync)
        self._await_sync()

    def delete_record(self, namespace: str, key: str) -> None:
        db = self._db_required()
        self._db_call(db.delete, _record_key(namespace, key), self._no_sync)
        self._await_sync()

    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        start = _record_key(namespace, prefix)
        skip = len(_record_key(namespace, ""))
        out: list[tuple[str, bytes]] = []
        for key, value in self._db_required().items(from_key=start):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(start):
                break
            out.append((key[skip:].decode(), value))
        return out

    # -- data -----------------------------------------------------------------------------

    def last_id(self, queue: QueueMeta, partition: int) -> MessageId | None:
        cf, _ = self._family(queue)
        ro = ReadOptions()
        ro.set_iterate_upper_bound(rowkey.partition_end(partition))
        it = cf.iter(ro)
        it.seek_to_last()
        if not it.valid():
            return None
        p, ts, seq = _KEY.unpack(it.key())
        return MessageId(ts, seq) if p == partition else None

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        family = self._family_name(queue)
        _, handle = self._family(queue)
        batch = WriteBatch(raw_mode=True)
        floors = self._current.floors
        put = batch.put
        for partition, keys, topics, values in batches:
            if not keys:
                continue
            floors.setdefault((family, partition), keys[0])
            put_cells(put, handle, keys, topics, values)
        if not batch.len():
            return
        self._db_call(self._db_required().write, batch, self._no_sync)
        self._await_sync()

    def scan(
        self,
        queue: QueueMeta,
        partition: int,
        lower: bytes,
        upper: bytes,
        *,
        reverse: bool,
        topics: Collection[bytes] | None,
        limit: int,
    ) -> ScanResult:
        family = self._family_name(queue)
        cf, _ = self._family(queue)
        floor = self._pending_floor(family, partition)
        if floor is not None and floor < upper:
            upper = floor
        if lower >= upper:
            return ScanResult([], None, 0)
        # A scan that goes on where an earlier one stopped reuses that one's iterator (see
        # _Cursors): no new seek through the memtables and every level.
        start = upper if reverse else lower
        slot = (family, partition, reverse)
        items = self._cursors.take(slot, start)
        kept = items is not None
        if items is None:
            items = self._iterate(cf, start, upper, reverse)
        rows: list[Row] = []
        append = rows.append
        unpack = _KEY.unpack
        size = 0
        budget = MAX_EXAMINED_PER_SCAN
        while True:
            for key, cell in items:
                if key < lower or key >= upper:  # lower: rocksdict ignores iterate_lower_bound
                    return ScanResult(rows, None, size)
                n = cell[0] + 1
                topic = cell[1:n]
                if topics is None or topic in topics:
                    _, ts, seq = unpack(key)
                    append((ts, seq, topic, cell[n:]))
                    size += len(cell)
                    if len(rows) >= limit:
                        self._cursors.keep(slot, key if reverse else key + b"\x00", items)
                        return ScanResult(rows, key, size)
                budget -= 1
                if not budget:
                    self._cursors.keep(slot, key if reverse else key + b"\x00", items)
                    return ScanResult(rows, key, size)
            if not kept:
                return ScanResult(rows, None, size)
            # A kept iterator sees the store as it was when it was made: its end is not the
            # range's end. Newer rows sort after it (ids grow), so a forward scan goes on from
            # where it got to with a fresh iterator; a reverse one has seen everything below.
            if reverse:
                return ScanResult(rows, None, size)
            kept = False
            resume = rowkey.encode(partition, rows[-1][0], rows[-1][1]) + b"\x00" if rows else lower
            if resume >= upper:
                return ScanResult(rows, None, size)
            items = self._iterate(cf, resume, upper, reverse)

    @staticmethod
    def _iterate(cf: Rdict, start: bytes, upper: bytes, reverse: bool) -> Any:
        ro = ReadOptions()
        ro.set_iterate_upper_bound(upper)
        # items() steps the iterator once per row (iter() needs key, value and next calls);
        # backwards it starts at the last key below ``upper``.
        return iter(cf.items(backwards=reverse, from_key=start, read_opt=ro))

    # -- group commit ---------------------------------------------------------------------

    def _await_sync(self) -> None:
        """Waits until everything written so far is on disk (the next group commit)."""
        group = self._current
        group.dirty = True
        self._wake.set()
        group.done.wait()
        if group.error is not None:
            raise StoreError(f"syncing the write-ahead log failed: {group.error}")

    def _commit_loop(self) -> None:
        pool = gevent.get_hub().threadpool
        while True:
            if self._running:
                self._wake.wait()
            self._wake.clear()
            group = self._current
            if not group.dirty:
                if not self._running:
                    return
                continue
            self._current = _Group()
            self._flushing = group
            try:
                pool.apply(self._db_required().flush_wal, (True,))
            except Exception as exc:
                log.error("WAL sync failed: %s", exc)
                group.error = exc
            self._flushing = None
            group.done.set()

    def _pending_floor(self, family: str, partition: int) -> bytes | None:
        slot = (family, partition)
        floor = self._current.floors.get(slot)
        if self._flushing is not None:
            other = self._flushing.floors.get(slot)
            if other is not None and (floor is None or other < floor):
                floor = other
        return floor

    # -- TTL ------------------------------------------------------------------------------

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
        for meta in list(self._queues.values()):
            try:
                swept += self._sweep_queue(meta, now_ms - meta.ttl_seconds * 1000)
            except HQueueError as exc:  # truncated or deleted meanwhile: nothing to sweep
                if self._queues.get(meta.name) == meta:
                    raise
                log.debug("skipping the TTL sweep of %s: %s", meta.name, exc)
        return swept

    def _sweep_queue(self, meta: QueueMeta, cutoff: int) -> int:
        if cutoff <= 0:
            return 0
        cf, _ = self._family(meta)
        first = last = None
        swept = partition = 0
        while partition < meta.partitions and self._queues.get(meta.name) == meta:
            it = cf.iter(ReadOptions())
            it.seek(rowkey.partition_start(partition))
            if not it.valid():
                break
            p, ts, _ = _KEY.unpack(it.key())
            if ts < cutoff:
                cf.delete_range(rowkey.partition_start(p), rowkey.encode(p, cutoff, 0))
                first = p if first is None else first
                last = p
                swept += 1
            partition = p + 1
            gevent.sleep(0)  # one seek per non-empty partition; let puts through
        if first is None or last is None:
            return 0
        begin, end = rowkey.partition_start(first), rowkey.partition_end(last)
        gevent.get_hub().threadpool.apply(cf.compact_range, (begin, end))
        return swept

    # -- helpers --------------------------------------------------------------------------

    def _db_required(self) -> Rdict:
        if self._db is None:
            raise StoreError("the embedded store is closed")
        return self._db

    @staticmethod
    def _db_call(fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            raise StoreError(f"embedded store: {exc}") from exc

    def _require(self, name: str) -> QueueMeta:
        meta = self._queues.get(name)
        if meta is None:
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        return meta

    @staticmethod
    def _family_name(meta: QueueMeta) -> str:
        return f"{meta.name}@{meta.generation}"

    def _family(self, meta: QueueMeta) -> tuple[Rdict, Any]:
        family = self._families.get(self._family_name(meta))
        if family is None:
            raise InvalidArgument(
                "queueName", f"queue '{meta.name}' was truncated or deleted meanwhile"
            )
        return family

    def _open_family(self, name: str, *, create: bool) -> None:
        db = self._db_required()
        if create:
            self._db_call(db.create_column_family, name, _options())
        cf = self._db_call(db.get_column_family, name)
        handle = self._db_call(db.get_column_family_handle, name)
        self._families[name] = (cf, handle)

    def _drop_family(self, name: str) -> None:
        self._families.pop(name, None)
        self._cursors.drop(name)
        self._db_call(self._db_required().drop_column_family, name)

    def _next_generation(self) -> int:
        db = self._db_required()
        raw = db.get(_GENERATION_KEY)
        generation = (int(raw) if raw else 0) + 1
        self._db_call(db.put, _GENERATION_KEY, str(generation).encode(), self._no_sync)
        self._await_sync()
        return generation

    def _save_meta(self, meta: QueueMeta) -> None:
        db = self._db_required()
        self._db_call(db.put, _META_PREFIX + meta.name.encode(), meta.to_json(), self._no_sync)
        self._await_sync()


def _record_key(namespace: str, key: str) -> bytes:
    if "\x00" in namespace:
        raise ValueError("'namespace' must not contain NUL")
    return _RECORD_PREFIX + namespace.encode() + b"\x00" + key.encode()
