"""A pool of :class:`~hqueue.Connection` objects shared by threads or greenlets.

    pool = ConnectionPool(size=8, host="127.0.0.1", port=9190)
    with pool.connection() as conn:
        conn.queue("events").put("clicks", b"payload")

At most ``size`` connections are out at once; a caller beyond that waits (``timeout`` seconds,
then :class:`~hqueue.errors.PoolTimeout`). A thread or greenlet that asks again while it holds
a connection gets the same one back. A connection that failed with a
:class:`~hqueue.errors.TransportError` is closed and replaced, never handed out again.

Under gevent without ``monkey.patch_all()`` a ``threading`` semaphore would block the whole
event loop while another greenlet holds the connection it waits for; the pool then waits on a
gevent semaphore instead. With monkey-patching, ``threading`` already is gevent's.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from typing import Any

import greenlet

from .connection import DEFAULT_HOST, DEFAULT_PORT, Connection
from .errors import HQueueError, InvalidArgument, PoolTimeout, TransportError


def _semaphore(size: int) -> Any:
    if "gevent" in sys.modules:
        import gevent.monkey

        if not gevent.monkey.is_module_patched("threading"):
            from gevent.lock import BoundedSemaphore

            return BoundedSemaphore(size)
    return threading.BoundedSemaphore(size)


class ConnectionPool:
    """``size`` connections to one gateway; ``connection_args`` go to :class:`Connection`
    (``framed``, ``compact``, ``timeout``)."""

    def __init__(
        self, size: int, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, **connection_args: Any
    ) -> None:
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise InvalidArgument("size", f"must be an int >= 1, got {size!r}")
        Connection(host, port, **connection_args)  # checks the arguments now, not on first use
        self.size = size
        self.host = host
        self.port = port
        self._args = connection_args
        self._lock = threading.Lock()  # held for list/dict updates only, never while waiting
        self._idle: list[Connection] = []
        self._held: dict[Any, list[Any]] = {}  # greenlet -> [connection, depth]
        self._slots = _semaphore(size)
        self._closed = False

    def __repr__(self) -> str:
        return f"<hqueue.ConnectionPool {self.host}:{self.port} size={self.size}>"

    @contextlib.contextmanager
    def connection(self, timeout: float | None = None) -> Iterator[Connection]:
        """A connection for the ``with`` block; ``timeout`` seconds to wait for a free one
        (None: wait as long as it takes)."""
        me = greenlet.getcurrent()  # per greenlet, and per thread (each has its own)
        with self._lock:
            held = self._held.get(me)
            if held is not None:
                held[1] += 1
        if held is not None:
            try:
                yield held[0]
            finally:
                held[1] -= 1
            return

        if self._closed:
            raise HQueueError("the connection pool is closed")
        if not self._slots.acquire(timeout=timeout):
            raise PoolTimeout(f"no free connection among {self.size} within {timeout} s")
        broken = False
        try:
            with self._lock:
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = Connection(self.host, self.port, **self._args)
            entry = [conn, 1]
            with self._lock:
                self._held[me] = entry
            try:
                yield conn
            except TransportError:
                broken = True
                raise
            finally:
                with self._lock:
                    del self._held[me]
                    keep = not broken and not self._closed
                    if keep:
                        self._idle.append(conn)
                if not keep:
                    conn.close()
        finally:
            self._slots.release()

    def close(self) -> None:
        """Closes the idle connections; those in use close when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()

    def __enter__(self) -> ConnectionPool:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
