"""Pulls and acks through any gateway of the cluster (gateway.cluster.pulls), with stand-ins
for the cluster membership, this gateway's workers and the hop to the other gateways."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import gevent
import gevent.event
import pytest
from hqueue.protocol import hqueue_thrift
from hqueue_contract.registry import SubscriberRecord

from gateway.cluster import pulls
from gateway.cluster.pulls import ClusterPulls
from gateway.errors import StoreError
from gateway.subscriptions.registry import Member, Subscriber

T = hqueue_thrift()
Q, S = "q", "grp"


def msg(p: int, seq: int) -> Any:
    return T.TMessage(T.TMessageID(1000, seq), p, b"t", f"{p}-{seq}".encode())


@dataclass
class Owners:
    """Gateway "me" owns the even partitions, "b" partitions 1 and 5, "c" partition 3."""

    gid: str = "me"
    owner: dict[int, str] = field(
        default_factory=lambda: {0: "me", 1: "b", 2: "me", 3: "c", 4: "me", 5: "b"}
    )

    def owns(self, queue: str, partition: int) -> bool:
        return self.owner[partition] == "me"

    def assigned_owner(self, queue: str, partition: int) -> str | None:
        return self.owner.get(partition)

    def address_of(self, gid: str | None) -> str | None:
        return {"me": "me:1", "b": "b:1", "c": "c:1"}.get(gid or "")


class World:
    """Remote gateways answer from their queues of messages, after an optional delay."""

    def __init__(self, members: list[str]) -> None:
        self.members = members
        self.local: list[Any] = []
        self.remote: dict[str, list[Any]] = {"b:1": [], "c:1": []}
        self.delay: dict[str, float] = {}
        self.down: set[str] = set()
        self.calls: list[tuple[str, str]] = []  # (address, method)
        self.acked_here: list[tuple[int, Any]] = []
        self.acked_at: dict[str, list[Any]] = {}
        self.arrived = gevent.event.Event()

    def subscriber(self, queue: str, name: str) -> Subscriber:
        record = SubscriberRecord(list(range(6)), shared=True)
        members = tuple(Member(m, None, None, "1") for m in self.members)
        return Subscriber(queue, name, record, 1, members=members)

    def local_pull(self, q: str, s: str, member: str, n: int, wait: float) -> list[Any]:
        deadline = time.monotonic() + wait
        while not self.local and time.monotonic() < deadline:
            gevent.sleep(0.01)
        out, self.local[:] = self.local[:n], self.local[n:]
        return out

    def local_ack(self, q: str, s: str, member: str, acks: list[Any]) -> list[int]:
        mine = [(p, i) for p, i in acks if p % 2 == 0]
        self.acked_here += mine
        return [p for p, _ in mine]

    def call(self, address: str, method: str, *args: Any) -> Any:
        self.calls.append((address, method))
        if address in self.down:
            raise StoreError(f"forwarding to the owner at {address} failed: refused")
        if method == "forwardAck":
            self.acked_at.setdefault(address, []).extend(
                (u.partitionID, (u.startMessageID.timestamp, u.startMessageID.sequenceID))
                for u in args[3]
            )
            return None
        assert method == "forwardPull"
        n, wait_ms = args[3], args[4]
        gevent.sleep(self.delay.get(address, 0))
        deadline = time.monotonic() + wait_ms / 1000
        box = self.remote[address]
        while not box and time.monotonic() < deadline:
            gevent.sleep(0.01)
        out, box[:] = box[:n], box[n:]
        return out

    def pulls(self) -> ClusterPulls:
        return ClusterPulls(
            Owners(),
            subscriber=self.subscriber,
            partitions=lambda q: 6,
            local_pull=self.local_pull,
            local_ack=self.local_ack,
            call=self.call,
            thrift=T,
        )


def test_only_the_owners_of_the_members_partitions_are_asked() -> None:
    # members a, b: a has partitions 0, 2, 4 (all here); b has 1, 3, 5 (owners b and c)
    world = World(["a", "b"])
    cp = world.pulls()
    assert cp.member_partitions(Q, S, "a") == [0, 2, 4]
    assert cp.remote_owners(Q, S, "a") == []
    assert cp.remote_owners(Q, S, "b") == ["b:1", "c:1"]
    assert cp.sources(Q, S, "b") == ["b:1", "c:1"]  # nothing of b's here: no local poll
    assert cp.sources(Q, S, "a") == [pulls.LOCAL]
    assert cp.sources(Q, S, "new") == [pulls.LOCAL]  # not a member yet: the local poll joins
    world.local.append(msg(0, 1))
    assert [m.value for m in cp.pull(Q, S, "a", 10, 1.0)] == [b"0-1"]
    assert world.calls == []  # nothing forwarded for a member served here only


def test_a_pull_gets_the_remote_owners_messages() -> None:
    world = World(["m"])  # one member: every partition
    cp = world.pulls()
    world.remote["b:1"] += [msg(1, 1), msg(5, 2)]
    got = cp.pull(Q, S, "m", 10, 2.0)
    assert sorted(m.value for m in got) == [b"1-1", b"5-2"]
    assert ("b:1", "forwardPull") in world.calls and ("c:1", "forwardPull") in world.calls


def test_a_late_answer_is_stashed_for_the_next_pull_and_polls_do_not_pile_up() -> None:
    world = World(["m"])
    cp = world.pulls()
    world.delay["c:1"] = 0.4  # c answers after the pull returned
    world.local.append(msg(0, 1))
    world.remote["c:1"].append(msg(3, 7))
    first = cp.pull(Q, S, "m", 10, 2.0)
    assert [m.value for m in first] == [b"0-1"]
    asked_c = world.calls.count(("c:1", "forwardPull"))
    assert asked_c == 1
    gevent.sleep(0.6)  # c's answer has arrived meanwhile: nobody was waiting for it
    assert cp.stashed(Q, S, "m") == 1
    second = cp.pull(Q, S, "m", 10, 2.0)
    assert [m.value for m in second] == [b"3-7"]  # first, without waiting for anything
    assert world.calls.count(("c:1", "forwardPull")) == asked_c  # not asked again meanwhile


def test_a_stash_larger_than_a_pull_is_handed_out_over_several_pulls() -> None:
    world = World(["m"])
    cp = world.pulls()
    world.remote["b:1"] += [msg(1, i) for i in range(5)]
    world.local += [msg(0, i) for i in range(5)]
    got: list[Any] = []
    for _ in range(6):
        got += cp.pull(Q, S, "m", 3, 0.5)
    assert sorted(m.value for m in got) == sorted(
        [f"0-{i}".encode() for i in range(5)] + [f"1-{i}".encode() for i in range(5)]
    )


def test_a_dead_owner_does_not_stop_the_others_and_is_asked_again_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(pulls, "ERROR_PAUSE", 0.2)
    world = World(["m"])
    world.down.add("b:1")
    cp = world.pulls()
    world.remote["c:1"].append(msg(3, 1))
    assert [m.value for m in cp.pull(Q, S, "m", 10, 1.0)] == [b"3-1"]
    gevent.sleep(0.3)
    world.down.clear()
    world.remote["b:1"].append(msg(1, 9))
    got: list[Any] = []
    deadline = time.monotonic() + 3
    while not got and time.monotonic() < deadline:
        got = cp.pull(Q, S, "m", 10, 0.5)
    assert [m.value for m in got] == [b"1-9"]
    assert world.calls.count(("b:1", "forwardPull")) >= 2


def test_max_wait_zero_still_collects_quick_answers() -> None:
    world = World(["m"])
    cp = world.pulls()
    world.remote["b:1"].append(msg(1, 1))
    assert [m.value for m in cp.pull(Q, S, "m", 10, 0.0)] == [b"1-1"]


def test_acks_go_to_the_workers_here_and_to_each_owner() -> None:
    world = World(["m"])
    world.down.add("c:1")
    cp = world.pulls()
    acks = [(0, (1000, 1)), (1, (1000, 2)), (3, (1000, 3)), (4, (1000, 4)), (5, (1000, 5))]
    cp.ack(Q, S, "m", acks)  # c is down: its ack is dropped (redelivered), no error
    assert world.acked_here == [(0, (1000, 1)), (4, (1000, 4))]
    assert world.acked_at == {"b:1": [(1, (1000, 2)), (5, (1000, 5))]}
    assert ("c:1", "forwardAck") in world.calls
