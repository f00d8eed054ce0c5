"""Throughput of the gateway against its ceiling and against Redis Streams, in one run.

    python -m loadtests.bench_gateway [--quick] [--runs N] [--json PATH]

What is measured (messages per second, median of ``--runs`` fixed-duration runs):

* ``put``: ``putMessagesWithPid`` of 1000 messages of 100 bytes per call, spread over the 8
  partitions of a queue; the gateway answers once the batch is durable (group-committed WAL
  fsync). ``putMessages`` (no partition id: one random partition per batch) is measured too.
* ``scan``: ``messageScannerOpen`` on a partition, ``messageScannerGetList(1000)`` until the
  empty list that ends it (25 000 stored messages per partition), ``messageScannerClose``, then
  the next partition.

Targets, each started by this script on 127.0.0.1 on a port nobody chose in advance:

* ``gateway``: the real gateway (``python -m gateway``) over a fresh temporary data dir.
* ``ceiling``: ``loadtests.null_server``, a server that does nothing. By default
  (``--ceiling thriftpy2``, the ceiling the targets are defined against) a plain thriftpy2
  server on gevent speaking the same IDL: it decodes every request into Python objects and
  encodes every reply from them. ``--ceiling gateway`` measures instead ``gateway.app.Gateway``
  itself (its request checks and C fast paths) with a store stub and a do-nothing handler:
  what the gateway would reach if storing cost nothing.
* ``redis-everysec`` / ``redis-always``: ``redis-server --appendonly yes`` with
  ``appendfsync everysec`` (Redis's default) and ``always`` (durable before the reply, like the
  gateway). Puts are pipelines of 1000 ``XADD``; scans walk a stream with ``XREAD COUNT 1000``.
  Scans are measured against ``redis-everysec`` only (the fsync policy does not touch reads).

Clients run in their own processes (1 and 4 of them, the same for every target). Two client
modes:

* ``lean`` (the headline figures): requests are encoded once up front and sent as bytes (the
  exact bytes thriftpy2's client or redis-py would send); replies are checked and counted with
  as little client work as possible (a list<TMessage> reply is received whole and checked at
  every message boundary, all messages having the benchmark's fixed shape; Redis replies are
  counted by their line structure). The client costs far less than the server, so the figures
  are the server's. Every scan still checks that it read exactly what was stored.
* ``stock``: the thriftpy2 client (``hqueue.protocol.connect``) and redis-py
  (``pipeline(transaction=False)``, ``xread``), encoding and decoding everything per call, as an
  application would. On a 2-core machine the client can then be the bottleneck; the JSON
  records each side's CPU use so this is visible.

Each target is measured in one block (its server started, prepared, then every cell of it run
``--runs`` times, runs outside and cells inside so that drift touches every cell alike). Before
each run the script waits until the server is idle (under 5 % of a core); after each put run
it drops what the run stored (``truncateQueue`` on the gateway, ``DEL`` of the streams on
Redis), so every run starts from the same state and no run pays for the compaction of an
earlier one.

Everything is bounded in time, and every process and temp dir is removed on exit.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import multiprocessing as mp
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import string
import struct
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.wire import SocketWriter

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_JSON = ROOT / "loadtests" / "results" / "bench_gateway.json"

HOST = "127.0.0.1"
PARTITIONS = 8
BATCH = 1000  # messages per put call and per scanner list
VALUE_BYTES = 100
TOPIC = b"t"  # the Redis field name plays the topic
PUT_QUEUE = b"bench_put"
SCAN_QUEUE = b"bench_scan"
TTL_SECONDS = 7 * 24 * 3600
PUT_STREAM = "bench:put:{}"
SCAN_STREAM = "bench:scan:{}"

TARGET_PUT = 0.7  # of the ceiling
TARGET_PUT_VS_REDIS = 3.0  # times Redis Streams
TARGET_SCAN = 0.7  # of the ceiling

START_TIMEOUT = 30.0  # seconds for a server to come up
CLIENT_READY_TIMEOUT = 30.0
STOP_TIMEOUT = 20.0

# op -> (label, targets it runs against)
OPS: dict[str, tuple[str, tuple[str, ...]]] = {
    "put": ("putMessagesWithPid", ("gateway", "ceiling", "redis-everysec", "redis-always")),
    "putMessages": ("putMessages", ("gateway", "ceiling")),
    "scan": ("scan (GetList 1000)", ("gateway", "ceiling", "redis-everysec")),
}
TARGETS = ("ceiling", "gateway", "redis-everysec", "redis-always")
MODES = ("lean", "stock")
LEAN_ONLY_OPS = {"putMessages"}


# -- values ----------------------------------------------------------------------------------


def make_values(seed: int, n: int = BATCH, size: int = VALUE_BYTES) -> list[bytes]:
    """``n`` distinct printable values (letters only: the Redis reply counter relies on it)."""
    rng = random.Random(seed)
    letters = string.ascii_letters
    return ["".join(rng.choices(letters, k=size)).encode() for _ in range(n)]


# -- Thrift clients --------------------------------------------------------------------------


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


class _Sock(SocketWriter):
    """The minimal transport thriftpy2's C buffered transport reads from and writes to."""

    __slots__ = ("sock",)

    def __init__(self, host: str, port: int) -> None:
        self.sock = lean_socket(host, port)
        super().__init__(self.sock)

    def read(self, n: int) -> bytes:
        data = self.sock.recv(n)
        if not data:
            raise ConnectionError("server closed the connection")
        return data


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


