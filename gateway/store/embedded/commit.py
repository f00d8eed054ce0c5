"""Group commit of RocksDB's own log (queue metadata, small records, message keys).

Queue metadata and small records go through RocksDB's own log, synced in the thread pool by
one committer greenlet; every write that arrives during one sync shares the next one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import gevent
import gevent.event
import gevent.lock
import gevent.queue

from ...errors import StoreError

if TYPE_CHECKING:
    from .state import _State
else:
    _State = object  # the mixins below are put together by EmbeddedStore (store.py)

log = logging.getLogger(__name__)


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


class _Commit(_State):
    """Waits for, and runs, the syncs of RocksDB's own log."""

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
