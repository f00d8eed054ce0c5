"""Robustness of the gateway's network edge against hostile, broken and numerous clients.

Raw sockets speak the wire format byte by byte, so requests can be cut, oversized or nonsense.
The gateway runs as its own process; ``psutil`` watches its resident memory by pid. A healthy
client (``Pinger``) keeps calling the gateway on its own thread while the abuse happens, so
"others are served" is checked during the abuse, not only after it.

Nothing here sleeps to wait for something: every wait polls. The wire spoken by hand and the
watchers are tests/rawwire.py; many, idle and cut connections are test_connections.py.

The cases that name a specific attack were each found failing against the first gateway (which
let thriftpy2 decode straight from the socket) and are why ``gateway/wire.py`` and
``gateway/_wirecheck.c`` exist: requests are read whole and checked before anything decodes them.
"""

from __future__ import annotations

import random
import struct
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import scan_queue
from tests.rawwire import (
    CLOSE_LIMIT,
    LATENCY_LIMIT,
    MB,
    RSS_LIMIT,
    STOP,
    T_I16,
    T_LIST,
    T_MAP,
    T_STRING,
    T_STRUCT,
    T_VOID,
    MiB,
    Pinger,
    RssPeak,
    b_field,
    b_i32,
    b_list,
    b_map,
    b_msg,
    b_str,
    c_msg,
    c_varint,
    connect,
    framed,
    put_messages_prefix,
    put_messages_request,
    read_reply,
    repeat,
    reply_is_success,
    reset,
    stream,
    tmessage,
    warm,
)

# the request reader and the protocols: the store never sees these requests
pytestmark = pytest.mark.wire


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
    assert scan_queue(healthy, "q") == []
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
        healthy.putMessages("q", [tmessage(bytes([i]) * 60_000) for i in range(15)])
    assert rss.growth < RSS_LIMIT, f"RSS grew by {rss.growth / MB:.0f} MB"
    assert not pinger.problems()
    got = scan_queue(healthy, "q")
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
    assert scan_queue(healthy, "q") == []


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
