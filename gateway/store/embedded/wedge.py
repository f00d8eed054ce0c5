"""Opening and closing RocksDB, the disk reserve, and reopening a wedged RocksDB in process.

RocksDB refuses every write after a background error (a flush that found the disk full);
the store then closes the gate (gateway/store/gate.py), closes and reopens RocksDB and its
log, and replays the log, once the disk has room again (see ``_heal_loop``).
"""

from __future__ import annotations

import contextlib
import errno
import gc
import json
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    Rdict,
    WriteOptions,
)

from ...errors import StoreError
from ..base import QueueMeta
from ..wal import LogError
from .extras import EXTRAS_FAMILY
from .layout import _META_PREFIX, _Layout, _options, supports_direct_io
from .records import FORMAT_KEY, STORE_FORMAT

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by EmbeddedStore (store.py)


log = logging.getLogger(__name__)

# Free disk space below which writes are refused (except deletes): see _check_space.
DISK_RESERVE_BYTES = 8 << 20
# With more than this free, the disk is looked at again only after SPACE_RECHECK_SECONDS: a
# statvfs per put was a syscall per call, and the store writes far less than this meanwhile.
SPACE_SLACK_BYTES = 64 * DISK_RESERVE_BYTES
SPACE_RECHECK_SECONDS = 0.1


def _free_bytes(path: Path) -> int | None:
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _explain(exc: BaseException, what: str) -> str:
    """``what: exc``, saying plainly when the disk is full (ENOSPC, as an OSError or inside
    RocksDB's message), which is what an operator must act on."""
    text = str(exc)
    full = getattr(exc, "errno", None) == errno.ENOSPC or "No space left on device" in text
    if full or "short write" in text:
        return f"{what}: the disk is full (free space, e.g. delete a queue): {text}"
    return f"{what}: {text}"


class _Wedge(_State):
    """RocksDB's lifecycle and failures: open, close, the disk reserve, the healer."""

    def _open(self) -> None:
        """Opens RocksDB, its queues and families, and replays the write-ahead log into it
        (at start, and when the store reopens itself: see _heal_loop). On failure everything
        opened is closed again."""
        try:
            existing = Rdict.list_cf(str(self.path)) if (self.path / "CURRENT").exists() else []
            families = {name: _options(self._tables) for name in existing if name != "default"}
            direct = self._direct_io == "on" or (
                self._direct_io == "auto" and supports_direct_io(self.path)
            )
            self._db = Rdict(
                str(self.path), _options(self._tables, direct), column_families=families
            )
            self.direct_io = direct
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
        self._check_format()
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

    def _check_format(self) -> None:
        """Refuses data of a newer layout than this code reads (records.py); marks older
        data (per-row entries, which records are read beside) as of this format."""
        assert self._db is not None
        raw = self._db.get(FORMAT_KEY)
        found = int(raw) if isinstance(raw, bytes) else 1
        if found > STORE_FORMAT:
            raise StoreError(
                f"the embedded store at {self.path} has format {found}, written by a newer "
                f"gateway; this one reads format {STORE_FORMAT} and older"
            )
        if found < STORE_FORMAT:
            synced = WriteOptions()
            synced.sync = True
            self._db.put(FORMAT_KEY, str(STORE_FORMAT).encode(), synced)

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

    def _check_space(self) -> None:
        """Refuses writes once the disk has less than ``DISK_RESERVE_BYTES`` free, and while
        RocksDB is wedged (see _heal_loop).

        Why: a write to RocksDB's own log (queue metadata, small records) that fails for want
        of space puts RocksDB in a background-error state that refuses every later write, even
        once space is freed (rocksdict cannot resume it). Stopping short of the full disk keeps
        that from happening; deleting a queue and deleting records are not refused, so freeing
        space through the gateway still works. A memtable flush larger than the reserve can
        still fail: then the store reopens RocksDB once there is room again. With more than
        ``SPACE_SLACK_BYTES`` (512 MiB) free, the disk is looked at again only after
        ``SPACE_RECHECK_SECONDS``.
        """
        if self._wedged:
            raise StoreError(
                f"the disk is full: RocksDB stopped writing when it found no room to flush in "
                f"{self.path}; the store reopens it by itself once "
                f"{(DISK_RESERVE_BYTES + self._reopen_needs) >> 20} MiB are free: free space "
                "(e.g. remove files) and retry"
            )
        now = time.monotonic()
        if now < self._space_ok_until:
            return
        free = _free_bytes(self.path)
        if free is not None and free < DISK_RESERVE_BYTES:
            raise StoreError(
                f"the disk is full: {free >> 10} KiB free in {self.path}, below the "
                f"{DISK_RESERVE_BYTES >> 20} MiB the store keeps in reserve; free space (e.g. "
                "delete a queue) and retry"
            )
        if free is not None and free > SPACE_SLACK_BYTES:
            self._space_ok_until = now + SPACE_RECHECK_SECONDS

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
            self._log.drain()
            self._close()
            self._closed.clear()  # segments of the old epoch: the replay covers them
            self._written = {}
            self._open()
