"""The gateway's wire spoken by hand, and watchers of a gateway process, for tests that abuse
its network edge (test_robustness.py, test_memory_bounds.py, test_bad_arguments.py).

Raw sockets speak the binary and compact protocols byte by byte, so a request can be cut,
oversized or nonsense. ``RssPeak`` samples a gateway's resident memory by pid; ``Pinger`` is a
healthy client calling on its own thread while the abuse happens.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil

MB = 1_000_000
MiB = 1 << 20

# Thrift type ids and message types (the same numbers in every binary-protocol implementation)
T_STOP, T_VOID, T_I16, T_I32, T_STRING, T_STRUCT, T_MAP, T_LIST = 0, 1, 6, 8, 11, 12, 13, 15
CALL, REPLY, EXCEPTION = 1, 2, 3

RSS_LIMIT = 50 * MB  # what one abusive connection may add to the gateway's resident memory
LATENCY_LIMIT = 1.0  # seconds a healthy client may wait while another connection misbehaves
CLOSE_LIMIT = 5.0  # seconds within which an absurd request must be refused


# -- the binary protocol, by hand ---------------------------------------------------------


def b_msg(name: str, seqid: int = 1, mtype: int = CALL) -> bytes:
    """A strict binary-protocol message header."""
    n = name.encode()
    return (
        struct.pack(">I", 0x80010000 | mtype)
        + struct.pack(">i", len(n))
        + n
        + struct.pack(">i", seqid)
    )


def b_field(ftype: int, fid: int) -> bytes:
    return struct.pack(">bh", ftype, fid)


def b_str(data: bytes) -> bytes:
    return struct.pack(">i", len(data)) + data


def b_i32(v: int) -> bytes:
    return struct.pack(">i", v)


def b_list(etype: int, n: int) -> bytes:
    return struct.pack(">bi", etype, n)


def b_map(ktype: int, vtype: int, n: int) -> bytes:
    return struct.pack(">bbi", ktype, vtype, n)


STOP = b"\x00"


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def c_varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def c_msg(name: str, seqid: int = 1, mtype: int = CALL) -> bytes:
    """A compact-protocol message header."""
    n = name.encode()
    return bytes((0x82, (mtype << 5) | 1)) + c_varint(seqid) + c_varint(len(n)) + n


def put_messages_prefix(queue: bytes = b"q") -> bytes:
    """putMessages(queueName=queue, tMessages=...) up to the list header."""
    return b_msg("putMessages") + b_field(T_STRING, 1) + b_str(queue) + b_field(T_LIST, 2)


def put_messages_request(values: list[bytes], queue: bytes = b"q") -> bytes:
    body = b_list(T_STRUCT, len(values))
    for v in values:
        body += b_field(T_STRING, 3) + b_str(b"t") + b_field(T_STRING, 4) + b_str(v) + STOP
    return put_messages_prefix(queue) + body + STOP


def read_reply(sock: socket.socket, timeout: float = CLOSE_LIMIT) -> tuple[str, bytes]:
    """What the gateway did with a request: ("closed", b"") or ("reply"/"exception", bytes)."""
    sock.settimeout(timeout)
    data = b""
    try:
        while len(data) < 12:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        if len(data) >= 4:
            with contextlib.suppress(TimeoutError):
                sock.settimeout(0.2)  # the rest of a small reply is already on its way
                data += sock.recv(65536)
    except (ConnectionResetError, BrokenPipeError):
        return "closed", data
    except TimeoutError:
        return "open", data
    if not data:
        return "closed", b""
    mtype = struct.unpack(">I", data[:4])[0] & 0xFF
    return ("exception" if mtype == EXCEPTION else "reply"), data


def reply_is_success(data: bytes) -> bool:
    """A binary REPLY to a void method whose result struct is empty: success."""
    (name_len,) = struct.unpack(">i", data[4:8])
    return data[8 + name_len + 4 :][:1] == STOP


# -- watching the gateway -----------------------------------------------------------------


class RssPeak:
    """Samples the gateway's RSS every few ms on a thread; ``growth`` is peak minus start."""

    def __init__(self, pid: int) -> None:
        self.proc = psutil.Process(pid)
        self.base = self.peak = self.proc.memory_info().rss
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(psutil.Error):
                self.peak = max(self.peak, self.proc.memory_info().rss)
            self._stop.wait(0.003)

    @property
    def growth(self) -> int:
        with contextlib.suppress(psutil.Error):
            self.peak = max(self.peak, self.proc.memory_info().rss)
        return self.peak - self.base

    def __enter__(self) -> RssPeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


