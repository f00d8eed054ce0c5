"""What only the memory store does (the rest is in tests/contract/): TTL applied by the store
itself on read, expired rows reclaimed on put, and its own argument checks."""

from __future__ import annotations

import pytest

from gateway import rowkey
from gateway.errors import InvalidArgument
from gateway.ids import wall_clock_ms
from gateway.rowkey import MessageId
from gateway.store.base import PutBatch, QueueMeta
from gateway.store.memory import MemoryStore

HOUR_MS = 3600 * 1000


def put(store: MemoryStore, meta: QueueMeta, partition: int, ts: int, count: int) -> None:
    store.put(meta, [PutBatch(partition, MessageId(ts, 0), [b"t"] * count, [b"v"] * count)])


def scan_all(store: MemoryStore, meta: QueueMeta, partition: int) -> list[tuple[int, int]]:
    r = store.reader(meta, partition, None, None, reverse=False, topics=None).read(10_000)
    assert r.done
    return [(ts, seq) for ts, seq, _, _ in r.rows]


def test_a_scan_hides_expired_rows_by_itself() -> None:
    store = MemoryStore()
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    now = wall_clock_ms()
    put(store, meta, 0, now - 2 * HOUR_MS, 3)
    put(store, meta, 0, now - 1000, 2)
    assert scan_all(store, meta, 0) == [(now - 1000, 0), (now - 1000, 1)]


def test_a_put_reclaims_expired_rows_but_keeps_the_newest() -> None:
    store = MemoryStore()
    meta = store.create_queue(QueueMeta("q", 2, 3600))
    now = wall_clock_ms()
    put(store, meta, 0, now - 3 * HOUR_MS, 5)
    put(store, meta, 0, now - 2 * HOUR_MS, 5)
    rows = store._partitions["q"][0]
    assert len(rows.keys) == 1  # all expired: only the newest stays, for last_id
    assert store.last_id(meta, 0) == MessageId(now - 2 * HOUR_MS, 4)
    put(store, meta, 0, now - 1000, 3)
    assert len(rows.keys) == 3 and scan_all(store, meta, 0)[0] == (now - 1000, 0)


def test_putting_a_key_again_replaces_its_row_and_order_holds() -> None:
    store = MemoryStore()
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    ts = wall_clock_ms()
    store.put(meta, [PutBatch(0, MessageId(ts, s), [b"a"], [v]) for s, v in
                     ((5, b"1"), (1, b"2"), (3, b"3"))])  # fmt: skip
    store.put(meta, [PutBatch(0, MessageId(ts, 3), [b"b"], [b"new"])])
    r = store.reader(meta, 0, None, None, reverse=False, topics=None).read(10)
    assert r.rows == [(ts, 1, b"a", b"2"), (ts, 3, b"b", b"new"), (ts, 5, b"a", b"1")]


def test_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="max_examined"):
        MemoryStore(max_examined=0)
    store = MemoryStore()
    meta = store.create_queue(QueueMeta("q", 2, 60))
    with pytest.raises(InvalidArgument) as err:
        store.reader(meta, 2, None, None, reverse=False, topics=None).read(1)
    assert err.value.argument == "partitionID"
    with pytest.raises(ValueError, match="limit"):
        store.reader(meta, 0, None, None, reverse=False, topics=None).read(0)
    # a put fails as a whole: nothing of partition 0 is written when partition 5 is refused
    good = PutBatch(0, MessageId(wall_clock_ms(), 0), [b"t"], [b"v"])
    bad = PutBatch(5, MessageId(wall_clock_ms(), 0), [b"t"], [b"v"])
    with pytest.raises(InvalidArgument):
        store.put(meta, [good, bad])
    assert store.last_id(meta, 0) is None


def test_stale_metadata_is_refused() -> None:
    store = MemoryStore()
    old = store.create_queue(QueueMeta("q", 1, 60))
    new = store.truncate_queue("q")
    for meta in (old, QueueMeta("other", 1, 60)):
        with pytest.raises(InvalidArgument, match="truncated or deleted"):
            store.last_id(meta, 0)
    assert store.last_id(new, 0) is None


def test_a_scan_stops_once_its_rows_hold_max_bytes() -> None:
    store = MemoryStore()
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    ts = wall_clock_ms()
    keys = rowkey.consecutive_keys(0, ts, 0, 5)
    keys = rowkey.consecutive_keys(0, ts, 0, 5)
    store.put(meta, [PutBatch(0, MessageId(ts, 0), [b"t"] * 5, [b"x" * 99] * 5)])  # 100 bytes a row
    reader = store.reader(meta, 0, None, None, reverse=False, topics=None)
    r = reader.read(10, 200)
    assert (len(r.rows), r.size, r.done) == (2, 200, False)
    r = reader.read(10, 1)
    assert len(r.rows) == 1 and r.rows[0][:2] == rowkey.decode(keys[2])[1:]  # at least one


def test_the_gateway_opens_it_and_never_clusters_it() -> None:
    from gateway.app import GatewayConfig, open_store

    assert isinstance(open_store(GatewayConfig(store="memory")), MemoryStore)
    # each process has its own memory: ZooKeeper only keeps the subscription registry
    assert not GatewayConfig(store="memory", zookeeper="127.0.0.1:1").clustered
