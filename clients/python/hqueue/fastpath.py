"""Calls whose request is already encoded (by :mod:`hqueue.codec`) and whose reply is read
straight off the socket: puts and scanner reads, the calls that carry messages.

A :class:`Connection` speaking the binary protocol (its default) sends these on the socket
under its thriftpy2 client. That client is strictly request/reply, so between two calls
nothing is left in its transport's buffers and the raw socket can be used in between. The
compact protocol takes thriftpy2's generic path instead (:func:`channel` returns None).

Declared exceptions (``IllegalArgument``, ``IOError``) and ``TApplicationException`` are rare:
their replies are decoded by thriftpy2, from the bytes read here, and mapped exactly as
:meth:`Connection.call` maps them.
"""

from __future__ import annotations

import contextlib
import socket
import struct
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException, TClient
from thriftpy2.transport import TMemoryBuffer, TTransportException

from . import codec, protocol
from .errors import InvalidArgument, ServerError, TransportError

if TYPE_CHECKING:
    from .connection import Connection

READ_CHUNK = 256 * 1024
MAX_REPLY_BYTES = 512 * 1024 * 1024  # a server announcing more is not one we talk to
_FRAME = struct.Struct(">i")
_LIST_OF_STRUCTS = b"\x0f\x00\x00\x0c"  # field 0 of type list, of element type struct

# decode(buffer) -> (end, value) | 0 (need more bytes) | -1 (let thriftpy2 decode it)
Decoder = Callable[[memoryview], "tuple[int, Any] | int"]


class Channel:
    """Whole requests out, whole replies in, on one socket (buffered or framed transport).

    Replies are received into one reused buffer (``recv_into``, no new object per read) and
    decoded from a view of it; :meth:`ready` and :meth:`take` split :meth:`receive` so that a
    caller can send its next request between the two (:class:`PagedScan`)."""

    __slots__ = ("_buf", "_end", "_size", "_start", "framed", "sock")

    def __init__(self, sock: socket.socket, framed: bool) -> None:
        self.sock = sock
        self.framed = framed
        self._buf = bytearray(READ_CHUNK)
        self._start = 0  # the oldest reply's first byte (its frame header, if framed)
        self._end = 0  # the end of what was received
        self._size = 0  # that reply's size (without the frame header) once ready() saw it whole

    def send(self, request: bytes) -> None:
        self.sock.sendall(frame(request) if self.framed else request)

    def _fill(self) -> None:
        buf = self._buf
        if self._end == len(buf):  # full: move the partial reply to the front, or grow
            pending = self._end - self._start
            if self._start:
                buf[:pending] = buf[self._start : self._end]
                self._start, self._end = 0, pending
            elif pending > MAX_REPLY_BYTES:
                raise TTransportException(
                    TTransportException.UNKNOWN, f"a reply over {MAX_REPLY_BYTES} bytes"
                )
            else:
                buf.extend(bytes(len(buf)))
        with memoryview(buf) as whole, whole[self._end :] as free:
            got = self.sock.recv_into(free)
        if not got:
            raise TTransportException(TTransportException.END_OF_FILE, "the gateway closed")
        self._end += got

    def ready(self) -> int:
        """Reads until the reply to the oldest call sent is whole; returns its size."""
        if self._size:
            return self._size
        buf = self._buf
        if self.framed:
            while self._end - self._start < 4:
                self._fill()
            (size,) = _FRAME.unpack_from(buf, self._start)
            if not 0 < size <= MAX_REPLY_BYTES:
                raise TTransportException(TTransportException.UNKNOWN, f"frame of {size}")
            while self._end - self._start < 4 + size:
                self._fill()
            self._size = size
            return size
        # first wait for the whole reply (a walk that makes no objects), then decode it once:
        # decoding each piece as it came would build every message again after each recv
        while True:
            if self._end > self._start:
                with memoryview(buf) as whole, whole[self._start : self._end] as part:
                    size = codec.message_end(part)
                if size:
                    self._size = size
                    return size
            self._fill()

    def list_count(self) -> int:
        """How many messages the whole reply :meth:`ready` found holds, read from its list
        header without decoding it; 0 if it is no plain ``list<TMessage>`` reply."""
        size = self.ready()
        buf, at = self._buf, self._start + (4 if self.framed else 0)
        if size < 12 or buf[at + 3] != 2:  # not a REPLY
            return 0
        (name_len,) = _FRAME.unpack_from(buf, at + 4)
        head = at + 8 + name_len + 4  # the result struct: field 0 (a list of structs), count
        if name_len < 0 or head + 8 > at + size or buf[head : head + 4] != _LIST_OF_STRUCTS:
            return 0
        (n,) = _FRAME.unpack_from(buf, head + 4)
        return max(n, 0)

    def take(self, method: str, decode: Decoder) -> Any:
        """The whole reply :meth:`ready` found, decoded (or raised, if it is an exception),
        and dropped from the buffer."""
        size = self.ready()
        buf, at = self._buf, self._start + (4 if self.framed else 0)
        # dropped from the buffer first: whatever the decoder does, the next reply is next
        self._start, self._size = at + size, 0
        if self._start == self._end:  # all read: the next reply goes to the front
            self._start = self._end = 0
            if len(buf) > 4 * READ_CHUNK:  # after a huge reply, give the memory back
                self._buf = bytearray(READ_CHUNK)
        reply = b""
        with memoryview(buf) as whole, whole[at : at + size] as part:
            got = decode(part)
            if not isinstance(got, tuple):
                reply = bytes(part)
        if isinstance(got, tuple):
            if got[0] != size:
                raise TProtocolException(TProtocolException.INVALID_DATA, "reply mismatch")
            return got[1]
        if got == 0 and self.framed:
            raise TProtocolException(TProtocolException.INVALID_DATA, "a short frame")
        return generic(method, reply)

    def receive(self, method: str, decode: Decoder) -> Any:
        """The reply to the oldest call sent, decoded (or raised, if it is an exception)."""
        self.ready()
        return self.take(method, decode)


