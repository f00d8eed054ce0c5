"""Memory a client can make the gateway hold, by what it sends, asks for or withholds.

Each test runs a real gateway process and watches its resident memory (psutil, by pid) while a
client on 127.0.0.1 does the damage; the figures measured are printed (``pytest -s``). Bounds
are generous (a busy 2-core machine, glibc keeping freed memory), but each test was run with
its safeguard removed and failed (see the commit that added it).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from typing import Any

import psutil
import pytest

from tests.conftest import free_port
from tests.integration.test_metrics import scrape
from tests.rawwire import (
    MB,
    T_I32,
    T_STRING,
    T_STRUCT,
    Pinger,
    RssPeak,
    b_field,
    b_i32,
    b_list,
    b_msg,
    b_str,
    connect,
    poll,
    put_messages_prefix,
    read_reply,
)

MiB = 1 << 20


@pytest.fixture
def store() -> str:
    """Buffers and scanners live in the gateway whatever the store: the embedded one does."""
    return "embedded"


def rss(gw: Any) -> int:
    return int(psutil.Process(gw.pid).memory_info().rss)


def test_read_ahead_is_bounded_by_the_reply_cap(gateway: Any, T: Any) -> None:
    """messageScannerGetList(160) over 160 bodies of 1 MiB: the reply stops at 16 MiB, and the
    scanner must not have read (and kept) the other 144 MiB. It did: +191 MiB at the peak and
    +160 MiB held afterwards."""
    c = gateway.client()
    c.createQueue("q", 1, 3600, {})
    body = b"x" * MiB
    for _ in range(16):
        c.putMessages("q", [T.TMessage(topic=b"t", value=body)] * 10)
    sid = c.messageScannerOpen("q", 0, T.TMessageScan(caching=160))
    with RssPeak(gateway.pid) as peak:
        first = c.messageScannerGetList(sid, 160)
        del first[:]  # the client's copy is not the gateway's
        time.sleep(0.2)  # let the sampler see the settled state
        held = rss(gateway) - peak.base
    print(f"peak RSS growth {peak.growth / MB:.0f} MB, held after the reply {held / MB:.0f} MB")
    assert peak.growth < 100 * MB
    assert held < 60 * MB
    got = 0
    while batch := c.messageScannerGetList(sid, 160):
        got += len(batch)
    assert got == 160 - 16, "the rest is still there to read"


def _put_one_value(declared: int) -> bytes:
    """A putMessages request up to the start of one body of ``declared`` bytes."""
    return (
        put_messages_prefix()
        + b_list(T_STRUCT, 1)
        + b_field(T_STRING, 3)
        + b_str(b"t")
        + b_field(T_STRING, 4)
        + b_i32(declared)
    )


def test_a_stalled_request_times_out(start_gateway: Any) -> None:
    """Half a put, then silence: the connection is closed once --request-timeout passes
    without a byte (it stayed open for good, holding the half). A connection idle between
    requests is not affected."""
    gw = start_gateway("--request-timeout", "2")
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    idle = connect(gw)
    s = connect(gw)
    s.sendall(_put_one_value(2 * MiB) + b"x" * MiB)
    t0 = time.monotonic()
    state, _ = read_reply(s, timeout=15)
    waited = time.monotonic() - t0
    print(f"a stalled half request was dropped after {waited:.1f} s ({state})")
    assert state == "closed" and 1.5 < waited < 12
    idle.sendall(b_msg("listQueues") + b"\x00")
    assert read_reply(idle)[0] == "reply"  # idle for as long, still served
    assert "no byte of it for 2 s" in gw.log()


def test_unfinished_requests_share_a_capped_budget(start_gateway: Any) -> None:
    """12 connections each send 20 MiB of a 23 MiB put and go silent (the first gateway held
    ~289 MiB for good with 24 of 48). With --max-pending-request-bytes 32 MiB the gateway holds
    about that much, small calls are served throughout, the stalled ones are dropped after the
    request timeout and a whole put fits again afterwards."""
    gw = start_gateway(
        "--max-request-bytes", str(24 * MiB), "--max-pending-request-bytes", str(32 * MiB),
        "--request-timeout", "4",
    )  # fmt: skip
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    c.putMessages("q", [])
    header = _put_one_value(23 * MiB)
    chunk = b"y" * (256 * 1024)
    sent = [0] * 12
    socks = [connect(gw, timeout=3) for _ in sent]

    def attack(i: int) -> None:
        s = socks[i]
        try:
            s.sendall(header)
            while sent[i] < 20 * MiB:
                s.sendall(chunk)
                sent[i] += len(chunk)
        except OSError:  # a timeout once the gateway stops reading, or the drop
            pass

    with Pinger(gw) as pinger, RssPeak(gw.pid) as rss:
        threads = [threading.Thread(target=attack, args=(i,)) for i in range(len(socks))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        held = rss.growth
        # every stalled connection is dropped once the request timeout passes
        for s in socks:
            assert read_reply(s, timeout=20)[0] == "closed"
            s.close()
    print(
        f"12 stalled puts: {sum(sent) / MiB:.0f} MiB sent, gateway RSS grew by at most "
        f"{held / MB:.0f} MB; healthy client's worst latency {pinger.worst * 1000:.0f} ms"
    )
    assert held < 80 * MB, f"gateway RSS grew by {held / MB:.0f} MB"
    assert not pinger.problems()
    c.putMessages("q", [T_msg(b"z" * (4 * MiB))] * 5)  # 20 MiB in one put: room again


def T_msg(value: bytes) -> Any:
    from hqueue.protocol import hqueue_thrift

    return hqueue_thrift().TMessage(topic=b"t", value=value)


def test_framed_small_methods_are_judged_by_the_frame_length(start_gateway: Any) -> None:
    """A framed listQueues announcing 60 MiB was read whole before its 1 MiB limit applied;
    now the frame's method is read first and the frame refused at once."""
    gw = start_gateway("--framed")
    with RssPeak(gw.pid) as rss:
        s = connect(gw)
        t0 = time.monotonic()
        frame = struct.pack(">i", 60 * MiB) + b_msg("listQueues") + b_field(T_I32, 9)
        s.sendall(frame)
        sent = 0
        try:
            while sent < 60 * MiB:
                s.sendall(b"\x00" * 65536)
                sent += 65536
        except OSError:
            pass
        state, _ = read_reply(s)
        elapsed = time.monotonic() - t0
        s.close()
    print(f"framed 60 MiB listQueues: {state} after {sent / MiB:.1f} MiB, {elapsed:.2f} s")
    assert state == "closed"
    assert sent < 8 * MiB
    assert rss.growth < 20 * MB


