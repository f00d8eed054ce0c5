"""MessageSender (seed 3.5.3): pushes batches to a subscriber's ``consumeMessages``.

One sender per (subscriber, partition), one batch in flight: the next batch leaves only after
the subscriber answered 0 for this one. A non-zero status, a timeout or a broken connection
resends the *same* batch after a growing back-off (never skipping, never reordering), on a new
connection when the old one broke. Only an acknowledged batch advances ``acked``, which the
checkpoint updater writes to the registry.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Any

import gevent
from hqueue.protocol import hqueue_thrift, parse_address, subscriber_thrift
from thriftpy2.rpc import make_client

from .scanner import Id, MessageBuffer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SenderOptions:
    batch_messages: int = 1000
    batch_bytes: int = 4 * 1024 * 1024
    timeout: float = 30.0  # seconds a consumeMessages call may take
    backoff_initial: float = 0.05  # seconds
    backoff_max: float = 5.0  # seconds


class MessageSender:
    def __init__(
        self,
        address: str,
        queue: str,
        name: str,
        partition: int,
        buffer: MessageBuffer,
        acked: Id | None,
        options: SenderOptions,
    ) -> None:
        self.host, self.port = parse_address(address, argument="address")
        self.address = address
        self.queue = queue
        self.name = name
        self.partition = partition
        self.buffer = buffer
        self.acked = acked  # the last MessageID the subscriber acknowledged
        self.options = options
        self.delivered = 0  # messages acknowledged by this sender
        self._client: Any = None
        self._thrift = subscriber_thrift()
        self._message = hqueue_thrift().TMessage
        self._id = hqueue_thrift().TMessageID

    def run(self) -> None:
        try:
            while True:
                rows = self.buffer.take(self.options.batch_messages, self.options.batch_bytes)
                self._deliver(rows)
        finally:
            self._close()

    def _deliver(self, rows: list[Any]) -> None:
        message, mid, p = self._message, self._id, self.partition
        batch = [message(mid(r[0], r[1]), p, r[2], r[3]) for r in rows]
        attempt = 0
        while True:
            status: Any = None
            try:
                if self._client is None:
                    self._client = make_client(
                        self._thrift.HQueueSubscriberService,
                        host=self.host,
                        port=self.port,
                        timeout=int(self.options.timeout * 1000),
                    )
                status = self._client.consumeMessages(batch)
                if status == 0:
                    break
                problem = f"status {status}"
            except gevent.GreenletExit:
                raise
            except Exception as exc:  # transport errors, timeouts, refused connections
                self._close()
                problem = f"{type(exc).__name__}: {exc}"
            delay = min(self.options.backoff_max, self.options.backoff_initial * 2**attempt)
            attempt += 1
            log_at = logging.WARNING if attempt in (1, 10) or attempt % 100 == 0 else logging.DEBUG
            log.log(
                log_at,
                "push of %d message(s) to %s/%s at %s (partition %d) failed (%s); "
                "attempt %d, retrying in %.2f s",
                len(batch), self.queue, self.name, self.address, p, problem, attempt, delay,
            )  # fmt: skip
            gevent.sleep(delay)
        last = rows[-1]
        self.acked = (last[0], last[1])
        self.delivered += len(rows)

    def _close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client.close()
            self._client = None
