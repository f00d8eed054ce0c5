"""Reading whole Thrift messages off a socket, checked before anything decodes them.

thriftpy2's decoders trust the wire (see ``_wirecheck.c``), so the gateway never lets them read
from the socket. A :class:`MessageReader` buffers bytes until :mod:`gateway._wirecheck` says a
whole, sane message is there, enforcing byte limits per method as soon as a length prefix
announces too much; only then is the message decoded, from memory. Anything else ends that one
connection: an absurd length costs the gateway nothing, garbage costs it a few bytes.
"""

from __future__ import annotations

import _socket
import socket
import struct
import time
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import gevent.event
from hqueue_contract.limits import MAX_PARTITIONS
from thriftpy2.transport import TTransportException

from .fast import scan

_READ_CHUNK = 256 * 1024
# iovecs one sendmsg takes at most (Linux's IOV_MAX is 1024)
_IOV_MAX = 512
_FRAME = struct.Struct(">i")
# Methods whose requests carry message bodies; every other request is small.
BULK_METHODS = frozenset(
    [
        b"putMessage",
        b"putMessages",
        b"putMessageWithPid",
        b"putMessagesWithPid",
        b"forwardMessages",  # a put another gateway of the cluster forwards to the owner
        b"putMessagesReturningIds",
        b"forwardMessagesReturningIds",  # the same, forwarded to the owner
    ]
)
SMALL_REQUEST_BYTES = 1024 * 1024
HEADER_BYTES = 4096 + 64
# Bytes of an unfinished request a connection may buffer without drawing on the shared
# PendingBudget: small requests (every call but large puts) never wait for it.
FREE_PENDING_BYTES = 64 * 1024


# How the running connection sends a reply that is already whole bytes (scan replies encoded in
# C): straight to its socket, framed if need be, instead of through thriftpy2's output buffer,
# which would copy it twice and keep a buffer of its size for the connection's life. The reply
# comes in parts, sent one after the other (and framed as one).
DirectWriter = Callable[..., None]
_direct_writer: ContextVar[DirectWriter | None] = ContextVar("hqueue_direct_writer", default=None)


def direct_writer() -> DirectWriter | None:
    return _direct_writer.get()


def set_direct_writer(write: DirectWriter) -> None:
    _direct_writer.set(write)


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
            max_container=max(max_batch_messages, MAX_PARTITIONS),  # a list of every partition id
            max_values=8 * max_batch_messages + 1024,  # a message is at most ~5 values
        )

    def bytes_for(self, method: bytes | None) -> int:
        if method is None:
            return HEADER_BYTES
        if method in BULK_METHODS:
            return self.max_request_bytes
        return min(self.max_request_bytes, SMALL_REQUEST_BYTES)


