"""Robustness of the gateway's network edge against hostile, broken and numerous clients.

Raw sockets speak the wire format byte by byte, so requests can be cut, oversized or nonsense.
The gateway runs as its own process; ``psutil`` watches its resident memory by pid. A healthy
client (``Pinger``) keeps calling the gateway on its own thread while the abuse happens, so
"others are served" is checked during the abuse, not only after it.

Nothing here sleeps to wait for something: every wait polls, except the one deliberate idle
period of ``test_idle_connection_stays_open``.

The cases that name a specific attack were each found failing against the first gateway (which
let thriftpy2 decode straight from the socket) and are why ``gateway/wire.py`` and
``gateway/_wirecheck.c`` exist: requests are read whole and checked before anything decodes them.
"""

from __future__ import annotations

import contextlib
import itertools
import random
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest

from tests.helpers import scan_queue

MB = 1_000_000
MiB = 1 << 20

# Thrift type ids and message types (the same numbers in every binary-protocol implementation)
T_STOP, T_VOID, T_I16, T_I32, T_STRING, T_STRUCT, T_MAP, T_LIST = 0, 1, 6, 8, 11, 12, 13, 15
CALL, REPLY, EXCEPTION = 1, 2, 3

RSS_LIMIT = 50 * MB  # what one abusive connection may add to the gateway's resident memory
LATENCY_LIMIT = 1.0  # seconds a healthy client may wait while another connection misbehaves
CLOSE_LIMIT = 5.0  # seconds within which an absurd request must be refused

# the request reader and the protocols: the store never sees these requests
pytestmark = pytest.mark.wire


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
    c.putMessages(queue, [_msg(b"warm")] * 10)
    sid = c.queueScannerOpen(queue, None)
    while c.messageScannerGetList(sid, 100):
        pass
    c.truncateQueue(queue)
    c.listQueues()
    return c


def _msg(value: bytes, topic: bytes = b"t", partition: int | None = None) -> Any:
    from hqueue.protocol import hqueue_thrift

    return hqueue_thrift().TMessage(partitionID=partition, topic=topic, value=value)


def scan_all(client: Any, queue: str, batch: int = 1000) -> list[Any]:
    return scan_queue(client, queue, batch)


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


# -- garbage ------------------------------------------------------------------------------

WIRES = {
    "buffered-binary": (),
    "buffered-compact": ("--compact",),
    "framed-binary": ("--framed",),
    "framed-compact": ("--framed", "--compact"),
}
HTTP = b"GET /hqueue HTTP/1.1\r\nHost: localhost\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n\r\n"


@pytest.mark.parametrize("kind", ["random", "http"])
@pytest.mark.parametrize("wire", list(WIRES))
def test_garbage_closes_only_that_connection(start_gateway: Any, wire: str, kind: str) -> None:
    """Garbage ends that one connection at once; a healthy client is served before, during,
    after.

    Framed: "GET " read as a frame length announces a 1.19 GiB frame, far beyond
    --max-request-bytes: the connection must close at once, not wait for it.
    """
    flags = WIRES[wire]
    gw = start_gateway(*flags)
    healthy = warm(gw)
    rng = random.Random(f"{wire}-{kind}")
    if kind == "http":
        garbage = HTTP  # sent as is, like a browser or curl pointed at the port
    else:
        garbage = bytes(rng.getrandbits(8) for _ in range(4096))
        if "--framed" in flags:
            garbage = framed(garbage)  # garbage the protocol, not the framing, must reject

    with Pinger(gw) as pinger:
        for _ in range(3):
            s = connect(gw)
            t0 = time.monotonic()
            s.sendall(garbage)
            state, data = read_reply(s)
            s.close()
            assert state == "closed", (
                f"{kind} garbage on {wire}: connection {state} after "
                f"{time.monotonic() - t0:.1f} s, got {data[:40]!r}"
            )
            assert healthy.listQueues()  # the connection opened before keeps working
    assert not pinger.problems()
    assert gw.proc.poll() is None
    assert [q.name for q in gw.client().listQueues()] == [b"q"]


