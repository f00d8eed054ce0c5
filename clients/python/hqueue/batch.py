"""Buffered puts: collect messages and send them ``batch_size`` at a time.

    with queue.batch(batch_size=500) as b:
        for line in lines:
            b.put("lines", line)
    # the rest was sent when the block ended

Leaving the block by an exception sends nothing more: batches already sent stay sent, the
messages still buffered are dropped (call :meth:`Batch.send` yourself to keep them).
"""

from __future__ import annotations

from types import TracebackType
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgument

if TYPE_CHECKING:
    from .arguments import Bytes
    from .queue import Queue


class Batch:
    """Made by :meth:`hqueue.Queue.batch`; not shared between threads or greenlets."""

    def __init__(self, queue: Queue, batch_size: int, partition: int | None) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidArgument("batch_size", f"must be an int >= 1, got {batch_size!r}")
        self.queue = queue
        self.batch_size = batch_size
        self.partition = partition
        self.sent = 0  # messages sent so far
        self._pending: list[Any] = []

    def __len__(self) -> int:
        """How many messages wait to be sent."""
        return len(self._pending)

    def put(self, topic: Bytes, value: Bytes, partition: int | None = None) -> None:
        """Adds a message (to ``partition``, else the batch's); sends when the batch is full."""
        self._pending.append((topic, value) if partition is None else (topic, value, partition))
        if len(self._pending) >= self.batch_size:
            self.send()

    def send(self) -> None:
        """Sends what is buffered now, in one call."""
        pending, self._pending = self._pending, []
        if pending:
            self.sent += self.queue.put_many(pending, partition=self.partition)

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None:
            self.send()
        else:
            self._pending = []
