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

import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from thriftpy2.protocol import TBinaryProtocol
from thriftpy2.protocol.exc import TProtocolException
from thriftpy2.thrift import TApplicationException, TClient
from thriftpy2.transport import TMemoryBuffer, TTransportException

from . import codec, protocol
from .errors import InvalidArgument, ServerError, TransportError

if TYPE_CHECKING:
    from .client import Connection

READ_CHUNK = 256 * 1024
MAX_REPLY_BYTES = 512 * 1024 * 1024  # a server announcing more is not one we talk to
_FRAME = struct.Struct(">i")

# decode(buffer) -> (end, value) | 0 (need more bytes) | -1 (let thriftpy2 decode it)
Decoder = Callable[[bytearray], "tuple[int, Any] | int"]


class Channel:
    """Whole requests out, whole replies in, on one socket (buffered or framed transport)."""

    __slots__ = ("_buf", "framed", "sock")

    def __init__(self, sock: socket.socket, framed: bool) -> None:
        self.sock = sock
        self.framed = framed
        self._buf = bytearray()

    def send(self, request: bytes) -> None:
        self.sock.sendall(frame(request) if self.framed else request)

    def _fill(self) -> None:
        buf = self._buf
        if len(buf) > MAX_REPLY_BYTES:
            raise TTransportException(
                TTransportException.UNKNOWN, f"a reply over {MAX_REPLY_BYTES} bytes"
            )
        chunk = self.sock.recv(READ_CHUNK)
        if not chunk:
            raise TTransportException(TTransportException.END_OF_FILE, "the gateway closed")
        buf += chunk

    def receive(self, method: str, decode: Decoder) -> Any:
        """The reply to the oldest call sent, decoded (or raised, if it is an exception)."""
        buf = self._buf
        if self.framed:
            while len(buf) < 4:
                self._fill()
            (size,) = _FRAME.unpack_from(buf)
            if not 0 < size <= MAX_REPLY_BYTES:
                raise TTransportException(TTransportException.UNKNOWN, f"frame of {size}")
            while len(buf) < 4 + size:
                self._fill()
            frame = bytearray(buf[4 : 4 + size])
            del buf[: 4 + size]
            got = decode(frame)
            if isinstance(got, tuple):
                if got[0] != size:
                    raise TProtocolException(TProtocolException.INVALID_DATA, "frame mismatch")
                return got[1]
            if got == 0:
                raise TProtocolException(TProtocolException.INVALID_DATA, "a short frame")
            return generic(method, bytes(frame))
        # first wait for the whole reply (a walk that makes no objects), then decode it once:
        # decoding each piece as it came would build every message again after each recv
        while not (end := codec.message_end(buf) if buf else 0):
            self._fill()
        got = decode(buf)
        if isinstance(got, tuple):
            if got[0] != end:
                raise TProtocolException(TProtocolException.INVALID_DATA, "reply mismatch")
            del buf[:end]
            return got[1]
        reply = bytes(buf[:end])
        del buf[:end]
        return generic(method, reply)


def generic(method: str, reply: bytes) -> Any:
    """Decodes one whole reply the way thriftpy2's client does: its result, or raises."""
    client = TClient(protocol.hqueue_thrift().HQueueService, TBinaryProtocol(TMemoryBuffer(reply)))
    return client._recv(method)


def void_reply(buf: bytearray) -> tuple[int, None] | int:
    """Decoder of a successful void reply: a REPLY header and an empty result struct."""
    end = codec.message_end(buf)
    if not end:
        return 0
    (name_len,) = _FRAME.unpack_from(buf, 4)
    if buf[3] == 2 and end == 8 + name_len + 4 + 1:
        return end, None
    return -1


def list_reply(buf: bytearray) -> tuple[int, Any] | int:
    return codec.decode_list_reply(buf)


def channel(conn: Connection) -> Channel | None:
    """The raw channel under ``conn`` (opening it), or None when it must use thriftpy2
    (the compact protocol, or a client that is not a socket client)."""
    if conn.compact:
        return None
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


def call(conn: Connection, ch: Channel, method: str, request: bytes, decode: Decoder) -> Any:
    """Sends ``request`` (an encoded ``method`` call) and returns its decoded reply, mapping
    failures as :meth:`Connection.call` does."""
    t = protocol.hqueue_thrift()
    try:
        ch.send(request)
        return ch.receive(method, decode)
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