def test_a_client_that_never_reads_is_dropped(start_gateway: Any, T: Any) -> None:
    """5 clients ask for 16 MiB replies and never read them (the gateway held ~80 MiB per such
    client): each holds at most its one reply, is not read meanwhile, and is dropped once
    --send-timeout passes; the memory comes back."""
    gw = start_gateway("--send-timeout", "2")
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    for _ in range(4):
        c.putMessages("q", [T.TMessage(topic=b"t", value=b"v" * MiB)] * 5)
    base = rss(gw)
    socks = []
    with Pinger(gw) as pinger, RssPeak(gw.pid) as peak:
        sids = []
        for _ in range(5):  # scanners belong to their connection: each opens its own
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((gw.host, gw.port))
            s.sendall(b_msg("queueScannerOpen") + b_field(T_STRING, 1) + b_str(b"q") + b"\x00")
            state, reply = read_reply(s)
            assert state == "reply", reply
            sids.append(struct.unpack(">i", reply[-5:-1])[0])  # field 0 (i32), then STOP
            socks.append(s)
        for s, sid in zip(socks, sids, strict=True):  # 20 MiB asked, 16 MiB sent, never read
            s.sendall(
                b_msg("messageScannerGetList") + b_field(T_I32, 1) + b_i32(sid)
                + b_field(T_I32, 2) + b_i32(20) + b"\x00"
            )  # fmt: skip
        time.sleep(1)  # well within the send timeout: all five are stuck now
        stuck = rss(gw) - base
        poll(lambda: gw.log().count("read no reply") >= 5, timeout=20, what="the drops")
        closed = 0
        for s in socks:  # now read: what was sent, then the end of the connection
            total = 0
            s.settimeout(20)
            with contextlib.suppress(OSError):
                while data := s.recv(1 << 20):
                    total += len(data)
            closed += total < 16 * MiB
            s.close()
        time.sleep(0.5)
        after = rss(gw) - base
    print(
        f"5 clients not reading: +{stuck / MB:.0f} MB while stuck (peak +{peak.growth / MB:.0f}),"
        f" +{after / MB:.0f} MB after they were dropped; {closed} dropped mid-reply"
    )
    assert closed == 5
    assert stuck < 5 * 30 * MB  # one reply (16 MiB) each, and little else
    assert peak.growth < 5 * 40 * MB
    assert after < 40 * MB
    assert not pinger.problems()


