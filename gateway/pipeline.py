"""A connection's puts, pipelined: the next put is written while earlier ones wait for their
log sync, and the answers leave in the order the requests came.

Thrift answers one connection's calls in order. A client that keeps several puts in flight on
one connection (``hqueue.Producer``) has sent the next put before the last is answered; served
one at a time, each put's sync would keep the connection from even reading the next, so the
puts of one connection never shared a sync and the client's window only hid the client's own
work. With a lane, the connection's greenlet checks and writes a put (its ids are allocated
there, in request order, so a partition keeps the order of the requests), hands the put's
answer to the lane and reads the next request; the lane's greenlet waits for each put's sync
and writes the answers, oldest first. A call of any other kind waits until the lane is empty,
since its answer must follow theirs. At most ``window`` answers wait: past that the
connection reads nothing until the oldest is written.

A failed write (the client went away, or stopped reading past the send timeout) stops the
connection: ``on_error`` shuts its socket, the reader sees that, and the answers still in the
lane are run to the end (each waits for its put's sync, then fails to write at once).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable

import gevent
import gevent.event
import gevent.lock

log = logging.getLogger(__name__)

Answer = Callable[[], None]  # waits until its put is durable, then writes the answer


class PutLane:
    """The answers of one connection's pipelined puts, written in order by a greenlet of the
    lane's own (started on the first put). ``setup`` runs first in that greenlet (what the
    connection's greenlet has set in its context, such as the direct reply writer)."""

    __slots__ = ("_error", "_greenlet", "_idle", "_on_error", "_pending", "_room", "_setup",
                 "_wake")  # fmt: skip

    def __init__(
        self,
        window: int,
        setup: Callable[[], None],
        on_error: Callable[[BaseException], None],
    ) -> None:
        if window < 1:
            raise ValueError(f"'window' must be >= 1, got {window}")
        self._room = gevent.lock.BoundedSemaphore(window)
        self._pending: collections.deque[Answer] = collections.deque()
        self._idle = gevent.event.Event()
        self._idle.set()
        self._wake = gevent.event.Event()
        self._setup = setup
        self._on_error = on_error
        self._error: BaseException | None = None
        self._greenlet: gevent.Greenlet | None = None

    def __len__(self) -> int:
        """Answers not written yet."""
        return len(self._pending)

    def push(self, answer: Answer) -> None:
        """Queues ``answer`` behind the others; waits while ``window`` are queued. Raises the
        error that stopped the lane, if one did."""
        self._room.acquire()
        if self._error is not None:
            self._room.release()
            raise self._error
        self._pending.append(answer)
        self._idle.clear()
        self._wake.set()
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._run)

    def drain(self) -> None:
        """Waits until every queued answer is written; raises what stopped the lane."""
        self._idle.wait()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Runs what is queued to the end (the puts are written; their syncs are waited for,
        their answers written where the connection still takes them), then stops the lane's
        greenlet. If the caller is killed meanwhile, the lane's greenlet is killed too."""
        greenlet = self._greenlet
        if greenlet is None:
            return
        try:
            self._idle.wait()
        finally:
            self._greenlet = None
            greenlet.kill(block=False)

    def _run(self) -> None:
        self._setup()
        pending = self._pending
        while True:
            while pending:
                answer = pending[0]
                try:
                    answer()
                except Exception as exc:  # writing failed: the connection is done
                    if self._error is None:
                        self._error = exc
                        self._on_error(exc)
                del answer
                pending.popleft()
                self._room.release()
            self._idle.set()
            self._wake.clear()
            self._wake.wait()