def test_garbage_after_valid_calls_closes_that_connection(gateway: Any) -> None:
    healthy = warm(gateway)
    s = connect(gateway)
    s.sendall(b_msg("listQueues") + STOP)
    state, data = read_reply(s)
    assert state == "reply" and b"listQueues" in data
    s.sendall(b"\x00\x01\x02garbage\xff" * 100)
    assert read_reply(s)[0] == "closed"
    assert healthy.listQueues()


# -- absurd lengths -----------------------------------------------------------------------


def _distinct_i16() -> Iterator[bytes]:
    while True:  # values above 256: each one a separate Python int once decoded
        yield b"".join(struct.pack(">h", 1000 + i) for i in range(30000))


def _distinct_topics() -> Iterator[bytes]:
    n = 0
    while True:
        yield b"".join(b_str(struct.pack(">H", (n + i) & 0xFFFF)) for i in range(10000))
        n += 10000


def _distinct_config() -> Iterator[bytes]:
    n = 0
    while True:
        yield b"".join(b_str(b"%08x" % (n + i)) + b_str(b"") for i in range(4000))
        n += 4000


ABSURD = {
    # name: (gateway flags, prefix, filler chunks)
    "string-2GiB": (
        (),
        b_msg("putMessages") + b_field(T_STRING, 1) + b_i32(2**31 - 1),
        lambda: repeat(b"x" * 65536),
    ),
    # 2**30 is as absurd as 2**31-1 but does not overflow thriftpy2's buffer arithmetic: only
    # an up-front length check refuses it before 64 MiB are read.
    "string-1GiB": (
        (),
        b_msg("putMessages") + b_field(T_STRING, 1) + b_i32(2**30),
        lambda: repeat(b"x" * 65536),
    ),
    "topic-2GiB": (
        (),
        put_messages_prefix() + b_list(T_STRUCT, 1) + b_field(T_STRING, 3) + b_i32(2**31 - 1),
        lambda: repeat(b"x" * 65536),
    ),
    "list-of-messages-2G": (
        (),
        put_messages_prefix() + b_list(T_STRUCT, 2**31 - 1),
        lambda: repeat(STOP * 65536),  # each element an empty TMessage, one byte
    ),
    # Primitives and strings in a list: 64 MiB of i16s would decode into ~33M Python ints.
    "list-of-i16-2G": (
        (),
        b_msg("combinedScannerOpen")
        + b_field(T_STRING, 1)
        + b_str(b"q")
        + b_field(T_LIST, 2)
        + b_list(T_I16, 2**31 - 1),
        _distinct_i16,
    ),
    "list-of-topics-2G": (
        (),
        b_msg("queueScannerOpen")
        + b_field(T_STRING, 1)
        + b_str(b"q")
        + b_field(T_STRUCT, 2)
        + b_field(T_LIST, 3)
        + b_list(T_STRING, 2**31 - 1),
        _distinct_topics,
    ),
    "config-map-2G": (
        (),
        b_msg("createQueue") + b_field(T_MAP, 4) + b_map(T_STRING, T_STRING, 2**31 - 1),
        _distinct_config,
    ),
    # Same as string-1GiB, through the framed transport's frame length.
    "frame-1GiB": (
        ("--framed",),
        struct.pack(">i", 2**30) + put_messages_prefix(),
        lambda: repeat(b"x" * 65536),
    ),
}


