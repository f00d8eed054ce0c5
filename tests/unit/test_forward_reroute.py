"""A put forwarded to an owner that did not take it unwritten is routed again, once.

The cluster here is a stand-in (its routing is the unit under test's input); the real
handover under a rolling restart is tests/integration/test_cluster.py's.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from typing import Any

import pytest
from hqueue.protocol import hqueue_thrift

from gateway.cluster.forward import Forwarder, _io_error
from gateway.errors import NotOwner, StoreError, Unwritten
from gateway.scanners import ScannerRegistry
from gateway.service import GatewayService
from gateway.store.memory import MemoryStore

T = hqueue_thrift()


class Cluster:
    """Routes partition 0 to ``routes`` in turn (None: write here); ``moved`` is what
    wait_moved answers."""

    def __init__(self, routes: list[str | None], moved: bool = True) -> None:
        self.routes = routes
        self.moved = moved
        self.waited: list[str | None] = []
        self.last: str | None = None

    def route(self, queue: str, partition: int, *, forwarded: bool) -> str | None:
        assert not forwarded
        self.last = self.routes.pop(0)
        return self.last

    def assigned_owner(self, queue: str, partition: int) -> str | None:
        return f"gid-of-{self.last}"

    def wait_moved(self, queue: str, partition: int, gone: str | None) -> bool:
        self.waited.append(gone)
        return self.moved

    @contextlib.contextmanager
    def writing(self, queue: str, partition: int) -> Iterator[None]:
        yield

    def check_id(self, timestamp_ms: int) -> None:
        pass

    def count_put(self, queue: str, partition: int, n: int) -> None:
        pass


class Hops:
    """The forwarder: fails the first sends with ``errors`` (in turn), then takes them."""

    def __init__(self, errors: list[Exception]) -> None:
        self.errors = errors
        self.sent: list[str] = []

    def forward(self, address: str, queue: str, partition: int, topics: Any, values: Any) -> None:
        self.sent.append(address)
        if self.errors:
            raise self.errors.pop(0)


def service(cluster: Cluster, hops: Hops) -> tuple[GatewayService, MemoryStore]:
    store = MemoryStore()
    svc = GatewayService(store, ScannerRegistry(), T, advertise="127.0.0.1:1")
    svc.createQueue(b"q", 1, 3600, {})
    svc.cluster = cluster  # type: ignore[assignment]
    svc.forwarder = hops  # type: ignore[assignment]
    return svc, store


def stored(store: MemoryStore) -> list[bytes]:
    meta = store.get_queue("q")
    assert meta is not None
    reader = store.reader(meta, 0, None, None, reverse=False, topics=None)
    return [r[3] for r in reader.read(10).rows]


def put(svc: GatewayService, value: bytes) -> None:
    svc.putMessagesWithPid(b"q", 0, [T.TMessage(topic=b"t", value=value)])


def test_an_owner_that_left_is_routed_past_to_the_next_one() -> None:
    cluster = Cluster(["a:1", "b:2"])
    hops = Hops([Unwritten("connection refused")])
    svc, _ = service(cluster, hops)
    put(svc, b"v")
    assert hops.sent == ["a:1", "b:2"]
    assert cluster.waited == ["gid-of-a:1"]


def test_a_partition_that_moved_here_is_written_here() -> None:
    cluster = Cluster(["a:1", None])
    svc, store = service(cluster, Hops([NotOwner(f"{NotOwner.MARK} 0 of 'q' (it moved)")]))
    put(svc, b"v")
    assert stored(store) == [b"v"]


def test_a_failure_after_sending_is_not_sent_again() -> None:
    """The owner may have written it: sending it again could duplicate it."""
    cluster = Cluster(["a:1", "b:2"])
    hops = Hops([StoreError("owner a:1: the store timed out")])
    svc, _ = service(cluster, hops)
    with pytest.raises(StoreError, match="timed out"):
        put(svc, b"v")
    assert hops.sent == ["a:1"]
    assert cluster.waited == []


def test_a_view_that_never_moves_fails_the_put_and_it_is_routed_again_only_once() -> None:
    svc, _ = service(Cluster(["a:1"], moved=False), Hops([Unwritten("refused")]))
    with pytest.raises(Unwritten, match="refused"):
        put(svc, b"v")
    cluster = Cluster(["a:1", "b:2"])
    hops = Hops([Unwritten("refused"), Unwritten("refused again")])
    svc, _ = service(cluster, hops)
    with pytest.raises(Unwritten, match="refused again"):
        put(svc, b"v")
    assert hops.sent == ["a:1", "b:2"]


def test_the_forwarder_tells_unwritten_refusals_from_other_io_errors() -> None:
    assert isinstance(_io_error("owner a:1", f"{NotOwner.MARK} 3 of 'q' (it moved)"), NotOwner)
    other = _io_error("owner a:1", "HBase: region server not serving")
    assert type(other) is StoreError
    with socket.socket() as s:  # a port nobody listens on: refused before anything is sent
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    forwarder = Forwarder(T, framed=False, compact=False, timeout=2.0)
    with pytest.raises(Unwritten, match=f"127.0.0.1:{port}"):
        forwarder.forward(f"127.0.0.1:{port}", "q", 0, [b"t"], [b"v"])
