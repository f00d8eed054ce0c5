"""Long-poll pull (MetaQ's PullConsumer) for clients that cannot serve Thrift, e.g. PHP.

A pull subscriber is always a consumer group (:mod:`.groups`) whose members are identified by
the memberID they pass; a pull joins the group or renews the membership, and a member that has
not pulled (or acked) for ``pull_lease`` seconds leaves, so its partitions go to the others.

Each partition assigned to a pull member has a :class:`PullWorker`: the push path's scanner
and bounded buffer, without a sender. ``pullMessages`` takes what the member's buffers hold
and returns at once, or waits up to ``maxWaitMs`` for the first message to arrive.
``ackMessages`` moves a partition's acknowledged position (inclusive), which the checkpoint
updater writes to the registry as it does for push. What was pulled and not acknowledged
within ``ack_timeout`` seconds is delivered again from the acknowledged position (so are the
unacknowledged messages of a partition that moves to another member: the new member's worker
starts from the group's checkpoint).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import gevent
import gevent.event

from ..store.base import PartitionStore, Row
from .registry import Subscriber
from .scanner import Id, MessageBuffer, MessageScanner

if TYPE_CHECKING:
    from .workers import PushOptions, WorkerManager

MAX_PULL_BYTES = 16 * 1024 * 1024


class PullWorker:
    """Scanner -> bounded buffer for one partition of a pull group; the member takes from it."""

    def __init__(
        self, store: PartitionStore, sub: Subscriber, partition: int, options: PushOptions
    ) -> None:
        self.store = store
        self.partition = partition
        self.queue = sub.queue
        self.topics = sub.record.topics
        self.options = options
        self.ack_timeout = options.ack_timeout  # seconds
        checkpoint = sub.record.checkpoints.get(partition)
        self.acked: Id | None = checkpoint  # what the member acknowledged (inclusive)
        self.delivered: Id | None = checkpoint  # the last id handed out
        self.deadline: float | None = None  # monotonic; when unacked messages go out again
        self.redelivered = 0
        self.wake = gevent.event.Event()  # stable across scanner restarts (puts set it)
        self._scanner_greenlet: gevent.Greenlet | None = None
        self._watchdog: gevent.Greenlet | None = None
        self._reset(checkpoint)

    def _reset(self, start: Id | None) -> None:
        self.buffer = MessageBuffer(self.options.buffer_messages, self.options.buffer_bytes)
        self.scanner = MessageScanner(
            self.store, self.queue, self.partition, start, self.topics, self.buffer,
            chunk=min(self.options.sender.batch_messages, self.options.buffer_messages),
        )  # fmt: skip
        self.scanner.wake = self.wake

    def start(self) -> None:
        self._scanner_greenlet = gevent.spawn(self.scanner.run)
        self._watchdog = gevent.spawn(self._watch)

    def stop(self) -> None:
        gevent.killall([g for g in (self._scanner_greenlet, self._watchdog) if g is not None])

    def take(self, n: int, max_bytes: int) -> list[Row]:
        """Up to ``n`` buffered rows, without waiting."""
        if not len(self.buffer):
            return []
        rows = self.buffer.take(n, max_bytes)
        self.delivered = (rows[-1][0], rows[-1][1])
        if self.deadline is None:
            self.deadline = time.monotonic() + self.ack_timeout
        return rows

    def ack(self, upto: Id) -> None:
        if self.delivered is None:
            return
        upto = min(upto, self.delivered)  # nothing beyond what was handed out
        if self.acked is None or upto > self.acked:
            self.acked = upto
        if self.acked == self.delivered:
            self.deadline = None
        else:
            self.deadline = time.monotonic() + self.ack_timeout

    def _watch(self) -> None:
        while True:
            gevent.sleep(min(1.0, self.ack_timeout / 4))
            if self.deadline is not None and time.monotonic() >= self.deadline:
                self._redeliver()

    def _redeliver(self) -> None:
        """Everything after the acknowledged position goes out again."""
        if self._scanner_greenlet is not None:
            self._scanner_greenlet.kill()
        self.redelivered += 1
        self.delivered = self.acked
        self.deadline = None
        self._reset(self.acked)
        self._scanner_greenlet = gevent.spawn(self.scanner.run)


def pull(
    manager: WorkerManager,
    queue: str,
    name: str,
    member: str,
    max_messages: int,
    max_wait: float,
    to_messages: Callable[[list[tuple[int, Row]]], list[Any]],
) -> list[Any]:
    """The long poll: messages of the member's partitions as soon as there are any."""
    deadline = time.monotonic() + max_wait
    kicked = False
    while True:
        workers = manager.pull_workers(queue, name, member)
        if workers is None and not kicked:
            manager.changed(queue, name)  # the member just joined: assign it now
            kicked = True
        out: list[tuple[int, Row]] = []
        size = 0
        for worker in workers or ():
            rows = worker.take(max_messages - len(out), MAX_PULL_BYTES - size)
            out.extend((worker.partition, r) for r in rows)
            size += sum(len(r[2]) + len(r[3]) for r in rows)
            if len(out) >= max_messages or size >= MAX_PULL_BYTES:
                break
        remaining = deadline - time.monotonic()
        if out or remaining <= 0:
            return to_messages(out)
        events = [w.buffer.not_empty for w in workers or ()]
        # re-check now and then: the assignment may change, a redelivery swaps buffers
        if events:
            gevent.wait(events, timeout=min(remaining, 0.25), count=1)
        else:  # (gevent.wait on no objects returns at once, without yielding)
            gevent.sleep(min(remaining, 0.05))
