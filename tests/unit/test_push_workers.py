"""Push workers in-process: WorkerManager reconciling runs with the registry, and LeaseTable.

The registry is the embedded one over a memory store (already in-memory: every record and
liveness change is real), the sender a fake that acknowledges what it takes from the buffer
(its wire side is tested through processes). Waits poll, with a deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import gevent
import pytest
from hqueue_contract.registry import SubscriberRecord

from gateway import rowkey
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.store.base import PutBatch, QueueMeta, Row
from gateway.store.memory import MemoryStore
from gateway.subscriptions import registry as registry_module
from gateway.subscriptions import workers
from gateway.subscriptions.embedded_registry import EmbeddedRegistry
from gateway.subscriptions.registry import LeaseTable
from gateway.subscriptions.scanner import Id, MessageBuffer
from gateway.subscriptions.sender import SenderOptions

T0 = wall_clock_ms() - 60_000


class FakeSender:
    """Takes batches from the worker's buffer and acknowledges them at once."""

    def __init__(
        self,
        address: str,
        queue: str,
        name: str,
        partition: int,
        buffer: MessageBuffer,
        acked: Id | None,
        options: SenderOptions,
    ) -> None:
        self.address = address
        self.queue, self.name, self.partition = queue, name, partition
        self.buffer = buffer
        self.started_at = acked
        self.acked = acked
        self.options = options
        self.delivered: list[Row] = []
        self.running = False

    def run(self) -> None:
        self.running = True
        try:
            while True:
                rows = self.buffer.take(self.options.batch_messages, self.options.batch_bytes)
                self.delivered += rows
                self.acked = (rows[-1][0], rows[-1][1])
        finally:
            self.running = False