# -- Redis clients ---------------------------------------------------------------------------


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


# -- workloads (run inside client processes) ---------------------------------------------------


@dataclass
class Spec:
    """What one client process does."""

    kind: str  # "thrift" | "redis"
    op: str  # "put" | "putMessages" | "scan"
    mode: str  # "lean" | "stock"
    host: str
    port: int
    client: int = 0
    clients: int = 1
    per_partition: int = 25_000  # stored messages per partition (scan targets)
    batch: int = BATCH  # messages per put call (puts only)
    value_bytes: int = VALUE_BYTES  # bytes per message body (puts only)


def _first_partition(spec: Spec) -> int:
    return (spec.client * max(1, PARTITIONS // spec.clients)) % PARTITIONS


class Workload:
    """``step()`` does one call and returns how many messages it moved."""

    def step(self) -> int:
        raise NotImplementedError

    def close(self) -> None:
        pass


class ThriftPut(Workload):
    c: Any  # LeanThrift or a thriftpy2 client, by mode

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        values = make_values(1000 + spec.client, spec.batch, spec.value_bytes)
        self.pid = _first_partition(spec)
        if spec.mode == "lean":
            self.c = LeanThrift(spec.host, spec.port)
            t = self.c.t
            svc = t.HQueueService
            if spec.op == "put":
                self.requests = encode_puts(t, PUT_QUEUE, range(PARTITIONS), values)
                self.result = svc.putMessagesWithPid_result
            else:
                msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
                self.requests = [
                    encode_call(
                        "putMessages", svc.putMessages_args(queueName=PUT_QUEUE, tMessages=msgs)
                    )
                ]
                self.result = svc.putMessages_result
        else:
            from hqueue.protocol import connect, hqueue_thrift

            t = hqueue_thrift()
            self.msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
            self.c = connect(spec.host, spec.port, timeout=60.0)

    def step(self) -> int:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        if self.spec.mode == "lean":
            self.c.call(self.requests[p % len(self.requests)], self.result)
        elif self.spec.op == "put":
            self.c.putMessagesWithPid(PUT_QUEUE, p, self.msgs)
        else:
            self.c.putMessages(PUT_QUEUE, self.msgs)
        return self.spec.batch

    def close(self) -> None:
        self.c.close()


class ThriftScan(Workload):
    c: Any  # LeanThrift or a thriftpy2 client, by mode

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.pid = _first_partition(spec)
        self.sid: int | None = None
        self.seen = 0
        if spec.mode == "lean":
            self.c = LeanThrift(spec.host, spec.port)
            t = self.c.t
            svc = t.HQueueService
            self.svc = svc
            scan = t.TMessageScan(caching=BATCH)
            # one TMessage as the server encodes it: the shape every scanned message has
            sample = t.TMessage(t.TMessageID(1, 1), 0, TOPIC, b"x" * VALUE_BYTES)
            self.element = encode_struct(sample)
            self.open_requests = [
                encode_call(
                    "messageScannerOpen",
                    svc.messageScannerOpen_args(
                        queueName=SCAN_QUEUE, partitionID=p, messageScan=scan
                    ),
                )
                for p in range(PARTITIONS)
            ]
        else:
            from hqueue.protocol import connect, hqueue_thrift

            self.t = hqueue_thrift()
            self.c = connect(spec.host, spec.port, timeout=60.0)

    def _open(self) -> None:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        if self.spec.mode == "lean":
            self.sid = self.c.call(self.open_requests[p], self.svc.messageScannerOpen_result)
        else:
            self.sid = self.c.messageScannerOpen(SCAN_QUEUE, p, self.t.TMessageScan(caching=BATCH))
        self.seen = 0

    def _close(self) -> None:
        if self.spec.mode == "lean":
            req = encode_call("messageScannerClose", self.svc.messageScannerClose_args(id=self.sid))
            self.c.call(req, self.svc.messageScannerClose_result)
        else:
            self.c.messageScannerClose(self.sid)
        self.sid = None

    def step(self) -> int:
        if self.sid is None:
            self._open()
        if self.spec.mode == "lean":
            req = encode_call(
                "messageScannerGetList",
                self.svc.messageScannerGetList_args(id=self.sid, nbMessages=BATCH),
            )
            n = self.c.count_list(req, "messageScannerGetList", self.element)
        else:
            batch = self.c.messageScannerGetList(self.sid, BATCH)
            n = len(batch)
            if n and (batch[-1].id is None or len(batch[-1].value) != VALUE_BYTES):
                raise RuntimeError("scanned a malformed message")
        self.seen += n
        if n == 0:
            if self.seen != self.spec.per_partition:
                raise RuntimeError(
                    f"a scan read {self.seen} messages; {self.spec.per_partition} are stored"
                )
            self._close()
        return n

    def close(self) -> None:
        self.c.close()


class RedisPut(Workload):
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.values = make_values(1000 + spec.client)
        self.pid = _first_partition(spec)
        if spec.mode == "lean":
            self.c = LeanRedis(spec.host, spec.port)
            self.requests = [
                b"".join(resp(b"XADD", PUT_STREAM.format(p), b"*", TOPIC, v) for v in self.values)
                for p in range(PARTITIONS)
            ]
        else:
            import redis

            self.r = redis.Redis(host=spec.host, port=spec.port, socket_timeout=60.0)

    def step(self) -> int:
        p = self.pid
        self.pid = (p + 1) % PARTITIONS
        if self.spec.mode == "lean":
            self.c.xadd_pipeline(self.requests[p], BATCH)
        else:
            key = PUT_STREAM.format(p)
            pipe = self.r.pipeline(transaction=False)
            for v in self.values:
                pipe.xadd(key, {TOPIC: v})
            pipe.execute()
        return BATCH

    def close(self) -> None:
        if self.spec.mode == "lean":
            self.c.close()
        else:
            self.r.close()


class RedisScan(Workload):
    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.pid = _first_partition(spec)
        self.key: bytes | None = None
        self.last = b"0-0"
        self.seen = 0
        if spec.mode == "lean":
            self.c = LeanRedis(spec.host, spec.port)
        else:
            import redis

            self.r = redis.Redis(host=spec.host, port=spec.port, socket_timeout=60.0)

    def step(self) -> int:
        if self.key is None:
            self.key = SCAN_STREAM.format(self.pid).encode()
            self.pid = (self.pid + 1) % PARTITIONS
            self.last = b"0-0"
            self.seen = 0
        if self.spec.mode == "lean":
            n, self.last = self.c.xread(self.key, self.last, BATCH, VALUE_BYTES)
        else:
            reply: Any = self.r.xread({self.key: self.last}, count=BATCH)
            entries = reply[0][1] if reply else []
            n = len(entries)
            if n:
                self.last, fields = entries[-1]
                if len(fields[TOPIC]) != VALUE_BYTES:
                    raise RuntimeError("read a malformed entry")
        self.seen += n
        if n == 0:
            if self.seen != self.spec.per_partition:
                raise RuntimeError(
                    f"a scan read {self.seen} entries; {self.spec.per_partition} are stored"
                )
            self.key = None
        return n

    def close(self) -> None:
        if self.spec.mode == "lean":
            self.c.close()
        else:
            self.r.close()


def make_workload(spec: Spec) -> Workload:
    scan = spec.op == "scan"
    if spec.kind == "thrift":
        return ThriftScan(spec) if scan else ThriftPut(spec)
    return RedisScan(spec) if scan else RedisPut(spec)


def _client_main(spec: Spec, conn: Any, factory: Callable[[Spec], Workload]) -> None:
    """A client process: connect, say ready, run until the window closes, report."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent stops us
    try:
        work = factory(spec)
        conn.send(("ready", None))
        start_at, end_at = conn.recv()
        step = work.step
        clock = time.monotonic
        messages = calls = 0
        latencies: list[float] = []
        cpu0 = None
        now = clock()
        while True:
            t0 = now
            n = step()
            now = clock()
            if now >= end_at:
                break
            if now >= start_at:
                if cpu0 is None:
                    cpu0 = time.process_time()
                messages += n
                calls += 1
                latencies.append(now - t0)
        cpu = time.process_time() - cpu0 if cpu0 is not None else 0.0
        work.close()
        conn.send(("ok", {"messages": messages, "calls": calls, "cpu_s": cpu, "lat": latencies}))
    except BaseException:
        with contextlib.suppress(Exception):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


# -- processes -------------------------------------------------------------------------------


def reap(procs: list[Any], conns: list[Any], grace: float = 10.0) -> None:
    """Ends benchmark worker processes (a clean exit, else terminate, else kill) and closes
    their pipes."""
    for p in procs:
        p.join(grace)
        if p.is_alive():
            p.terminate()
            p.join(5)
        if p.is_alive():
            p.kill()
            p.join()
    for c in conns:
        c.close()


def _die_with_parent() -> None:
    """In a server child: SIGKILL it if this script dies without cleaning up."""
    with contextlib.suppress(Exception):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """utime + stime of a process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Server:
    name: str
    kind: str  # "thrift" | "redis"
    proc: subprocess.Popen[bytes]
    port: int
    log: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _spawn(cmd: Sequence[str], log: Path) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            list(cmd),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=ROOT,
            preexec_fn=_die_with_parent,
        )


def _wait_for_line(proc: subprocess.Popen[bytes], log: Path, pattern: str) -> re.Match[str]:
    deadline = time.monotonic() + START_TIMEOUT
    rx = re.compile(pattern)
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            m = rx.search(log.read_text(errors="replace"))
            if m:
                return m
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{log.read_text()}")
        time.sleep(0.05)
    raise RuntimeError(f"{proc.args!r} did not come up in {START_TIMEOUT} s:\n{log.read_text()}")


def start_gateway(
    workdir: Path,
    profile: Path | None = None,
    data: Path | None = None,
    name: str = "gateway",
    flags: Sequence[str] = (),
) -> Server:
    """Starts ``python -m gateway`` on a port the OS picks, its data in ``data`` (default
    ``workdir/<name>-data``), its log in ``workdir/<name>.log``, with extra ``flags``."""
    data = data or workdir / f"{name}-data"
    log = workdir / f"{name}.log"
    prefix = [sys.executable]
    if profile is not None:
        prefix += ["-m", "cProfile", "-o", str(profile)]
    cmd = [*prefix, "-m", "gateway", "--host", HOST, "--port", "0", "--data-dir", str(data),
           *flags]  # fmt: skip
    proc = _spawn(cmd, log)
    m = _wait_for_line(proc, log, r"serving HQueueService on \S+:(\d+)")
    return Server(name, "thrift", proc, int(m.group(1)), log)


def start_ceiling(workdir: Path, per_partition: int, stack: str) -> Server:
    log = workdir / "null_server.log"
    cmd = [
        sys.executable, "-m", "loadtests.null_server", "--stack", stack,
        "--host", HOST, "--port", "0",
        "--list-size", str(BATCH), "--value-bytes", str(VALUE_BYTES),
        "--lists-per-scan", str(per_partition // BATCH),
    ]  # fmt: skip
    proc = _spawn(cmd, log)
    m = _wait_for_line(proc, log, r"LISTENING \S+:(\d+)")
    return Server("ceiling", "thrift", proc, int(m.group(1)), log)


def start_redis(workdir: Path, fsync: str) -> Server:
    import redis

    last_error = ""
    for attempt in range(5):  # a free port may be taken between probe and bind
        data = workdir / f"redis-{fsync}-{attempt}"
        data.mkdir(parents=True, exist_ok=True)
        log = data / "redis.log"
        port = free_port()
        cmd = [
            "redis-server", "--port", str(port), "--bind", HOST, "--appendonly", "yes",
            "--appendfsync", fsync, "--save", "", "--dir", str(data), "--daemonize", "no",
            "--logfile", "",
        ]  # fmt: skip
        proc = _spawn(cmd, log)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                redis.Redis(host=HOST, port=port, socket_timeout=1.0).ping()
                return Server(f"redis-{fsync}", "redis", proc, port, log)
            except redis.exceptions.BusyLoadingError:
                time.sleep(0.05)
            except redis.exceptions.ConnectionError as exc:
                last_error = str(exc)
                time.sleep(0.05)
        last_error = log.read_text(errors="replace")[-2000:] or last_error
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    raise RuntimeError(f"redis-server did not start: {last_error}")


# -- preparing the targets -----------------------------------------------------------------


def prepare_thrift(server: Server, per_partition: int, is_gateway: bool) -> None:
    """Creates the queues, stores the scan data, and checks that what comes back is right."""
    from hqueue.protocol import connect, hqueue_thrift

    t = hqueue_thrift()
    c = connect(HOST, server.port, timeout=120.0)
    try:
        if is_gateway:
            c.createQueue(PUT_QUEUE, PARTITIONS, TTL_SECONDS, {})
            c.createQueue(SCAN_QUEUE, PARTITIONS, TTL_SECONDS, {})
            values = make_values(7)
            msgs = [t.TMessage(topic=TOPIC, value=v) for v in values]
            for p in range(PARTITIONS):
                for _ in range(per_partition // BATCH):
                    c.putMessagesWithPid(SCAN_QUEUE, p, msgs)
        sid = c.messageScannerOpen(SCAN_QUEUE, 0, t.TMessageScan(caching=BATCH))
        batch = c.messageScannerGetList(sid, BATCH)
        c.messageScannerClose(sid)
        if len(batch) != BATCH:
            raise RuntimeError(f"{server.name}: a scan returned {len(batch)} messages")
        for m in batch:
            if m.id is None or m.partitionID != 0 or len(m.value) != VALUE_BYTES:
                raise RuntimeError(f"{server.name}: scanned a malformed message: {m}")
        ids = [(m.id.timestamp, m.id.sequenceID) for m in batch]
        if is_gateway and ids != sorted(set(ids)):
            raise RuntimeError("gateway: scanned ids are not strictly increasing")
    finally:
        c.close()


def prepare_redis(server: Server, per_partition: int, with_scan_data: bool) -> None:
    import redis

    r = redis.Redis(host=HOST, port=server.port, socket_timeout=120.0)
    try:
        if with_scan_data:
            values = make_values(7)
            for p in range(PARTITIONS):
                key = SCAN_STREAM.format(p)
                for _ in range(per_partition // BATCH):
                    pipe = r.pipeline(transaction=False)
                    for v in values:
                        pipe.xadd(key, {TOPIC: v})
                    pipe.execute()
                if r.xlen(key) != per_partition:
                    raise RuntimeError(f"{key} holds {r.xlen(key)} entries")
        server.extra["version"] = r.info("server").get("redis_version")
        server.extra["appendfsync"] = r.config_get("appendfsync").get("appendfsync")
    finally:
        r.close()


def reset_puts(server: Server) -> None:
    """Drops what a put run stored, so that every run starts from the same state: Redis keeps
    everything in memory, and the gateway's RocksDB would otherwise compact the growing pile
    in the background during later runs (both servers then start the next run empty)."""
    if server.name == "ceiling":
        return
    if server.kind == "redis":
        import redis

        r = redis.Redis(host=HOST, port=server.port, socket_timeout=120.0)
        try:
            r.delete(*[PUT_STREAM.format(p) for p in range(PARTITIONS)])
        finally:
            r.close()
        return
    from hqueue.protocol import connect

    c = connect(HOST, server.port, timeout=120.0)
    try:
        c.truncateQueue(PUT_QUEUE)
    finally:
        c.close()


def quiesce(server: Server, timeout: float = 15.0) -> float:
    """Waits (at most ``timeout`` s) until the server is idle: under 5 % of a core over 0.25 s,
    so background work left by the previous run (flushes, compactions, AOF rewrites) does not
    land in the next one. Returns the seconds waited.

    It first writes every dirty page to disk (``sync``): what earlier runs wrote would
    otherwise still be on its way to the disk during this run, and the run's own fsyncs would
    queue behind it."""
    start = time.monotonic()
    os.sync()
    while time.monotonic() - start < timeout:
        before = cpu_seconds(server.pid)
        time.sleep(0.25)
        if cpu_seconds(server.pid) - before < 0.05 * 0.25:
            break
    return time.monotonic() - start


# -- one measurement -------------------------------------------------------------------------


def _sleep_until(t: float) -> None:
    delay = t - time.monotonic()
    if delay > 0:
        time.sleep(delay)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def measure(
    server: Server, op: str, mode: str, clients: int, warmup: float, duration: float,
    per_partition: int, batch: int = BATCH, value_bytes: int = VALUE_BYTES,
    factory: Callable[[Spec], Workload] = make_workload,
) -> dict[str, Any]:  # fmt: skip
    """Runs ``clients`` client processes against ``server`` and returns one run's figures.

    ``batch`` and ``value_bytes`` shape Thrift puts only (scans and Redis use the defaults).
    ``factory`` builds each client's workload (in the client process, which is forked, so it
    may be any callable)."""
    ctx = mp.get_context("fork")
    procs: list[Any] = []
    conns: list[Any] = []
    try:
        for k in range(clients):
            spec = Spec(server.kind, op, mode, HOST, server.port, k, clients, per_partition,
                        batch, value_bytes)  # fmt: skip
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_client_main, args=(spec, child, factory), daemon=True)
            p.start()
            child.close()
            procs.append(p)
            conns.append(parent)
        for c in conns:
            if not c.poll(CLIENT_READY_TIMEOUT):
                raise RuntimeError(f"a client did not get ready in {CLIENT_READY_TIMEOUT} s")
            status, detail = c.recv()
            if status != "ready":
                raise RuntimeError(f"a client failed to start:\n{detail}")
        start_at = time.monotonic() + warmup
        end_at = start_at + duration
        for c in conns:
            c.send((start_at, end_at))
        _sleep_until(start_at)
        server_cpu0 = cpu_seconds(server.pid)
        _sleep_until(end_at)
        server_cpu = cpu_seconds(server.pid) - server_cpu0
        reports = []
        for c in conns:
            if not c.poll(duration + warmup + 120):
                raise RuntimeError("a client did not report")
            status, detail = c.recv()
            if status != "ok":
                raise RuntimeError(
                    f"a client failed:\n{detail}\n--- server log ---\n{server.log_tail()}"
                )
            reports.append(detail)
        for p in procs:
            p.join(10)
    finally:
        reap(procs, conns, grace=0)
    messages = sum(r["messages"] for r in reports)
    lat = [x for r in reports for x in r["lat"]]
    return {
        "msgs_per_s": messages / duration,
        "messages": messages,
        "calls": sum(r["calls"] for r in reports),
        "latency_ms_p50": percentile(lat, 0.5) * 1e3,
        "latency_ms_p99": percentile(lat, 0.99) * 1e3,
        "server_cpu": server_cpu / duration,  # cores busy
        "clients_cpu": sum(r["cpu_s"] for r in reports) / duration,
        "per_client_msgs_per_s": [r["messages"] / duration for r in reports],  # fairness
    }


# -- the matrix ------------------------------------------------------------------------------


@dataclass
class Cell:
    target: str
    op: str
    mode: str
    clients: int
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, int]:
        return (self.target, self.op, self.mode, self.clients)

    def median(self, what: str = "msgs_per_s") -> float:
        return statistics.median(r[what] for r in self.runs) if self.runs else float("nan")


def plan(args: argparse.Namespace) -> list[Cell]:
    cells = []
    for target in args.targets:
        for op in args.ops:
            if target not in OPS[op][1]:
                continue
            for mode in args.modes:
                if mode != "lean" and op in LEAN_ONLY_OPS:
                    continue
                for n in args.clients:
                    cells.append(Cell(target, op, mode, n))
    return cells


def _fmt_rate(x: float) -> str:
    if x != x:  # nan
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f}M"
    return f"{x / 1e3:.1f}k"


def _ratio(a: float, b: float) -> float:
    return a / b if b and b == b and a == a else float("nan")


def _check(value: float, target: float | None, judged: bool) -> str:
    if value != value:
        return "-"
    if target is None or not judged:
        return f"{value:.2f}"
    return f"{value:.2f} {'OK' if value >= target else 'MISS'}"


def summarize(cells: list[Cell]) -> tuple[list[dict[str, Any]], str]:
    """The table (medians and ratios) and one row per (operation, mode, clients) for the JSON.

    Targets are judged on the lean rows only: with the stock clients the Python client, not
    the server, sets the pace of the ceiling and of Redis (see their 'cli cpu'), so those
    ratios say little about the servers.
    """
    by = {c.key: c for c in cells}
    rows = []
    lines = []
    groups = sorted(
        {(c.op, c.mode, c.clients) for c in cells},
        key=lambda g: (list(OPS).index(g[0]), MODES.index(g[1]), g[2]),
    )
    header = (
        f"{'operation':<20} {'mode':<5} {'cl':>2} | {'gateway':>8} {'ceiling':>8} "
        f"{'redis-es':>8} {'redis-al':>8} | {'gw/ceil':>10} {'gw/redis-al':>12} "
        f"{'gw/redis-es':>12} | {'gw cpu':>6} {'cli cpu':>7}"
    )
    lines.append(header)
    lines.append("-" * len(header))
    verdicts: list[str] = []
    for op, mode, n in groups:
        med = {t: by[(t, op, mode, n)].median() if (t, op, mode, n) in by else float("nan")
               for t in TARGETS}  # fmt: skip
        gw = med["gateway"]
        gw_cell = by.get(("gateway", op, mode, n))
        ceil_target = TARGET_SCAN if op == "scan" else TARGET_PUT
        redis_target = TARGET_PUT_VS_REDIS if op == "put" else None
        judged = mode == "lean"
        row: dict[str, Any] = {
            "op": op,
            "operation": OPS[op][0],
            "mode": mode,
            "clients": n,
            "median_msgs_per_s": med,
            "gw_over_ceiling": _ratio(gw, med["ceiling"]),
            "gw_over_redis_always": _ratio(gw, med["redis-always"]),
            "gw_over_redis_everysec": _ratio(gw, med["redis-everysec"]),
            "gateway_server_cpu": gw_cell.median("server_cpu") if gw_cell else float("nan"),
            "gateway_clients_cpu": gw_cell.median("clients_cpu") if gw_cell else float("nan"),
            "targets": {"gw_over_ceiling": ceil_target, "gw_over_redis": redis_target},
            "judged": judged,
        }
        if judged:
            met: dict[str, bool | None] = {}
            for name, value, target in (
                ("gw_over_ceiling", row["gw_over_ceiling"], ceil_target),
                ("gw_over_redis_always", row["gw_over_redis_always"], redis_target),
                ("gw_over_redis_everysec", row["gw_over_redis_everysec"], redis_target),
            ):
                met[name] = None if target is None or value != value else value >= target
                if met[name] is not None:
                    verdicts.append(
                        f"  {OPS[op][0]} x{n} clients: {name.replace('_', ' ')} = {value:.2f} "
                        f"(target >= {target:g}) -> {'met' if met[name] else 'MISSED'}"
                    )
            row["met"] = met
        rows.append(row)
        redis_al, redis_es = (
            _check(row[k], redis_target, judged)
            for k in ("gw_over_redis_always", "gw_over_redis_everysec")
        )
        lines.append(
            f"{OPS[op][0]:<20} {mode:<5} {n:>2} | {_fmt_rate(gw):>8} "
            f"{_fmt_rate(med['ceiling']):>8} "
            f"{_fmt_rate(med['redis-everysec']):>8} {_fmt_rate(med['redis-always']):>8} | "
            f"{_check(row['gw_over_ceiling'], ceil_target, judged):>10} "
            f"{redis_al:>12} {redis_es:>12} | "
            f"{row['gateway_server_cpu']:>6.2f} {row['gateway_clients_cpu']:>7.2f}"
        )
    lines.append("")
    lines.append(
        "msgs/s: medians of the runs. 'gw cpu' / 'cli cpu': cores busy in the gateway process "
        "(all its threads) / in all client processes. redis-es / redis-al: appendfsync "
        "everysec / always. Targets are judged on the lean rows only (the stock rows are paced "
        "by the Python clients)."
    )
    if verdicts:
        lines.append(
            f"targets: put >= {TARGET_PUT} x ceiling and >= {TARGET_PUT_VS_REDIS:g} x Redis "
            f"Streams; scan >= {TARGET_SCAN} x ceiling"
        )
        lines.extend(verdicts)
    return rows, "\n".join(lines)


def cells_from_report(report: dict[str, Any]) -> list[Cell]:
    return [
        Cell(c["target"], c["op"], c["mode"], c["clients"], list(c["runs"]))
        for c in report["cells"]
    ]


# -- machine ---------------------------------------------------------------------------------


def machine_info(workdir: Path) -> dict[str, Any]:
    from importlib import metadata

    info: dict[str, Any] = {
        "cpu_model": None,
        "cores": os.cpu_count(),
        "memory_gib": None,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "packages": {},
    }
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu_model"] = line.split(":", 1)[1].strip()
                break
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["memory_gib"] = round(int(line.split()[1]) / 2**20, 1)
    for pkg in ("thriftpy2", "gevent", "greenlet", "rocksdict", "redis", "hiredis"):
        try:
            info["packages"][pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info["packages"][pkg] = None
    try:
        out = subprocess.run(
            ["redis-server", "--version"], capture_output=True, text=True, timeout=10
        ).stdout
        m = re.search(r"v=(\S+)", out)
        info["redis_server"] = m.group(1) if m else out.strip()
    except (OSError, subprocess.SubprocessError):
        info["redis_server"] = None
    # the filesystem the data dirs live on (fsync cost depends on it)
    best = ("", "?", "?")
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if str(workdir).startswith(mnt) and len(mnt) > len(best[0]):
                best = (mnt, fstype, dev)
    info["data_dir_fs"] = {"mount": best[0], "type": best[1], "device": best[2]}
    info["gateway_source"] = source_fingerprint()
    return info


def source_fingerprint() -> dict[str, Any]:
    """Which gateway code was measured: the commit, and a hash of gateway/ as it was."""
    import hashlib

    digest = hashlib.sha256()
    sources = [*(ROOT / "gateway").rglob("*.py"), *(ROOT / "gateway").rglob("*.c")]
    for path in sorted(sources):
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes())
    out: dict[str, Any] = {"sha256": digest.hexdigest()[:16], "commit": None, "dirty": None}
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        git = ["git", "-C", str(ROOT)]
        head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10)  # fmt: skip
        if head.returncode == 0:
            out["commit"] = head.stdout.strip()
            status = subprocess.run([*git, "status", "--porcelain", "--", "gateway"],
                                    capture_output=True, text=True, timeout=10)  # fmt: skip
            out["dirty"] = bool(status.stdout.strip())
    return out


