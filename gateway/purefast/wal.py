"""The embedded store's log cells, row keys and sync thread (gateway/_wal.c)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

from .. import rowkey
from ..rowkey import MAX_PARTITIONS, MAX_SEQUENCE
from .common import _LE32

# ---- the embedded store (gateway/_wal.c) --------------------------------------------------


def consecutive_keys(partition: int, timestamp: int, sequence: int, count: int) -> list[bytes]:
    """gateway/_wal.c's consecutive_keys: the row keys of ``count`` consecutive ids from
    (timestamp, sequence) in ``partition``, the sequence carrying after MAX_SEQUENCE."""
    if not (
        0 <= partition <= MAX_PARTITIONS
        and 0 <= sequence <= MAX_SEQUENCE
        and count >= 0
        and timestamp >= 0
    ):
        raise ValueError("partition, timestamp, sequence or count out of range")
    pack = rowkey.KEY_UNSIGNED.pack
    keys = []
    ts, seq = timestamp, sequence
    for _ in range(count):
        keys.append(pack(partition, ts & 0xFFFFFFFFFFFFFFFF, seq))
        seq += 1
        if seq > MAX_SEQUENCE:
            seq = 0
            ts += 1
    return keys


def wal_cells(keys: list[bytes], topics: list[bytes], values: list[bytes]) -> bytes:
    """gateway/_wal.c's wal_cells: per row u8 key length, key, u32 LE cell length, cell
    (u8 topic length, topic, value)."""
    n = len(keys)
    if len(topics) != n or len(values) != n:
        raise ValueError("keys, topics and values differ in length")
    for k, t, v in zip(keys, topics, values, strict=True):
        if (
            not isinstance(k, bytes)
            or not isinstance(t, bytes)
            or not isinstance(v, bytes)
            or len(k) > 255
            or len(t) > 255
            or len(v) > 0xFFFFFFFF - 256
        ):
            raise TypeError("keys and topics must be bytes of at most 255, values bytes")
    pack = _LE32.pack
    return b"".join(
        bytes((len(k),)) + k + pack(1 + len(t) + len(v)) + bytes((len(t),)) + t + v
        for k, t, v in zip(keys, topics, values, strict=True)
    )


def put_wal_cells(
    put: Callable[[bytes, bytes, Any], object],
    handle: Any,
    cells: bytes | bytearray | memoryview,
) -> int:
    """gateway/_wal.c's put_wal_cells: put(key, cell, handle) for every row of ``cells``."""
    buf = bytes(cells)
    end = len(buf)
    p = 0
    count = 0
    while p < end:
        kl = buf[p]
        p += 1
        if end - p < kl + 4:
            raise ValueError(f"malformed log cells after {count} rows")
        key = buf[p : p + kl]
        p += kl
        cl = _LE32.unpack_from(buf, p)[0]
        p += 4
        if end - p < cl or cl < 1 or buf[p] + 1 > cl:
            raise ValueError(f"malformed log cells after {count} rows")
        put(key, buf[p : p + cl], handle)
        p += cl
        count += 1
    return count


def _original_threads() -> tuple[Callable[..., Any], Callable[[], Any]]:
    """A real OS thread and lock even under gevent's monkey patching (the C Syncer runs a
    pthread: fdatasync must not block the event loop)."""
    try:
        from gevent.monkey import get_original
    except ImportError:  # pragma: no cover - the gateway depends on gevent
        import _thread

        return _thread.start_new_thread, _thread.allocate_lock
    start, lock = get_original("_thread", ["start_new_thread", "allocate_lock"])
    return start, lock


class _SyncState:
    """What the sync thread shares with its Syncer (the thread holds no reference to the
    Syncer, so dropping the Syncer stops the thread, as the C type's dealloc does)."""

    def __init__(self) -> None:
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.wake = os.eventfd(0, os.EFD_CLOEXEC)  # the thread blocks reading it
        self.fds: list[int] | None = None
        self.error = 0
        self.stop = False
        start, allocate_lock = _original_threads()
        self.ended = allocate_lock()
        self.ended.acquire()
        start(_sync_main, (self,))


def _sync_main(st: _SyncState) -> None:
    try:
        while True:
            os.eventfd_read(st.wake)
            fds, st.fds = st.fds, None
            if fds is not None:
                err = 0
                for fd in fds:
                    try:
                        os.fdatasync(fd)
                    except OSError as exc:
                        err = err or (exc.errno or 0)
                st.error = err
                os.eventfd_write(st.efd, 1)
            if st.stop:
                break
    finally:
        st.ended.release()


class Syncer:
    """gateway/_wal.c's Syncer: a thread of its own that runs fdatasync. kick(fds) starts one
    sync of those descriptors; fileno() is an eventfd readable when it is over; finish() then
    returns its errno (0 when it worked), or None if it is not over yet. close() stops it."""

    _st: _SyncState | None = None

    def __init__(self) -> None:
        if self._st is not None:
            raise RuntimeError("Syncer is already running")
        self._busy = False
        self._st = _SyncState()

    def kick(self, fds: Sequence[int]) -> None:
        st = self._st
        if st is None:
            raise ValueError("the syncer is closed")
        if self._busy:
            raise RuntimeError("a sync is already running")
        if not isinstance(fds, Sequence):
            raise TypeError("kick() takes a sequence of file descriptors")
        todo = [int(fd) for fd in fds]
        if any(fd < 0 or fd > 0x7FFFFFFF for fd in todo):
            raise ValueError("file descriptors must be >= 0")
        st.fds = todo
        self._busy = True
        os.eventfd_write(st.wake, 1)

    def finish(self) -> int | None:
        st = self._st
        if st is None or not self._busy:
            return None
        try:
            os.eventfd_read(st.efd)
        except BlockingIOError:
            return None
        self._busy = False
        return st.error

    def fileno(self) -> int:
        return self._st.efd if self._st is not None else -1

    def close(self) -> None:
        st = self._st
        if st is None:
            return
        self._st = None
        st.stop = True
        os.eventfd_write(st.wake, 1)
        st.ended.acquire()
        os.close(st.efd)
        os.close(st.wake)

    def __del__(self) -> None:
        self.close()
