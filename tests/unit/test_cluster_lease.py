"""The write lease, the ID ceiling and the namespace guard, in-process (no ZooKeeper, no HBase)."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hqueue.toolkit.display import format_gateways, ranges

from gateway.cluster import exclusive
from gateway.cluster.exclusive import NamespaceLease, NamespaceTaken
from gateway.cluster.lease import WriteLease
from gateway.errors import StoreError
from gateway.ids import wall_clock_ms


def test_a_lease_never_confirmed_refuses_writes() -> None:
    with pytest.raises(StoreError, match="lease expired"):
        WriteLease(10.0).check()


def test_a_lease_lasts_a_fraction_of_the_session_from_when_the_heartbeat_was_sent() -> None:
    lease = WriteLease(10.0, fraction=0.5)
    sent = time.monotonic() - 4.9  # a heartbeat sent 4.9 s ago, answered just now
    lease.confirmed(sent, ceiling_ms=1)
    lease.check()
    assert 0 < lease.remaining() <= 0.1
    lease.confirmed(time.monotonic() - 5.1, ceiling_ms=1)  # older answers never shorten it
    lease.check()
    lease2 = WriteLease(10.0, fraction=0.5)
    lease2.confirmed(time.monotonic() - 5.01, ceiling_ms=1)
    with pytest.raises(StoreError):
        lease2.check()


def test_revoke_stops_writes_at_once() -> None:
    lease = WriteLease(10.0)
    lease.confirmed(time.monotonic(), 1)
    lease.revoke()
    with pytest.raises(StoreError):
        lease.check()


def test_ids_stay_below_the_recorded_ceiling() -> None:
    lease = WriteLease(10.0)
    lease.confirmed(time.monotonic(), ceiling_ms=1000)
    lease.check_id(999)
    with pytest.raises(StoreError, match="ceiling"):
        lease.check_id(1000)
    lease.confirmed(time.monotonic(), ceiling_ms=500)  # a ceiling never goes down
    lease.check_id(999)


@pytest.mark.parametrize("fraction", [0, 1, 1.5])
def test_the_fraction_must_leave_room_before_the_session_ends(fraction: float) -> None:
    with pytest.raises(ValueError, match="fraction"):
        WriteLease(10.0, fraction=fraction)


class FakeMeta:
    """The ``\\x02gateway`` cell of hqueue_meta with HBase's check-and-put semantics."""

    def __init__(self) -> None:
        self.cell: bytes | None = None
        self.swaps = 0

    def gateway_lease(self) -> bytes | None:
        return self.cell

    def swap_gateway_lease(self, expected: bytes | None, value: bytes) -> bool:
        if self.cell != expected:
            return False
        self.cell = value
        self.swaps += 1
        return True


def lease(meta: Any, mode: str = "single", advertise: str = "a:1", **kw: Any) -> NamespaceLease:
    return NamespaceLease(meta, mode=mode, advertise=advertise, namespace="ns", **kw)


def test_a_second_lone_gateway_is_refused_and_told_to_use_zookeeper() -> None:
    meta = FakeMeta()
    lease(meta).acquire()
    with pytest.raises(NamespaceTaken, match="--zookeeper"):
        lease(meta, advertise="b:2").acquire()


def test_the_same_gateway_restarting_on_its_address_takes_its_lease_over() -> None:
    meta = FakeMeta()
    lease(meta).acquire()
    lease(meta).acquire()  # a new process on a:1 after kill -9


def test_an_expired_lease_is_free() -> None:
    meta = FakeMeta()
    meta.cell = json.dumps(
        {"mode": "single", "holder": "x", "advertise": "b:2", "expires_ms": wall_clock_ms() - 1}
    ).encode()
    lease(meta).acquire()
    assert json.loads(meta.cell or b"")["advertise"] == "a:1"


def test_cluster_and_lone_gateways_refuse_each_other() -> None:
    meta = FakeMeta()
    lease(meta, "cluster", zookeeper="zk:2181/x").acquire()
    lease(meta, "cluster", advertise="b:2", zookeeper="zk:2181/x").acquire()  # a member
    with pytest.raises(NamespaceTaken, match="--zookeeper zk:2181/x"):
        lease(meta, advertise="c:3").acquire()
    meta2 = FakeMeta()
    lease(meta2).acquire()
    with pytest.raises(NamespaceTaken, match="without ZooKeeper"):
        lease(meta2, "cluster", advertise="b:2").acquire()


def test_a_lone_gateway_whose_lease_was_taken_stops_writing() -> None:
    meta = FakeMeta()
    mine = lease(meta)
    mine.acquire()
    meta.cell = b'{"mode": "single", "advertise": "b:2", "expires_ms": 0}'  # taken meanwhile
    with pytest.raises(NamespaceTaken):
        mine.renew()
    with pytest.raises(StoreError, match="lost its exclusive lease"):
        mine.check()


class LostAnswerMeta(FakeMeta):
    """HBase restarting: the next swap is applied, but its answer never arrives."""

    lose_next = False

    def swap_gateway_lease(self, expected: bytes | None, value: bytes) -> bool:
        swapped = super().swap_gateway_lease(expected, value)
        if self.lose_next:
            self.lose_next = False
            raise StoreError("HBase Thrift at 127.0.0.1:9090: timed out")
        return swapped


@pytest.mark.parametrize("mode", ["single", "cluster"])
def test_a_renewal_whose_answer_was_lost_does_not_lose_the_lease(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The CI run of 2026-12-06 03:58: a lone gateway's renewal timed out while HBase
    restarted, HBase had applied it, and the next renewal took the gateway's own value for
    another gateway's and stopped writing ("another gateway took namespace ... (single mode,
    <its own address>)")."""
    clock = iter(range(wall_clock_ms(), wall_clock_ms() + 10**9, 10_000))  # 10 s per call
    monkeypatch.setattr(exclusive, "wall_clock_ms", lambda: next(clock))
    meta = LostAnswerMeta()
    mine = lease(meta, mode)
    mine.acquire()
    meta.lose_next = True
    with pytest.raises(StoreError, match="timed out"):
        mine.renew()
    mine.renew()  # finds its own value there and carries on
    mine.check()
    assert json.loads(meta.cell or b"")["holder"] == mine.holder
    with pytest.raises(NamespaceTaken, match="--zookeeper"):
        lease(meta, advertise="b:2").acquire()  # still held


def test_a_clean_stop_frees_the_namespace() -> None:
    meta = FakeMeta()
    first = lease(meta)
    first.acquire()
    first.stop()
    lease(meta, advertise="b:2").acquire()


def test_gateways_are_listed_with_their_partitions_as_ranges() -> None:
    assert ranges([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"

    class G:
        def __init__(self, address: bytes, leader: bool, parts: dict[bytes, list[int]]) -> None:
            self.address, self.gatewayID, self.leader = address, "id", leader
            self.partitionsOwned = sum(len(p) for p in parts.values())
            self.putRate, self.partitions = 12.4, parts

    text = format_gateways([G(b"h:1", True, {b"q": [0, 1, 2]}), G(b"h:2", False, {})])
    lines = text.splitlines()
    assert lines[0].split()[:5] == ["GATEWAY", "ID", "ROLE", "PARTITIONS", "PUTS/S"]
    assert lines[1].split() == ["h:1", "id", "leader", "3", "12", "q:0-2"]
    assert lines[2].split() == ["h:2", "id", "member", "0", "12", "-"]
