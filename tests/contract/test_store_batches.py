"""The store contract where a store keeps a put's messages together (the embedded store's
records, gateway/store/embedded/records.py): reads that start, stop or filter inside one put
see exactly the messages a store of one row per message shows. Run over every backend, so
the memory store is the reference."""

from __future__ import annotations

import pytest

from gateway import rowkey
from gateway.rowkey import MessageId
from gateway.store.base import PartitionStore, PutBatch, Row
from gateway.store.embedded.records import MAX_RECORD_MESSAGES

from .test_store_contract import T0, new_queue, read
from .test_store_contract import backend as backend  # the fixture, over every store


def put_from(
    store: PartitionStore, meta: object, partition: int, first: MessageId, count: int,
    topics: tuple[bytes, ...] = (b"t",),
) -> list[Row]:  # fmt: skip
    tops = [topics[i % len(topics)] for i in range(count)]
    values = [b"%d:%d" % (first.timestamp, i) for i in range(count)]
    store.put(meta, [PutBatch(partition, first, tops, values)])  # type: ignore[arg-type]
    ids = rowkey.consecutive_ids(first.timestamp, first.sequence, count)
    return [(ts, seq, t, v) for (ts, seq), t, v in zip(ids, tops, values, strict=True)]


@pytest.mark.parametrize("reverse", [False, True])
def test_a_read_may_start_at_any_message_of_a_put(backend: PartitionStore, reverse: bool) -> None:
    meta = new_queue(backend, 2)
    # one put across a millisecond (the sequence carries), between two others
    rows = put_from(backend, meta, 0, MessageId(T0, 0), 3)
    rows += put_from(backend, meta, 0, MessageId(T0 + 1, rowkey.MAX_SEQUENCE - 20), 40,
                     topics=(b"a", b"b", b"c"))  # fmt: skip
    rows += put_from(backend, meta, 0, MessageId(T0 + 3, 0), 3)
    put_from(backend, meta, 1, MessageId(T0 + 1, 0), 5)  # another partition stays apart
    order = rows[::-1] if reverse else rows
    for i, row in enumerate(order):
        after = MessageId(row[0], row[1])
        assert read(backend, meta, 0, after=after, reverse=reverse) == order[i + 1 :]
        assert read(backend, meta, 0, after=after, reverse=reverse, limit=3) == order[i + 1 :]
        # a stop inside the put too
        for j in (i + 1, i + 7, len(order) - 1):
            if j < len(order):
                stop = MessageId(order[j][0], order[j][1])
                got = read(backend, meta, 0, after=after, stop=stop, reverse=reverse, limit=4)
                assert got == order[i + 1 : j]
        wanted = frozenset({b"b"})
        assert read(backend, meta, 0, after=after, reverse=reverse, topics=wanted, limit=2) == [
            r for r in order[i + 1 :] if r[2] == b"b"
        ]


def test_a_put_larger_than_a_record_reads_whole(backend: PartitionStore) -> None:
    meta = new_queue(backend, 1)
    count = 2 * MAX_RECORD_MESSAGES + 5
    rows = put_from(backend, meta, 0, MessageId(T0, 100), count, topics=(b"x", b"y"))
    assert backend.last_id(meta, 0) == MessageId(rows[-1][0], rows[-1][1])
    assert read(backend, meta, 0, limit=1000) == rows
    assert read(backend, meta, 0, reverse=True, limit=999) == rows[::-1]
    # starting right at the edges of the records
    for edge in (MAX_RECORD_MESSAGES - 1, MAX_RECORD_MESSAGES, 2 * MAX_RECORD_MESSAGES):
        after = MessageId(rows[edge][0], rows[edge][1])
        assert read(backend, meta, 0, after=after, limit=2000) == rows[edge + 1 :]
        got = read(backend, meta, 0, after=after, reverse=True, limit=2000)
        assert got == rows[:edge][::-1]
    assert read(backend, meta, 0, topics=frozenset({b"y"}), limit=500) == rows[1::2]