def generic(method: str, reply: bytes) -> Any:
    """Decodes one whole reply the way thriftpy2's client does: its result, or raises."""
    client = TClient(protocol.hqueue_thrift().HQueueService, TBinaryProtocol(TMemoryBuffer(reply)))
    return client._recv(method)


def void_reply(buf: memoryview) -> tuple[int, None] | int:
    """Decoder of a successful void reply: a REPLY header and an empty result struct."""
    end = codec.message_end(buf)
    if not end:
        return 0
    (name_len,) = _FRAME.unpack_from(buf, 4)
    if buf[3] == 2 and end == 8 + name_len + 4 + 1:
        return end, None
    return -1


def list_reply(buf: memoryview) -> tuple[int, Any] | int:
    return codec.decode_list_reply(buf)


def channel(conn: Connection) -> Channel | None:
    """The raw channel under ``conn`` (opening it), or None when it must use thriftpy2
    (the compact protocol, or a client that is not a socket client)."""
    if conn.compact:
        return None
    conn._settle()
    if conn._client is not None and protocol.closed_by_peer(conn._client):
        # the gateway closed this idle connection (restarted, or handed its partitions over):
        # reconnect before sending rather than lose the call, as Connection.call does
        _drop(conn)
    client = conn.client
    ch = getattr(conn, "_hq_channel", None)
    if ch is not None and ch[0] is client:
        return ch[1]  # type: ignore[no-any-return]
    # thriftpy2's Cython transports expose their TSocket's socket as ``sock``; the pure-Python
    # ones the TSocket itself
    sock = getattr(getattr(getattr(client, "_iprot", None), "trans", None), "sock", None)
    if sock is not None and not isinstance(sock, socket.socket):
        sock = getattr(sock, "sock", None)
    if not isinstance(sock, socket.socket):
        return None
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a reply waits for no ack
    made = Channel(sock, conn.framed)
    conn._hq_channel = (client, made)  # type: ignore[attr-defined]
    return made


def frame(request: bytes) -> bytes:
    """``request`` as the framed transport sends it."""
    return _FRAME.pack(len(request)) + request


def mapped(method: str, exc: BaseException) -> BaseException:
    """The client's exception for a failure of ``method`` (as :meth:`Connection.call` maps
    them): :class:`TransportError` means the connection cannot be used any more."""
    t = protocol.hqueue_thrift()
    if isinstance(exc, t.IllegalArgument):
        return InvalidArgument.from_gateway(exc.message)
    if isinstance(exc, t.IOError):
        return ServerError(exc.message)
    if isinstance(exc, TApplicationException):
        return ServerError(f"{method}: {exc}")
    if isinstance(exc, (TTransportException, TProtocolException, OSError, EOFError, ValueError)):
        error = TransportError(f"{method} failed: {exc or type(exc).__name__}")
        error.__cause__ = exc
        return error
    return exc


def _drop(conn: Connection) -> None:
    """Closes ``conn``'s socket, keeping its routing state (Connection._drop when it has it)."""
    drop = getattr(conn, "_drop", None)
    if drop is not None:
        drop()
    else:
        conn.close()


def generic_args(method: str, request: bytes) -> Any:
    """The arguments struct of an encoded ``method`` CALL, decoded by thriftpy2."""
    args = getattr(protocol.hqueue_thrift().HQueueService, method + "_args")()
    proto = TBinaryProtocol(TMemoryBuffer(request))
    proto.read_message_begin()
    args.read(proto)
    proto.read_message_end()
    return args


