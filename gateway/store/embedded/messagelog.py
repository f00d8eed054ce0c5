"""The write-ahead log of messages: syncs shared by puts, retirement of full segments, replay.

Durability with group commit: messages go to a write-ahead log of the store's own
(:mod:`gateway.store.wal`) and into RocksDB's memtables without RocksDB's log. A put appends its
record, starts an fdatasync of the log on the C thread of :class:`gateway._wal.Syncer` if none
is running, fills the memtable while the disk works, and waits for the sync. Every put that
arrives during one sync shares the next one, and the loop keeps serving meanwhile. Rows are
visible to scans only once durable: each partition's lowest not-yet-synced key bounds every
scan. Log segments are reused once RocksDB holds their rows in its files (after
``LOG_SEGMENTS_KEPT`` more have filled; families that have not flushed them by then are
flushed). On start the log's records after its checkpoint are applied again. Queue metadata
and small records still go through RocksDB's own log, synced in the thread pool; both logs
use the one ``GroupCommit`` of commit.py.
"""

from __future__ import annotations

import logging
import os
import struct
import time
from typing import TYPE_CHECKING, Any, NamedTuple

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    Rdict,
    WriteBatch,
)

from ...fast import put_wal_cells
from ..wal import LogError
from .commit import _Group
from .wedge import _explain

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by EmbeddedStore (store.py)


log = logging.getLogger(__name__)

# A log record holds, for each partition it writes: family name length, cells length (then
# the name and the cells of gateway._wal.wal_cells).
_BLOCK = struct.Struct("<HI")
# Full log segments kept before the oldest is reused. By then RocksDB has usually flushed
# the rows it holds itself (it flushes a memtable when it is full, or the largest when all
# together pass MEMTABLES_BYTES); only families whose memtables still hold rows from before
# it are flushed. Flushing every family at every segment instead made many small files and
# kept compaction busy: put latency (p99) under load and puts onto a large backlog suffered.
LOG_SEGMENTS_KEPT = 6


class _Closed(NamedTuple):
    """A full log segment waiting for its families to be flushed (see _flush_loop)."""

    epoch: int  # the log's epoch when it filled
    lsn: int  # its last record
    rows_at: dict[str, int]  # family written -> its _rows count at the end


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


class _MessageLog(_State):
    """Syncs of the message log, its retirement (flushes, checkpoints) and replay."""

    def _begin_log_sync(self, group: _Group) -> None:
        assert self._syncer is not None
        self._syncer.kick(self._wal.take_unsynced())

    def _log_sync_loop(self) -> None:
        assert self._syncer is not None
        hub = gevent.get_hub()
        watcher = hub.loop.io(self._syncer.fileno(), 1)
        while True:
            hub.wait(watcher)
            err = self._syncer.finish()
            group = self._log.running
            if err is None or group is None:
                continue
            error = None
            if err:
                log.error("write-ahead log sync failed: %s", os.strerror(err))
                error = OSError(err, os.strerror(err))
            if self.on_log_sync is not None:
                self.on_log_sync(
                    group.puts, group.messages, time.perf_counter() - group.began, bool(err)
                )
            self._log.finished(error)

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
        floor = self._log.current.floors.get(slot)
        if self._log.running is not None:
            other = self._log.running.floors.get(slot)
            if other is not None and (floor is None or other < floor):
                floor = other
        return floor