@pytest.mark.parametrize("case", list(ABSURD))
def test_absurd_length_is_refused_at_once(start_gateway: Any, case: str) -> None:
    """A valid header, then a length no request can have: the gateway hangs up quickly (or
    answers with an error), its RSS grows by less than ~50 MB, and others are served.

    The client keeps streaming filler after the length, as an attacker would: waiting for
    bytes that never come costs nothing, so the test makes the gateway read them.

    Found against the first gateway: a declared length beyond --max-request-bytes was read
    (64 MiB, with quadratic copying in thriftpy2's read buffer: a 3-4 s stall for everyone);
    lists of i16s or strings were decoded into a billion Python objects (+1.3 GB RSS). The
    test stops streaming at +200 MB so a regression cannot take the machine down.
    """
    flags, prefix, filler = ABSURD[case]
    gw = start_gateway(*flags)
    healthy = warm(gw)
    problems: list[str] = []
    with Pinger(gw) as pinger, RssPeak(gw.pid) as rss:
        s = connect(gw, timeout=CLOSE_LIMIT)
        t0 = time.monotonic()
        sent, state = stream(
            s,
            prefix,
            filler(),
            max_bytes=100 * MiB,
            give_up=lambda: rss.growth > 4 * RSS_LIMIT or time.monotonic() - t0 > 15,
        )
        elapsed = time.monotonic() - t0
        reset(s)
    if state not in ("closed", "exception"):
        problems.append(f"connection {state} after {elapsed:.1f} s and {sent / MiB:.1f} MiB")
    if elapsed > CLOSE_LIMIT:
        problems.append(f"took {elapsed:.1f} s ({sent / MiB:.1f} MiB streamed) to refuse")
    if rss.growth > RSS_LIMIT:
        problems.append(f"gateway RSS grew by {rss.growth / MB:.0f} MB")
    problems += pinger.problems()
    assert gw.proc.poll() is None, "the gateway died"
    assert healthy.listQueues()
    assert not problems, f"{case}: " + "; ".join(problems)


def test_negative_lengths_are_refused(gateway: Any) -> None:
    """A negative string or list length is a protocol error (Apache Thrift: NEGATIVE_SIZE).

    thriftpy2 alone reads a negative list length as an empty list and answers with success.
    """
    healthy = warm(gateway)
    outcomes = {}
    for case, payload in {
        "string -1": b_msg("putMessages") + b_field(T_STRING, 1) + b_i32(-1) + b"q" + STOP,
        "string -2**31": b_msg("putMessages") + b_field(T_STRING, 1) + b_i32(-(2**31)) + STOP,
        "list -1": put_messages_prefix() + b_list(T_STRUCT, -1) + STOP,
        "list -2**31": put_messages_prefix() + b_list(T_STRUCT, -(2**31)) + STOP,
    }.items():
        s = connect(gateway)
        s.sendall(payload)
        state, data = read_reply(s)
        s.close()
        if state == "reply" and not reply_is_success(data):
            state = "error reply"
        outcomes[case] = state
        assert healthy.listQueues()
    assert scan_all(healthy, "q") == []
    accepted = {
        c: o for c, o in outcomes.items() if o not in ("closed", "exception", "error reply")
    }
    assert not accepted, f"negative lengths not refused: {accepted}"


@pytest.mark.parametrize("wire", ["binary", "compact"])
def test_skipped_containers_do_not_freeze_the_gateway(start_gateway: Any, wire: str) -> None:
    """A container of elements that take no bytes (element type STOP/VOID) is skipped, not
    read; skipping 2**31 of them must not stall everyone else.

    thriftpy2 alone skips a mismatched or unknown container by looping over its declared size,
    and skipping a STOP/VOID element reads nothing: a 20-byte request froze the first gateway's
    event loop for ~3 s (binary) or minutes (compact, pure Python). The test kills a gateway it
    finds frozen.
    """
    gw = start_gateway("--compact") if wire == "compact" else start_gateway()
    healthy = warm(gw)
    if wire == "binary":
        payload = put_messages_prefix() + b_list(T_VOID, 2**31 - 1) + STOP
    else:  # field 4 (config), type MAP (0x0b), then size and a key/value type byte of STOP/STOP
        payload = c_msg("createQueue") + b"\x4b" + c_varint(2**31 - 1) + b"\x00" + STOP
    problems: list[str] = []
    try:
        with Pinger(gw, timeout=3.0) as pinger:
            s = connect(gw)
            t0 = time.monotonic()
            s.sendall(payload)
            state, _ = read_reply(s, timeout=CLOSE_LIMIT)
            elapsed = time.monotonic() - t0
            s.close()
        if state == "open" or elapsed > LATENCY_LIMIT:
            problems.append(f"the request was {state} after {elapsed:.1f} s")
        problems += pinger.problems()
        assert not problems, f"{wire}: " + "; ".join(problems)
        assert healthy.listQueues()
    finally:
        if problems:
            gw.kill()  # frozen: SIGTERM would not be handled for minutes