# -- main ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.bench_gateway",
        description="Gateway throughput vs. a do-nothing server on the same stack vs. Redis "
        "Streams (puts of 1000 x 100 B, scans of 1000 per call).",
    )
    p.add_argument("--quick", action="store_true", help="1 s runs, 2 runs, less scan data")
    p.add_argument("--runs", type=int, help="runs per measurement (default 5, quick 2)")
    p.add_argument("--duration", type=float, help="seconds per run (default 3, quick 1)")
    p.add_argument("--warmup", type=float, help="seconds before each run (default 0.5, quick 0.3)")
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, help="where to write all figures")
    p.add_argument(
        "--clients", default="1,4", help="concurrent client processes, comma-separated (1,4)"
    )
    p.add_argument("--targets", default=",".join(TARGETS), help="subset of " + ",".join(TARGETS))
    p.add_argument(
        "--ceiling",
        choices=["thriftpy2", "gateway"],
        default="thriftpy2",
        help="what the ceiling is: a plain do-nothing thriftpy2 server (default, as the targets "
        "define it) or the gateway's own stack with nothing behind it (its C fast paths too)",
    )
    p.add_argument("--ops", default=",".join(OPS), help="subset of " + ",".join(OPS))
    p.add_argument("--modes", default=",".join(MODES), help="subset of lean,stock")
    p.add_argument(
        "--gateway-flag",
        action="append",
        default=[],
        metavar="FLAG",
        help="pass FLAG to the gateway (repeat; e.g. --gateway-flag=--metrics-port=0)",
    )
    p.add_argument(
        "--report",
        type=Path,
        metavar="JSON",
        help="print the table of a saved run (a --json file) and exit; measures nothing",
    )
    p.add_argument(
        "--profile-gateway",
        type=Path,
        metavar="OUT.prof",
        help="run the gateway under cProfile, write its stats here and print the top "
        "functions (only the gateway is measured; its figures are then not representative)",
    )
    return p


