"""The Python client without a gateway: argument checks, error mapping, the pool's rules."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import gevent
import pytest
from hqueue import (
    Connection,
    ConnectionPool,
    HQueueError,
    InvalidArgument,
    Message,
    MessageID,
    PoolTimeout,
    ServerError,
    TransportError,
)
from hqueue.protocol import hqueue_thrift
from thriftpy2.thrift import TApplicationException
from thriftpy2.transport import TTransportException


class FakeClient:
    """Stands in for the thriftpy2 client: records calls, raises what it is told to."""

    def __init__(self, raises: BaseException | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.raises = raises
        self.closed = False

    def __getattr__(self, name: str) -> Any:
        if name == "getQueueLocations":  # routing look-ups: one gateway serves everything
            return lambda *args: []

        def call(*args: Any) -> Any:
            self.calls.append((name, args))
            if self.raises is not None:
                raise self.raises
            return None

        return call

    def close(self) -> None:
        self.closed = True


def conn_with(fake: FakeClient) -> Connection:
    c = Connection("127.0.0.1", 1)
    c._client = fake
    return c


def test_invalid_argument_is_a_value_error_naming_the_argument() -> None:
    e = InvalidArgument.from_gateway("tMessages[3].topic: must be 1..255 bytes, got 0")
    assert isinstance(e, ValueError) and isinstance(e, HQueueError)
    assert e.argument == "tMessages[3].topic"
    assert e.message == "must be 1..255 bytes, got 0"
    assert str(e) == "tMessages[3].topic: must be 1..255 bytes, got 0"
    odd = InvalidArgument.from_gateway("no argument named here")
    assert (odd.argument, str(odd)) == ("", "no argument named here")
    assert issubclass(TransportError, ConnectionError)
    assert issubclass(PoolTimeout, TimeoutError)


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda c: c.queue(""), "name"),
        (lambda c: c.queue(3), "name"),
        (lambda c: c.queue("q").put(None, b"v"), "message.topic"),
        (lambda c: c.queue("q").put("t", 5), "message.value"),
        (lambda c: c.queue("q").put("t", b"v", partition=-1), "partition"),
        (lambda c: c.queue("q").put("t", b"v", partition=True), "partition"),
        (lambda c: c.queue("q").put_many([("t",)]), "messages[0]"),
        (lambda c: c.queue("q").put_many([("t", b"v"), ("t", 1)]), "messages[1].value"),
        (lambda c: c.queue("q").put_many([("t", b"v")], batch_size=0), "batch_size"),
        (lambda c: c.queue("q").scan(batch_size=0), "batch_size"),
        (lambda c: c.queue("q").scan(limit=-1), "limit"),
        (lambda c: c.queue("q").scan(topics="clicks"), "topics"),
        (lambda c: c.queue("q").scan(topics=[b"a", 2]), "topics[1]"),
        (lambda c: c.queue("q").scan(start=(1,)), "start"),
        (lambda c: c.queue("q").scan(stop=(1, 40000)), "stop.sequence"),
        (lambda c: c.queue("q").scan(partitions=[]), "partitions"),
        (lambda c: c.queue("q").scan(partitions=[0, -2]), "partitions[1]"),
        (lambda c: c.create_queue("q", 0, 60), "partitions"),
        (lambda c: c.create_queue("q", 1, 0), "ttl_seconds"),
    ],
)
def test_bad_arguments_are_refused_before_sending(make: Any, argument: str) -> None:
    fake = FakeClient()
    with pytest.raises(InvalidArgument) as info:
        make(conn_with(fake))
    assert info.value.argument == argument, str(info.value)
    assert fake.calls == []


def test_connection_arguments_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="port"):
        Connection("h", 0)
    with pytest.raises(InvalidArgument, match="timeout"):
        Connection("h", 9190, timeout=0)
    with pytest.raises(InvalidArgument, match="size"):
        ConnectionPool(0)


def test_connection_takes_host_port_as_one_address() -> None:
    """``Connection("h:p")`` as the toolkit and the subscriber take it, not host "h:p"."""
    c = Connection("127.0.0.1:39111")
    assert (c.host, c.port) == ("127.0.0.1", 39111)
    c = Connection("[::1]:9191")
    assert (c.host, c.port) == ("::1", 9191)
    c = Connection("gw.example")
    assert (c.host, c.port) == ("gw.example", 9190)
    c = Connection("::1", 9191)  # an IPv6 literal with the port given apart
    assert (c.host, c.port) == ("::1", 9191)
    with pytest.raises(InvalidArgument, match="host"):
        Connection("127.0.0.1:x")


def test_connection_takes_addresses_as_the_subscriber_does() -> None:
    """One argument: "host:port", (host, port), or several of them (a list, or comma-separated
    as the flags write them), parsed by hqueue_contract's parse_addresses."""
    assert Connection(("gw", 9191)).addresses == [("gw", 9191)]
    c = Connection(["a:1", ("b", 2)])
    assert c.addresses == [("a", 1), ("b", 2)] and (c.host, c.port) == ("a", 1)
    assert Connection("a:1, b:2").addresses == [("a", 1), ("b", 2)]
    for bad, argument in ((["a:1", ("b", 0)], "host[1]"), ([], "host"), (("b", "x"), "host")):
        with pytest.raises(InvalidArgument) as info:
            Connection(bad)  # type: ignore[arg-type]
        assert info.value.argument == "host" and argument in str(info.value)


