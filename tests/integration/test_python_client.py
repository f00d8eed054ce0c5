"""The friendly Python client (hqueue.Connection / Queue / ConnectionPool) against real
gateways, over every transport/protocol pair the gateway offers."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest
from hqueue import (
    Connection,
    ConnectionPool,
    InvalidArgument,
    Message,
    MessageID,
    TransportError,
    fastpath,
)

BINARY = [bytes(range(256)), b"\xff\xfe\x00\x80", b"", b"\xed\xa0\x80", b"plain"]


@pytest.fixture(params=["buffered-binary", "framed-binary", "framed-compact"])
def conn(request: Any, start_gateway: Any) -> Any:
    flags = {
        "buffered-binary": (),
        "framed-binary": ("--framed",),
        "framed-compact": ("--framed", "--compact"),
    }[request.param]
    gw = start_gateway(*flags)
    with Connection(gw.host, gw.port, framed=gw.framed, compact=gw.compact, timeout=15) as c:
        yield c


def test_put_and_scan_round_trip(conn: Connection, queue_name: str) -> None:
    # the binary protocol sends puts and reads scans on the socket, in hqueue.codec
    assert (fastpath.channel(conn) is None) == conn.compact
    q = conn.create_queue(queue_name, partitions=3, ttl_seconds=3600)
    assert q.info().partitions == 3
    q.put("text", "välue")
    q.put(b"t\xff", b"\x00\xff", partition=2)
    sent = [(b"t\xff", v) for v in BINARY]
    assert q.put_many(sent, partition=1) == len(sent)
    q.put_many([Message(b"m", b"own", partition=0), (b"m", b"tuple", 0)])

    everything = list(q.scan())
    assert len(everything) == 2 + len(sent) + 2
    assert [m.id for m in everything] == sorted(m.id for m in everything)  # type: ignore[type-var]
    assert all(isinstance(m.id, MessageID) and m.partition in (0, 1, 2) for m in everything)

    # "text" went to a random partition: leave it out where it could be
    p1 = [m for m in q.scan(partitions=1, batch_size=2) if m.topic != b"text"]
    assert [(m.topic, m.value) for m in p1] == sent
    two = [m for m in q.scan(partitions=[2, 0]) if m.topic != b"text"]
    assert {m.partition for m in two} == {0, 2}
    assert sorted((m.topic, m.value) for m in two) == [
        (b"m", b"own"), (b"m", b"tuple"), (b"t\xff", b"\x00\xff"),
    ]  # fmt: skip
    newest = list(q.scan(partitions=1, reverse=True, limit=2))
    assert [m.value for m in newest] == [BINARY[-1], BINARY[-2]]
    # start inclusive, stop exclusive; a Message or a MessageID marks the place
    window = list(q.scan(partitions=1, start=p1[1], stop=p1[3].id))
    assert [m.value for m in window] == [BINARY[1], BINARY[2]]
    assert [m.topic for m in q.scan(topics=["text"])] == [b"text"]
    assert [m.value for m in q.scan(topics=["text"])] == ["välue".encode()]
    assert list(q.scan(limit=0)) == []
    assert q.locations() == [f"{conn.host}:{conn.port}"] * 3

    q.truncate()
    assert list(q.scan()) == []
    conn.delete_queue(queue_name)
    assert all(i.name != queue_name for i in conn.queues())


def test_scans_close_their_scanner_on_break_and_exception(
    conn: Connection, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = conn.create_queue(queue_name, 1, 3600)
    q.put_many([("t", b"%d" % i) for i in range(10)])
    calls: list[tuple[str, Any]] = []
    real_call = Connection.call

    def spy(self: Connection, method: str, *args: Any) -> Any:
        result = real_call(self, method, *args)
        calls.append((method, result if method.endswith("Open") else args[:1]))
        return result

    monkeypatch.setattr(Connection, "call", spy)

    def opened() -> int:
        return next(r for m, r in reversed(calls) if m.endswith("Open"))

    for m in q.scan(batch_size=3):
        if m.value == b"4":
            break
    sid = opened()
    assert calls[-1] == ("messageScannerClose", (sid,))
    with pytest.raises(InvalidArgument) as info:
        conn.call("messageScannerGet", sid)  # gone from the gateway
    assert info.value.argument == "id"

    class Stop(Exception):
        pass

    with pytest.raises(Stop):
        for _ in q.scan(batch_size=3):
            raise Stop
    sid = opened()
    assert calls[-1] == ("messageScannerClose", (sid,))

    scan = q.scan(batch_size=3)  # as a generator would, close() ends the scan
    assert next(scan).value == b"0"
    scan.close()
    assert calls[-1] == ("messageScannerClose", (opened(),))

    # read to the end: the empty list frees the scanner, nothing left to close
    calls.clear()
    assert len(list(q.scan(batch_size=4))) == 10
    assert [m for m, _ in calls].count("messageScannerClose") == 0


def test_scans_read_a_page_ahead_and_let_other_calls_in_between(
    conn: Connection, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = conn.create_queue(queue_name, 2, 3600)
    q.put_many([("t", b"%d" % i, i % 2) for i in range(10)])
    copy = conn.create_queue(queue_name + "_copy", 1, 3600)
    asked: list[int] = []  # nbMessages of each messageScannerGetList sent on the raw channel
    real_send = fastpath.Channel.send

    def spy(self: fastpath.Channel, request: bytes) -> None:
        if b"messageScannerGetList" in request:
            asked.append(int.from_bytes(request[-5:-1], "big"))
        real_send(self, request)

    monkeypatch.setattr(fastpath.Channel, "send", spy)
    scan = q.scan(partitions=0, batch_size=2)
    seen = [next(scan)]
    if not conn.compact:
        assert asked == [2, 2]  # the second page was asked for before the first came out
    for m in scan:  # other calls on the connection between the messages of the scan
        copy.put(m.topic, m.value)
        assert queue_name in {i.name for i in conn.queues()}
        seen.append(m)
    assert [m.value for m in seen] == [b"0", b"2", b"4", b"6", b"8"]
    assert [m.value for m in copy.scan()] == [b"2", b"4", b"6", b"8"]
    # two scans of one connection side by side
    evens, odds = q.scan(partitions=0, batch_size=2), q.scan(partitions=1, batch_size=3)
    pairs = zip(evens, odds, strict=True)
    assert [(a.value, b.value) for a, b in pairs] == [(b"%d" % i, b"%d" % (i + 1))
                                                      for i in range(0, 10, 2)]  # fmt: skip
    # the requests a page-at-a-time loop would send, none past the limit or the end
    asked.clear()
    assert [m.value for m in q.scan(partitions=1, batch_size=2, limit=3)] == [b"1", b"3", b"5"]
    assert len(list(q.scan(partitions=1, batch_size=4))) == 5
    if not conn.compact:
        assert asked == [2, 1, 4, 4, 4]  # the last one answered with the empty page
    assert conn.is_open


def test_errors_are_python_exceptions_and_keep_the_connection(
    conn: Connection, queue_name: str
) -> None:
    missing = conn.queue("q_no_such_queue")
    with pytest.raises(InvalidArgument) as info:
        missing.put("t", b"v")
    assert isinstance(info.value, ValueError) and info.value.argument == "queueName"
    with pytest.raises(ValueError, match="partitionID"):
        conn.create_queue(queue_name, 2, 60).put("t", b"v", partition=5)
    with pytest.raises(InvalidArgument) as info:
        conn.queue(queue_name).put_many([("ok", b""), ("x" * 300, b"")])
    assert info.value.argument == "tMessages[1].topic"
    assert conn.is_open
    conn.queue(queue_name).put("t", b"still fine")
    assert [m.value for m in conn.queue(queue_name).scan()] == [b"still fine"]


def test_a_stopped_gateway_is_a_transport_error_then_reconnects(start_gateway: Any) -> None:
    gw = start_gateway()
    c = Connection(gw.host, gw.port, timeout=5)
    c.create_queue("q_restart", 1, 60).put("t", b"before")
    gw.stop()
    with pytest.raises(TransportError) as info:
        c.queue("q_restart").put("t", b"during")
    assert isinstance(info.value, ConnectionError)
    assert not c.is_open
    gw.start()
    c.queue("q_restart").put("t", b"after")  # a new connection, opened by the call
    assert [m.value for m in c.queue("q_restart").scan()] == [b"before", b"after"]
    c.close()


def test_pool_shares_connections_between_threads(gateway: Any, queue_name: str) -> None:
    import threading

    with ConnectionPool(3, gateway.host, gateway.port, timeout=15) as pool:
        with pool.connection() as c:
            c.create_queue(queue_name, 4, 3600)

        def worker(n: int) -> None:
            for i in range(20):
                with pool.connection(timeout=15) as c:
                    c.queue(queue_name).put(f"w{n}", b"%d" % i, partition=n % 4)

        threads = [threading.Thread(target=worker, args=(n,)) for n in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join(60)
        with pool.connection() as c:
            got = list(c.queue(queue_name).scan())
    assert len(got) == 120
    for n in range(6):
        assert [m.value for m in got if m.topic == b"w%d" % n] == [b"%d" % i for i in range(20)]


GEVENT_SCRIPT = textwrap.dedent(
    """
    from gevent import monkey; monkey.patch_all()
    import sys, gevent, hqueue
    from hqueue import client

    made = []
    real_init = client.Connection.__init__
    def counting_init(self, *a, **k):
        made.append(1)
        real_init(self, *a, **k)
    client.Connection.__init__ = counting_init

    host, port, queue = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    pool = hqueue.ConnectionPool(4, host, port, timeout=15)
    def worker(n):
        for i in range(10):
            with pool.connection(timeout=15) as c:
                c.queue(queue).put("g%d" % n, b"%d" % i, partition=n % 2)
                with pool.connection() as same:  # nested: the same connection
                    assert same is c
    gevent.joinall([gevent.spawn(worker, n) for n in range(20)], raise_error=True)
    with pool.connection() as c:
        got = list(c.queue(queue).scan())
    assert len(got) == 200, len(got)
    for n in range(20):
        assert [m.value for m in got if m.topic == b"g%d" % n] == [b"%d" % i for i in range(10)]
    print("ok", len(made) - 1)  # minus the pool's argument check
    """
)


def test_pool_under_gevent_monkey_patching(gateway: Any, queue_name: str) -> None:
    with Connection(gateway.host, gateway.port) as c:
        c.create_queue(queue_name, 2, 3600)
    proc = subprocess.run(
        [sys.executable, "-c", GEVENT_SCRIPT, gateway.host, str(gateway.port), queue_name],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status, made = proc.stdout.split()
    assert status == "ok" and 1 <= int(made) <= 4


def test_batch_puts_in_order(conn: Connection, queue_name: str) -> None:
    q = conn.create_queue(queue_name, 2, 3600)
    with q.batch(batch_size=4, partition=1) as b:
        for i in range(10):
            b.put(b"t\xff", b"%d\x00" % i)
    assert b.sent == 10
    assert [m.value for m in q.scan(partitions=1)] == [b"%d\x00" % i for i in range(10)]