def wait_for(predicate: Callable[[], Any], timeout: float = 5.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        gevent.sleep(0.01)  # lets the manager's greenlets run
    raise AssertionError(f"timed out waiting for {what or predicate}")


class Setup:
    def __init__(self, senders: list[FakeSender], checkpoint_interval: float) -> None:
        self.store = MemoryStore()
        self.meta = self.store.create_queue(QueueMeta("q", 3, 3600))
        self.registry = EmbeddedRegistry(self.store)
        options = workers.PushOptions(
            buffer_messages=50,
            sender=SenderOptions(batch_messages=7),
            checkpoint_interval=checkpoint_interval,
            resync_interval=0.3,
        )
        self.manager = workers.WorkerManager(self.store, self.registry, options)
        self.senders = senders

    def put(self, partition: int, ts: int, count: int) -> list[tuple[int, int]]:
        keys = rowkey.consecutive_keys(partition, ts, 0, count)
        self.store.put(
            self.meta, [PutBatch(partition, MessageId(ts, 0), [b"t"] * count, [b"v"] * count)]
        )
        self.manager.notify_put("q", [partition])
        return [rowkey.decode(k)[1:] for k in keys]

    def subscribe(
        self, name: str, partitions: dict[int, Id | None], address: str = "127.0.0.1:1"
    ) -> str:
        record = SubscriberRecord(sorted(partitions), dict(partitions))
        self.registry.update_record("q", name, lambda old: record)
        return self.registry.set_live("q", name, address, None)

    def sender(self, name: str, partition: int) -> FakeSender:
        """The newest running sender of (name, partition)."""
        found = [s for s in self.senders if (s.name, s.partition) == (name, partition)]
        assert found, f"no sender for {name}/{partition}"
        return found[-1]

    def delivered(self, name: str, partition: int) -> list[tuple[int, int]]:
        out: list[tuple[int, int]] = []
        for s in self.senders:
            if (s.name, s.partition) == (name, partition):
                out += [(r[0], r[1]) for r in s.delivered]
        return out

    def checkpoint(self, name: str, partition: int) -> Id | None:
        sub = self.registry.get("q", name)
        assert sub is not None
        return sub.record.checkpoints.get(partition)


@pytest.fixture
def setup(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """Checkpoints are written every 50 ms, or (``@pytest.mark.parametrize("setup", [60.0],
    indirect=True)``) only when a run stops."""
    senders: list[FakeSender] = []

    def make(*args: Any, **kwargs: Any) -> FakeSender:  # retry policy etc.: not modelled
        sender = FakeSender(*args)
        senders.append(sender)
        return sender

    monkeypatch.setattr(workers, "MessageSender", make)
    s = Setup(senders, getattr(request, "param", 0.05))
    s.manager.start()
    try:
        yield s
    finally:
        s.manager.stop()


def test_a_live_subscriber_gets_a_worker_per_partition_and_its_checkpoints(setup: Setup) -> None:
    s = setup
    old = s.put(0, T0, 3)
    s.subscribe("s", {0: old[0], 1: None, 7: None})  # partition 7 does not exist: ignored
    run = wait_for(lambda: s.manager.runs().get(("q", "s")), what="a run")
    assert sorted(run.workers) == [0, 1]
    wait_for(lambda: s.delivered("s", 0) == old[1:], what="the rows after the checkpoint")
    new = s.put(0, T0 + 10, 20) + s.put(1, T0 + 11, 2)
    wait_for(lambda: s.delivered("s", 0) == old[1:] + new[:20], what="new rows, in order")
    wait_for(lambda: s.delivered("s", 1) == new[20:], what="partition 1")
    wait_for(lambda: s.checkpoint("s", 0) == new[19], what="checkpoint of partition 0")
    wait_for(lambda: s.checkpoint("s", 1) == new[21], what="checkpoint of partition 1")
    assert s.checkpoint("s", 7) is None


@pytest.mark.parametrize("setup", [60.0], indirect=True)
def test_a_subscriber_that_goes_away_pauses_and_resumes_from_its_checkpoint(
    setup: Setup,
) -> None:
    s = setup
    first = s.put(2, T0, 5)
    incarnation = s.subscribe("s", {2: None})
    wait_for(lambda: s.delivered("s", 2) == first, what="first rows")
    assert s.checkpoint("s", 2) is None  # not written yet
    s.registry.clear_live("q", "s", incarnation)
    wait_for(lambda: not s.manager.runs(), what="the run to stop")
    assert s.checkpoint("s", 2) == first[-1]  # the last write on stopping
    assert not s.sender("s", 2).running
    later = s.put(2, T0 + 10, 3)
    gevent.sleep(0.1)
    assert s.delivered("s", 2) == first  # nothing is pushed while it is away
    s.registry.set_live("q", "s", "127.0.0.1:2", None)
    wait_for(lambda: s.delivered("s", 2) == first + later, what="the rest after it returned")
    assert s.sender("s", 2).started_at == first[-1]
    assert s.sender("s", 2).address == "127.0.0.1:2"


def test_a_new_incarnation_or_address_restarts_the_run(setup: Setup) -> None:
    s = setup
    s.subscribe("s", {0: None})
    first = wait_for(lambda: s.manager.runs().get(("q", "s")), what="a run")
    s.registry.set_live("q", "s", "127.0.0.1:1", None)  # registered again, same address
    second = wait_for(
        lambda: (r := s.manager.runs().get(("q", "s"))) is not first and r, what="a new run"
    )
    assert second.sub.incarnation != first.sub.incarnation
    s.registry.set_live("q", "s", "127.0.0.1:9", None)
    wait_for(lambda: s.sender("s", 0).address == "127.0.0.1:9", what="the new address")
    assert [x.running for x in s.senders] == [False, False, True]


def test_a_record_rewritten_by_someone_else_wins_over_the_workers(setup: Setup) -> None:
    s = setup
    rows = s.put(0, T0, 10)
    s.subscribe("s", {0: None})
    wait_for(lambda: s.checkpoint("s", 0) == rows[-1], what="the first checkpoint")
    # the record is rewritten with a new start (addSubscriber does this): the run goes on
    # until its next checkpoint write, which conflicts; the run then restarts from the record
    s.registry.update_record("q", "s", lambda old: SubscriberRecord([0], {0: rows[3]}))
    gevent.sleep(0.1)
    assert s.sender("s", 0).started_at is None  # noticed only at the next write
    more = s.put(0, T0 + 10, 1)
    wait_for(lambda: s.sender("s", 0).started_at == rows[3], what="a restart from the record")
    expected = rows + more + rows[4:] + more
    wait_for(lambda: s.delivered("s", 0) == expected, what="delivery again from there")
    wait_for(lambda: s.checkpoint("s", 0) == more[-1], what="the checkpoint moving on")


def test_deleted_subscribers_and_queues_end_their_runs(setup: Setup) -> None:
    s = setup
    s.subscribe("a", {0: None})
    s.subscribe("b", {1: None})
    wait_for(lambda: len(s.manager.runs()) == 2, what="two runs")
    s.registry.delete("q", "a")
    wait_for(lambda: list(s.manager.runs()) == [("q", "b")], what="a's run to end")
    assert s.registry.get("q", "a") is None  # its last flush did not bring it back
    s.store.delete_queue("q")  # no registry event: the periodic resync notices
    wait_for(lambda: not s.manager.runs(), timeout=5.0, what="b's run to end")
    s.manager.notify_put("q", [0, 1])  # nobody left to wake: no error


def test_a_failing_registry_read_is_retried(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    s = setup
    calls = {"n": 0}

    def flaky(real: Callable[..., Any]) -> Callable[..., Any]:
        def read(*args: Any) -> Any:
            calls["n"] += 1
            if calls["n"] == 1:
                raise OSError("registry unreachable")
            return real(*args)

        return read

    monkeypatch.setattr(s.registry, "get", flaky(s.registry.get))
    monkeypatch.setattr(s.registry, "list", flaky(s.registry.list))
    s.subscribe("s", {0: None})
    wait_for(lambda: s.manager.runs().get(("q", "s")), timeout=5.0, what="a run after retry")
    assert calls["n"] >= 2


@pytest.mark.parametrize("setup", [60.0], indirect=True)
def test_stop_writes_the_last_checkpoints(setup: Setup) -> None:
    s = setup
    rows = s.put(1, T0, 4)
    s.subscribe("s", {1: None})
    wait_for(lambda: s.delivered("s", 1) == rows, what="delivery")
    assert s.checkpoint("s", 1) is None  # not written yet
    s.manager.stop()
    assert s.checkpoint("s", 1) == rows[-1]
    assert not s.manager.runs()
    assert not any(x.running for x in s.senders)


# -- LeaseTable -----------------------------------------------------------------------------


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    now = [1000.0]
    monkeypatch.setattr(registry_module.time, "monotonic", lambda: now[0])
    return now


def test_leases_are_renewed_and_released_only_by_their_holder(clock: list[float]) -> None:
    ended: list[tuple[str, str, str]] = []
    table = LeaseTable(lambda q, n, i: ended.append((q, n, i)))
    first = table.grant("q", "s", "inc1", 10.0)
    other = table.grant("q", "t", "inc2", 10.0)
    assert other != first
    assert not table.renew("q", "s", other)  # someone else's id
    assert not table.renew("q", "missing", first)
    clock[0] += 9
    assert table.renew("q", "s", first)
    assert table.release("q", "s", other) is None
    again = table.grant("q", "s", "inc3", 5.0)  # registering again replaces the lease
    assert again != first and not table.renew("q", "s", first)
    released = table.release("q", "s", again)
    assert released is not None and released.incarnation == "inc3"
    assert not table.renew("q", "s", again)
    assert table.release("q", "t", None) is not None  # None: whatever lease it has
    table.grant("q", "u", "inc4", 1.0)
    table.drop_all()
    assert not ended


def test_expired_leases_are_reaped_and_reported(clock: list[float]) -> None:
    ended: list[tuple[str, str, str]] = []
    table = LeaseTable(lambda q, n, i: ended.append((q, n, i)))
    table.start()
    try:
        short = table.grant("q", "s", "inc1", 2.0)
        kept = table.grant("q", "t", "inc2", 2.0)
        clock[0] += 1.5
        assert table.renew("q", "t", kept)
        clock[0] += 1.0  # s is past its deadline, t was renewed in time
        wait_for(lambda: ended, timeout=3.0, what="the reaper")
        assert ended == [("q", "s", "inc1")]
        assert not table.renew("q", "s", short)
        assert table.renew("q", "t", kept)
    finally:
        table.stop()


def test_an_ended_lease_clears_only_its_own_incarnation(clock: list[float]) -> None:
    store = MemoryStore()
    registry = EmbeddedRegistry(store)
    registry.start(lambda q, n: None)
    try:
        registry.update_record("q", "s", lambda old: SubscriberRecord([0]))
        old = registry.set_live("q", "s", "127.0.0.1:1", None)
        registry.leases.grant("q", "s", old, 1.0)
        registry.set_live("q", "s", "127.0.0.1:2", None)  # re-registered elsewhere
        clock[0] += 2
        registry._lease_ended("q", "s", old)
        sub = registry.get("q", "s")
        assert sub is not None and sub.address == "127.0.0.1:2"  # the new one stays live
        lease = registry.leases.grant("q", "s", sub.incarnation or "", 1.0)
        clock[0] += 2
        wait_for(lambda: not (registry.get("q", "s") or sub).live, timeout=3.0, what="expiry")
        assert not registry.leases.renew("q", "s", lease)
    finally:
        registry.stop()
