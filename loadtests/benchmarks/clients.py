"""The benchmark's lean clients: requests encoded once, replies checked with little work.

Thrift (``LeanThrift``: the bytes thriftpy2's buffered binary client sends, replies read whole)
and Redis (``LeanRedis``: pipelined ``XADD``/``XREAD``, replies counted by their lines). Every
message has the benchmark's fixed shape (the constants below), which the reply checks rely on.
"""

from __future__ import annotations

import contextlib
import random
import re
import socket
import string
import struct
from collections.abc import Iterable
from typing import Any

PARTITIONS = 8
BATCH = 1000  # messages per put call and per scanner list
VALUE_BYTES = 100
TOPIC = b"t"  # the Redis field name plays the topic
PUT_QUEUE = b"bench_put"
SCAN_QUEUE = b"bench_scan"
TTL_SECONDS = 7 * 24 * 3600
PUT_STREAM = "bench:put:{}"
SCAN_STREAM = "bench:scan:{}"


def make_values(seed: int, n: int = BATCH, size: int = VALUE_BYTES) -> list[bytes]:
    """``n`` distinct printable values (letters only: the Redis reply counter relies on it)."""
    rng = random.Random(seed)
    letters = string.ascii_letters
    return ["".join(rng.choices(letters, k=size)).encode() for _ in range(n)]


def lean_socket(host: str, port: int, timeout: float = 60.0) -> socket.socket:
    """A blocking socket (so MSG_WAITALL takes one system call) with the kernel's own receive
    and send timeouts, so that nothing waits forever."""
    sock = socket.create_connection((host, port), timeout=timeout)
    sock.settimeout(None)
    tv = struct.pack("ll", int(timeout), 0)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _Sock:
    """The minimal transport thriftpy2's C buffered transport reads from and writes to."""

    __slots__ = ("sock",)

    def __init__(self, host: str, port: int) -> None:
        self.sock = lean_socket(host, port)

    def read(self, n: int) -> bytes:
        data = self.sock.recv(n)
        if not data:
            raise ConnectionError("server closed the connection")
        return data

    def write(self, data: bytes) -> None:
        self.sock.sendall(data)

    def flush(self) -> None:
        pass

    def is_open(self) -> bool:
        return True

    def open(self) -> None:
        pass

    def close(self) -> None:
        self.sock.close()


def encode_call(name: str, args: Any) -> bytes:
    """The bytes a thriftpy2 client (buffered transport, binary protocol) sends for a call."""
    from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
    from thriftpy2.thrift import TMessageType
    from thriftpy2.transport.memory import TCyMemoryBuffer

    buf = TCyMemoryBuffer()
    proto = TCyBinaryProtocol(buf)
    proto.write_message_begin(name, TMessageType.CALL, 0)
    proto.write_struct(args)
    proto.write_message_end()
    return buf.getvalue()


def encode_puts(
    t: Any, queue: bytes, partitions: Iterable[int], values: list[bytes]
) -> list[bytes]:
    """Encoded ``putMessagesWithPid`` calls of ``values`` (topic TOPIC), one per partition."""
    msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
    make = t.HQueueService.putMessagesWithPid_args
    return [
        encode_call("putMessagesWithPid", make(queueName=queue, partitionID=p, tMessages=msgs))
        for p in partitions
    ]


def encode_struct(obj: Any) -> bytes:
    from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
    from thriftpy2.transport.memory import TCyMemoryBuffer

    buf = TCyMemoryBuffer()
    TCyBinaryProtocol(buf).write_struct(obj)
    return buf.getvalue()


class LeanThrift:
    """Sends pre-encoded calls; decodes small replies, skips over TMessages in list replies."""

    def __init__(self, host: str, port: int) -> None:
        from hqueue.protocol import hqueue_thrift
        from thriftpy2.protocol.cybin import TCyBinaryProtocol  # type: ignore[attr-defined]
        from thriftpy2.transport.buffered import TCyBufferedTransport

        self.t = hqueue_thrift()
        self.sock = _Sock(host, port)
        self.trans = TCyBufferedTransport(self.sock, 256 * 1024)
        self.proto = TCyBinaryProtocol(self.trans)

    def _reply(self) -> None:
        from thriftpy2.thrift import TApplicationException, TMessageType

        _, mtype, _ = self.proto.read_message_begin()
        if mtype == TMessageType.EXCEPTION:
            exc = TApplicationException()
            self.proto.read_struct(exc)
            self.proto.read_message_end()
            raise exc

    def call(self, request: bytes, result_cls: Any) -> Any:
        self.sock.sock.sendall(request)
        self._reply()
        result = result_cls()
        self.proto.read_struct(result)
        self.proto.read_message_end()
        for name in ("io", "ia"):
            err = getattr(result, name, None)
            if err is not None:
                raise RuntimeError(f"{type(err).__name__}: {err.message}")
        return getattr(result, "success", None)

    def count_list(self, request: bytes, name: str, element: bytes) -> int:
        """Sends a call returning list<TMessage>; returns how many messages came back.

        Every message of the benchmark has the same shape (id, partition, 1-byte topic,
        100-byte value), so each encodes to ``len(element)`` bytes: the reply is received
        with two ``recv_into`` calls and checked at every element boundary, not decoded.
        Anything else (an exception, another shape) raises.
        """
        self.sock.sock.sendall(request)
        # version+type, name length, name, seqid | field header (LIST, 0) | list header
        head_len = 8 + len(name) + 4 + 3 + 5
        head = self._recv_exact(head_len)
        if head[:4] != b"\x80\x01\x00\x02" or head[head_len - 8 : head_len - 5] != b"\x0f\x00\x00":
            raise RuntimeError(f"unexpected reply (an exception?): {self._drain(head)!r}")
        if head[head_len - 5] != 12:
            raise RuntimeError("the reply's list does not hold structs")
        n = int.from_bytes(head[head_len - 4 :], "big", signed=True)
        size = len(element)
        body = self._recv_exact(n * size + 1)  # the elements, then the result's STOP
        view = memoryview(body)
        if body[-1] != 0 or (n and bytes(view[0 : n * size : size]) != element[:1] * n):
            raise RuntimeError(f"a list element is not shaped like {element[:40]!r}...")
        if n and bytes(view[(n - 1) * size : (n - 1) * size + 3]) != element[:3]:
            raise RuntimeError("the last list element is malformed")
        return n

    def _recv_exact(self, n: int) -> bytearray:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        recv_into = self.sock.sock.recv_into
        while got < n:
            k = recv_into(view[got:], n - got, socket.MSG_WAITALL)
            if k == 0:
                raise ConnectionError("server closed the connection")
            got += k
        return buf

    def _drain(self, head: bytes | bytearray) -> bytes:
        self.sock.sock.settimeout(0.5)  # (Python's own timeout: non-blocking from here on)
        with contextlib.suppress(OSError):
            return bytes(head) + self.sock.sock.recv(4096)
        return bytes(head)

    def close(self) -> None:
        self.sock.close()