# -- oversized requests -------------------------------------------------------------------


def test_oversized_request_is_cut_off(start_gateway: Any) -> None:
    """With --max-request-bytes 1 MiB, requests over 1 MiB, really sent, close the connection;
    RSS stays bounded; others are served; requests under the limit still work."""
    gw = start_gateway("--max-request-bytes", "1048576", "--max-value-bytes", "65536")
    healthy = warm(gw)
    with Pinger(gw) as pinger, RssPeak(gw.pid) as rss:
        # one 32 MiB value, declared honestly and streamed
        s = connect(gw)
        sent, state = stream(
            s,
            put_messages_prefix() + b_list(T_STRUCT, 1) + b_field(T_STRING, 3) + b_str(b"t")
            + b_field(T_STRING, 4) + b_i32(32 * MiB),
            repeat(bytes(range(256)) * 256),
            max_bytes=32 * MiB,
        )  # fmt: skip
        s.close()
        assert state == "closed" and sent < 32 * MiB, (state, sent)

        # 40 values of 60 KB, each one under --max-value-bytes: 2.4 MB in all
        s = connect(gw)
        request = put_messages_request([bytes([i]) * 60_000 for i in range(40)])
        sent, state = stream(s, request[:1000], iter([request[1000:]]), max_bytes=len(request))
        s.close()
        assert state == "closed", state

        # just under the limit is fine, on the same gateway
        healthy.putMessages("q", [_msg(bytes([i]) * 60_000) for i in range(15)])
    assert rss.growth < RSS_LIMIT, f"RSS grew by {rss.growth / MB:.0f} MB"
    assert not pinger.problems()
    got = scan_all(healthy, "q")
    assert [m.value for m in got] == [bytes([i]) * 60_000 for i in range(15)]


def test_ten_million_empty_structs_are_refused(gateway: Any) -> None:
    """list<TMessage> of 10 million T_STOP-only elements (one byte each, 10 MB < the 64 MiB
    request limit): the list size limit (--max-batch-messages) refuses it from its header."""
    healthy = warm(gateway)
    n = 10_000_000
    with Pinger(gateway) as pinger, RssPeak(gateway.pid) as rss:
        s = connect(gateway)
        t0 = time.monotonic()
        sent, state = stream(
            s, put_messages_prefix() + b_list(T_STRUCT, n), repeat(STOP * 65536), n
        )
        elapsed = time.monotonic() - t0
        s.close()
    assert state == "closed", state
    assert sent < n, "the gateway read all 10 million structs"
    assert elapsed < CLOSE_LIMIT, elapsed
    assert rss.growth < RSS_LIMIT, f"RSS grew by {rss.growth / MB:.0f} MB"
    assert not pinger.problems()
    assert scan_all(healthy, "q") == []


# -- framed transport ---------------------------------------------------------------------


