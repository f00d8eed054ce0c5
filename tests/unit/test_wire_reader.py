"""MessageReader over a real socket pair: whole messages however the bytes arrive, and the
request limits enforced as soon as a length prefix announces too much (before the bytes come).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift
from thriftpy2.protocol import TBinaryProtocol, TCompactProtocol
from thriftpy2.thrift import TMessageType
from thriftpy2.transport import TMemoryBuffer, TTransportException

from gateway.wire import SMALL_REQUEST_BYTES, BadRequest, MessageReader, RequestLimits

T = hqueue_thrift()
LIMITS = RequestLimits(
    max_request_bytes=8 << 20, max_string_bytes=4 << 20, max_container=1000, max_values=10_000
)


def encode(method: str, compact: bool = False, **args: Any) -> bytes:
    buf = TMemoryBuffer()
    proto = TCompactProtocol(buf) if compact else TBinaryProtocol(buf)
    proto.write_message_begin(method, TMessageType.CALL, 1)
    getattr(T.HQueueService, method + "_args")(**args).write(proto)
    proto.write_message_end()
    return buf.getvalue()


def framed(message: bytes) -> bytes:
    return struct.pack(">i", len(message)) + message


def put(values: list[bytes], compact: bool = False) -> bytes:
    return encode(
        "putMessagesWithPid",
        compact,
        queueName=b"q",
        partitionID=0,
        tMessages=[T.TMessage(topic=b"t", value=v) for v in values],
    )


class Trickle:
    """The socket, one byte per recv: every split a network can make."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock

    def recv(self, n: int) -> bytes:
        return self.sock.recv(1)

    def settimeout(self, seconds: float | None) -> None:
        self.sock.settimeout(seconds)


def reader(sock: Any, *, framed: bool, compact: bool, limits: RequestLimits = LIMITS) -> Any:
    """A reader that gives up after 10 s without a byte (a wrong one fails, never hangs)."""
    return MessageReader(
        sock, framed=framed, compact=compact, limits=limits, request_timeout=10, idle_timeout=10
    )


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


@contextlib.contextmanager
def sending(sock: socket.socket, data: bytes, peer: socket.socket) -> Iterator[None]:
    """Sends ``data`` from a thread (more than the socket buffer holds); the reader may stop
    early, so a refused rest is fine: closing ``peer`` ends the send."""

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.sendall(data)
            sock.shutdown(socket.SHUT_WR)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    try:
        yield
    finally:
        peer.close()
        thread.join(10)
        sock.close()
        assert not thread.is_alive()


@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("trickle", [False, True])
def test_pipelined_messages_come_out_whole_however_they_arrive(
    pair: tuple[socket.socket, socket.socket], compact: bool, trickle: bool
) -> None:
    a, b = pair
    first = put([b"x" * 300, b""], compact)
    second = encode("listQueues", compact)
    third = encode("messageScannerGetList", compact, id=4, nbMessages=10)
    a.sendall(first + second + third)
    a.shutdown(socket.SHUT_WR)
    sock: Any = Trickle(b) if trickle else b
    r = reader(sock, framed=False, compact=compact)
    assert r.next_message() == (first, b"putMessagesWithPid")
    assert r.next_message() == (second, b"listQueues")
    assert r.next_message() == (third, b"messageScannerGetList")
    with pytest.raises(TTransportException) as err:
        r.next_message()
    assert err.value.type == TTransportException.END_OF_FILE


