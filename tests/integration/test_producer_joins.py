"""hqueue.Producer joins the puts that wait for room in its window into one call per queue and
partition: against a real gateway paused (SIGSTOP), killed (-9) and refusing a put.
The full-disk story is in test_disk_full.py."""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any

import pytest
from hqueue import Connection, InvalidArgument, Producer, TransportError

from tests.integration.conftest import frozen


@pytest.fixture
def store() -> str:
    return "embedded"  # joining is the client's; any store answers the same


@pytest.fixture
def setup(start_gateway: Any, queue_name: str) -> Iterator[tuple[Any, Any]]:
    gw = start_gateway()
    conn = Connection(gw.host, gw.port, timeout=30)
    q = conn.create_queue(queue_name, partitions=3, ttl_seconds=3600)
    yield gw, q
    conn.close()


def values(q: Any, partition: int) -> list[bytes]:
    return [m.value for m in q.scan(partitions=partition)]


def warmed(gw: Any, queue: str, partitions: int, **kwargs: Any) -> Producer:
    """A producer (linger 0, timeout 30 s, ``kwargs``) that put a message to each of the
    first ``partitions``, so that it knows their owners before the gateway is paused (looking
    them up would wait for it)."""
    p = Producer(gw.host, gw.port, **{"timeout": 30, "linger": 0, **kwargs})
    for pid in range(partitions):
        assert p.put_many(queue, [(b"t", b"warm")], pid).result(timeout=30) == 1
    return p


def test_puts_waiting_on_a_paused_gateway_go_as_one_call_per_partition(
    setup: tuple[Any, Any], queue_name: str
) -> None:
    gw, q = setup
    p = warmed(gw, queue_name, 3, window=2)
    sent = p.calls
    futures: list[Future[int]] = []
    with frozen(gw.proc):
        for i in range(40):  # 2 go out, the rest wait in line: one call for each partition
            pairs = [(b"t", b"%d:%d" % (i, k)) for k in range(10)]
            futures.append(p.put_many(queue_name, pairs, partition=i % 2))
        # the line holds a call for each of partitions 0 and 1 (window=2): a put to
        # partition 2 waits for room, as puts waited for a slot before there was a line
        third = threading.Thread(target=lambda: futures.append(
            p.put_many(queue_name, [(b"t", b"third")], partition=2)))  # fmt: skip
        third.start()
        third.join(1.0)
        assert third.is_alive()
    third.join(30)
    assert [f.result(timeout=30) for f in futures] == [10] * 40 + [1]
    assert p.calls - sent == 5
    for pid in (0, 1):  # each partition's messages in the order they were put
        expected = [b"%d:%d" % (i, k) for i in range(pid, 40, 2) for k in range(10)]
        assert values(q, pid) == [b"warm", *expected]
    assert values(q, 2) == [b"warm", b"third"]
    p.close(timeout=30)


def test_joined_calls_stay_within_max_call_messages(
    setup: tuple[Any, Any], queue_name: str
) -> None:
    gw, q = setup
    p = warmed(gw, queue_name, 1, window=2, max_call_messages=30)
    sent = p.calls
    with frozen(gw.proc):  # two in flight, then two calls of 30 messages (three puts each)
        futures = [p.put_many(queue_name, [(b"t", b"%d" % i)] * 10, 0) for i in range(8)]
    assert [f.result(timeout=30) for f in futures] == [10] * 8
    assert p.calls - sent == 4
    assert values(q, 0) == [b"warm"] + [b"%d" % i for i in range(8) for _ in range(10)]
    with pytest.raises(InvalidArgument) as info:
        Producer(gw.host, gw.port, max_call_bytes=0)
    assert info.value.argument == "max_call_bytes"
    p.close(timeout=30)


def test_a_refused_joined_call_names_the_put_at_fault(
    setup: tuple[Any, Any], queue_name: str
) -> None:
    gw, q = setup
    p = warmed(gw, queue_name, 1, window=1)
    with frozen(gw.proc):
        first = p.put_many(queue_name, [(b"t", b"first")], 0)
        good = p.put_many(queue_name, [(b"t", b"a1"), (b"t", b"a2")], 0)
        bad = p.put_many(queue_name, [(b"t", b"b1"), (b"", b"b2")], 0)  # empty topic
        after = p.put_many(queue_name, [(b"t", b"c1")], 0)
    assert first.result(timeout=30) == 1
    with pytest.raises(InvalidArgument) as info:
        bad.result(timeout=30)
    assert info.value.argument == "tMessages[1].topic"  # of its own messages, not the call's
    for innocent in (good, after):
        with pytest.raises(InvalidArgument, match=r"not stored.*tMessages\[3\]\.topic"):
            innocent.result(timeout=30)
    assert values(q, 0) == [b"warm", b"first"]  # the refused call stored nothing
    assert p.put_many(queue_name, [(b"t", b"a1"), (b"t", b"a2")], 0).result(timeout=30) == 2
    assert values(q, 0) == [b"warm", b"first", b"a1", b"a2"]
    p.close(timeout=30)


def test_a_gateway_killed_while_calls_wait_fails_them_as_not_sent(
    setup: tuple[Any, Any], queue_name: str
) -> None:
    gw, _ = setup
    delivered: list[tuple[int, BaseException | None]] = []
    p = warmed(gw, queue_name, 1, window=1, on_delivery=lambda n, e: delivered.append((n, e)))
    gw.proc.send_signal(signal.SIGSTOP)  # not resumed: killed below
    in_flight = p.put_many(queue_name, [(b"t", b"x")], 0)
    waiting = [p.put_many(queue_name, [(b"t", b"y")] * 5, 0) for _ in range(3)]
    gw.kill()  # SIGKILL ends a stopped process too
    with pytest.raises(TransportError):  # sent: it may or may not have been stored
        in_flight.result(timeout=30)
    for f in waiting:
        with pytest.raises(TransportError, match=r"^not sent"):
            f.result(timeout=30)
    assert sorted(n for n, e in delivered[1:]) == [1, 5, 5, 5]
    assert all(isinstance(e, TransportError) for _, e in delivered[1:])
    gw.start()
    assert p.put_many(queue_name, [(b"t", b"again")], 0).result(timeout=30) == 1
    p.close(timeout=30)