def test_replies_in_flight_share_a_capped_budget(start_gateway: Any, T: Any) -> None:
    """8 clients ask for 16 MiB replies and never read them: each one alone holds only its
    reply until --send-timeout, but together they held 8 of them. Past --max-reply-bytes
    (32 MiB here) no connection starts a request with a large reply until sends drain: 2
    replies are made (the second passes the limit), the other 6 requests wait, and are let
    through one at a time as room comes back. Puts go on."""
    gw = start_gateway("--send-timeout", "3", "--max-reply-bytes", str(32 * MiB))
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    for _ in range(4):
        c.putMessages("q", [T.TMessage(topic=b"t", value=b"v" * MiB)] * 5)
    base = rss(gw)
    socks = []
    with RssPeak(gw.pid) as peak:
        sids = []
        for _ in range(8):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((gw.host, gw.port))
            s.sendall(b_msg("queueScannerOpen") + b_field(T_STRING, 1) + b_str(b"q") + b"\x00")
            state, reply = read_reply(s)
            assert state == "reply", reply
            sids.append(struct.unpack(">i", reply[-5:-1])[0])
            socks.append(s)
        for s, sid in zip(socks, sids, strict=True):  # 16 MiB replies, never read
            s.sendall(
                b_msg("messageScannerGetList") + b_field(T_I32, 1) + b_i32(sid)
                + b_field(T_I32, 2) + b_i32(20) + b"\x00"
            )  # fmt: skip
        time.sleep(1.5)  # well within the send timeout: the budget is spent now
        stuck = rss(gw) - base
        answered = 0
        for s in socks:
            s.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                answered += bool(s.recv(1, socket.MSG_PEEK))
        t0 = time.monotonic()
        c.putMessages("q", [T.TMessage(topic=b"t", value=b"meanwhile")])
        put_took = time.monotonic() - t0
        poll(lambda: gw.log().count("read no reply") >= 2, timeout=20, what="the first drops")
        # room again: the waiting requests are let through (one at a time)
        poll(lambda: gw.log().count("read no reply") >= 3, timeout=20, what="a next one")
    for s in socks:
        s.close()
    print(
        f"8 clients not reading, 32 MiB reply budget: {answered} of 8 got a reply started, "
        f"+{stuck / MB:.0f} MB while stuck (peak +{peak.growth / MB:.0f}); a put meanwhile "
        f"took {put_took * 1000:.0f} ms"
    )
    assert answered == 2
    assert put_took < 1.0
    assert stuck < 4 * 16 * MB
    assert peak.growth < 5 * 16 * MB  # not the 6 waiting replies at once when room came back
    sid = c.messageScannerOpen("q", 0, T.TMessageScan(caching=1))
    assert len(c.messageScannerGetList(sid, 1)) == 1  # and reads go on once it drained


def test_read_ahead_of_all_scanners_is_capped_by_bytes(start_gateway: Any, T: Any) -> None:
    """8 merged scanners each read 1 of 16 messages of 1 MiB (caching 16): each read 8 MiB
    ahead and kept 7 MiB between calls, ~60 MiB together, however few partitions they covered.
    Past --max-scanner-bytes (24 MiB here) the read-ahead of idle scanners is forgotten,
    least recently used first, and read again when asked: every scanner still reads every
    message once, in order. (A scan of one partition on the binary protocol reads no further
    than it is asked: its store reader encodes the reply, test_encoded_scans.py.)"""
    port = free_port()
    gw = start_gateway("--max-scanner-bytes", str(24 * MiB), "--metrics-port", str(port))
    c = gw.client()
    c.createQueue("q", 2, 3600, {})
    for i in range(16):
        c.putMessagesWithPid("q", 0, [T.TMessage(topic=b"t", value=b"%2d" % i + bytes(MiB))])
    time.sleep(0.01)  # a later millisecond: merged, it comes after partition 0's
    c.putMessagesWithPid("q", 1, [T.TMessage(topic=b"t", value=b"zz")])
    base = rss(gw)
    sids = [c.queueScannerOpen("q", T.TMessageScan(caching=16)) for _ in range(8)]
    firsts = [c.messageScannerGetList(sid, 1)[0].value[:2] for sid in sids]
    time.sleep(0.2)
    held = rss(gw) - base
    counted = scrape(port)[("hqueue_scanner_bytes", ())]
    print(
        f"8 scanners, 24 MiB budget: +{held / MB:.0f} MB held after one message each "
        f"(the scanners count {counted / MiB:.1f} MiB)"
    )
    assert firsts == [b" 0"] * 8
    assert 0 < counted <= 24 * MiB
    assert held < 60 * MB  # without the cap: +120 MB and more
    for sid in sids:
        rest = []
        while batch := c.messageScannerGetList(sid, 4):
            rest += [m.value[:2] for m in batch]
        assert rest == [b"%2d" % i for i in range(1, 16)] + [b"zz"]