def test_several_addresses_use_the_first_that_accepts() -> None:
    import socket

    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    refused = closed.getsockname()[1]
    closed.close()  # nothing listens there now
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        port = listening.getsockname()[1]
        c = Connection([("127.0.0.1", refused), f"127.0.0.1:{port}"], timeout=2)
        c.open()
        assert (c.host, c.port) == ("127.0.0.1", port) and c.is_open
        c.close()
        with pytest.raises(TransportError, match=f"any of 127.0.0.1:{refused}, 127.0.0.1:"):
            Connection([("127.0.0.1", refused), ("127.0.0.1", refused)], timeout=2).open()


def test_gateway_exceptions_map_to_python_ones() -> None:
    t = hqueue_thrift()
    q = conn_with(FakeClient(t.IllegalArgument(message="queueName: no queue named 'q'"))).queue("q")
    with pytest.raises(InvalidArgument) as ia:
        q.put("t", b"v")
    assert ia.value.argument == "queueName"

    c = conn_with(FakeClient(t.IOError(message="store: disk full")))
    with pytest.raises(ServerError, match="disk full"):
        c.queue("q").put("t", b"v")
    assert c.is_open  # an answer, even an error, leaves the connection usable

    c = conn_with(FakeClient(TApplicationException(TApplicationException.UNKNOWN_METHOD, "x")))
    with pytest.raises(ServerError):
        c.queues()
    assert c.is_open


@pytest.mark.parametrize(
    "exc",
    [TTransportException(TTransportException.END_OF_FILE, "TSocket read 0 bytes"),
     TimeoutError("timed out"), ConnectionResetError(104, "reset")],
)  # fmt: skip
def test_transport_failures_close_the_connection(exc: BaseException) -> None:
    fake = FakeClient(exc)
    c = conn_with(fake)
    with pytest.raises(TransportError) as info:
        c.queue("q").put("t", b"v")
    assert isinstance(info.value, ConnectionError)
    assert info.value.__cause__ is exc
    assert not c.is_open and fake.closed


def test_nothing_listening_is_a_transport_error() -> None:
    with pytest.raises(TransportError, match="cannot connect"):
        Connection("127.0.0.1", 1, timeout=2).queues()


def test_put_and_put_many_build_the_right_calls() -> None:
    fake = FakeClient()
    q = conn_with(fake).queue("q")
    q.put("topic", "välue")
    q.put(b"\xff", b"", partition=3)
    assert q.put_many([]) == 0
    assert q.put_many([("a", b"1"), Message(b"b", b"2", partition=1), ("c", b"3", 2)]) == 3
    assert q.put_many(((b"t", b"%d" % i) for i in range(5)), partition=4, batch_size=2) == 5
    names = [name for name, _ in fake.calls]
    assert names == ["putMessage", "putMessageWithPid", "putMessages"] + ["putMessagesWithPid"] * 3
    m = fake.calls[0][1][1]
    assert (m.topic, m.value, m.partitionID) == (b"topic", "välue".encode(), None)
    assert fake.calls[1][1][1:2] == (3,)
    assert [m.partitionID for m in fake.calls[2][1][1]] == [None, 1, 2]
    assert [len(args[2]) for _, args in fake.calls[3:]] == [2, 2, 1]


def test_message_ids_order_like_the_queue() -> None:
    assert MessageID(5, 2) < MessageID(6, 0) < MessageID(6, 1)


# -- the pool -------------------------------------------------------------------------------


def test_pool_hands_the_same_connection_to_a_nested_caller() -> None:
    pool = ConnectionPool(1, "127.0.0.1", 1)
    with pool.connection() as a, pool.connection() as b:
        assert a is b
    with pool.connection() as c:
        assert c is a  # given back, reused


def test_pool_times_out_when_all_connections_are_out() -> None:
    pool = ConnectionPool(1, "127.0.0.1", 1)
    got = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with pool.connection():
            got.set()
            release.wait(10)

    th = threading.Thread(target=holder)
    th.start()
    assert got.wait(10)
    started = time.monotonic()
    with pytest.raises(PoolTimeout), pool.connection(timeout=0.2):
        pass
    assert time.monotonic() - started >= 0.19
    release.set()
    th.join(10)
    with pool.connection(timeout=1):
        pass


