"""hqueue.Producer against real gateways: calls in flight, order, errors, a gateway that goes
away and comes back."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from hqueue import Connection, InvalidArgument, Producer, TransportError


@pytest.mark.parametrize("framed", [False, True])
def test_puts_in_flight_keep_each_partitions_order(
    start_gateway: Any, queue_name: str, framed: bool
) -> None:
    gw = start_gateway(*(["--framed"] if framed else []))
    conn = Connection(gw.host, gw.port, framed=framed, timeout=30)
    q = conn.create_queue(queue_name, partitions=4, ttl_seconds=3600)
    delivered: list[tuple[int, Any]] = []
    lock = threading.Lock()

    def on_delivery(count: int, error: BaseException | None) -> None:
        with lock:
            delivered.append((count, error))

    futures = []
    with Producer(gw.host, gw.port, framed=framed, window=3, connections=2, batch_size=70,
                  on_delivery=on_delivery) as p:  # fmt: skip
        for i in range(1000):
            p.put(queue_name, "t", b"put-%d" % i, partition=i % 4)
        for b in range(10):
            pairs = [(b"m", b"many-%d-%d" % (b, i)) for i in range(50)]
            futures.append(p.put_many(queue_name, pairs, partition=b % 4))
        futures.append(p.put_lists(queue_name, "l", [b"list-%d" % i for i in range(30)], 3))
        assert p.put_many(queue_name, [], 1).result() == 0
    assert [f.result(timeout=0) for f in futures] == [50] * 10 + [30]
    assert sum(c for c, e in delivered if e is None) == 1000 + 500 + 30
    assert all(e is None for _, e in delivered)

    for pid in range(4):
        got = [m.value for m in q.scan(partitions=pid)]
        puts = [v for v in got if v.startswith(b"put-")]
        assert puts == [b"put-%d" % i for i in range(pid, 1000, 4)]  # order kept
        for b in range(pid, 10, 4):
            many = [v for v in got if v.startswith(b"many-%d-" % b)]
            assert many == [b"many-%d-%d" % (b, i) for i in range(50)]
    assert [m.value for m in q.scan(partitions=3, topics=["l"])] == [
        b"list-%d" % i for i in range(30)
    ]
    assert len(list(q.scan())) == 1530
    conn.close()


def test_refusals_fail_their_call_only(start_gateway: Any, queue_name: str) -> None:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port, timeout=30)
    q = conn.create_queue(queue_name, partitions=2, ttl_seconds=3600)
    p = Producer(gw.host, gw.port, window=4, batch_size=10)
    bad = p.put_many("q_no_such_queue", [(b"t", b"v")])
    empty_topic = p.put_many(queue_name, [(b"t", b"v"), (b"", b"v")], partition=0)
    good = p.put_many(queue_name, [(b"t", b"ok")], partition=1)
    with pytest.raises(InvalidArgument) as info:
        bad.result(timeout=30)
    assert info.value.argument == "queueName"
    with pytest.raises(InvalidArgument) as info:
        empty_topic.result(timeout=30)
    assert info.value.argument == "tMessages[1].topic"
    assert good.result(timeout=30) == 1
    # a put() batch has no future: flush() raises its error
    for i in range(3):
        p.put("q_no_such_queue", "t", b"%d" % i)
    with pytest.raises(InvalidArgument):
        p.flush(timeout=30)
    p.flush(timeout=30)  # reported once
    # bad arguments are refused before anything is sent
    with pytest.raises(InvalidArgument) as info:
        p.put_many(queue_name, [(b"t", 5)])
    assert info.value.argument == "messages[0].value"
    with pytest.raises(InvalidArgument) as info:
        p.put_many(queue_name, [(b"t", b"v")], partition=40000)
    assert info.value.argument == "partition"
    p.close()
    assert [m.value for m in q.scan()] == [b"ok"]
    conn.close()


def test_a_gateway_that_goes_away_fails_calls_then_reconnects(
    start_gateway: Any, queue_name: str
) -> None:
    gw = start_gateway()
    Connection(gw.host, gw.port).create_queue(queue_name, 1, 3600)
    p = Producer(gw.host, gw.port, window=8, timeout=10)
    assert p.put_many(queue_name, [(b"t", b"before")], 0).result(timeout=30) == 1
    gw.kill()
    with pytest.raises(TransportError):  # refused now, or failed on the dead socket
        p.put_many(queue_name, [(b"t", b"during")], 0).result(timeout=30)
    with pytest.raises(TransportError, match="cannot connect"):
        p.put_many(queue_name, [(b"t", b"during")], 0)
    gw.start()
    assert p.put_many(queue_name, [(b"t", b"after")], 0).result(timeout=30) == 1
    p.close()
    with Connection(gw.host, gw.port) as c:
        assert [m.value for m in c.queue(queue_name).scan()] == [b"before", b"after"]


def test_arguments_are_checked_up_front() -> None:
    for kwargs, argument in (
        ({"window": 0}, "window"),
        ({"connections": 0}, "connections"),
        ({"batch_size": 0}, "batch_size"),
        ({"timeout": 0}, "timeout"),
    ):
        with pytest.raises(InvalidArgument) as info:
            Producer("127.0.0.1", 9, **kwargs)
        assert info.value.argument == argument
    p = Producer("127.0.0.1", 9)
    with pytest.raises(InvalidArgument) as info:
        p.put_many("", [(b"t", b"v")])
    assert info.value.argument == "queue"


def test_put_batches_go_out_after_linger_or_on_flush(start_gateway: Any, queue_name: str) -> None:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port, timeout=30)
    q = conn.create_queue(queue_name, partitions=2, ttl_seconds=3600)

    def stored(partition: int) -> list[bytes]:
        return [m.value for m in q.scan(partitions=partition)]

    lingering = Producer(gw.host, gw.port, batch_size=1000, linger=0.05)
    waiting = Producer(gw.host, gw.port, batch_size=1000, linger=0)
    for i in range(3):
        lingering.put(queue_name, "t", b"l%d" % i, partition=0)
        waiting.put(queue_name, "t", b"w%d" % i, partition=1)
    deadline = time.monotonic() + 20
    while stored(0) != [b"l0", b"l1", b"l2"]:  # sent by the linger thread, no flush
        assert time.monotonic() < deadline, "a lingering batch was never sent"
        time.sleep(0.05)
    assert lingering.pending() == 0
    assert stored(1) == [] and waiting.pending() == 3  # linger=0: only when full or flushed
    waiting.flush(timeout=30)
    assert stored(1) == [b"w0", b"w1", b"w2"]
    # order within a partition holds while the linger thread and full batches race
    racing = Producer(gw.host, gw.port, batch_size=7, linger=0.001, window=2)
    for i in range(500):
        racing.put(queue_name, "r", b"%d" % i, partition=0)
    racing.close(timeout=30)
    lingering.close(timeout=30)
    waiting.close(timeout=30)
    got = [m.value for m in q.scan(partitions=0, topics=["r"])]
    assert got == [b"%d" % i for i in range(500)]
    with pytest.raises(InvalidArgument) as info:
        Producer(gw.host, gw.port, linger=-1)
    assert info.value.argument == "linger"
    conn.close()


class _TwoOwners:
    """Stands in for the producer's router (the lead's Connection.owner): partition p is
    owned by gateways[p % 2]."""

    def __init__(self, gateways: list[Any]) -> None:
        self.gateways = gateways
        self.avoided: list[str] = []
        self.forgotten: list[bytes] = []

    def owner(self, queue: bytes, partition: int) -> Any:
        return self.gateways[partition % 2]

    def avoid(self, address: str) -> None:
        self.avoided.append(address)

    def forget_locations(self, queue: bytes) -> None:
        self.forgotten.append(queue)

    def close(self) -> None:
        pass


# two independent gateways with the same queue name: separate data dirs (over HBase two lone
# gateways cannot share a namespace; the cluster's real routing is in test_cluster.py)
@pytest.mark.parametrize("store", ["embedded"])
def test_partitions_go_to_their_owners(start_gateway: Any, queue_name: str) -> None:
    a, b = start_gateway(), start_gateway()
    conns = [Connection(g.host, g.port, timeout=30) for g in (a, b)]
    for c in conns:
        c.create_queue(queue_name, partitions=4, ttl_seconds=3600)
    p = Producer(a.host, a.port, window=2, batch_size=10, linger=0)
    router = p._router = _TwoOwners([a, b])  # type: ignore[assignment]
    for i in range(40):
        p.put(queue_name, "t", b"%d:%d" % (i % 4, i), partition=i % 4)
    assert p.put_many(queue_name, [(b"t", b"many")], partition=3).result(timeout=30) == 1
    p.flush(timeout=30)
    on_a = {m.partition for m in conns[0].queue(queue_name).scan()}
    on_b = {m.partition for m in conns[1].queue(queue_name).scan()}
    assert on_a == {0, 2} and on_b == {1, 3}  # each partition's puts went to its owner only
    assert [m.value for m in conns[1].queue(queue_name).scan(partitions=3)] == [
        b"3:%d" % i for i in range(3, 40, 4)
    ] + [b"many"]
    b.kill()  # the owner of partitions 1 and 3 goes away
    with pytest.raises(TransportError):
        p.put_many(queue_name, [(b"t", b"lost")], partition=1).result(timeout=30)
    assert router.avoided == [f"{b.host}:{b.port}"] and router.forgotten == [queue_name.encode()]
    assert p.put_many(queue_name, [(b"t", b"fine")], partition=0).result(timeout=30) == 1
    p.close(timeout=30)
    for c in conns:
        c.close()


def test_flush_returns_once_the_futures_it_waited_for_are_resolved(
    start_gateway: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A refused put() batch must reach flush() even when its future is resolved after its
    call left the window (the reader thread frees the slot first): flush() raised nothing
    once in CI when the answer beat the delivery."""
    gw = start_gateway()
    p = Producer(gw.host, gw.port, window=4, batch_size=10)
    deliver = p._deliver

    def slow(call: Any, error: Any) -> None:
        time.sleep(0.3)  # the window is empty by now; the future is not resolved yet
        deliver(call, error)

    monkeypatch.setattr(p, "_deliver", slow)
    for i in range(3):
        p.put("q_no_such_queue", "t", b"%d" % i)
    with pytest.raises(InvalidArgument):
        p.flush(timeout=30)
    p.close()
