"""The state every part of the embedded store shares (see store.py for the parts)."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import gevent.event
import gevent.lock
import gevent.queue
from rocksdict import (
    Cache,
    Rdict,
    WriteOptions,
)

from ...fast import Syncer
from ..base import QueueMeta
from ..gate import Gate
from ..wal import SEGMENT_BYTES, WriteAheadLog
from .commit import GroupCommit, _Group
from .cursors import _Cursors
from .layout import BLOCK_CACHE_BYTES, DIRECT_IO_CHOICES, TABLE_OPTIONS_DIR, TableOptions, _Layout
from .messagelog import _Closed

log = logging.getLogger(__name__)


class _State:
    """The embedded store's attributes, and the parts' methods the other parts call."""

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        *,
        ttl_sweep_interval: float = 60.0,
        log_segment_bytes: int = SEGMENT_BYTES,
        direct_io: str = "auto",
        block_cache_bytes: int = BLOCK_CACHE_BYTES,
    ):
        if ttl_sweep_interval <= 0:
            raise ValueError("'ttl_sweep_interval' must be > 0 seconds")
        if direct_io not in DIRECT_IO_CHOICES:
            raise ValueError(f"'direct_io' must be one of {', '.join(DIRECT_IO_CHOICES)}")
        if block_cache_bytes < 1 << 20:
            raise ValueError("'block_cache_bytes' must be at least 1 MiB")
        self._block_cache_bytes = block_cache_bytes
        self._block_cache = Cache(block_cache_bytes)  # of all families (layout._options)
        self._tables = TableOptions(Path(data_dir) / TABLE_OPTIONS_DIR, self._block_cache)
        # RocksDB's flushes and compactions with O_DIRECT (layout._options): "auto" where the
        # data dir takes it; ``direct_io`` says what the open store does
        self._direct_io = direct_io
        self.direct_io = False
        self.path = Path(data_dir) / "rocksdb"
        self._wal = WriteAheadLog(Path(data_dir) / "wal", log_segment_bytes)
        self._syncer: Syncer | None = None
        self._no_wal = WriteOptions()
        # an attribute at run time; rocksdict's stub calls it a method
        self._no_wal.disable_wal = True  # type: ignore[method-assign,assignment]
        self._log = GroupCommit(self._begin_log_sync)  # of the message log (messagelog.py)
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
        self._space_ok_until = 0.0  # monotonic time before which the disk is not looked at
        self.ttl_sweep_interval = ttl_sweep_interval
        self._db: Rdict | None = None
        self._queues: dict[str, QueueMeta] = {}
        # queue name -> (its layout, [(column family Rdict, handle)] by region)
        self._families: dict[str, tuple[_Layout, list[tuple[Rdict, Any]]]] = {}
        self._cursors = _Cursors()
        self._no_sync = WriteOptions()
        self._no_sync.sync = False
        # of RocksDB's own log (commit.py)
        self._meta = GroupCommit(self._begin_meta_sync, defer=True)
        self._admin = gevent.lock.RLock()
        # Operations that use RocksDB pass the gate; a reopen closes it (see _heal_loop).
        self._gate = Gate()
        self._wedged = False  # RocksDB refuses every write after a background error
        self._bg_errors = 0  # its count of background errors when it was opened
        self._healer: gevent.Greenlet | None = None
        self._reopen_needs = 0  # bytes of memtables the reopen flushes
        self._running = False
        self._sweeper: gevent.Greenlet | None = None
        self._expirer: gevent.Greenlet | None = None
        self._log_syncer: gevent.Greenlet | None = None
        self._flusher: gevent.Greenlet | None = None
        self._extras: tuple[Rdict, Any] | None = None  # the family of keys and properties
        self._has_extras: dict[int, bool] = {}  # generation -> has any (cached)

    # The parts call these of each other; each is defined in the module named.

    def _db_required(self) -> Rdict:  # wedge.py
        raise NotImplementedError

    def _db_call(self, fn: Any, *args: Any) -> Any:  # wedge.py
        raise NotImplementedError

    def _note_failure(self) -> bool:  # wedge.py
        raise NotImplementedError

    def _check_space(self) -> None:  # wedge.py
        raise NotImplementedError

    def _await_sync(self) -> None:  # commit.py
        raise NotImplementedError

    def _family(self, meta: QueueMeta, partition: int) -> tuple[_Layout, tuple[Rdict, Any]]:
        raise NotImplementedError  # layout.py

    def _open_families(self, queue: str, layout: _Layout, *, create: bool) -> None:
        raise NotImplementedError  # layout.py

    def _live_families(self) -> dict[str, tuple[Rdict, Any]]:  # layout.py
        raise NotImplementedError

    def _open_extras(self, *, create: bool) -> None:  # extras.py
        raise NotImplementedError

    def _sweep_extras(self, meta: QueueMeta, cutoff: int) -> list[tuple[bytes, bytes]]:
        raise NotImplementedError  # extras.py

    def _replay(self) -> None:  # messagelog.py
        raise NotImplementedError

    def _begin_log_sync(self, group: _Group) -> None:  # messagelog.py
        raise NotImplementedError

    def _begin_meta_sync(self, group: _Group) -> None:  # commit.py
        raise NotImplementedError