class PendingBudget:
    """The bytes all connections together may hold for requests not yet received whole.

    A client can start a 48 MiB put and go silent; a dozen such clients held ~289 MiB for good.
    Past ``FREE_PENDING_BYTES`` a connection draws on this budget before each read; when it is
    spent the read waits (the sender is held back by TCP) until others finish or give up, and
    a connection that waits longer than its request timeout is closed.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("'limit' must be >= 1 byte")
        self.limit = limit
        self.used = 0
        self._freed = gevent.event.Event()

    def take(self, n: int, deadline: float) -> bool:
        """Reserves ``n`` bytes, waiting until ``deadline`` (time.monotonic()); False if it
        passed first."""
        while self.used + n > self.limit and self.used > 0:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self._freed.wait(left)
        self.used += n
        return True

    def give(self, n: int) -> None:
        if n:
            self.used -= n
            freed, self._freed = self._freed, gevent.event.Event()
            freed.set()


# What a request that waited for room reserves: the largest reply a scan makes (the service's
# max_response_bytes) and some.
REPLY_RESERVE = 17 * 1024 * 1024


class ReplyBudget:
    """The bytes of encoded replies all connections together are sending.

    A client that never reads its replies holds one reply (up to the 16 MiB reply cap) until
    ``--send-timeout`` drops it: a hundred such clients would hold 1.6 GB. Each reply counts
    here while it is being sent; past ``limit`` a connection does not start a request whose
    reply may be large (anything but a put), and reads nothing further meanwhile, until sends
    finish or their connections are dropped (see :meth:`wait_room`). The replies in flight
    stay within the limit plus those already being made when it was reached.
    """

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("'limit' must be >= 1 byte")
        self.limit = limit
        self.used = 0
        self.waits = 0  # times a connection waited before reading (a metric)
        self._room = gevent.event.Event()
        self._room.set()

    def add(self, n: int) -> None:
        self.used += n
        if self.used > self.limit:
            self._room.clear()

    def done(self, n: int) -> None:
        self.used -= n
        if self.used <= self.limit:
            self._room.set()

    def wait_room(self) -> int:
        """Returns once the replies in flight are within the limit, with the bytes it
        reserved: the caller gives them back (:meth:`done`) once its reply is sent. A request
        that had to wait reserves ``REPLY_RESERVE`` bytes, so that the requests that waited do
        not all start together when room comes back (they did: 6 replies of 16 MiB at once)."""
        if self._room.is_set():
            return 0
        self.waits += 1
        while not self._room.is_set():
            self._room.wait()
        self.add(REPLY_RESERVE)
        return REPLY_RESERVE


class MessageReader:
    """Yields the bytes of one checked message at a time from ``sock``.

    ``request_timeout``: seconds a partly received request may go without a byte arriving (an
    idle connection between requests has no limit). ``budget``: shared by every connection,
    see :class:`PendingBudget`. Call :meth:`close` when the connection ends.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        framed: bool,
        compact: bool,
        limits: RequestLimits,
        request_timeout: float | None = None,
        budget: PendingBudget | None = None,
        idle_timeout: float | None = None,
    ):
        self._sock = sock
        self._framed = framed
        self._compact = compact
        self._limits = limits
        self._timeout = request_timeout
        self._idle_timeout = idle_timeout  # between messages: None = wait as long as it takes
        self._budget = budget
        self._held = 0  # bytes drawn from the budget
        self._buf = bytearray()

    def next_message(self) -> tuple[bytes, bytes]:
        """(the bytes of one whole checked message, its method name)."""
        message = self._next_framed() if self._framed else self._next_buffered()
        self._settle()
        return message

    def close(self) -> None:
        """Gives back what this connection drew from the budget, and its buffer."""
        self._buf = bytearray()
        self._settle()

    def _settle(self) -> None:
        if self._budget is not None and self._held:
            self._budget.give(self._held)
            self._held = 0

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
                need = self._needed(n, method)
            chunk = self._recv(buf)
            if not buf:
                # Most requests come whole in one chunk: checked where they landed, they are
                # not copied into the buffer and out again (two copies of a 100 KB put).
                status, n, state, method = self._check(chunk, None)
                if status == 0:
                    if n == len(chunk):
                        return chunk, method
                    buf += memoryview(chunk)[n:]
                    return chunk[:n], method
                need = self._needed(n, method)
            buf += chunk

    def _needed(self, need: int, method: bytes | None) -> int:
        """``need`` bytes, the least an unfinished request takes, unless over its limit."""
        limit = self._limits.bytes_for(method)
        if need > limit:
            raise BadRequest(
                f"refused request{_named(method)}: it needs at least {need} bytes, "
                f"over the limit of {limit}"
            )
        return need

    def _next_framed(self) -> tuple[bytes, bytes]:
        buf = self._buf
        while len(buf) < 4:
            self._receive(buf)
        (size,) = _FRAME.unpack_from(buf)
        limit = self._limits.max_request_bytes
        if not 0 < size <= limit:
            raise BadRequest(f"refused frame of {size} bytes (the limit is {limit})")
        if size > self._limits.bytes_for(None):
            # Judge the frame by its method before buffering it: a framed listQueues of
            # 64 MiB used to be read whole before its 1 MiB limit was checked.
            method = None
            while method is None and len(buf) < 4 + size:
                self._receive(buf)
                head = bytes(buf[4 : 4 + min(size, HEADER_BYTES)])
                method = self._check(head, None)[3]
            if method is not None and size > self._limits.bytes_for(method):
                raise BadRequest(
                    f"refused frame of {size} bytes for{_named(method)} "
                    f"(the limit is {self._limits.bytes_for(method)})"
                )
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
        buf += self._recv(buf)

    def _recv(self, buf: bytearray) -> bytes:
        """The next bytes from the peer, ``buf`` being what is buffered of this request."""
        sock = self._sock
        if not buf:  # between requests: a client may stay idle as long as it likes
            sock.settimeout(self._idle_timeout)
        else:
            deadline = time.monotonic() + (self._timeout or 1e9)
            want = len(buf) + _READ_CHUNK - FREE_PENDING_BYTES - self._held
            if self._budget is not None and want > 0:
                if not self._budget.take(want, deadline):
                    raise BadRequest(
                        f"refused request: the gateway holds {self._budget.used} bytes of "
                        f"unfinished requests (the limit is {self._budget.limit}) and this one "
                        f"waited {self._timeout:g} s for room"
                    )
                self._held += want
            sock.settimeout(max(0.001, deadline - time.monotonic()) if self._timeout else None)
        try:
            chunk = sock.recv(_READ_CHUNK)
        except TimeoutError:
            waited = self._timeout if buf else self._idle_timeout
            raise BadRequest(
                f"refused request: no byte of it for {waited or 0:g} s after {len(buf)} bytes"
            ) from None
        if not chunk:
            raise TTransportException(TTransportException.END_OF_FILE, "peer closed")
        return chunk


