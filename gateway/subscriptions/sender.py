"""MessageSender (seed 3.5.3): pushes batches to a subscriber's ``consumeMessages``.

One sender per (subscriber, partition), one batch in flight: the next batch leaves only after
the subscriber answered 0 for this one. A non-zero status, a timeout or a bad answer is a
failed attempt: the batch is sent again after the subscription's back-off, then its messages
one at a time, and a message that used up its attempts becomes a dead letter (see
:mod:`.retry`); a broken or refused connection is retried on a new connection without
counting. Messages are never reordered. Only acknowledged (or dead-lettered) messages advance
``acked``, which the checkpoint updater writes to the registry.

Subscribers are spoken to (over TLS when the gateway has ``--tls-ca``) in the binary protocol
over a buffered transport (what every
HQueueSubscriberService server must accept). The request is encoded from the rows in C by the
encoder of scan replies: a ``consumeMessages`` call and its reply differ only in the message
type and the list's field id (``encode_call``), so no TMessage object is built per message.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gevent
from hqueue_contract.protocol import parse_address, subscriber_thrift
from hqueue_contract.registry import RetryPolicy
from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.thrift import TApplicationException, TMessageType
from thriftpy2.transport import TMemoryBuffer

from ..fast import encode_messages_reply
from ..keys import Extras
from ..metrics import PushCounters
from ..store.base import Row
from ..wire import BadRequest, MessageReader, RequestLimits
from .retry import BATCH_ATTEMPTS, DeadLetterSink
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


def encode_call(
    partition: int, rows: list[Row], extras: Sequence[Extras | None] | None = None
) -> bytes:
    """The bytes of ``consumeMessages(messages)`` (strict binary protocol), from rows; with
    ``extras`` (index-aligned with rows), the messages that have one carry its key and
    properties (encoded by thriftpy2: only batches that need it pay for TMessage objects)."""
    if extras is not None and any(extras):
        return _encode_call_with_extras(partition, rows, extras)
    data = bytearray(encode_messages_reply(_METHOD, 0, partition, rows))
    data[_TYPE_AT] = _CALL  # a call, not a reply
    data[_FIELD_ID_AT : _FIELD_ID_AT + 2] = b"\x00\x01"  # args field 1, not result field 0
    return bytes(data)


def _encode_call_with_extras(
    partition: int, rows: list[Row], extras: Sequence[Extras | None]
) -> bytes:
    t = subscriber_thrift()
    types = t.hqueue  # the included hqueue.thrift
    messages = []
    for (ts, seq, topic, value), ex in zip(rows, extras, strict=True):
        m = types.TMessage(types.TMessageID(ts, seq), partition, topic, value)
        if ex:
            m.key = ex.key
            m.properties = ex.properties or None
        messages.append(m)
    buf = TMemoryBuffer()
    proto = TBinaryProtocol(buf)
    proto.write_message_begin(_METHOD.decode(), TMessageType.CALL, 0)
    proto.write_struct(t.HQueueSubscriberService.consumeMessages_args(messages=messages))
    proto.write_message_end()
    return bytes(buf.getvalue())


@dataclass(frozen=True)
class SenderOptions:
    batch_messages: int = 1000
    batch_bytes: int = 4 * 1024 * 1024
    timeout: float = 30.0  # seconds a consumeMessages call may take
    # back-off while the subscriber cannot be reached (failures of a subscriber that answers
    # follow its subscription's RetryPolicy)
    backoff_initial: float = 0.05  # seconds
    backoff_max: float = 5.0  # seconds
    # TLS to subscribers (gateway.tls.client_context from --tls-ca); None: plain TCP
    tls: ssl.SSLContext | None = None


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
        *,
        policy: RetryPolicy | None = None,
        max_batch: int | None = None,
        dead_letter: DeadLetterSink | None = None,
        source_partition: int | None = None,
    ) -> None:
        self.host, self.port = parse_address(address, argument="address")
        self.address = address
        self.queue = queue
        self.name = name
        self.partition = partition
        # what the dead letters of this sender say they came from (the replay worker reads
        # the dead-letter queue but its letters are the subscriber's own)
        self.source_partition = partition if source_partition is None else source_partition
        self.buffer = buffer
        self.acked = acked  # the last MessageID the subscriber acknowledged
        self.options = options
        self.policy = policy or RetryPolicy()
        self.batch_messages = min(options.batch_messages, max_batch or options.batch_messages)
        # None: nowhere to put dead letters, so failing messages are retried forever
        self.dead_letter = dead_letter
        self.delivered = 0  # messages acknowledged by this sender
        self.dead_lettered = 0
        self.counters: PushCounters | None = None  # the gateway's metrics, when they run
        self._client: Any = None
        self._thrift = subscriber_thrift()
        # set by the worker: the keys and properties of rows (index-aligned; None when no row
        # of them has any), so pushed messages carry them
        self.extras_of: Callable[[list[Row]], list[Extras | None] | None] | None = None

    def run(self) -> None:
        try:
            while True:
                rows = self.buffer.take(self.batch_messages, self.options.batch_bytes)
                self._deliver(rows)
        finally:
            self._close()

    def _deliver(self, rows: list[Row]) -> None:
        """Delivers rows in order: the batch (retried once), then one message at a time,
        dead-lettering a message whose attempts reach the policy's limit (see :mod:`.retry`)."""
        limit = self.policy.max_attempts
        attempts = 0
        if len(rows) > 1:
            whole = BATCH_ATTEMPTS if limit == 0 else max(1, min(BATCH_ATTEMPTS, limit - 1))
            away = 0
            while True:
                problem, counted = self._push(rows)
                if problem is None:
                    self._advance(rows)
                    return
                if counted:
                    attempts += 1
                    if attempts >= whole:
                        self._log_failure(rows, problem, attempts, 0.0, "one at a time now")
                        break
                    delay = self.policy.backoff(attempts)
                else:
                    away += 1
                    delay = self._away_delay(away)
                self._log_failure(rows, problem, attempts, delay)
                gevent.sleep(delay)
        for row in rows:
            self._deliver_one(row, attempts)

    def _deliver_one(self, row: Row, attempts: int) -> None:
        limit = self.policy.max_attempts
        away = 0
        one = [row]
        while True:
            problem, counted = self._push(one)
            if problem is None:
                self._advance(one)
                return
            if counted:
                attempts += 1
                if limit and attempts >= limit and self.dead_letter is not None:
                    self._bury(row, attempts, problem)
                    self._advance(one)
                    self.dead_lettered += 1
                    return
                delay = self.policy.backoff(attempts)
            else:
                away += 1
                delay = self._away_delay(away)
            self._log_failure(one, problem, attempts, delay)
            gevent.sleep(delay)

    def _bury(self, row: Row, attempts: int, problem: str) -> None:
        """Writes the dead letter, retrying until the store takes it (never lost)."""
        assert self.dead_letter is not None
        failures = 0
        while True:
            try:
                self.dead_letter(
                    self.queue, self.name, self.source_partition, row, attempts, problem
                )
                return
            except gevent.GreenletExit:
                raise
            except Exception:
                failures += 1
                log.exception("writing a dead letter of %s/%s failed; retrying", self.queue,
                              self.name)  # fmt: skip
                gevent.sleep(self._away_delay(failures))

    def _push(self, rows: list[Row]) -> tuple[str | None, bool]:
        """One consumeMessages call: (None, _) when acknowledged, else (what went wrong,
        whether it counts as an attempt: a refusal, a timeout or a bad answer, not an
        unreachable peer)."""
        try:
            extras = self.extras_of(rows) if self.extras_of is not None else None
        except gevent.GreenletExit:
            raise
        except Exception as exc:  # the store could not say: an attempt that does not count
            return f"reading keys and properties: {type(exc).__name__}: {exc}", False
        request = encode_call(self.partition, rows, extras)
        try:
            if self._client is None:
                self._client = self._connect()
            sock, reader = self._client
            sock.settimeout(self.options.timeout)
            sock.sendall(request)
            status = self._status(*reader.next_message())
        except gevent.GreenletExit:
            raise
        except (TimeoutError, BadRequest, TApplicationException) as exc:
            self._close()
            return f"{type(exc).__name__}: {exc}", True
        except Exception as exc:  # transport errors, refused connections
            self._close()
            return f"{type(exc).__name__}: {exc}", False
        if status == 0:
            return None, False
        return f"status {status}", True

    def _advance(self, rows: list[Row]) -> None:
        last = rows[-1]
        self.acked = (last[0], last[1])
        self.delivered += len(rows)
        if self.counters is not None:
            self.counters.delivered_messages += len(rows)
            self.counters.delivered_batches += 1

    def _away_delay(self, failures: int) -> float:
        return min(self.options.backoff_max, self.options.backoff_initial * 2 ** min(failures, 30))

    def _log_failure(
        self, rows: list[Row], problem: str, attempts: int, delay: float, then: str = ""
    ) -> None:
        if self.counters is not None:
            self.counters.retries += 1
        n = attempts or 1
        log_at = logging.WARNING if n in (1, 10) or n % 100 == 0 else logging.DEBUG
        log.log(
            log_at,
            "push of %d message(s) to %s/%s at %s (partition %d) failed (%s); attempt %d, %s",
            len(rows), self.queue, self.name, self.address, self.partition, problem, attempts,
            then or f"retrying in {delay:.2f} s",
        )  # fmt: skip

    def _connect(self) -> tuple[socket.socket, MessageReader]:
        sock = socket.create_connection((self.host, self.port), timeout=self.options.timeout)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.options.tls is not None:  # --tls-ca: verify the subscriber, show our cert
            try:
                sock = self.options.tls.wrap_socket(sock, server_hostname=self.host)
            except BaseException:
                sock.close()
                raise
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
