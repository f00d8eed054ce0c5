"""Consumers in the gateway cluster (issue 13): real HBase, real ZooKeeper, gateway processes.

A consumer group over two gateways (push members registered through a gateway and in ZooKeeper
with ``--shared``), a pull member pulling only through a gateway that owns half of its
partitions, keyed puts and ``putMessagesReturningIds`` sent to a gateway that does not own the
partition, and a pull member whose gateway is killed (kill -9) switching to the other one
without losing a message.

The tests of this module share two gateways (each test has its own queue); the kill -9 test
runs last and ends one of them.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hqueue
import pytest
from hqueue.errors import ServerError, TransportError
from hqueue.protocol import hqueue_thrift

from tests.conftest import GatewayProcess, attach_logs, free_port, wait_until
from tests.integration.conftest import SubscriberFactory, ZooKeeperServer, read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

SESSION = 2.0  # ZooKeeper session timeout of the gateways, seconds
ACK_TIMEOUT = 2  # seconds before pulled, unacknowledged messages go out again


class Pair:
    """Two gateways over one HBase namespace and one ZooKeeper chroot."""

    def __init__(self, tmp: Path, store: str, zookeeper: str) -> None:
        self.tmp, self.store, self.zookeeper = tmp, store, zookeeper
        self.gateways: list[GatewayProcess] = []

    def add(self) -> GatewayProcess:
        port = free_port()
        gw = GatewayProcess(
            self.tmp / f"data{port}",
            self.tmp / f"gateway{port}.log",
            "--zookeeper", self.zookeeper,
            "--zookeeper-session-timeout", str(SESSION),
            "--advertise", f"127.0.0.1:{port}",
            "--ack-timeout", str(ACK_TIMEOUT),
            port=port,
            store=self.store,
        )  # fmt: skip
        self.gateways.append(gw)
        return gw

    @property
    def a(self) -> GatewayProcess:
        return self.gateways[0]

    @property
    def b(self) -> GatewayProcess:
        return self.gateways[1]

    def logs(self) -> str:
        return "\n".join(f"--- {gw.log_path} ---\n{gw.log()}" for gw in self.gateways)

    def create_balanced(self, queue: str, partitions: int) -> list[str]:
        """Creates the queue; the owner of each partition once both gateways own half."""
        c = self.a.client()
        try:
            c.createQueue(queue.encode(), partitions, 3600, {})

            def owners() -> list[str]:
                return [x.decode() for x in c.getQueueLocations(queue.encode())]

            live = {self.a.address, self.b.address}
            wait_until(
                lambda: (
                    set(owners()) == live
                    and max(owners().count(x) for x in live) == partitions // 2
                ),
                30,
                what=f"{queue} balanced over both gateways",
            )
            # and each owner serves its partitions (claimed, not only assigned)
            for p, owner in enumerate(owners()):
                gw = self.a if owner == self.a.address else self.b
                direct = gw.client()
                try:
                    wait_until(
                        lambda p=p, direct=direct: _put_one(direct, queue, p),
                        15,
                        what=f"{queue}/{p} writable at its owner",
                    )
                finally:
                    direct.close()
            return owners()
        finally:
            c.close()


def _put_one(client: Any, queue: str, partition: int) -> bool:
    T = hqueue_thrift()
    try:
        client.forwardMessages(queue.encode(), partition, [T.TMessage(topic=b"w", value=b"")])
        return True
    except T.IOError:
        return False


@pytest.fixture(scope="module")
def module_pair(
    tmp_path_factory: Any, hbase_url: str, zookeeper_server: ZooKeeperServer
) -> Iterator[Pair]:
    namespace = f"cc_{uuid.uuid4().hex[:10]}"
    store = f"{hbase_url}{'&' if '?' in hbase_url else '?'}namespace={namespace}"
    zk = f"{zookeeper_server.address}/cc_{uuid.uuid4().hex[:10]}"
    pair = Pair(tmp_path_factory.mktemp("cluster-consumers"), store, zk)
    first, second = pair.add(), pair.add()
    first.start(timeout=60)
    second.start(timeout=60)
    yield pair
    for gw in pair.gateways:
        gw.kill()


@pytest.fixture
def pair(request: Any, module_pair: Pair) -> Pair:
    attach_logs(request, "cluster gateway logs", module_pair)
    return module_pair


def _connection(gw: GatewayProcess) -> hqueue.Connection:
    return hqueue.Connection(gw.host, gw.port, timeout=15)


def _put_routed(conn: hqueue.Connection, queue: str, partition: int, values: list[str]) -> None:
    """Through the client's routing, retrying while the partition has no owner (a failover)."""
    q = conn.queue(queue)
    deadline = time.monotonic() + 20
    while True:
        try:
            q.put_many([("t", v) for v in values], partition=partition)
            return
        except (ServerError, TransportError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_push_group_over_two_gateways(
    pair: Pair, start_subscriber: SubscriberFactory, tmp_path: Path
) -> None:
    queue = f"push_{uuid.uuid4().hex[:8]}"
    owners = pair.create_balanced(queue, 4)
    outs = [tmp_path / "through-gateway.jsonl", tmp_path / "in-zookeeper.jsonl"]
    # one member leases its membership through gateway A, the other is its own ephemeral
    # znode in ZooKeeper (--shared with --zookeeper)
    start_subscriber(pair.a, queue, "grp", "--shared", "--lease", "3",
                     "--listener", f"jsonl:{outs[0]}")  # fmt: skip
    start_subscriber(pair.b, queue, "grp", "--shared", "--zookeeper", pair.zookeeper,
                     "--session-timeout", "4", "--listener", f"jsonl:{outs[1]}")  # fmt: skip
    c = pair.b.client()

    def members() -> list[list[int]]:
        (info,) = c.listSubscribers(queue.encode())
        return sorted(sorted(m.partitions) for m in info.members or [])

    wait_until(lambda: members() == [[0, 2], [1, 3]], 15, what="two members")
    # (the ZooKeeper member changes no record: the gateways learn of it from their watch on
    # the group's members/, or deliver everything to the first member until their re-read)
    sent: list[str] = []
    with _connection(pair.a) as conn:
        for p in range(4):
            values = [f"{p}-{j}" for j in range(25)]
            _put_routed(conn, queue, p, values)
            sent += values

    def got(i: int) -> list[tuple[int, str]]:
        if not outs[i].exists():
            return []
        return [(r["partition"], r["value"]) for r in read_jsonl(outs[i])]

    wait_until(lambda: {v for i in (0, 1) for _, v in got(i)} >= set(sent), 20,
               what="every message at one of the members")  # fmt: skip
    parts = [{p for p, _ in got(i)} for i in (0, 1)]
    # each member got two partitions, one from each gateway, and no partition went to both
    assert sorted(sorted(x) for x in parts) == [[0, 2], [1, 3]]
    for mine in parts:
        assert {owners[p] for p in mine} == {pair.a.address, pair.b.address}
    c.close()


def test_pull_through_a_gateway_that_owns_half_the_partitions(pair: Pair) -> None:
    queue = f"pull_{uuid.uuid4().hex[:8]}"
    owners = pair.create_balanced(queue, 4)
    assert owners.count(pair.b.address) == 2  # half of the member's partitions are B's
    with _connection(pair.a) as consumer, _connection(pair.b) as producer:
        q = consumer.queue(queue)
        # the member joins through A; B learns of it from its watch on the group's members
        assert q.pull("grp", "m1", 10, 0) == []
        joined = time.monotonic()
        sent = []
        for p in range(4):
            values = [f"{p}-{j}" for j in range(30)]
            _put_routed(producer, queue, p, values)
            sent += values
        got: list[Any] = []
        first_from_b = None
        deadline = time.monotonic() + 20
        while len({m.value for m in got}) < len(sent) and time.monotonic() < deadline:
            batch = q.pull("grp", "m1", 7, 1000)  # small pulls: answers of both owners meet
            if first_from_b is None and any(owners[m.partition] == pair.b.address for m in batch):
                first_from_b = time.monotonic() - joined
            got += batch
            q.ack("grp", "m1", batch)
        assert sorted({m.value.decode() for m in got}) == sorted(sent)
        assert first_from_b is not None and first_from_b < 3.5, first_from_b
        # in order per partition, and no message twice (every ack reached its owner in time)
        for p in range(4):
            values = [m.value.decode() for m in got if m.partition == p]
            assert values == [f"{p}-{j}" for j in range(30)]
        time.sleep(ACK_TIMEOUT + 1)
        assert q.pull("grp", "m1", 100, 300) == []  # acked at the owners: nothing comes again
        info = next(s for s in pair.b.client().listSubscribers(queue.encode()) if s.name == b"grp")
        last = {m.partition: m.id for m in got}
        for part in info.partitions:
            assert (part.checkpoint.timestamp, part.checkpoint.sequenceID) == tuple(
                last[part.partitionID]
            )


def test_keyed_puts_and_returning_ids_through_a_non_owner(pair: Pair) -> None:
    T = hqueue_thrift()
    queue = f"keys_{uuid.uuid4().hex[:8]}"
    owners = pair.create_balanced(queue, 2)
    far = owners.index(pair.b.address)  # a partition A does not own
    a = pair.a.client()
    messages = [
        T.TMessage(topic=b"t", value=f"v{i}".encode(), key=f"k{i % 3}".encode(),
                   properties={"n": str(i).encode()})
        for i in range(6)
    ]  # fmt: skip
    ids = a.putMessagesReturningIds(queue.encode(), far, messages)
    assert len(ids) == 6
    assert [(i.timestamp, i.sequenceID) for i in ids] == sorted(
        {(i.timestamp, i.sequenceID) for i in ids}
    )
    # ids without keys too, and keyed puts over the ordinary methods
    (plain,) = a.putMessagesReturningIds(queue.encode(), far, [T.TMessage(topic=b"t", value=b"p")])
    assert (plain.timestamp, plain.sequenceID) > (ids[-1].timestamp, ids[-1].sequenceID)
    a.putMessagesWithPid(queue.encode(), far, [T.TMessage(topic=b"t", value=b"w", key=b"kw")])
    b = pair.b.client()
    sid = b.messageScannerOpen(queue.encode(), far, T.TMessageScan(caching=100))
    stored = [m for m in b.messageScannerGetList(sid, 100) if m.topic == b"t"]
    assert [m.value for m in stored] == [b"v0", b"v1", b"v2", b"v3", b"v4", b"v5", b"p", b"w"]
    assert [(m.id.timestamp, m.id.sequenceID) for m in stored[:6]] == [
        (i.timestamp, i.sequenceID) for i in ids
    ]
    assert [m.key for m in stored] == [b"k0", b"k1", b"k2", b"k0", b"k1", b"k2", None, b"kw"]
    assert stored[4].properties == {"n": b"4"}
    found = b.findMessagesByKey(queue.encode(), b"k1", 10)
    assert sorted(m.value for m in found) == [b"v1", b"v4"]
    a.close()
    b.close()


def test_pull_member_survives_kill9_of_its_gateway(pair: Pair) -> None:
    """Runs last: gateway A is killed. The member pulled through A goes on through B."""
    queue = f"kill_{uuid.uuid4().hex[:8]}"
    pair.create_balanced(queue, 4)
    received: list[str] = []
    errors: list[str] = []
    stop = threading.Event()

    def consume() -> None:
        with _connection(pair.a) as conn:  # knows B from the queue's locations only
            q = conn.queue(queue)
            while not stop.is_set():
                try:
                    batch = q.pull("grp", "w", 50, 500)
                    received.extend(m.value.decode() for m in batch)
                    if batch:
                        q.ack("grp", "w", batch)
                except (ServerError, TransportError) as exc:
                    errors.append(str(exc))
                    time.sleep(0.2)

    consumer = threading.Thread(target=consume, daemon=True)
    with _connection(pair.a) as conn:
        conn.queue(queue).pull("grp", "w", 1, 0)  # joins: the group reads from now on
    consumer.start()
    sent: list[str] = []
    with _connection(pair.b) as producer:
        for p in range(4):
            values = [f"before-{p}-{j}" for j in range(20)]
            _put_routed(producer, queue, p, values)
            sent += values
        wait_until(lambda: len(set(received)) >= len(sent) // 2, 15, what="some pulled")
        pair.a.kill()  # kill -9, in the middle of the member's long polls
        killed = time.monotonic()
        for p in range(4):
            values = [f"after-{p}-{j}" for j in range(20)]
            _put_routed(producer, queue, p, values)
            sent += values
        try:
            wait_until(lambda: set(received) >= set(sent), 25, what="every message")
        finally:
            stop.set()
            consumer.join(10)
    took = time.monotonic() - killed
    assert set(received) >= set(sent)  # at-least-once: duplicates allowed, no loss
    assert took < 20, took