def _split(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [v.strip() for v in value.split(",") if v.strip()]
    bad = [v for v in items if v not in allowed]
    if bad or not items:
        raise SystemExit(f"--{what}: unknown {bad or value!r}; choose from {','.join(allowed)}")
    return items


def _on_sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _running(server: Server, live: list[Server]) -> Iterator[Server]:
    live.append(server)
    try:
        yield server
    finally:
        server.stop()
        live.remove(server)


def run(args: argparse.Namespace, workdir: Path, live: list[Server], say: Callable[[str], None]):
    cells = plan(args)
    by_target: dict[str, list[Cell]] = {}
    for c in cells:
        by_target.setdefault(c.target, []).append(c)
    per_partition = args.per_partition
    servers: dict[str, dict[str, Any]] = {}
    for target in TARGETS:
        todo = by_target.get(target)
        if not todo:
            continue
        t0 = time.monotonic()
        if target == "gateway":
            server = start_gateway(workdir, args.profile_gateway, flags=args.gateway_flag)
        elif target == "ceiling":
            server = start_ceiling(workdir, per_partition, args.ceiling)
        else:
            server = start_redis(workdir, target.split("-", 1)[1])
        with _running(server, live):
            needs_scan = any(c.op == "scan" for c in todo)
            if server.kind == "thrift":
                prepare_thrift(server, per_partition, is_gateway=target == "gateway")
            else:
                prepare_redis(server, per_partition, with_scan_data=needs_scan)
            # the gateway is being worked on: record the code each server process loaded
            server.extra["gateway_source"] = source_fingerprint()
            say(
                f"[{target}] up on port {server.port}, prepared in {time.monotonic() - t0:.1f} s "
                f"(gateway code {server.extra['gateway_source']['sha256']})"
            )
            for i in range(args.runs):  # runs outside, cells inside: drift hits every cell
                for cell in todo:
                    waited = quiesce(server)
                    result = measure(
                        server, cell.op, cell.mode, cell.clients, args.warmup, args.duration,
                        per_partition,
                    )  # fmt: skip
                    result["idle_wait_s"] = waited
                    cell.runs.append(result)
                    if cell.op != "scan":
                        reset_puts(server)
                    say(
                        f"[{target}] run {i + 1}/{args.runs} {OPS[cell.op][0]} {cell.mode} "
                        f"x{cell.clients}: {_fmt_rate(result['msgs_per_s'])} msgs/s "
                        f"(p50 {result['latency_ms_p50']:.2f} ms, server cpu "
                        f"{result['server_cpu']:.2f}, clients cpu {result['clients_cpu']:.2f})"
                    )
            server.extra["log_tail"] = server.log_tail(1500)
            servers[target] = dict(server.extra)
    return cells, servers


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.report is not None:
        saved = json.loads(args.report.read_text())
        print(json.dumps(saved["machine"], indent=1))
        print(summarize(cells_from_report(saved))[1])
        return 0
    args.runs = args.runs or (2 if args.quick else 5)
    args.duration = args.duration or (1.0 if args.quick else 3.0)
    args.warmup = args.warmup if args.warmup is not None else (0.3 if args.quick else 0.5)
    args.per_partition = 10_000 if args.quick else 25_000
    if args.runs < 1 or args.duration <= 0 or args.warmup < 0:
        raise SystemExit("--runs must be >= 1, --duration > 0, --warmup >= 0")
    args.clients = sorted({int(x) for x in args.clients.split(",") if x.strip()})
    if not args.clients or min(args.clients) < 1 or max(args.clients) > 16:
        raise SystemExit("--clients: 1..16 each")
    args.targets = _split(args.targets, TARGETS, "targets")
    args.ops = _split(args.ops, list(OPS), "ops")
    args.modes = _split(args.modes, MODES, "modes")
    if args.profile_gateway is not None:
        args.targets = ["gateway"]
        args.profile_gateway = args.profile_gateway.resolve()
    if any(t.startswith("redis") for t in args.targets) and not shutil.which("redis-server"):
        raise SystemExit("redis-server is not installed (apt-get install redis-server)")

    signal.signal(signal.SIGTERM, _on_sigterm)

    def say(msg: str) -> None:
        print(time.strftime("%H:%M:%S"), msg, file=sys.stderr, flush=True)

    workdir = Path(tempfile.mkdtemp(prefix="hqueue-bench-"))
    live: list[Server] = []
    started = time.time()
    try:
        machine = machine_info(workdir)
        say(
            f"{machine['cpu_model']}, {machine['cores']} cores, Python {machine['python']}; "
            f"{args.runs} run(s) of {args.duration:g} s (+{args.warmup:g} s warm-up) each"
        )
        cells, servers = run(args, workdir, live, say)
    finally:
        for server in list(live):
            with contextlib.suppress(Exception):
                server.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    rows, table = summarize(cells)
    print(table)
    report = {
        "benchmark": "loadtests.bench_gateway",
        "started_unix": started,
        "elapsed_s": time.time() - started,
        "machine": machine,
        "config": {
            "ceiling": args.ceiling,
            "runs": args.runs,
            "duration_s": args.duration,
            "warmup_s": args.warmup,
            "clients": args.clients,
            "partitions": PARTITIONS,
            "batch_messages": BATCH,
            "value_bytes": VALUE_BYTES,
            "scan_messages_per_partition": args.per_partition,
            "quick": args.quick,
            "modes": args.modes,
            "profiled": args.profile_gateway is not None,
        },
        "servers": servers,
        "summary": rows,
        "cells": [
            {
                "target": c.target,
                "op": c.op,
                "operation": OPS[c.op][0],
                "mode": c.mode,
                "clients": c.clients,
                "median_msgs_per_s": c.median(),
                "median_server_cpu": c.median("server_cpu"),
                "median_clients_cpu": c.median("clients_cpu"),
                "runs": c.runs,
            }
            for c in cells
        ],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2, default=str) + "\n")
    say(f"wrote {args.json}")
    if args.profile_gateway is not None:
        import pstats

        stats = pstats.Stats(str(args.profile_gateway))
        stats.sort_stats("tottime").print_stats(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
