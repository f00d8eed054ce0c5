"""MessageSender (seed 3.5.3): pushes batches to a subscriber's ``consumeMessages``.

One sender per (subscriber, partition), one batch in flight: the next batch leaves only after
the subscriber answered 0 for this one. A non-zero status, a timeout or a broken connection
resends the *same* batch after a growing back-off (never skipping, never reordering), on a new
connection when the old one broke. Only an acknowledged batch advances ``acked``, which the
checkpoint updater writes to the registry.

Subscribers are spoken to in the binary protocol over a buffered transport (what every
HQueueSubscriberService server must accept). The request is encoded from the rows in C by the
encoder of scan replies: a ``consumeMessages`` call and its reply differ only in the message
type and the list's field id (``encode_call``), so no TMessage object is built per message.
"""

from __future__ import annotations

import contextlib
import logging
import socket
from dataclasses import dataclass
from typing import Any

import gevent
from hqueue.protocol import parse_address, subscriber_thrift
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TMemoryBuffer

from .._wirecheck import encode_messages_reply
from ..metrics import PushCounters
from ..store.base import Row
from ..wire import MessageReader, RequestLimits
from .scanner import Id, MessageBuffer

log = logging.getLogger(__name__)

_METHOD = b"consumeMessages"
_TYPE_AT = 3  # the low byte of the strict binary header's version word: the message type
_FIELD_ID_AT = 4 + 4 + len(_METHOD) + 4 + 1  # after the header and the field's type byte
_CALL = 1


# A consumeMessages reply is an i32 status (or an exception): anything bigger is refused before
# it is decoded. thriftpy2 alone trusted it: a reply announcing a list of 2^31-1 elements froze
# the gateway for seconds.
REPLY_LIMITS = RequestLimits(
    max_request_bytes=64 * 1024, max_string_bytes=16 * 1024, max_container=64, max_values=256
)


def encode_call(partition: int, rows: list[Row]) -> bytes:
    """The bytes of ``consumeMessages(messages)`` (strict binary protocol), from rows."""
    data = bytearray(encode_messages_reply(_METHOD, 0, partition, rows))
    data[_TYPE_AT] = _CALL  # a call, not a reply
    data[_FIELD_ID_AT : _FIELD_ID_AT + 2] = b"\x00\x01"  # args field 1, not result field 0
    return bytes(data)


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
        self.counters: PushCounters | None = None  # the gateway's metrics, when they run
        self._client: Any = None
        self._thrift = subscriber_thrift()

    def run(self) -> None:
        try:
            while True:
                rows = self.buffer.take(self.options.batch_messages, self.options.batch_bytes)
                self._deliver(rows)
        finally:
            self._close()

    def _deliver(self, rows: list[Row]) -> None:
        p = self.partition
        request = encode_call(p, rows)
        attempt = 0
        while True:
            status: Any = None
            try:
                if self._client is None:
                    self._client = self._connect()
                sock, reader = self._client
                sock.settimeout(self.options.timeout)
                sock.sendall(request)
                status = self._status(*reader.next_message())
                if status == 0:
                    break
                problem = f"status {status}"
            except gevent.GreenletExit:
                raise
            except Exception as exc:  # transport errors, timeouts, refused connections
                self._close()
                problem = f"{type(exc).__name__}: {exc}"
            if self.counters is not None:
                self.counters.retries += 1
            delay = min(self.options.backoff_max, self.options.backoff_initial * 2**attempt)
            attempt += 1
            log_at = logging.WARNING if attempt in (1, 10) or attempt % 100 == 0 else logging.DEBUG
            log.log(
                log_at,
                "push of %d message(s) to %s/%s at %s (partition %d) failed (%s); "
                "attempt %d, retrying in %.2f s",
                len(rows), self.queue, self.name, self.address, p, problem, attempt, delay,
            )  # fmt: skip
            gevent.sleep(delay)
        last = rows[-1]
        self.acked = (last[0], last[1])
        self.delivered += len(rows)
        if self.counters is not None:
            self.counters.delivered_messages += len(rows)
            self.counters.delivered_batches += 1

    def _connect(self) -> tuple[socket.socket, MessageReader]:
        sock = socket.create_connection((self.host, self.port), timeout=self.options.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        reader = MessageReader(
            sock,
            framed=False,
            compact=False,
            limits=REPLY_LIMITS,
            request_timeout=self.options.timeout,
            idle_timeout=self.options.timeout,
        )
        return sock, reader

    def _status(self, message: bytes, method: bytes) -> Any:
        """The status of a checked consumeMessages reply (decoded from memory)."""
        proto = TBinaryProtocol(TMemoryBuffer(message))
        _, mtype, _ = proto.read_message_begin()
        if method != _METHOD:
            raise TApplicationException(TApplicationException.WRONG_METHOD_NAME, repr(method))
        if mtype == TMessageType.EXCEPTION:
            exc = TApplicationException()
            exc.read(proto)
            raise exc
        result = self._thrift.HQueueSubscriberService.consumeMessages_result()
        result.read(proto)
        return result.success

    def _close(self) -> None:
        if self._client is not None:
            with contextlib.suppress(Exception):
                self._client[0].close()
            self._client = None
