"""The embedded store: RocksDB (through rocksdict) on local disk, nothing else to install.

Layout: a queue's partitions are split into regions as on HBase (``partitionsPerRegion``, by
default one partition each, at most ``MAX_FAMILIES_PER_QUEUE`` regions, ``FAMILY_BUDGET`` over all
queues), and each region is a
column family ``<name>@<generation>#<region>``, so truncate and re-create swap in fresh families
and drop the old ones at once. The default family holds queue metadata. Keys are the shared row
keys of :mod:`gateway.rowkey`; a value is topic length + topic + body.

Why regions: a partition only ever grows at its end, so in a family of its own new data never
overlaps older data and compaction writes each byte about once. One family for all partitions
made every flushed file (new rows of every partition) overlap the whole older key range:
compaction rewrote the stored backlog again and again (4.8x the flushed bytes with 10 million
messages stored, against 1.0x per partition), taking the CPU puts needed. Queues made before
regions existed (no ``families`` in their metadata) keep their one ``<name>@<generation>``
family until they are truncated.

Durability with group commit: messages go to a write-ahead log of the store's own
(:mod:`gateway.store.wal`) and into RocksDB's memtables without RocksDB's log. A put appends its
record, starts an fdatasync of the log on the C thread of :class:`gateway._wal.Syncer` if none
is running, fills the memtable while the disk works, and waits for the sync. Every put that
arrives during one sync shares the next one, and the loop keeps serving meanwhile. Rows are
visible to scans only once durable: each partition's lowest not-yet-synced key bounds every
scan. Log segments are reused once RocksDB holds their rows in its files (after
``LOG_SEGMENTS_KEPT`` more have filled; families that have not flushed them by then are
flushed). On start the log's records after its checkpoint are applied again. Queue metadata
and small records still go through RocksDB's own log, synced in the thread pool by one
committer greenlet.

TTL: rows older than their queue's TTL are filtered by every scan (the service clamps the
range); a sweeper greenlet deletes expired key ranges with range tombstones and compacts them
away in the thread pool (RocksDB compaction also releases the GIL), so puts never wait for it.
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import struct
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    BlockBasedOptions,
    DBCompressionType,
    Options,
    Rdict,
    ReadOptions,
    WriteBatch,
    WriteOptions,
)

from .. import rowkey
from ..errors import HQueueError, InvalidArgument, StoreError
from ..fast import Syncer, put_wal_cells, scan_cells, wal_cells
from ..ids import wall_clock_ms
from ..rowkey import MessageId
from .base import Extra, PartitionStore, PutBatch, QueueMeta, Row, ScanResult
from .gate import Gate
from .wal import SEGMENT_BYTES, LogError, WriteAheadLog

log = logging.getLogger(__name__)

_META_PREFIX = b"queue\x00"
_GENERATION_KEY = b"generation"
# Small records (see PartitionStore.get_record): b"record\x00" + namespace + b"\x00" + key.
_RECORD_PREFIX = b"record\x00"
_KEY = struct.Struct(">hqh")
# A log record holds, for each partition it writes: family name length, cells length (then
# the name and the cells of gateway._wal.wal_cells).
_BLOCK = struct.Struct("<HI")
# Message keys and properties (PartitionStore.put_extras) live in a column family of their
# own, keyed by the queue's generation (8 bytes), so truncate and delete drop a generation's
# with one range delete:
#   gen + b"E" + timestamp(8) + sequence(2) + partition(2)  -> the value
#   gen + b"K" + bucket(8) + len(key)(1) + key + ~timestamp(8) + ~sequence(2) + partition(2)
# Both begin with time, so the TTL sweep expires them with range deletes as it does the rows:
# values up to the cutoff, keys by whole time buckets (a bucket is 1/16 of the queue's TTL, at
# least a minute). Inside a bucket a key's entries come newest first (inverted ids), and
# find_by_key walks the buckets of the TTL from the newest.
EXTRAS_FAMILY = "hqueue.extras"
_GEN = struct.Struct(">q")
_VALUE_AT = struct.Struct(">qhh")  # timestamp, sequence, partition
_BUCKET = struct.Struct(">q")
_INVERTED = struct.Struct(">qhh")  # MAX - timestamp, MAX - sequence, partition
_BUCKETS_PER_TTL = 16
_MIN_BUCKET_MS = 60_000
# How many rows one scan call may look at before it hands control back (topic filters can
# skip many rows; the event loop must keep serving meanwhile).
MAX_EXAMINED_PER_SCAN = 4096
_SCAN_EXHAUSTED, _SCAN_OUT_OF_RANGE = 0, 1  # scan_cells' statuses (2, 3: limit, budget)
# Column families (regions) one queue gets at most; more partitions share them. RocksDB
# rewrites its whole OPTIONS file for every family it creates or drops, so the families of all
# queues together are capped too: past FAMILY_BUDGET a new queue gets one family (creating a
# queue then still takes milliseconds; 960 families made it take 2 s).
MAX_FAMILIES_PER_QUEUE = 16
FAMILY_BUDGET = 256
# Free disk space below which writes are refused (except deletes): see _check_space.
DISK_RESERVE_BYTES = 8 << 20
# Memtable memory of all families together; past it RocksDB flushes the largest.
MEMTABLES_BYTES = 256 << 20
# Full log segments kept before the oldest is reused. By then RocksDB has usually flushed
# the rows it holds itself (it flushes a memtable when it is full, or the largest when all
# together pass MEMTABLES_BYTES); only families whose memtables still hold rows from before
# it are flushed. Flushing every family at every segment instead made many small files and
# kept compaction busy: put latency (p99) under load and puts onto a large backlog suffered.
LOG_SEGMENTS_KEPT = 6
# RocksDB's data block size. Queues are read in long runs of consecutive rows, so big blocks
# (fewer block loads and checks per message) read a stored backlog about 12 % faster than 4 KiB.
BLOCK_BYTES = 64 << 10


def _options() -> Options:
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    opts.increase_parallelism(2)
    opts.set_max_background_jobs(2)
    opts.set_db_write_buffer_size(MEMTABLES_BYTES)
    # Recent data (L0, L1) is rewritten soonest: not compressed, so flushes and the first
    # compactions cost less CPU (put throughput +5-8 % here); LZ4 for what stays.
    none, lz4 = DBCompressionType.none(), DBCompressionType.lz4()
    opts.set_compression_per_level([none, none, lz4, lz4, lz4, lz4, lz4])
    table = BlockBasedOptions()
    table.set_block_size(BLOCK_BYTES)
    opts.set_block_based_table_factory(table)
    return opts


def families_for(meta: QueueMeta, in_use: int = 0) -> int:
    """How many column families (regions) a new generation of ``meta`` gets when the other
    queues have ``in_use``."""
    per_region = int(meta.config.get("hbase.hqueue.partitionsPerRegion", "1"))
    per_region = max(per_region, -(-meta.partitions // MAX_FAMILIES_PER_QUEUE))
    wanted = -(-meta.partitions // per_region)
    return wanted if in_use + wanted <= FAMILY_BUDGET else 1


class _Layout(NamedTuple):
    """Where a queue generation's partitions live: ``families`` column families of ``span``
    consecutive partitions each; ``legacy``: the one family of queues made before regions."""

    base: str  # <name>@<generation>
    generation: int
    families: int
    span: int
    legacy: bool

    @classmethod
    def of(cls, meta: QueueMeta, families: int | None) -> _Layout:
        base = f"{meta.name}@{meta.generation}"
        if families is None:
            return cls(base, meta.generation, 1, max(1, meta.partitions), True)
        span = -(-meta.partitions // families)
        return cls(base, meta.generation, families, span, False)

    def names(self) -> list[str]:
        if self.legacy:
            return [self.base]
        return [f"{self.base}#{i}" for i in range(self.families)]

    def name_of(self, partition: int) -> str:
        return self.base if self.legacy else f"{self.base}#{partition // self.span}"


class _Group:
    """Writes applied since the last log sync began; they become durable together."""

    __slots__ = ("began", "dirty", "done", "error", "floors", "messages", "puts")

    def __init__(self) -> None:
        self.done = gevent.event.Event()
        self.dirty = False
        self.error: BaseException | None = None
        self.puts = 0  # put calls in the group, and their messages (metrics)
        self.messages = 0
        self.began = 0.0  # time.perf_counter() when its sync started
        # (column family, partition) -> the lowest key of this group in that partition
        self.floors: dict[tuple[str, int], bytes] = {}


class _Cursors:
    """Iterators of scans that stopped at their row limit, kept for the call that goes on.

    A lagging consumer reads a partition in chunks (``messageScannerGetList``); a fresh RocksDB
    iterator per chunk seeks again in the memtables and in every level, which made reading a
    large backlog markedly slower than reading fresh data. An iterator pins the memtables and
    files it reads, so few are kept, briefly: at most ``MAX`` for at most ``MAX_AGE`` seconds,
    and none across a dropped column family.
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
        self.expire()
        kept = self._kept
        while len(kept) >= self.MAX:
            kept.popitem(last=False)
        kept[(*slot, start)] = (time.monotonic(), items)

    def expire(self) -> None:
        """Forgets the iterators too old to reuse, so none pins memory once scans stop."""
        kept = self._kept
        now = time.monotonic()
        while kept and now - next(iter(kept.values()))[0] > self.MAX_AGE:
            kept.popitem(last=False)

    def drop(self, family: str | None = None) -> None:
        """Forgets the iterators of ``family`` (all, if None)."""
        if family is None:
            self._kept.clear()
            return
        for key in [k for k in self._kept if k[0] == family]:
            del self._kept[key]