def test_wide_queue_scanners_are_cheap_until_read_and_capped(start_gateway: Any, T: Any) -> None:
    """A queue scanner over 32767 partitions cost ~32 MiB at open, so a handful exhausted
    memory. Cursors are now made at the first read and dropped when their partition is
    exhausted, and the partitions of all open scanners together are capped
    (--max-scanner-partitions): past it opening is an IOError."""
    gw = start_gateway("--max-scanner-partitions", str(10 * 32767))
    c = gw.client()
    c.createQueue("wide", 32767, 3600, {})
    c.putMessagesWithPid("wide", 7, [T.TMessage(topic=b"t", value=b"seven")])
    c.putMessagesWithPid("wide", 30000, [T.TMessage(topic=b"t", value=b"thirty")])
    base = rss(gw)
    sids = [c.queueScannerOpen("wide", None) for _ in range(10)]
    opened = rss(gw) - base
    with pytest.raises(T.IOError) as info:
        c.queueScannerOpen("wide", None)
    print(f"10 scanners over 32767 partitions: +{opened / MB:.1f} MB; the 11th: {info.value}")
    assert opened < 20 * MB
    assert "--max-scanner-partitions" in info.value.message or "limit" in info.value.message
    got = c.messageScannerGetList(sids[0], 10)
    assert [m.value for m in got] == [b"seven", b"thirty"]
    after_read = rss(gw) - base
    print(f"after reading one of them: +{after_read / MB:.1f} MB")
    assert after_read < 20 * MB
    assert c.messageScannerGetList(sids[0], 10) == []  # the end frees it
    c.messageScannerClose(sids[1])
    sids[0] = c.queueScannerOpen("wide", None)  # room again


class EvilSubscriber:
    """Serves consumeMessages by answering every call with ``reply``, on its own thread."""

    def __init__(self, reply: bytes) -> None:
        self.reply = reply
        self.calls = 0
        self._srv = socket.create_server(("127.0.0.1", 0))
        self._srv.settimeout(0.2)
        self.port = self._srv.getsockname()[1]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._srv.accept()
            except OSError:
                continue
            with conn:
                conn.settimeout(5)
                with contextlib.suppress(OSError):
                    while not self._stop.is_set() and conn.recv(1 << 20):
                        self.calls += 1
                        conn.sendall(self.reply)  # a reply per chunk is plenty to hurt

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._srv.close()


def test_subscriber_replies_are_checked_before_decoding(start_gateway: Any, T: Any) -> None:
    """A subscriber answering consumeMessages with a reply that announces a list of 2^31-1
    elements froze the gateway (puts of everyone stalled, up to ~9 s): thriftpy2 skipped the
    elements one by one. Replies now go through the same checked reader as requests, with
    small limits: refused at once, the batch retried, others served meanwhile."""
    gw = start_gateway()
    c = gw.client()
    c.createQueue("q", 1, 3600, {})
    evil = EvilSubscriber(
        b_msg("consumeMessages", seqid=0, mtype=2) + b_field(15, 5) + b_list(1, 2**31 - 1) + b"\x00"
    )
    try:
        with Pinger(gw) as pinger:
            lease = c.subscribe(
                "q",
                T.TSubscription(
                    name=b"evil",
                    partitions=[T.TSubscribedPartition(0, T.TMessageID(0, 0))],
                ),
                f"127.0.0.1:{evil.port}",
                30,
            )
            c.putMessages("q", [T.TMessage(topic=b"t", value=b"v")])
            poll(lambda: evil.calls >= 3, timeout=20, what="three pushes to the subscriber")
            c.unsubscribe("q", b"evil", lease)
        print(
            f"{evil.calls} evil replies; a healthy client's worst latency meanwhile "
            f"{pinger.worst * 1000:.0f} ms"
        )
        assert not pinger.problems()
    finally:
        evil.close()
