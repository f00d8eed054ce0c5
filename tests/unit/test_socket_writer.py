"""SocketWriter: a reply in parts (a merged scan's head, the pages' runs, an end byte) leaves
in one sendmsg, whole and in order, whatever the socket takes per call; a reply in one piece
leaves whole whether the kernel takes it at once or not; a client that reads nothing is timed
out either way."""

from __future__ import annotations

import subprocess
import sys

import gevent
import gevent.socket
import pytest
from thriftpy2.transport import TTransportException

from gateway.wire import ReplyBudget, SocketWriter


def _pair(sndbuf: int = 4096) -> tuple[gevent.socket.socket, gevent.socket.socket]:
    a, b = gevent.socket.socketpair()
    a.setsockopt(gevent.socket.SOL_SOCKET, gevent.socket.SO_SNDBUF, sndbuf)
    b.setsockopt(gevent.socket.SOL_SOCKET, gevent.socket.SO_RCVBUF, sndbuf)
    return a, b


def _read(sock: gevent.socket.socket, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = sock.recv(min(65536, n - len(got)))
        if not chunk:
            break
        got += chunk
        gevent.sleep(0)  # a slow reader: the writer meets partial sends
    return bytes(got)


def _parts(count: int, size: int) -> list[bytes | bytearray | memoryview]:
    page = bytearray(bytes(range(256)) * (size // 256 + 1))
    parts: list[bytes | bytearray | memoryview] = [b"head"]
    for i in range(count):
        parts.append(memoryview(page)[i % 7 : i % 7 + size])
        parts.append(b"" if i % 3 == 0 else bytearray([i % 251]))  # empty parts too
    parts.append(b"\x00")
    return parts


@pytest.mark.parametrize("vectored", [True, False])
@pytest.mark.parametrize(("count", "size"), [(3, 300_000), (1500, 40)])  # past one sendmsg's iovecs
def test_parts_arrive_whole_and_in_order(vectored: bool, count: int, size: int) -> None:
    a, b = _pair()
    budget = ReplyBudget(1 << 30)
    parts = _parts(count, size)
    want = b"".join(bytes(p) for p in parts)
    writer = SocketWriter(a, 5.0, budget, vectored=vectored)
    reader = gevent.spawn(_read, b, len(want))
    writer.write_parts(parts)
    assert reader.get(timeout=10) == want
    assert budget.used == 0
    if vectored:
        assert writer.largest == len(want)  # one write (TLS sends part after part)
    a.close()
    b.close()


@pytest.mark.parametrize("how", ["write_parts", "write"])
def test_a_client_that_reads_nothing_is_timed_out(how: str) -> None:
    a, b = _pair()
    budget = ReplyBudget(1 << 30)
    writer = SocketWriter(a, 0.3, budget)
    started = gevent.get_hub().loop.now()
    with pytest.raises(TTransportException) as raised:
        if how == "write":  # one reply, sent straight on the OS socket while it takes it
            writer.write(bytes(4 << 20))
        else:
            writer.write_parts([b"head", bytes(4 << 20), b"\x00"])
    assert raised.value.type == TTransportException.TIMED_OUT
    assert "read no reply" in str(raised.value)
    assert gevent.get_hub().loop.now() - started < 3
    assert budget.used == 0  # the reply's bytes are given back
    a.close()
    b.close()


@pytest.mark.parametrize("size", [30, 3_000_000])  # a put's answer; far past the socket buffer
def test_write_sends_the_reply_whole_whatever_the_kernel_takes_at_once(size: int) -> None:
    a, b = _pair()
    budget = ReplyBudget(1 << 30)
    data = bytes(range(256)) * (size // 256) + b"\x07" * (size % 256)
    writer = SocketWriter(a, 5.0, budget)
    assert writer._raw is not None  # the direct send is in use on a plain socket
    reader = gevent.spawn(_read, b, len(data))
    writer.write(data)
    assert reader.get(timeout=10) == data
    assert budget.used == 0
    a.close()
    b.close()


def test_the_direct_send_is_in_use_in_a_monkey_patched_process() -> None:
    # The gateway runs monkey-patched: socket.SocketType is then gevent's class, which no OS
    # socket is. Checked against it, the direct send never ran in a gateway (only here).
    code = (
        "from gevent import monkey; monkey.patch_all()\n"
        "import gevent.socket\n"
        "from gateway.wire import SocketWriter\n"
        "a, b = gevent.socket.socketpair()\n"
        "w = SocketWriter(a, 5.0)\n"
        "w.write(b'x' * 30)\n"
        "print(w._raw is not None, b.recv(64) == b'x' * 30)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]


def test_write_never_bypasses_a_socket_that_is_not_vectored() -> None:
    """TLS sockets are given vectored=False: their bytes must go through TLS."""
    a, b = _pair()
    writer = SocketWriter(a, 5.0, ReplyBudget(1 << 30), vectored=False)
    assert writer._raw is None
    reader = gevent.spawn(_read, b, 5)
    writer.write(b"hello")
    assert reader.get(timeout=10) == b"hello"
    a.close()
    b.close()
