"""The embedded store: RocksDB (through rocksdict) on local disk, nothing else to install.

This module is its face: lifecycle, queues, records and the data path (put, readers). The rest:

- layout.py: column families (regions) of queue generations, keys of metadata and records;
- messagelog.py: the write-ahead log of messages (group commit of its syncs, retirement of
  full segments, replay);
- commit.py: group commit of RocksDB's own log (metadata, records, message keys);
- extras.py: message keys and properties (the family ``hqueue.extras``);
- sweeper.py: the TTL sweeper (rows and the key index);
- wedge.py: opening and closing RocksDB, the disk reserve, reopening a wedged RocksDB;
- records.py: a put's messages in a partition as one RocksDB entry (the record format);
- reader.py: partition readers (RocksDB iterators, the durability floor); cursors.py: the
  iterators they keep between reads; state.py: the shared attributes.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    ReadOptions,
    WriteBatch,
)

from ... import rowkey
from ...errors import InvalidArgument, StoreError
from ...fast import Syncer, put_wal_cells, wal_records
from ...rowkey import MessageId
from ..base import PartitionReader, PartitionStore, PutBatch, QueueMeta, already_durable
from ..wal import LogError
from .commit import _Commit
from .extras import _Extras
from .layout import _META_PREFIX, _Families, _Layout, _record_key, check_compression, families_for
from .messagelog import _BLOCK, LOG_SEGMENTS_KEPT, _Closed, _MessageLog
from .reader import MAX_EXAMINED_PER_SCAN as MAX_EXAMINED_PER_SCAN
from .reader import _Reader
from .records import MAX_RECORD_BYTES, MAX_RECORD_MESSAGES, last_id
from .state import _State
from .sweeper import _Sweeper
from .wedge import _explain, _Wedge

log = logging.getLogger(__name__)


class EmbeddedStore(
    _Wedge, _Families, _Extras, _MessageLog, _Commit, _Sweeper, _State, PartitionStore
):
    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        self._open()
        self._syncer = Syncer()
        self._running = True
        self._log_syncer = gevent.spawn(self._log_sync_loop)
        self._flusher = gevent.spawn(self._flush_loop)
        self._sweeper = gevent.spawn(self._sweep_loop)
        self._expirer = gevent.spawn(self._expire_loop)
        log.info(
            "embedded store open at %s with %d queue(s), a %d MiB block cache%s", self.path,
            len(self._queues), self._block_cache_bytes >> 20,
            ", flushes with O_DIRECT" if self.direct_io else "",
        )  # fmt: skip

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
        self._meta.drain()  # writes still waiting for their sync
        self._log.drain()
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

    def block_cache_bytes(self) -> int:
        """Bytes RocksDB's block cache holds now (at most ``block_cache_bytes``), for the
        metrics."""
        return int(self._block_cache.get_usage())

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
                check_compression(meta)
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
        key = it.key()
        return last_id(key, it.value()) if rowkey.decode(key)[0] == partition else None

    def put(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> None:
        self.put_begin(queue, batches)()

    def put_begin(self, queue: QueueMeta, batches: Sequence[PutBatch]) -> Callable[[], None]:
        """Appends the batches' record to the log, starts its sync and fills the memtables;
        the wait for the sync is what it returns. The wait is outside the gate: it touches
        only the log's group, and a reopen drains the log's syncs before it closes anything."""
        with self._gate.passing():  # see _heal_loop
            self._check_space()
            db = self._db_required()
            parts: list[bytes] = []
            rows: list[tuple[Any, bytes]] = []
            group = self._log.current
            floors = group.floors
            names: list[tuple[str, int]] = []  # (family, RocksDB entries) per batch
            messages = 0
            for partition, first, topics, values in batches:
                if not values:
                    continue
                layout, (_, handle) = self._family(queue, partition)
                name = layout.name_of(partition)
                # the put's messages as records (records.py), in the log's cell format
                cells, records = wal_records(partition, first[0], first[1], topics, values,
                                             MAX_RECORD_MESSAGES, MAX_RECORD_BYTES)  # fmt: skip
                raw_name = name.encode()
                parts += (_BLOCK.pack(len(raw_name), len(cells)), raw_name, cells)
                rows.append((handle, cells))
                names.append((name, records))
                messages += len(values)
                floors.setdefault((layout.base, partition), rowkey.id_key(partition, first))
            if not rows:
                return already_durable  # nothing to write
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
            group.messages += messages
            self._log.join()  # starts the sync if none runs
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

        def durable() -> None:
            group.done.wait()
            if group.error is not None:
                raise StoreError(_explain(group.error, "syncing the write-ahead log failed"))

        return durable

    def reader(
        self,
        queue: QueueMeta,
        partition: int,
        after: MessageId | None,
        stop: MessageId | None,
        *,
        reverse: bool,
        topics: Collection[bytes] | None,
    ) -> PartitionReader:
        return _Reader(self, queue, partition, after, stop, reverse=reverse, topics=topics)
