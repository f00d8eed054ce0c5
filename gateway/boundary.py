"""The Thrift boundary: decode (or take apart) a checked request, call the handler, map failures.

thriftpy2's ``TProcessor.process`` drops the client's connection when a handler raises an
exception the IDL does not declare. Here every failure becomes an answer instead:
:class:`InvalidArgument` -> ``IllegalArgument``, other :class:`HQueueError` -> ``IOError``,
anything unexpected -> ``TApplicationException(INTERNAL_ERROR)`` (logged with its traceback).
The connection stays usable after any of them.

The request was checked by :mod:`gateway.wire` before it reached ``process``.
"""

from __future__ import annotations

import logging
import struct
from collections.abc import Callable
from typing import Any

from thriftpy2.thrift import TApplicationException, TProcessor

from .errors import HQueueError, InvalidArgument, Overloaded, StoreError
from .fast import encode_messages_reply, extract_put
from .scanrows import EncodedRows, MessageRows
from .wire import direct_writer

log = logging.getLogger(__name__)


# method -> (carries a partitionID argument, carries one message rather than a list)
_PUTS = {
    b"putMessages": (False, False),
    b"putMessagesWithPid": (True, False),
    b"putMessage": (False, True),
    b"putMessageWithPid": (True, True),
    b"forwardMessages": (True, False),
}