def test_frames_come_out_whole(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    first, second = put([b"abc"]), encode("listQueues")
    a.sendall(framed(first) + framed(second))
    r = reader(Trickle(b), framed=True, compact=False)
    assert r.next_message() == (first, b"putMessagesWithPid")
    assert r.next_message() == (second, b"listQueues")


def test_a_peer_that_leaves_mid_message_is_end_of_file(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    a.sendall(put([b"body"])[:-3])
    a.shutdown(socket.SHUT_WR)
    with pytest.raises(TTransportException) as err:
        reader(b, framed=False, compact=False).next_message()
    assert err.value.type == TTransportException.END_OF_FILE
    assert not isinstance(err.value, BadRequest)


@pytest.mark.parametrize("compact", [False, True])
def test_a_string_over_the_limit_is_refused_from_its_length_alone(
    pair: tuple[socket.socket, socket.socket], compact: bool
) -> None:
    a, b = pair
    too_big = put([b"v" * (LIMITS.max_string_bytes + 1)], compact)
    a.sendall(too_big[:100])  # the length prefix, not the 4 MiB behind it
    with pytest.raises(BadRequest, match="refused request"):
        reader(b, framed=False, compact=compact).next_message()


def test_a_small_method_may_not_be_large(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    big = encode("createQueue", queueName=b"q", partitionCount=1, ttlSeconds=1,
                 config={"k": "v" * (SMALL_REQUEST_BYTES + 10)})  # fmt: skip
    a.sendall(big[:200])
    with pytest.raises(BadRequest, match=r"createQueue.*over the limit"):
        reader(b, framed=False, compact=False).next_message()


def test_a_put_may_be_as_large_as_the_request_limit(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    values = [b"v" * (1 << 20)] * 3  # 3 MiB: more than a small request, less than the limit
    data = put(values)
    with sending(a, data, b):
        r = reader(b, framed=False, compact=False)
        assert r.next_message() == (data, b"putMessagesWithPid")
    limits = RequestLimits(max_request_bytes=2 << 20, max_string_bytes=4 << 20)
    a, b = socket.socketpair()
    with (
        sending(a, data, b),
        pytest.raises(BadRequest, match="over the limit of 2097152"),
    ):
        reader(b, framed=False, compact=False, limits=limits).next_message()


def test_too_many_elements_are_refused(pair: tuple[socket.socket, socket.socket]) -> None:
    a, b = pair
    data = put([b""] * (LIMITS.max_container + 1))
    with sending(a, data, b), pytest.raises(BadRequest, match="refused request"):
        reader(b, framed=False, compact=False).next_message()


@pytest.mark.parametrize(
    "data",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        b"\x80\x01\x00\x01\xff\xff\xff\xffputMessages",  # a name of -1 bytes
        b"\x80\x02" + b"\x00" * 30,  # a protocol version that does not exist
        b"\xff" * 64,
    ],
    ids=["http", "negative-name", "version", "ones"],
)
def test_garbage_is_refused(pair: tuple[socket.socket, socket.socket], data: bytes) -> None:
    a, b = pair
    a.sendall(data)
    with pytest.raises(BadRequest):
        reader(b, framed=False, compact=False).next_message()


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (struct.pack(">i", 0), "refused frame of 0 bytes"),
        (struct.pack(">i", -5), "refused frame of -5 bytes"),
        (struct.pack(">i", (8 << 20) + 1), "refused frame of 8388609 bytes"),
        (framed(encode("listQueues") + encode("listQueues")), "not hold exactly one message"),
        (framed(encode("listQueues") + b"\x00"), "not hold exactly one message"),
        (framed(encode("listQueues")[:-1]), "not hold exactly one message"),
    ],
    ids=["empty", "negative", "over-limit", "two-messages", "trailing-byte", "short"],
)
def test_bad_frames_are_refused(
    pair: tuple[socket.socket, socket.socket], data: bytes, reason: str
) -> None:
    a, b = pair
    a.sendall(data)
    with pytest.raises(BadRequest, match=reason):
        reader(b, framed=True, compact=False).next_message()


def test_a_small_method_in_a_large_frame_is_refused(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    big = encode("createQueue", queueName=b"q", partitionCount=1, ttlSeconds=1,
                 config={"k": "v" * (SMALL_REQUEST_BYTES + 10)})  # fmt: skip
    # refused from the frame's header and method name, before the megabyte is buffered
    with sending(a, framed(big), b), pytest.raises(BadRequest, match="for createQueue"):
        reader(b, framed=True, compact=False).next_message()


def test_limits_follow_the_gateway_flags() -> None:
    limits = RequestLimits.for_batches(64 << 20, 1000, 10)
    # a body over --max-value-bytes is the service's to refuse (IllegalArgument, the
    # connection stays): on the wire a string may be as long as a request
    assert limits.max_string_bytes == 64 << 20
    assert RequestLimits.for_batches(100, 10, 10).max_string_bytes == 4096
    assert limits.max_container == 32767  # a list of every partition id
    assert limits.max_values == 8 * 10 + 1024
    assert limits.bytes_for(b"putMessages") == 64 << 20
    # every method that carries messages may be as large as a put (it was 1 MiB here)
    assert limits.bytes_for(b"putMessagesReturningIds") == 64 << 20
    assert limits.bytes_for(b"forwardMessages") == 64 << 20
    assert limits.bytes_for(b"createQueue") == SMALL_REQUEST_BYTES
    assert limits.bytes_for(None) < 8192  # before the method name is known
