"""Group commit, one mechanism for both logs of the embedded store.

Writes that arrive while a sync runs form the next group, and that group's sync starts the
moment the running one ends: one sync at a time, and every write waits for the first sync
that began after it. The message log (messagelog.py) syncs on the C thread of
``gateway._wal.Syncer``; RocksDB's own log (queue metadata, small records, message keys) syncs
with ``flush_wal`` in the thread pool (``_Commit`` below).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
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


class GroupCommit:
    """The groups of one log: ``current`` (writes since the running sync began) and
    ``running`` (the writes the running sync covers).

    ``begin(group)`` starts a sync without waiting for it; whoever sees it end calls
    ``finished``, which wakes the group's writers and starts the next sync if writes came
    meanwhile.

    ``defer``: a sync that starts while none runs begins only after the greenlets ready now
    have run, so the writers woken together share it. RocksDB's own log wants that (its sync
    covers every write before the call; starting at the first write halved put_record's rate
    with 8 writers); the message log starts at once, its puts fill memtables meanwhile."""

    __slots__ = ("_begin", "_defer", "_starting", "current", "running")

    def __init__(self, begin: Callable[[_Group], None], *, defer: bool = False) -> None:
        self._begin = begin
        self._defer = defer
        self._starting = False  # a deferred start is scheduled
        self.current = _Group()
        self.running: _Group | None = None

    def join(self) -> _Group:
        """Adds a write to the current group, starting its sync if none runs; the group to
        wait for (``done``, then ``error``)."""
        group = self.current
        group.dirty = True
        if self.running is None and not self._starting:
            if self._defer:
                self._starting = True
                gevent.get_hub().loop.run_callback(self._kick)
            else:
                self._kick()
        return group

    def _kick(self) -> None:
        self._starting = False
        group = self.current
        self.current = _Group()
        self.running = group
        group.began = time.perf_counter()
        self._begin(group)

    def finished(self, error: BaseException | None) -> None:
        """The running sync ended (``error`` if it failed)."""
        group = self.running
        if group is None:
            return
        self.running = None
        group.error = error
        group.done.set()
        if self.current.dirty:
            self._kick()

    def drain(self) -> None:
        """Waits until no sync runs (the writes waiting for one are durable, or failed)."""
        while self.running is not None or self._starting:
            if self.running is None:
                gevent.sleep(0)  # the deferred start runs first
            else:
                self.running.done.wait()


class _Commit(_State):
    """Syncs RocksDB's own log by group commit (``self._meta``)."""

    def _await_sync(self) -> None:
        """Waits until everything written so far is on disk (the next group commit)."""
        group = self._meta.join()
        group.done.wait()
        if group.error is not None:
            raise StoreError(f"syncing the write-ahead log failed: {group.error}")

    def _begin_meta_sync(self, group: _Group) -> None:
        gevent.spawn(self._meta_sync)

    def _meta_sync(self) -> None:
        error: BaseException | None = None
        try:
            gevent.get_hub().threadpool.apply(self._db_required().flush_wal, (True,))
        except Exception as exc:
            log.error("WAL sync failed: %s", exc)
            self._note_failure()
            error = exc
        self._meta.finished(error)