@contextlib.contextmanager
def guarded(conn: Connection, method: str) -> Iterator[None]:
    """Maps the failures of a call of ``method`` on ``conn``'s channel as
    :meth:`Connection.call` does, closing the connection when it is out of step."""
    t = protocol.hqueue_thrift()
    try:
        yield
    except (t.IllegalArgument, t.IOError, TApplicationException) as exc:
        raise mapped(method, exc) from None
    except (TTransportException, TProtocolException, OSError, EOFError, ValueError) as exc:
        _drop(conn)  # out of step, or gone: never reuse this socket
        raise TransportError(
            f"{method} on gateway {conn.host}:{conn.port} failed: {exc or type(exc).__name__}"
        ) from exc
    except BaseException:
        _drop(conn)  # interrupted mid-call: its answer would be read as the next one's
        raise


def call(conn: Connection, ch: Channel, method: str, request: bytes, decode: Decoder) -> Any:
    """Sends ``request`` (an encoded ``method`` call) and returns its decoded reply, mapping
    failures as :meth:`Connection.call` does."""
    with guarded(conn, method):
        ch.send(request)
        return ch.receive(method, decode)
    raise AssertionError("unreachable")  # for mypy: guarded() never swallows an exception


GET_LIST = "messageScannerGetList"


class PagedScan:
    """The pages of a gateway-side scanner, read one request ahead.

    As soon as a page has arrived whole (and is not the last), the request for the next one
    is sent, and only then is the page decoded and handed out: the gateway reads the next page
    from its store while this process decodes and the caller consumes, instead of each side
    waiting for the other. The requests are the ones a page-at-a-time loop sends (each asks
    for ``batch_size``, or what is left of ``limit``; none after an empty page, which frees the
    scanner, nor once ``limit`` messages have come), only earlier.

    While a request is ahead, the connection owes us its answer: any other call on it (the
    caller putting what it scans, say) first reads that page and keeps it for :meth:`next`
    (``Connection._pending_reply``); :meth:`close` reads it too before closing the scanner.
    """

    __slots__ = ("_ch", "_conn", "_count", "_error", "_in_flight", "_kept", "batch_size",
                 "limit", "open", "sid")  # fmt: skip

    def __init__(
        self, conn: Connection, ch: Channel, sid: int, batch_size: int, limit: int | None
    ) -> None:
        self._conn, self._ch = conn, ch
        self.sid, self.batch_size, self.limit = sid, batch_size, limit
        self._count = 0  # messages in the pages received (whole) so far
        self._in_flight = False
        self._kept: list[Any] | None = None  # a page read early, for the next next()
        self._error: BaseException | None = None  # how reading it early failed
        self.open = True  # the gateway-side scanner (an empty page frees it)

    def _want(self) -> int:
        if self.limit is None:
            return self.batch_size
        return min(self.batch_size, self.limit - self._count)

    def _ask(self, want: int) -> None:
        self._conn._settle()  # another scan's page ahead on this connection: read it first
        self._ch.send(codec.encode_get_list(0, self.sid, want))
        self._in_flight = True
        self._conn._pending_reply = self._read_early

    def _receive(self, ahead: bool) -> list[Any]:
        """The page under way (sending the next request first when ``ahead``)."""
        ch = self._ch
        self._in_flight = False
        self._conn._pending_reply = None
        n = ch.list_count()  # reads the whole page
        self._count += n
        if ahead and n and self._want() > 0:
            self._ask(self._want())
        page: list[Any] = ch.take(GET_LIST, list_reply)
        if not page:
            self.open = False  # the empty list freed it
        return page

    def next(self) -> list[Any]:
        """The next page of Messages; ``[]`` once the scan is over (or ``limit`` reached)."""
        if self._kept is not None or self._error is not None:
            page, error, self._kept, self._error = self._kept, self._error, None, None
            if error is not None:
                raise error
            return page or []
        with self._guard():
            if not self._in_flight:
                want = self._want()
                if not self.open or want <= 0:
                    return []
                self._ask(want)
            return self._receive(ahead=True)
        raise AssertionError("unreachable")  # for mypy: _guard() never swallows an exception

    def _read_early(self) -> None:
        """Another call is about to use the connection: read the page it owes us first."""
        try:
            with self._guard():
                self._kept = self._receive(ahead=False)
        except Exception as exc:  # the scan's failure, raised by its next next()
            self._error = exc

    @contextlib.contextmanager
    def _guard(self) -> Iterator[None]:
        try:
            with guarded(self._conn, GET_LIST):
                yield
        except TransportError:
            self.open = self._in_flight = False  # gone with the connection; the gateway
            raise  # expires the scanner

    def close(self) -> None:
        """Reads the page still under way, if any, then closes the scanner if it is open."""
        with contextlib.suppress(InvalidArgument, ServerError, TransportError):
            if self._in_flight:
                with self._guard():
                    self._receive(ahead=False)
            if self.open:
                self.open = False
                self._conn.call("messageScannerClose", self.sid)
