"""The embedded store keeps a put's messages as records (gateway/store/embedded/records.py):
what RocksDB holds, the TTL sweep at a record that straddles the cutoff, rows written before
records read beside them, last_id after a restart, and the format mark in the metadata."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from rocksdict import WriteBatch

from gateway import rowkey
from gateway.errors import StoreError
from gateway.ids import wall_clock_ms
from gateway.rowkey import MAX_SEQUENCE, MessageId
from gateway.store.base import PutBatch, QueueMeta, Row
from gateway.store.embedded import EmbeddedStore, records

T0 = wall_clock_ms() - 60_000


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EmbeddedStore]:
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        yield s
    finally:
        s.stop()


def entries(s: EmbeddedStore, meta: QueueMeta, partition: int) -> list[tuple[bytes, bytes]]:
    """What RocksDB holds for ``partition``: (key, value) of each entry."""
    _, (cf, _) = s._family(meta, partition)
    start, end = rowkey.partition_start(partition), rowkey.partition_end(partition)
    out = []
    for key, value in cf.items(from_key=start):
        if key >= end:
            break
        out.append((key, value))
    return out


def read(s: EmbeddedStore, meta: QueueMeta, partition: int, after: MessageId | None = None,
         reverse: bool = False, limit: int = 7) -> list[Row]:  # fmt: skip
    reader = s.reader(meta, partition, after, None, reverse=reverse, topics=None)
    out: list[Row] = []
    while True:
        r = reader.read(limit)
        out += r.rows
        if r.done:
            reader.close()
            return out


def put(s: EmbeddedStore, meta: QueueMeta, first: MessageId, values: list[bytes]) -> list[Row]:
    s.put(meta, [PutBatch(0, first, [b"t"] * len(values), values)])
    ids = rowkey.consecutive_ids(first.timestamp, first.sequence, len(values))
    return [(ts, seq, b"t", v) for (ts, seq), v in zip(ids, values, strict=True)]


def test_a_put_is_one_entry_up_to_the_caps(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    rows = put(store, meta, MessageId(T0, 0), [b"%d" % i for i in range(1000)])
    assert [k for k, _ in entries(store, meta, 0)] == [rowkey.encode(0, T0, 0)]
    # past the message cap: several records, each keyed by its first message
    n = records.MAX_RECORD_MESSAGES
    rows += put(store, meta, MessageId(T0 + 1, 0), [b"x"] * (2 * n + 1))
    keys = [k for k, _ in entries(store, meta, 0)]
    firsts = [rowkey.nth_id(MessageId(T0 + 1, 0), i) for i in (0, n, 2 * n)]
    assert keys[1:] == [rowkey.id_key(0, m) for m in firsts]
    # past the byte cap: a message larger than it makes a record of its own
    big = records.MAX_RECORD_BYTES
    rows += put(store, meta, MessageId(T0 + 2, 0), [b"a" * (big // 2), b"b" * big, b"c", b"d"])
    assert len(entries(store, meta, 0)) == 4 + 3
    assert all(records.is_record(v) for _, v in entries(store, meta, 0))
    assert read(store, meta, 0, limit=1000) == rows
    assert read(store, meta, 0, reverse=True, limit=1000) == rows[::-1]
    # the log's checkpoints count RocksDB entries (records), not messages
    assert store._rows == {"q@1#0": 1 + 3 + 3}


def test_the_ttl_sweep_keeps_a_record_that_straddles_the_cutoff(store: EmbeddedStore) -> None:
    meta = store.create_queue(QueueMeta("q", 1, 3600))
    cutoff = T0  # what the sweep below takes as the TTL's edge
    old = put(store, meta, MessageId(cutoff - 5, 0), [b"old"] * 3)
    # ids (cutoff - 1, 32765..32767), (cutoff, 0..2): three expired, three not
    straddling = put(
        store, meta, MessageId(cutoff - 1, MAX_SEQUENCE - 2), [b"s%d" % i for i in range(6)]
    )
    young = put(store, meta, MessageId(cutoff + 1, 0), [b"new"])
    assert store.sweep_expired(now_ms=cutoff + 3600_000) == 1
    assert [k for k, _ in entries(store, meta, 0)] == [
        rowkey.encode(0, cutoff - 1, MAX_SEQUENCE - 2),
        rowkey.encode(0, cutoff + 1, 0),
    ]
    forever = meta.with_changes(ttl_seconds=2**40)  # readers apply the TTL themselves
    assert read(store, forever, 0) == straddling + young
    assert old  # gone, and a later sweep takes the straddling record whole
    assert store.sweep_expired(now_ms=cutoff + 3600_000 + 1) == 1
    assert read(store, forever, 0) == young
    # a sweep that finds the first record straddling deletes nothing
    put(store, meta, MessageId(cutoff + 2, MAX_SEQUENCE - 1), [b"a", b"b", b"c"])
    store.sweep_expired(now_ms=cutoff + 2 + 3600_000)
    assert store.sweep_expired(now_ms=cutoff + 3 + 3600_000) == 0
    assert len(read(store, forever, 0)) == 3


def test_rows_written_before_records_read_beside_them(tmp_path: Path) -> None:
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta = s.create_queue(QueueMeta("q", 1, 3600))
        _, (_, handle) = s._family(meta, 0)

        def rows_of_old(ts: int, count: int) -> list[Row]:  # one entry per message, as before
            batch = WriteBatch(raw_mode=True)
            out: list[Row] = []
            for i in range(count):
                batch.put(rowkey.encode(0, ts, i), rowkey.encode_cell(b"o", b"%d" % i), handle)
                out.append((ts, i, b"o", b"%d" % i))
            s._db_required().write(batch)
            return out

        want = rows_of_old(T0, 5)
        want += put(s, meta, MessageId(T0 + 1, 0), [b"r%d" % i for i in range(9)])
        want += rows_of_old(T0 + 2, 4)
        want += put(s, meta, MessageId(T0 + 3, 0), [b"q%d" % i for i in range(6)])
        for reverse in (False, True):
            order = want[::-1] if reverse else want
            for i, row in enumerate(order):
                after = MessageId(row[0], row[1])
                assert read(s, meta, 0, after, reverse, limit=4) == order[i + 1 :]
        assert s.last_id(meta, 0) == MessageId(T0 + 3, 5)
        rows_of_old(T0 + 4, 2)  # the newest entry a row
        assert s.last_id(meta, 0) == MessageId(T0 + 4, 1)
    finally:
        s.stop()


def test_last_id_after_a_restart_is_the_last_message_of_the_last_record(tmp_path: Path) -> None:
    s = EmbeddedStore(tmp_path)
    s.start()
    meta = s.create_queue(QueueMeta("q", 2, 3600))
    put(s, meta, MessageId(T0, MAX_SEQUENCE - 2), [b"v"] * 10)  # carries into T0 + 1
    s.stop()
    s = EmbeddedStore(tmp_path)
    s.start()
    try:
        meta2 = s.get_queue("q")
        assert meta2 is not None
        assert s.last_id(meta2, 0) == MessageId(T0 + 1, 6)
        assert s.last_id(meta2, 1) is None
    finally:
        s.stop()


def test_the_store_marks_its_format_and_refuses_a_newer_one(tmp_path: Path) -> None:
    s = EmbeddedStore(tmp_path)
    s.start()
    db = s._db_required()
    assert db.get(records.FORMAT_KEY) == str(records.STORE_FORMAT).encode()
    db.put(records.FORMAT_KEY, str(records.STORE_FORMAT + 1).encode())
    s.stop()
    with pytest.raises(StoreError, match="newer gateway"):
        EmbeddedStore(tmp_path).start()