class EmbeddedStore(PartitionStore):
    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        ttl_sweep_interval: float = 60.0,
        log_segment_bytes: int = SEGMENT_BYTES,
    ):
        if ttl_sweep_interval <= 0:
            raise ValueError("'ttl_sweep_interval' must be > 0 seconds")
        self.path = Path(data_dir) / "rocksdb"
        self._wal = WriteAheadLog(Path(data_dir) / "wal", log_segment_bytes)
        self._syncer: Syncer | None = None
        self._no_wal = WriteOptions()
        # an attribute at run time; rocksdict's stub calls it a method
        self._no_wal.disable_wal = True  # type: ignore[method-assign,assignment]
        self._log_group = _Group()  # puts since the running log sync began
        self._log_flushing: _Group | None = None  # the puts the running log sync covers
        # called after each log sync: (puts, messages, seconds, failed); set by the metrics
        self.on_log_sync: Callable[[int, int, float, bool], None] | None = None
        self._written: dict[str, None] = {}  # families written in the active log segment
        self._rows: dict[str, int] = {}  # family -> rows put since start (and replayed)
        # full log segments, oldest first: (log epoch, last LSN, {family written: its _rows at
        # the end}); a reopen starts a new epoch, and what the old one queued is dropped
        self._closed: deque[_Closed] = deque()
        self._flushes: gevent.queue.Queue[_Closed | None] = gevent.queue.Queue()
        self._spare: gevent.Greenlet | None = None
        self._no_spare_until = 0.0  # monotonic time before which no spare is prepared
        self.ttl_sweep_interval = ttl_sweep_interval
        self._db: Rdict | None = None
        self._queues: dict[str, QueueMeta] = {}
        # queue name -> (its layout, [(column family Rdict, handle)] by region)
        self._families: dict[str, tuple[_Layout, list[tuple[Rdict, Any]]]] = {}
        self._cursors = _Cursors()
        self._no_sync = WriteOptions()
        self._no_sync.sync = False
        self._current = _Group()
        self._wake = gevent.event.Event()
        self._admin = gevent.lock.RLock()
        # Operations that use RocksDB pass the gate; a reopen closes it (see _heal_loop).
        self._gate = Gate()
        self._wedged = False  # RocksDB refuses every write after a background error
        self._bg_errors = 0  # its count of background errors when it was opened
        self._healer: gevent.Greenlet | None = None
        self._reopen_needs = 0  # bytes of memtables the reopen flushes
        self._running = False
        self._committer: gevent.Greenlet | None = None
        self._sweeper: gevent.Greenlet | None = None
        self._expirer: gevent.Greenlet | None = None
        self._log_syncer: gevent.Greenlet | None = None
        self._flusher: gevent.Greenlet | None = None
        self._extras: tuple[Rdict, Any] | None = None  # the family of keys and properties
        self._has_extras: dict[int, bool] = {}  # generation -> has any (cached)

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._open()
        self._syncer = Syncer()
        self._running = True
        self._committer = gevent.spawn(self._commit_loop)
        self._log_syncer = gevent.spawn(self._log_sync_loop)
        self._flusher = gevent.spawn(self._flush_loop)
        self._sweeper = gevent.spawn(self._sweep_loop)
        self._expirer = gevent.spawn(self._expire_loop)
        log.info("embedded store open at %s with %d queue(s)", self.path, len(self._queues))

    def _open(self) -> None:
        """Opens RocksDB, its queues and families, and replays the write-ahead log into it
        (at start, and when the store reopens itself: see _heal_loop). On failure everything
        opened is closed again."""
        try:
            existing = Rdict.list_cf(str(self.path)) if (self.path / "CURRENT").exists() else []
            families = {name: _options() for name in existing if name != "default"}
            self._db = Rdict(str(self.path), _options(), column_families=families)
        except Exception as exc:  # rocksdict raises plain Exception
            raise StoreError(f"cannot open the embedded store at {self.path}: {exc}") from exc
        try:
            self._load(existing)
        except BaseException:
            self._close()
            raise
        self._bg_errors = self._db.property_int_value("rocksdb.background-errors") or 0

    def _load(self, existing: list[str]) -> None:
        assert self._db is not None
        self._queues = {}
        layouts: dict[str, _Layout] = {}
        for key, value in self._db.items(from_key=_META_PREFIX):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(_META_PREFIX):
                break
            meta = QueueMeta.from_json(key[len(_META_PREFIX) :].decode(), value)
            self._queues[meta.name] = meta
            layouts[meta.name] = _Layout.of(meta, json.loads(value).get("families"))
        live = {name for layout in layouts.values() for name in layout.names()}
        live.add(EXTRAS_FAMILY)
        for name in existing:
            if name != "default" and name not in live:  # left over by a crash mid-truncate
                log.info("dropping orphaned column family %s", name)
                self._db.drop_column_family(name)
        for name, layout in layouts.items():
            self._open_families(name, layout, create=False)
        self._open_extras(create=EXTRAS_FAMILY not in existing)
        try:
            self._replay()
        except (OSError, LogError, ValueError) as exc:
            raise StoreError(f"cannot recover the log in {self._wal.dir}: {exc}") from exc

    def _close(self) -> None:
        """Closes the log and RocksDB without flushing anything (what RocksDB loses, the log
        holds). Every reference to RocksDB must be gone before it can be opened again: it
        keeps its lock file while a family, handle or iterator lives."""
        self._wal.close()
        self._families.clear()
        self._extras = None
        self._cursors.drop()
        if self._db is not None:
            try:
                self._db.close()
            except Exception as exc:
                log.warning("closing the embedded store: %s", exc)
            self._db = None
        gc.collect()  # a traceback kept in a cycle may still hold an iterator

    def stop(self) -> None:
        if not self._running:
            return
        self._running = False
        if self._sweeper is not None:
            self._sweeper.kill()
        if self._expirer is not None:
            self._expirer.kill()
        if self._healer is not None:
            self._healer.kill()
        self._wake.set()
        if self._committer is not None:
            self._committer.join()
        while self._log_flushing is not None:  # puts still waiting for their sync
            self._log_flushing.done.wait()
        if self._log_syncer is not None:
            self._log_syncer.kill()
        self._flushes.put(None)
        if self._flusher is not None:
            self._flusher.join()
        if self._spare is not None:
            self._spare.join()
        # A clean stop leaves nothing to replay; a wedged RocksDB (or one that was being
        # reopened) holds only part of the log: the next start replays it.
        if not self._wedged and self._db is not None:
            try:
                self._flush_families(self._live_families())
                self._wal.write_checkpoint(self._wal.last_lsn)
            except Exception as exc:
                log.warning("checkpointing the write-ahead log: %s", exc)
        if self._syncer is not None:
            self._syncer.close()
            self._syncer = None
        if self._db is not None:
            try:
                self._db.flush_wal(True)
            except Exception as exc:
                log.warning("closing the embedded store: %s", exc)
        self._close()

    # -- metadata -------------------------------------------------------------------------

    def list_queues(self) -> list[QueueMeta]:
        return sorted(self._queues.values(), key=lambda m: m.name)

    def get_queue(self, name: str) -> QueueMeta | None:
        return self._queues.get(name)

    def create_queue(self, meta: QueueMeta) -> QueueMeta:
        with self._gate.passing():  # see _heal_loop
            self._check_space()
            with self._admin:  # admin changes yield on sync; one at a time
                if meta.name in self._queues:
                    raise InvalidArgument("queueName", f"queue '{meta.name}' already exists")
                meta = meta.with_changes(generation=self._next_generation())
                layout = _Layout.of(meta, families_for(meta, self._families_in_use()))
                try:
                    self._open_families(meta.name, layout, create=True)
                    self._save_meta(meta)
                except BaseException:
                    self._families.pop(meta.name, None)
                    self._undo_families(layout)
                    with contextlib.suppress(Exception):
                        self._db_required().delete(_META_PREFIX + meta.name.encode(), self._no_sync)
                    raise
                self._queues[meta.name] = meta
                return meta

    def delete_queue(self, name: str) -> None:
        with self._gate.passing(), self._admin:  # see _heal_loop; one admin change at a time
            self._require(name)
            self._db_call(self._db_required().delete, _META_PREFIX + name.encode(), self._no_sync)
            self._await_sync()
            old = self._queues.pop(name)
            self._drop_families(name)
            self._drop_extras(old.generation)

    def truncate_queue(self, name: str) -> QueueMeta:
        with self._gate.passing():  # see _heal_loop
            self._check_space()
            with self._admin:  # admin changes yield on sync; one at a time
                old = self._require(name)
                new = old.with_changes(generation=self._next_generation())
                old_families = self._families[name]
                in_use = self._families_in_use() - old_families[0].families
                layout = _Layout.of(new, families_for(new, in_use))
                try:
                    # Puts go on into the old families while the new ones are made (off the loop).
                    opened = self._make_families(layout)
                    self._families[name] = (layout, opened)
                    self._save_meta(new)
                except BaseException:
                    # All or nothing: a truncate that failed (a full disk: RocksDB could not write
                    # its OPTIONS file) left the queue without families, answering IllegalArgument
                    # for good. Put the old generation back and forget the new one.
                    self._families[name] = old_families
                    self._undo_families(layout)
                    with contextlib.suppress(Exception):
                        self._save_meta(old)
                    raise
                self._queues[name] = new
                self._drop(old_families[0])
                self._drop_extras(old.generation)
                return new

    def set_enabled(self, name: str, enabled: bool) -> QueueMeta:
        with self._gate.passing():  # see _heal_loop
            self._check_space()
            with self._admin:  # admin changes yield on sync; one at a time
                meta = self._require(name).with_changes(enabled=enabled)
                self._save_meta(meta)
                self._queues[name] = meta
                return meta

    # -- small metadata records -----------------------------------------------------------

    def get_record(self, namespace: str, key: str) -> bytes | None:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        value = self._db_call(self._db_required().get, _record_key(namespace, key))
        return value if isinstance(value, bytes) else None

    def put_record(self, namespace: str, key: str, value: bytes) -> None:
        with self._gate.passing():  # see _heal_loop
            self._check_space()
            db = self._db_required()
            self._db_call(db.put, _record_key(namespace, key), value, self._no_sync)
            self._await_sync()

    def delete_record(self, namespace: str, key: str) -> None:
        with self._gate.passing():  # see _heal_loop
            db = self._db_required()
            self._db_call(db.delete, _record_key(namespace, key), self._no_sync)
            self._await_sync()

    def list_records(self, namespace: str, prefix: str = "") -> list[tuple[str, bytes]]:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        start = _record_key(namespace, prefix)
        skip = len(_record_key(namespace, ""))
        out: list[tuple[str, bytes]] = []
        for key, value in self._db_required().items(from_key=start):
            assert isinstance(key, bytes) and isinstance(value, bytes)  # raw mode
            if not key.startswith(start):
                break
            out.append((key[skip:].decode(), value))
        return out

    # -- message keys and properties ------------------------------------------------------

    def put_extras(self, queue: QueueMeta, items: Sequence[Extra]) -> None:
        with self._gate.passing():  # see _heal_loop
            if not items:
                return
            self._check_space()
            self._family(queue, 0)  # the queue's generation is still current
            _, handle = self._extras_family()
            gen = _GEN.pack(queue.generation)
            width = _bucket_ms(queue)
            batch = WriteBatch(raw_mode=True)
            for partition, (ts, seq), key, value in items:
                batch.put(gen + b"E" + _VALUE_AT.pack(ts, seq, partition), value, handle)
                if key is not None:
                    at = _INVERTED.pack(
                        rowkey.MAX_TIMESTAMP - ts, rowkey.MAX_SEQUENCE - seq, partition
                    )
                    entry = gen + b"K" + _BUCKET.pack(ts // width) + bytes((len(key),)) + key + at
                    batch.put(entry, b"", handle)
            self._db_call(self._db_required().write, batch, self._no_sync)  # RocksDB's own log
            self._has_extras[queue.generation] = True
            self._await_sync()

    def get_extras(
        self, queue: QueueMeta, partition: int, ids: Sequence[MessageId]
    ) -> dict[MessageId, bytes]:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        if not ids:
            return {}
        cf, _ = self._extras_family()
        gen = _GEN.pack(queue.generation)
        cutoff = wall_clock_ms() - queue.ttl_seconds * 1000
        wanted = [MessageId(*mid) for mid in ids if mid[0] >= cutoff]
        keys = [gen + b"E" + _VALUE_AT.pack(ts, seq, partition) for ts, seq in wanted]
        values = self._db_call(cf.get, keys) if keys else []
        return {mid: v for mid, v in zip(wanted, values, strict=True) if v is not None}

    def find_by_key(self, queue: QueueMeta, key: bytes, limit: int) -> list[tuple[int, MessageId]]:
        with self._gate.passing():  # see _heal_loop
            if not self.has_extras(queue):
                return []
            cf, _ = self._extras_family()
            gen = _GEN.pack(queue.generation)
            width = _bucket_ms(queue)
            now = wall_clock_ms()
            cutoff = now - queue.ttl_seconds * 1000
            found: list[tuple[int, MessageId]] = []
            tail = bytes((len(key),)) + key
            # from the bucket after now (ids may run a little ahead of the clock) down to the
            # bucket of the cutoff
            for bucket in range(now // width + 1, cutoff // width - 1, -1):
                prefix = gen + b"K" + _BUCKET.pack(bucket) + tail
                it = cf.iter(ReadOptions())
                it.seek(prefix)
                while it.valid():
                    entry = it.key()
                    if not entry.startswith(prefix) or len(entry) != len(prefix) + _INVERTED.size:
                        if not entry.startswith(prefix):
                            break
                        it.next()  # a longer key that begins with this one
                        continue
                    inv_ts, inv_seq, partition = _INVERTED.unpack_from(entry, len(prefix))
                    ts = rowkey.MAX_TIMESTAMP - inv_ts
                    if ts < cutoff:
                        break  # the rest of this bucket is older still
                    found.append((partition, MessageId(ts, rowkey.MAX_SEQUENCE - inv_seq)))
                    if len(found) >= limit:
                        return found
                    it.next()
                gevent.sleep(0)
            return found

    def has_extras(self, queue: QueueMeta) -> bool:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        known = self._has_extras.get(queue.generation)
        if known is None:
            cf, _ = self._extras_family()
            gen = _GEN.pack(queue.generation)
            it = cf.iter(ReadOptions())
            it.seek(gen)
            known = self._has_extras[queue.generation] = it.valid() and it.key().startswith(gen)
        return known

    def _extras_family(self) -> tuple[Rdict, Any]:
        if self._extras is None:
            raise StoreError("the embedded store is closed")
        return self._extras

    def _open_extras(self, *, create: bool) -> None:
        db = self._db_required()
        if create:
            db.create_column_family(EXTRAS_FAMILY, _options())
        self._extras = (
            db.get_column_family(EXTRAS_FAMILY),
            db.get_column_family_handle(EXTRAS_FAMILY),
        )
        # generations of queues deleted or truncated meanwhile (a crash mid-way) go now
        live = {meta.generation for meta in self._queues.values()}
        cf = self._extras[0]
        it = cf.iter(ReadOptions())
        it.seek_to_first()
        while it.valid():
            (generation,) = _GEN.unpack_from(it.key())
            if generation not in live:
                self._drop_extras(generation)
            it.seek(_GEN.pack(generation + 1))

    def _drop_extras(self, generation: int) -> None:
        self._has_extras.pop(generation, None)
        if self._extras is None:
            return
        cf = self._extras[0]
        self._db_call(cf.delete_range, _GEN.pack(generation), _GEN.pack(generation + 1))

    def _sweep_extras(self, meta: QueueMeta, cutoff: int) -> list[tuple[bytes, bytes]]:
        """Deletes the keys and properties of messages older than ``cutoff``; the ranges."""
        if cutoff <= 0 or not self.has_extras(meta):
            return []
        cf, _ = self._extras_family()
        gen = _GEN.pack(meta.generation)
        ranges = [
            (gen + b"E", gen + b"E" + _VALUE_AT.pack(cutoff, 0, 0)),
            (gen + b"K", gen + b"K" + _BUCKET.pack(cutoff // _bucket_ms(meta))),
        ]
        for begin, end in ranges:
            self._db_call(cf.delete_range, begin, end)
        return ranges

    # -- data -----------------------------------------------------------------------------

    def last_id(self, queue: QueueMeta, partition: int) -> MessageId | None:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        _, (cf, _) = self._family(queue, partition)
        ro = ReadOptions()
        ro.set_iterate_upper_bound(rowkey.partition_end(partition))
        it = cf.iter(ro)
        it.seek_to_last()
        if not it.valid():
            return None
        p, ts, seq = _KEY.unpack(it.key())
        return MessageId(ts, seq) if p == partition else None

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        with self._gate.passing():  # see _heal_loop
            self._check_space()
            db = self._db_required()
            parts: list[bytes] = []
            rows: list[tuple[Any, bytes]] = []
            group = self._log_group
            floors = group.floors
            names: list[tuple[str, int]] = []  # (family, rows) per batch
            for partition, keys, topics, values in batches:
                if not keys:
                    continue
                layout, (_, handle) = self._family(queue, partition)
                name = layout.name_of(partition)
                cells = wal_cells(keys, topics, values)
                raw_name = name.encode()
                parts += (_BLOCK.pack(len(raw_name), len(cells)), raw_name, cells)
                rows.append((handle, cells))
                names.append((name, len(keys)))
                floors.setdefault((layout.base, partition), keys[0])
            if not rows:
                return
            try:
                closed = self._wal.append(parts)
                if closed is not None:  # a full segment ended at LSN ``closed``
                    rows_at = {name: self._rows[name] for name in self._written}
                    self._closed.append(_Closed(self._wal.epoch, closed, rows_at))
                    self._written = {}
                    while len(self._closed) > LOG_SEGMENTS_KEPT:
                        self._flushes.put(self._closed.popleft())
            except (OSError, LogError) as exc:
                raise StoreError(_explain(exc, "writing the write-ahead log failed")) from exc
            for name, count in names:
                self._written[name] = None
                self._rows[name] = self._rows.get(name, 0) + count
            group.dirty = True
            group.puts += 1
            group.messages += sum(count for _, count in names)
            if self._log_flushing is None:
                self._kick_log_sync()
            # The sync runs on its own thread while the memtable fills here.
            batch = WriteBatch(raw_mode=True)
            for handle, cells in rows:
                put_wal_cells(batch.put, handle, cells)
            try:
                db.write(batch, self._no_wal)
            except Exception as exc:
                if not self._note_failure():
                    raise StoreError(_explain(exc, "embedded store")) from exc
                # RocksDB stopped writing (a flush failed for want of space), but this put's
                # record is in the log: once synced it is as durable as any other and the
                # reopen applies it (see _heal_loop). Refusing it would let a client's retry
                # store it twice.
            if (
                self._spare is None
                and self._wal.wants_spare()
                and time.monotonic() >= self._no_spare_until
            ):
                self._spare = gevent.spawn(self._make_spare)
            group.done.wait()
            if group.error is not None:
                raise StoreError(_explain(group.error, "syncing the write-ahead log failed"))

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
        max_bytes: int | None = None,
    ) -> ScanResult:
        self._gate.wait_open()  # not while the store reopens (see _heal_loop)
        layout, (cf, _) = self._family(queue, partition)
        if max_bytes is None:
            max_bytes = 1 << 62
        family = layout.base
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
        size = 0
        budget = MAX_EXAMINED_PER_SCAN
        wanted = topics if topics is None or isinstance(topics, (set, frozenset)) else set(topics)
        while True:
            # the per-row loop runs in C (gateway/_wal.c, scan_cells): bounds (lower,
            # since rocksdict ignores iterate_lower_bound), topic filter, row tuples
            status, key, added, budget = scan_cells(
                items, lower, upper, wanted, limit, budget, rows, max_bytes - size
            )
            size += added
            if status == _SCAN_OUT_OF_RANGE:
                return ScanResult(rows, None, size)
            if status != _SCAN_EXHAUSTED:  # the limit, max_bytes, or the rows-examined budget
                assert key is not None
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
            try:
                pool.apply(self._db_required().flush_wal, (True,))
            except Exception as exc:
                log.error("WAL sync failed: %s", exc)
                self._note_failure()
                group.error = exc
            group.done.set()

    # -- the write-ahead log of messages ----------------------------------------------------

    def _kick_log_sync(self) -> None:
        assert self._syncer is not None
        group = self._log_group
        self._log_group = _Group()
        self._log_flushing = group
        group.began = time.perf_counter()
        self._syncer.kick(self._wal.take_unsynced())

    def _log_sync_loop(self) -> None:
        assert self._syncer is not None
        hub = gevent.get_hub()
        watcher = hub.loop.io(self._syncer.fileno(), 1)
        while True:
            hub.wait(watcher)
            err = self._syncer.finish()
            group = self._log_flushing
            if err is None or group is None:
                continue
            self._log_flushing = None
            if err:
                log.error("write-ahead log sync failed: %s", os.strerror(err))
                group.error = OSError(err, os.strerror(err))
            if self.on_log_sync is not None:
                self.on_log_sync(
                    group.puts, group.messages, time.perf_counter() - group.began, bool(err)
                )
            group.done.set()
            if self._log_group.dirty:
                self._kick_log_sync()

    def _flush_loop(self) -> None:
        """Flushes the families a closed log segment wrote to, then lets the log reuse it."""
        pool = gevent.get_hub().threadpool
        while True:
            item = self._flushes.get()
            if item is None:
                return
            epoch, lsn, rows_at = item
            while not self._flushes.empty():  # catch up: one flush for all that waited
                more = self._flushes.peek()
                if more is None:
                    break
                self._flushes.get()
                epoch, lsn = more.epoch, more.lsn
                rows_at = {**rows_at, **more.rows_at}  # the later count wins
            while self._running:
                if self._wedged:  # no checkpoint while RocksDB may lack rows: the reopen
                    gevent.sleep(0.2)  # flushes everything and makes this item stale
                    continue
                try:
                    with self._gate.passing():
                        # A reopen replayed and flushed the log and began a new epoch: what
                        # was queued before it is done (and its LSNs must not be checkpointed).
                        if epoch == self._wal.epoch:
                            self._flush_families(self._holding_rows_before(rows_at), pool)
                            pool.apply(self._wal.write_checkpoint, (lsn,))
                            self._wal.release(lsn)
                    break
                except Exception as exc:
                    self._note_failure()
                    log.error("flushing for the write-ahead log failed (will retry): %s", exc)
                # not in the except block: its traceback holds column families, and RocksDB
                # cannot be reopened while any of them lives
                gevent.sleep(1.0)

    def _holding_rows_before(self, rows_at: dict[str, int]) -> dict[str, tuple[Rdict, Any]]:
        """The live families among ``rows_at`` whose memtables may still hold rows put before
        their count reached ``rows_at[name]``: a memtable holding more entries than were put
        since then does (range deletes count too, which only errs towards flushing)."""
        live = self._live_families()
        out: dict[str, tuple[Rdict, Any]] = {}
        for name, mark in rows_at.items():
            if name not in live:
                continue  # dropped: nothing to keep
            cf = live[name][0]
            active = cf.property_int_value("rocksdb.num-entries-active-mem-table")
            older = cf.property_int_value("rocksdb.num-entries-imm-mem-tables")
            if active is None or older is None or active + older > self._rows[name] - mark:
                out[name] = live[name]
        return out

    def _flush_families(self, families: dict[str, tuple[Rdict, Any]], pool: Any = None) -> None:
        for name, (cf, _) in families.items():
            try:
                if pool is None:
                    cf.flush(True)
                else:
                    pool.apply(cf.flush, (True,))
            except Exception:
                if name in self._live_families():
                    raise  # dropped meanwhile (truncate, delete): nothing to keep

    def _live_families(self) -> dict[str, tuple[Rdict, Any]]:
        """Every open column family by name: (its Rdict, its handle)."""
        live: dict[str, tuple[Rdict, Any]] = {}
        for layout, families in self._families.values():
            live.update(zip(layout.names(), families, strict=True))
        return live

    def _make_spare(self) -> None:
        try:
            made = gevent.get_hub().threadpool.apply(
                self._wal.make_spare, (self._wal.reserve_number(),)
            )
            self._wal.add_spare(made)
        except Exception as exc:
            # Not again for a while: on a full disk every attempt writes a segment of zeros.
            self._no_spare_until = time.monotonic() + 10.0
            log.warning("preparing a write-ahead log segment: %s", _explain(exc, "failed"))
        finally:
            self._spare = None

    def _replay(self) -> None:
        """Applies the log's records that RocksDB may not have (after a crash) and starts a new
        log epoch."""
        records = self._wal.recover()
        if records:
            db = self._db_required()
            live = self._live_families()
            handles = {name.encode(): handle for name, (_, handle) in live.items()}
            rows = 0
            for _, payload in records:
                batch = WriteBatch(raw_mode=True)
                rows += _apply_record(payload, batch.put, handles)
                db.write(batch, self._no_wal)
            # off the loop when the store reopens itself (see _heal_loop)
            self._flush_families(live, gevent.get_hub().threadpool if self._running else None)
            log.info("replayed %d log record(s), %d message(s)", len(records), rows)
        self._wal.start()

    def _pending_floor(self, family: str, partition: int) -> bytes | None:
        slot = (family, partition)
        floor = self._log_group.floors.get(slot)
        if self._log_flushing is not None:
            other = self._log_flushing.floors.get(slot)
            if other is not None and (floor is None or other < floor):
                floor = other
        return floor

    # -- TTL ------------------------------------------------------------------------------

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
            p, ts, _ = _KEY.unpack(it.key())
            if p >= region_end:  # the rest of this region is empty
                partition = region_end
                continue
            if ts < cutoff:
                cf.delete_range(rowkey.partition_start(p), rowkey.encode(p, cutoff, 0))
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

    # -- helpers --------------------------------------------------------------------------

    def _check_space(self) -> None:
        """Refuses writes once the disk has less than ``DISK_RESERVE_BYTES`` free, and while
        RocksDB is wedged (see _heal_loop).

        Why: a write to RocksDB's own log (queue metadata, small records) that fails for want
        of space puts RocksDB in a background-error state that refuses every later write, even
        once space is freed (rocksdict cannot resume it). Stopping short of the full disk keeps
        that from happening; deleting a queue and deleting records are not refused, so freeing
        space through the gateway still works. A memtable flush larger than the reserve can
        still fail: then the store reopens RocksDB once there is room again.
        """
        if self._wedged:
            raise StoreError(
                f"the disk is full: RocksDB stopped writing when it found no room to flush in "
                f"{self.path}; the store reopens it by itself once "
                f"{(DISK_RESERVE_BYTES + self._reopen_needs) >> 20} MiB are free: free space "
                "(e.g. remove files) and retry"
            )
        free = _free_bytes(self.path)
        if free is not None and free < DISK_RESERVE_BYTES:
            raise StoreError(
                f"the disk is full: {free >> 10} KiB free in {self.path}, below the "
                f"{DISK_RESERVE_BYTES >> 20} MiB the store keeps in reserve; free space (e.g. "
                "delete a queue) and retry"
            )

    def _db_required(self) -> Rdict:
        if self._db is None:
            raise StoreError("the embedded store is closed")
        return self._db

    def _db_call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            self._note_failure()
            raise StoreError(_explain(exc, "embedded store")) from exc

    # -- a wedged RocksDB -----------------------------------------------------------------

    def _note_failure(self) -> bool:
        """After a failed RocksDB call: whether RocksDB is wedged (it counted a background
        error since it was opened: a flush or a write to its log failed, and from then on it
        refuses every write until it is reopened). The first time, starts the healer."""
        if self._wedged:
            return True
        db = self._db
        if db is None:
            return False
        try:
            errors = db.property_int_value("rocksdb.background-errors") or 0
        except Exception:
            return False
        if errors <= self._bg_errors:
            return False
        self._wedged = True
        # the reopen flushes what the memtables hold: it waits for that much room
        with contextlib.suppress(Exception):
            self._reopen_needs = db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        log.error(
            "RocksDB stopped accepting writes after a background error (a flush found the disk "
            "full?); writes are refused until it is reopened, once %d MiB are free in %s",
            (DISK_RESERVE_BYTES + self._reopen_needs) >> 20,
            self.path,
        )
        if self._running and self._healer is None:
            self._healer = gevent.spawn(self._heal_loop)
        return True

    def _heal_loop(self) -> None:
        """Reopens a wedged RocksDB in this process once the disk has room again.

        RocksDB stays in its background-error state after a failed flush however much space is
        freed, and rocksdict cannot ask it to resume: before this, puts failed until the
        gateway restarted. Reopening is what a restart did: the operations using RocksDB
        finish and new ones wait (the gate), RocksDB and the log are closed and opened again,
        and the log's records since its checkpoint, every acknowledged put that RocksDB's
        files may lack, are applied and flushed before writes are accepted again.
        """
        began = time.monotonic()
        delay = 0.25
        try:
            while self._running:
                gevent.sleep(delay)
                free = _free_bytes(self.path)
                if free is not None and free < DISK_RESERVE_BYTES + self._reopen_needs:
                    continue
                try:
                    self._reopen()
                except Exception as exc:
                    delay = min(2 * delay, 5.0)
                    log.warning(
                        "reopening the embedded store failed (retrying in %.1f s): %s",
                        delay,
                        _explain(exc, "reopen"),
                    )
                    continue
                self._wedged = False
                log.warning(
                    "embedded store reopened %.1f s after RocksDB stopped writing; writes are "
                    "accepted again",
                    time.monotonic() - began,
                )
                return
        finally:
            self._healer = None

    def _reopen(self) -> None:
        with self._gate.closed():
            if self._spare is not None:  # it would add a segment to the closed log
                self._spare.join()
            while self._log_flushing is not None:
                self._log_flushing.done.wait()
            self._close()
            self._closed.clear()  # segments of the old epoch: the replay covers them
            self._written = {}
            self._open()

    def _require(self, name: str) -> QueueMeta:
        meta = self._queues.get(name)
        if meta is None:
            raise InvalidArgument("queueName", f"queue '{name}' does not exist")
        return meta

    def _family(self, meta: QueueMeta, partition: int) -> tuple[_Layout, tuple[Rdict, Any]]:
        """The column family (Rdict, handle) holding ``partition`` of ``meta``'s generation,
        and that generation's layout (floors and kept iterators are filed under its base)."""
        entry = self._families.get(meta.name)
        if entry is None or entry[0].generation != meta.generation:
            raise InvalidArgument(
                "queueName", f"queue '{meta.name}' was truncated or deleted meanwhile"
            )
        layout, families = entry
        return layout, families[partition // layout.span]

    def _families_in_use(self) -> int:
        return sum(layout.families for layout, _ in self._families.values())

    def _open_families(self, queue: str, layout: _Layout, *, create: bool) -> None:
        self._families[queue] = (layout, self._make_families(layout, create=create))

    def _make_families(self, layout: _Layout, *, create: bool = True) -> list[tuple[Rdict, Any]]:
        """Opens (creating them first when ``create``) the families of ``layout``.

        Creating or dropping a family makes RocksDB rewrite its OPTIONS file, tens of ms with a
        hundred families, holding the GIL: in the thread pool, one family per call, the loop
        gets the GIL back between two and no put waits for more than one (it waited for all
        32 of a 16-partition truncate, 0.7-1 s, on the loop)."""
        db = self._db_required()
        pool = gevent.get_hub().threadpool
        opened = []
        for name in layout.names():
            if create:
                self._db_call(pool.apply, db.create_column_family, (name, _options()))
            cf = self._db_call(db.get_column_family, name)
            opened.append((cf, self._db_call(db.get_column_family_handle, name)))
        return opened

    def _undo_families(self, layout: _Layout) -> None:
        """Drops what exists of ``layout``'s families (after a failed create or truncate); one
        that cannot be dropped now is an orphan the next start drops."""
        db = self._db_required()
        pool = gevent.get_hub().threadpool
        for name in layout.names():
            with contextlib.suppress(Exception):
                pool.apply(db.drop_column_family, (name,))

    def _drop_families(self, queue: str) -> None:
        entry = self._families.pop(queue, None)
        if entry is not None:
            self._drop(entry[0])

    def _drop(self, layout: _Layout) -> None:
        self._cursors.drop(layout.base)
        db = self._db_required()
        pool = gevent.get_hub().threadpool  # see _make_families
        for name in layout.names():
            self._db_call(pool.apply, db.drop_column_family, (name,))

    def _next_generation(self) -> int:
        db = self._db_required()
        raw = db.get(_GENERATION_KEY)
        generation = (int(raw) if raw else 0) + 1
        self._db_call(db.put, _GENERATION_KEY, str(generation).encode(), self._no_sync)
        self._await_sync()
        return generation

    def _save_meta(self, meta: QueueMeta) -> None:
        db = self._db_required()
        layout = self._families[meta.name][0]
        extra = {} if layout.legacy else {"families": layout.families}
        raw = meta.to_json(**extra)
        self._db_call(db.put, _META_PREFIX + meta.name.encode(), raw, self._no_sync)
        self._await_sync()


class _Closed(NamedTuple):
    """A full log segment waiting for its families to be flushed (see _flush_loop)."""

    epoch: int  # the log's epoch when it filled
    lsn: int  # its last record
    rows_at: dict[str, int]  # family written -> its _rows count at the end


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _apply_record(payload: bytes, put: Any, handles: dict[bytes, Any]) -> int:
    """Puts the rows of one log record through ``put``; families that no longer exist
    (truncated or deleted since) are skipped. Returns the rows put."""
    view = memoryview(payload)
    offset = rows = 0
    while offset < len(view):
        name_len, cells_len = _BLOCK.unpack_from(view, offset)
        offset += _BLOCK.size
        name = bytes(view[offset : offset + name_len])
        offset += name_len
        cells = view[offset : offset + cells_len]
        offset += cells_len
        if len(cells) != cells_len:
            raise LogError(f"a log record ends inside the cells of {name.decode()!r}")
        handle = handles.get(name)
        if handle is not None:
            rows += put_wal_cells(put, handle, cells)
    return rows


def _explain(exc: BaseException, what: str) -> str:
    """``what: exc``, saying plainly when the disk is full (ENOSPC, as an OSError or inside
    RocksDB's message), which is what an operator must act on."""
    text = str(exc)
    full = getattr(exc, "errno", None) == errno.ENOSPC or "No space left on device" in text
    if full or "short write" in text:
        return f"{what}: the disk is full (free space, e.g. delete a queue): {text}"
    return f"{what}: {text}"


def _bucket_ms(meta: QueueMeta) -> int:
    return max(_MIN_BUCKET_MS, meta.ttl_seconds * 1000 // _BUCKETS_PER_TTL)


def _record_key(namespace: str, key: str) -> bytes:
    if "\x00" in namespace:
        raise ValueError("'namespace' must not contain NUL")
    return _RECORD_PREFIX + namespace.encode() + b"\x00" + key.encode()