class GatewayProcessor(TProcessor):
    """A TProcessor that maps errors to the IDL, with fast paths for the binary protocol.

    Scans: a handler may answer a ``list<TMessage>`` method with :class:`MessageRows`; on the
    binary protocol the reply is encoded from the rows in C, byte for byte what thriftpy2
    would write, else the rows become TMessage objects first.

    Puts: ``max_value_bytes`` turns the put path on (the handler must have
    ``begin_put_raw``): a put is taken apart by :func:`gateway._wirecheck.extract_put`
    straight from the wire bytes instead of being decoded into a Python object per message;
    any put it does not take (a message's own partitionID, a bad topic or value, ...) goes the
    generic way, so answers are the same.
    """

    def __init__(
        self,
        thrift: Any,
        service: Any,
        handler: Any,
        *,
        binary: bool = True,
        max_value_bytes: int | None = None,
    ) -> None:
        super().__init__(service, handler)
        self._thrift = thrift
        self._io_error: Any = thrift.IOError
        self._illegal: Any = thrift.IllegalArgument
        self._binary = binary
        self._max_value = max_value_bytes
        self.fast_puts = (
            binary and max_value_bytes is not None and hasattr(handler, "begin_put_raw")
        )
        self.stats: Any = None  # a gateway.metrics.GatewayStats when metrics run

    def process(self, iprot: Any, oprot: Any) -> None:
        api, seqid, result, call = self.process_in(iprot)
        if isinstance(result, TApplicationException):
            return self.send_exception(oprot, api, result, seqid)
        assert call is not None  # only unknown methods come without one
        self._answer(oprot, api, seqid, result, call)
        return None

    def process_put(self, message: bytes, method: bytes, oprot: Any) -> bool:
        """Serves a binary-protocol put from its bytes; False if it needs :meth:`process`."""
        answer = self.begin_put(message, method, oprot)
        if answer is None:
            return False
        answer()
        return True

    def begin_put(self, message: bytes, method: bytes, oprot: Any) -> Callable[[], None] | None:
        """A binary-protocol put from its bytes in two steps: checks it and writes it now,
        returns what waits until it is durable and then writes its answer (or the error's)
        to ``oprot``; None if it needs :meth:`process`. The server pipelines a connection's
        puts with it: the next put is written while this one's log sync runs."""
        shape = _PUTS.get(method)
        if shape is None:  # a bulk method without a fast path (putMessagesReturningIds)
            return None
        with_pid, single = shape
        assert self._max_value is not None
        taken = extract_put(message, with_pid, single, self._max_value)
        if taken is None:
            return None
        seqid, queue, pid, topics, values = taken
        api = method.decode()
        result = getattr(self._service, api + "_result")()
        forwarded = method == b"forwardMessages"
        begin = getattr(self._handler, "begin_put_raw")  # noqa: B009 - checked in __init__
        try:
            durable = begin(queue, pid, topics, values, forwarded)
        except Exception as exc:  # answered in its turn, after the puts before it
            failure = exc

            def durable() -> None:
                raise failure

        return lambda: self._answer(oprot, api, seqid, result, durable)

    def _answer(self, oprot: Any, api: str, seqid: int, result: Any, call: Any) -> None:
        try:
            result.success = call()
        except InvalidArgument as exc:
            result.ia = self._illegal(message=str(exc))
            if self.stats is not None:
                self.stats.request_error(api, "illegal_argument")
        except HQueueError as exc:
            result.io = self._io_error(message=str(exc))
            if self.stats is not None:
                self._count_io_error(api, exc)
        except TApplicationException as exc:
            self.send_exception(oprot, api, exc, seqid)
            return
        except Exception as exc:
            log.exception("unexpected error in %s", api)
            if self.stats is not None:
                self.stats.request_error(api, "internal")
            self.send_exception(
                oprot,
                api,
                TApplicationException(
                    TApplicationException.INTERNAL_ERROR,
                    f"internal error in {api}: {type(exc).__name__}: {exc}",
                ),
                seqid,
            )
            return
        if result.oneway:
            return
        rows = getattr(result, "success", None)  # void methods have no success field
        if isinstance(rows, MessageRows):
            if self._binary:  # encode straight from the rows
                if isinstance(rows.rows, EncodedRows):  # the store reader encoded them
                    reply = _encoded_reply(api.encode(), seqid, rows.rows)
                else:
                    assert rows.partitions is not None  # only encoded rows leave them out
                    reply = (
                        encode_messages_reply(api.encode(), seqid, rows.partitions, rows.rows),
                    )
                # the reply is the only copy from here: a client slow to read it holds just it
                result.success = rows = None
                direct = direct_writer()
                if direct is not None:
                    direct(*reply)
                else:
                    for part in reply:
                        oprot.trans.write(part)
                    oprot.trans.flush()
                return
            result.success = rows.to_messages(self._thrift)
        self.send_result(oprot, api, result, seqid)

    def _count_io_error(self, api: str, exc: HQueueError) -> None:
        if isinstance(exc, Overloaded):
            self.stats.request_error(api, "overloaded")
            return
        self.stats.request_error(api, "io_error")
        if isinstance(exc, StoreError):
            self.stats.store_error(api)


_REPLY_HEAD = struct.Struct(">ii")  # version and type, name length
_LIST_HEAD = struct.Struct(">iBhBi")  # seqid, success field (list, 0), element type, size


def _encoded_reply(
    name: bytes, seqid: int, rows: EncodedRows
) -> tuple[bytes | bytearray | memoryview, ...]:
    """The binary REPLY of a ``list<TMessage>`` method around messages already encoded (what
    ``encode_messages_reply`` writes for the same rows), as the parts to send one after the
    other: the head is written into the room before the messages when there is some
    (``REPLY_ROOM``), so no message is copied; the reply's last byte goes alone (appending it
    could move the whole buffer). A merged scan's rows are parts already: the head goes
    before them."""
    head = b"".join((
        _REPLY_HEAD.pack(-2147418110, len(name)),  # 0x80010002: version 1, REPLY
        name,
        _LIST_HEAD.pack(seqid, 15, 0, 12, rows.count),
    ))  # fmt: skip
    if rows.parts is not None:
        return (head, *rows.parts, _END)
    data, start = rows.data, rows.start
    at = start - len(head)
    if at < 0:
        return (head, memoryview(data)[start:], _END)
    data[at:start] = head
    return (memoryview(data)[at:], _END)


_END = b"\x00"  # of the result struct