def resp(*parts: bytes | str | int) -> bytes:
    """One command in RESP, as redis-py packs it."""
    out = [b"*%d\r\n" % len(parts)]
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    return b"".join(out)


_ENTRY_ID = re.compile(rb"\d+-\d+")


class LeanRedis:
    """A raw socket speaking RESP; replies are counted by their line structure (values hold no
    CR/LF, ids no leading '-'), never parsed into objects."""

    def __init__(self, host: str, port: int) -> None:
        self.sock = lean_socket(host, port)
        self.buf = bytearray()

    def _fill(self) -> None:
        data = self.sock.recv(1 << 20)
        if not data:
            raise ConnectionError("redis closed the connection")
        self.buf += data

    def _error(self, start: int = 0) -> None:
        """Raises if an error reply begins at ``start`` or after a line end past it."""
        buf = self.buf
        at = start if buf[start : start + 1] == b"-" else buf.find(b"\r\n-", max(0, start - 2))
        if at >= 0:
            with contextlib.suppress(OSError):
                self.sock.settimeout(0.5)  # (Python's own timeout: non-blocking from here on)
                self._fill()
            raise RuntimeError(f"redis: {bytes(buf[at : at + 200])!r}")

    def xadd_pipeline(self, packed: bytes, n: int) -> None:
        """Sends ``n`` pre-packed XADDs; waits for their ``n`` bulk-string ids
        ("$15\\r\\n<id>\\r\\n": two line ends each; only new bytes are scanned)."""
        self.sock.sendall(packed)
        buf = self.buf
        need = 2 * n
        lines = 0
        scanned = 0
        while lines < need:
            self._fill()
            self._error(scanned)
            lines += buf.count(b"\r\n", max(0, scanned - 1))  # a CRLF may straddle reads
            scanned = len(buf)
        if lines != need:
            raise RuntimeError(f"redis sent {lines} reply lines for {n} XADDs")
        buf.clear()

    def xread(self, key: bytes, after: bytes, count: int, value_bytes: int) -> tuple[int, bytes]:
        """XREAD COUNT ``count`` STREAMS key after -> (entries, id of the last one).

        Reply: *1 *2 $klen key *N, then per entry *2 $idlen id *2 $1 field $vlen value. Values
        are letters only, so the bytes between an id and its value (``marker``) occur once per
        entry and nowhere else: counting them (only in new bytes) tells when all N are in.
        """
        self.sock.sendall(resp(b"XREAD", b"COUNT", count, b"STREAMS", key, after))
        buf = self.buf
        while b"\r\n" not in buf:
            self._fill()
        if buf[:1] == b"-":  # one reply: an error can only be the whole of it
            self._error()
        if buf.startswith(b"*-1\r\n") or buf.startswith(b"*0\r\n"):  # nothing after `after`
            if bytes(buf) not in (b"*-1\r\n", b"*0\r\n"):
                raise RuntimeError(f"unexpected XREAD reply {bytes(buf[:80])!r}")
            buf.clear()
            return 0, after
        while buf.count(b"\r\n", 0, 200) < 5:
            self._fill()
        lines = bytes(buf[:200]).split(b"\r\n", 5)
        if lines[0] != b"*1" or lines[1] != b"*2" or lines[3] != key or lines[4][:1] != b"*":
            raise RuntimeError(f"unexpected XREAD reply {bytes(buf[:80])!r}")
        n = int(lines[4][1:])
        marker = b"\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n" % (len(TOPIC), TOPIC, value_bytes)
        seen = buf.count(marker)
        scanned = len(buf)
        while True:
            if seen == n:
                last_at = buf.rfind(marker)
                end = last_at + len(marker) + value_bytes + 2
                if len(buf) >= end:
                    break
            elif seen > n:
                raise RuntimeError(f"XREAD: more than the {n} entries announced")
            self._fill()
            seen += buf.count(marker, max(0, scanned - len(marker) + 1))
            scanned = len(buf)
        if len(buf) != end or buf[end - 2 : end] != b"\r\n":
            raise RuntimeError("XREAD: the reply does not end after its last entry")
        start = buf.rfind(b"\r\n", 0, last_at) + 2
        last = bytes(buf[start:last_at])
        if not _ENTRY_ID.fullmatch(last):
            raise RuntimeError(f"cannot find the last entry id in the XREAD reply: {last!r}")
        buf.clear()
        return n, last

    def close(self) -> None:
        self.sock.close()
