"""gateway.store.rawcall sends our bytes on a thriftpy2 client and reads one whole reply."""

from __future__ import annotations

import socket
import threading
from typing import Any

import pytest

from gateway.store import rawcall


class _Trans:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.out = bytearray()

    def write(self, data: bytes) -> None:
        self.out += data

    def flush(self) -> None:
        self.sock.sendall(bytes(self.out))
        self.out.clear()


class _Client:
    """The three private attributes of a thriftpy2 client that rawcall uses."""

    def __init__(self, sock: socket.socket) -> None:
        self._oprot = type("P", (), {})()
        self._oprot.trans = _Trans(sock)
        self.received: list[str] = []

    def _recv(self, method: str) -> Any:
        self.received.append(method)
        return "result"


REPLY = b"\x80\x01\x00\x02" + b"\x00\x00\x00\x01m" + b"\x00\x00\x00\x07" + b"\x00"


def _serve(peer: socket.socket, chunks: list[bytes]) -> threading.Thread:
    def run() -> None:
        peer.recv(1 << 16)
        for c in chunks:
            peer.sendall(c)
        peer.close()

    t = threading.Thread(target=run)
    t.start()
    return t


def test_call_raw_reads_a_reply_arriving_in_pieces() -> None:
    a, b = socket.socketpair()
    t = _serve(b, [REPLY[:3], REPLY[3:9], REPLY[9:]])
    assert rawcall.call_raw(_Client(a), b"request") == REPLY
    t.join()
    a.close()


@pytest.mark.parametrize(
    ("chunks", "error"),
    [([REPLY + REPLY], "more than one reply"), ([REPLY[:5]], "closed the connection")],
)
def test_call_raw_refuses_what_is_not_one_reply(chunks: list[bytes], error: str) -> None:
    a, b = socket.socketpair()
    t = _serve(b, chunks)
    with pytest.raises(OSError, match=error):
        rawcall.call_raw(_Client(a), b"request")
    t.join()
    a.close()


def test_call_lets_thriftpy2_read_the_reply() -> None:
    a, b = socket.socketpair()
    client = _Client(a)
    assert rawcall.call(client, b"request", "mutateRows") == "result"
    assert b.recv(100) == b"request"
    assert client.received == ["mutateRows"]
    a.close()
    b.close()
