"""Reading whole Thrift messages off a socket, checked before anything decodes them.

thriftpy2's decoders trust the wire (see ``_wirecheck.c``), so the gateway never lets them read
from the socket. A :class:`MessageReader` buffers bytes until :mod:`gateway._wirecheck` says a
whole, sane message is there, enforcing byte limits per method as soon as a length prefix
announces too much; only then is the message decoded, from memory. Anything else ends that one
connection: an absurd length costs the gateway nothing, garbage costs it a few bytes.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

from thriftpy2.transport import TTransportException

from ._wirecheck import scan

_READ_CHUNK = 256 * 1024
_FRAME = struct.Struct(">i")
# Methods whose requests carry message bodies; every other request is small.
BULK_METHODS = frozenset(
    [b"putMessage", b"putMessages", b"putMessageWithPid", b"putMessagesWithPid"]
)
SMALL_REQUEST_BYTES = 1024 * 1024
HEADER_BYTES = 4096 + 64


class BadRequest(TTransportException):
    """The peer sent something we refuse to decode; its connection is closed."""

    def __init__(self, message: str) -> None:
        super().__init__(TTransportException.UNKNOWN, message)


@dataclass(frozen=True)
class RequestLimits:
    max_request_bytes: int = 64 * 1024 * 1024  # put requests
    max_string_bytes: int = 4 * 1024 * 1024  # the largest string (a message body)
    max_container: int = 100_000  # elements of one list or map
    max_values: int = 801_024  # fields and elements in one request

    @classmethod
    def for_batches(
        cls, max_request_bytes: int, max_value_bytes: int, max_batch_messages: int
    ) -> RequestLimits:
        # A string may be as long as a request: a body over --max-value-bytes is then refused
        # by the service with IllegalArgument on a connection that stays open, instead of the
        # client seeing its connection closed (a broken pipe) with no reason given.
        return cls(
            max_request_bytes=max_request_bytes,
            max_string_bytes=max(max_request_bytes, max_value_bytes, 4096),
            max_container=max(max_batch_messages, 32767),  # a list of every partition id
            max_values=8 * max_batch_messages + 1024,  # a message is at most ~5 values
        )

    def bytes_for(self, method: bytes | None) -> int:
        if method is None:
            return HEADER_BYTES
        if method in BULK_METHODS:
            return self.max_request_bytes
        return min(self.max_request_bytes, SMALL_REQUEST_BYTES)


class MessageReader:
    """Yields the bytes of one checked message at a time from ``sock``."""

    def __init__(self, sock: socket.socket, *, framed: bool, compact: bool, limits: RequestLimits):
        self._sock = sock
        self._framed = framed
        self._compact = compact
        self._limits = limits
        self._buf = bytearray()

    def next_message(self) -> tuple[bytes, bytes]:
        """(the bytes of one whole checked message, its method name)."""
        return self._next_framed() if self._framed else self._next_buffered()

    def _check(self, data: bytes | bytearray | memoryview, state: bytes | None) -> tuple:
        lim = self._limits
        try:
            return scan(
                data,
                self._compact,
                state,
                lim.max_string_bytes,
                lim.max_container,
                lim.max_values,
            )
        except ValueError as exc:
            raise BadRequest(f"refused request: {exc}") from None

    def _next_buffered(self) -> tuple[bytes, bytes]:
        buf = self._buf
        state = None
        need = 1
        while True:
            if buf and len(buf) >= need:
                status, n, state, method = self._check(buf, state)
                if status == 0:
                    message = bytes(memoryview(buf)[:n])
                    del buf[:n]
                    return message, method
                need = n
                limit = self._limits.bytes_for(method)
                if need > limit:
                    raise BadRequest(
                        f"refused request{_named(method)}: it needs at least {need} bytes, "
                        f"over the limit of {limit}"
                    )
            self._receive(buf)

    def _next_framed(self) -> tuple[bytes, bytes]:
        buf = self._buf
        while len(buf) < 4:
            self._receive(buf)
        (size,) = _FRAME.unpack_from(buf)
        limit = self._limits.max_request_bytes
        if not 0 < size <= limit:
            raise BadRequest(f"refused frame of {size} bytes (the limit is {limit})")
        while len(buf) < 4 + size:
            self._receive(buf)
        frame = memoryview(buf)[4 : 4 + size]
        status, n, _, method = self._check(frame, None)
        if status != 0 or n != size:
            raise BadRequest("refused frame: it does not hold exactly one message")
        if size > self._limits.bytes_for(method):
            raise BadRequest(f"refused request{_named(method)} of {size} bytes")
        message = bytes(frame)
        frame.release()
        del buf[: 4 + size]
        return message, method

    def _receive(self, buf: bytearray) -> None:
        chunk = self._sock.recv(_READ_CHUNK)
        if not chunk:
            raise TTransportException(TTransportException.END_OF_FILE, "peer closed")
        buf += chunk


def _named(method: bytes | None) -> str:
    return f" {method.decode(errors='replace')}" if method else ""


class SocketWriter:
    """The write side thriftpy2's output transports flush into."""

    __slots__ = ("_sock",)

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def write(self, data: bytes) -> None:
        self._sock.sendall(data)

    def flush(self) -> None:
        pass

    def is_open(self) -> bool:
        return True

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._sock.close()