@pytest.mark.parametrize("size", [2**31, 2**31 - 1, 2**32 - 1, 0])
def test_framed_absurd_frame_header_closes(start_gateway: Any, size: int) -> None:
    """A frame header announcing 2 GiB (or a negative / zero size) closes the connection."""
    gw = start_gateway("--framed")
    healthy = warm(gw)
    with Pinger(gw) as pinger, RssPeak(gw.pid) as rss:
        s = connect(gw)
        sent, state = stream(s, struct.pack(">I", size), repeat(b"\x00" * 65536), 16 * MiB)
        s.close()
    assert state == "closed", (state, sent)
    assert rss.growth < RSS_LIMIT
    assert not pinger.problems()
    assert healthy.listQueues()


# -- idle and many clients ----------------------------------------------------------------


def test_idle_connection_stays_open(gateway: Any) -> None:
    """No server-side idle timeout: a quiet client is still connected seconds later."""
    c = gateway.client()
    c.createQueue("q", 1, 60, {})
    raw = connect(gateway)
    # The one deliberate sleep of this file: idleness is the thing under test, and there is
    # no event to poll for -- the gateway must simply do nothing for a while.
    time.sleep(4)
    c.putMessage("q", _msg(b"after idle"))
    assert [m.value for m in scan_all(c, "q")] == [b"after idle"]
    raw.sendall(b_msg("listQueues", seqid=7) + STOP)
    state, data = read_reply(raw)
    assert state == "reply" and b"listQueues" in data
    raw.close()


def test_many_concurrent_clients_get_strictly_increasing_ids(gateway: Any) -> None:
    """50 clients on their own threads put and scan at once; every id is unique and strictly
    increasing per partition, and each client's messages keep their order."""
    n_clients, rounds, partitions = 50, 8, 4
    admin = gateway.client()
    admin.createQueue("q", partitions, 3600, {})
    barrier = threading.Barrier(n_clients)
    errors: list[str] = []

    def worker(i: int) -> None:
        try:
            c = gateway.client(timeout=30)
            own = i % partitions
            barrier.wait(timeout=30)
            for r in range(rounds):
                c.putMessages("q", [_msg(b"%d:%d:%d" % (i, r, k), b"c%d" % i) for k in range(5)])
                c.putMessagesWithPid(
                    "q", own, [_msg(b"%d:%d:p%d" % (i, r, k), b"c%d" % i) for k in range(3)]
                )
                c.putMessage("q", _msg(b"%d:%d:s" % (i, r), b"c%d" % i, partition=own))
            # a scan of its own partition, concurrent with other clients' puts
            sid = c.messageScannerOpen("q", own, None)
            seen = []
            while batch := c.messageScannerGetList(sid, 37):
                seen.extend(batch)
            ids = [(m.id.timestamp, m.id.sequenceID) for m in seen]
            if any(a >= b for a, b in itertools.pairwise(ids)):
                errors.append(f"client {i}: ids not strictly increasing in its scan")
            mine = [m.value for m in seen if m.topic == b"c%d" % i and b":p" in m.value]
            if mine != [b"%d:%d:p%d" % (i, r, k) for r in range(rounds) for k in range(3)]:
                errors.append(f"client {i}: its pid-messages out of order or missing")
            c.close()
        except Exception as exc:
            errors.append(f"client {i}: {exc!r}")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors[:10]

    got = scan_all(admin, "q")
    assert len(got) == n_clients * rounds * 9
    keys = [(m.partitionID, m.id.timestamp, m.id.sequenceID) for m in got]
    assert len(set(keys)) == len(keys), "duplicate MessageIDs"
    by_pid: dict[int, list[Any]] = {}
    for m in got:
        by_pid.setdefault(m.partitionID, []).append(m)
    for pid, ms in by_pid.items():
        ids = [(m.id.timestamp, m.id.sequenceID) for m in ms]
        assert ids == sorted(ids) and len(set(ids)) == len(ids), f"partition {pid}"
        # each client's messages on this partition appear in the order it put them
        for i in range(n_clients):
            vals = [m.value for m in ms if m.topic == b"c%d" % i]
            order = [_order(v) for v in vals]
            assert order == sorted(order), (pid, i, vals)
    # the merged scan is in MessageID order
    merged = [(m.id.timestamp, m.id.sequenceID) for m in got]
    assert merged == sorted(merged)