class Pinger:
    """A healthy client calling listQueues in a loop on its own thread.

    Records the worst latency and any error; ``check()`` asserts it was served throughout.
    """

    def __init__(self, gw: Any, timeout: float = 5.0) -> None:
        self.gw = gw
        self.timeout = timeout
        self.worst = 0.0
        self.calls = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            client = self.gw.client(timeout=self.timeout)
        except Exception as exc:
            self.errors.append(f"connect: {exc!r}")
            return
        try:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    client.listQueues()
                except Exception as exc:
                    self.errors.append(f"after {time.monotonic() - t0:.1f} s: {exc!r}")
                    return
                self.worst = max(self.worst, time.monotonic() - t0)
                self.calls += 1
                self._stop.wait(0.002)
        finally:
            client.close()

    def __enter__(self) -> Pinger:
        self._thread.start()
        poll(lambda: self.calls > 0 or self.errors, what="the healthy client's first call")
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(self.timeout + 5)

    def problems(self) -> list[str]:
        found = list(self.errors)
        if self.worst > LATENCY_LIMIT:
            found.append(f"a healthy client waited {self.worst:.2f} s for listQueues")
        return found


def poll(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.005)
    raise AssertionError(f"timed out after {timeout} s waiting for {what or predicate}")


def connect(gw: Any, timeout: float = 10.0) -> socket.socket:
    s = socket.create_connection((gw.host, gw.port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the peer's next write fails."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def warm(gw: Any, queue: str = "q", partitions: int = 1) -> Any:
    """A queue to abuse, and one round of every kind of work, so RSS baselines are warm."""
    c = gw.client()
    c.createQueue(queue, partitions, 3600, {})
    c.putMessages(queue, [tmessage(b"warm")] * 10)
    sid = c.queueScannerOpen(queue, None)
    while c.messageScannerGetList(sid, 100):
        pass
    c.truncateQueue(queue)
    c.listQueues()
    return c


def tmessage(value: bytes, topic: bytes = b"t", partition: int | None = None) -> Any:
    from hqueue.protocol import hqueue_thrift

    return hqueue_thrift().TMessage(partitionID=partition, topic=topic, value=value)


def stream(
    sock: socket.socket,
    prefix: bytes,
    chunks: Iterator[bytes],
    max_bytes: int,
    give_up: Callable[[], bool] = lambda: False,
) -> tuple[int, str]:
    """Sends ``prefix``, then chunks until the gateway hangs up, ``max_bytes`` have gone or
    ``give_up()``. Returns (bytes sent after the prefix, "closed" | "open" | "gave up")."""
    sent = 0
    try:
        sock.sendall(prefix)
        for chunk in chunks:
            if sent >= max_bytes:
                break
            if give_up():
                return sent, "gave up"
            sock.sendall(chunk)
            sent += len(chunk)
    except (ConnectionResetError, BrokenPipeError):
        return sent, "closed"
    except TimeoutError:
        return sent, "open"  # the gateway stopped reading without closing
    state, _ = read_reply(sock, timeout=CLOSE_LIMIT)
    return sent, state


def repeat(chunk: bytes) -> Iterator[bytes]:
    while True:
        yield chunk