def test_pool_replaces_a_connection_after_a_transport_error() -> None:
    pool = ConnectionPool(2, "127.0.0.1", 1)
    with pytest.raises(TransportError), pool.connection() as first:
        first.queues()  # nothing listens on port 1
    with pool.connection() as second:
        assert second is not first


def test_pool_under_threads_never_shares_a_connection() -> None:
    pool = ConnectionPool(3, "127.0.0.1", 1)
    in_use: set[int] = set()
    seen: set[int] = set()
    lock = threading.Lock()
    errors: list[str] = []

    def worker() -> None:
        for _ in range(50):
            with pool.connection(timeout=10) as c:
                with lock:
                    if id(c) in in_use:
                        errors.append("shared")
                    in_use.add(id(c))
                    seen.add(id(c))
                    if len(in_use) > 3:
                        errors.append("more than size")
                time.sleep(0.0005)
                with lock:
                    in_use.discard(id(c))

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    assert errors == []
    assert len(seen) <= 3


def test_pool_under_greenlets_without_monkey_patching() -> None:
    """A threading semaphore would block the loop here: the holder could never give back."""
    pool = ConnectionPool(2, "127.0.0.1", 1)
    in_use: set[int] = set()
    peak = 0
    seen: set[int] = set()

    def worker() -> None:
        nonlocal peak
        for _ in range(20):
            with pool.connection(timeout=10) as c:
                assert id(c) not in in_use
                in_use.add(id(c))
                seen.add(id(c))
                peak = max(peak, len(in_use))
                gevent.sleep(0.0005)
                in_use.discard(id(c))

    gevent.joinall([gevent.spawn(worker) for _ in range(6)], timeout=30, raise_error=True)
    assert peak == 2 and len(seen) == 2


def test_batch_sends_full_batches_then_the_rest_on_exit() -> None:
    fake = FakeClient()
    q = conn_with(fake).queue("q")
    with q.batch(batch_size=3, partition=2) as b:
        for i in range(7):
            b.put("t", b"%d" % i)
        assert len(b) == 1 and b.sent == 6
    assert b.sent == 7
    sizes = [(name, len(args[2])) for name, args in fake.calls]
    assert sizes == [("putMessagesWithPid", n) for n in (3, 3, 1)]


def test_batch_drops_the_unsent_rest_on_an_exception() -> None:
    fake = FakeClient()
    q = conn_with(fake).queue("q")
    with pytest.raises(KeyError), q.batch(batch_size=2) as b:
        b.put("t", b"1")
        b.put("t", b"2", partition=1)
        b.put("t", b"3")
        raise KeyError("stop")
    assert [name for name, _ in fake.calls] == ["putMessages"]
    assert [m.partitionID for m in fake.calls[0][1][1]] == [None, 1]
    with pytest.raises(InvalidArgument, match="batch_size"):
        q.batch(batch_size=0)


def test_an_interrupted_call_drops_the_connection() -> None:
    fake = FakeClient(gevent.Timeout(0.1))
    c = conn_with(fake)
    with pytest.raises(gevent.Timeout):
        c.queues()
    assert not c.is_open and fake.closed  # its answer would be taken for the next call's


def test_put_lists_without_the_fast_path_builds_the_same_calls() -> None:
    fake = FakeClient()  # no socket under it: thriftpy2's generic path
    q = conn_with(fake).queue("q")
    assert q.put_lists("t", [b"1", "2"], partition=2) == 2
    assert q.put_lists([b"a", b"b", b"c"], [b"1", b"2", b"3"], batch_size=2) == 3
    names = [name for name, _ in fake.calls]
    assert names == ["putMessagesWithPid", "putMessages", "putMessages"]
    assert [(m.topic, m.value) for m in fake.calls[0][1][2]] == [(b"t", b"1"), (b"t", b"2")]
    assert [m.topic for m in fake.calls[2][1][1]] == [b"c"]
    with pytest.raises(InvalidArgument) as info:
        q.put_lists("t", b"not a list")
    assert info.value.argument == "values"
    with pytest.raises(InvalidArgument) as info:
        q.put_lists([b"a"], [b"1", b"2"])
    assert info.value.argument == "topics"
    with pytest.raises(InvalidArgument) as info:
        q.put_lists("t", [b"1", 2])
    assert info.value.argument == "values[1]"  # as on the fast path


def test_importing_the_client_leaves_asyncio_out() -> None:
    # thriftpy2.rpc imports its asyncio server: 35-40 ms of every `import hqueue` (a CLI
    # command's start, a worker process's) when hqueue.protocol imported it at the top
    code = "import sys, hqueue; print(sorted({'asyncio', 'thriftpy2.rpc'} & set(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "[]"