def _named(method: bytes | None) -> str:
    return f" {method.decode(errors='replace')}" if method else ""


class SocketWriter:
    """The write side thriftpy2's output transports flush into.

    ``send_timeout``: seconds one reply may take to be sent; a client that stops reading is
    disconnected after it (its connection is not read meanwhile, so it holds at most this one
    reply). ``largest`` is the biggest reply since the server last looked: thriftpy2's output
    buffer grows to the largest reply and never shrinks, so the server replaces it after one.
    """

    __slots__ = ("_raw", "_replies", "_sock", "_vectored", "largest", "send_timeout")

    def __init__(
        self,
        sock: socket.socket,
        send_timeout: float | None = None,
        replies: ReplyBudget | None = None,
        vectored: bool = True,
    ) -> None:
        self._sock = sock
        self.send_timeout = send_timeout
        self.largest = 0
        self._replies = replies  # shared by all connections: see ReplyBudget
        # parts go in one sendmsg (a TLS socket has none: they go one after the other)
        self._vectored = vectored and hasattr(sock, "sendmsg")
        # gevent's socket over the OS's, non-blocking: a reply the kernel takes at once is sent
        # on it directly (never on a TLS socket, whose bytes must go through TLS). Checked
        # against _socket.socket, the OS socket's own type: socket.SocketType is gevent's class
        # once the gateway is monkey-patched, and no OS socket is one.
        raw = getattr(sock, "_sock", None) if self._vectored else None
        self._raw: _socket.socket | None = raw if isinstance(raw, _socket.socket) else None

    def write(self, data: bytes | bytearray | memoryview) -> None:
        n = len(data)
        self.largest = max(self.largest, n)
        replies = self._replies
        if replies is not None:
            replies.add(n)
        try:
            sent = 0
            if self._raw is not None:
                # Most replies fit the socket's buffer: one send, without gevent's sendall
                # (its timeout, a getsockopt and its chunking, for a put's 30-byte answer).
                try:
                    sent = self._raw.send(data)
                except BlockingIOError:
                    sent = 0
            if sent < n:
                self._sock.settimeout(self.send_timeout)
                self._sock.sendall(memoryview(data)[sent:] if sent else data)
        except TimeoutError:
            raise self._timed_out(n) from None
        finally:
            if replies is not None:
                replies.done(n)

    def write_parts(self, parts: Sequence[bytes | bytearray | memoryview]) -> None:
        """Sends the parts one after the other as one write: one ``sendmsg`` for all of them
        (its iovecs) where a ``send`` each cost a syscall and, with Nagle off, a segment each
        (a merged scan's reply is its head, the runs of the pages it took, and an end byte).
        ``send_timeout`` bounds the whole of it, as it bounds :meth:`write`."""
        if len(parts) == 1 or not self._vectored:
            for part in parts:
                self.write(part)
            return
        views = [v for p in parts if (v := memoryview(p)).nbytes]  # an empty one ends no send
        n = sum(v.nbytes for v in views)
        self.largest = max(self.largest, n)
        replies = self._replies
        if replies is not None:
            replies.add(n)
        sock, timeout = self._sock, self.send_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        first = 0  # views before it are sent
        try:
            while first < len(views):
                if deadline is not None:
                    sock.settimeout(max(0.0, deadline - time.monotonic()))
                else:
                    sock.settimeout(None)
                sent = sock.sendmsg(views[first : first + _IOV_MAX])
                while sent:
                    head = views[first]
                    if sent < head.nbytes:
                        views[first] = head[sent:]
                        break
                    sent -= head.nbytes
                    first += 1
        except TimeoutError:
            raise self._timed_out(n) from None
        finally:
            if replies is not None:
                replies.done(n)

    def _timed_out(self, n: int) -> TTransportException:
        return TTransportException(
            TTransportException.TIMED_OUT,
            f"the client read no reply of {n} bytes for {self.send_timeout:g} s",
        )

    def flush(self) -> None:
        pass

    def is_open(self) -> bool:
        return True

    def open(self) -> None:
        pass

    def close(self) -> None:
        self._sock.close()