def _order(value: bytes) -> tuple[int, int, int]:
    """Put order within one client: round, then batch, pid-batch, single."""
    _, r, k = value.split(b":")
    if k == b"s":
        return int(r), 2, 0
    if k.startswith(b"p"):
        return int(r), 1, int(k[1:])
    return int(r), 0, int(k)


# -- disconnects --------------------------------------------------------------------------


def test_disconnect_mid_request(gateway: Any) -> None:
    """Peers vanishing halfway through a request (FIN or RST) leave nothing stored."""
    healthy = warm(gateway)
    request = put_messages_request([b"v" * 100_000, b"w" * 100_000])
    with Pinger(gateway) as pinger:
        for cut in (1, 3, 10, 30, 1000, len(request) // 2, len(request) - 1):
            for hard in (False, True):
                s = connect(gateway)
                s.sendall(request[:cut])
                reset(s) if hard else s.close()
        assert healthy.listQueues()
    assert not pinger.problems()
    assert scan_all(healthy, "q") == []
    healthy.putMessages("q", [_msg(b"intact")])
    assert [m.value for m in scan_all(healthy, "q")] == [b"intact"]


def test_disconnect_mid_response(gateway: Any) -> None:
    """A huge messageScannerGetList whose caller hangs up while the reply is being written."""
    healthy = warm(gateway)
    big = [bytes([i % 251]) * 100_000 for i in range(200)]  # 20 MB in the queue
    for k in range(0, len(big), 20):
        healthy.putMessages("q", [_msg(v) for v in big[k : k + 20]])
    with Pinger(gateway) as pinger, RssPeak(gateway.pid) as rss:
        for hard in (True, False, True, False):
            sid = healthy.queueScannerOpen("q", None)
            s = connect(gateway)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(
                b_msg("messageScannerGetList")
                + b_field(T_I32, 1) + b_i32(sid) + b_field(T_I32, 2) + b_i32(100_000)
                + STOP
            )  # fmt: skip
            assert s.recv(1000)  # the reply has started
            reset(s) if hard else s.close()
        assert healthy.listQueues()
    assert not pinger.problems()
    assert rss.growth < 4 * RSS_LIMIT, f"RSS grew by {rss.growth / MB:.0f} MB"
    got = scan_all(healthy, "q", batch=50)
    assert [m.value for m in got] == big
    assert gateway.proc.poll() is None


# -- shutdown -----------------------------------------------------------------------------


def test_sigterm_with_idle_clients_exits_cleanly(start_gateway: Any) -> None:
    """SIGTERM while clients are connected (idle, or halfway through a request): exit code 0,
    promptly, and what was acknowledged is there after a restart."""
    gw = start_gateway()
    clients = [gw.client() for _ in range(5)]
    clients[0].createQueue("q", 2, 3600, {})
    for i, c in enumerate(clients):
        c.putMessages("q", [_msg(b"m%d" % i)])
    raw_idle = connect(gw)
    raw_partial = connect(gw)
    raw_partial.sendall(put_messages_prefix()[:20])

    t0 = time.monotonic()
    assert gw.stop(timeout=15) == 0
    assert time.monotonic() - t0 < 5.0, f"shutdown took {time.monotonic() - t0:.1f} s"
    for s in (raw_idle, raw_partial):
        assert read_reply(s)[0] == "closed"
        s.close()
    with pytest.raises(Exception):  # noqa: B017 - any transport error: the server is gone
        clients[1].listQueues()
    assert "stopped" in gw.log()

    again = start_gateway(data_dir=gw.data_dir)
    c = again.client()
    assert sorted(m.value for m in scan_all(c, "q")) == [b"m%d" % i for i in range(5)]
